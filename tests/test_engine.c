/* test_engine.c: engine_run on graphs small enough to follow by hand.
 *
 * Every figure asserted here is worked out in the comment above it: bytes are the allocator's
 * 512-byte rounding of each request; the ideal allocator reserves exactly what is allocated, the
 * caching allocator puts requests of at most 1 MiB into 2 MiB segments (docs/allocator.md). */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "graph.h"
#include "fail_hook.h"

/* ---- builders ---------------------------------------------------------------------------- */

static int tensor(Graph *g, const char *name, uint64_t bytes, Category cat, bool rg,
                  bool persistent) {
    Tensor t = {.name = name, .bytes = bytes, .numel = bytes / 4, .dtype = DT_FP32, .cat = cat,
                .base = -1, .producer = -1, .module = -1, .requires_grad = rg,
                .is_param = cat == CAT_PARAM, .trainable = cat == CAT_PARAM && rg,
                .persistent = persistent};
    int id = -1;
    assert_int_equal(graph_add_tensor(g, &t, &id), VR_OK);
    return id;
}

typedef struct OpArgs {
    const char *name;
    Phase phase;
    int in[4], nin;
    int out[4], nout;
    int saves[4], nsaves;
    int frees[4], nfrees;
    uint64_t ws[2]; int nws;
    bool once;
    const char *kind;
    int slot; bool slot_free_after;
    bool step_start; int from_step;
    bool workspace_first;
} OpArgs;

static int op(Graph *g, OpArgs a) {
    GradSpec grads[4];
    for (int i = 0; i < 4; i++) grads[i] = (GradSpec){.mode = GRAD_NEW, .grad_dtype = DT_FP32};
    Op o = {.name = a.name, .kind = a.kind ? a.kind : "elementwise", .phase = a.phase,
            .fwd_op = -1, .inputs = a.in, .n_inputs = a.nin, .outputs = a.out,
            .n_outputs = a.nout, .saves = a.saves, .n_saves = a.nsaves, .frees = a.frees,
            .n_frees = a.nfrees, .workspace = a.ws, .n_workspace = a.nws, .grads = grads,
            .layer = -1, .once = a.once, .slot = a.slot, .slot_free_after = a.slot_free_after,
            .step_start = a.step_start, .from_step = a.from_step,
            .workspace_first = a.workspace_first};
    int id = -1;
    assert_int_equal(graph_add_op(g, &o, &id), VR_OK);
    return id;
}

static AllocConfig ideal(uint64_t capacity) {
    AllocConfig c;
    alloc_config_default(&c);
    c.kind = ALLOC_IDEAL;
    c.capacity = capacity;
    return c;
}

static AllocConfig caching(uint64_t capacity) {
    AllocConfig c;
    alloc_config_default(&c);
    c.capacity = capacity;
    return c;
}

/* engine_run under ec, which must succeed. */
static SimResult *run_with(const Graph *g, const EngineConfig *ec, const AllocConfig *ac) {
    SimResult *r = NULL;
    char err[256] = "";
    assert_int_equal(engine_run(g, ec, ac, &r, err, sizeof err), VR_OK);
    assert_non_null(r);
    return r;
}

static SimResult *run(const Graph *g, int steps, const AllocConfig *ac, const DeviceSpec *dev) {
    EngineConfig ec = {.steps = steps, .cublas_handles = 0, .dev = dev, .record_timeline = true,
                       .check_invariants = true};
    return run_with(g, &ec, ac);
}

/* Forward-only graph:
 *   p  param 1000 B -> 1024
 *   f1: p -> a (3000 B -> 3072)
 *   f2: a -> b (5000 B -> 5120)          frees a (one of its two references)
 *   f3: a, b -> c (100 B -> 512)         frees a, b: a's last use is here, not at f2
 *   f4: c ->                              frees c
 * Allocated: build 1024; f1 4096; f2 9216; f3 9728 (peak: p + a + b + c); then 1536, 1024. */
typedef struct Fwd { Graph *g; int p, a, b, c, f1, f2, f3, f4; } Fwd;

static Fwd build_forward(void) {
    Fwd f;
    assert_int_equal(graph_new(&f.g), VR_OK);
    f.p = tensor(f.g, "p", 1000, CAT_PARAM, false, true);
    f.a = tensor(f.g, "a", 3000, CAT_ACTIVATION, false, false);
    f.b = tensor(f.g, "b", 5000, CAT_ACTIVATION, false, false);
    f.c = tensor(f.g, "c", 100, CAT_TEMP, false, false);
    f.f1 = op(f.g, (OpArgs){.name = "f1", .phase = PH_FWD, .in = {f.p}, .nin = 1,
                            .out = {f.a}, .nout = 1});
    f.f2 = op(f.g, (OpArgs){.name = "f2", .phase = PH_FWD, .in = {f.a}, .nin = 1,
                            .out = {f.b}, .nout = 1, .frees = {f.a}, .nfrees = 1});
    f.f3 = op(f.g, (OpArgs){.name = "f3", .phase = PH_FWD, .in = {f.a, f.b}, .nin = 2,
                            .out = {f.c}, .nout = 1, .frees = {f.a, f.b}, .nfrees = 2});
    f.f4 = op(f.g, (OpArgs){.name = "f4", .phase = PH_FWD, .in = {f.c}, .nin = 1,
                            .frees = {f.c}, .nfrees = 1});
    return f;
}

static void test_forward_peak_ideal(void **state) {
    (void)state;
    Fwd f = build_forward();
    AllocConfig ac = ideal(0);
    SimResult *r = run(f.g, 3, &ac, NULL);
    assert_false(r->oom);
    assert_int_equal(r->n_steps, 3);
    assert_int_equal(r->build_allocated, 1024);
    assert_int_equal(r->build_reserved, 1024);
    for (int s = 0; s < 3; s++) {
        const StepResult *st = &r->steps[s];
        assert_int_equal(st->peak_allocated, 1024 + 3072 + 5120 + 512);
        assert_int_equal(st->peak_reserved, 9728); /* ideal: reserved == allocated */
        assert_int_equal(st->end_allocated, 1024); /* the parameter survives every step */
        assert_int_equal(st->end_reserved, 1024);
        assert_int_equal(st->peak_op, f.f3);
        assert_int_equal(st->peak_breakdown[CAT_PARAM], 1024);
        assert_int_equal(st->peak_breakdown[CAT_ACTIVATION], 3072 + 5120);
        assert_int_equal(st->peak_breakdown[CAT_TEMP], 512);
        assert_int_equal(st->peak_breakdown[CAT_GRAD], 0);
        assert_true(st->time_ns == 0.0); /* no device: no time */
    }
    /* the live set at the last step's peak, largest first */
    assert_int_equal(r->n_live_at_peak, 4);
    assert_int_equal(r->live_at_peak[0].tensor, f.b);
    assert_int_equal(r->live_at_peak[0].bytes, 5120);
    assert_int_equal(r->live_at_peak[1].tensor, f.a);
    assert_int_equal(r->live_at_peak[3].tensor, f.c);
    /* the timeline's last sample is the end of the last step */
    assert_true(r->n_samples > 0);
    assert_int_equal(r->samples[r->n_samples - 1].allocated, 1024);
    uint64_t mx = 0;
    for (int i = 0; i < r->n_samples; i++)
        if (r->samples[i].allocated > mx) mx = r->samples[i].allocated;
    assert_int_equal(mx, 9216); /* samples are taken after each op: f3's free already done */
    /* the engine's invariant: categories add up to what the allocator has allocated (no
     * cuBLAS workspace here), and the ideal allocator reserves exactly that */
    for (int i = 0; i < r->n_samples; i++) {
        uint64_t sum = 0;
        for (int c = 0; c < CAT_COUNT; c++) sum += r->samples[i].cat[c];
        assert_int_equal(sum, r->samples[i].allocated);
        assert_int_equal(r->samples[i].reserved, r->samples[i].allocated);
    }
    engine_result_free(r);
    graph_free(f.g);
}

/* The same graph through the caching allocator: the same allocated figures; everything is a
 * small request, so one 2 MiB segment holds it all and stays cached. */
static void test_forward_peak_caching(void **state) {
    (void)state;
    Fwd f = build_forward();
    AllocConfig ac = caching(0);
    SimResult *r = run(f.g, 2, &ac, NULL);
    assert_false(r->oom);
    assert_int_equal(r->build_allocated, 1024);
    assert_int_equal(r->build_reserved, 2 * VR_MIB);
    for (int s = 0; s < 2; s++) {
        assert_int_equal(r->steps[s].peak_allocated, 9728);
        assert_int_equal(r->steps[s].peak_reserved, 2 * VR_MIB);
        assert_int_equal(r->steps[s].end_allocated, 1024);
        assert_int_equal(r->steps[s].end_reserved, 2 * VR_MIB);
        assert_int_equal(r->steps[s].num_cuda_mallocs, 1);
    }
    engine_result_free(r);
    graph_free(f.g);
}

