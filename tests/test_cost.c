/* test_cost.c: the calibrated op-time model's memory-access classes: an op takes its bandwidth
 * from the class its kind names, a dtype-specific class ("foreach_fp32") falls back to its
 * generic one where the profile has none, and any other kind uses the generic curve. Fused
 * attention takes its measured FLOP rate (forward and backward curves) where the profile covers
 * its size, the GEMM curve elsewhere; every kernel adds the stream's measured gap. A measured
 * profile's rows become curves (cost_from_profile) with every row read, however many, and a row
 * that cannot be a point is an error naming it; a model's copy prices ops as a fresh one. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cost.h"

/* A model with a flat generic bandwidth of 1 TB/s (1 MiB .. 16 GiB) and a "foreach" class of
 * 3 TB/s (1 GB .. 16 GB). */
static CostModel *model(void) {
    DeviceSpec dev;
    memset(&dev, 0, sizeof dev);
    dev.mem_bw = 4e12;
    const CostPoint *gemm[DT_COUNT] = {0};
    int n_gemm[DT_COUNT] = {0};
    CostPoint mem[2] = {{1 << 20, 1e12}, {16e9, 1e12}};
    CostModel *c = NULL;
    assert_int_equal(cost_new(&dev, gemm, n_gemm, mem, 2, &c), VR_OK);
    CostPoint fe[2] = {{1e9, 3e12}, {16e9, 3e12}};
    assert_int_equal(cost_add_class(c, "foreach", fe, 2), VR_OK);
    return c;
}

/* A one-kernel bf16 op of `kind` in `phase` doing `flops` and moving `bytes`. */
static Op op_of(const char *kind, Phase phase, double flops, double bytes) {
    Op op;
    memset(&op, 0, sizeof op);
    op.name = "op";
    op.kind = kind;
    op.kind_id = op_kind_of(kind);
    op.phase = phase;
    op.flops = flops;
    op.bytes_moved = bytes;
    op.compute_dtype = DT_BF16;
    return op;
}

/* ns the model gives an optimizer op of `kind` moving `bytes` */
static double time_of(const CostModel *c, const char *kind, double bytes) {
    Op op = op_of(kind, PH_OPTIM, 0, bytes);
    return cost_op_ns(c, &op);
}

static void test_class_and_fp32_fallback(void **state) {
    (void)state;
    CostModel *c = model();
    /* 3 GB at 3 TB/s: 1 ms, whether the fp32 kind has a class of its own or not */
    assert_true(fabs(time_of(c, "foreach", 3e9) - 1e6) < 1.0);
    assert_true(fabs(time_of(c, "foreach_fp32", 3e9) - 1e6) < 1.0);
    /* a kind with no class at all: the generic 1 TB/s */
    assert_true(fabs(time_of(c, "nosuch_fp32", 3e9) - 3e6) < 1.0);
    /* once measured, the fp32 class is used */
    CostPoint f32[2] = {{1e9, 4e12}, {16e9, 4e12}};
    assert_int_equal(cost_add_class(c, "foreach_fp32", f32, 2), VR_OK);
    assert_true(fabs(time_of(c, "foreach_fp32", 3e9) - 0.75e6) < 1.0);
    assert_true(fabs(time_of(c, "foreach", 3e9) - 1e6) < 1.0);
    cost_free(c);
}

/* peft's bf16 + fp32 LoRA sum (kind add_mixed): its own class where the profile measured one,
 * else the cast_up class of the same LoadWithCast kernel, never the generic curve */
static void test_add_mixed_falls_back_to_cast_up(void **state) {
    (void)state;
    CostModel *c = model();
    /* neither class: the generic 1 TB/s */
    assert_true(fabs(time_of(c, "add_mixed", 3e9) - 3e6) < 1.0);
    CostPoint up[2] = {{1e9, 1.5e12}, {16e9, 1.5e12}};
    assert_int_equal(cost_add_class(c, "cast_up", up, 2), VR_OK);
    assert_true(fabs(time_of(c, "add_mixed", 3e9) - 2e6) < 1.0);
    CostPoint mixed[2] = {{1e9, 2e12}, {16e9, 2e12}};
    assert_int_equal(cost_add_class(c, "add_mixed", mixed, 2), VR_OK);
    assert_true(fabs(time_of(c, "add_mixed", 3e9) - 1.5e6) < 1.0);
    assert_true(fabs(time_of(c, "cast_up", 3e9) - 2e6) < 1.0);
    cost_free(c);
}

/* cuDNN's layout transforms (Op.layout_bytes): kernels of their own after the op's, at the
 * "layout" (activations) and "layout_filter" classes' rates, added to the op's time; nothing
 * where the profile has no such class. A 1 GB elementwise op at the generic 1 TB/s (1 ms) with
 * 2 GB of activations at 2 TB/s (1 ms) and 0.5 GB of filter at 0.5 TB/s (1 ms): 3 ms. */
static void test_layout_transforms(void **state) {
    (void)state;
    CostModel *c = model();
    Op op = op_of("elementwise", PH_FWD, 0, 1e9);
    op.layout_bytes[0] = 2e9;
    op.layout_bytes[1] = 0.5e9;
    assert_true(fabs(cost_op_ns(c, &op) - 1e6) < 1.0); /* no layout classes: the op alone */
    CostPoint act[1] = {{1e9, 2e12}}, filt[1] = {{1e9, 0.5e12}};
    assert_int_equal(cost_add_class(c, "layout", act, 1), VR_OK);
    assert_true(fabs(cost_op_ns(c, &op) - 2e6) < 1.0); /* the filter's class is still missing */
    assert_int_equal(cost_add_class(c, "layout_filter", filt, 1), VR_OK);
    assert_true(fabs(cost_op_ns(c, &op) - 3e6) < 1.0);
    op.layout_bytes[0] = op.layout_bytes[1] = 0;
    assert_true(fabs(cost_op_ns(c, &op) - 1e6) < 1.0);
    cost_free(c);
}

/* A row-per-block statistics kernel (Op.rowwise_rows, GroupNorm's): each row at the "rowwise"
 * class's per-block rate at the whole tensor's size, rows beyond one wave (528 blocks) in waves
 * of their own; nothing without the class. A class of 4 GB/s up to 8 MiB and 2 GB/s from 32
 * MiB: 32 rows of 128 KiB (4 MiB in all) take 128 KiB / 4 GB/s = 32.768 us on top of the op;
 * 1056 rows (132 MiB, two waves) 2 x 128 KiB / 2 GB/s. */
static void test_rowwise_kernel(void **state) {
    (void)state;
    CostModel *c = model();
    Op op = op_of("elementwise", PH_FWD, 0, 1e9);
    op.rowwise_rows = 32;
    op.rowwise_row_bytes = 131072;
    double base = 1e6;                                 /* 1 GB at the generic 1 TB/s */
    assert_true(fabs(cost_op_ns(c, &op) - base) < 1.0); /* no class: nothing added */
    CostPoint rw[2] = {{8 << 20, 4e9}, {32 << 20, 2e9}};
    assert_int_equal(cost_add_class(c, "rowwise", rw, 2), VR_OK);
    assert_true(fabs(cost_op_ns(c, &op) - (base + 131072 / 4e9 * 1e9)) < 1.0);
    op.rowwise_rows = 1056;
    assert_true(fabs(cost_op_ns(c, &op) - (base + 2 * 131072 / 2e9 * 1e9)) < 1.0);
    cost_free(c);
}

/* ns for an attention op of `flops` in `phase` */
static double attention_time(const CostModel *c, const char *kind, Phase phase, double flops) {
    Op op = op_of(kind, phase, flops, 0);
    return cost_op_ns(c, &op);
}

