/* test_pipeline.c: pipeline parallelism: the schedules' action orders (lua/vrsim/pp_schedules.lua)
 * against the orders torch.distributed.pipelining runs, as validation/pp_schedules/capture_orders.py
 * recorded them in tests/data/pp_schedule_orders.tsv (torch is not needed here); and the step
 * those orders make (sim/pipeline.c) against the schedules' known timings: with equal stages,
 * GPipe and 1F1B take (m + p - 1)(f + b) and idle (p - 1) / (m + p - 1) of it (GPipe's paper,
 * Huang et al. 2019; Narayanan et al. 2021, section 2.2).
 *
 * The schedules are Lua: the test loads lua/vrsim/pp_schedules.lua from the source tree into a
 * bare Lua state (run from the repository root, as make test does). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "pipeline.h"

#define ORDERS "tests/data/pp_schedule_orders.tsv"
#define SCHEDULES "lua/vrsim/pp_schedules.lua"

/* A Lua state holding the schedules module at global `S`. */
static lua_State *schedules_state(void) {
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    luaL_openlibs(L);
    if (luaL_dofile(L, SCHEDULES) != LUA_OK) fail_msg("%s: %s", SCHEDULES, lua_tostring(L, -1));
    lua_setglobal(L, "S");
    return L;
}

/* S.line(name, pp, m, v, rank) into out; false with the error message there when it raises. */
static bool order_line(lua_State *L, const char *name, int pp, int m, int v, int rank, char *out,
                       size_t n) {
    lua_getglobal(L, "S");
    lua_getfield(L, -1, "line");
    lua_pushstring(L, name);
    lua_pushinteger(L, pp);
    lua_pushinteger(L, m);
    lua_pushinteger(L, v);
    lua_pushinteger(L, rank);
    int rc = lua_pcall(L, 5, 1, 0);
    snprintf(out, n, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(nil)");
    lua_pop(L, 2);
    return rc == LUA_OK;
}

/* Every rank of every captured (schedule, pp, microbatches, virtual) case runs torch's order. */
static void test_orders_match_torch(void **state) {
    (void)state;
    lua_State *L = schedules_state();
    FILE *f = fopen(ORDERS, "r");
    assert_non_null(f);
    char line[8192], got[8192];
    int rows = 0;
    char seen[4][64] = {{0}};
    int n_seen = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || strncmp(line, "schedule\t", 9) == 0) continue;
        line[strcspn(line, "\n")] = 0;
        char name[64];
        int pp, m, v, rank, used = 0;
        assert_int_equal(sscanf(line, "%63[^\t]\t%d\t%d\t%d\t%d\t%n", name, &pp, &m, &v, &rank, &used), 5);
        const char *want = line + used;
        if (!order_line(L, name, pp, m, v, rank, got, sizeof got))
            fail_msg("%s pp=%d m=%d v=%d rank %d: %s", name, pp, m, v, rank, got);
        if (strcmp(got, want) != 0)
            fail_msg("%s pp=%d m=%d v=%d rank %d:\n  torch: %s\n  vrsim: %s", name, pp, m, v, rank, want, got);
        rows++;
        bool known = false;
        for (int i = 0; i < n_seen; i++) known |= strcmp(seen[i], name) == 0;
        if (!known && n_seen < 4) snprintf(seen[n_seen++], sizeof seen[0], "%s", name);
    }
    fclose(f);
    lua_close(L);
    assert_true(rows >= 40);
    assert_int_equal(n_seen, 4); /* GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble */
}

