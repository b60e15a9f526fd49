/* cmd_validate.c: `vrsim validate [FILE.jsonl ...]`: every measured run (docs/validation.md,
 * "Record format") is rebuilt as a
 * scenario, simulated, and compared metric by metric. Records the simulator cannot model yet
 * are listed as skipped with the reason, never dropped. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gsl/gsl_statistics_double.h>

#include "cmds.h"
#include "engine.h"
#include "infile.h"
#include "jsonin.h"
#include "safetext.h"
#include "scenario.h"

#define MIB 1048576.0

typedef struct Row {
    char *config;              /* owned */
    char metric[24];
    double measured, predicted, rel_error;
    int set;               /* ROWSET_*: which kind of measured run, for the step-time summary */
} Row;

enum { ROWSET_LLAMA1 = 0, ROWSET_SDXL, ROWSET_MULTI, ROWSET_COUNT };
static const char *const ROWSET_NAME[ROWSET_COUNT] = {"one-GPU LLaMA", "SDXL", "two-GPU ranks"};

typedef struct Rows { Row *r; int n, cap; } Rows;

/* Metrics compared exactly: a count that differs is a failed row, whatever its size. */
static bool is_count(const char *metric) {
    return strcmp(metric, "n_params") == 0 || strcmp(metric, "n_trainable") == 0;
}

static int add_row(Rows *rows, const char *cfg, const char *metric, double m, double p) {
    if (rows->n == rows->cap) {
        int nc = rows->cap ? rows->cap * 2 : 64;
        Row *nr = realloc(rows->r, sizeof(Row) * (size_t)nc);
        if (!nr) return -1;
        rows->r = nr;
        rows->cap = nc;
    }
    char *c = malloc(strlen(cfg) + 1);
    if (!c) return -1;
    strcpy(c, cfg);
    Row *w = &rows->r[rows->n++];
    w->config = c;
    snprintf(w->metric, sizeof w->metric, "%s", metric);
    w->measured = m;
    w->predicted = p;
    w->set = ROWSET_LLAMA1;
    w->rel_error = strcmp(metric, "fits") == 0 ? (m == p ? 0.0 : 1.0) : (m != 0 ? (p - m) / m : 0);
    if (is_count(metric) && m != p && w->rel_error == 0) w->rel_error = 1;
    return 0;
}

static void rows_free(Rows *rows) {
    for (int i = 0; i < rows->n; i++) free(rows->r[i].config);
    free(rows->r);
}

/* malloc'd printf, NULL when out of memory */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, f);
    vsnprintf(s, (size_t)n + 1, f, ap);
    va_end(ap);
    return s;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static double jnum(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : def;
}
/* An integer field within [lo, hi], else def. */
static int jint(const cJSON *o, const char *k, int def, int lo, int hi) {
    double v = jnum(o, k, def);
    return v >= lo && v <= hi && v == floor(v) ? (int)v : def;
}

typedef struct Opts { bool json, step0; const char *only; } Opts;

/* What the records gave besides rows. */
typedef struct Tally {
    int skipped;   /* records (or ranks) listed as skipped */
    int malformed; /* of them, records that break the format (exit status 2) */
} Tally;

/* Prints (text mode) or notes on stderr (--json) that cfg was skipped, and counts it. */
static void skip(const Opts *o, const char *cfg, const char *why, Tally *t) {
    if (!o->json) printf("  %-24s skipped: %s\n", cfg, why);
    else fprintf(stderr, "vrsim validate: %s skipped: %s\n", cfg, why);
    t->skipped++;
}

/* skip() for a record that breaks the record format (measurements missing, a rank that is not
 * an integer): also an error naming the record, and the command exits 2. */
static void malformed(const Opts *o, const char *cfg, const char *file, int line, const char *why,
                      Tally *t) {
    fprintf(stderr, "vrsim validate: %s:%d (%s): %s\n", file, line, cfg, why);
    skip(o, cfg, why, t);
    t->malformed++;
}

/* Why the steps of a record cannot be compared (a malformed record), or NULL: each step must be
 * an object with peak_alloc_mib and peak_reserved_mib as finite numbers >= 0 (unless the record
 * measured no memory: time_only), and gpu_ms, where present, a finite number (a missing
 * measurement read as 0 would score +0.00 %). why holds the message. */