/* Large requests through the caching allocator: a 30 MiB activation gets a segment of its own
 * (>= 10 MiB: rounded up to 2 MiB), a 3 MiB one a 20 MiB segment, the parameter a 2 MiB one. */
static void test_large_segments_caching(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int p = tensor(g, "p", 1000, CAT_PARAM, false, true);
    int big = tensor(g, "big", 30 * VR_MIB - 100, CAT_ACTIVATION, false, false);
    int mid = tensor(g, "mid", 3 * VR_MIB, CAT_ACTIVATION, false, false);
    op(g, (OpArgs){.name = "make_big", .phase = PH_FWD, .in = {p}, .nin = 1, .out = {big},
                   .nout = 1});
    op(g, (OpArgs){.name = "make_mid", .phase = PH_FWD, .in = {big}, .nin = 1, .out = {mid},
                   .nout = 1, .frees = {big}, .nfrees = 1});
    op(g, (OpArgs){.name = "use_mid", .phase = PH_FWD, .in = {mid}, .nin = 1,
                   .frees = {mid}, .nfrees = 1});
    AllocConfig ac = caching(0);
    SimResult *r = run(g, 2, &ac, NULL);
    assert_false(r->oom);
    /* step 0: 1024 + 30 MiB + 3 MiB allocated at the peak; reserved 2 + 30 + 20 MiB */
    assert_int_equal(r->steps[0].peak_allocated, 1024 + 30 * VR_MIB + 3 * VR_MIB);
    assert_int_equal(r->steps[0].peak_reserved, 52 * VR_MIB);
    assert_int_equal(r->steps[0].num_cuda_mallocs, 3);
    /* step 1 reuses the cached segments: no new cudaMalloc */
    assert_int_equal(r->steps[1].peak_reserved, 52 * VR_MIB);
    assert_int_equal(r->steps[1].num_cuda_mallocs, 3);
    assert_int_equal(r->steps[1].end_allocated, 1024);
    engine_result_free(r);

    /* the ideal allocator on the same graph: reserved follows allocated */
    ac = ideal(0);
    r = run(g, 1, &ac, NULL);
    assert_int_equal(r->steps[0].peak_reserved, 1024 + 30 * VR_MIB + 3 * VR_MIB);
    engine_result_free(r);
    graph_free(g);
}

/* Training graph with derived backward:
 *   p  trainable param 1000 B -> 1024
 *   f1: p -> a (4096), saves nothing        f2: a -> loss (512), saves a, frees a
 * derive: ones_like(loss) -> seed (512) frees loss; f2.backward -> grad a (4096) frees seed, a;
 *         f1.backward -> grad p (1024, becomes .grad) frees grad a.
 * Step 0 allocated: 1024, f1 5120, f2 5632, seed 6144, loss freed 5632, grad a 9728 (peak),
 *         seed and a freed 5120, .grad 6144, grad a freed 2048 (p + .grad). */
typedef struct Train { Graph *g; int p, a, loss, f1, f2, gp, b2; } Train;

static Train build_train(void) {
    Train t;
    assert_int_equal(graph_new(&t.g), VR_OK);
    t.p = tensor(t.g, "p", 1000, CAT_PARAM, true, true);
    t.a = tensor(t.g, "a", 4096, CAT_ACTIVATION, true, false);
    t.loss = tensor(t.g, "loss", 512, CAT_ACTIVATION, true, false);
    t.f1 = op(t.g, (OpArgs){.name = "f1", .phase = PH_FWD, .in = {t.p}, .nin = 1,
                            .out = {t.a}, .nout = 1});
    t.f2 = op(t.g, (OpArgs){.name = "f2", .phase = PH_FWD, .in = {t.a}, .nin = 1,
                            .out = {t.loss}, .nout = 1, .saves = {t.a}, .nsaves = 1,
                            .frees = {t.a}, .nfrees = 1});
    assert_int_equal(graph_derive_backward(t.g, t.loss), VR_OK);
    t.gp = graph_param_grad(t.g, t.p);
    assert_true(t.gp >= 0);
    t.b2 = -1;
    for (int i = 0; i < graph_num_ops(t.g); i++)
        if (graph_op_c(t.g, i)->fwd_op == t.f2) t.b2 = i;
    assert_true(t.b2 >= 0);
    return t;
}

/* Without zero_grad the .grad stays from step to step (persistent): step 1 starts at 2048 and
 * peaks 1024 higher than step 0. */
static void test_backward_grad_persists(void **state) {
    (void)state;
    Train t = build_train();
    AllocConfig ac = ideal(0);
    SimResult *r = run(t.g, 3, &ac, NULL);
    assert_false(r->oom);
    assert_int_equal(r->steps[0].peak_allocated, 9728);
    assert_int_equal(r->steps[0].peak_op, t.b2);
    assert_int_equal(r->steps[0].end_allocated, 2048);
    assert_int_equal(r->steps[0].fwd_peak_allocated, 5632);
    assert_int_equal(r->steps[1].peak_allocated, 10752);
    assert_int_equal(r->steps[1].end_allocated, 2048);
    assert_int_equal(r->steps[2].peak_allocated, 10752);
    assert_int_equal(r->steps[1].peak_breakdown[CAT_GRAD], 1024);
    assert_int_equal(r->steps[1].peak_breakdown[CAT_PARAM], 1024);
    /* at the peak (f2.backward's output) a, grad a and the seed are live */
    assert_int_equal(r->steps[1].peak_breakdown[CAT_ACTIVATION], 4096);
    assert_int_equal(r->steps[1].peak_breakdown[CAT_TEMP], 4096 + 512);
    engine_result_free(r);
    graph_free(t.g);
}

/* An optimizer with a `once` op (state creation, step 0 only) and a zero_grad op that frees
 * .grad. Every op but zero_grad ("none") takes the 1000 ns launch time of the device.
 *   adam.init (once): -> state (2000 B -> 2048, persistent)
 *   adam.step: p, .grad, state; workspace 3000 B -> 3072
 *   zero_grad: frees .grad
 * Step 0: backward peak 9728 as above; then .grad 2048 live, + state 4096, + workspace 7168,
 *         zero_grad 3072 (p + state). Ops timed: f1 f2 ones f2.bwd f1.bwd init step = 7 us.
 * Step 1: starts at 3072; peak 9728 + 2048 = 11776 at f2.backward; 6 ops timed = 6 us. */
static void test_once_and_zero_grad(void **state) {
    (void)state;
    Train t = build_train();
    int st = tensor(t.g, "state", 2000, CAT_OPTSTATE, false, true);
    int init = op(t.g, (OpArgs){.name = "adam.init", .phase = PH_OPTIM, .in = {t.p}, .nin = 1,
                                .out = {st}, .nout = 1, .once = true});
    op(t.g, (OpArgs){.name = "adam.step", .phase = PH_OPTIM, .in = {t.p, t.gp, st}, .nin = 3,
                     .ws = {3000}, .nws = 1});
    op(t.g, (OpArgs){.name = "zero_grad", .phase = PH_ZERO_GRAD, .frees = {t.gp}, .nfrees = 1,
                     .kind = "none"});
    DeviceSpec dev = {.launch_ns = 1000};
    snprintf(dev.key, sizeof dev.key, "test");
    AllocConfig ac = ideal(0);
    SimResult *r = run(t.g, 3, &ac, &dev);
    assert_false(r->oom);
    assert_int_equal(r->n_steps, 3);
    assert_int_equal(r->steps[0].peak_allocated, 9728);
    assert_int_equal(r->steps[0].end_allocated, 3072);
    assert_int_equal(r->steps[0].bwd_peak_allocated, 9728);
    assert_true(r->steps[0].time_ns == 7000.0);
    assert_true(r->steps[0].phase_ns[PH_OPTIM] == 2000.0);
    assert_true(r->steps[0].phase_ns[PH_BWD] == 3000.0);
    for (int s = 1; s < 3; s++) {
        assert_int_equal(r->steps[s].peak_allocated, 11776);
        assert_int_equal(r->steps[s].end_allocated, 3072);
        assert_int_equal(r->steps[s].peak_breakdown[CAT_OPTSTATE], 2048);
        assert_int_equal(r->steps[s].peak_breakdown[CAT_GRAD], 0);
        assert_true(r->steps[s].time_ns == 6000.0);
        assert_true(r->steps[s].phase_ns[PH_OPTIM] == 1000.0);
    }
    /* the once op shows in step 0's spans only */
    int init_spans = 0;
    for (int i = 0; i < r->n_spans; i++)
        if (r->spans[i].op == init) {
            init_spans++;
            assert_int_equal(r->spans[i].step, 0);
        }
    assert_int_equal(init_spans, 1);
    engine_result_free(r);
    graph_free(t.g);
}