/* What torch's constructors refuse is refused with their reason. */
static void test_refused_as_torch_refuses(void **state) {
    (void)state;
    lua_State *L = schedules_state();
    char got[1024];
    assert_false(order_line(L, "1F1B", 4, 2, 1, 0, got, sizeof got));
    assert_non_null(strstr(got, "Number of microbatches (2) must be greater than or equal to the number of stages (4)"));
    assert_false(order_line(L, "Interleaved1F1B", 4, 9, 2, 0, got, sizeof got));
    assert_non_null(strstr(got, "multiple of the number of rounds (2)"));
    assert_false(order_line(L, "ZBVZeroBubble", 4, 8, 2, 0, got, sizeof got));
    assert_non_null(strstr(got, "not modelled"));
    assert_false(order_line(L, "1F1B", 4, 8, 2, 0, got, sizeof got));
    assert_false(order_line(L, "Interleaved1F1B", 4, 8, 1, 0, got, sizeof got));
    lua_close(L);
}


/* The orders of schedule `name` for every rank, parsed from the Lua module's strings into
 * acts[r] (cap entries each); n[r] their counts. */
static void orders_of(lua_State *L, const char *name, int pp, int m, int v, PpAction acts[][64], int *n) {
    char line[4096];
    for (int r = 0; r < pp; r++) {
        if (!order_line(L, name, pp, m, v, r, line, sizeof line)) fail_msg("%s", line);
        n[r] = 0;
        for (char *tok = strtok(line, " "); tok; tok = strtok(NULL, " ")) {
            int st, mb;
            char k;
            assert_int_equal(sscanf(tok, "%d%c%d", &st, &k, &mb), 3);
            assert_true(n[r] < 64);
            acts[r][n[r]++] = (PpAction){.stage = st, .mb = mb,
                                         .kind = k == 'F' ? PP_F : k == 'B' ? PP_B : k == 'I' ? PP_I : PP_W};
        }
    }
}

/* Composes the orders with every stage's F taking f ns, B (or I + W) b ns, and transfers of
 * `bytes` over a link of latency lat ns at 1 GB/s. */
static VrStatus compose(PpAction acts[][64], int *n, int pp, int stages, int m, double f, double b,
                        double lat, double bytes, PipelineResult *res, double *end, double *busy,
                        char *err, size_t errlen) {
    const PpAction *order[8];
    double ns[32 * PP_KINDS], sb[32];
    for (int r = 0; r < pp; r++) order[r] = acts[r];
    for (int st = 0; st < stages; st++) {
        ns[st * PP_KINDS + PP_F] = f;
        ns[st * PP_KINDS + PP_B] = b;
        ns[st * PP_KINDS + PP_I] = b / 2;
        ns[st * PP_KINDS + PP_W] = b / 2;
        sb[st] = bytes;
    }
    PipelineSpec spec = {.ranks = pp, .stages = stages, .microbatches = m, .order = order,
                         .n_order = n, .action_ns = ns, .send_bytes = sb,
                         .link = {.latency_ns = lat, .bus_bw = 1e9}};
    return pipeline_compose(&spec, res, end, busy, err, errlen);
}

/* GPipe and 1F1B on equal stages with free transfers: (m + p - 1)(f + b), bubble (p-1)/(m+p-1). */
static void test_gpipe_and_1f1b_span(void **state) {
    (void)state;
    lua_State *L = schedules_state();
    const char *names[2] = {"GPipe", "1F1B"};
    const int cases[3][2] = {{4, 8}, {2, 4}, {8, 16}};
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 3; c++) {
            int pp = cases[c][0], m = cases[c][1];
            PpAction acts[8][64];
            int n[8];
            orders_of(L, names[i], pp, m, 1, acts, n);
            PipelineResult res;
            double end[8], busy[8];
            char err[256];
            assert_int_equal(compose(acts, n, pp, pp, m, 10, 20, 0, 0, &res, end, busy, err, sizeof err), VR_OK);
            assert_float_equal(res.span_ns, (m + pp - 1) * 30.0, 1e-9);
            assert_float_equal(res.bubble, (pp - 1.0) / (m + pp - 1.0), 1e-12);
            for (int r = 0; r < pp; r++) assert_float_equal(busy[r], m * 30.0, 1e-9);
        }
    lua_close(L);
}