static void test_attention_rate_curves(void **state) {
    (void)state;
    DeviceSpec dev;
    memset(&dev, 0, sizeof dev);
    dev.mem_bw = 4e12;
    /* GEMMs at a flat 800 TFLOP/s from 1 GFLOP up */
    CostPoint mm[2] = {{1e9, 800e12}, {1e13, 800e12}};
    const CostPoint *gemm[DT_COUNT] = {0};
    int n_gemm[DT_COUNT] = {0};
    gemm[DT_BF16] = mm;
    n_gemm[DT_BF16] = 2;
    CostModel *c = NULL;
    assert_int_equal(cost_new(&dev, gemm, n_gemm, NULL, 0, &c), VR_OK);
    /* no attention curve yet: a forward attention op is GEMM-bound, 400 GFLOP in 0.5 ms */
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_FWD, 400e9) - 0.5e6) < 1.0);
    /* measured: forward 400 TFLOP/s, backward 320, from 100 GFLOP (backward: 250) up */
    CostPoint fwd[2] = {{100e9, 400e12}, {1e12, 400e12}};
    CostPoint bwd[2] = {{250e9, 320e12}, {2.5e12, 320e12}};
    assert_int_equal(cost_add_flops_class(c, "attention_cudnn", fwd, 2), VR_OK);
    assert_int_equal(cost_add_flops_class(c, "attention_cudnn_bwd", bwd, 2), VR_OK);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_FWD, 400e9) - 1e6) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_RECOMPUTE, 400e9) - 1e6) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_BWD, 1e12) - 3.125e6) < 1.0);
    /* smaller than any measured problem: the GEMM path again (10 GFLOP at 800 TFLOP/s) */
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_FWD, 10e9) - 12.5e3) < 1.0);
    /* another backend, not measured: the GEMM path */
    assert_true(fabs(attention_time(c, "attention_flash", PH_FWD, 400e9) - 0.5e6) < 1.0);
    /* a FLOP-rate class is no bandwidth class: an op of that kind moving bytes only is not
     * timed by it */
    Op op = op_of("attention_cudnn", PH_FWD, 0, 4e9);
    assert_true(fabs(cost_op_ns(c, &op) - 1e6) < 1.0); /* the device's 4 TB/s */
    cost_free(c);
}

static void test_kernel_gap(void **state) {
    (void)state;
    CostModel *c = model();
    /* 3 GB at 1 TB/s: 3 ms; three kernels add three gaps of 2 us */
    Op op = op_of("elementwise", PH_FWD, 0, 3e9);
    op.kernels = 3;
    assert_true(fabs(cost_op_ns(c, &op) - 3e6) < 1.0);
    cost_set_kernel_gap_ns(c, 2000);
    assert_true(fabs(cost_op_ns(c, &op) - (3e6 + 6000)) < 1.0);
    /* a tiny op: the empty-kernel floor (5 us a kernel) when it exceeds time plus gaps */
    cost_set_kernel_ns(c, 5000);
    op.bytes_moved = 1e3;
    assert_true(fabs(cost_op_ns(c, &op) - 15000) < 1.0);
    cost_free(c);
}

/* Carrying a profile to another GPU: a GEMM keeps its fraction of peak at the same work per SM,
 * a memory-bound kernel its fraction of bandwidth at the same time per byte; a dtype the target
 * has no path for loses its curve; bad ratios leave the model as it was. */
static void test_carry(void **state) {
    (void)state;
    DeviceSpec dev;
    memset(&dev, 0, sizeof dev);
    dev.mem_bw = 4e12;
    dev.peak_flops[DT_FP32] = 60e12;
    const CostPoint *gemm[DT_COUNT] = {0};
    int n_gemm[DT_COUNT] = {0};
    CostPoint g[2] = {{1e9, 100e12}, {1e12, 800e12}};
    gemm[DT_BF16] = g, n_gemm[DT_BF16] = 2;
    gemm[DT_FP16] = g, n_gemm[DT_FP16] = 2;
    CostPoint mem[2] = {{1 << 20, 1e12}, {16e9, 4e12}};
    CostModel *c = NULL;
    assert_int_equal(cost_new(&dev, gemm, n_gemm, mem, 2, &c), VR_OK);
    double r_ref = cost_gemm_rate(c, DT_BF16, 1e11), m_ref = cost_mem_rate(c, 1e8);
    DeviceSpec tgt = dev;
    tgt.mem_bw = 2e12;
    CostCarry bad = {.sm = 0, .bw = 0.5};
    assert_int_equal(cost_carry(c, &tgt, &bad), VR_EINVAL);
    assert_true(fabs(cost_gemm_rate(c, DT_BF16, 1e11) - r_ref) < 1);
    CostCarry k = {.sm = 0.5, .bw = 0.5};
    k.compute[DT_BF16] = 0.25; /* fp16: no path on the target */
    assert_int_equal(cost_carry(c, &tgt, &k), VR_OK);
    /* half the SMs: the fraction the reference reached at 1e11 FLOPs comes at 5e10 */
    assert_true(fabs(cost_gemm_rate(c, DT_BF16, 5e10) - 0.25 * r_ref) < 1e6);
    /* half the bandwidth: the fraction reached at 1e8 bytes comes at 5e7 */
    assert_true(fabs(cost_mem_rate(c, 5e7) - 0.5 * m_ref) < 1e3);
    /* the empty fp16 curve falls back to the target's datasheet path */
    assert_true(fabs(cost_gemm_rate(c, DT_FP16, 1e11) - 60e12) < 1);
    cost_free(c);
}

/* The target GPU's own memory-bound measurements over a carried model: a class it measured runs at
 * its own rate, not the carried one; a class it did not measure stays carried; its streaming rows
 * replace the generic curve and its gap the stream's gap; a bad row is refused with the row named
 * and the model left pricing as before. */
static void test_measured_here(void **state) {
    (void)state;
    CostModel *c = model(); /* generic 1 TB/s, foreach 3 TB/s */
    CostPoint bc[2] = {{1e8, 2e12}, {16e9, 2e12}};
    assert_int_equal(cost_add_class(c, "broadcast", bc, 2), VR_OK);
    DeviceSpec tgt;
    memset(&tgt, 0, sizeof tgt);
    tgt.mem_bw = 2e12;
    CostCarry k = {.sm = 1, .bw = 0.5};
    assert_int_equal(cost_carry(c, &tgt, &k), VR_OK);
    Op fe = op_of("foreach", PH_OPTIM, 0, 1.5e9), br = op_of("broadcast", PH_FWD, 0, 1e9);
    assert_true(fabs(cost_op_ns(c, &fe) - 1e6) < 1.0);  /* carried: 3 x 0.5 TB/s */
    assert_true(fabs(cost_op_ns(c, &br) - 1e6) < 1.0);  /* carried: 2 x 0.5 TB/s */
    /* measured here: broadcast at 1.6 TB/s, the streaming curve at 0.8, a 3 us gap */
    CostStreamRow ops[2] = {{"broadcast", 0.5, 1600}, {"broadcast", 10.0, 1600}}; /* 0.8-16 GB */
    CostStreamRow stream[2] = {{NULL, 1.0, 800}, {NULL, 20.0, 800}};
    CostProfile own = {.stream = stream, .n_stream = 2, .torch_ops = ops, .n_torch_ops = 2, .kernel_gap_us = 3};
    char why[160];
    assert_int_equal(cost_measured_here(c, &own, why, sizeof why), VR_OK);
    assert_true(fabs(cost_op_ns(c, &br) - (1e9 / 1.6e12 * 1e9 + 3000)) < 1.0);
    assert_true(fabs(cost_op_ns(c, &fe) - (1e6 + 3000)) < 1.0); /* not measured here: carried */
    assert_true(fabs(cost_mem_rate(c, 1e9) - 0.8e12) < 1e3);
    /* a row without a time: refused, naming it */
    CostStreamRow bad[1] = {{"copy", 0, 0}};
    CostProfile worse = {.torch_ops = bad, .n_torch_ops = 1};
    assert_int_equal(cost_measured_here(c, &worse, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "torch_ops"));
    assert_true(fabs(cost_op_ns(c, &br) - (1e9 / 1.6e12 * 1e9 + 3000)) < 1.0);
    cost_free(c);
}

