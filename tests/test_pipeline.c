/* test_pipeline.c: pipeline parallelism: the schedules' action orders (lua/vrsim/pp_schedules.lua)
 * against the orders torch.distributed.pipelining runs, as validation/pp_schedules/capture_orders.py
 * recorded them in tests/data/pp_schedule_orders.tsv (torch is not needed here).
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders_match_torch),
        cmocka_unit_test(test_refused_as_torch_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