/* An ideal allocator capped at 10240 bytes: step 0 (peak 9728) fits, step 1 needs 10752 and
 * fails at f2.backward asking for 4096 with 6656 allocated. */
static void test_oom_in_second_step(void **state) {
    (void)state;
    Train t = build_train();
    AllocConfig ac = ideal(10240);
    SimResult *r = run(t.g, 3, &ac, NULL);
    assert_true(r->oom);
    assert_int_equal(r->oom_step, 1);
    assert_int_equal(r->oom_op, t.b2);
    assert_int_equal(r->n_steps, 1);
    assert_int_equal(r->oom_request, 4096);
    assert_int_equal(r->oom_info.requested, 4096);
    assert_int_equal(r->oom_info.allocated, 6656);
    assert_int_equal(r->oom_info.capacity, 10240);
    assert_int_equal(r->steps[0].peak_allocated, 9728);
    engine_result_free(r);
    graph_free(t.g);
}

/* The live set at the peak comes from the last completed step, also when the next step ran out
 * of memory (the run's allocator calls replayed up to step 0's peak: p, a, the loss's seed and
 * a's gradient, 9728 B); a caller that asks for no live set gets the same step figures and no
 * live set or segment map. */
static void test_live_at_peak_before_oom(void **state) {
    (void)state;
    Train t = build_train();
    AllocConfig ac = caching(4 * VR_MIB);
    EngineConfig ec = {.steps = 3};
    SimResult *r = NULL, *q = NULL;
    char err[256] = "";
    assert_int_equal(engine_run(t.g, &ec, &ac, &r, err, sizeof err), VR_OK);
    uint64_t sum = 0;
    for (int i = 0; i < r->n_live_at_peak; i++) sum += r->live_at_peak[i].bytes;
    assert_int_equal(r->n_live_at_peak, 5); /* step 2: p's .grad from step 1 is live too */
    assert_int_equal(sum, r->steps[r->n_steps - 1].peak_allocated);
    assert_int_equal(r->live_at_peak[0].bytes, 4096);
    assert_true(r->n_segmap > 0);
    ec.skip_live_at_peak = true;
    assert_int_equal(engine_run(t.g, &ec, &ac, &q, err, sizeof err), VR_OK);
    assert_int_equal(q->n_steps, r->n_steps);
    assert_memory_equal(q->steps, r->steps, sizeof(StepResult) * (size_t)r->n_steps);
    assert_int_equal(q->n_live_at_peak, 0);
    assert_null(q->live_at_peak);
    assert_int_equal(q->n_segmap, 0);
    engine_result_free(r);
    engine_result_free(q);
    /* capped so that step 1 fails: the live set is the failing moment's (what was live when
     * the allocation that did not fit was asked for), not the last completed step's peak */
    ac = ideal(10240);
    ec.skip_live_at_peak = false;
    assert_int_equal(engine_run(t.g, &ec, &ac, &r, err, sizeof err), VR_OK);
    assert_true(r->oom);
    assert_int_equal(r->n_steps, 1);
    sum = 0;
    for (int i = 0; i < r->n_live_at_peak; i++) sum += r->live_at_peak[i].bytes;
    assert_int_equal(sum, 6656);
    assert_true(sum + r->oom_request > 10240);
    assert_true(sum != r->steps[0].peak_allocated);
    engine_result_free(r);
    graph_free(t.g);
}

/* The caching allocator capped at 4 MiB: the parameter's 2 MiB small segment fits, an 8 MiB
 * activation cannot get its 20 MiB segment (nor any 8 MiB one) in step 0. */
static void test_oom_caching_small_capacity(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int p = tensor(g, "p", 1000, CAT_PARAM, false, true);
    int big = tensor(g, "big", 8 * VR_MIB, CAT_ACTIVATION, false, false);
    op(g, (OpArgs){.name = "small", .phase = PH_FWD, .in = {p}, .nin = 1});
    int f = op(g, (OpArgs){.name = "make_big", .phase = PH_FWD, .in = {p}, .nin = 1,
                           .out = {big}, .nout = 1});
    AllocConfig ac = caching(4 * VR_MIB);
    SimResult *r = run(g, 2, &ac, NULL);
    assert_true(r->oom);
    assert_int_equal(r->oom_step, 0);
    assert_int_equal(r->oom_op, f);
    assert_int_equal(r->n_steps, 0);
    assert_int_equal(r->oom_request, 8 * VR_MIB);
    assert_int_equal(r->oom_info.allocated, 1024);
    engine_result_free(r);

    /* too small for the parameters themselves: the OOM is in the build, before any step */
    ac = caching(VR_MIB);
    r = run(g, 1, &ac, NULL);
    assert_true(r->oom);
    assert_int_equal(r->oom_step, -1);
    assert_int_equal(r->n_steps, 0);
    engine_result_free(r);
    graph_free(g);
}

/* Checkpointing trades memory for a recompute. The chain (all fp32 bytes, 512-aligned):
 *   w (1024, trainable) -f0-> x0 (2048) -f1-> a (4096) -f2-> b (4096) -f3-> loss (512)
 * each op saving its input. Without a region, step 0 goes: build 1024; forward x0 3072, a 7168,
 * b 11264, loss 11776 (forward peak); seed 12288, loss freed 11776; f3.backward grad b 15872
 * (peak); then down.
 * With f1, f2 in region 1 the forward drops a after f2 (only the region input x0 stays saved):
 * forward peak 11264 at b; loss 7680; seed 8192 -> 7680; grad b 11776 -> 7168 after f3.backward;
 * recompute of f1: a' 11264; of f2 (it saves a, so PyTorch re-runs it): b' 15360, dropped at
 * once -> 11264; f2.backward grad a 15360 (the peak, reached twice) -> 7168; f1.backward 9216. */
/* w -> f0 -> x0 -> f1 -> a -> f2 -> b -> f3 -> loss; f1 saves x0, f2 saves its input a and/or
 * its output b, f3 saves b; with checkpoint, f1 and f2 form region 1. */
static Graph *build_chain_saving(bool checkpoint, bool f2_saves_input, bool f2_saves_output) {
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int w = tensor(g, "w", 1024, CAT_PARAM, true, true);
    int x0 = tensor(g, "x0", 2048, CAT_ACTIVATION, true, false);
    int a = tensor(g, "a", 4096, CAT_ACTIVATION, true, false);
    int b = tensor(g, "b", 4096, CAT_ACTIVATION, true, false);
    int loss = tensor(g, "loss", 512, CAT_ACTIVATION, true, false);
    op(g, (OpArgs){.name = "f0", .phase = PH_FWD, .in = {w}, .nin = 1, .out = {x0}, .nout = 1});
    int f1 = op(g, (OpArgs){.name = "f1", .phase = PH_FWD, .in = {x0}, .nin = 1, .out = {a},
                            .nout = 1, .saves = {x0}, .nsaves = 1, .frees = {x0}, .nfrees = 1});
    OpArgs a2 = {.name = "f2", .phase = PH_FWD, .in = {a}, .nin = 1, .out = {b}, .nout = 1,
                 .frees = {a}, .nfrees = 1};
    if (f2_saves_input) a2.saves[a2.nsaves++] = a;
    if (f2_saves_output) a2.saves[a2.nsaves++] = b;
    int f2 = op(g, a2);
    op(g, (OpArgs){.name = "f3", .phase = PH_FWD, .in = {b}, .nin = 1, .out = {loss}, .nout = 1,
                   .saves = {b}, .nsaves = 1, .frees = {b}, .nfrees = 1});
    if (checkpoint) {
        graph_op(g, f1)->region = 1;
        graph_op(g, f2)->region = 1;
    }
    assert_int_equal(graph_derive_backward(g, loss), VR_OK);
    return g;
}

static Graph *build_chain(bool checkpoint) { return build_chain_saving(checkpoint, true, false); }

static void test_checkpointing_lowers_peak(void **state) {
    (void)state;
    AllocConfig ac = ideal(0);
    Graph *g = build_chain(false);
    SimResult *r = run(g, 2, &ac, NULL);
    assert_int_equal(r->steps[0].fwd_peak_allocated, 11776);
    assert_int_equal(r->steps[0].peak_allocated, 15872);
    assert_int_equal(r->steps[0].end_allocated, 2048); /* w + .grad */
    engine_result_free(r);
    graph_free(g);

    g = build_chain(true);
    r = run(g, 2, &ac, NULL);
    assert_int_equal(r->steps[0].fwd_peak_allocated, 11264);
    assert_int_equal(r->steps[0].peak_allocated, 15360);
    assert_int_equal(r->steps[0].end_allocated, 2048);
    /* step 1 keeps .grad (no zero_grad): everything 1024 higher */
    assert_int_equal(r->steps[1].peak_allocated, 15360 + 1024);
    int recompute_ops = 0;
    for (int i = 0; i < graph_num_ops(g); i++)
        recompute_ops += graph_op_c(g, i)->phase == PH_RECOMPUTE && graph_op_c(g, i)->fwd_op >= 0;
    /* f1 only: f2 saves just its input, and the recomputation stops while saving it, before
     * f2's kernel (see test_recompute_early_stop) */
    assert_int_equal(recompute_ops, 1);
    engine_result_free(r);
    graph_free(g);
}