/* An empty profile on a 4 TB/s device: only the tables a test fills. */
static DeviceSpec plain_device(void) {
    DeviceSpec dev;
    memset(&dev, 0, sizeof dev);
    dev.mem_bw = 4e12;
    dev.peak_flops[DT_FP32] = 60e12;
    return dev;
}

/* GEMM rows become each dtype's curve at 2 m n k batch FLOPs; tf32 rows are measured but not
 * read; every row counts, far past any fixed table size (the last of 3000 sets the top). */
static void test_profile_gemm_rows(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    enum { N = 3000 };
    CostGemmRow *rows = calloc(N + 2, sizeof *rows);
    assert_non_null(rows);
    for (int i = 0; i < N; i++)   /* 100 .. 399.9 TFLOP/s as the problem grows */
        rows[i] = (CostGemmRow){"bf16", 64.0 * (i + 1), 1024, 1024, 1, 100 + 0.1 * i, false};
    rows[N] = (CostGemmRow){"tf32", 1 << 20, 1 << 20, 1 << 20, 1, 1e6, false};
    rows[N + 1] = (CostGemmRow){"fp16", 1024, 1024, 1024, 2, 500, false};
    CostProfile p = {.gemm = rows, .n_gemm = N + 2};
    CostModel *c = NULL;
    char why[128];
    assert_int_equal(cost_from_profile(&dev, &p, &c, why, sizeof why), VR_OK);
    double top = 2.0 * 64 * N * 1024 * 1024;
    assert_true(fabs(cost_gemm_rate(c, DT_BF16, top) - (100 + 0.1 * (N - 1)) * 1e12) < 1e6);
    assert_true(fabs(cost_gemm_rate(c, DT_BF16, 4 * top) - (100 + 0.1 * (N - 1)) * 1e12) < 1e6);
    /* one fp16 point at 2 * 1024^3 * 2 FLOPs */
    assert_true(fabs(cost_gemm_rate(c, DT_FP16, 4.0 * 1024 * 1024 * 1024) - 500e12) < 1e6);
    /* fp32 has no row (the tf32 one is not read): the datasheet path */
    assert_true(fabs(cost_gemm_rate(c, DT_FP32, 1e12) - 60e12) < 1);
    cost_free(c);
    free(rows);
}

/* Kernel-time GEMM rows (measure_gemm_kernels.py) supersede the other rows of their dtype up to
 * the largest of them, where a timed call measures its launch; the rows above stay. A grid of
 * 1024^3 at 100 TFLOP/s and 4096^3 at 500, and a kernel row of 1024^3 at 300: 1024^3 runs at
 * 300 (the grid's row is not averaged in), 4096^3 at 500; fp16's grid is untouched. */
static void test_profile_gemm_kernel_rows(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    CostGemmRow rows[4] = {{"bf16", 1024, 1024, 1024, 1, 100, false},
                           {"bf16", 4096, 4096, 4096, 1, 500, false},
                           {"bf16", 1024, 1024, 1024, 1, 300, true},
                           {"fp16", 1024, 1024, 1024, 1, 100, false}};
    CostProfile p = {.gemm = rows, .n_gemm = 4};
    CostModel *c = NULL;
    char why[128];
    assert_int_equal(cost_from_profile(&dev, &p, &c, why, sizeof why), VR_OK);
    double f1 = 2.0 * 1024 * 1024 * 1024, f4 = 64 * f1;
    assert_true(fabs(cost_gemm_rate(c, DT_BF16, f1) - 300e12) < 1e6);
    assert_true(fabs(cost_gemm_rate(c, DT_BF16, f4) - 500e12) < 1e6);
    assert_true(fabs(cost_gemm_rate(c, DT_FP16, f1) - 100e12) < 1e6);
    cost_free(c);
    /* without the kernel row, the grid's own figure */
    p.gemm = (CostGemmRow[]){rows[0], rows[1]};
    p.n_gemm = 2;
    assert_int_equal(cost_from_profile(&dev, &p, &c, why, sizeof why), VR_OK);
    assert_true(fabs(cost_gemm_rate(c, DT_BF16, f1) - 100e12) < 1e6);
    cost_free(c);
}

/* A row that cannot be a point is an error naming its table and row, and builds nothing. */
static void test_profile_bad_rows(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    char why[128];
    CostModel *c = (CostModel *)&dev; /* overwritten: NULL on failure */
    CostGemmRow g[2] = {{"bf16", 1024, 1024, 1024, 1, 300, false}, {"bf16", 1024, 0, 1024, 1, 300, false}};
    CostProfile p = {.gemm = g, .n_gemm = 2};
    assert_int_equal(cost_from_profile(&dev, &p, &c, why, sizeof why), VR_EINVAL);
    assert_null(c);
    assert_non_null(strstr(why, "gemm row 2"));
    g[1] = (CostGemmRow){"int3", 1024, 1024, 1024, 1, 300, false};
    assert_int_equal(cost_from_profile(&dev, &p, &c, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "gemm row 2: a dtype"));
    g[1] = (CostGemmRow){NULL, 1024, 1024, 1024, 1, 300, false};
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_EINVAL);
    CostStreamRow s[2] = {{NULL, 1, 1000}, {NULL, 0, 1000}};
    CostProfile ps = {.stream = s, .n_stream = 2};
    assert_int_equal(cost_from_profile(&dev, &ps, &c, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "copy/elementwise row 2"));
    CostStreamRow o[2] = {{"broadcast", 1, 1000}, {NULL, 1, 1000}};
    CostProfile po = {.torch_ops = o, .n_torch_ops = 2};
    assert_int_equal(cost_from_profile(&dev, &po, &c, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "torch_ops row 2: no class"));
    CostSdpaRow a = {.batch = 1, .heads = 32, .seq_q = 2048, .seq_k = 2048, .dim = 128};
    a.fwd_ms[COST_SDPA_FLASH] = 0.5, a.fwdbwd_ms[COST_SDPA_FLASH] = 0.4;
    CostProfile pa = {.sdpa = &a, .n_sdpa = 1};
    assert_int_equal(cost_from_profile(&dev, &pa, &c, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "sdpa row 1"));
    assert_null(c);
}

/* Streaming rows: copy and elementwise make the generic curve (gbps * ms bytes at gbps); each
 * torch_ops class its own; the kernel floor and gap come from the profile's figures. */
static void test_profile_stream_rows(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    CostStreamRow s[2] = {{NULL, 1, 1000}, {NULL, 10, 2000}};  /* 1 GB at 1 TB/s, 20 GB at 2 */
    CostStreamRow o[3] = {{"broadcast", 1, 3000}, {"cast_up", 1, 500}, {"broadcast", 2, 3000}};
    CostProfile p = {.stream = s, .n_stream = 2, .torch_ops = o, .n_torch_ops = 3,
                     .launch_device_us = 2, .kernel_gap_us = 1.5};
    CostModel *c = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    assert_true(fabs(cost_mem_rate(c, 1e9) - 1e12) < 1);
    assert_true(fabs(cost_mem_rate(c, 20e9) - 2e12) < 1);
    /* 6 GB broadcast at 3 TB/s: 2 ms, plus one gap of 1.5 us */
    Op op = op_of("broadcast", PH_FWD, 0, 6e9);
    assert_true(fabs(cost_op_ns(c, &op) - (2e6 + 1500)) < 1.0);
    op = op_of("cast_up", PH_FWD, 0, 0.5e9);
    assert_true(fabs(cost_op_ns(c, &op) - (1e6 + 1500)) < 1.0);
    /* an empty op: the 2 us floor */
    op = op_of("elementwise", PH_FWD, 0, 0);
    assert_true(fabs(cost_op_ns(c, &op) - 2000) < 1.0);
    cost_free(c);
}