/* One micro-batch over two ranks: F0, send, F1, B1, send back, B0 (latency 100 ns + 1000 bytes
 * at 1 GB/s = 1100 ns each way); the rest after the last action ends the step. */
static void test_transfers_on_the_link(void **state) {
    (void)state;
    PpAction acts[2][64] = {{{0, PP_F, 0, 0}, {0, PP_B, 0, 0}}, {{1, PP_F, 0, 0}, {1, PP_B, 0, 0}}};
    int n[2] = {2, 2};
    PipelineResult res;
    double end[2], busy[2];
    char err[256];
    assert_int_equal(compose(acts, n, 2, 2, 1, 10, 20, 100, 1000, &res, end, busy, err, sizeof err), VR_OK);
    assert_float_equal(end[1], 10 + 1100 + 10 + 20, 1e-9);
    assert_float_equal(end[0], end[1] + 1100 + 20, 1e-9);
    assert_float_equal(res.send_ns, 1100, 1e-9);
    assert_float_equal(res.step_ns, end[0], 1e-9);
}

/* Megatron's variable_seq_lengths: each transfer is preceded by its shape's exchange (24 bytes:
 * 100 + 24 ns at 1 GB/s), so each way takes 1100 + 124 ns; the lockstep composition alike. */
static void test_shape_exchange_before_each_transfer(void **state) {
    (void)state;
    /* (the time steps of the lockstep composition: F0, F1, B1, B0) */
    PpAction acts[2][64] = {{{0, PP_F, 0, 0}, {0, PP_B, 0, 3}}, {{1, PP_F, 0, 1}, {1, PP_B, 0, 2}}};
    int n[2] = {2, 2};
    const PpAction *order[2] = {acts[0], acts[1]};
    double ns[2 * PP_KINDS] = {0}, sb[2] = {1000, 1000};
    for (int st = 0; st < 2; st++) ns[st * PP_KINDS + PP_F] = 10, ns[st * PP_KINDS + PP_B] = 20;
    for (int lockstep = 0; lockstep < 2; lockstep++) {
        PipelineSpec spec = {.ranks = 2, .stages = 2, .microbatches = 1, .order = order, .n_order = n,
                             .action_ns = ns, .send_bytes = sb, .link = {.latency_ns = 100, .bus_bw = 1e9},
                             .shape_bytes = 24, .lockstep = lockstep};
        PipelineResult res;
        double end[2], busy[2];
        char err[256];
        assert_int_equal(pipeline_compose(&spec, &res, end, busy, err, sizeof err), VR_OK);
        assert_float_equal(res.send_ns, 1224, 1e-9);
        if (!lockstep) {
            assert_float_equal(end[1], 10 + 1224 + 10 + 20, 1e-9);
            assert_float_equal(end[0], end[1] + 1224 + 20, 1e-9);
        }
        spec.shape_bytes = 0;
        PipelineResult none;
        assert_int_equal(pipeline_compose(&spec, &none, end, busy, err, sizeof err), VR_OK);
        assert_float_equal(res.step_ns - none.step_ns, 2 * 124, 1e-9);
    }
}

/* Interleaved1F1B on equal stages takes less than 1F1B with the same work per rank; the zero
 * bubble one less again (its W fills the waits). */
static void test_interleaved_shrinks_the_bubble(void **state) {
    (void)state;
    lua_State *L = schedules_state();
    PpAction acts[8][64];
    int n[8];
    PipelineResult one, inter, zb;
    double end[8], busy[8];
    char err[256];
    orders_of(L, "1F1B", 4, 8, 1, acts, n);
    assert_int_equal(compose(acts, n, 4, 4, 8, 20, 40, 0, 0, &one, end, busy, err, sizeof err), VR_OK);
    orders_of(L, "Interleaved1F1B", 4, 8, 2, acts, n);
    assert_int_equal(compose(acts, n, 4, 8, 8, 10, 20, 0, 0, &inter, end, busy, err, sizeof err), VR_OK);
    for (int r = 0; r < 4; r++) assert_float_equal(busy[r], 8 * 60.0, 1e-9);
    orders_of(L, "InterleavedZeroBubble", 4, 8, 2, acts, n);
    assert_int_equal(compose(acts, n, 4, 8, 8, 10, 20, 0, 0, &zb, end, busy, err, sizeof err), VR_OK);
    assert_true(inter.span_ns < one.span_ns);
    assert_true(zb.span_ns < inter.span_ns);
    assert_true(zb.bubble < inter.bubble && inter.bubble < one.bubble);
    lua_close(L);
}

