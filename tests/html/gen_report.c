/* gen_report.c: writes report.html for one scenario through report_html_write, the way a run
 * does once report_write_all calls it. tests/html/check.sh builds it against build/ when
 * ./vrsim does not write report.html itself yet.
 *
 *   gen_report SCENARIO.lua OUTDIR [--suggest] [KEY=VALUE ...]
 * --suggest adds "what would help" (report_html_variants). Exit 0 written (whether or not the scenario fits), 2 bad scenario, 1 internal error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_errno.h>

#include "engine.h"
#include "report_html.h"
#include "scenario.h"

int main(int argc, char **argv) {
    gsl_set_error_handler_off();
    if (argc < 3) {
        fprintf(stderr, "usage: gen_report SCENARIO.lua OUTDIR [--suggest] [KEY=VALUE ...]\n");
        return 2;
    }
    int first = 3;
    bool suggest = argc > 3 && strcmp(argv[3], "--suggest") == 0;
    if (suggest) first = 4;
    ScenarioOptions opts = {.sets = (const char *const *)argv + first, .n_sets = argc - first};
    char err[1024];
    Plan *p = NULL;
    if (scenario_load(argv[1], &opts, &p, err, sizeof err)) {
        fprintf(stderr, "gen_report: %s\n", err);
        return 2;
    }
    EngineConfig ec = {.steps = p->steps, .cublas_handles = 2, .dev = &p->dev, .record_timeline = true};
    SimResult *r = NULL;
    VrStatus st = engine_run(p->graph, &ec, &p->alloc, &r, err, sizeof err);
    ReportVariant *v = NULL;
    int nv = -1;
    if (!st && suggest) st = report_html_variants(argv[1], &opts, p, r, &v, &nv);
    if (!st) st = report_html_write_with(argv[2], p, r, v, nv, err, sizeof err);
    free(v);
    if (st) fprintf(stderr, "gen_report: %s\n", err);
    engine_result_free(r);
    plan_free(p);
    return st ? 1 : 0;
}