/* How many ops are re-run (their names into names) for the checkpointed region {f1, f2}
 * when its last op f2 saves its input (save_input), its output (save_output) or both. */
static int recomputed_ops(bool save_input, bool save_output, char names[4][64]) {
    Graph *g = build_chain_saving(true, save_input, save_output);
    int n = 0;
    for (int i = 0; i < graph_num_ops(g); i++)
        if (graph_op_c(g, i)->phase == PH_RECOMPUTE && graph_op_c(g, i)->fwd_op >= 0 && n < 4)
            snprintf(names[n++], 64, "%s", graph_op_c(g, i)->name);
    graph_free(g);
    return n;
}

/* torch.utils.checkpoint's early stop: the recomputation stops at the region's last saved
 * tensor. Autograd saves an op's inputs before its kernel and its outputs after, so the last
 * saving op runs again only when it saves an output (validation/traces/optrace_pub-c05.csv.gz: LLaMA's
 * down_proj, which saves its input, is not recomputed). */
static void test_recompute_early_stop(void **state) {
    (void)state;
    char names[4][64];
    assert_int_equal(recomputed_ops(true, false, names), 1);
    assert_string_equal(names[0], "f1 (recompute)");
    assert_int_equal(recomputed_ops(false, true, names), 2);
    assert_string_equal(names[1], "f2 (recompute)");
    assert_int_equal(recomputed_ops(true, true, names), 2);
    assert_string_equal(names[1], "f2 (recompute)");
}

/* Host allocation failure inside the allocator (AllocConfig.host_alloc fails the Nth request)
 * comes back from engine_run as VR_ENOMEM with nothing leaked (ASan checks that in make test),
 * never as a crash or a wrong result; once nothing fails the figures are the usual ones. */
typedef struct FailAfter { int left, calls; } FailAfter;

static void *fail_after(void *ud, void *ptr, size_t osize, size_t nsize) {
    FailAfter *f = ud;
    (void)osize;
    if (nsize == 0) { free(ptr); return NULL; }
    f->calls++;
    if (f->left-- == 0) return NULL;
    return realloc(ptr, nsize);
}

static void test_host_oom_is_enomem(void **state) {
    (void)state;
    Train t = build_train();
    int ok_at = -1;
    for (int n = 0; n < 200 && ok_at < 0; n++) {
        for (int kind = 0; kind < 2; kind++) {
            FailAfter f = {.left = n};
            AllocConfig ac = kind ? caching(0) : ideal(0);
            ac.host_alloc = fail_after;
            ac.host_ud = &f;
            EngineConfig ec = {.steps = 2, .record_timeline = true};
            SimResult *r = NULL;
            char err[128] = "";
            VrStatus st = engine_run(t.g, &ec, &ac, &r, err, sizeof err);
            if (st == VR_OK) {
                assert_non_null(r);
                assert_false(r->oom);
                assert_int_equal(r->steps[0].peak_allocated, 9728);
                assert_int_equal(r->steps[1].peak_allocated, 10752);
                engine_result_free(r);
                if (kind == 1 && f.left >= 0) ok_at = n; /* the caching run failed nothing */
            } else {
                assert_int_equal(st, VR_ENOMEM);
                assert_null(r);
            }
        }
    }
    assert_true(ok_at > 0); /* some failures were injected before the runs went through */
    graph_free(t.g);
}

/* Streams overlap. A, C and F run on the compute stream and last the device's 1000 ns launch
 * time; B, D and E are all-gathers of 2000 bytes over 2 ranks on the communication stream at
 * 1 byte/ns, (2-1)/2 x 2000 B = 1000 ns each. An op waits for its stream and its inputs; the
 * optimizer op F waits for every stream.
 *   A s0 0-1000 | B s1 0-1000 | C(a) s0 1000-2000 | D(b) s1 1000-2000 | E(c) s1 2000-3000 |
 *   F s0 3000-4000: step time 4000 ns while the streams were busy 3000 ns each. */
static void test_streams_overlap(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int p = tensor(g, "p", 1024, CAT_PARAM, false, true);
    int a = tensor(g, "a", 1024, CAT_ACTIVATION, false, false);
    int b = tensor(g, "b", 1024, CAT_ACTIVATION, false, false);
    int c = tensor(g, "c", 1024, CAT_ACTIVATION, false, false);
    op(g, (OpArgs){.name = "A", .phase = PH_FWD, .in = {p}, .nin = 1, .out = {a}, .nout = 1});
    int ob = op(g, (OpArgs){.name = "B", .phase = PH_FWD, .in = {p}, .nin = 1, .out = {b},
                            .nout = 1});
    op(g, (OpArgs){.name = "C", .phase = PH_FWD, .in = {a}, .nin = 1, .out = {c}, .nout = 1,
                   .frees = {a}, .nfrees = 1});
    int od = op(g, (OpArgs){.name = "D", .phase = PH_FWD, .in = {b}, .nin = 1, .frees = {b},
                            .nfrees = 1});
    int oe = op(g, (OpArgs){.name = "E", .phase = PH_FWD, .in = {c}, .nin = 1, .frees = {c},
                            .nfrees = 1});
    op(g, (OpArgs){.name = "F", .phase = PH_OPTIM, .in = {p}, .nin = 1});
    int comm[3] = {ob, od, oe};
    for (int k = 0; k < 3; k++) {
        Op *o = graph_op(g, comm[k]);
        o->stream = STREAM_COLLECTIVE;
        assert_int_equal(graph_op_set_kind(g, comm[k], "allgather"), VR_OK);
        o = graph_op(g, comm[k]);
        o->world = 2;
        o->bytes_moved = 2000;
    }
    DeviceSpec dev = {.launch_ns = 1000, .world = 2, .coll_bw = 1e9};
    AllocConfig ac = ideal(0);
    SimResult *r = run(g, 2, &ac, &dev);
    for (int s = 0; s < 2; s++) {
        assert_true(r->steps[s].time_ns == 4000.0);
        assert_true(r->steps[s].stream_busy_ns[0] == 3000.0);
        assert_true(r->steps[s].stream_busy_ns[1] == 3000.0);
    }
    for (int i = 0; i < r->n_spans; i++) {
        const OpSpan *sp = &r->spans[i];
        const char *nm = graph_op_c(g, sp->op)->name;
        double t0 = sp->step * 4000.0;
        double want = nm[0] == 'A' || nm[0] == 'B' ? 0 : nm[0] == 'C' || nm[0] == 'D' ? 1000
                    : nm[0] == 'E' ? 2000 : 3000;
        assert_true(sp->start_ns == t0 + want);
        assert_int_equal(sp->stream, graph_op_c(g, sp->op)->stream);
    }
    assert_int_equal(r->n_spans, 12);
    engine_result_free(r);
    graph_free(g);
}

/* Op.wait_stream: a compute op that reads nothing the collective makes still starts once that
 * stream is free (current_stream().wait_stream(other), symmetric memory's join); without it, at
 * once beside the collective. */
static void test_wait_stream(void **state) {
    (void)state;
    for (int wait = 0; wait < 2; wait++) {
        Graph *g;
        assert_int_equal(graph_new(&g), VR_OK);
        int p = tensor(g, "p", 1024, CAT_PARAM, false, true);
        int oc = op(g, (OpArgs){.name = "C", .phase = PH_FWD, .in = {p}, .nin = 1});
        int oj = op(g, (OpArgs){.name = "J", .phase = PH_FWD});
        Op *o = graph_op(g, oc);
        o->stream = STREAM_SYMM_MEM;
        assert_int_equal(graph_op_set_kind(g, oc, "allgather"), VR_OK);
        o = graph_op(g, oc);
        o->world = 2;
        o->bytes_moved = 2000;
        if (wait) graph_op(g, oj)->wait_stream = STREAM_SYMM_MEM;
        DeviceSpec dev = {.launch_ns = 1000, .world = 2, .coll_bw = 1e9};
        AllocConfig ac = ideal(0);
        SimResult *r = run(g, 1, &ac, &dev);
        double c_end = -1, j_start = -1;
        for (int i = 0; i < r->n_spans; i++) {
            const OpSpan *sp = &r->spans[i];
            if (sp->op == oc) c_end = sp->end_ns;
            if (sp->op == oj) j_start = sp->start_ns;
        }
        assert_true(c_end > 0 && j_start >= 0);
        if (wait) assert_true(j_start == c_end);
        else assert_true(j_start < c_end);
        engine_result_free(r);
        graph_free(g);
    }
}