static const char *bad_steps(const cJSON *steps, bool time_only, char *why, size_t n) {
    if (steps && !cJSON_IsArray(steps)) return snprintf(why, n, "steps is not an array"), why;
    int i = 0;
    for (const cJSON *st = steps ? steps->child : NULL; st; st = st->next, i++) {
        if (!cJSON_IsObject(st)) return snprintf(why, n, "steps[%d] is not an object", i), why;
        static const char *const NEED[] = {"peak_alloc_mib", "peak_reserved_mib", "gpu_ms"};
        for (int k = time_only ? 2 : 0; k < 3; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, NEED[k]);
            if (!v && k == 2) continue;
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
                return snprintf(why, n, "steps[%d] has %s %s (a measurement must be a finite "
                                "number >= 0)", i, v ? "a non-numeric" : "no", NEED[k]), why;
        }
    }
    return NULL;
}

/* Simulates one record (for multi-GPU records, one rank) and adds its rows. The record becomes
 * a scenario table in Lua data (lua/vrsim/record.lua through scenario_load_record), never Lua
 * source. */
/* Which kind of measured run a record is, for the step-time summary. */
static int rowset_of(const cJSON *rec) {
    return cJSON_GetObjectItem(rec, "res") ? ROWSET_SDXL
           : jnum(rec, "world_size", 1) > 1 ? ROWSET_MULTI : ROWSET_LLAMA1;
}

/* A steady-median record (validation/harness/measure_sdxl_steps.py) times `n_steps` steps after
 * `warmup` uncounted ones and measures no memory: its truth is median_ms, the median of the
 * counted steps' gpu_ms. Returns median_ms (> 0), 0 when the record is not one, or -1 (why set)
 * when median_ms or warmup is not what the format says. */
static double steady_median(const cJSON *rec, char *why, size_t n) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(rec, "median_ms");
    if (!m) return 0;
    if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble) || m->valuedouble <= 0)
        return snprintf(why, n, "median_ms must be a finite number > 0"), -1;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(rec, "warmup");
    if (w && (!cJSON_IsNumber(w) || w->valuedouble != floor(w->valuedouble) ||
              !(w->valuedouble >= 0 && w->valuedouble <= 1000)))
        return snprintf(why, n, "warmup must be an integer in [0, 1000]"), -1;
    return m->valuedouble;
}

/* A steady-median record that timed the host's issue of each phase (median_host_ms: forward,
 * backward, optimizer) beside vrsim's dispatch of the same phases: where a host-bound step's
 * time goes, printed (not a row: the host's own speed is in both). */
static void host_phases(const cJSON *rec, const StepResult *s, const char *cfg, const Opts *o) {
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(rec, "median_host_ms");
    if (!cJSON_IsObject(h)) return;
    static const char *const NAMES[3] = {"forward", "backward", "optimizer"};
    const double sim[3] = {s->host_phase_ns[PH_FWD] / 1e6,
                           (s->host_phase_ns[PH_BWD] + s->host_phase_ns[PH_RECOMPUTE]) / 1e6,
                           (s->host_phase_ns[PH_OPTIM] + s->host_phase_ns[PH_ZERO_GRAD]) / 1e6};
    char line[400];
    size_t used = 0;
    for (int k = 0; k < 3; k++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(h, NAMES[k]);
        if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble)) continue;
        int w = snprintf(line + used, sizeof line - used, "%s%s %.1f measured, %.1f vrsim",
                         used ? "; " : "", NAMES[k], m->valuedouble, sim[k]);
        if (w < 0 || (size_t)w >= sizeof line - used) break;
        used += (size_t)w;
    }
    if (!used) return;
    if (!o->json) printf("  %-24s host by phase, ms: %s\n", cfg, line);
    else fprintf(stderr, "vrsim validate: %s host by phase, ms: %s\n", cfg, line);
}

/* The summaries a record may carry beside its steps: `timed` (measure_diffusers.py: an object
 * whose median_gpu_ms, where given, is the step time validate holds it to) and median_host_ms
 * (measure_sdxl_steps.py: an object of the phases' host milliseconds). NULL when they are as the
 * formats say, else why (the record is malformed, not read another way). */
