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

/* Prints the human summary to f. */
void report_print_summary(FILE *f, const Plan *p, const SimResult *r);

/* Builds summary.json's text (DESIGN.md's contract); the caller frees it with free(). NULL on
 * host allocation failure. */
char *report_summary_json(const Plan *p, const SimResult *r);

/* Writes summary.json, memory.csv and trace.json into dir (created if missing).
 * VR_EIO with a message in err when a file cannot be written. */
VrStatus report_write_all(const char *dir, const Plan *p, const SimResult *r, char *err,
                          size_t errlen);

/* Writes text to path atomically (temporary file + rename). */
VrStatus report_write_file(const char *path, const char *text, size_t len, char *err,
                           size_t errlen);

#endif