/* Host time by op class: an op with a measured dispatch (has_dispatch) costs the host its
 * dispatch_ns, whatever its kind (an AddBackward0 launches nothing and still costs the engine
 * its node), instead of the profile's one figure per op; inside a checkpointed region it adds
 * its own dispatch_ckpt_ns, not the one-figure rule's host_ckpt_op_ns. No device time, so the
 * step is the host's sum:
 *   A  elementwise, no class      10000 (host_op_ns): in region 1, but its input p needs no
 *                                  gradient, so not host_ckpt_op_ns
 *   B  kind none, class 3000       3000
 *   C  elementwise, class 5000     5000, in region 1: + dispatch_ckpt_ns (0, then 2000) when
 *                                  it records an autograd node (its input a requires grad);
 *                                  recording none, it makes no saved tensor for checkpointing's
 *                                  hooks and costs its plain dispatch
 *   D  kind none, no class            0 */
static void test_host_dispatch_by_class(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int p = tensor(g, "p", 1024, CAT_PARAM, false, true);
    int a = tensor(g, "a", 1024, CAT_ACTIVATION, false, false);
    int b = tensor(g, "b", 1024, CAT_ACTIVATION, false, false);
    int oa = op(g, (OpArgs){.name = "A", .phase = PH_FWD, .in = {p}, .nin = 1, .out = {a}, .nout = 1});
    graph_op(g, oa)->region = 1;
    int ob = op(g, (OpArgs){.name = "B", .phase = PH_FWD, .in = {a}, .nin = 1, .kind = "none"});
    int oc = op(g, (OpArgs){.name = "C", .phase = PH_FWD, .in = {a}, .nin = 1, .out = {b},
                            .nout = 1, .frees = {a}, .nfrees = 1});
    op(g, (OpArgs){.name = "D", .phase = PH_FWD, .in = {b}, .nin = 1, .frees = {b}, .nfrees = 1,
                   .kind = "none"});
    graph_op(g, ob)->has_dispatch = true;
    graph_op(g, ob)->dispatch_ns = 3000;
    graph_op(g, oc)->has_dispatch = true;
    graph_op(g, oc)->dispatch_ns = 5000;
    graph_op(g, oc)->region = 1;
    AllocConfig ac = ideal(0);
    for (int rg = 0; rg < 2; rg++) {
        graph_tensor(g, a)->requires_grad = rg;
        for (int ck = 0; ck < 2; ck++) {
            graph_op(g, oc)->dispatch_ckpt_ns = ck ? 2000 : 0;
            EngineConfig ec = {.steps = 1, .host_op_ns = 10000,
                               .host_ckpt_op_ns = 25000};
            SimResult *r = run_with(g, &ec, &ac);
            assert_true(r->steps[0].time_ns == (ck && rg ? 20000.0 : 18000.0));
            /* nothing runs on the GPU: the whole step is the host's dispatch */
            assert_true(r->steps[0].host_ns == r->steps[0].time_ns);
            engine_result_free(r);
        }
    }
    graph_free(g);
}

/* A torch.compile graph's host time (EngineConfig.host_compiled_*): each kernel its generated code
 * launches costs the direction's figure in place of a bare launch, an op fused into another's
 * kernel (compiled 2) nothing, and a call of the graph (one per layer and direction) is paid at
 * its first kernel, again after an eager op in between. No device time, so the step is the
 * host's sum; without the figures each kernel is a bare launch and no call is paid:
 *   A  compiled, layer 0, 2 kernels   2 x 1000 + call 10000
 *   B  compiled, layer 0              1000
 *   C  fused (compiled 2), layer 0    0
 *   D  compiled, layer 1              1000 + call 10000 (another layer's graph)
 *   E  eager, no class                500 (host_op_ns)
 *   F  compiled, layer 1              1000 + call 10000 (the eager op ended the last call)
 *   G  compiled, layer 1, backward,   3 x 2000 + call 20000
 *      3 kernels */
static void test_host_compiled_graph(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int x = tensor(g, "x", 1024, CAT_ACTIVATION, false, false);
    struct { const char *name; int compiled, layer, kernels; Phase phase; } ops[] = {
        {"A", 1, 0, 2, PH_FWD}, {"B", 1, 0, 1, PH_FWD}, {"C", 2, 0, 1, PH_FWD}, {"D", 1, 1, 1, PH_FWD},
        {"E", 0, -1, 1, PH_FWD}, {"F", 1, 1, 1, PH_FWD}, {"G", 1, 1, 3, PH_BWD},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int o = op(g, (OpArgs){.name = ops[i].name, .phase = ops[i].phase, .in = {x}, .nin = 1});
        graph_op(g, o)->compiled = ops[i].compiled;
        graph_op(g, o)->layer = ops[i].layer;
        graph_op(g, o)->kernels = ops[i].kernels;
    }
    AllocConfig ac = ideal(0);
    EngineConfig ec = {.steps = 1, .host_op_ns = 500, .host_launch_ns = 7,
                       .host_compiled_kernel_ns = {1000, 2000}, .host_compiled_call_ns = {10000, 20000}};
    SimResult *r = run_with(g, &ec, &ac);
    assert_true(r->steps[0].host_ns == 61500.0);
    assert_true(r->steps[0].time_ns == r->steps[0].host_ns);
    engine_result_free(r);
    /* a profile without the figures: a bare launch a kernel, no call */
    EngineConfig bare = {.steps = 1, .host_op_ns = 500, .host_launch_ns = 7};
    r = run_with(g, &bare, &ac);
    assert_true(r->steps[0].host_ns == 2 * 7 + 7 + 7 + 500 + 7 + 3 * 7);
    engine_result_free(r);
    graph_free(g);
}

/* Contention: a compute-stream kernel overlapping a collective runs longer by the measured
 * fraction of the overlapped time (EngineConfig.contention; [1] for memory-bound kinds). B, an
 * all-gather on stream 1, runs 0..1000 ns; A, elementwise on stream 0, starts at 0 and would take
 * 1000 ns: with 0.5 it takes 1500, without a figure 1000. */
static void test_contention(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int p = tensor(g, "p", 1024, CAT_PARAM, false, true);
    int a = tensor(g, "a", 1024, CAT_ACTIVATION, false, false);
    int ob = op(g, (OpArgs){.name = "B", .phase = PH_FWD, .in = {p}, .nin = 1});
    op(g, (OpArgs){.name = "A", .phase = PH_FWD, .in = {p}, .nin = 1, .out = {a}, .nout = 1,
                   .frees = {a}, .nfrees = 1});
    assert_int_equal(graph_op_set_kind(g, ob, "allgather"), VR_OK);
    Op *o = graph_op(g, ob);
    o->stream = STREAM_COLLECTIVE;
    o->world = 2;
    o->bytes_moved = 2000;
    DeviceSpec dev = {.launch_ns = 1000, .world = 2, .coll_bw = 1e9};
    AllocConfig ac = ideal(0);
    for (int k = 0; k < 2; k++) {
        EngineConfig ec = {.steps = 1, .dev = &dev, .contention = {0, k ? 0.5 : 0}};
        SimResult *r = run_with(g, &ec, &ac);
        assert_true(r->steps[0].stream_busy_ns[1] == 1000.0);
        assert_true(r->steps[0].stream_busy_ns[0] == (k ? 1500.0 : 1000.0));
        assert_true(r->steps[0].host_ns == 0.0); /* no host figures: the host costs nothing */
        engine_result_free(r);
    }
    graph_free(g);
}

/* Contention from a collective issued after the kernel it runs beside (the host ahead of the
 * device, as a prefetched all-gather is): A, elementwise on stream 0, is issued first and runs
 * 0..1000 ns; B, an all-gather on stream 1 issued after it, runs 0..1000 ns too. A's time was
 * set before B was seen, so the compute stream takes the loss at its tail: with 0.5 for
 * memory-bound kernels it is busy 1500 ns and the step ends at 1500; a figure for compute-bound
 * kernels alone leaves elementwise A as it was. */
static void test_contention_issued_after(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int p = tensor(g, "p", 1024, CAT_PARAM, false, true);
    int a = tensor(g, "a", 1024, CAT_ACTIVATION, false, false);
    op(g, (OpArgs){.name = "A", .phase = PH_FWD, .in = {p}, .nin = 1, .out = {a}, .nout = 1,
                   .frees = {a}, .nfrees = 1});
    int ob = op(g, (OpArgs){.name = "B", .phase = PH_FWD, .in = {p}, .nin = 1});
    assert_int_equal(graph_op_set_kind(g, ob, "allgather"), VR_OK);
    Op *o = graph_op(g, ob);
    o->stream = STREAM_COLLECTIVE;
    o->world = 2;
    o->bytes_moved = 2000;
    DeviceSpec dev = {.launch_ns = 1000, .world = 2, .coll_bw = 1e9};
    AllocConfig ac = ideal(0);
    const double want[3] = {1000.0, 1500.0, 1000.0};
    for (int k = 0; k < 3; k++) {
        EngineConfig ec = {.steps = 1, .dev = &dev,
                           .contention = {k == 2 ? 0.5 : 0, k == 1 ? 0.5 : 0}};
        SimResult *r = run_with(g, &ec, &ac);
        assert_true(r->steps[0].stream_busy_ns[1] == 1000.0);
        assert_true(r->steps[0].stream_busy_ns[0] == want[k]);
        assert_true(r->steps[0].time_ns == want[k]);
        engine_result_free(r);
    }
    graph_free(g);
}

