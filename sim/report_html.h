/* report_html.h: report.html, a self-contained page (inline JavaScript and SVG, no network) that
 * shows one run: the memory timeline as stacked categories with allocated and reserved lines and
 * phase markers, the breakdown at peak, the largest tensors live at peak, and the segment map at
 * peak, and (when computed) what would help: the scenario re-simulated with changes, as the list
 * given (sim/variants.c). The
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

/* "What would help": the scenario simulated again with a change (sim/variants.c makes the list;
 * this file only shows it). */
typedef struct ReportVariant {
    char label[128];           /* what the change is, in words */
    char set[400];             /* the --set option(s) that make it, space-separated */
    bool fits;
    double peak_reserved;      /* bytes, the reported step (report_step) */
    double step_ms;            /* the reported step's time */
    int gpus;                  /* GPUs the variant runs on (hardware.count) */
    int kind;                  /* VariantKind (variants.h): what sort of change, for picking a few
                                  of each sort to print */
    bool changes_training;     /* it trains something else (LoRA, QLoRA): said beside it */
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

/* report_html_build and report_html_write with the "what would help" rows v[0..nv-1] (from
 * variants_finish, variants.h); nv < 0 means not computed. */
char *report_html_build_with(const Plan *p, const SimResult *r, const ReportVariant *v, int nv);
VrStatus report_html_write_with(const char *dir, const Plan *p, const SimResult *r,
                                const ReportVariant *v, int nv, char *err, size_t errlen);

#endif
