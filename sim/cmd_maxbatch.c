/* cmd_maxbatch.c: `vrsim maxbatch SCENARIO [--set ...] [--field micro_batch|resolution|seq]
 * [--max N]`: the largest value of one field that fits, each probe a full simulation.
 *
 * Search. Values are multiples of a step (1 for micro_batch and seq, 64 pixels for resolution):
 * v = k * step. Probe k = 1; if it does not fit the answer is "nothing fits" (exit 3). Double k
 * while it fits and k * step <= max; then bisect between the last k that fit (lo) and the first
 * that did not (hi), keeping lo fits and hi does not, until hi == lo + 1. Each probe is one
 * simulation, so a search to max 2^m takes about 2m probes. Memory grows with these fields, so
 * fits is taken to be monotone; the allocator's rounding can break that by a few values near
 * the threshold, which is why every probe is printed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "engine.h"
#include "report.h"
#include "scenario.h"

#define GIB(x) ((double)(x) / 1073741824.0)

static void usage(FILE *f) {
    fprintf(f,
        "usage: vrsim maxbatch SCENARIO.lua [--set KEY=VALUE ...] [--field FIELD] [--max N]\n"
        "\n"
        "Finds the largest value of FIELD at which the scenario fits, by doubling then bisection;\n"
        "every probe is a full simulation (op by op through the caching allocator) and is\n"
        "printed. Assumes memory grows with the field; the printed probes show if it does not.\n"
        "\n"
        "options:\n"
        "  --field FIELD   micro_batch (default), seq, or resolution (diffusion models)\n"
        "  --step N        search multiples of N (default 1; resolution 64 pixels)\n"
        "  --max N         the largest value tried (default: micro_batch 4096, seq 1048576,\n"
        "                  resolution 8192)\n"
        "  --gpu NAME      the catalog GPU (the same as --set gpu=NAME)\n"
        "  --set KEY=VALUE as for vrsim SCENARIO (gpu=, precision=, checkpointing=, ...)\n"
        "  --unsafe        let the scenario use io/os\n"
        "\n"
        "examples:\n"
        "  vrsim maxbatch scenarios/llama7b_h200.lua --gpu a100_80g\n"
        "  vrsim maxbatch scenarios/sdxl_train_3090.lua --field resolution\n"
        "  vrsim maxbatch scenarios/llama7b_h200.lua --field seq --set checkpointing=true\n"
        "\n"
        "exit status: 0 with the answer, 3 if even the smallest value does not fit, 2 bad usage\n"
        "or scenario, 1 internal error\n");
}

typedef struct Probe {
    bool fits;
    double peak_res, capacity, step_ms;
    double tokens_per_s;       /* per GPU; for a model without tokens, images (samples) per s */
    bool images;               /* tokens_per_s counts images */
    char gpu[128];
} Probe;

typedef struct Search {
    const char *path;
    const char **sets; int n_sets;   /* user's sets, then one slot for the field */
    const char *field;
    bool unsafe;
} Search;

/* Simulates the scenario with field=v. VR_OK with *out, or an error status with err. */
static VrStatus probe(const Search *s, long v, Probe *out, char *err, size_t errlen) {
    char set[160];
    snprintf(set, sizeof set, "%s=%ld", s->field, v);
    s->sets[s->n_sets] = set;
    ScenarioOptions opts = {.sets = s->sets, .n_sets = s->n_sets + 1, .unsafe = s->unsafe};
    Plan *plan = NULL;
    VrStatus st = scenario_load(s->path, &opts, &plan, err, errlen);
    if (st) return st;
    EngineConfig ec;
    plan_engine_config(plan, false, &ec);
    SimResult *r = NULL;
    st = engine_run(plan->graph, &ec, &plan->alloc, &r, err, errlen);
    if (!st) {
        const StepResult *sr = report_step(r);
        memset(out, 0, sizeof *out);
        out->fits = report_fits(r);
        out->capacity = (double)plan->alloc.capacity;
        snprintf(out->gpu, sizeof out->gpu, "%s", plan->dev.name);
        if (sr) {
            out->peak_res = (double)sr->peak_reserved;
            out->step_ms = sr->time_ns / 1e6;
            out->images = plan->tokens_per_step <= 0;
            double per_step = out->images ? plan->samples_per_step : plan->tokens_per_step;
            if (sr->time_ns > 0 && per_step > 0) out->tokens_per_s = per_step / (sr->time_ns / 1e9);
        }
    } else if (st == VR_ENOMEM) {
        snprintf(err, errlen, "out of host memory");
    }
    engine_result_free(r);
    plan_free(plan);
    return st;
}

static void print_probe(int n, const char *field, long v, const Probe *p) {
    printf("  %5d  %-12ld %-5s %9.2f %9.2f", n, v, p->fits ? "yes" : "NO", GIB(p->peak_res),
           GIB(p->capacity));
    if (p->fits) printf(" %10.1f", p->step_ms);
    else printf(" %10s", "-");
    if (p->fits && p->tokens_per_s > 0) printf(p->images ? " %10.2f" : " %10.0f", p->tokens_per_s);
    printf("\n");
    (void)field;
}

static bool parse_long(const char *s, long *v) {
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return *s && *end == 0 && !errno;
}

