/* fuzz_journal.c: libFuzzer harness over the sweep journal's reader (sim/journal.c), which
 * --resume feeds whatever an interrupted, edited or foreign journal holds. Any input must be read
 * without a crash or sanitizer report, and every point it takes must be one sweep.csv can show:
 * flags 0 or 1, finite numbers of at least 0, an error text without tab or newline that
 * journal_format writes back to the very line it came from. The first bytes pick the key, so the
 * header matches (and the lines are read) for the inputs that start with it.
 * Build and run: make fuzz FUZZ_TARGETS=fuzz_journal (tests/fuzz/Makefile). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_point(void *ud, long k, const PointResult *r)
{
    (void)ud;
    const double v[5] = {r->peak_alloc, r->peak_res, r->capacity, r->step_ms, r->tokens_per_s};
    for (int i = 0; i < 5; i++)
        if (!isfinite(v[i]) || v[i] < 0) abort();
    if (k < 0 || !r->done || strpbrk(r->err, "\t\n\r")) abort();
    char line[JOURNAL_ERR_MAX + 256];
    if (journal_format(line, sizeof line, k, r) < 0) abort();
    /* a line written from a point read back gives that point again */
    line[strlen(line) - 1] = 0;
    long k2;
    PointResult r2;
    if (!journal_parse(line, &k2, &r2) || k2 != k || r2.error != r->error || r2.fits != r->fits)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the key the reader expects: the standard one, so that a corpus that starts with its header
     * reaches the lines */
    JournalKey key = {.sweep = 0x0123456789abcdefULL, .inputs = 0xfedcba9876543210ULL,
                      .n_points = 20, .shard_i = 1, .shard_n = 1};
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f) return 0;
    JournalMatch m;
    journal_read(f, &key, &m, check_point, NULL);
    fclose(f);
    return 0;
}