static const char *bad_summaries(const cJSON *rec, char *why, size_t n) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rec, "timed");
    if (t) {
        if (!cJSON_IsObject(t)) return snprintf(why, n, "timed is not an object"), why;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "median_gpu_ms");
        if (m && (!cJSON_IsNumber(m) || !isfinite(m->valuedouble) || m->valuedouble <= 0))
            return snprintf(why, n, "timed.median_gpu_ms must be a finite number > 0"), why;
    }
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(rec, "median_host_ms");
    if (h) {
        if (!cJSON_IsObject(h)) return snprintf(why, n, "median_host_ms is not an object"), why;
        for (const cJSON *p = h->child; p; p = p->next)
            if (!cJSON_IsNumber(p) || !isfinite(p->valuedouble) || p->valuedouble < 0)
                return snprintf(why, n, "median_host_ms.%s must be a finite number >= 0",
                                p->string ? p->string : "?"), why;
    }
    return NULL;
}

static void validate_one(const cJSON *rec, const cJSON *steps, int nsteps, bool oomed,
                         const char *cfg, const char *file, int line, int rank, const Opts *o,
                         Rows *rows, Tally *tally) {
    char why[200];
    double median = steady_median(rec, why, sizeof why);
    if (median < 0 || bad_steps(steps, median > 0, why, sizeof why) || bad_summaries(rec, why, sizeof why)) {
        malformed(o, cfg, file, line, why, tally);
        return;
    }
    if (nsteps == 0 && !oomed) {
        skip(o, cfg, "the record has no measured steps", tally);
        return;
    }
    int sim_steps = oomed ? jint(rec, "oom_at_step", 0, 0, 1000) + 1 : nsteps;
    /* vrsim's steps after the optimizer's first are alike: the first counted step stands for the
     * median (at least step 2, past the step that creates the optimizer state) */
    if (median > 0) {
        int warmup = jint(rec, "warmup", 0, 0, 1000);
        sim_steps = warmup < 2 ? 3 : warmup + 1;
    }
    if (sim_steps < 1) sim_steps = 1;
    char err[1024];
    char *chunk = fmt("%s:%d (%s)", file, line, cfg);
    if (!chunk) { skip(o, cfg, "out of host memory", tally); return; }
    ScenarioOptions so = {0};
    Plan *plan = NULL;
    VrStatus st = scenario_load_record(chunk, rec, sim_steps, rank, &so, &plan, err, sizeof err);
    free(chunk);
    if (st) {
        skip(o, cfg, err, tally);
        return;
    }
    EngineConfig ec;
    plan_engine_config(plan, false, &ec);
    SimResult *res = NULL;
    if (engine_run(plan->graph, &ec, &plan->alloc, &res, err, sizeof err)) {
        skip(o, cfg, err, tally);
        plan_free(plan);
        return;
    }
    /* the verdict: of every capped run, every run out of memory on the whole card (rebuilt at
     * its total_mib), and every run vrsim puts out of memory where it fitted; a run that fitted
     * the whole card far below it says nothing of the verdict */
    if (cJSON_GetObjectItem(rec, "cap_mib") || oomed || res->oom)
        add_row(rows, cfg, "fits", oomed ? 0 : 1, res->oom ? 0 : 1);
    /* the host it ran on: its own op classes where it timed them (lua/vrsim/record.lua) */
    if (cJSON_GetObjectItem(rec, "host_class_bench")) {
        /* an inference record's ops record no autograd: lua/vrsim/record.lua leaves its classes out */
        const char *h = cJSON_IsTrue(cJSON_GetObjectItem(rec, "inference"))
            ? "host: host_dispatch_scale (it runs under no_grad; its host_class_bench, timed "
              "recording autograd, is not applied)"
            : "host: its host_class_bench's classes, the other host figures at their "
              "summed ratio to the calibration host's (not host_dispatch_scale)";
        if (!o->json) printf("  %-24s %s\n", cfg, h);
        else fprintf(stderr, "vrsim validate: %s %s\n", cfg, h);
    }
    /* the optimizer's per-tensor host work as timed on its host (lua/vrsim/record.lua
     * host_optim_of); an inference record runs no optimizer step */
    if (cJSON_GetObjectItem(rec, "host_optim_bench") && !cJSON_IsTrue(cJSON_GetObjectItem(rec, "inference"))) {
        const char *h = "host: its host_optim_bench's per-tensor optimizer step and zero_grad";
        if (!o->json) printf("  %-24s %s\n", cfg, h);
        else fprintf(stderr, "vrsim validate: %s %s\n", cfg, h);
    }
    if (median > 0 && !oomed && !res->oom && res->n_steps == sim_steps) {
        if (!o->json)
            printf("  %-24s step time only: the median of %d steady steps (no memory measured)\n",
                   cfg, nsteps);
        else
            fprintf(stderr, "vrsim validate: %s step time only: the median of %d steady steps (no "
                    "memory measured)\n", cfg, nsteps);
        if (add_row(rows, cfg, "step_time", median, res->steps[sim_steps - 1].time_ns / 1e6) == 0)
            rows->r[rows->n - 1].set = rowset_of(rec);
        host_phases(rec, &res->steps[sim_steps - 1], cfg, o);
    } else if (median > 0 && res->oom && !o->json) {
        printf("  %-24s predicted OOM in step %d where the run fitted\n", cfg, res->oom_step);
    } else if (!oomed && nsteps > 0 && res->n_steps == nsteps) {
        int si = o->step0 ? 0 : nsteps - 1;
        const cJSON *ms = cJSON_GetArrayItem(steps, si);
        const StepResult *ps = &res->steps[si];
        add_row(rows, cfg, "peak_allocated", jnum(ms, "peak_alloc_mib", 0) * MIB, (double)ps->peak_allocated);
        add_row(rows, cfg, "peak_reserved", jnum(ms, "peak_reserved_mib", 0) * MIB, (double)ps->peak_reserved);
        /* a record that summarizes its timed steps (measure_diffusers.py's `timed`: the steps
         * after its warm-up, compilation included there) is held to their median, not to the
         * last step alone */
        const cJSON *timed = cJSON_GetObjectItemCaseSensitive(rec, "timed");
        double tmed = timed ? jnum(timed, "median_gpu_ms", 0) : 0;
        double truth = tmed > 0 ? tmed : jnum(ms, "gpu_ms", 0);
        if (truth > 0 && add_row(rows, cfg, "step_time", truth, ps->time_ns / 1e6) == 0)
            rows->r[rows->n - 1].set = rowset_of(rec);
    } else if (!oomed && nsteps > 0 && res->oom && !o->json) {
        printf("  %-24s predicted OOM in step %d where the run fitted\n", cfg, res->oom_step);
    }
    /* the model's parameter counts against the simulated model's: a mismatch is a failed row */
    static const char *const COUNTS[2] = {"n_params", "n_trainable"};
    const int64_t sim[2] = {plan->n_params, plan->n_trainable};
    /* An inference record's n_trainable is what the harness saw: the model built as for
     * training, every parameter requires_grad, none of them trained under no_grad; vrsim's is
     * the parameters the run trains (none). Only n_params compares like with like there. */
    const int inference = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "inference"));
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, COUNTS[k]);
        if (!cJSON_IsNumber(v) || (k == 1 && inference)) continue;
        if (sim[k] < 0 || (double)sim[k] != v->valuedouble)
            add_row(rows, cfg, COUNTS[k], v->valuedouble, (double)sim[k]);
    }
    engine_result_free(res);
    plan_free(plan);
}

