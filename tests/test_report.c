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

#include <cjson/cJSON.h>

#include "report.h"
#include "report_html.h"

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

/* report_json_print against cJSON_PrintUnformatted on random trees: numbers of every size and
 * kind (integers, fractions, ones that need 17 digits, huge, tiny, NaN, infinities), strings
 * with every control character, quotes and bytes past 127, nested arrays and objects. */
static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static double rnd_number(void) {
    switch (rnd() % 8) {
    case 0: return (double)(int64_t)(rnd() % 2000000) - 1000000;
    case 1: return (double)(rnd() % 4000000000000000ull);
    case 2: return (double)(rnd() >> 11) / 9007199254740992.0 * 1e6;
    case 3: return ldexp((double)(rnd() >> 11), (int)(rnd() % 200) - 150);
    case 4: return round((double)(rnd() % 100000000) / 7.0) / 1e4;
    case 5: return (rnd() % 3) == 0 ? NAN : (rnd() % 2 ? INFINITY : -INFINITY);
    case 6: { uint64_t u = rnd(); double d; memcpy(&d, &u, sizeof d); return isnan(d) ? 1.5 : d; }
    default: return 0.1 * (double)(rnd() % 1000);
    }
}

static cJSON *rnd_item(int depth) {
    unsigned k = depth > 3 ? (unsigned)(rnd() % 5) : (unsigned)(rnd() % 7);
    if (k == 0) return cJSON_CreateNumber(rnd_number());
    if (k == 1) {
        char str[40];
        int n = (int)(rnd() % 30);
        for (int i = 0; i < n; i++) str[i] = (char)(1 + rnd() % 255);
        str[n] = 0;
        return cJSON_CreateString(str);
    }
    if (k == 2) return cJSON_CreateNull();
    if (k == 3) return cJSON_CreateBool(rnd() % 2);
    if (k == 4) return cJSON_CreateNumber(rnd_number());
    cJSON *c = k == 5 ? cJSON_CreateArray() : cJSON_CreateObject();
    int n = (int)(rnd() % 6);
    for (int i = 0; i < n; i++) {
        if (k == 5) {
            cJSON_AddItemToArray(c, rnd_item(depth + 1));
        } else {
            char key[32];
            snprintf(key, sizeof key, "k%d\t\"%d", i, (int)(rnd() % 100));
            cJSON_AddItemToObject(c, key, rnd_item(depth + 1));
        }
    }
    return c;
}

static void test_json_print_is_cjsons(void **state) {
    (void)state;
    /* figures rounded to a few decimals, of every size */
    for (int t = 0; t < 200000; t++) {
        static const double P[] = {10, 100, 1e3, 1e4, 1e5, 1e6};
        double scale = ldexp(1, (int)(rnd() % 60)) * (double)(1 + rnd() % 1000);
        double x = round((double)(rnd() % 1000000007) / 1000000007.0 * scale * P[rnd() % 6]) / P[rnd() % 6];
        if (rnd() % 2) x = -x;
        cJSON *o = cJSON_CreateNumber(x);
        char *want = cJSON_PrintUnformatted(o), *got = report_json_print(o);
        if (strcmp(want, got) != 0) fail_msg("%.17g: cJSON \"%s\", report_json_print \"%s\"", x, want, got);
        free(want);
        free(got);
        cJSON_Delete(o);
    }
    for (int t = 0; t < 3000; t++) {
        cJSON *o = rnd_item(0);
        char *want = cJSON_PrintUnformatted(o), *got = report_json_print(o);
        assert_non_null(want);
        assert_non_null(got);
        if (strcmp(want, got) != 0) fail_msg("cJSON \"%s\", report_json_print \"%s\"", want, got);
        free(want);
        free(got);
        cJSON_Delete(o);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matches_printf),
                                       cmocka_unit_test(test_json_print_is_cjsons)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
