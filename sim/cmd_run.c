/* cmd_run.c: `vrsim SCENARIO [options]`: simulate a scenario, print the summary, write the
 * report files. Exit 0 fits, 3 does not fit, 2 bad input, 1 internal error. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmds.h"
#include "engine.h"
#include "diagnose.h"
#include "explain.h"
#include "outpath.h"
#include "recipe.h"
#include "report_html.h"
#include "report.h"
#include "safetext.h"
#include "scenario.h"
#include "variants.h"

/* --alloc-trace: the engine's allocations as a trace CSV (docs/validation.md, "Record format"). An existing
 * file is replaced only when it starts with this header (a trace vrsim wrote). */
static const char TRACE_HEADER[] = "seq,time_us,action,addr,size,stream,frames\n";

typedef struct TraceOut { FILE *f; long seq; bool bad; const Graph *g; } TraceOut;

/* One event; the frames column names the op, as _record_memory_history(context=...) would. */
static void trace_event(void *ud, bool alloc, uint64_t addr, uint64_t size, int stream, int op,
                        double host_ns) {
    TraceOut *t = ud;
    if (t->bad) return;
    const char *act[2] = {"free_requested", "alloc"};
    const char *name = op >= 0 ? graph_op_c(t->g, op)->name : "";
    long long us = (long long)(host_ns / 1000.0);
    for (int k = 0; k < (alloc ? 1 : 2); k++) {
        if (fprintf(t->f, "%ld,%lld,%s,%llu,%llu,%d,", t->seq++, us,
                    k ? "free_completed" : act[alloc], (unsigned long long)addr,
                    (unsigned long long)size, stream) < 0)
            t->bad = true;
        /* the op's whole name, with what would end the CSV field or line made ';' */
        for (const char *c = name; *c; c++)
            if (putc(*c == ',' || *c == '"' || *c == '\n' || *c == '\r' ? ';' : *c, t->f) == EOF)
                t->bad = true;
        if (putc('\n', t->f) == EOF) t->bad = true;
    }
}

/* Temporaries to remove if SIGINT or SIGTERM ends the run: the staged output directory and
 * the --alloc-trace temporary. The one mutable global of the command line, as a signal handler
 * can reach nothing else; written before the handlers are installed, read only by them. */
static struct Cleanup {
    char set_dir[4200];                 /* "" = none */
    char set_files[8][4400];            /* its files and their .tmp.<pid> names */
    int n_set_files;
    char trace_tmp[4200];               /* "" = none */
} cleanup;

