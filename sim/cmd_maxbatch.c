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
#include "points.h"
#include "recipe.h"
#include "report.h"
#include "safetext.h"
#include "scenario.h"

#define GIB(x) ((double)(x) / 1073741824.0)

static void usage(FILE *f) {
    fprintf(f,
        "usage: vrsim maxbatch SCENARIO.lua [--set KEY=VALUE ...] [--field FIELD] [--max N]\n"
        "       vrsim maxbatch CONFIG.yaml --gpu NAME [--gpus N] [--from FORMAT]\n"
        "                [--accelerate FILE] [...]\n"
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
        "  --gpu NAME      the catalog GPU (the same as --set gpu=NAME); a trainer config\n"
        "                  (docs/recipes.md) needs it\n"
        "  --gpus N, --from FORMAT  a trainer config's ranks and format, as for vrsim CONFIG\n"
        "  --set KEY=VALUE as for vrsim SCENARIO (gpu=, precision=, checkpointing=, ...)\n"
        "  --unsafe        let the scenario use io/os\n"
        "  (PYTORCH_CUDA_ALLOC_CONF in the environment applies, as for vrsim SCENARIO; --set\n"
        "  allocator.conf=STR stands in for it)\n"
        "  --point-timeout S  a probe still running after S seconds (default 300) is stopped;\n"
        "                  the search goes on below it\n"
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
    char *src;                       /* the scenario's source, owned */
    PointRunner *runner;             /* the loaded Lua state each probe forks from, owned */
} Search;

/* Simulates the scenario with field=v (in a child forked from the runner's loaded state). VR_OK
 * with *out, or an error status with err (VR_EIO with *timed_out set: past --point-timeout). */
static VrStatus probe(const Search *s, long v, Probe *out, bool *timed_out, char *err,
                      size_t errlen) {
    char *set = vr_strfmt("%s=%ld", s->field, v);
    s->sets[s->n_sets] = set;
    *timed_out = false;
    PointOut *po = set ? malloc(sizeof *po) : NULL;
    if (!po) { free(set); snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    points_run(s->runner, s->path, s->src, s->sets, s->n_sets + 1, true, po);
    free(set);
    VrStatus st = po->status;
    if (!st) {
        memset(out, 0, sizeof *out);
        out->fits = po->fits;
        out->capacity = po->capacity;
        snprintf(out->gpu, sizeof out->gpu, "%s", po->dev_name);
        if (po->has_step) {
            out->peak_res = po->peak_res;
            out->step_ms = po->time_ns / 1e6;
            out->images = po->tokens_per_step <= 0;
            double per_step = out->images ? po->samples_per_step : po->tokens_per_step;
            if (po->time_ns > 0 && per_step > 0) out->tokens_per_s = per_step / (po->time_ns / 1e9);
        }
    } else if (st == VR_ENOMEM) {
        snprintf(err, errlen, "out of host memory");
    } else {
        snprintf(err, errlen, "%s", po->err);
        *timed_out = po->timed_out;
    }
    free(po);
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
    RecipeOptions rcp = {0};
    long max = 0, step = 0;
    double timeout_s = 300;
    char *gpubuf = NULL, *envbuf = NULL, *dir = NULL, *name = NULL;
    const char *env_note = "";
    s.sets = calloc((size_t)argc + 3, sizeof(char *));
    if (!s.sets) return VR_EXIT_INTERNAL;
    int rc = VR_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); free(s.sets); return 0; }
        if (strcmp(a, "--unsafe") == 0) { s.unsafe = true; continue; }
        if (strcmp(a, "--from") == 0 || strcmp(a, "--gpus") == 0 || strcmp(a, "--accelerate") == 0) {
            char rerr[128];
            if (recipe_option(argc, argv, &i, &rcp, rerr, sizeof rerr) < 0) {
                safetext_eprintf("vrsim maxbatch: %s\n", rerr);
                goto out;
            }
            continue;
        }
        if (strncmp(a, "--set=", 6) == 0) { s.sets[s.n_sets++] = a + 6; continue; }
        if (strcmp(a, "--set") == 0 || strcmp(a, "--field") == 0 || strcmp(a, "--max") == 0 ||
            strcmp(a, "--step") == 0 || strcmp(a, "--gpu") == 0 ||
            strcmp(a, "--point-timeout") == 0) {
            if (!val) { safetext_eprintf("vrsim maxbatch: %s needs a value\n", a); goto out; }
            i++;
            if (strcmp(a, "--set") == 0) s.sets[s.n_sets++] = val;
            else if (strcmp(a, "--gpu") == 0) {
                rcp.gpu = val;
                free(gpubuf);
                if (!(gpubuf = vr_strfmt("hardware.gpu=%s", val))) { rc = VR_EXIT_INTERNAL; goto out; }
                s.sets[s.n_sets++] = gpubuf;
            }
            else if (strcmp(a, "--field") == 0) s.field = val;
            else if (strcmp(a, "--point-timeout") == 0) {
                char *end;
                timeout_s = strtod(val, &end);
                if (end == val || *end || !(timeout_s > 0) || timeout_s > 1e6) {
                    safetext_eprintf("vrsim maxbatch: --point-timeout %s: expected seconds, more "
                            "than 0 and at most 1e6\n", val);
                    goto out;
                }
            }
            else if (!parse_long(val, strcmp(a, "--max") == 0 ? &max : &step) ||
                     (strcmp(a, "--max") == 0 ? max : step) < 1) {
                safetext_eprintf("vrsim maxbatch: %s %s: expected a positive integer\n", a, val);
                goto out;
            }
            continue;
        }
        if (a[0] == '-') { safetext_eprintf("vrsim maxbatch: unknown option %s (vrsim maxbatch --help)\n", a); goto out; }
        if (s.path) { safetext_eprintf("vrsim maxbatch: one scenario at a time\n"); goto out; }
        s.path = a;
    }
    if (!s.path) { usage(stderr); goto out; }
    /* PyTorch reads PYTORCH_CUDA_ALLOC_CONF from the environment, and so does a run: a --set
     * allocator.conf given here stands in for it (it comes later, so it wins) */
    {
        const char *env = getenv("PYTORCH_CUDA_ALLOC_CONF");
        if (env && env[0]) {
            if (!(envbuf = vr_strfmt("allocator.conf=%s", env))) { rc = VR_EXIT_INTERNAL; goto out; }
            memmove(s.sets + 1, s.sets, sizeof(char *) * (size_t)s.n_sets);
            s.sets[0] = envbuf;
            s.n_sets++;
            env_note = " (allocator settings from PYTORCH_CUDA_ALLOC_CONF in the environment)";
        }
    }
    const char *f = strchr(s.field, '.') ? strchr(s.field, '.') + 1 : s.field;
    bool res_field = strcmp(f, "resolution") == 0;
    if (strcmp(f, "micro_batch") != 0 && strcmp(f, "seq") != 0 && !res_field) {
        safetext_eprintf("vrsim maxbatch: --field %s: expected micro_batch, seq or resolution\n", s.field);
        goto out;
    }
    for (int i = 0; i < s.n_sets; i++) {
        const char *eq = strchr(s.sets[i], '=');
        const char *k = s.sets[i];
        size_t kl = eq ? (size_t)(eq - k) : strlen(k);
        const char *kd = memchr(k, '.', kl);
        if (kd) { kl -= (size_t)(kd + 1 - k); k = kd + 1; }
        if (kl == strlen(f) && strncmp(k, f, kl) == 0) {
            safetext_eprintf("vrsim maxbatch: --set %s: the searched field cannot be set\n", s.sets[i]);
            goto out;
        }
    }
    if (!step) step = res_field ? 64 : 1;
    if (!max) max = strcmp(f, "micro_batch") == 0 ? 4096 : res_field ? 8192 : 1048576;
    if (max < step) { safetext_eprintf("vrsim maxbatch: --max %ld is below the step %ld\n", max, step); goto out; }

    char err[1024];
    bool recipe = rcp.from || recipe_is_config(s.path);
    if (!recipe && rcp.accelerate) {
        safetext_eprintf("vrsim maxbatch: --accelerate is for a TRL or TrainingArguments config "
                "(CONFIG.yaml), not a scenario\n");
        goto out;
    }
    if (!recipe && (rcp.count || rcp.from)) {
        safetext_eprintf("vrsim maxbatch: --gpus and --from are for a trainer config (CONFIG.yaml)\n");
        goto out;
    }
    if (recipe) {
        /* a trainer config, read once into the scenario text each probe loads; its paths are
         * read from the working folder */
        VrStatus st = recipe_source(s.path, &rcp, s.sets, s.n_sets, &s.src, err, sizeof err);
        if (st) {
            safetext_eprintf("vrsim maxbatch: %s\n", err);
            rc = st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
            goto out;
        }
    } else if (!(s.src = points_read_scenario(s.path, err, sizeof err))) {
        safetext_eprintf("vrsim maxbatch: %s\n", err);
        rc = strcmp(err, "out of host memory") == 0 ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
        goto out;
    }
    {
        /* the scenario's whole folder: a cut one would widen what require may read */
        if (!(dir = recipe ? vr_strfmt(".") : vr_dirname(s.path))) { rc = VR_EXIT_INTERNAL; goto out; }
        VrStatus st = points_new(dir, s.unsafe, timeout_s, &s.runner, err, sizeof err);
        if (st) {
            safetext_eprintf("vrsim maxbatch: %s\n", err);
            rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
            goto out;
        }
    }
    Probe p, best = {0};
    int n = 0;
    bool hi_timed_out = false;
    long lo = 0, hi = 0; /* in units of step: lo fits (0 = none yet), hi does not (0 = unknown) */
    long kmax = max / step;
    if (!(name = vr_strfmt("%s", strrchr(s.path, '/') ? strrchr(s.path, '/') + 1 : s.path))) {
        rc = VR_EXIT_INTERNAL;
        goto out;
    }
    if (strlen(name) > 4 && strcmp(name + strlen(name) - 4, ".lua") == 0) name[strlen(name) - 4] = 0;
    else if (recipe && strrchr(name, '.') && strrchr(name, '.') != name) *strrchr(name, '.') = 0;
    for (long k = 1;;) {
        bool timed_out;
        VrStatus st = probe(&s, k * step, &p, &timed_out, err, sizeof err);
        if (st && timed_out && n > 0) { /* no answer for this value: bisect below it */
            printf("  %5d  %-12ld ", ++n, k * step);
            safetext_fputs(stdout, err);
            putchar('\n');
            fflush(stdout);
            hi = k;
            hi_timed_out = true;
            if (hi - lo <= 1) break;
            k = lo + (hi - lo) / 2;
            continue;
        }
        if (st) {
            safetext_eprintf("vrsim maxbatch: %s%s\n", err, env_note);
            rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
            goto out;
        }
        if (n == 0) {
            char *head = vr_strfmt("vrsim maxbatch: %s, largest %s that fits on %s\n\n", name,
                                   s.field, p.gpu);
            if (head) safetext_fputs(stdout, head);
            free(head);
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
    if (hi && hi_timed_out) printf("; %ld timed out (--point-timeout), larger values were not tried\n", hi * step);
    else if (hi) printf("; %ld does not\n", hi * step);
    else printf("; --max %ld reached, larger values were not tried\n", max);
    printf("  %d probes, each a full simulation\n", n);
    rc = VR_EXIT_OK;
out:
    points_free(s.runner);
    free(s.src);
    free(s.sets);
    free(gpubuf);
    free(envbuf);
    free(dir);
    free(name);
    return rc;
}
