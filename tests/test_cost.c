/* test_cost.c: the calibrated op-time model's memory-access classes: an op takes its bandwidth
 * from the class its kind names, a dtype-specific class ("foreach_fp32") falls back to its
 * generic one where the profile has none, and any other kind uses the generic curve. */
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

/* ns the model gives an op of `kind` moving `bytes` */
static double time_of(const CostModel *c, const char *kind, double bytes) {
    Op op;
    memset(&op, 0, sizeof op);
    op.name = "op";
    op.kind = kind;
    op.phase = PH_OPTIM;
    op.bytes_moved = bytes;
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_and_fp32_fallback),
    };
    return cmocka_run_group_tests_name("cost", tests, NULL, NULL);
}