/* sdpa rows: FLOPs 4 b h sq sk d, halved when causal; the backward counts 2.5 times the
 * forward's FLOPs over fwdbwd - fwd; a call timed under 0.1 ms is left out. */
static void test_profile_sdpa_rows(void **state) {
    (void)state;
    assert_true(fabs(cost_sdpa_flops(1, 32, 2048, 2048, 128, false) - 4.0 * 32 * 2048 * 2048 * 128) < 1);
    assert_true(fabs(cost_sdpa_flops(2, 32, 2048, 2048, 128, true) - 4.0 * 32 * 2048 * 2048 * 128) < 1);
    assert_string_equal(cost_sdpa_backend(COST_SDPA_EFFICIENT), "efficient");
    assert_null(cost_sdpa_backend(COST_SDPA_COUNT));
    DeviceSpec dev = plain_device();
    CostSdpaRow r[2] = {{.batch = 4, .heads = 32, .seq_q = 2048, .seq_k = 2048, .dim = 128, .causal = true},
                        {.batch = 1, .heads = 8, .seq_q = 256, .seq_k = 256, .dim = 64}};
    r[0].fwd_ms[COST_SDPA_CUDNN] = 0.3, r[0].fwdbwd_ms[COST_SDPA_CUDNN] = 1.1;
    r[1].fwd_ms[COST_SDPA_CUDNN] = 0.01, r[1].fwdbwd_ms[COST_SDPA_CUDNN] = 0.03; /* launch-bound */
    CostProfile p = {.sdpa = r, .n_sdpa = 2};
    CostModel *c = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    double f = cost_sdpa_flops(4, 32, 2048, 2048, 128, true);
    /* the one point read: forward f in 0.3 ms, backward 2.5 f in 0.8 ms, at every larger size */
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_FWD, f) - 0.3e6) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_BWD, 2.5 * f) - 0.8e6) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_FWD, 2 * f) - 0.6e6) < 1.0);
    /* flash was not timed: its kind has no curve and takes the GEMM path (fp32 datasheet here
     * for want of a bf16 figure: 60 TFLOP/s) */
    assert_true(fabs(attention_time(c, "attention_flash", PH_FWD, f) - f / 60e12 * 1e9) < 1.0);
    cost_free(c);
}

/* Kernel-time sdpa rows (measure_sdpa_kernels.py): read however short, the single-call rows
 * beside them are not, rows with fewer keys than queries make the "_cross" curves, masked rows
 * the "_masked" ones and masked rows of unaligned keys the "_masked_unaligned" ones; such a kind
 * without its curves takes the next (unaligned -> masked -> its backend's). */