/* The interleaved schedules' time steps: torch's pipeline_order keeps idle slots (None) that its
 * runtime steps through; each action's index there, as torch 2.13's
 * ScheduleInterleaved1F1B(stages, 8).pipeline_order[rank] gives them for pp 4, 2 stages a rank
 * (validation/pp_schedules/capture_orders.py's stand-in stages; the 2024 _get_1f1b_rank_ops
 * pads the same). */
static void test_interleaved_time_steps_match_torch(void **state) {
    (void)state;
    static const char *const want[4] = {
        "0:0F0 1:0F1 2:0F2 3:0F3 4:4F0 5:4F1 6:4F2 7:4F3 8:0F4 9:0F5 14:0F6 15:4B0 16:0F7 17:4B1 18:4F4 19:4B2 "
        "20:4F5 21:4B3 22:4F6 23:0B0 24:4F7 25:0B1 27:0B2 29:0B3 31:4B4 33:4B5 35:4B6 37:4B7 39:0B4 41:0B5 43:0B6 45:0B7",
        "1:1F0 2:1F1 3:1F2 4:1F3 5:5F0 6:5F1 7:5F2 8:5F3 12:1F4 13:5B0 14:1F5 15:5B1 16:1F6 17:5B2 18:1F7 19:5B3 "
        "20:5F4 21:1B0 22:5F5 23:1B1 24:5F6 25:1B2 26:5F7 27:1B3 29:5B4 31:5B5 33:5B6 35:5B7 37:1B4 39:1B5 41:1B6 43:1B7",
        "2:2F0 3:2F1 4:2F2 5:2F3 6:6F0 7:6F1 10:6F2 11:6B0 12:6F3 13:6B1 14:2F4 15:6B2 16:2F5 17:6B3 18:2F6 19:2B0 "
        "20:2F7 21:2B1 22:6F4 23:2B2 24:6F5 25:2B3 26:6F6 27:6B4 28:6F7 29:6B5 31:6B6 33:6B7 35:2B4 37:2B5 39:2B6 41:2B7",
        "3:3F0 4:3F1 5:3F2 6:3F3 8:7F0 9:7B0 10:7F1 11:7B1 12:7F2 13:7B2 14:7F3 15:7B3 16:3F4 17:3B0 18:3F5 19:3B1 "
        "20:3F6 21:3B2 22:3F7 23:3B3 24:7F4 25:7B4 26:7F5 27:7B5 28:7F6 29:7B6 30:7F7 31:7B7 33:3B4 35:3B5 37:3B6 39:3B7",
    };
    lua_State *L = schedules_state();
    for (int r = 0; r < 4; r++) {
        lua_getglobal(L, "S");
        lua_getfield(L, -1, "line");
        lua_pushstring(L, "Interleaved1F1B");
        lua_pushinteger(L, 4);
        lua_pushinteger(L, 8);
        lua_pushinteger(L, 2);
        lua_pushinteger(L, r);
        lua_pushboolean(L, 1);
        if (lua_pcall(L, 6, 1, 0) != LUA_OK) fail_msg("%s", lua_tostring(L, -1));
        assert_string_equal(lua_tostring(L, -1), want[r]);
        lua_pop(L, 2);
    }
    lua_close(L);
}

