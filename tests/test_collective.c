/* test_collective.c: NCCL collective costs: bus bytes, the least-squares fit, ring and tree. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "collective.h"

static void test_bus_bytes(void **state) {
    (void)state;
    assert_true(fabs(coll_bus_bytes(COLL_ALLREDUCE, 1000, 2) - 1000) < 1e-9);
    assert_true(fabs(coll_bus_bytes(COLL_ALLREDUCE, 1000, 8) - 1750) < 1e-9);
    assert_true(fabs(coll_bus_bytes(COLL_REDUCE_SCATTER, 1000, 4) - 750) < 1e-9);
    assert_true(fabs(coll_bus_bytes(COLL_BROADCAST, 1000, 4) - 1000) < 1e-9);
    assert_true(coll_bus_bytes(COLL_ALLGATHER, 1000, 1) == 0);
}

static void test_fit_recovers_latency_and_bandwidth(void **state) {
    (void)state;
    /* t = 20 us + bus_bytes / 300 GB/s */
    CollPoint pts[5];
    for (int i = 0; i < 5; i++) {
        double bus = (double)(1u << (20 + 2 * i));
        pts[i] = (CollPoint){bus, 2, 20000.0 + bus / 300e9 * 1e9};
    }
    CollLink l;
    assert_int_equal(coll_fit(pts, 5, &l), VR_OK);
    assert_true(fabs(l.latency_ns - 20000.0) < 1.0);
    assert_true(fabs(l.bus_bw - 300e9) / 300e9 < 1e-6);
}

static void test_fit_rejects_too_few_points(void **state) {
    (void)state;
    CollPoint one = {1e6, 2, 1e4};
    CollLink l;
    assert_int_equal(coll_fit(&one, 1, &l), VR_EINVAL);
    CollPoint flat[2] = {{1e6, 2, 1e4}, {2e6, 2, 1e4}}; /* no bandwidth term */
    assert_int_equal(coll_fit(flat, 2, &l), VR_EINVAL);
}

static void test_ring_and_tree(void **state) {
    (void)state;
    CollLink l = {5000.0, 100e9};
    /* reduce-scatter over 4 ranks: 3 steps of latency + 3/4 of the bytes */
    double t = coll_time_ns(&l, COLL_REDUCE_SCATTER, 4e9, 4);
    assert_true(fabs(t - (3 * 5000.0 + 3e9 / 100e9 * 1e9)) < 1e-3);
    /* all-reduce over 64 ranks, tiny buffer: the tree's 2 log2(64) = 12 steps beat 126 */
    double small = coll_time_ns(&l, COLL_ALLREDUCE, 1024, 64);
    assert_true(small < 13 * 5000.0 + 1.0);
    assert_true(coll_time_ns(&l, COLL_ALLREDUCE, 1e9, 1) == 0);
    CollKind k;
    assert_int_equal(coll_kind_parse("all_gather", &k), VR_OK);
    assert_int_equal(k, COLL_ALLGATHER);
    assert_int_equal(coll_kind_parse("alltoall", &k), VR_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bus_bytes),
        cmocka_unit_test(test_fit_recovers_latency_and_bandwidth),
        cmocka_unit_test(test_fit_rejects_too_few_points),
        cmocka_unit_test(test_ring_and_tree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