static void test_profile_sdpa_kernel_rows(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    CostSdpaRow r[3] = {{.batch = 1, .heads = 20, .seq_q = 1024, .seq_k = 1024, .dim = 64, .kernel_time = true},
                        {.batch = 1, .heads = 10, .seq_q = 4096, .seq_k = 77, .dim = 64, .kernel_time = true},
                        {.batch = 1, .heads = 20, .seq_q = 1024, .seq_k = 1024, .dim = 64}};
    r[0].fwd_ms[COST_SDPA_CUDNN] = 0.02, r[0].fwdbwd_ms[COST_SDPA_CUDNN] = 0.08;   /* 60 us backward */
    r[1].fwd_ms[COST_SDPA_CUDNN] = 0.01, r[1].fwdbwd_ms[COST_SDPA_CUDNN] = 0.12;   /* 110 us backward */
    r[2].fwd_ms[COST_SDPA_CUDNN] = 0.25, r[2].fwdbwd_ms[COST_SDPA_CUDNN] = 0.60;   /* superseded */
    CostProfile p = {.sdpa = r, .n_sdpa = 3};
    CostModel *c = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    double fs = cost_sdpa_flops(1, 20, 1024, 1024, 64, false);
    double fx = cost_sdpa_flops(1, 10, 4096, 77, 64, false);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_FWD, fs) - 20e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_BWD, 2.5 * fs) - 60e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn_cross", PH_FWD, fx) - 10e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn_cross", PH_BWD, 2.5 * fx) - 110e3) < 1.0);
    /* no masked rows: a masked op takes the backend's plain curve */
    assert_true(fabs(attention_time(c, "attention_cudnn_masked", PH_FWD, fs) - 20e3) < 1.0);
    cost_free(c);
    /* a masked row makes the "_masked" curves; the plain curve keeps its own point */
    CostSdpaRow m[2] = {r[0], {.batch = 1, .heads = 20, .seq_q = 1024, .seq_k = 1024, .dim = 64,
                               .kernel_time = true, .masked = true}};
    m[1].fwd_ms[COST_SDPA_CUDNN] = 0.05, m[1].fwdbwd_ms[COST_SDPA_CUDNN] = 0.2;
    CostProfile pm = {.sdpa = m, .n_sdpa = 2};
    assert_int_equal(cost_from_profile(&dev, &pm, &c, NULL, 0), VR_OK);
    assert_true(fabs(attention_time(c, "attention_cudnn_masked", PH_FWD, fs) - 50e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn_masked", PH_BWD, 2.5 * fs) - 150e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn", PH_FWD, fs) - 20e3) < 1.0);
    /* no row of unaligned keys: an unaligned masked op takes the "_masked" curves */
    assert_true(fabs(attention_time(c, "attention_cudnn_masked_unaligned", PH_FWD, fs) - 50e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn_masked_unaligned", PH_BWD, 2.5 * fs) - 150e3) < 1.0);
    cost_free(c);
    /* a masked row of keys not a multiple of 8 makes the "_masked_unaligned" curves and leaves
     * the aligned ones as they were */
    CostSdpaRow u[3] = {r[0], m[1], {.batch = 1, .heads = 20, .seq_q = 1025, .seq_k = 1025, .dim = 64,
                                     .kernel_time = true, .masked = true}};
    u[2].fwd_ms[COST_SDPA_CUDNN] = 0.12, u[2].fwdbwd_ms[COST_SDPA_CUDNN] = 0.27;
    u[2].fwd_ms[COST_SDPA_EFFICIENT] = 0.2, u[2].fwdbwd_ms[COST_SDPA_EFFICIENT] = 0.5;
    CostProfile pu = {.sdpa = u, .n_sdpa = 3};
    assert_int_equal(cost_from_profile(&dev, &pu, &c, NULL, 0), VR_OK);
    double fu = cost_sdpa_flops(1, 20, 1025, 1025, 64, false);
    assert_true(fabs(attention_time(c, "attention_cudnn_masked_unaligned", PH_FWD, fu) - 120e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn_masked_unaligned", PH_BWD, 2.5 * fu) - 150e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_cudnn_masked", PH_FWD, fs) - 50e3) < 1.0);
    /* the longest class name, the memory-efficient backend's unaligned backward, is made */
    assert_true(fabs(attention_time(c, "attention_mem_efficient_masked_unaligned", PH_BWD, 2.5 * fu) - 300e3) < 1.0);
    cost_free(c);
    /* flex rows: head dim 128 makes the plain flex curves, 64 the "_d64" ones; a "_d64" op
     * without rows of its own takes the plain curve */
    CostSdpaRow flx[2] = {{.batch = 1, .heads = 32, .seq_q = 2048, .seq_k = 2048, .dim = 128, .causal = true,
                          .kernel_time = true},
                         {.batch = 1, .heads = 32, .seq_q = 4096, .seq_k = 4096, .dim = 64, .causal = true,
                          .kernel_time = true}};
    flx[0].fwd_ms[COST_SDPA_FLEX] = 0.136, flx[0].fwdbwd_ms[COST_SDPA_FLEX] = 0.45;
    flx[1].fwd_ms[COST_SDPA_FLEX] = 0.334, flx[1].fwdbwd_ms[COST_SDPA_FLEX] = 1.02;
    CostProfile pf = {.sdpa = flx, .n_sdpa = 1};
    double f128 = cost_sdpa_flops(1, 32, 2048, 2048, 128, true), f64 = cost_sdpa_flops(1, 32, 4096, 4096, 64, true);
    assert_int_equal(cost_from_profile(&dev, &pf, &c, NULL, 0), VR_OK);
    assert_true(fabs(attention_time(c, "attention_flex", PH_FWD, f128) - 136e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_flex_d64", PH_FWD, f128) - 136e3) < 1.0);
    cost_free(c);
    pf.n_sdpa = 2;
    assert_int_equal(cost_from_profile(&dev, &pf, &c, NULL, 0), VR_OK);
    assert_true(fabs(attention_time(c, "attention_flex_d64", PH_FWD, f64) - 334e3) < 1.0);
    assert_true(fabs(attention_time(c, "attention_flex", PH_FWD, f128) - 136e3) < 1.0);
    cost_free(c);
    /* without cross rows, a cross op is priced by its backend's curve */
    p.n_sdpa = 1;
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    assert_true(fabs(attention_time(c, "attention_cudnn_cross", PH_FWD, fs) - 20e3) < 1.0);
    cost_free(c);
}

/* The GEMM op of a LoRA adapter (Op.lora_rank) of matrix role, rank r, fp32, at flops, moving
 * 4 MB (1 us at the test device's 4 TB/s). */
static double lora_time(const CostModel *c, char role, int r, Phase phase, int gemms, double flops) {
    Op op = op_of("mm", phase, flops, 4e6);
    op.compute_dtype = DT_FP32;
    op.lora_rank = r;
    op.lora_role = role;
    op.gemms = gemms;
    return cost_op_ns(c, &op);
}

/* lora_gemm rows: a curve per dtype, GEMM and rank at 2 t d r FLOPs; a rank between two measured
 * ones takes the log-linear mean of their times, one outside them (or a dtype without rows) the
 * GEMM path; a backward op adds its data and weight gradients, or takes the weight's alone when
 * it runs one GEMM; rows that are not points are errors naming the row. */
static void test_profile_lora_rows(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    CostLoraRow r[5] = {{"fp32", "A_fwd", 8, 8192, 2048, 0.040},    /* 0.27 GFLOP in 40 us */
                        {"fp32", "A_fwd", 32, 8192, 2048, 0.090},   /* 1.07 GFLOP in 90 us */
                        {"fp32", "A_dgrad", 8, 8192, 2048, 0.030},
                        {"fp32", "A_wgrad", 8, 8192, 2048, 0.050},
                        {"fp32", "B_fwd", 8, 8192, 2048, 0.020}};
    CostProfile p = {.lora = r, .n_lora = 5};
    CostModel *c = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    double f8 = 2.0 * 8192 * 2048 * 8, f32 = 4 * f8;
    assert_true(fabs(lora_time(c, 'A', 8, PH_FWD, 0, f8) - 40e3) < 1.0);
    assert_true(fabs(lora_time(c, 'A', 8, PH_RECOMPUTE, 0, f8) - 40e3) < 1.0);
    assert_true(fabs(lora_time(c, 'B', 8, PH_FWD, 0, f8) - 20e3) < 1.0);
    assert_true(fabs(lora_time(c, 'A', 32, PH_FWD, 0, f32) - 90e3) < 1.0);
    /* rank 16, half way in log rank: at the same FLOPs the rank-8 curve gives 80 us and the
     * rank-32 one 45 us (a curve of one point keeps its rate at every size) ... */
    double f16 = 2 * f8, want = exp(0.5 * (log(80e3) + log(45e3)));
    assert_true(fabs(lora_time(c, 'A', 16, PH_FWD, 0, f16) - want) < 1.0);
    /* ... rank 64 lies outside the measured ranks: the GEMM path (60 TFLOP/s fp32 datasheet) */
    assert_true(fabs(lora_time(c, 'A', 64, PH_FWD, 0, 8 * f8) - 8 * f8 / 60e12 * 1e9) < 1.0);
    /* backward: data and weight gradients, f8 each; the weight's alone with one GEMM */
    assert_true(fabs(lora_time(c, 'A', 8, PH_BWD, 2, 2 * f8) - 80e3) < 1.0);
    assert_true(fabs(lora_time(c, 'A', 8, PH_BWD, 1, f8) - 50e3) < 1.0);
    /* B has no gradient rows: the GEMM path */
    assert_true(fabs(lora_time(c, 'B', 8, PH_BWD, 2, 2 * f8) - 2 * f8 / 60e12 * 1e9) < 1.0);
    /* an op without lora_rank is a plain GEMM */
    Op plain = op_of("mm", PH_FWD, f8, 4e6);
    plain.compute_dtype = DT_FP32;
    assert_true(fabs(cost_op_ns(c, &plain) - f8 / 60e12 * 1e9) < 1.0);
    /* an adapter GEMM takes at least its bytes' time: 1e9 bytes at 4 TB/s */
    Op heavy = op_of("mm", PH_FWD, f8, 1e9);
    heavy.compute_dtype = DT_FP32, heavy.lora_rank = 8, heavy.lora_role = 'A';
    assert_true(fabs(cost_op_ns(c, &heavy) - 250e3) < 1.0);
    /* carried to half the SMs and a quarter of the fp32 peak: the rank-8 fraction at f8 comes at
     * f8 / 2, at a quarter of the rate */
    DeviceSpec tgt = dev;
    CostCarry k = {.sm = 0.5, .bw = 0.5};
    k.compute[DT_FP32] = 0.25;
    assert_int_equal(cost_carry(c, &tgt, &k), VR_OK);
    assert_true(fabs(lora_time(c, 'A', 8, PH_FWD, 0, f8 / 2) - 80e3) < 1.0);
    /* a target without an fp32 path: the curves are emptied, and the GEMM path prices the op */
    k.compute[DT_FP32] = 0;
    assert_int_equal(cost_carry(c, &tgt, &k), VR_OK);
    Op gone = op_of("mm", PH_FWD, f8, 4e6);
    gone.compute_dtype = DT_FP32;
    double generic = cost_op_ns(c, &gone);
    assert_true(generic > 0 && fabs(lora_time(c, 'A', 8, PH_FWD, 0, f8) - generic) < 1.0);
    cost_free(c);
    char why[160];
    CostLoraRow bad[2] = {{"fp32", "C_fwd", 8, 8192, 2048, 0.040}, {"fp32", "A_fwd", 8, 8192, 2048, 0}};
    p = (CostProfile){.lora = bad, .n_lora = 1};
    assert_int_equal(cost_from_profile(&dev, &p, &c, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "lora_gemm row 1"));
    p.lora = bad + 1;
    assert_int_equal(cost_from_profile(&dev, &p, &c, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "must be > 0"));
}

/* A grouped GEMM op (Op.gmm_experts) of a mixture of experts: 8 experts, rows pairs, each
 * (k 4096 -> n 28672), weights passed transposed ("nt"), in phase, with backward gradients grads. */
static Op grouped_op(Phase phase, double rows, int grads) {
    Op op = op_of("mm", phase, 2 * rows * 28672 * 4096.0 * (phase == PH_BWD ? 2 : 1), 2e9);
    op.gmm_experts = 8, op.gmm_rows = rows, op.gmm_n = 28672, op.gmm_k = 4096, op.gmm_grads = grads;
    return op;
}

/* grouped_mm and moe_index rows (cost_set_moe): a grouped GEMM of a measured shape takes the
 * balanced rows' time (interpolated in log pairs between rows; below the smallest, its time;
 * above the largest, its rate), its backward the sum of the gradients it makes; the rows of a
 * record's routing and the "bwd" cross-check are not read; a shape, layout or expert count the
 * table lacks takes the GEMM path as before; the index ops take their curve's time, a gather's
 * backward IndexBackward0's and a gather of repeating indices the duplicate curve; a model's copy
 * keeps them, bad rows are errors naming the row. */
static void test_moe_rows(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    CostModel *c = NULL;
    CostProfile p = {0};
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    Op fwd = grouped_op(PH_FWD, 1024, 3);
    double gemm_path = cost_op_ns(c, &fwd);   /* before any table: the GEMM path */
    CostGroupedRow g[8] = {
        {"fwd", "nt", "balanced", 8, 512, 28672, 4096, 0.30},
        {"fwd", "nt", "balanced", 8, 2048, 28672, 4096, 0.80},
        {"dgrad", "nt", "balanced", 8, 512, 28672, 4096, 0.25},
        {"wgrad", "nt", "balanced", 8, 512, 28672, 4096, 0.35},
        {"bwd", "nt", "balanced", 8, 512, 28672, 4096, 9.0},               /* not read */
        {"fwd", "nt", "record:gen4-mixtral-l2-b1", 8, 1024, 28672, 4096, 9.0}, /* not read */
        {"fwd", "nn", "balanced", 8, 512, 28672, 4096, 0.50},
        {"fwd", "nt", "balanced", 16, 512, 28672, 4096, 0.70}};
    CostMoeIndexRow ix[5] = {{"sort", 4096, 0, 0, 0.010},
                             {"index_fwd", 1024, 512, 4096, 0.020},   /* repeating: 512 < 1024 */
                             {"index_bwd", 1024, 512, 4096, 0.030},
                             {"index_fwd", 1024, 1024, 4096, 0.012},
                             {"index_bwd", 1024, 1024, 4096, 0.016}};
    assert_int_equal(cost_set_moe(c, g, 8, ix, 5, NULL, 0), VR_OK);
    Op at512 = grouped_op(PH_FWD, 512, 3);
    assert_true(fabs(cost_op_ns(c, &at512) - 300e3) < 1.0);
    /* half way in log pairs: the mean of 512 / 0.3 ms and 2048 / 0.8 ms pairs a second */
    double rate = 0.5 * (512 / 0.30e-3 + 2048 / 0.80e-3);
    assert_true(fabs(cost_op_ns(c, &fwd) - 1024 / rate * 1e9) < 1.0);
    assert_true(cost_op_ns(c, &fwd) != gemm_path);
    Op small = grouped_op(PH_FWD, 128, 3), big = grouped_op(PH_FWD, 8192, 3);
    assert_true(fabs(cost_op_ns(c, &small) - 300e3) < 1.0);
    assert_true(fabs(cost_op_ns(c, &big) - 4 * 800e3) < 1.0);
    Op rec = grouped_op(PH_RECOMPUTE, 512, 3);
    assert_true(fabs(cost_op_ns(c, &rec) - 300e3) < 1.0);
    /* backward: both gradients, the input's alone, the weight's alone */
    Op b3 = grouped_op(PH_BWD, 512, 3), b1 = grouped_op(PH_BWD, 512, 1), b2 = grouped_op(PH_BWD, 512, 2);
    assert_true(fabs(cost_op_ns(c, &b3) - 600e3) < 1.0);
    assert_true(fabs(cost_op_ns(c, &b1) - 250e3) < 1.0);
    assert_true(fabs(cost_op_ns(c, &b2) - 350e3) < 1.0);
    /* the other layout and expert count have their own rows */
    Op nn = grouped_op(PH_FWD, 512, 3), e16 = grouped_op(PH_FWD, 512, 3);
    nn.gmm_nn = true, e16.gmm_experts = 16;
    assert_true(fabs(cost_op_ns(c, &nn) - 500e3) < 1.0);
    assert_true(fabs(cost_op_ns(c, &e16) - 700e3) < 1.0);
    /* a shape without rows (and a layout's backward without rows): the GEMM path, as before */
    Op other = grouped_op(PH_FWD, 1024, 3);
    other.gmm_experts = 32;
    Op plain_other = other;
    plain_other.gmm_experts = 0;
    assert_true(fabs(cost_op_ns(c, &other) - cost_op_ns(c, &plain_other)) < 1e-6);
    Op nnb = grouped_op(PH_BWD, 512, 3), plain_nnb = nnb;
    nnb.gmm_nn = true, plain_nnb.gmm_experts = 0;
    assert_true(fabs(cost_op_ns(c, &nnb) - cost_op_ns(c, &plain_nnb)) < 1e-6);
    /* the index ops */
    Op sort = op_of("elementwise", PH_FWD, 0, 65536);
    sort.moe_index = COST_MOE_SORT, sort.moe_size = 4096;
    assert_true(fabs(cost_op_ns(c, &sort) - 10e3) < 1.0);
    Op gat = op_of("gather", PH_FWD, 0, 1e7);
    gat.moe_index = COST_MOE_GATHER, gat.moe_size = 1024 * 4096.0, gat.moe_dup = true;
    assert_true(fabs(cost_op_ns(c, &gat) - 20e3) < 1.0);
    gat.phase = PH_BWD;
    assert_true(fabs(cost_op_ns(c, &gat) - 30e3) < 1.0);
    gat.moe_dup = false;
    assert_true(fabs(cost_op_ns(c, &gat) - 16e3) < 1.0);
    gat.phase = PH_FWD;
    assert_true(fabs(cost_op_ns(c, &gat) - 12e3) < 1.0);
    /* an index op the table has no rows of: its kind's class, as before */
    Op hist = op_of("elementwise", PH_FWD, 0, 65536), plain_hist = hist;
    hist.moe_index = COST_MOE_HISTC, hist.moe_size = 4096;
    assert_true(fabs(cost_op_ns(c, &hist) - cost_op_ns(c, &plain_hist)) < 1e-6);
    /* a copy keeps the curves */
    CostModel *k = NULL;
    assert_int_equal(cost_clone(c, &dev, &k), VR_OK);
    assert_true(cost_op_ns(k, &fwd) == cost_op_ns(c, &fwd));
    assert_true(cost_op_ns(k, &gat) == cost_op_ns(c, &gat));
    cost_free(k);
    /* bad rows: an error naming the table and row, the model as it was */
    char why[160];
    CostGroupedRow bad[3] = {{"fwdd", "nt", "balanced", 8, 512, 28672, 4096, 0.3},
                             {"fwd", "tn", "balanced", 8, 512, 28672, 4096, 0.3},
                             {"fwd", "nt", "balanced", 8, 512, 28672, 4096, 0}};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cost_set_moe(c, bad + i, 1, NULL, 0, why, sizeof why), VR_EINVAL);
        assert_non_null(strstr(why, "grouped_mm row 1"));
    }
    CostMoeIndexRow badix[1] = {{"scatter", 4096, 0, 0, 0.01}};
    assert_int_equal(cost_set_moe(c, NULL, 0, badix, 1, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "moe_index row 1"));
    assert_true(fabs(cost_op_ns(c, &at512) - 300e3) < 1.0);
    cost_free(c);
}