/* Record fields vrsim does not read, declared informational (docs/validation.md "Provenance
 * fields"): where and how the run was made. They are taken out of the record before it is
 * rebuilt as a scenario, and the output names them; any other field vrsim does not know still
 * skips the record (record.lua), since it might change the configuration. Anything under `meta`
 * (an object) is informational too. */
static const char *const PROVENANCE[] = {
    "meta", "env", "python", "launch_s", "nvidia_smi_at_end", "n_params_local",
    "hostname", "date", "command", "git_commit", "driver", "cpu",
};

/* Takes the provenance fields out of rec (a copy the caller owns). Writes their names,
 * comma-separated, into names (empty when none). Returns NULL, or why the record must be skipped:
 * meta that is not an object, or an env whose PYTORCH_CUDA_ALLOC_CONF differs from the record's
 * alloc_conf (the environment would have changed the allocator: not informational). */
static const char *take_provenance(cJSON *rec, char *names, size_t n, char *why, size_t wn) {
    names[0] = 0;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(rec, "meta");
    if (meta && !cJSON_IsObject(meta)) return snprintf(why, wn, "meta must be an object"), why;
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(rec, "env");
    const cJSON *conf = env ? cJSON_GetObjectItemCaseSensitive(env, "PYTORCH_CUDA_ALLOC_CONF") : NULL;
    if (conf) {
        const char *rc = jstr(rec, "alloc_conf");
        if (!cJSON_IsString(conf) || strcmp(conf->valuestring, rc ? rc : "") != 0)
            return snprintf(why, wn, "env.PYTORCH_CUDA_ALLOC_CONF differs from alloc_conf '%s' (it "
                            "sets the allocator: give it as alloc_conf)", rc ? rc : ""), why;
    }
    size_t used = 0;
    for (size_t i = 0; i < sizeof PROVENANCE / sizeof PROVENANCE[0]; i++) {
        if (!cJSON_GetObjectItemCaseSensitive(rec, PROVENANCE[i])) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(rec, PROVENANCE[i]);
        int k = snprintf(names + used, n - used, "%s%s", used ? ", " : "", PROVENANCE[i]);
        if (k > 0 && (size_t)k < n - used) used += (size_t)k;
    }
    return NULL;
}

