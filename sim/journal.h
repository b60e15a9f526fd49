/* journal.h: a sweep's journal, the points it finished as they arrive, so that --resume after
 * an interruption runs only the others (vrsim sweep, sim/cmd_sweep.c).
 *
 * Format. One header line, then one result line per finished point:
 *   vrsim sweep journal 2 sweep=<16 hex> inputs=<16 hex> points=<n> shard=<i>/<n>
 *   <k> \t <error 0|1> \t <fits 0|1> \t <alloc> \t <reserved> \t <capacity> \t <step ms> \t
 *       <tokens/s> \t <error text>
 * sweep= keys what the sweep is (the scenario's path, every axis with its values, the constant
 * settings of the command line, --unsafe, the shard); inputs= keys what its answers depend on
 * besides (the scenario's bytes, the name and bytes of every file loading it read, the
 * environment's PYTORCH_CUDA_ALLOC_CONF, vrsim's version). A journal of another sweep is refused;
 * one of this sweep whose inputs changed is stale, and its points run again. A line cut short by
 * the interruption (no newline) ends the reading; a line that is not a result (a number that is
 * not finite or is negative, a flag that is not 0 or 1, a field missing) is skipped: no such row
 * reaches sweep.csv. */
#ifndef VR_JOURNAL_H
#define VR_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JOURNAL_ERR_MAX 400    /* bytes of error text kept per point */

/* What one point gave (a row of sweep.csv). */
typedef struct PointResult {
    bool done;
    bool error;                /* the point could not be simulated: err says why */
    bool fits;
    double peak_alloc, peak_res, capacity;   /* bytes */
    double step_ms;
    double tokens_per_s;       /* per GPU; 0 when not a language model */
    char err[JOURNAL_ERR_MAX];
} PointResult;

/* The journal's identity (see Format). */
typedef struct JournalKey {
    uint64_t sweep, inputs;
    long n_points;
    int shard_i, shard_n;
} JournalKey;

typedef enum JournalMatch {
    JOURNAL_SAME,              /* this sweep, same inputs: its points can be taken */
    JOURNAL_STALE,             /* this sweep, but its inputs changed */
    JOURNAL_FOREIGN,           /* another sweep's, an older format's, or not a journal */
    JOURNAL_EMPTY,             /* no header at all (an empty file) */
} JournalMatch;

/* The header line (with its newline) for key into buf. Returns its length. */
int journal_header(const JournalKey *key, char *buf, size_t n);

/* The result line (with its newline) of point k into line; tabs and newlines in the error text
 * become spaces. Returns its length, or -1 when it does not fit n (at least JOURNAL_ERR_MAX +
 * 256 always does). */
int journal_format(char *line, size_t n, long k, const PointResult *r);

/* Parses a result line (without its newline) strictly (see Format); false when it is not one. */
bool journal_parse(const char *line, long *k /* OUT */, PointResult *r /* OUT */);

/* Reads journal f: *match says whose it is; for JOURNAL_SAME, take(ud, k, r) is called for each
 * whole result line in turn. Returns the lines taken, or -1 when out of host memory. */
long journal_read(FILE *f, const JournalKey *key, JournalMatch *match /* OUT */,
                  void (*take)(void *ud, long k, const PointResult *r), void *ud);

#endif