/* A clone (cost_clone) prices every op as a model made afresh from the same rows on the clone's
 * device, to the bit, carried or not, and carrying it leaves the original as it was. */
static void test_clone(void **state) {
    (void)state;
    DeviceSpec dev = plain_device(), other = plain_device();
    other.mem_bw = 2e12;
    other.peak_flops[DT_FP32] = 30e12;
    other.peak_flops[DT_FP16] = 200e12;
    CostGemmRow g[3] = {{"bf16", 1024, 1024, 1024, 1, 300, false}, {"bf16", 8192, 8192, 8192, 1, 700, false},
                        {"bf16", 256, 256, 256, 1, 20, true}};
    CostStreamRow s[2] = {{NULL, 1, 1000}, {NULL, 10, 2000}};
    CostStreamRow o[3] = {{"broadcast", 1, 3000}, {"cast_up", 1, 500}, {"broadcast", 2, 2900}};
    CostSdpaRow r[1] = {{.batch = 4, .heads = 32, .seq_q = 2048, .seq_k = 2048, .dim = 128, .causal = true}};
    r[0].fwd_ms[COST_SDPA_FLASH] = 0.3, r[0].fwdbwd_ms[COST_SDPA_FLASH] = 1.1;
    CostLoraRow l[2] = {{"fp32", "A_fwd", 8, 8192, 2048, 0.040}, {"fp32", "A_fwd", 32, 8192, 2048, 0.090}};
    CostProfile p = {.gemm = g, .n_gemm = 3, .stream = s, .n_stream = 2, .torch_ops = o, .n_torch_ops = 3,
                     .sdpa = r, .n_sdpa = 1, .lora = l, .n_lora = 2, .launch_device_us = 2, .kernel_gap_us = 1.5};
    CostModel *a = NULL, *fresh = NULL, *k = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &a, NULL, 0), VR_OK);
    assert_int_equal(cost_from_profile(&other, &p, &fresh, NULL, 0), VR_OK);
    assert_int_equal(cost_clone(a, &other, &k), VR_OK);
    Op ops[7] = {op_of("mm", PH_FWD, 3e12, 1e8), op_of("mm", PH_BWD, 1e9, 1e6), op_of("broadcast", PH_FWD, 0, 6e9),
                 op_of("cast_up", PH_FWD, 0, 1e5), op_of("elementwise", PH_FWD, 0, 3e9),
                 op_of("attention_flash", PH_FWD, 2e12, 1e8), op_of("mm", PH_FWD, 1e12, 1e6)};
    ops[0].compute_dtype = DT_FP16; /* no fp16 rows: the device's datasheet */
    ops[6].compute_dtype = DT_FP32, ops[6].lora_rank = 16, ops[6].lora_role = 'A';
    double before[7];
    for (int i = 0; i < 7; i++) {
        before[i] = cost_op_ns(a, &ops[i]);
        assert_true(cost_op_ns(k, &ops[i]) == cost_op_ns(fresh, &ops[i]));
    }
    assert_true(cost_op_ns(k, &ops[0]) != before[0]); /* the clone's device, not the original's */
    CostCarry carry = {.sm = 0.5, .bw = 0.7};
    carry.compute[DT_BF16] = 0.4, carry.compute[DT_FP32] = 0.3;
    assert_int_equal(cost_carry(k, &other, &carry), VR_OK);
    assert_int_equal(cost_carry(fresh, &other, &carry), VR_OK);
    for (int i = 0; i < 7; i++) {
        assert_true(cost_op_ns(k, &ops[i]) == cost_op_ns(fresh, &ops[i]));
        assert_true(cost_op_ns(a, &ops[i]) == before[i]);
    }
    cost_free(a);
    cost_free(fresh);
    cost_free(k);
}

