/* cmd_run.c: `vrsim SCENARIO [options]`: simulate a scenario, print the summary, write the
 * report files. Exit 0 fits, 3 does not fit, 2 bad input, 1 internal error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmds.h"
#include "engine.h"
#include "explain.h"
#include "report_html.h"
#include "report.h"
#include "scenario.h"

/* --alloc-trace: the engine's allocations as a trace CSV (truth/README.md's format). */
typedef struct TraceOut { FILE *f; long seq; bool bad; const Graph *g; } TraceOut;

/* One event; the frames column names the op, as _record_memory_history(context=...) would. */
static void trace_event(void *ud, bool alloc, uint64_t addr, uint64_t size, int stream, int op) {
    TraceOut *t = ud;
    if (t->bad) return;
    const char *act[2] = {"free_requested", "alloc"};
    const char *name = op >= 0 ? graph_op_c(t->g, op)->name : "";
    char frames[200];
    snprintf(frames, sizeof frames, "%s", name);
    for (char *c = frames; *c; c++) if (*c == ',' || *c == '"' || *c == '\n') *c = ';';
    if (fprintf(t->f, "%ld,0,%s,%llu,%llu,%d,%s\n", t->seq++, act[alloc], (unsigned long long)addr,
                (unsigned long long)size, stream, frames) < 0)
        t->bad = true;
    if (!alloc && fprintf(t->f, "%ld,0,free_completed,%llu,%llu,%d,%s\n", t->seq++,
                          (unsigned long long)addr, (unsigned long long)size, stream, frames) < 0)
        t->bad = true;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: vrsim SCENARIO.lua [options]\n"
        "\n"
        "Simulates training steps of the scenario op by op through PyTorch's caching allocator\n"
        "and prints whether it fits, peak memory with a breakdown, and the step time.\n"
        "\n"
        "options:\n"
        "  --set KEY=VALUE     override a scenario field; KEY is a field (micro_batch, seq, gpu,\n"
        "                      precision, checkpointing, ...) or section.field (training.seq);\n"
        "                      repeatable\n"
        "  --out DIR           where summary.json, memory.csv, trace.json and report.html go\n"
        "                      (default out/<scenario>/)\n"
        "  --no-files          write no files\n"
        "  --explain           after the summary, walk through the step in plain words: what is\n"
        "                      allocated when, why the peak is where it is, where slack comes from\n"
        "  --no-suggest        skip report.html's \"what would help\": by default the changes that\n"
        "                      could lower the peak (checkpointing, LoRA, fused AdamW, accumulation,\n"
        "                      expandable segments, ZeRO, offload) are each simulated once and those\n"
        "                      that help are listed\n"
        "  --json              print summary.json on stdout instead of the table\n"
        "  --allocator KIND    caching (PyTorch's, default) or ideal (no fragmentation)\n"
        "  --alloc-conf STR    PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True\n"
        "  --unsafe            let the scenario use io/os (trusted scenarios only)\n"
        "  --alloc-trace FILE  write every allocation and free as a PyTorch-style trace CSV\n"
        "                      (seq,time_us,action,addr,size,stream), for vrsim replay or a diff\n"
        "                      against torch.cuda.memory._record_memory_history\n"
        "\n"
        "examples:\n"
        "  vrsim scenarios/llama7b_h200.lua\n"
        "  vrsim scenarios/llama7b_h200.lua --set micro_batch=8 --set gpu=a100_80g\n"
        "  vrsim scenarios/llama7b_h200.lua --json | jq .peak_reserved_bytes\n"
        "\n"
        "exit status: 0 fits, 3 does not fit (CUDA out of memory), 2 bad input, 1 internal error\n"
        "the trace.json opens in https://ui.perfetto.dev; memory.csv in any spreadsheet\n");
}