/* A record's name as every line shows it: valid UTF-8 (U+FFFD for other bytes, as the JSON rows
 * need), with each control character a '?' (a name cannot move a terminal's cursor). NULL when out
 * of memory. */
static char *shown_name(const char *name) {
    char *s = safetext_utf8(name, strlen(name), NULL);
    if (!s) return NULL;
    for (unsigned char *c = (unsigned char *)s; *c; c++)
        if (*c < 0x20 || *c == 0x7f) *c = '?';
    return s;
}

static int validate_record(const cJSON *rec0, const char *file, int line, const Opts *o, Rows *rows,
                           Tally *tally) {
    char *name = shown_name(jstr(rec0, "name") ? jstr(rec0, "name") : "?");
    if (!name) return -1;
    char *cfg = cJSON_GetObjectItem(rec0, "cap_mib")
                    ? fmt("%s@cap%.0f", name, jnum(rec0, "cap_mib", 0))
                    : fmt("%s", name);
    free(name);
    if (!cfg) return -1;
    if (o->only && !strstr(cfg, o->only)) { free(cfg); return 0; }
    cJSON *rec = cJSON_Duplicate(rec0, true);
    if (!rec) { free(cfg); return -1; }
    char info[256], why[300];
    if (take_provenance(rec, info, sizeof info, why, sizeof why)) {
        skip(o, cfg, why, tally);
        goto done;
    }
    if (info[0]) {
        if (!o->json) printf("  %-24s informational, not read: %s\n", cfg, info);
        else fprintf(stderr, "vrsim validate: %s informational, not read: %s\n", cfg, info);
    }
    const cJSON *oom = cJSON_GetObjectItem(rec, "oom_at_step");
    bool oomed = oom != NULL;
    if (oomed && (!cJSON_IsNumber(oom) || oom->valuedouble != floor(oom->valuedouble) ||
                  !(oom->valuedouble >= 0 && oom->valuedouble <= 1000))) {
        malformed(o, cfg, file, line, "oom_at_step must be an integer in [0, 1000]", tally);
        goto done;
    }
    if (oomed && !cJSON_GetObjectItem(rec, "cap_mib") && !cJSON_GetObjectItem(rec, "total_mib")) {
        skip(o, cfg, "oom_at_step without cap_mib or total_mib: no capacity to rebuild the verdict "
             "at (the card's total as torch reported it, or the cap the run set)", tally);
        goto done;
    }
    const cJSON *ranks = cJSON_GetObjectItem(rec, "ranks");
    if (cJSON_IsArray(ranks)) {
        /* multi-GPU: every rank is simulated as itself and compared with its own steps */
        int r = 0;
        for (const cJSON *rk = ranks->child; rk; rk = rk->next, r++) {
            const cJSON *steps = cJSON_GetObjectItem(rk, "steps");
            const cJSON *rv = cJSON_GetObjectItem(rk, "rank");
            if (rv && (!cJSON_IsNumber(rv) || rv->valuedouble != floor(rv->valuedouble) ||
                       !(rv->valuedouble >= 0 && rv->valuedouble <= 65535))) {
                char *rc = fmt("%s/ranks[%d]", cfg, r);
                if (!rc) { cJSON_Delete(rec); free(cfg); return -1; }
                malformed(o, rc, file, line, "rank must be an integer in [0, 65535]", tally);
                free(rc);
                continue;
            }
            int rank = jint(rk, "rank", r, 0, 65535);
            char *rc = fmt("%s/r%d", cfg, rank);
            if (!rc) { cJSON_Delete(rec); free(cfg); return -1; }
            validate_one(rec, steps, cJSON_IsArray(steps) ? cJSON_GetArraySize(steps) : 0, oomed,
                         rc, file, line, rank, o, rows, tally);
            free(rc);
        }
        goto done;
    }
    const cJSON *steps = cJSON_GetObjectItem(rec, "steps");
    validate_one(rec, steps, cJSON_IsArray(steps) ? cJSON_GetArraySize(steps) : 0, oomed, cfg, file,
                 line, 0, o, rows, tally);
done:
    cJSON_Delete(rec);
    free(cfg);
    return 0;
}