/* A fused-attention backend's own ratio (CostCarry.attention) carries that backend's curves,
 * forward and backward, in place of bf16's; GEMMs and the other backends carry by bf16's, and a
 * negative ratio is refused. */
static void test_carry_attention_ratio(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    CostGemmRow g[2] = {{"bf16", 1024, 1024, 1024, 1, 300, false}, {"bf16", 8192, 8192, 8192, 1, 700, false}};
    CostSdpaRow r[1] = {{.batch = 4, .heads = 32, .seq_q = 2048, .seq_k = 2048, .dim = 128, .causal = true}};
    r[0].fwd_ms[COST_SDPA_FLASH] = 0.3, r[0].fwdbwd_ms[COST_SDPA_FLASH] = 1.1;
    r[0].fwd_ms[COST_SDPA_CUDNN] = 0.2, r[0].fwdbwd_ms[COST_SDPA_CUDNN] = 0.8;
    CostProfile p = {.gemm = g, .n_gemm = 2, .sdpa = r, .n_sdpa = 1};
    CostModel *plain = NULL, *arch = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &plain, NULL, 0), VR_OK);
    assert_int_equal(cost_from_profile(&dev, &p, &arch, NULL, 0), VR_OK);
    CostCarry k = {.sm = 1, .bw = 0.5};
    k.compute[DT_BF16] = 0.3;
    CostCarry bad = k;
    bad.attention[COST_SDPA_FLASH] = -1;
    assert_int_equal(cost_carry(arch, &dev, &bad), VR_EINVAL);
    assert_int_equal(cost_carry(plain, &dev, &k), VR_OK);
    k.attention[COST_SDPA_FLASH] = 0.6; /* twice bf16's 0.3 */
    assert_int_equal(cost_carry(arch, &dev, &k), VR_OK);
    Op flash_f = op_of("attention_flash", PH_FWD, 2e12, 1e8), flash_b = op_of("attention_flash", PH_BWD, 4e12, 2e8);
    Op cudnn = op_of("attention_cudnn", PH_FWD, 2e12, 1e8), mm = op_of("mm", PH_FWD, 1e12, 1e7);
    /* twice the rate: half the time, less the per-kernel floor both keep */
    assert_true(cost_op_ns(arch, &flash_f) < 0.51 * cost_op_ns(plain, &flash_f));
    assert_true(cost_op_ns(arch, &flash_b) < 0.51 * cost_op_ns(plain, &flash_b));
    assert_true(cost_op_ns(arch, &cudnn) == cost_op_ns(plain, &cudnn));
    assert_true(cost_op_ns(arch, &mm) == cost_op_ns(plain, &mm));
    cost_free(plain);
    cost_free(arch);
}

/* Fused attention measured on another GPU than the profile's (cost_measured_sdpa): its rows
 * replace the carried curves of the backends they time, forward and backward, at their own
 * times past the reference's largest row (which the carried curve holds flat); a backend they
 * lack stays carried; carried again by a rate ratio they take that ratio; a row that is not
 * kernel time is refused before anything changes. */