/* cuBLAS workspaces (docs/allocator.md 10.1): created lazily through the caching allocator and never
 * freed: the first at the first forward GEMM, the second at the first backward op that
 * allocates (autograd's thread has its own handle). With W = 8519680 bytes (cc < 9) and the
 * training graph above with f1 a GEMM:
 *   step 0: f1 allocates W then a; ones_like allocates the second W before the seed; the peak is
 *           9728 + 2W at f2.backward; the step ends at 2048 + 2W
 *   step 1: no new workspace; peak 10752 + 2W (the .grad of step 0 is still there) */
static void test_cublas_workspaces(void **state) {
    (void)state;
    Train t = build_train();
    assert_int_equal(graph_op_set_kind(t.g, t.f1, "mm"), VR_OK);
    /* its derived backward is a GEMM too: the autograd thread's workspace comes with it */
    for (int i = 0; i < graph_num_ops(t.g); i++)
        if (graph_op(t.g, i)->phase == PH_BWD && graph_op(t.g, i)->fwd_op == t.f1)
            assert_int_equal(graph_op_set_kind(t.g, i, "mm"), VR_OK);
    const uint64_t W = 8519680;
    DeviceSpec dev = {.cublas_workspace_bytes = W};
    AllocConfig ac = ideal(0);
    EngineConfig ec = {.steps = 2, .cublas_handles = 2, .dev = &dev};
    SimResult *r = NULL;
    char err[128];
    assert_int_equal(engine_run(t.g, &ec, &ac, &r, err, sizeof err), VR_OK);
    /* the autograd thread's workspace arrives with backward's first GEMM (f1's): then p, a's
     * gradient and the first workspace are live, and p's gradient follows: 1024 + 4096 + 1024 */
    assert_int_equal(r->steps[0].peak_allocated, 6144 + 2 * W);
    assert_int_equal(r->steps[0].end_allocated, 2048 + 2 * W);
    assert_int_equal(r->steps[0].fwd_peak_allocated, 5632 + W);
    assert_int_equal(r->steps[1].peak_allocated, 10752 + 2 * W);
    /* the workspaces count as temporaries at the peak: with the seed and a's gradient */
    assert_int_equal(r->steps[1].peak_breakdown[CAT_TEMP], 512 + 4096 + 2 * W);
    engine_result_free(r);

    /* one handle only: the backward creates none */
    ec.cublas_handles = 1;
    assert_int_equal(engine_run(t.g, &ec, &ac, &r, err, sizeof err), VR_OK);
    assert_int_equal(r->steps[0].peak_allocated, 9728 + W);
    assert_int_equal(r->steps[1].end_allocated, 2048 + W);
    engine_result_free(r);
    graph_free(t.g);
}

static void test_steps_must_be_positive(void **state) {
    (void)state;
    Fwd f = build_forward();
    AllocConfig ac = ideal(0);
    EngineConfig ec = {.steps = 0};
    SimResult *r = (SimResult *)&ec; /* must be reset to NULL */
    char err[128] = "";
    assert_int_equal(engine_run(f.g, &ec, &ac, &r, err, sizeof err), VR_EINVAL);
    assert_null(r);
    assert_non_null(strstr(err, "steps"));
    ec.steps = -3;
    assert_int_equal(engine_run(f.g, &ec, &ac, &r, err, sizeof err), VR_EINVAL);
    engine_result_free(NULL); /* a no-op */
    graph_free(f.g);
}

/* engine_check (EngineConfig.check_invariants) finds a graph that reads a tensor after its last
 * reference freed it: f3 reads a, which f2 freed. The plain run goes through (it does not look);
 * the checked run stops at f3, naming the op, the tensor and the invariant. */
static void test_check_finds_use_after_free(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int p = tensor(g, "p", 1000, CAT_PARAM, false, true);
    int a = tensor(g, "a", 3000, CAT_ACTIVATION, false, false);
    int b = tensor(g, "b", 5000, CAT_ACTIVATION, false, false);
    int c = tensor(g, "c", 100, CAT_TEMP, false, false);
    op(g, (OpArgs){.name = "f1", .phase = PH_FWD, .in = {p}, .nin = 1, .out = {a}, .nout = 1});
    op(g, (OpArgs){.name = "f2", .phase = PH_FWD, .in = {a}, .nin = 1, .out = {b}, .nout = 1,
                   .frees = {a}, .nfrees = 1});
    op(g, (OpArgs){.name = "f3", .phase = PH_FWD, .in = {a, b}, .nin = 2, .out = {c}, .nout = 1,
                   .frees = {b, c}, .nfrees = 2});
    AllocConfig ac = caching(1ull << 30);
    EngineConfig ec = {.steps = 2};
    SimResult *r = run_with(g, &ec, &ac);
    assert_false(r->oom);
    engine_result_free(r);
    ec.check_invariants = true;
    char err[256] = "";
    r = NULL;
    assert_int_equal(engine_run(g, &ec, &ac, &r, err, sizeof err), VR_EINVAL);
    assert_null(r);
    assert_non_null(strstr(err, "'f3'"));
    assert_non_null(strstr(err, "tensor 'a'"));
    assert_non_null(strstr(err, "after its last reference freed it"));
    graph_free(g);
}

/* A view allocates nothing and keeps its base alive: the base is freed when the references
 * to it and to its view are all dropped. */
static void test_view_keeps_base_alive(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int a = tensor(g, "a", 4096, CAT_ACTIVATION, false, false);
    Tensor vt = {.name = "a.view", .bytes = 0, .base = a, .producer = -1, .module = -1,
                 .cat = CAT_ACTIVATION};
    int v;
    assert_int_equal(graph_add_tensor(g, &vt, &v), VR_OK);
    int b = tensor(g, "b", 1024, CAT_ACTIVATION, false, false);
    op(g, (OpArgs){.name = "make_a", .phase = PH_FWD, .out = {a}, .nout = 1});
    op(g, (OpArgs){.name = "view", .phase = PH_FWD, .in = {a}, .nin = 1, .out = {v}, .nout = 1,
                   .frees = {a}, .nfrees = 1, .kind = "none"});
    op(g, (OpArgs){.name = "use_view", .phase = PH_FWD, .in = {v}, .nin = 1, .out = {b},
                   .nout = 1, .frees = {v}, .nfrees = 1});
    op(g, (OpArgs){.name = "use_b", .phase = PH_FWD, .in = {b}, .nin = 1, .frees = {b},
                   .nfrees = 1});
    AllocConfig ac = ideal(0);
    SimResult *r = run(g, 2, &ac, NULL);
    /* a (4096) is live until use_view ends: the peak is a + b */
    assert_int_equal(r->steps[1].peak_allocated, 4096 + 1024);
    assert_int_equal(r->steps[1].end_allocated, 0);
    engine_result_free(r);
    graph_free(g);
}

/* A hold slot keeps an op's output until the next op of the slot: freed before that op's
 * allocation (FSDP2's reduce-scatter input) or after it (its forward all-gather output), and a
 * slot op without outputs just releases. Three 4096-byte buffers, one after another, then a
 * release: with the free first at most one is live (peak 4096); freed after, two (8192). */
static void test_hold_slots(void **state) {
    (void)state;
    for (int after = 0; after <= 1; after++) {
        Graph *g;
        assert_int_equal(graph_new(&g), VR_OK);
        int buf[3];
        for (int k = 0; k < 3; k++) {
            buf[k] = tensor(g, "buf", 4096, CAT_TEMP, false, false);
            op(g, (OpArgs){.name = "collective", .phase = PH_FWD, .out = {buf[k]}, .nout = 1,
                           .slot = 1, .slot_free_after = after});
        }
        op(g, (OpArgs){.name = "release", .phase = PH_FWD, .kind = "none", .slot = 1});
        AllocConfig ac = ideal(0);
        SimResult *r = run(g, 2, &ac, NULL);
        assert_int_equal(r->steps[1].peak_allocated, after ? 8192 : 4096);
        assert_int_equal(r->steps[1].end_allocated, 0);
        engine_result_free(r);
        graph_free(g);
    }
}

/* An op marked step_start runs first in its step although it is declared last (DDP's bucket
 * rebuild), and one with from_step runs from that step on. make_y (2048, step_start) opens
 * the step, so y is live with x (4096): peak 6144, and use_x frees both. From step 1, z (1024)
 * is made while both are live: peak 7168. */
