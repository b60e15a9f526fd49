/* journal.c: the sweep journal's lines (journal.h). */
#include "journal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "vrsim sweep journal "

int journal_header(const JournalKey *key, char *buf, size_t n) {
    return snprintf(buf, n, MAGIC "2 sweep=%016llx inputs=%016llx points=%ld shard=%d/%d\n",
                    (unsigned long long)key->sweep, (unsigned long long)key->inputs,
                    key->n_points, key->shard_i, key->shard_n);
}

int journal_format(char *line, size_t n, long k, const PointResult *r) {
    char text[JOURNAL_ERR_MAX];
    snprintf(text, sizeof text, "%s", r->err);
    for (char *c = text; *c; c++) if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
    int len = snprintf(line, n, "%ld\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.6f\t%.3f\t%s\n", k, r->error,
                       r->fits, r->peak_alloc, r->peak_res, r->capacity, r->step_ms,
                       r->tokens_per_s, text);
    return len < 0 || (size_t)len >= n ? -1 : len;
}

/* A field of decimal digits (a point number or a flag) ending at a tab: its value, or -1. */
static long field_int(const char **p) {
    const char *s = *p;
    if (*s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\t') return -1;
    *p = end + 1;
    return v;
}

/* A number as journal_format writes it (digits, at most one '.'), ending at a tab, finite and
 * at least 0; false otherwise (strtod alone would take "nan", "inf", hex and exponents). */
static bool field_num(const char **p, double *v) {
    const char *s = *p, *c = s;
    int dots = 0, digits = 0;
    for (; *c != '\t'; c++) {
        if (*c == '.') dots++;
        else if (*c >= '0' && *c <= '9') digits++;
        else return false;
    }
    if (!digits || dots > 1 || c - s > 400) return false; /* DBL_MAX in %.6f: 316 */
    *v = strtod(s, NULL);
    if (!isfinite(*v) || *v < 0) return false;
    *p = c + 1;
    return true;
}

bool journal_parse(const char *line, long *k, PointResult *r) {
    memset(r, 0, sizeof *r);
    const char *p = line;
    long e, f;
    if ((*k = field_int(&p)) < 0 || (e = field_int(&p)) < 0 || e > 1 ||
        (f = field_int(&p)) < 0 || f > 1)
        return false;
    double *nums[5] = {&r->peak_alloc, &r->peak_res, &r->capacity, &r->step_ms, &r->tokens_per_s};
    for (int i = 0; i < 5; i++)
        if (!field_num(&p, nums[i])) return false;
    if (strchr(p, '\t') || strchr(p, '\r')) return false;
    r->done = true;
    r->error = e != 0;
    r->fits = f != 0;
    snprintf(r->err, sizeof r->err, "%s", p);
    return true;
}

long journal_read(FILE *f, const JournalKey *key, JournalMatch *match,
                  void (*take)(void *ud, long k, const PointResult *r), void *ud) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, f);
    char want[256];
    journal_header(key, want, sizeof want);
    /* the part that names the sweep: up to and including "sweep=<hex> " */
    size_t id_len = strlen(MAGIC "2 sweep=0123456789abcdef ");
    if (len <= 0) *match = JOURNAL_EMPTY;
    else if (strcmp(line, want) == 0) *match = JOURNAL_SAME;
    else if ((size_t)len > id_len && strncmp(line, want, id_len) == 0) *match = JOURNAL_STALE;
    else *match = JOURNAL_FOREIGN; /* another sweep's, an older format's (nothing in it can be
                                      checked) or not a journal */
    long n = 0;
    while (*match == JOURNAL_SAME && (len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break; /* cut short by the interruption */
        line[len - 1] = 0;
        if ((size_t)len - 1 != strlen(line)) continue; /* a NUL inside: not a line we wrote */
        long k;
        PointResult r;
        if (!journal_parse(line, &k, &r)) continue;
        take(ud, k, &r);
        n++;
    }
    bool oom = errno == ENOMEM && len < 0 && !feof(f);
    free(line);
    return oom ? -1 : n;
}
