/* cmd_validate.c: `vrsim validate [FILE.jsonl ...]`: every measured run (format of
 * ../shared/truth/README.md, vocabulary of DESIGN.md "Validation records") is rebuilt as a
 * scenario, simulated, and compared metric by metric. Records the simulator cannot model yet
 * are listed as skipped with the reason, never dropped. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_statistics_double.h>

#include "cmds.h"
#include "engine.h"
#include "scenario.h"

#define MIB 1048576.0

typedef struct Row {
    char config[96];
    char metric[24];
    double measured, predicted, rel_error;
    int set;               /* ROWSET_*: which kind of measured run, for the step-time summary */
} Row;

enum { ROWSET_LLAMA1 = 0, ROWSET_SDXL, ROWSET_MULTI, ROWSET_COUNT };
static const char *const ROWSET_NAME[ROWSET_COUNT] = {"one-GPU LLaMA", "SDXL", "two-GPU ranks"};

typedef struct Rows { Row *r; int n, cap; } Rows;

static int add_row(Rows *rows, const char *cfg, const char *metric, double m, double p) {
    if (rows->n == rows->cap) {
        int nc = rows->cap ? rows->cap * 2 : 64;
        Row *nr = realloc(rows->r, sizeof(Row) * (size_t)nc);
        if (!nr) return -1;
        rows->r = nr;
        rows->cap = nc;
    }
    Row *w = &rows->r[rows->n++];
    snprintf(w->config, sizeof w->config, "%s", cfg);
    snprintf(w->metric, sizeof w->metric, "%s", metric);
    w->measured = m;
    w->predicted = p;
    w->set = ROWSET_LLAMA1;
    w->rel_error = strcmp(metric, "fits") == 0 ? (m == p ? 0.0 : 1.0) : (m != 0 ? (p - m) / m : 0);
    return 0;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static double jnum(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* Writes the scenario source for record rec into src; returns NULL when it can be modelled, or
 * the reason it cannot. */
static const char *record_scenario(const cJSON *rec, char *src, size_t n, int steps, int rank) {
    const char *shape = jstr(rec, "shape"), *mode = jstr(rec, "mode"), *attn = jstr(rec, "attn");
    const char *optim = jstr(rec, "optim"), *conf = jstr(rec, "alloc_conf");
    const char *model = jstr(rec, "model");
    bool sdxl = (model && strncmp(model, "sdxl", 4) == 0) || cJSON_GetObjectItem(rec, "res");
    if (sdxl && mode) {
        const char *impl2 = optim && strstr(optim, "fused") ? "fused" : optim && strstr(optim, "forloop") ? "forloop" : "foreach";
        snprintf(src, n,
                 "return {\n"
                 "  hardware = { gpu = \"h200\", capacity_mib = %.4f },\n"
                 "  model = { arch = \"sdxl\", variant = \"%s\" },\n"
                 "  training = { micro_batch = %d, resolution = %d, precision = \"%s\",\n"
                 "               optimizer = \"adamw\", optimizer_impl = \"%s\", checkpointing = %s,\n"
                 "               steps = %d },\n"
                 "  allocator = { conf = \"%s\" },\n"
                 "}\n",
                 jnum(rec, "total_mib", 143155.9375), model ? model : "sdxl-base-unet",
                 (int)jnum(rec, "batch", 1), (int)jnum(rec, "res", 1024), mode, impl2,
                 cJSON_IsTrue(cJSON_GetObjectItem(rec, "ckpt")) ? "true" : "false", steps,
                 conf ? conf : "");
        return NULL;
    }
    if (!shape || !mode) return "record has no shape or mode";
    const char *impl = "foreach";
    if (optim && strstr(optim, "fused")) impl = "fused";
    else if (optim && strstr(optim, "forloop")) impl = "forloop";
    double total = jnum(rec, "total_mib", 0), cap = jnum(rec, "cap_mib", 0);
    char hw[512];
    int k = snprintf(hw, sizeof hw, "gpu = \"h200\"");
    if (total > 0) k += snprintf(hw + k, sizeof hw - (size_t)k, ", capacity_mib = %.4f", total);
    if (cap > 0 && total > 0)
        snprintf(hw + k, sizeof hw - (size_t)k, ", memory_fraction = %.10f", cap / total);
    /* multi-GPU records (DESIGN.md): strategy, raf, world_size, offload, empty_cache_after_build */
    char extra[400] = "";
    const char *strategy = jstr(rec, "strategy");
    if (strategy) {
        bool off = cJSON_IsTrue(cJSON_GetObjectItem(rec, "offload"));
        /* measure_multi.py runs each rank with OMP_NUM_THREADS=8 unless the record says */
        snprintf(extra, sizeof extra,
                 ",\n               strategy = \"%s\", zero = { raf = %s%s },"
                 " empty_cache_after_build = %s, cpu_threads = %d",
                 strategy, cJSON_IsFalse(cJSON_GetObjectItem(rec, "raf")) ? "false" : "true",
                 off ? ", offload_param = \"cpu\", offload_optimizer = \"cpu\"" : "",
                 cJSON_IsTrue(cJSON_GetObjectItem(rec, "empty_cache_after_build")) ? "true" : "false",
                 (int)jnum(rec, "omp_num_threads", 8));
        size_t k2 = strlen(hw);
        snprintf(hw + k2, sizeof hw - k2, ", count = %d, interconnect = \"nvlink\", rank = %d",
                 (int)jnum(rec, "world_size", 1), rank);
    }
    snprintf(src, n,
             "return {\n"
             "  hardware = { %s },\n"
             "  model = { arch = \"llama2\", size = \"%s\" },\n"
             "  training = { micro_batch = %d, seq = %d, precision = \"%s\", optimizer = \"adamw\",\n"
             "               optimizer_impl = \"%s\", attention = \"%s\", checkpointing = %s, steps = %d%s },\n"
             "  allocator = { conf = \"%s\" },\n"
             "}\n",
             hw, shape, (int)jnum(rec, "batch", 1), (int)jnum(rec, "seq", 2048),
             strcmp(mode, "mp_fp32") == 0 ? "mp_fp32" : mode, impl,
             attn ? attn : "sdpa", cJSON_IsTrue(cJSON_GetObjectItem(rec, "ckpt")) ? "true" : "false",
             steps, extra, conf ? conf : "");
    return NULL;
}

typedef struct Opts { bool json, step0; const char *only; } Opts;

/* Simulates one record (for multi-GPU records, one rank) and adds its rows. */
static void validate_one(const cJSON *rec, const cJSON *steps, int nsteps, bool oomed,
                         const char *cfg, const char *file, int line, int rank, const Opts *o,
                         Rows *rows, int *skipped) {
    if (nsteps == 0 && !oomed) {
        if (!o->json) printf("  %-24s skipped: the record has no measured steps\n", cfg);
        (*skipped)++;
        return;
    }
    int sim_steps = oomed ? (int)jnum(rec, "oom_at_step", 0) + 1 : nsteps;
    if (sim_steps < 1) sim_steps = 1;
    char src[3072];
    const char *why = record_scenario(rec, src, sizeof src, sim_steps, rank);
    if (why) {
        if (!o->json) printf("  %-24s skipped: %s\n", cfg, why);
        (*skipped)++;
        return;
    }
    char chunk[600], err[1024];
    snprintf(chunk, sizeof chunk, "%s:%d (%s)", file, line, cfg);
    ScenarioOptions so = {0};
    Plan *plan = NULL;
    if (scenario_load_source(chunk, src, NULL, &so, &plan, err, sizeof err)) {
        if (!o->json) printf("  %-24s skipped: %s\n", cfg, err);
        (*skipped)++;
        return;
    }
    EngineConfig ec;
    plan_engine_config(plan, false, &ec);
    SimResult *res = NULL;
    if (engine_run(plan->graph, &ec, &plan->alloc, &res, err, sizeof err)) {
        if (!o->json) printf("  %-24s skipped: %s\n", cfg, err);
        plan_free(plan);
        (*skipped)++;
        return;
    }
    if (cJSON_GetObjectItem(rec, "cap_mib"))
        add_row(rows, cfg, "fits", oomed ? 0 : 1, res->oom ? 0 : 1);
    if (!oomed && nsteps > 0 && res->n_steps == nsteps) {
        int si = o->step0 ? 0 : nsteps - 1;
        const cJSON *ms = cJSON_GetArrayItem(steps, si);
        const StepResult *ps = &res->steps[si];
        add_row(rows, cfg, "peak_allocated", jnum(ms, "peak_alloc_mib", 0) * MIB, (double)ps->peak_allocated);
        add_row(rows, cfg, "peak_reserved", jnum(ms, "peak_reserved_mib", 0) * MIB, (double)ps->peak_reserved);
        if (jnum(ms, "gpu_ms", 0) > 0 &&
            add_row(rows, cfg, "step_time", jnum(ms, "gpu_ms", 0), ps->time_ns / 1e6) == 0)
            rows->r[rows->n - 1].set = cJSON_GetObjectItem(rec, "res") ? ROWSET_SDXL
                                     : jnum(rec, "world_size", 1) > 1 ? ROWSET_MULTI : ROWSET_LLAMA1;
    } else if (!oomed && nsteps > 0 && res->oom && !o->json) {
        printf("  %-24s predicted OOM in step %d where the run fitted\n", cfg, res->oom_step);
    }
    engine_result_free(res);
    plan_free(plan);
}

static int validate_record(const cJSON *rec, const char *file, int line, const Opts *o, Rows *rows,
                           int *skipped) {
    const char *name = jstr(rec, "name");
    char cfg[96];
    snprintf(cfg, sizeof cfg, "%s", name ? name : "?");
    if (cJSON_GetObjectItem(rec, "cap_mib"))
        snprintf(cfg, sizeof cfg, "%s@cap%.0f", name ? name : "?", jnum(rec, "cap_mib", 0));
    if (o->only && !strstr(cfg, o->only)) return 0;
    bool oomed = cJSON_GetObjectItem(rec, "oom_at_step") != NULL;
    const cJSON *ranks = cJSON_GetObjectItem(rec, "ranks");
    if (cJSON_IsArray(ranks)) {
        /* multi-GPU: every rank is simulated as itself and compared with its own steps */
        int r = 0;
        for (const cJSON *rk = ranks->child; rk; rk = rk->next, r++) {
            const cJSON *steps = cJSON_GetObjectItem(rk, "steps");
            char rc[112];
            snprintf(rc, sizeof rc, "%s/r%d", cfg, (int)jnum(rk, "rank", r));
            validate_one(rec, steps, cJSON_IsArray(steps) ? cJSON_GetArraySize(steps) : 0, oomed,
                         rc, file, line, (int)jnum(rk, "rank", r), o, rows, skipped);
        }
        return 0;
    }
    const cJSON *steps = cJSON_GetObjectItem(rec, "steps");
    validate_one(rec, steps, cJSON_IsArray(steps) ? cJSON_GetArraySize(steps) : 0, oomed, cfg, file,
                 line, 0, o, rows, skipped);
    return 0;
}

static int validate_file(const char *path, const Opts *o, Rows *rows, int *skipped) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "vrsim validate: cannot read %s\n", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == 0) continue;
        cJSON *rec = cJSON_Parse(p);
        if (!rec || !cJSON_IsObject(rec)) {
            fprintf(stderr, "vrsim validate: %s:%d: not a JSON object\n", path, lineno);
            cJSON_Delete(rec);
            rc = -1;
            break;
        }
        validate_record(rec, path, lineno, o, rows, skipped);
        cJSON_Delete(rec);
    }
    free(line);
    fclose(f);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void print_table(const Rows *rows) {
    printf("\n  %-24s %-15s %14s %14s %9s\n", "config", "metric", "measured", "predicted", "error");
    for (int i = 0; i < rows->n; i++) {
        const Row *r = &rows->r[i];
        bool mem = strncmp(r->metric, "peak", 4) == 0;
        if (strcmp(r->metric, "fits") == 0)
            printf("  %-24s %-15s %14s %14s %9s\n", r->config, r->metric,
                   r->measured ? "fits" : "OOM", r->predicted ? "fits" : "OOM",
                   r->rel_error == 0 ? "ok" : "WRONG");
        else
            printf("  %-24s %-15s %10.1f %s %10.1f %s %+8.2f%%\n", r->config, r->metric,
                   mem ? r->measured / MIB : r->measured, mem ? "MiB" : "ms ",
                   mem ? r->predicted / MIB : r->predicted, mem ? "MiB" : "ms ", 100 * r->rel_error);
    }
    const char *metrics[] = {"peak_allocated", "peak_reserved", "step_time", "fits"};
    printf("\n");
    for (int m = 0; m < 4; m++) {
        double abs_err[4096];
        int n = 0;
        for (int i = 0; i < rows->n && n < 4096; i++)
            if (strcmp(rows->r[i].metric, metrics[m]) == 0) abs_err[n++] = fabs(rows->r[i].rel_error);
        if (!n) continue;
        double mx = abs_err[0];
        for (int i = 1; i < n; i++) if (abs_err[i] > mx) mx = abs_err[i];
        if (m == 3) {
            int right = 0;
            for (int i = 0; i < n; i++) right += abs_err[i] == 0;
            printf("  %-15s %d of %d verdicts right\n", metrics[m], right, n);
        }
        else
            printf("  %-15s mean |error| %6.2f%%   max %6.2f%%   (%d configs)\n", metrics[m],
                   100 * gsl_stats_mean(abs_err, 1, (size_t)n), 100 * mx, n);
        /* step time by kind of run: mean signed and mean/max absolute error */
        for (int set = 0; m == 2 && set < ROWSET_COUNT; set++) {
            double se[4096];
            int k = 0;
            for (int i = 0; i < rows->n && k < 4096; i++)
                if (strcmp(rows->r[i].metric, "step_time") == 0 && rows->r[i].set == set)
                    se[k++] = rows->r[i].rel_error;
            if (!k) continue;
            double sum = 0, asum = 0, amx = 0;
            for (int i = 0; i < k; i++) sum += se[i], asum += fabs(se[i]), amx = fabs(se[i]) > amx ? fabs(se[i]) : amx;
            printf("    %-13s mean |error| %6.2f%%   max %6.2f%%   signed %+6.2f%%   (%d)\n",
                   ROWSET_NAME[set], 100 * asum / k, 100 * amx, 100 * sum / k, k);
        }
    }
}

