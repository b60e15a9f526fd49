/* report_html.h: report.html, a self-contained page (inline JavaScript and SVG, no network) that
 * shows one run: the memory timeline as stacked categories with allocated and reserved lines and
 * phase markers, the breakdown at peak, the largest tensors live at peak, and the segment map at
 * peak. The page's script sets data-ok="1" on <body> once everything is drawn (and data-error
 * with the message if it fails), which is what tests/html/check.sh looks for in headless
 * Chromium.
 *
 * The run's figures travel as one JSON object inside <script type="application/json">, so the
 * page is also a machine-readable record. Timelines longer than REPORT_HTML_MAX_SAMPLES are
 * thinned by buckets that keep each bucket's highest allocated and reserved sample (peaks are
 * never lost). The same plan and result give the same bytes. */
#ifndef VR_REPORT_HTML_H
#define VR_REPORT_HTML_H

#include "engine.h"
#include "scenario.h"

#define REPORT_HTML_MAX_SAMPLES 6000   /* samples kept in the page, at most */

/* Builds the page. Returns text the caller frees with free(), or NULL when host memory runs
 * out. A result without a timeline (record_timeline false) gives a page without the chart. */
char *report_html_build(const Plan *p, const SimResult *r);

/* Writes dir/report.html atomically (report_write_file); creates dir if missing.
 * VR_EIO with a message in err when it cannot be written, VR_ENOMEM. */
VrStatus report_html_write(const char *dir, const Plan *p, const SimResult *r, char *err,
                           size_t errlen);

#endif