/* Records files are read whole lines at a time; past this a file is refused, not read. */
#define MAX_RECORDS_BYTES ((uint64_t)256 << 20)

static int validate_file(const char *path, const Opts *o, Rows *rows, Tally *tally) {
    int fd;
    uint64_t size;
    InfileStatus is = infile_open(path, MAX_RECORDS_BYTES, &fd, &size);
    FILE *f = is == INFILE_OK ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (is == INFILE_OK) close(fd);
        fprintf(stderr, "vrsim validate: %s: %s\n", path,
                is == INFILE_TOOBIG ? "larger than 256 MiB: refused"
                : is == INFILE_OK  ? "out of host memory" : infile_reason(is));
        return is == INFILE_OK ? -2 : -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (*p == '\n' || (*p == 0 && p - line == n)) continue;
        cJSON *rec = NULL;
        char jerr[300];
        VrStatus js = jsonin_parse(p, (size_t)(n - (p - line)), &rec, jerr, sizeof jerr);
        if (js == VR_ENOMEM) {
            fprintf(stderr, "vrsim validate: out of host memory\n");
            rc = -2;
            break;
        }
        if (js != VR_OK || !cJSON_IsObject(rec)) {
            /* a record is one line: jsonin's "(line 1)" within it says nothing */
            char *l1 = strstr(jerr, " (line 1)");
            if (l1 && l1[9] == 0) *l1 = 0;
            fprintf(stderr, "vrsim validate: %s:%d: %s\n", path, lineno,
                    js != VR_OK ? jerr : "not a JSON object");
            cJSON_Delete(rec);
            rc = -1;
            break;
        }
        if (validate_record(rec, path, lineno, o, rows, tally)) {
            fprintf(stderr, "vrsim validate: out of host memory\n");
            cJSON_Delete(rec);
            rc = -2;
            break;
        }
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
        else if (is_count(r->metric))
            printf("  %-24s %-15s %14.0f %14.0f %9s\n", r->config, r->metric, r->measured,
                   r->predicted, r->rel_error == 0 ? "ok" : "FAILED");
        else
            printf("  %-24s %-15s %10.1f %s %10.1f %s %+8.2f%%\n", r->config, r->metric,
                   mem ? r->measured / MIB : r->measured, mem ? "MiB" : "ms ",
                   mem ? r->predicted / MIB : r->predicted, mem ? "MiB" : "ms ", 100 * r->rel_error);
    }
    const char *metrics[] = {"peak_allocated", "peak_reserved", "step_time", "fits"};
    printf("\n");
    double *abs_err = malloc(sizeof(double) * (size_t)(rows->n ? rows->n : 1));
    if (!abs_err) return;
    for (int m = 0; m < 4; m++) {
        int n = 0;
        for (int i = 0; i < rows->n; i++)
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
    free(abs_err);
    int wrong = 0;
    for (int i = 0; i < rows->n; i++) wrong += is_count(rows->r[i].metric) && rows->r[i].rel_error != 0;
    if (wrong)
        printf("  %-15s %d FAILED: the simulated model's parameter counts differ from the "
               "record's\n", "n_params", wrong);
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

/* The folder `vrsim validate` reads when no file is named: the measured runs, one a line. */
#define RECORDS_DIR "validation/records"

/* Appends RECORDS_DIR/NAME for every NAME.jsonl in RECORDS_DIR to *files (grown as needed;
 * each path is owned by the array), sorted. Returns VR_OK, VR_EIO when the folder cannot be
 * opened, VR_ENOMEM. */
static int list_records(char ***files, int *nf, int *cap) {
    DIR *d = opendir(RECORDS_DIR);
    if (!d) return VR_EIO;
    struct dirent *e;
    int rc = VR_OK;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 6 || strcmp(e->d_name + l - 6, ".jsonl") != 0) continue;
        if (*nf == *cap) {
            int nc = *cap ? *cap * 2 : 16;
            char **nfiles = realloc(*files, (size_t)nc * sizeof(char *));
            if (!nfiles) { rc = VR_ENOMEM; break; }
            *files = nfiles;
            *cap = nc;
        }
        size_t n = sizeof RECORDS_DIR + 1 + l;
        char *path = malloc(n);
        if (!path) { rc = VR_ENOMEM; break; }
        snprintf(path, n, RECORDS_DIR "/%s", e->d_name);
        (*files)[(*nf)++] = path;
    }
    closedir(d);
    if (rc == VR_OK && *nf > 1) qsort(*files, (size_t)*nf, sizeof(char *), cmp_str);
    return rc;
}

