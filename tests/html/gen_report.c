/* gen_report.c: writes report.html for one scenario through report_html_write, the way a run
 * does once report_write_all calls it. tests/html/check.sh builds it against build/ when
 * ./vrsim does not write report.html itself yet.
 *
 *   gen_report SCENARIO.lua OUTDIR [KEY=VALUE ...]
 * exit 0 written (whether or not the scenario fits), 2 bad scenario, 1 internal error. */
#include <stdio.h>
#include <stdlib.h>

#include <gsl/gsl_errno.h>

#include "engine.h"
#include "report_html.h"
#include "scenario.h"

int main(int argc, char **argv) {
    gsl_set_error_handler_off();
    if (argc < 3) {
        fprintf(stderr, "usage: gen_report SCENARIO.lua OUTDIR [KEY=VALUE ...]\n");
        return 2;
    }
    ScenarioOptions opts = {.sets = (const char *const *)argv + 3, .n_sets = argc - 3};
    char err[1024];
    Plan *p = NULL;
    if (scenario_load(argv[1], &opts, &p, err, sizeof err)) {
        fprintf(stderr, "gen_report: %s\n", err);
        return 2;
    }
    EngineConfig ec = {.steps = p->steps, .cublas_handles = 2, .dev = &p->dev, .record_timeline = true};
    SimResult *r = NULL;
    VrStatus st = engine_run(p->graph, &ec, &p->alloc, &r, err, sizeof err);
    if (!st) st = report_html_write(argv[2], p, r, err, sizeof err);
    if (st) fprintf(stderr, "gen_report: %s\n", err);
    engine_result_free(r);
    plan_free(p);
    return st ? 1 : 0;
}