static void test_step_start_and_from_step(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int x = tensor(g, "x", 4096, CAT_TEMP, false, false);
    int y = tensor(g, "y", 2048, CAT_TEMP, false, false);
    int z = tensor(g, "z", 1024, CAT_TEMP, false, false);
    op(g, (OpArgs){.name = "make_x", .phase = PH_FWD, .out = {x}, .nout = 1});
    op(g, (OpArgs){.name = "make_z", .phase = PH_FWD, .out = {z}, .nout = 1, .from_step = 1});
    op(g, (OpArgs){.name = "use_x", .phase = PH_FWD, .in = {x}, .nin = 1, .frees = {x, y}, .nfrees = 2});
    op(g, (OpArgs){.name = "use_z", .phase = PH_FWD, .in = {z}, .nin = 1, .frees = {z}, .nfrees = 1,
                   .from_step = 1});
    op(g, (OpArgs){.name = "make_y", .phase = PH_FWD, .out = {y}, .nout = 1, .step_start = true});
    AllocConfig ac = ideal(0);
    SimResult *r = run(g, 2, &ac, NULL);
    assert_int_equal(r->steps[0].peak_allocated, 6144);
    assert_int_equal(r->steps[1].peak_allocated, 7168);
    assert_int_equal(r->steps[1].end_allocated, 0);
    engine_result_free(r);
    graph_free(g);
}

typedef struct AllocLog { uint64_t sizes[8]; int n; } AllocLog;

static void log_alloc(void *ud, bool alloc, uint64_t addr, uint64_t size, int stream, int op,
                      double host_ns) {
    (void)addr; (void)stream; (void)op; (void)host_ns;
    AllocLog *l = ud;
    if (alloc && l->n < 8) l->sizes[l->n++] = size;
}

/* An op allocates its outputs, then its workspaces; with workspace_first (a derivative formula
 * that computes its temporaries first, PowBackward0) the other way round. */
static void test_workspace_first(void **state) {
    (void)state;
    for (int first = 0; first <= 1; first++) {
        Graph *g;
        assert_int_equal(graph_new(&g), VR_OK);
        int out = tensor(g, "out", 4096, CAT_TEMP, false, false);
        op(g, (OpArgs){.name = "f", .phase = PH_FWD, .out = {out}, .nout = 1, .ws = {2048}, .nws = 1,
                       .workspace_first = first});
        op(g, (OpArgs){.name = "use", .phase = PH_FWD, .in = {out}, .nin = 1});
        AllocLog log = {0};
        EngineConfig ec = {.steps = 1, .on_alloc = log_alloc, .on_alloc_ud = &log};
        AllocConfig ac = ideal(0);
        SimResult *r = NULL;
        char err[256];
        assert_int_equal(engine_run(g, &ec, &ac, &r, err, sizeof err), VR_OK);
        assert_int_equal(log.n, 2);
        assert_int_equal(log.sizes[0], first ? 2048 : 4096);
        assert_int_equal(log.sizes[1], first ? 4096 : 2048);
        engine_result_free(r);
        graph_free(g);
    }
}

typedef struct EventLog { int64_t ev[16]; int n; } EventLog;

static void log_event(void *ud, bool alloc, uint64_t addr, uint64_t size, int stream, int op,
                      double host_ns) {
    (void)addr; (void)stream; (void)op; (void)host_ns;
    EventLog *l = ud;
    if (l->n < 16) l->ev[l->n++] = alloc ? (int64_t)size : -(int64_t)size;
}

/* workspace_at places each workspace among the outputs (BaddbmmBackward0: each gradient a bmm
 * result and its alpha scaling, the bmm result freed after; an operand's contiguous copy made
 * after its bmm result and freed before the scaled gradient): workspaces {800, 300, 801} at
 * {1, 2, -2} of outputs {8000, 3000} give +800 +8000 -800 +300 +801 -801 +3000 -300. */
static void test_workspace_at(void **state) {
    (void)state;
    Graph *g;
    assert_int_equal(graph_new(&g), VR_OK);
    int a = tensor(g, "ga", 8000, CAT_TEMP, false, false);
    int b = tensor(g, "gb", 3000, CAT_TEMP, false, false);
    uint64_t ws[3] = {800, 300, 801};
    int at[3] = {1, 2, -2}, outs[2] = {a, b};
    Op o = {.name = "f", .kind = "elementwise", .phase = PH_FWD, .fwd_op = -1, .outputs = outs,
            .n_outputs = 2, .workspace = ws, .n_workspace = 3, .workspace_at = at, .n_workspace_at = 3,
            .layer = -1};
    int id;
    assert_int_equal(graph_add_op(g, &o, &id), VR_OK);
    op(g, (OpArgs){.name = "use", .phase = PH_FWD, .in = {a, b}, .nin = 2});
    EventLog log = {0};
    EngineConfig ec = {.steps = 1, .on_alloc = log_event, .on_alloc_ud = &log};
    AllocConfig ac = ideal(0);
    SimResult *r = NULL;
    char err[256];
    assert_int_equal(engine_run(g, &ec, &ac, &r, err, sizeof err), VR_OK);
    const int64_t want[8] = {800, 8000, -800, 300, 801, -801, 3000, -300};
    assert_true(log.n >= 8);
    for (int k = 0; k < 8; k++) assert_int_equal(log.ev[k], want[k]);
    engine_result_free(r);
    graph_free(g);
}

/* A row sum's staging buffers follow the GPU (device_row_sum_buffers, Reduce.cuh's global
 * reduce): summing a 16384 x 4096 tensor over its rows splits each column's rows over
 * ctas_per_output blocks, one per (SMs x 2048 threads / 512) block slot for 128 output blocks:
 * 132 SMs give 33 blocks per column, 4 * 4096 * 33 * 32 * 4 B = 132 MiB of partial sums; 72 SMs
 * of compute capability 8.6 (1536 threads per SM) give 54 MiB; both add a 4-byte semaphore per
 * output block, 128 x 4 = 512 B (the ideal allocator's rounding keeps it 512). A 100-row sum does
 * not split and stages nothing. */
