/* test_journal.c: the sweep journal's lines (sim/journal.h): a result line written and read back
 * gives the same point; lines that journal_format never writes (nan, inf, exponents, signs, flags
 * other than 0 and 1, missing fields, stray tabs) are refused; the header tells this sweep, this
 * sweep with other inputs and another sweep apart; a reader takes only whole lines of a journal
 * whose header matches, stops at a line cut short, and runs the fuzz corpus without a complaint. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "journal.h"

static const JournalKey KEY = {.sweep = 0x0123456789abcdefULL, .inputs = 0xfedcba9876543210ULL,
                               .n_points = 20, .shard_i = 1, .shard_n = 1};

static void test_round_trip(void **state)
{
    (void)state;
    PointResult r = {.done = true, .fits = true, .peak_alloc = 67690496, .peak_res = 69206016,
                     .capacity = 149305819136.0, .step_ms = 5.392654, .tokens_per_s = 1483.5};
    snprintf(r.err, sizeof r.err, "a\ttab and a\nnewline");
    char line[JOURNAL_ERR_MAX + 256];
    int n = journal_format(line, sizeof line, 7, &r);
    assert_true(n > 0 && line[n - 1] == '\n');
    line[n - 1] = 0;
    long k;
    PointResult b;
    assert_true(journal_parse(line, &k, &b));
    assert_int_equal(k, 7);
    assert_true(b.done && b.fits && !b.error);
    assert_true(b.peak_alloc == r.peak_alloc && b.peak_res == r.peak_res && b.capacity == r.capacity);
    assert_string_equal(b.err, "a tab and a newline");
}

static void test_refused_lines(void **state)
{
    (void)state;
    static const char *const BAD[] = {
        "0\t0\t1\tnan\t1\t1\t1\t1\t",        /* not a number */
        "0\t0\t1\t1\tinf\t1\t1\t1\t",        /* not finite */
        "0\t0\t1\t1\t1\t1e999\t1\t1\t",      /* an exponent: journal_format writes none */
        "0\t0\t1\t-1\t1\t1\t1\t1\t",         /* negative bytes */
        "0\t0\t1\t0x10\t1\t1\t1\t1\t",       /* hex */
        "0\t2\t1\t1\t1\t1\t1\t1\t",          /* a flag other than 0 or 1 */
        "-3\t0\t1\t1\t1\t1\t1\t1\t",         /* a negative point */
        "0\t0\t1\t1\t1\t1\t1\t1",            /* the text's field missing */
        "0\t0\t1\t1\t1\t1\t1\t",             /* a number missing */
        "0\t0\t1\t1\t1\t1\t1\t1\tx\ty",      /* a tab inside the text */
        "0\t0\t1\t1..2\t1\t1\t1\t1\t",       /* two dots */
        "",
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        long k;
        PointResult r;
        if (journal_parse(BAD[i], &k, &r)) fail_msg("taken: '%s'", BAD[i]);
    }
}

typedef struct Taken { long n, ks[8]; } Taken;

static void take(void *ud, long k, const PointResult *r)
{
    Taken *t = ud;
    assert_true(r->done);
    if (t->n < 8) t->ks[t->n] = k;
    t->n++;
}

/* Reads text as a journal against KEY. */
static long read_text(const char *text, JournalMatch *m, Taken *t)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    memset(t, 0, sizeof *t);
    long n = journal_read(f, &KEY, m, take, t);
    fclose(f);
    return n;
}

static void test_header_and_lines(void **state)
{
    (void)state;
    char head[256], text[2048];
    journal_header(&KEY, head, sizeof head);
    JournalMatch m;
    Taken t;
    snprintf(text, sizeof text, "%s0\t0\t1\t1\t1\t1\t1\t1\t\n1\t0\t1\tnan\t1\t1\t1\t1\t\n"
             "2\t1\t0\t0\t0\t0\t0\t0\tunknown field\n3\t0\t1\t1\t1\t1\t1\t1\t", head);
    assert_int_equal(read_text(text, &m, &t), 2); /* the nan line skipped, the last cut short */
    assert_int_equal(m, JOURNAL_SAME);
    assert_int_equal(t.ks[0], 0);
    assert_int_equal(t.ks[1], 2);
    /* the same sweep, another input: stale, nothing taken */
    JournalKey other = KEY;
    other.inputs ^= 1;
    journal_header(&other, head, sizeof head);
    snprintf(text, sizeof text, "%s0\t0\t1\t1\t1\t1\t1\t1\t\n", head);
    assert_int_equal(read_text(text, &m, &t), 0);
    assert_int_equal(m, JOURNAL_STALE);
    /* another sweep, an older format, not a journal, nothing at all */
    other = KEY;
    other.sweep ^= 1;
    journal_header(&other, head, sizeof head);
    snprintf(text, sizeof text, "%s0\t0\t1\t1\t1\t1\t1\t1\t\n", head);
    assert_int_equal(read_text(text, &m, &t), 0);
    assert_int_equal(m, JOURNAL_FOREIGN);
    read_text("vrsim sweep journal 1 0123456789abcdef 20 points shard 1/1\n0\t0\t1\t1\t1\t1\t1\t1\t\n", &m, &t);
    assert_int_equal(m, JOURNAL_FOREIGN);
    assert_int_equal(t.n, 0);
    read_text("point,seq\n", &m, &t);
    assert_int_equal(m, JOURNAL_FOREIGN);
    read_text("", &m, &t);
    assert_int_equal(m, JOURNAL_EMPTY);
}

/* The fuzz target's seed corpus reads without a complaint (make fuzz runs the target itself). */
static void test_corpus(void **state)
{
    (void)state;
    FILE *f = fopen("tests/fuzz/journal_corpus/three_points.journal", "r");
    assert_non_null(f);
    JournalMatch m;
    Taken t = {0};
    journal_read(f, &KEY, &m, take, &t);
    fclose(f);
    assert_int_equal(m, JOURNAL_SAME);
    assert_int_equal(t.n, 2); /* the third holds nan */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused_lines),
        cmocka_unit_test(test_header_and_lines),
        cmocka_unit_test(test_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
