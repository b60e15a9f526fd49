/* test_cost.c: the calibrated op-time model's memory-access classes: an op takes its bandwidth
 * from the class its kind names, a dtype-specific class ("foreach_fp32") falls back to its
 * generic one where the profile has none, and any other kind uses the generic curve. Fused
 * attention takes its measured FLOP rate (forward and backward curves) where the profile covers
 * its size, the GEMM curve elsewhere; every kernel adds the stream's measured gap. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_and_fp32_fallback),
        cmocka_unit_test(test_attention_rate_curves),
        cmocka_unit_test(test_kernel_gap),
        cmocka_unit_test(test_carry),
    };
    return cmocka_run_group_tests_name("cost", tests, NULL, NULL);
}
