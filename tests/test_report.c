/* test_report.c: the report files' number formatting (report_format_fixed) against printf's
 * "%.*f", on the values the files hold (timestamps in us, times in ms, MiB) and on the ones
 * that decide a rounding: halves, values just either side of them, integers, zero, negatives,
 * huge and non-finite numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "report.h"

static void same_as_printf(double x, int d) {
    char want[64], got[32];
    snprintf(want, sizeof want, "%.*f", d, x);
    size_t n = report_format_fixed(got, x, d);
    if (strcmp(want, got) != 0 || n != strlen(want))
        fail_msg("%.17g with %d decimals: printf \"%s\", report_format_fixed \"%s\"", x, d, want, got);
}

static void test_matches_printf(void **state) {
    (void)state;
    const double edge[] = {0, -0.0, 0.5, 1.5, 2.5, 0.0005, 0.0015, 2.0005, 0.125, 0.375, 1e-7,
                           123456.789, 999.9995, 999999.9999995, 4503599627370496.0, 1e17,
                           -1.25, -0.0004, INFINITY, -INFINITY, NAN, 7.69e9, 1048575.999999};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        for (int d = 0; d <= 6; d++) same_as_printf(edge[i], d);
    /* ties and near-ties at every digit: k/2 * 10^-d, and one ulp either side */
    for (int d = 0; d <= 6; d++)
        for (int k = 1; k < 20000; k += 2) {
            double x = k * 0.5 / pow(10, d);
            same_as_printf(x, d);
            same_as_printf(nextafter(x, 0), d);
            same_as_printf(nextafter(x, INFINITY), d);
        }
    /* what the files hold: ns / 1e3 and / 1e6 over a long step, bytes / 2^20 */
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double ns = (double)(s % 20000000000000ull) + (double)(s % 1000) / 1000.0;
        same_as_printf(ns / 1e3, 3);
        same_as_printf(ns / 1e6, 6);
        same_as_printf((double)(s % (1ull << 44)) / 1048576.0, 2);
        same_as_printf((double)(s % (1ull << 52)), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matches_printf)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
