/* test_mincut.c: the minimum cut of sim/mincut.h: a textbook network, the partitioner's split
 * nodes (save the smaller of two tensors, never cross an infinite edge; of equal cuts networkx's), a graph whose every cut
 * is infinite refused, bad arguments refused, and random small graphs against every cut
 * enumerated (value equal to the least cut, and the side returned being a cut of that value). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "mincut.h"

/* The capacity of the cut `side` (1: source side) over the edges given. */
static double cut_value(int n_e, const int (*ed)[2], const double *cap, const unsigned char *side) {
    double v = 0;
    for (int k = 0; k < n_e; k++)
        if (side[ed[k][0]] && !side[ed[k][1]]) v += cap[k];
    return v;
}

static void test_textbook(void **state) {
    (void)state;
    /* CLRS figure 26.1: max flow 23 */
    static const int ed[][2] = {{0, 1}, {0, 2}, {2, 1}, {1, 3}, {3, 2}, {2, 4}, {4, 3}, {3, 5}, {4, 5}};
    static const double cap[] = {16, 13, 4, 12, 9, 14, 7, 20, 4};
    MinCut *m;
    assert_int_equal(mincut_new(6, &m), VR_OK);
    for (int k = 0; k < 9; k++) assert_int_equal(mincut_add_edge(m, ed[k][0], ed[k][1], cap[k]), VR_OK);
    double v;
    unsigned char side[6];
    assert_int_equal(mincut_solve(m, 0, 5, &v, side), VR_OK);
    assert_true(v == 23);
    assert_true(cut_value(9, ed, cap, side) == 23);
    assert_true(side[0] && !side[5]);
    mincut_free(m);
}

/* The partitioner's shape: a banned matmul (source -> mm_in infinite) whose output feeds a
 * pointwise op whose output backward needs (pw_out -> sink infinite). Saving mm's output (100
 * bytes) or pw's (200) both cut; the cheaper one is chosen, and the pointwise op lands on the
 * sink side (recomputed). */
static void test_partitioner_shape(void **state) {
    (void)state;
    enum { S, MM_IN, MM_OUT, PW_IN, PW_OUT, T, N };
    MinCut *m;
    assert_int_equal(mincut_new(N, &m), VR_OK);
    assert_int_equal(mincut_add_edge(m, S, MM_IN, INFINITY), VR_OK);
    assert_int_equal(mincut_add_edge(m, MM_IN, MM_OUT, 100), VR_OK);
    assert_int_equal(mincut_add_edge(m, MM_OUT, PW_IN, INFINITY), VR_OK);
    assert_int_equal(mincut_add_edge(m, PW_IN, PW_OUT, 200), VR_OK);
    assert_int_equal(mincut_add_edge(m, PW_OUT, T, INFINITY), VR_OK);
    double v;
    unsigned char side[N];
    assert_int_equal(mincut_solve(m, S, T, &v, side), VR_OK);
    assert_true(v == 100);
    assert_true(side[MM_IN] && !side[MM_OUT] && !side[PW_IN] && !side[PW_OUT]);
    /* a tie (both 100): networkx's partition keeps the source side largest, saving pw */
    mincut_free(m);
    assert_int_equal(mincut_new(N, &m), VR_OK);
    assert_int_equal(mincut_add_edge(m, S, MM_IN, INFINITY), VR_OK);
    assert_int_equal(mincut_add_edge(m, MM_IN, MM_OUT, 100), VR_OK);
    assert_int_equal(mincut_add_edge(m, MM_OUT, PW_IN, INFINITY), VR_OK);
    assert_int_equal(mincut_add_edge(m, PW_IN, PW_OUT, 100), VR_OK);
    assert_int_equal(mincut_add_edge(m, PW_OUT, T, INFINITY), VR_OK);
    assert_int_equal(mincut_solve(m, S, T, &v, side), VR_OK);
    assert_true(v == 100 && side[MM_OUT] && side[PW_IN] && !side[PW_OUT]);
    mincut_free(m);
}

static void test_infinite_cut_refused(void **state) {
    (void)state;
    MinCut *m;
    assert_int_equal(mincut_new(3, &m), VR_OK);
    assert_int_equal(mincut_add_edge(m, 0, 1, INFINITY), VR_OK);
    assert_int_equal(mincut_add_edge(m, 1, 2, INFINITY), VR_OK);
    double v;
    unsigned char side[3];
    assert_int_equal(mincut_solve(m, 0, 2, &v, side), VR_EINVAL);
    mincut_free(m);
}

static void test_bad_arguments(void **state) {
    (void)state;
    MinCut *m = (MinCut *)1;
    assert_int_equal(mincut_new(1, &m), VR_EINVAL);
    assert_null(m);
    assert_int_equal(mincut_new(3, &m), VR_OK);
    assert_int_equal(mincut_add_edge(m, 0, 3, 1), VR_EINVAL);
    assert_int_equal(mincut_add_edge(m, -1, 2, 1), VR_EINVAL);
    assert_int_equal(mincut_add_edge(m, 1, 1, 1), VR_EINVAL);
    assert_int_equal(mincut_add_edge(m, 0, 1, -1), VR_EINVAL);
    assert_int_equal(mincut_add_edge(m, 0, 1, NAN), VR_EINVAL);
    double v;
    unsigned char side[3];
    assert_int_equal(mincut_solve(m, 0, 0, &v, side), VR_EINVAL);
    assert_int_equal(mincut_solve(m, 0, 3, &v, side), VR_EINVAL);
    /* no edges: the empty cut, every node but the sink on the source side (networkx's choice) */
    assert_int_equal(mincut_solve(m, 0, 2, &v, side), VR_OK);
    assert_true(v == 0 && side[0] && side[1] && !side[2]);
    mincut_free(m);
    mincut_free(NULL);
}

static void test_random_against_enumeration(void **state) {
    (void)state;
    srand(39);
    for (int round = 0; round < 300; round++) {
        int n = 2 + rand() % 7, n_e = rand() % 20;
        int ed[20][2];
        double cap[20];
        MinCut *m;
        assert_int_equal(mincut_new(n, &m), VR_OK);
        int k = 0;
        while (k < n_e) {
            int a = rand() % n, b = rand() % n;
            if (a == b) continue;
            ed[k][0] = a, ed[k][1] = b, cap[k] = rand() % 10;
            assert_int_equal(mincut_add_edge(m, a, b, cap[k]), VR_OK);
            k++;
        }
        double v;
        unsigned char side[9];
        assert_int_equal(mincut_solve(m, 0, n - 1, &v, side), VR_OK);
        assert_true(side[0] && !side[n - 1]);
        assert_true(cut_value(n_e, (const int (*)[2])ed, cap, side) == v);
        /* every cut with 0 on one side and n-1 on the other is at least v */
        double best = INFINITY;
        for (int mask = 0; mask < 1 << (n - 2); mask++) {
            unsigned char s[9] = {0};
            s[0] = 1;
            for (int i = 1; i < n - 1; i++) s[i] = (mask >> (i - 1)) & 1;
            double c = cut_value(n_e, (const int (*)[2])ed, cap, s);
            if (c < best) best = c;
        }
        assert_true(best == v);
        mincut_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_textbook),
        cmocka_unit_test(test_partitioner_shape),
        cmocka_unit_test(test_infinite_cut_refused),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_random_against_enumeration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