int cmd_validate(int argc, char **argv) {
    Opts o = {0};
    const char **args = calloc((size_t)argc + 1, sizeof(char *));
    char **owned = NULL;       /* the default records' paths, each owned */
    int nargs = 0, nown = 0, owncap = 0;
    if (!args) return VR_EXIT_INTERNAL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) o.json = true;
        else if (strcmp(argv[i], "--step0") == 0) o.step0 = true;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) o.only = argv[++i];
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: vrsim validate [--json] [--step0] [--only NAME] [FILE.jsonl ...]\n\n"
                   "Rebuilds every measured run in the files (default: " RECORDS_DIR "/*.jsonl)\n"
                   "as a scenario, simulates it and prints measured against predicted peak\n"
                   "allocated, peak reserved, step time and (for capped runs) the fit verdict, with\n"
                   "the relative error. --step0 compares the first step instead of the steady state.\n");
            free(args);
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "vrsim validate: unknown option %s\n", argv[i]);
            free(args);
            return VR_EXIT_USAGE;
        } else args[nargs++] = argv[i];
    }
    const char *const *files = args;
    int nf = nargs;
    if (nf == 0) {
        int lr = list_records(&owned, &nown, &owncap);
        if (lr != VR_OK) {
            if (lr == VR_EIO)
                fprintf(stderr, "vrsim validate: no files given and no " RECORDS_DIR "/ folder here\n");
            for (int i = 0; i < nown; i++) free(owned[i]);
            free(owned);
            free(args);
            return lr == VR_EIO ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
        }
        files = (const char *const *)owned;
        nf = nown;
    }
    Rows rows = {0};
    Tally tally = {0};
    int rc = 0;
    if (!o.json) printf("vrsim validate: predictions against measured runs\n");
    for (int i = 0; i < nf; i++) {
        if (!o.json) printf("\n%s\n", files[i]);
        int fr = validate_file(files[i], &o, &rows, &tally);
        if (fr == -2) rc = VR_EXIT_INTERNAL;
        else if (fr && rc == 0) rc = VR_EXIT_USAGE;
    }
    if (o.json) {
        print_json(&rows);
        fprintf(stderr, "vrsim validate: %d records skipped\n", tally.skipped);
    } else {
        print_table(&rows);
        printf("  skipped         %d records (reasons above)\n", tally.skipped);
    }
    if (tally.malformed) {
        fprintf(stderr, "vrsim validate: %d malformed records (named above)\n", tally.malformed);
        if (rc == 0) rc = VR_EXIT_USAGE;
    }
    rows_free(&rows);
    for (int i = 0; i < nown; i++) free(owned[i]);
    free(owned);
    free(args);
    return rc;
}