static void test_measured_sdpa(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    CostSdpaRow ref[1] = {{.batch = 1, .heads = 32, .seq_q = 8192, .seq_k = 8192, .dim = 128, .causal = true,
                           .kernel_time = true}};
    ref[0].fwd_ms[COST_SDPA_FLASH] = 1.7, ref[0].fwdbwd_ms[COST_SDPA_FLASH] = 6.4;
    ref[0].fwd_ms[COST_SDPA_CUDNN] = 0.9, ref[0].fwdbwd_ms[COST_SDPA_CUDNN] = 3.4;
    CostProfile p = {.sdpa = ref, .n_sdpa = 1};
    CostModel *c = NULL, *d = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    assert_int_equal(cost_from_profile(&dev, &p, &d, NULL, 0), VR_OK);
    CostCarry k = {.sm = 1, .bw = 1};
    k.compute[DT_BF16] = 0.5;
    assert_int_equal(cost_carry(c, &dev, &k), VR_OK);
    assert_int_equal(cost_carry(d, &dev, &k), VR_OK);
    double f8 = cost_sdpa_flops(1, 32, 8192, 8192, 128, true), f32 = cost_sdpa_flops(1, 32, 32768, 32768, 128, true);
    Op fw = op_of("attention_flash", PH_FWD, f32, 1e8), bw = op_of("attention_flash", PH_BWD, 2.5 * f32, 2e8);
    Op cu = op_of("attention_cudnn", PH_FWD, f8, 1e8);
    /* carried: the 8192 row's rate held flat to 32768 (16 x its FLOPs), at half the rate */
    assert_true(fabs(cost_op_ns(c, &fw) - 16 * 1.7e6 / 0.5) < 1.0);
    double cudnn_carried = cost_op_ns(c, &cu);
    assert_true(fabs(cudnn_carried - 0.9e6 / 0.5) < 1.0);
    CostSdpaRow own[2] = {ref[0], ref[0]};
    own[0].fwd_ms[COST_SDPA_CUDNN] = own[0].fwdbwd_ms[COST_SDPA_CUDNN] = 0; /* flash only */
    own[1].seq_q = own[1].seq_k = 32768;
    own[1].fwd_ms[COST_SDPA_CUDNN] = own[1].fwdbwd_ms[COST_SDPA_CUDNN] = 0;
    own[1].fwd_ms[COST_SDPA_FLASH] = 24, own[1].fwdbwd_ms[COST_SDPA_FLASH] = 92;
    char why[160];
    CostSdpaRow timed = own[1];
    timed.kernel_time = false;
    assert_int_equal(cost_measured_sdpa(c, &timed, 1, 1, 1, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "sdpa row 1"));
    assert_true(fabs(cost_op_ns(c, &fw) - 16 * 1.7e6 / 0.5) < 1.0); /* unchanged */
    assert_int_equal(cost_measured_sdpa(c, own, 2, 1, 0, why, sizeof why), VR_EINVAL);
    assert_int_equal(cost_measured_sdpa(c, own, 2, 1, 1, why, sizeof why), VR_OK);
    assert_true(fabs(cost_op_ns(c, &fw) - 24e6) < 1.0);
    assert_true(fabs(cost_op_ns(c, &bw) - 68e6) < 1.0);
    assert_true(cost_op_ns(c, &cu) == cudnn_carried);
    /* the same rows carried at 0.8 of their GPU's rate */
    assert_int_equal(cost_measured_sdpa(d, own, 2, 1, 0.8, why, sizeof why), VR_OK);
    assert_true(fabs(cost_op_ns(d, &fw) - 24e6 / 0.8) < 1.0);
    cost_free(c);
    cost_free(d);
}

/* GEMM rows measured on another GPU than the profile's (cost_measured_gemm): an fp8 GEMM, at the
 * roofline without them, takes their time; single calls timed under COST_SDPA_MIN_TIMED_MS are not
 * read (their launch would be read as kernel time), and below the smallest row read the roofline
 * stays; the bf16 curve is untouched; carried by a rate ratio they take it; a bad row is refused
 * before anything changes. */
static void test_measured_gemm(void **state) {
    (void)state;
    DeviceSpec dev = plain_device();
    dev.peak_flops[DT_FP8] = 2000e12;
    dev.eff_compute = 0.75;
    CostGemmRow ref[1] = {{"bf16", 4096, 4096, 4096, 1, 700, false}};
    CostProfile p = {.gemm = ref, .n_gemm = 1};
    CostModel *c = NULL, *d = NULL;
    assert_int_equal(cost_from_profile(&dev, &p, &c, NULL, 0), VR_OK);
    assert_int_equal(cost_from_profile(&dev, &p, &d, NULL, 0), VR_OK);
    double f512 = 2.0 * 512 * 512 * 512, f1k = 2.0 * 1024 * 1024 * 1024, f4k = 2.0 * 4096 * 4096 * 4096,
           f8k = 2.0 * 8192 * 8192 * 8192;
    Op big = op_of("mm", PH_FWD, f8k, 1), mid = op_of("mm", PH_FWD, f4k, 1), small = op_of("mm", PH_FWD, f1k, 1),
       tiny = op_of("mm", PH_FWD, f512, 1), b16 = op_of("mm", PH_FWD, f4k, 1);
    big.compute_dtype = mid.compute_dtype = small.compute_dtype = tiny.compute_dtype = DT_FP8;
    assert_true(fabs(cost_op_ns(c, &big) - f8k / 1500e12 * 1e9) < 1e-3); /* the roofline */
    double bf16 = cost_op_ns(c, &b16);
    /* 512^3 at 7.69 TFLOP/s: a 0.035 ms call, mostly its launch */
    CostGemmRow own[3] = {{"fp8", 512, 512, 512, 1, 7.69, false}, {"fp8", 4096, 4096, 4096, 1, 1200, false},
                          {"fp8", 8192, 8192, 8192, 1, 1400, false}};
    char why[160];
    CostGemmRow bad[2] = {own[2], {"fp8", 4096, 4096, 4096, 1, 0, false}};
    assert_int_equal(cost_measured_gemm(c, bad, 2, 1, 1, why, sizeof why), VR_EINVAL);
    assert_non_null(strstr(why, "gemm row 2"));
    assert_true(fabs(cost_op_ns(c, &big) - f8k / 1500e12 * 1e9) < 1e-3); /* unchanged */
    assert_int_equal(cost_measured_gemm(c, own, 3, 1, 0, why, sizeof why), VR_EINVAL);
    assert_int_equal(cost_measured_gemm(c, own, 3, 1, 1, why, sizeof why), VR_OK);
    assert_true(fabs(cost_op_ns(c, &big) - f8k / 1400e12 * 1e9) < 1e-3);
    assert_true(fabs(cost_op_ns(c, &mid) - f4k / 1200e12 * 1e9) < 1e-3);
    assert_true(fabs(cost_op_ns(c, &small) - f1k / 1500e12 * 1e9) < 1e-3);
    assert_true(fabs(cost_op_ns(c, &tiny) - f512 / 1500e12 * 1e9) < 1e-3);
    assert_true(cost_op_ns(c, &b16) == bf16);
    /* the same rows carried at 0.5 of their GPU's rate */
    assert_int_equal(cost_measured_gemm(d, own, 3, 1, 0.5, why, sizeof why), VR_OK);
    assert_true(fabs(cost_op_ns(d, &big) - f8k / 700e12 * 1e9) < 1e-3);
    cost_free(c);
    cost_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_and_fp32_fallback),
        cmocka_unit_test(test_add_mixed_falls_back_to_cast_up),
        cmocka_unit_test(test_layout_transforms),
        cmocka_unit_test(test_rowwise_kernel),
        cmocka_unit_test(test_attention_rate_curves),
        cmocka_unit_test(test_kernel_gap),
        cmocka_unit_test(test_carry),
        cmocka_unit_test(test_profile_gemm_rows),
        cmocka_unit_test(test_profile_gemm_kernel_rows),
        cmocka_unit_test(test_profile_bad_rows),
        cmocka_unit_test(test_profile_stream_rows),
        cmocka_unit_test(test_profile_sdpa_rows),
        cmocka_unit_test(test_profile_sdpa_kernel_rows),
        cmocka_unit_test(test_profile_lora_rows),
        cmocka_unit_test(test_moe_rows),
        cmocka_unit_test(test_clone),
        cmocka_unit_test(test_carry_attention_ratio),
        cmocka_unit_test(test_measured_here),
        cmocka_unit_test(test_measured_sdpa),
        cmocka_unit_test(test_measured_gemm),
    };
    return cmocka_run_group_tests_name("cost", tests, NULL, NULL);
}