int cmd_maxbatch(int argc, char **argv) {
    Search s = {.field = "micro_batch"};
    long max = 0, step = 0;
    char gpubuf[160];
    s.sets = calloc((size_t)argc + 2, sizeof(char *));
    if (!s.sets) return VR_EXIT_INTERNAL;
    int rc = VR_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); free(s.sets); return 0; }
        if (strcmp(a, "--unsafe") == 0) { s.unsafe = true; continue; }
        if (strncmp(a, "--set=", 6) == 0) { s.sets[s.n_sets++] = a + 6; continue; }
        if (strcmp(a, "--set") == 0 || strcmp(a, "--field") == 0 || strcmp(a, "--max") == 0 ||
            strcmp(a, "--step") == 0 || strcmp(a, "--gpu") == 0) {
            if (!val) { fprintf(stderr, "vrsim maxbatch: %s needs a value\n", a); goto out; }
            i++;
            if (strcmp(a, "--set") == 0) s.sets[s.n_sets++] = val;
            else if (strcmp(a, "--gpu") == 0) {
                snprintf(gpubuf, sizeof gpubuf, "hardware.gpu=%s", val);
                s.sets[s.n_sets++] = gpubuf;
            }
            else if (strcmp(a, "--field") == 0) s.field = val;
            else if (!parse_long(val, strcmp(a, "--max") == 0 ? &max : &step) ||
                     (strcmp(a, "--max") == 0 ? max : step) < 1) {
                fprintf(stderr, "vrsim maxbatch: %s %s: expected a positive integer\n", a, val);
                goto out;
            }
            continue;
        }
        if (a[0] == '-') { fprintf(stderr, "vrsim maxbatch: unknown option %s (vrsim maxbatch --help)\n", a); goto out; }
        if (s.path) { fprintf(stderr, "vrsim maxbatch: one scenario at a time\n"); goto out; }
        s.path = a;
    }
    if (!s.path) { usage(stderr); goto out; }
    const char *f = strchr(s.field, '.') ? strchr(s.field, '.') + 1 : s.field;
    bool res_field = strcmp(f, "resolution") == 0;
    if (strcmp(f, "micro_batch") != 0 && strcmp(f, "seq") != 0 && !res_field) {
        fprintf(stderr, "vrsim maxbatch: --field %s: expected micro_batch, seq or resolution\n", s.field);
        goto out;
    }
    for (int i = 0; i < s.n_sets; i++) {
        const char *eq = strchr(s.sets[i], '=');
        const char *k = s.sets[i];
        size_t kl = eq ? (size_t)(eq - k) : strlen(k);
        const char *kd = memchr(k, '.', kl);
        if (kd) { kl -= (size_t)(kd + 1 - k); k = kd + 1; }
        if (kl == strlen(f) && strncmp(k, f, kl) == 0) {
            fprintf(stderr, "vrsim maxbatch: --set %s: the searched field cannot be set\n", s.sets[i]);
            goto out;
        }
    }
    if (!step) step = res_field ? 64 : 1;
    if (!max) max = strcmp(f, "micro_batch") == 0 ? 4096 : res_field ? 8192 : 1048576;
    if (max < step) { fprintf(stderr, "vrsim maxbatch: --max %ld is below the step %ld\n", max, step); goto out; }

    char err[1024];
    Probe p, best = {0};
    int n = 0;
    long lo = 0, hi = 0; /* in units of step: lo fits (0 = none yet), hi does not (0 = unknown) */
    long kmax = max / step;
    char name[256];
    snprintf(name, sizeof name, "%s", strrchr(s.path, '/') ? strrchr(s.path, '/') + 1 : s.path);
    if (strlen(name) > 4 && strcmp(name + strlen(name) - 4, ".lua") == 0) name[strlen(name) - 4] = 0;
    for (long k = 1;;) {
        VrStatus st = probe(&s, k * step, &p, err, sizeof err);
        if (st) {
            fprintf(stderr, "vrsim maxbatch: %s\n", err);
            rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
            goto out;
        }
        if (n == 0) {
            printf("vrsim maxbatch: %s, largest %s that fits on %s\n\n", name, s.field, p.gpu);
            printf("  probe  %-12s %-5s %9s %9s %10s %10s\n", s.field, "fits", "resvd GiB",
                   "of GiB", "step ms", p.images ? "images/s" : "tokens/s");
        }
        print_probe(++n, s.field, k * step, &p);
        fflush(stdout);
        if (p.fits) { lo = k; best = p; }
        else hi = k;
        if (!p.fits && k == 1) {
            printf("\nnothing fits: %s = %ld does not fit (peak reserved %.2f GiB of %.2f GiB)\n",
                   s.field, step, GIB(p.peak_res), GIB(p.capacity));
            rc = VR_EXIT_OOM;
            goto out;
        }
        if (hi == 0) {                       /* doubling */
            if (k == kmax) break;
            k = k * 2 > kmax ? kmax : k * 2;
            continue;
        }
        if (hi - lo <= 1) break;             /* bisection done */
        k = lo + (hi - lo) / 2;
    }
    printf("\nanswer: %s = %ld fits (peak reserved %.2f GiB of %.2f GiB, step %.1f ms",
           s.field, lo * step, GIB(best.peak_res), GIB(best.capacity), best.step_ms);
    if (best.tokens_per_s > 0)
        printf(best.images ? ", %.2f images/s" : ", %.0f tokens/s", best.tokens_per_s);
    printf(")");
    if (hi) printf("; %ld does not\n", hi * step);
    else printf("; --max %ld reached, larger values were not tried\n", max);
    printf("  %d probes, each a full simulation\n", n);
    rc = VR_EXIT_OK;
out:
    free(s.sets);
    return rc;
}