static void on_signal(int sig) {
    /* async-signal-safe calls only */
    for (int i = 0; i < cleanup.n_set_files; i++) unlink(cleanup.set_files[i]);
    if (cleanup.set_dir[0]) rmdir(cleanup.set_dir);
    if (cleanup.trace_tmp[0]) unlink(cleanup.trace_tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void watch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* Records the staged directory's files for the signal handler. */
static void cleanup_set(const char *dir) {
    snprintf(cleanup.set_dir, sizeof cleanup.set_dir, "%s", dir);
    int n = 0;
    for (int i = 0; report_set_file(i) && n + 2 <= 8; i++) {
        snprintf(cleanup.set_files[n++], sizeof cleanup.set_files[0], "%s/%s", dir, report_set_file(i));
        snprintf(cleanup.set_files[n++], sizeof cleanup.set_files[0], "%s/%s.tmp.%ld", dir,
                 report_set_file(i), (long)getpid());
    }
    cleanup.n_set_files = n;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: vrsim SCENARIO.lua [options]\n"
        "       vrsim CONFIG.yaml --gpu NAME [options]   a trainer's config (axolotl, accelerate)\n"
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
        "  --no-suggest        skip \"what would help\": by default the changes that could lower the\n"
        "                      peak (checkpointing, LoRA, fused AdamW, accumulation, expandable\n"
        "                      segments, ZeRO, offload) are each simulated once for report.html; a\n"
        "                      run that does not fit also searches 8-bit AdamW, offload on one GPU,\n"
        "                      more GPUs, larger cards, QLoRA and pairs of changes, and prints the\n"
        "                      best that fit (with --explain, also for a run that fits)\n"
        "  --json              print summary.json on stdout instead of the table\n"
        "  --allocator KIND    caching (PyTorch's, default) or ideal (no fragmentation)\n"
        "  --alloc-conf STR    PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True; without it\n"
        "                      the environment's PYTORCH_CUDA_ALLOC_CONF is used, as PyTorch would\n"
        "  --unsafe            let the scenario use io/os (trusted scenarios only)\n"
        "  --gpu NAME          a trainer config (CONFIG.yaml, below): the GPU it runs on\n"
        "  --gpus N            a trainer config: the ranks the launcher starts (default: the\n"
        "                      file's num_processes, else 1)\n"
        "  --from FORMAT       a trainer config's format: axolotl, accelerate, trl, hf_trainer,\n"
        "                      llamafactory or torchtune (default: found from its keys)\n"
        "  --accelerate FILE   a TRL or TrainingArguments config run by `accelerate launch\n"
        "                      --config_file FILE`: the launcher's ranks, FSDP / DeepSpeed plugin\n"
        "                      and mixed precision from FILE, the rest from the config\n"
        "  --print-scenario    a trainer config: print the scenario it reads as (Lua, to keep)\n"
        "  --alloc-trace FILE  write every allocation and free as a PyTorch-style trace CSV\n"
        "                      (seq,time_us,action,addr,size,stream,frames), for vrsim replay or a\n"
        "                      diff against torch.cuda.memory._record_memory_history: time_us is\n"
        "                      the simulated host clock, frames the op that allocates\n"
        "\n"
        "examples:\n"
        "  vrsim scenarios/llama7b_h200.lua\n"
        "  vrsim scenarios/llama7b_h200.lua --set micro_batch=8 --set gpu=a100_80g\n"
        "  vrsim scenarios/llama7b_h200.lua --json | jq .peak_reserved_bytes\n"
        "  vrsim qlora.yml --gpu rtx4090          an axolotl config as it is (docs/recipes.md)\n"
        "\n"
        "exit status: 0 fits, 3 does not fit (CUDA out of memory), 2 bad input, 1 internal error\n"
        "the trace.json opens in https://ui.perfetto.dev; memory.csv in any spreadsheet\n");
}

int cmd_run(int argc, char **argv) {
    const char *path = NULL, *outdir = NULL, *allocator = NULL, *conf = NULL, *atrace = NULL;
    bool json = false, files = true, unsafe = false, explain = false, suggest = true;
    bool print_scn = false;
    RecipeOptions rcp = {0};
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
                safetext_eprintf("vrsim: %s needs a value (vrsim --help)\n", a);
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
        /* a trainer config (vrsim CONFIG.yaml): its format, the hardware it does not name */
        if (strcmp(a, "--print-scenario") == 0) { print_scn = true; continue; }
        if (strcmp(a, "--from") == 0 || strcmp(a, "--gpu") == 0 || strcmp(a, "--gpus") == 0 ||
            strcmp(a, "--accelerate") == 0) {
            char *end = NULL;
            long n = val ? strtol(val, &end, 10) : 0;
            if (!val || (strcmp(a, "--gpus") == 0 && (*end || n < 1 || n > 1 << 20))) {
                fprintf(stderr, "vrsim: %s needs a %s (vrsim --help)\n", a,
                        strcmp(a, "--gpus") == 0 ? "count from 1 to 1048576" : "value");
                free(sets);
                return VR_EXIT_USAGE;
            }
            if (a[2] == 'f') rcp.from = val;
            else if (a[2] == 'a') rcp.accelerate = val;
            else if (strcmp(a, "--gpu") == 0) rcp.gpu = val;
            else rcp.count = (int)n;
            i++;
            continue;
        }
        if (a[0] == '-') {
            safetext_eprintf("vrsim: unknown option %s (vrsim --help)\n", a);
            free(sets);
            return VR_EXIT_USAGE;
        }
        if (path) {
            safetext_eprintf("vrsim: one scenario at a time (got %s and %s); use vrsim sweep for "
                    "several\n", path, a);
            free(sets);
            return VR_EXIT_USAGE;
        }
        path = a;
    }
    if (!path) { usage(stderr); free(sets); return VR_EXIT_USAGE; }
    bool recipe = rcp.from || recipe_is_config(path);
    if (!recipe && rcp.accelerate) {
        fprintf(stderr, "vrsim: --accelerate is for a TRL or TrainingArguments config (CONFIG.yaml), "
                "not a scenario\n");
        free(sets);
        return VR_EXIT_USAGE;
    }
    if (!recipe && (print_scn || rcp.gpu || rcp.count)) {
        fprintf(stderr, "vrsim: --print-scenario, --gpu and --gpus are for a trainer config "
                "(CONFIG.yaml); a scenario names its hardware (--set hardware.gpu=NAME)\n");
        free(sets);
        return VR_EXIT_USAGE;
    }
    struct stat ost;
    /* the report writer builds DIR/NAME paths within PATH_MAX: refuse, never cut, a longer one */
    if (files && outdir && strlen(outdir) > 4000) {
        safetext_eprintf("vrsim: --out: a path of %zu characters is longer than the 4000 vrsim "
                "can write under\n", strlen(outdir));
        free(sets);
        return VR_EXIT_USAGE;
    }
    /* --alloc-trace is created as the output set is: only over a trace vrsim wrote, never over
     * a link, a device or the scenario */
    if (atrace) {
        const char *inputs[] = {path, NULL};
        char cerr[8300];
        if (strlen(atrace) > 4000) {
            safetext_eprintf("vrsim: --alloc-trace: a path of %zu characters is longer than the "
                    "4000 vrsim can write\n", strlen(atrace));
            free(sets);
            return VR_EXIT_USAGE;
        }
        if (outpath_check_file(atrace, "--alloc-trace", inputs, TRACE_HEADER, cerr, sizeof cerr)) {
            safetext_eprintf("vrsim: %s\n", cerr);
            free(sets);
            return VR_EXIT_USAGE;
        }
    }
    if (files && outdir && stat(outdir, &ost) == 0 && !S_ISDIR(ost.st_mode)) {
        safetext_eprintf("vrsim: --out %s: exists and is not a directory\n", outdir);
        free(sets);
        return VR_EXIT_USAGE;
    }
    /* the option values are user strings of any length: never cut to a buffer */
    char *setbuf[2] = {NULL, NULL};
    if (allocator) {
        setbuf[0] = malloc(strlen(allocator) + 16);
        if (!setbuf[0]) { free(sets); return VR_EXIT_INTERNAL; }
        sprintf(setbuf[0], "allocator.kind=%s", allocator);
        sets[n_sets++] = setbuf[0];
    }
    /* PyTorch reads PYTORCH_CUDA_ALLOC_CONF from the environment; --alloc-conf stands in for it */
    bool conf_from_env = false;
    if (!conf) {
        const char *env = getenv("PYTORCH_CUDA_ALLOC_CONF");
        if (env && env[0]) conf = env, conf_from_env = true;
    }
    if (conf) {
        setbuf[1] = malloc(strlen(conf) + 16);
        if (!setbuf[1]) { free(setbuf[0]); free(sets); return VR_EXIT_INTERNAL; }
        sprintf(setbuf[1], "allocator.conf=%s", conf);
        sets[n_sets++] = setbuf[1];
    }
    ScenarioOptions opts = {.sets = sets, .n_sets = n_sets, .unsafe = unsafe};
    char err[1024];
    Plan *plan = NULL;
    VrStatus st;
    char *chunk = NULL; /* a trainer config's chunk, kept for a pipeline's other ranks */
    if (recipe) {
        /* lua/recipes/load.lua reads the file (opened as typed) into the scenario; relative
         * paths in it are read from the working folder, as the trainer reads them */
        for (int k = 0; k < n_sets; k++)
            if (strncmp(sets[k], "model.config=", 13) == 0 || strncmp(sets[k], "config=", 7) == 0)
                rcp.model_config = strchr(sets[k], '=') + 1;
        opts.typed_file = path;
        opts.typed_launcher = rcp.accelerate;
        suggest = false; /* report.html's variants reload the path as a scenario */
        chunk = recipe_chunk(path, &rcp, print_scn);
        char *text = NULL;
        if (!chunk) st = VR_ENOMEM, snprintf(err, sizeof err, "out of host memory");
        else if (print_scn) st = scenario_eval_text(path, chunk, ".", &opts, &text, err, sizeof err);
        else st = scenario_load_source(path, chunk, ".", &opts, &plan, err, sizeof err);
        if (st || print_scn || !plan->pp) {
            free(chunk);
            chunk = NULL;
        }
        if (print_scn && !st) {
            fputs(text, stdout);
            free(text);
            free(setbuf[0]);
            free(setbuf[1]);
            free(sets);
            return fflush(stdout) == 0 && !ferror(stdout) ? VR_EXIT_OK : VR_EXIT_INTERNAL;
        }
    } else {
        st = scenario_load(path, &opts, &plan, err, sizeof err);
    }
    if (st) {
        free(setbuf[0]);
        free(setbuf[1]);
        free(sets);
        safetext_eprintf("vrsim: %s%s\n", err, conf_from_env ? " (allocator settings from PYTORCH_CUDA_ALLOC_CONF "
                "in the environment)" : "");
        return st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
    }
    plan->alloc_conf_from_env = conf_from_env;
    /* pipeline parallelism: every pipeline rank is a plan of its own (sim/cmd_pipeline.c); with
     * --alloc-trace the plan of hardware.rank's pipeline rank runs alone, as any one-rank plan does,
     * its trace and output files its own (an oracle capture is one rank's: validation/oracle) */
    if (plan->pp && !atrace) {
        int prc;
        if (explain) {
            safetext_eprintf("vrsim: %s: %s is not made for pipeline parallelism (training.parallel.pp > 1) yet\n",
                             path, "--explain");
            plan_free(plan);
            prc = VR_EXIT_USAGE;
        } else {
            if (files && !json) printf("(no output files for a pipeline run yet: the terminal summary only)\n");
            prc = cmd_pipeline(path, chunk, &opts, plan, json);
        }
        free(chunk);
        free(setbuf[0]);
        free(setbuf[1]);
        free(sets);
        return prc;
    }
    /* "what would help" (variants.h) is simulated, for report.html and the terminal, in a helper
     * started before the signal handlers (it leaves the staged files alone), while this run goes
     * on; without files or --explain, only once the run is found not to fit */
    Variants *variants = NULL;
    if ((files || explain) && suggest && variants_start(path, &opts, plan, &variants)) {
        safetext_eprintf("vrsim: out of host memory\n");
        plan_free(plan);
        free(setbuf[0]);
        free(setbuf[1]);
        free(sets);
        return VR_EXIT_INTERNAL;
    }
    watch_signals();
    EngineConfig ec;
    plan_engine_config(plan, files || explain, &ec); /* --explain walks the timeline */
    TraceOut tout = {0};
    char *tmp_trace = NULL;
    if (atrace) {
        /* a temporary of this run's own beside the file, renamed over it at the end */
        int fd = outpath_temp_file(atrace, &tmp_trace);
        if (fd >= 0) snprintf(cleanup.trace_tmp, sizeof cleanup.trace_tmp, "%s", tmp_trace);
        tout.f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!tout.f) {
            safetext_eprintf("vrsim: cannot write %s\n", atrace);
            if (fd >= 0) { close(fd); unlink(tmp_trace); }
            free(tmp_trace);
            cleanup.trace_tmp[0] = 0;
            variants_cancel(variants);
            plan_free(plan);
            free(setbuf[0]);
            free(setbuf[1]);
            free(sets);
            return VR_EXIT_INTERNAL;
        }
        fputs(TRACE_HEADER, tout.f);
        tout.g = plan->graph;
        ec.on_alloc = trace_event;
        ec.on_alloc_ud = &tout;
    }
    SimResult *res = NULL;
    st = engine_run(plan->graph, &ec, &plan->alloc, &res, err, sizeof err);
    bool trace_failed = false;
    if (atrace) {
        int flushed = fflush(tout.f), closed = fclose(tout.f); /* both run, whatever the first says */
        bool bad = tout.bad || flushed != 0 || closed != 0;
        const char *inputs[] = {path, NULL};
        char cerr[8300] = "";
        if (bad || st || outpath_commit_file(tmp_trace, atrace, "--alloc-trace", inputs,
                                             TRACE_HEADER, cerr, sizeof cerr)) {
            remove(tmp_trace);
            if (!st && cerr[0]) safetext_eprintf("vrsim: %s\n", cerr);
            else if (!st) safetext_eprintf("vrsim: could not write %s\n", atrace);
            trace_failed = !st;
        }
        free(tmp_trace);
        cleanup.trace_tmp[0] = 0;
    }
    if (st) {
        safetext_eprintf("vrsim: %s: %s\n", path, st == VR_ENOMEM ? "out of host memory" : err);
        variants_cancel(variants);
        plan_free(plan);
        free(setbuf[0]);
        free(setbuf[1]);
        free(sets);
        return st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
    }
    int rc = report_fits(res) ? VR_EXIT_OK : VR_EXIT_OOM;
    /* offloaded state must fit in the host's RAM too: every rank of a node offloads there */
    int per_node = plan->gpus < 8 ? plan->gpus : 8;
    bool host_oom = plan->host_capacity > 0 && plan->host_bytes * per_node > plan->host_capacity;
    if (host_oom) rc = VR_EXIT_OOM;
    /* out of memory: what exceeds the card (diagnose.h), and what would make it fit */
    Diagnosis dg;
    memset(&dg, 0, sizeof dg);
    bool fits = report_fits(res);
    if (!fits && (!json || suggest) && diagnose_oom(plan, res, &dg, err, sizeof err)) {
        fprintf(stderr, "vrsim: %s: the out-of-memory diagnosis failed: %s\n", path, err);
        memset(&dg, 0, sizeof dg);
    }
    if (!fits && suggest && !json && !variants && variants_start(path, &opts, plan, &variants)) {
        fprintf(stderr, "vrsim: out of host memory\n");
        rc = VR_EXIT_INTERNAL;
        variants = NULL;
    }
    ReportVariant *rows = NULL;
    int n_rows = -1;
    if (variants && variants_finish(variants, res, dg.need, &rows, &n_rows)) {
        fprintf(stderr, "vrsim: out of host memory\n");
        rc = VR_EXIT_INTERNAL;
        rows = NULL;
        n_rows = -1;
    }
    variants = NULL;
    if (json) {
        char *js = report_summary_json(plan, res);
        if (js) { puts(js); free(js); }
    } else {
        report_print_summary(stdout, plan, res);
        /* the diagnosis and the walk-through name the scenario's ops and tensors: made safe for a
         * terminal */
        if ((!fits && !explain && dg.cause != OOM_NONE) || explain) {
            char *text = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&text, &len);
            if (m) {
                if (explain) {
                    explain_print(m, plan, res, &dg);
                } else {
                    fputc('\n', m);
                    diagnose_print(m, plan, &dg, "  ");
                }
                if (fclose(m) == 0) safetext_fputs(stdout, text);
            }
            if (!m || !text) safetext_eprintf("vrsim: out of host memory\n");
            free(text);
        }
        if (n_rows >= 0 && (!fits || explain)) variants_print(stdout, rows, n_rows, 10, fits);
    }
    if (host_oom)
        fprintf(json ? stderr : stdout, "\nDOES NOT FIT IN HOST MEMORY: the offloaded state needs %.1f GiB "
                "per node, the host has %.1f GiB\n", plan->host_bytes * per_node / 1073741824.0,
                plan->host_capacity / 1073741824.0);
    if (trace_failed) rc = VR_EXIT_INTERNAL;
    if (files) {
        char dir[4096], tmp[4200];
        if (outdir) snprintf(dir, sizeof dir, "%s", outdir);
        else snprintf(dir, sizeof dir, "out/%s", plan->name);
        /* the set is written into a fresh folder beside dir, then put in its place whole */
        st = report_stage_dir(dir, tmp, sizeof tmp, err, sizeof err);
        bool staged = !st;
        if (staged) cleanup_set(tmp);
        /* report.html once: with the "what would help" rows when they are simulated */
        if (!st) st = report_write_all(tmp, plan, res, err, sizeof err);
        if (!st) st = report_html_write_with(tmp, plan, res, rows, suggest ? n_rows : -1, err, sizeof err);
        if (!st) st = report_commit_dir(tmp, dir, err, sizeof err);
        if (st && staged) report_remove_set_dir(tmp);
        cleanup.n_set_files = 0;
        cleanup.set_dir[0] = 0;
        if (st) {
            safetext_eprintf("vrsim: %s\n", err);
            rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
        } else if (!json) {
            printf("\n  files: %s/report.html (open in a browser), summary.json, memory.csv,\n"
                   "         trace.json (open in https://ui.perfetto.dev)\n", dir);
        }
    }
    free(rows);
    engine_result_free(res);
    plan_free(plan);
    free(setbuf[0]);
    free(setbuf[1]);
    free(sets);
    return rc;
}
