/* report_html.h: report.html, a self-contained page (inline JavaScript and SVG, no network) that
 * shows one run: the memory timeline as stacked categories with allocated and reserved lines and
 * phase markers, the breakdown at peak, the largest tensors live at peak, and the segment map at
 * peak, and (when computed) what would help: the scenario re-simulated with one change each. The
 * page's script sets data-ok="1" on <body> once everything is drawn (and data-error
 * with the message if it fails), which is what tests/html/check.sh looks for in headless
 * Chromium.
 *
 * The run's figures travel as one JSON object inside <script type="application/json">, so the
 * page is also a machine-readable record. Timelines longer than REPORT_HTML_MAX_SAMPLES are
 * thinned by buckets that keep each bucket's highest allocated and reserved sample (peaks are
 * never lost). The same plan and result give the same bytes. */
#ifndef VR_REPORT_HTML_H
#define VR_REPORT_HTML_H

#include <stdbool.h>

#include "engine.h"
#include "scenario.h"

#define REPORT_HTML_MAX_SAMPLES 6000   /* samples kept in the page, at most */

/* "What would help": the scenario simulated again with one change. */
typedef struct ReportVariant {
    char label[96];            /* what the change is, in words */
    char set[160];             /* the --set option(s) that make it, space-separated */
    bool fits;
    double peak_reserved;      /* bytes, the reported step (report_step) */
    double step_ms;            /* the reported step's time */
} ReportVariant;

/* Builds the page. Returns text the caller frees with free(), or NULL when host memory runs
 * out. A result without a timeline (record_timeline false) gives a page without the chart. */
char *report_html_build(const Plan *p, const SimResult *r);

/* The text cJSON_PrintUnformatted (libcjson 1.7.15) prints for o, as a new string the caller
 * frees; NULL without the memory or for an item cJSON does not print. The page's data goes
 * through it: the same bytes, without a sscanf per number. */
struct cJSON;
char *report_json_print(const struct cJSON *o);

/* Writes dir/report.html atomically (report_write_file); creates dir if missing. The page says
 * that suggestions were not computed. VR_EIO with a message in err when it cannot be written,
 * VR_ENOMEM. */
VrStatus report_html_write(const char *dir, const Plan *p, const SimResult *r, char *err,
                           size_t errlen);

/* Re-simulates the scenario at path (loaded with base's options, giving plan p and result r)
 * once per change that could lower its memory: gradient checkpointing, LoRA, fused AdamW, half
 * the micro-batch accumulated twice, expandable segments, and for several GPUs ZeRO-2, ZeRO-3
 * and ZeRO-3 with optimizer offload. Only changes that help are kept: the variant fits and
 * reserves less than this run at its peak, or fits where this run does not (a change the
 * scenario cannot take, a load or engine error, is left out). They are sorted by peak reserved,
 * least first. Each is a full simulation without a timeline
 * (a few times the cost of the run). The caller frees *out with free(). VR_OK or VR_ENOMEM. */
VrStatus report_html_variants(const char *path, const ScenarioOptions *base, const Plan *p,
                              const SimResult *r, ReportVariant **out /* OUT */,
                              int *n /* OUT */);

/* report_html_variants in two halves, so that the caller can go on while the variants are
 * simulated (in a helper process): _start takes the plan (the candidates depend on its
 * micro-batch, allocator settings and GPU count), _finish the run's result, and gives what
 * report_html_variants gives; _finish and _cancel (which stops the helper) free rv. */
typedef struct ReportVariants ReportVariants;
VrStatus report_html_variants_start(const char *path, const ScenarioOptions *base, const Plan *p,
                                    ReportVariants **rv /* OUT */);
VrStatus report_html_variants_finish(ReportVariants *rv, const SimResult *r,
                                     ReportVariant **out /* OUT */, int *n /* OUT */);
void report_html_variants_cancel(ReportVariants *rv); /* NULL is a no-op */

/* report_html_build and report_html_write with the "what would help" rows v[0..nv-1] (from
 * report_html_variants); nv < 0 means not computed. */
char *report_html_build_with(const Plan *p, const SimResult *r, const ReportVariant *v, int nv);
VrStatus report_html_write_with(const char *dir, const Plan *p, const SimResult *r,
                                const ReportVariant *v, int nv, char *err, size_t errlen);

#endif
