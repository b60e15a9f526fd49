/* report.h: what a run writes: the terminal summary, summary.json, memory.csv and trace.json
 * (Chrome trace event format: opens in Perfetto or chrome://tracing).
 *
 * Files are written to a temporary name in the output folder and renamed, so an interrupted run
 * never leaves a half-written file. The same plan gives the same bytes. */
#ifndef VR_REPORT_H
#define VR_REPORT_H

#include <stdio.h>

#include "engine.h"
#include "scenario.h"

/* The steady-state step reported: the last completed one (or the failing one after an OOM). */
const StepResult *report_step(const SimResult *r);

/* Whether the plan fits: no OOM. */
bool report_fits(const SimResult *r);

/* The completed step with the largest peak reserved (step 0 included): the verdict's step.
 * -1 when no step completed. */
int report_worst_step(const SimResult *r);

/* How often the allocator freed its cache and retried a cudaMalloc, over the whole run. */
uint64_t report_alloc_retries(const SimResult *r);

/* Where the step time's op costs came from, in words (static string). */
const char *report_cost_source(const Plan *p);

/* Prints the human summary to f. */
void report_print_summary(FILE *f, const Plan *p, const SimResult *r);

/* Builds summary.json's text (the contract of docs/scenarios.md, "Outputs"); the caller frees it with free(). NULL on
 * host allocation failure. */
char *report_summary_json(const Plan *p, const SimResult *r);

/* Creates dir and each missing parent, as `mkdir -p` does (mode 0777 less the umask). VR_OK when
 * it exists afterwards; VR_EIO with err naming the folder that could not be made; VR_EINVAL for
 * a path of 4096 bytes or more (refused, never cut short). */
VrStatus report_make_dir(const char *dir, char *err, size_t errlen);

/* Writes summary.json, memory.csv and trace.json into dir (created if missing); report.html is
 * the caller's (report_html.h), with its "what would help" rows. VR_EIO with a message in err
 * when a file cannot be written. */
VrStatus report_write_all(const char *dir, const Plan *p, const SimResult *r, char *err,
                          size_t errlen);

/* Writes text to path atomically (temporary file + rename). */
VrStatus report_write_file(const char *path, const char *text, size_t len, char *err,
                           size_t errlen);

/* The output set (summary.json, memory.csv, trace.json, report.html) is written into a fresh
 * directory beside dir and put in its place as a whole, so a reader never sees files of two
 * runs together.
 *   report_stage_dir: checks dir (a directory holding only set files, or absent), makes its
 *     parent, and creates the temporary directory; its path in tmp. VR_EINVAL (bad --out) or
 *     VR_EIO with a message.
 *   report_commit_dir: replaces dir by tmp (atomically where the file system can) and removes
 *     the old set. VR_EIO with a message; tmp is left for report_remove_set_dir.
 *   report_remove_set_dir: removes the set's files (and temporaries) from dir and dir itself;
 *     only unlink/rmdir/opendir calls, for cleanup paths.
 *   report_set_file(i): the i-th file name of the set, NULL past the last. */
VrStatus report_stage_dir(const char *dir, char *tmp /* OUT */, size_t tmplen, char *err, size_t errlen);
VrStatus report_commit_dir(const char *tmp, const char *dir, char *err, size_t errlen);
void report_remove_set_dir(const char *dir);
const char *report_set_file(int i);

/* x as printf("%.*f", decimals, x) writes it (decimals 0..6), into out (NUL-terminated);
 * returns the length. The report files' numbers go through it: it formats without printf
 * where the rounding is unambiguous and calls printf where it is not, so the text is the same. */
size_t report_format_fixed(char out[32], double x, int decimals);

#endif