int cmd_run(int argc, char **argv) {
    const char *path = NULL, *outdir = NULL, *allocator = NULL, *conf = NULL, *atrace = NULL;
    bool json = false, files = true, unsafe = false, explain = false, suggest = true;
    const char **sets = calloc((size_t)argc + 1, sizeof(char *));
    int n_sets = 0;
    if (!sets) return VR_EXIT_INTERNAL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); free(sets); return 0; }
        if (strcmp(a, "--json") == 0) { json = true; continue; }
        if (strcmp(a, "--no-files") == 0) { files = false; continue; }
        if (strcmp(a, "--explain") == 0) { explain = true; continue; }
        if (strcmp(a, "--suggest") == 0) { suggest = true; continue; } /* the default */
        if (strcmp(a, "--no-suggest") == 0) { suggest = false; continue; }
        if (strcmp(a, "--unsafe") == 0) { unsafe = true; continue; }
        if (strcmp(a, "--set") == 0 || strcmp(a, "--out") == 0 || strcmp(a, "--allocator") == 0 ||
            strcmp(a, "--alloc-conf") == 0 || strcmp(a, "--alloc-trace") == 0) {
            if (!val) {
                fprintf(stderr, "vrsim: %s needs a value (vrsim --help)\n", a);
                free(sets);
                return VR_EXIT_USAGE;
            }
            if (a[2] == 's') sets[n_sets++] = val;
            else if (a[2] == 'o') outdir = val;
            else if (strcmp(a, "--allocator") == 0) allocator = val;
            else if (strcmp(a, "--alloc-trace") == 0) atrace = val;
            else conf = val;
            i++;
            continue;
        }
        if (strncmp(a, "--set=", 6) == 0) { sets[n_sets++] = a + 6; continue; }
        if (a[0] == '-') {
            fprintf(stderr, "vrsim: unknown option %s (vrsim --help)\n", a);
            free(sets);
            return VR_EXIT_USAGE;
        }
        if (path) {
            fprintf(stderr, "vrsim: one scenario at a time (got %s and %s); use vrsim sweep for "
                    "several\n", path, a);
            free(sets);
            return VR_EXIT_USAGE;
        }
        path = a;
    }
    if (!path) { usage(stderr); free(sets); return VR_EXIT_USAGE; }
    struct stat ost;
    if (files && outdir && stat(outdir, &ost) == 0 && !S_ISDIR(ost.st_mode)) {
        fprintf(stderr, "vrsim: --out %s: exists and is not a directory\n", outdir);
        free(sets);
        return VR_EXIT_USAGE;
    }
    char setbuf[2][600];
    if (allocator) {
        snprintf(setbuf[0], sizeof setbuf[0], "allocator.kind=%s", allocator);
        sets[n_sets++] = setbuf[0];
    }
    if (conf) {
        snprintf(setbuf[1], sizeof setbuf[1], "allocator.conf=%s", conf);
        sets[n_sets++] = setbuf[1];
    }
    ScenarioOptions opts = {.sets = sets, .n_sets = n_sets, .unsafe = unsafe};
    char err[1024];
    Plan *plan = NULL;
    VrStatus st = scenario_load(path, &opts, &plan, err, sizeof err);
    if (st) {
        free(sets);
        fprintf(stderr, "vrsim: %s\n", err);
        return st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
    }
    EngineConfig ec;
    plan_engine_config(plan, files || explain, &ec); /* --explain walks the timeline */
    TraceOut tout = {0};
    char tmp_trace[1100];
    if (atrace) {
        snprintf(tmp_trace, sizeof tmp_trace, "%s.tmp", atrace);
        tout.f = fopen(tmp_trace, "w");
        if (!tout.f) {
            fprintf(stderr, "vrsim: cannot write %s\n", atrace);
            plan_free(plan);
            free(sets);
            return VR_EXIT_USAGE;
        }
        fprintf(tout.f, "seq,time_us,action,addr,size,stream,frames\n");
        tout.g = plan->graph;
        ec.on_alloc = trace_event;
        ec.on_alloc_ud = &tout;
    }
    SimResult *res = NULL;
    st = engine_run(plan->graph, &ec, &plan->alloc, &res, err, sizeof err);
    if (atrace) {
        bool bad = tout.bad | (fclose(tout.f) != 0);
        if (bad || st || rename(tmp_trace, atrace) != 0) {
            remove(tmp_trace);
            if (!st) fprintf(stderr, "vrsim: could not write %s\n", atrace);
        }
    }
    if (st) {
        fprintf(stderr, "vrsim: %s: %s\n", path, st == VR_ENOMEM ? "out of host memory" : err);
        plan_free(plan);
        free(sets);
        return st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
    }
    int rc = report_fits(res) ? VR_EXIT_OK : VR_EXIT_OOM;
    /* offloaded state must fit in the host's RAM too: every rank of a node offloads there */
    int per_node = plan->gpus < 8 ? plan->gpus : 8;
    bool host_oom = plan->host_capacity > 0 && plan->host_bytes * per_node > plan->host_capacity;
    if (host_oom) rc = VR_EXIT_OOM;
    if (json) {
        char *js = report_summary_json(plan, res);
        if (js) { puts(js); free(js); }
    } else {
        report_print_summary(stdout, plan, res);
        if (explain) explain_print(stdout, plan, res);
    }
    if (host_oom)
        fprintf(json ? stderr : stdout, "\nDOES NOT FIT IN HOST MEMORY: the offloaded state needs %.1f GiB "
                "per node, the host has %.1f GiB\n", plan->host_bytes * per_node / 1073741824.0,
                plan->host_capacity / 1073741824.0);
    if (files) {
        char dir[600];
        if (outdir) snprintf(dir, sizeof dir, "%s", outdir);
        else snprintf(dir, sizeof dir, "out/%s", plan->name);
        st = report_write_all(dir, plan, res, err, sizeof err);
        if (!st && suggest) { /* report.html again, with the "what would help" rows */
            ReportVariant *v = NULL;
            int nv = 0;
            st = report_html_variants(path, &opts, plan, res, &v, &nv);
            if (st) snprintf(err, sizeof err, "out of host memory");
            else st = report_html_write_with(dir, plan, res, v, nv, err, sizeof err);
            free(v);
        }
        if (st) {
            fprintf(stderr, "vrsim: %s\n", err);
            rc = VR_EXIT_INTERNAL;
        } else if (!json) {
            printf("\n  files: %s/report.html (open in a browser), summary.json, memory.csv,\n"
                   "         trace.json (open in https://ui.perfetto.dev)\n", dir);
        }
    }
    engine_result_free(res);
    plan_free(plan);
    free(sets);
    return rc;
}