/* Lockstep: a rank's send at a time step completes only when its peer has posted the receive,
 * after the peer's own action of that step. Rank 0 runs three 1 ns forwards at steps 0-2, rank 1
 * the next stage's 10 ns forwards at steps 1-3 (free transfers): rank 0's second send waits for
 * rank 1's first forward (to 11), its third forward runs 11-12 and its send waits to 21; run by
 * their data alone rank 0 would be done at 3. */
static void test_lockstep_waits_for_the_peer(void **state) {
    (void)state;
    PpAction acts[2][3] = {{{0, PP_F, 0, 0}, {0, PP_F, 1, 1}, {0, PP_F, 2, 2}},
                           {{1, PP_F, 0, 1}, {1, PP_F, 1, 2}, {1, PP_F, 2, 3}}};
    const PpAction *order[2] = {acts[0], acts[1]};
    int n[2] = {3, 3};
    double ns[2 * PP_KINDS] = {0}, sb[2] = {0, 0}, end[2], busy[2];
    ns[0 * PP_KINDS + PP_F] = 1;
    ns[1 * PP_KINDS + PP_F] = 10;
    PipelineSpec spec = {.ranks = 2, .stages = 2, .microbatches = 3, .order = order, .n_order = n,
                         .action_ns = ns, .send_bytes = sb, .link = {.latency_ns = 0, .bus_bw = 1e9},
                         .lockstep = true};
    PipelineResult res;
    char err[256];
    assert_int_equal(pipeline_compose(&spec, &res, end, busy, err, sizeof err), VR_OK);
    assert_float_equal(end[0], 21, 1e-9);
    assert_float_equal(end[1], 31, 1e-9);
    assert_float_equal(busy[0], 3, 1e-9);
    spec.lockstep = false;
    assert_int_equal(pipeline_compose(&spec, &res, end, busy, err, sizeof err), VR_OK);
    assert_float_equal(end[0], 3, 1e-9);
    assert_float_equal(end[1], 31, 1e-9);
    /* a step that runs an action before its input was sent is refused */
    acts[1][0].slot = 0;
    spec.lockstep = true;
    assert_int_equal(pipeline_compose(&spec, &res, end, busy, err, sizeof err), VR_EINVAL);
    assert_non_null(strstr(err, "before its input is sent"));
}

/* An order that waits on itself is refused, naming where each rank stands. */
static void test_deadlock_is_einval(void **state) {
    (void)state;
    PpAction acts[2][64] = {{{0, PP_B, 0, 0}, {0, PP_F, 0, 0}}, {{1, PP_F, 0, 0}, {1, PP_B, 0, 0}}};
    int n[2] = {2, 2};
    PipelineResult res;
    double end[2], busy[2];
    char err[256];
    assert_int_equal(compose(acts, n, 2, 2, 1, 10, 20, 0, 0, &res, end, busy, err, sizeof err), VR_EINVAL);
    assert_non_null(strstr(err, "deadlocks"));
    assert_non_null(strstr(err, "rank 0 at 0B0"));
    PpAction wrong[2][64] = {{{1, PP_F, 0, 0}}, {{1, PP_F, 0, 0}}};
    int n1[2] = {1, 1};
    assert_int_equal(compose(wrong, n1, 2, 2, 1, 10, 20, 0, 0, &res, end, busy, err, sizeof err), VR_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders_match_torch),
        cmocka_unit_test(test_refused_as_torch_refuses),
        cmocka_unit_test(test_gpipe_and_1f1b_span),
        cmocka_unit_test(test_transfers_on_the_link),
        cmocka_unit_test(test_shape_exchange_before_each_transfer),
        cmocka_unit_test(test_interleaved_shrinks_the_bubble),
        cmocka_unit_test(test_deadlock_is_einval),
        cmocka_unit_test(test_interleaved_time_steps_match_torch),
        cmocka_unit_test(test_lockstep_waits_for_the_peer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