static void print_json(const Rows *rows) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < rows->n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "config", rows->r[i].config);
        cJSON_AddStringToObject(o, "metric", rows->r[i].metric);
        cJSON_AddNumberToObject(o, "measured", rows->r[i].measured);
        cJSON_AddNumberToObject(o, "predicted", rows->r[i].predicted);
        cJSON_AddNumberToObject(o, "rel_error", rows->r[i].rel_error);
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(arr);
    if (s) puts(s);
    free(s);
    cJSON_Delete(arr);
}

int cmd_validate(int argc, char **argv) {
    Opts o = {0};
    const char **files = calloc((size_t)argc + 256, sizeof(char *));
    char **owned = calloc(256, sizeof(char *));
    int nf = 0, nown = 0;
    if (!files || !owned) return VR_EXIT_INTERNAL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) o.json = true;
        else if (strcmp(argv[i], "--step0") == 0) o.step0 = true;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) o.only = argv[++i];
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: vrsim validate [--json] [--step0] [--only NAME] [FILE.jsonl ...]\n\n"
                   "Rebuilds every measured run in the files (default: validation/*.jsonl) as a\n"
                   "scenario, simulates it and prints measured against predicted peak allocated,\n"
                   "peak reserved, step time and (for capped runs) the fit verdict, with the\n"
                   "relative error. --step0 compares the first step instead of the steady state.\n");
            free(files); free(owned);
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "vrsim validate: unknown option %s\n", argv[i]);
            free(files); free(owned);
            return VR_EXIT_USAGE;
        } else files[nf++] = argv[i];
    }
    if (nf == 0) {
        DIR *d = opendir("validation");
        if (!d) {
            fprintf(stderr, "vrsim validate: no files given and no validation/ folder here\n");
            free(files); free(owned);
            return VR_EXIT_USAGE;
        }
        struct dirent *e;
        while ((e = readdir(d)) && nown < 255) {
            size_t l = strlen(e->d_name);
            if (l > 6 && strcmp(e->d_name + l - 6, ".jsonl") == 0) {
                owned[nown] = malloc(l + 12);
                if (!owned[nown]) break;
                snprintf(owned[nown], l + 12, "validation/%s", e->d_name);
                files[nf++] = owned[nown++];
            }
        }
        closedir(d);
        qsort(files, (size_t)nf, sizeof(char *), cmp_str);
    }
    Rows rows = {0};
    int skipped = 0, rc = 0;
    if (!o.json) printf("vrsim validate: predictions against measured runs\n");
    for (int i = 0; i < nf; i++) {
        if (!o.json) printf("\n%s\n", files[i]);
        if (validate_file(files[i], &o, &rows, &skipped)) rc = VR_EXIT_USAGE;
    }
    if (o.json) print_json(&rows);
    else {
        print_table(&rows);
        printf("  skipped         %d records (reasons above)\n", skipped);
    }
    free(rows.r);
    for (int i = 0; i < nown; i++) free(owned[i]);
    free(owned);
    free(files);
    return rc;
}