static void test_row_sum_staging_per_device(void **state) {
    (void)state;
    const struct { int sms; double cc; int64_t rows; uint64_t partial, sem; } cases[] = {
        {132, 9.0, 16384, 138412032, 512}, {72, 8.6, 16384, 56623104, 512}, {132, 9.0, 100, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Graph *g;
        assert_int_equal(graph_new(&g), VR_OK);
        int x = tensor(g, "x", 4096, CAT_TEMP, false, true);
        int id = op(g, (OpArgs){.name = "sum_rows", .phase = PH_FWD, .in = {x}, .nin = 1});
        graph_op(g, id)->rowsum[0] = cases[i].rows;
        graph_op(g, id)->rowsum[1] = 4096;
        DeviceSpec dev = {.sm_count = cases[i].sms, .compute_capability = cases[i].cc};
        AllocLog log = {0};
        EngineConfig ec = {.steps = 1, .dev = &dev, .on_alloc = log_alloc,
                           .on_alloc_ud = &log};
        AllocConfig ac = ideal(0);
        SimResult *r = NULL;
        char err[256];
        assert_int_equal(engine_run(g, &ec, &ac, &r, err, sizeof err), VR_OK);
        /* x at build; then the two buffers, allocated in order and freed when the op ends */
        int n = cases[i].partial ? 3 : 1;
        assert_int_equal(r->steps[0].peak_allocated, 4096 + cases[i].partial + cases[i].sem);
        assert_int_equal(log.n, n);
        if (cases[i].partial) {
            assert_int_equal(log.sizes[1], cases[i].partial);
            assert_int_equal(log.sizes[2], 128); /* requested; 512 once rounded */
        }
        engine_result_free(r);
        graph_free(g);
    }
}

/* Every figure of two runs' steps, compared exactly (times to the last bit). */
static void assert_same_steps(const SimResult *a, const SimResult *b) {
    assert_int_equal(a->n_steps, b->n_steps);
    assert_int_equal(a->oom, b->oom);
    for (int s = 0; s < a->n_steps; s++) {
        const StepResult *x = &a->steps[s], *y = &b->steps[s];
        assert_int_equal(x->peak_allocated, y->peak_allocated);
        assert_int_equal(x->peak_reserved, y->peak_reserved);
        assert_int_equal(x->fwd_peak_allocated, y->fwd_peak_allocated);
        assert_int_equal(x->bwd_peak_allocated, y->bwd_peak_allocated);
        assert_int_equal(x->end_allocated, y->end_allocated);
        assert_int_equal(x->end_reserved, y->end_reserved);
        assert_memory_equal(x->peak_breakdown, y->peak_breakdown, sizeof x->peak_breakdown);
        assert_true(x->time_ns == y->time_ns);
        assert_memory_equal(x->phase_ns, y->phase_ns, sizeof x->phase_ns);
        assert_memory_equal(x->stream_busy_ns, y->stream_busy_ns, sizeof x->stream_busy_ns);
        assert_true(x->host_ns == y->host_ns);
        assert_int_equal(x->num_alloc_retries, y->num_alloc_retries);
        assert_int_equal(x->num_cuda_mallocs, y->num_cuda_mallocs);
        assert_int_equal(x->inactive_split, y->inactive_split);
        assert_int_equal(x->peak_op, y->peak_op);
        assert_int_equal(x->peak_alloc_index, y->peak_alloc_index);
    }
}

/* The training graph with an optimizer (state made in step 0), zero_grad, a collective beside
 * the forward (contention) and host costs that are not round numbers, so that the steps' times
 * differ in their last bits as their start times grow; `extra` adds an empty_cache at the end
 * of every step (each step then makes its segments again, each time below the last: no step
 * begins where another began) and `late` an op from step 3 on. */
static Graph *build_repeating(bool extra, bool late) {
    Train t = build_train();
    int st = tensor(t.g, "state", 2000, CAT_OPTSTATE, false, true);
    op(t.g, (OpArgs){.name = "adam.init", .phase = PH_OPTIM, .in = {t.p}, .nin = 1,
                     .out = {st}, .nout = 1, .once = true});
    op(t.g, (OpArgs){.name = "adam.step", .phase = PH_OPTIM, .in = {t.p, t.gp, st}, .nin = 3,
                     .ws = {3000000}, .nws = 1});
    int ag = op(t.g, (OpArgs){.name = "allgather", .phase = PH_FWD, .in = {t.p}, .nin = 1,
                              .step_start = true});
    assert_int_equal(graph_op_set_kind(t.g, ag, "allgather"), VR_OK);
    Op *o = graph_op(t.g, ag);
    o->stream = STREAM_COLLECTIVE;
    o->world = 2;
    o->bytes_moved = 3333;
    if (late)
        op(t.g, (OpArgs){.name = "late", .phase = PH_OPTIM, .in = {t.p}, .nin = 1,
                         .ws = {5000000}, .nws = 1, .from_step = 3});
    op(t.g, (OpArgs){.name = "zero_grad", .phase = PH_ZERO_GRAD, .frees = {t.gp}, .nfrees = 1,
                     .kind = "none"});
    if (extra)
        op(t.g, (OpArgs){.name = "empty_cache", .phase = PH_ZERO_GRAD, .kind = "empty_cache"});
    return t.g;
}

/* Repeated steps (engine.h): a run that finds them gives every figure a run that simulates each
 * step through the allocator gives (a timeline turns the shortcut off), the live set at the
 * last step's peak included; with an empty_cache each step none is found and the segment count
 * grows step by step; an op from step 3 on keeps steps 0-3 from counting as repeats. */
static void test_repeated_steps(void **state) {
    (void)state;
    DeviceSpec dev = {.launch_ns = 1000, .world = 2, .coll_bw = 1.7e9};
    snprintf(dev.key, sizeof dev.key, "test");
    AllocConfig ac = caching(0);
    for (int variant = 0; variant < 3; variant++) {
        Graph *g = build_repeating(variant == 1, variant == 2);
        EngineConfig ec = {.steps = 7, .dev = &dev, .host_op_ns = 1234.567,
                           .host_launch_ns = 89.1, .contention = {0.31, 0.17}};
        SimResult *fast = run_with(g, &ec, &ac);
        ec.record_timeline = true;
        SimResult *full = run_with(g, &ec, &ac);
        assert_int_equal(full->repeat_from, -1);
        if (variant == 1) {
            assert_int_equal(fast->repeat_from, -1);
        } else {
            assert_true(fast->repeat_from >= (variant == 2 ? 4 : 2));
            assert_true(fast->repeat_from < 7);
        }
        assert_same_steps(fast, full);
        if (variant == 1)
            for (int s = 1; s < 7; s++)
                assert_true(fast->steps[s].num_cuda_mallocs > fast->steps[s - 1].num_cuda_mallocs);
        assert_int_equal(fast->n_live_at_peak, full->n_live_at_peak);
        for (int i = 0; i < fast->n_live_at_peak; i++) {
            assert_int_equal(fast->live_at_peak[i].tensor, full->live_at_peak[i].tensor);
            assert_int_equal(fast->live_at_peak[i].bytes, full->live_at_peak[i].bytes);
        }
        assert_int_equal(fast->n_segmap, full->n_segmap);
        engine_result_free(fast);
        engine_result_free(full);
        graph_free(g);
    }
}

/* ---- host allocation failure: fail the k-th allocation, every k ---- */

/* FailHook and fail_alloc: fail_hook.h */

/* Runs g with the engine's and the allocator's host memory failing from the k-th call on, for
 * every k until a run needs fewer calls: each run either succeeds with the figures of a run
 * without the hook or returns VR_ENOMEM with no result; ASan's leak checker (make test) shows
 * that no path leaves memory behind. */
static void fail_every_allocation(const Graph *g, EngineConfig ec, AllocConfig ac) {
    SimResult *want = run_with(g, &ec, &ac);
    /* the engine's own state and result go through its hook, beside the allocator's calls */
    FailHook only_alloc = {0, LONG_MAX}, both = {0, LONG_MAX};
    AllocConfig ah = ac;
    ah.host_alloc = fail_alloc;
    ah.host_ud = &only_alloc;
    engine_result_free(run_with(g, &ec, &ah));
    EngineConfig eh = ec;
    eh.host_alloc = fail_alloc;
    eh.host_ud = ah.host_ud = &both;
    engine_result_free(run_with(g, &eh, &ah));
    assert_true(both.n > only_alloc.n);
    for (long k = 0;; k++) {
        FailHook h = {0, k};
        ec.host_alloc = ac.host_alloc = fail_alloc;
        ec.host_ud = ac.host_ud = &h;
        SimResult *r = (SimResult *)&h; /* must be reset */
        char err[256] = "";
        VrStatus st = engine_run(g, &ec, &ac, &r, err, sizeof err);
        if (st == VR_ENOMEM) {
            assert_null(r);
            assert_true(k < h.n);
            continue;
        }
        assert_int_equal(st, VR_OK);
        assert_non_null(r);
        assert_int_equal(r->n_steps, want->n_steps);
        for (int i = 0; i < r->n_steps; i++) {
            assert_int_equal(r->steps[i].peak_allocated, want->steps[i].peak_allocated);
            assert_int_equal(r->steps[i].peak_reserved, want->steps[i].peak_reserved);
        }
        assert_int_equal(r->n_live_at_peak, want->n_live_at_peak);
        engine_result_free(r);
        if (h.n <= k) break; /* the whole run made fewer calls than k: every path was tried */
    }
    engine_result_free(want);
}

static void test_host_failure(void **state) {
    (void)state;
    Train t = build_train();
    Graph *rep = build_repeating(false, false);
    AllocConfig ac = caching(0);
    /* the timeline's samples and spans; the repeated steps' snapshot and the live set at the
     * peak rebuilt from it; and with the invariants checked after every op */
    EngineConfig ec = {.steps = 3, .record_timeline = true};
    fail_every_allocation(t.g, ec, ac);
    ec.record_timeline = false;
    fail_every_allocation(t.g, ec, ac);
    ec.steps = 7;
    fail_every_allocation(rep, ec, ac);
    ec.check_invariants = true;
    fail_every_allocation(rep, ec, ac);
    graph_free(t.g);
    graph_free(rep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_peak_ideal),
        cmocka_unit_test(test_forward_peak_caching),
        cmocka_unit_test(test_large_segments_caching),
        cmocka_unit_test(test_backward_grad_persists),
        cmocka_unit_test(test_once_and_zero_grad),
        cmocka_unit_test(test_oom_in_second_step),
        cmocka_unit_test(test_oom_caching_small_capacity),
        cmocka_unit_test(test_live_at_peak_before_oom),
        cmocka_unit_test(test_checkpointing_lowers_peak),
        cmocka_unit_test(test_recompute_early_stop),
        cmocka_unit_test(test_host_oom_is_enomem),
        cmocka_unit_test(test_streams_overlap),
        cmocka_unit_test(test_wait_stream),
        cmocka_unit_test(test_host_dispatch_by_class),
        cmocka_unit_test(test_host_compiled_graph),
        cmocka_unit_test(test_contention),
        cmocka_unit_test(test_contention_issued_after),
        cmocka_unit_test(test_cublas_workspaces),
        cmocka_unit_test(test_steps_must_be_positive),
        cmocka_unit_test(test_check_finds_use_after_free),
        cmocka_unit_test(test_host_failure),
        cmocka_unit_test(test_view_keeps_base_alive),
        cmocka_unit_test(test_hold_slots),
        cmocka_unit_test(test_step_start_and_from_step),
        cmocka_unit_test(test_workspace_first),
        cmocka_unit_test(test_workspace_at),
        cmocka_unit_test(test_row_sum_staging_per_device),
        cmocka_unit_test(test_repeated_steps),
    };
    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
