/* cmd_shop.c: `vrsim shop SCENARIO --tokens N (or --images N) [--gpus 1,2,4,8]`: for each GPU
 * of the catalog (lua/hw/gpus.lua) and each count, whether the scenario fits, its step time, and
 * what a training job of N tokens (images) would take in hours and cost in dollars at the
 * on-demand prices of lua/hw/prices.lua; sorted by cost.
 *
 *   steps      = N / (tokens per step per GPU x GPUs)
 *   job hours  = steps x step time / 3600
 *   cost       = job hours x GPUs x USD per GPU-hour
 *
 * Several GPUs are data-parallel ranks (hardware.count). Unless --strategy or the scenario names
 * one, each count tries DDP, then ZeRO-2, then ZeRO-3, and keeps the first that fits: they hold
 * less memory in that order and usually take longer, so the first that fits is the fastest.
 *
 * The catalog and the prices are Lua data (lua/hw/gpus.lua, lua/hw/prices.lua), which the
 * binding reads as data (catalog.h): the catalog's names, and each one's price entry. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog.h"
#include "cmds.h"
#include "engine.h"
#include "points.h"
#include "report.h"
#include "safetext.h"
#include "scenario.h"

#define GIB(x) ((double)(x) / 1073741824.0)
#define MAX_COUNTS 16

static void usage(FILE *f) {
    fprintf(f,
        "usage: vrsim shop SCENARIO.lua (--tokens N | --images N) [--gpus 1,2,4,8] [options]\n"
        "\n"
        "For every GPU in the catalog (lua/hw/gpus.lua): does the scenario fit, its step time,\n"
        "and the hours and dollars a training job of N tokens (or images) takes at the on-demand\n"
        "price per GPU-hour in lua/hw/prices.lua, cheapest first.\n"
        "  job hours = N / (tokens per step per GPU x GPUs) x step time;  cost = hours x GPUs x price\n"
        "Prices carry a date and a source and go stale fast: check lua/hw/prices.lua first.\n"
        "\n"
        "options:\n"
        "  --tokens N       tokens in the whole job (language models); 1e9 and 2.5e10 work\n"
        "  --images N       images (samples) in the whole job\n"
        "  --gpus LIST      GPU counts to consider (default 1), e.g. 1,2,4,8: data-parallel\n"
        "                   ranks on one node (hardware.count), collectives on its links\n"
        "  --strategy S     for counts above 1: ddp, zero1, zero2, zero3 or fsdp2 (default: the\n"
        "                   scenario's own, else the first of ddp, zero2, zero3 that fits)\n"
        "  --only LIST      catalog names to consider (default: all but the fleet-only boards),\n"
        "                   e.g. rtx4090,a100_80g\n"
        "  --set KEY=VALUE  as for vrsim SCENARIO (not gpu=: shop sets it)\n"
        "  --unsafe         let the scenario use io/os\n"
        "  (PYTORCH_CUDA_ALLOC_CONF in the environment applies, as for vrsim SCENARIO; --set\n"
        "  allocator.conf=STR stands in for it)\n"
        "  --point-timeout S  a row whose simulation runs past S seconds (default 300) is\n"
        "                   stopped and shows the error; the others go on\n"
        "\n"
        "examples:\n"
        "  vrsim shop scenarios/llama7b_h200.lua --tokens 1e9 --gpus 1,2,4,8\n"
        "  vrsim shop scenarios/llama7b_h200.lua --tokens 2e8 --set precision=lora_bf16\n"
        "\n"
        "exit status: 0 (whether or not anything fits), 2 bad usage or scenario, 1 internal\n");
}

typedef struct Row {
    char gpu[64];              /* catalog key */
    char name[128];            /* marketing name */
    int count;
    char strategy[32];         /* data-parallel strategy for count > 1, "" for one GPU */
    bool error, fits, priced;
    char err[256];
    double peak_res, capacity; /* bytes */
    double step_ms;
    double per_step;           /* tokens (or images) per step per GPU */
    double hours, usd;         /* the job */
    double price;              /* USD per GPU-hour */
    char price_note[200];      /* confidence, provider, date */
} Row;

/* The loaded Lua state the scenario's rows fork from, and the catalog and its prices. */
typedef struct Shop {
    PointRunner *scn;          /* the scenario's folder, --unsafe as given */
    Catalog *gpus, *prices;    /* lua/hw/gpus.lua, lua/hw/prices.lua */
    const char *path;          /* scenario file (argv) */
    char *src;                 /* its source, owned */
} Shop;

/* The price of catalog GPU key into r (r->priced false when prices.lua has none): its USD per
 * GPU-hour, and a note of its confidence, provider and date (each "nil" where the entry has
 * none, as Lua's tostring writes it). */
static void price_of(const Shop *sh, const char *key, Row *r) {
    const CatalogEntry *e = catalog_entry(sh->prices, key);
    const CatalogField *usd = catalog_field(e, "usd_per_gpu_hour");
    r->priced = false;
    if (!usd || usd->kind != CATALOG_NUMBER) return;
    r->price = usd->num;
    r->priced = r->price > 0;
    static const char *const parts[] = {"confidence", "provider", "date"};
    const char *text[3];
    char num[3][32];
    for (int i = 0; i < 3; i++) {
        const CatalogField *f = catalog_field(e, parts[i]);
        if (!f) text[i] = "nil";
        else if (f->kind == CATALOG_STRING) text[i] = f->str;
        else if (f->kind == CATALOG_BOOL) text[i] = f->b ? "true" : "false";
        else snprintf(num[i], sizeof num[i], "%.14g", f->num), text[i] = num[i];
    }
    snprintf(r->price_note, sizeof r->price_note, "%s, %s, %s", text[0], text[1], text[2]);
}

/* One row's simulation as a point of a batch: its --set overrides (the command line's, then
 * gpu=, and for several GPUs hardware.count= and training.strategy=). */
typedef struct RowJob {
    Row *row;
    char gset[96], cset[32], sset[64];
    const char **sets;         /* n_sets + 3 entries */
} RowJob;

static void row_job(RowJob *j, Row *r, const char **sets, int n_sets, PointJob *pj) {
    int n = n_sets;
    j->row = r;
    for (int i = 0; i < n_sets; i++) j->sets[i] = sets[i];
    snprintf(j->gset, sizeof j->gset, "gpu=%s", r->gpu);
    j->sets[n++] = j->gset;
    if (r->count > 1) {
        snprintf(j->cset, sizeof j->cset, "hardware.count=%d", r->count);
        snprintf(j->sset, sizeof j->sset, "training.strategy=%s", r->strategy);
        j->sets[n++] = j->cset;
        j->sets[n++] = j->sset;
    }
    *pj = (PointJob){.sets = j->sets, .n_sets = n, .simulate = true};
}

/* Fills r from the simulation of the scenario on r->count GPUs r->gpu (strategy r->strategy
 * when count > 1). */
static void fill_row(const PointOut *po, bool images, double job, Row *r) {
    r->error = r->fits = false;
    r->err[0] = 0;
    r->peak_res = r->capacity = r->step_ms = r->per_step = r->hours = r->usd = 0;
    if (po->status) {
        r->error = true;
        snprintf(r->err, sizeof r->err, "%.250s", po->err);
    } else {
        snprintf(r->name, sizeof r->name, "%s", po->dev_name);
        r->fits = po->fits;
        r->capacity = po->capacity;
        r->per_step = images ? po->samples_per_step : po->tokens_per_step;
        if (po->has_step) {
            r->peak_res = po->peak_res;
            r->step_ms = po->time_ns / 1e6;
        }
        if (r->fits && r->per_step > 0 && r->step_ms > 0) {
            double steps = job / (r->per_step * r->count);
            r->hours = steps * r->step_ms / 1e3 / 3600.0;
            if (r->priced) r->usd = r->hours * r->count * r->price;
        }
    }
}

/* Fitting and priced rows first, by cost; then fitting unpriced by hours; then the rest. */
static int rank(const Row *r) {
    if (r->error) return 4;
    if (!r->fits) return 3;
    if (r->per_step <= 0 || r->step_ms <= 0) return 2;
    return r->priced ? 0 : 1;
}

static int cmp_rows(const void *a, const void *b) {
    const Row *x = a, *y = b;
    int rx = rank(x), ry = rank(y);
    if (rx != ry) return rx - ry;
    double kx = rx == 0 ? x->usd : rx == 1 ? x->hours : 0;
    double ky = ry == 0 ? y->usd : ry == 1 ? y->hours : 0;
    if (kx != ky) return kx < ky ? -1 : 1;
    int c = strcmp(x->gpu, y->gpu);
    return c ? c : x->count - y->count;
}

static bool in_list(const char *list, const char *key) {
    if (!list) return true;
    size_t n = strlen(key);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == n && strncmp(s, key, n) == 0) return true;
        if (!e) break;
        s = e + 1;
    }
    return false;
}

static void fmt_hours(char *b, size_t n, double h) {
    if (!isfinite(h)) snprintf(b, n, "-"); /* beyond any number of days */
    else if (h < 1) snprintf(b, n, "%.1f min", h * 60);
    else if (h < 48) snprintf(b, n, "%.1f h", h);
    else if (h / 24 < 1e6) snprintf(b, n, "%.1f days", h / 24);
    else snprintf(b, n, "%.3g days", h / 24); /* a width a table can hold */
}

int cmd_shop(int argc, char **argv) {
    const char *path = NULL, *only = NULL, *gpus_arg = "1", *strategy = NULL;
    double job = 0, timeout_s = 300;
    bool images = false, unsafe = false;
    Shop sh = {0};
    const char **sets = calloc((size_t)argc + 5, sizeof(char *));
    char *envbuf = NULL, *dir = NULL, *name = NULL;
    int n_sets = 0, rc = VR_EXIT_USAGE;
    Row *rows = NULL;
    if (!sets) return VR_EXIT_INTERNAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); free(sets); return 0; }
        if (strcmp(a, "--unsafe") == 0) { unsafe = true; continue; }
        if (strncmp(a, "--set=", 6) == 0) { sets[n_sets++] = a + 6; continue; }
        if (strcmp(a, "--set") == 0 || strcmp(a, "--tokens") == 0 || strcmp(a, "--images") == 0 ||
            strcmp(a, "--gpus") == 0 || strcmp(a, "--only") == 0 || strcmp(a, "--strategy") == 0 ||
            strcmp(a, "--point-timeout") == 0) {
            if (!val) { safetext_eprintf("vrsim shop: %s needs a value\n", a); goto out; }
            i++;
            if (strcmp(a, "--set") == 0) {
                if (strncmp(val, "gpu=", 4) == 0 || strncmp(val, "hardware.gpu=", 13) == 0) {
                    safetext_eprintf("vrsim shop: --set %s: shop tries every GPU (use --only)\n", val);
                    goto out;
                }
                sets[n_sets++] = val;
            } else if (strcmp(a, "--gpus") == 0) {
                gpus_arg = val;
            } else if (strcmp(a, "--only") == 0) {
                only = val;
            } else if (strcmp(a, "--strategy") == 0) {
                strategy = val;
                if (strlen(val) >= sizeof ((Row *)0)->strategy) { /* no strategy's name is longer */
                    safetext_eprintf("vrsim shop: --strategy %.40s...: not a strategy (ddp, zero1, "
                            "zero2, zero3, fsdp2)\n", val);
                    goto out;
                }
            } else if (strcmp(a, "--point-timeout") == 0) {
                char *end;
                timeout_s = strtod(val, &end);
                if (end == val || *end || !(timeout_s > 0) || timeout_s > 1e6) {
                    safetext_eprintf("vrsim shop: --point-timeout %s: expected seconds, more than 0 "
                            "and at most 1e6\n", val);
                    goto out;
                }
            } else {
                char *end;
                errno = 0;
                job = strtod(val, &end);
                if (end == val || *end || errno || !(job > 0) || !isfinite(job)) {
                    safetext_eprintf("vrsim shop: %s %s: expected a positive, finite number\n", a, val);
                    goto out;
                }
                images = a[2] == 'i';
            }
            continue;
        }
        if (a[0] == '-') { safetext_eprintf("vrsim shop: unknown option %s (vrsim shop --help)\n", a); goto out; }
        if (path) { safetext_eprintf("vrsim shop: one scenario at a time\n"); goto out; }
        path = a;
    }
    if (!path) { usage(stderr); goto out; }
    /* PyTorch reads PYTORCH_CUDA_ALLOC_CONF from the environment, and so does a run: a --set
     * allocator.conf given here stands in for it (it comes later, so it wins) */
    const char *env_note = "";
    {
        const char *env = getenv("PYTORCH_CUDA_ALLOC_CONF");
        if (env && env[0]) {
            if (!(envbuf = vr_strfmt("allocator.conf=%s", env))) { rc = VR_EXIT_INTERNAL; goto out; }
            memmove(sets + 1, sets, sizeof(char *) * (size_t)n_sets);
            sets[0] = envbuf;
            n_sets++;
            env_note = " (allocator settings from PYTORCH_CUDA_ALLOC_CONF in the environment)";
        }
    }
    if (!(job > 0)) { safetext_eprintf("vrsim shop: give the job's size: --tokens N or --images N\n"); goto out; }
    int counts[MAX_COUNTS], n_counts = 0;
    for (const char *s = gpus_arg; *s;) {
        char *end;
        long c = strtol(s, &end, 10);
        if (end == s || c < 1 || c > 4096 || (*end && *end != ',') || n_counts == MAX_COUNTS) {
            safetext_eprintf("vrsim shop: --gpus %s: expected counts like 1,2,4,8\n", gpus_arg);
            goto out;
        }
        counts[n_counts++] = (int)c;
        s = *end ? end + 1 : end;
    }

    char err[1024], own[32] = "";
    if (!(sh.src = points_read_scenario(path, err, sizeof err))) {
        safetext_eprintf("vrsim shop: %s\n", err);
        rc = strcmp(err, "out of host memory") == 0 ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
        goto out;
    }
    sh.path = path;
    {
        /* the scenario's whole folder: a cut one would widen what require may read */
        if (!(dir = vr_dirname(path))) { rc = VR_EXIT_INTERNAL; goto out; }
        VrStatus st = points_new(dir, unsafe, timeout_s, &sh.scn, err, sizeof err);
        if (st) {
            safetext_eprintf("vrsim shop: %s\n", err);
            rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
            goto out;
        }
        if (catalog_read("hw.gpus", &sh.gpus, err, sizeof err) ||
            catalog_read("hw.prices", &sh.prices, err, sizeof err)) {
            safetext_eprintf("vrsim shop: %s\n", err);
            rc = VR_EXIT_INTERNAL;
            goto out;
        }
    }
    int nk = sh.gpus->n;
    rows = calloc((size_t)(nk * n_counts) + 1, sizeof(Row));
    if (!rows) { rc = VR_EXIT_INTERNAL; goto out; }
    /* the scenario must load as given (with its own GPU) */
    {
        PointOut *po = malloc(sizeof *po);
        if (!po) { rc = VR_EXIT_INTERNAL; goto out; }
        points_run(sh.scn, path, sh.src, sets, n_sets, false, po);
        VrStatus st = po->status;
        bool lm = st == VR_OK && po->tokens_per_step > 0;
        if (st == VR_OK && !strategy && po->strategy[0] && strcmp(po->strategy, "none") != 0)
            snprintf(own, sizeof own, "%s", po->strategy);
        if (st) safetext_eprintf("vrsim shop: %s%s\n", po->err, env_note);
        free(po);
        if (st) { rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL; goto out; }
        if (!images && !lm) {
            safetext_eprintf("vrsim shop: %s is not a language model (no tokens per step): use --images\n", path);
            goto out;
        }
    }
    int n = 0;
    for (int i = 0; i < nk; i++) {
        const char *key = sh.gpus->entries[i].key;
        if (!in_list(only, key)) continue;
        /* a fleet-only board (lua/hw/gpus.lua fleet_only) is in no one's shop: only --only names it */
        if (!only && catalog_field(&sh.gpus->entries[i], "fleet_only")) continue;
        for (int c = 0; c < n_counts; c++) {
            Row *r = &rows[n++];
            snprintf(r->gpu, sizeof r->gpu, "%s", key);
            r->count = counts[c];
            price_of(&sh, key, r);
        }
    }
    /* The rows as batches of points, as many children at a time as there are CPUs: first every
     * row's first strategy, then, for rows of several GPUs that did not fit, the next one of
     * ddp, zero2, zero3 (each row ends with the first that fits, as if tried in turn). */
    {
        static const char *const tries[] = {"ddp", "zero2", "zero3"};
        const char *one = strategy ? strategy : own[0] ? own : NULL;
        int n_tries = one ? 1 : 3;
        RowJob *rj = calloc((size_t)n + 1, sizeof *rj);
        PointJob *pj = calloc((size_t)n + 1, sizeof *pj);
        const char **setv = calloc(((size_t)n + 1) * ((size_t)n_sets + 3), sizeof(char *));
        if (!rj || !pj || !setv) { free(rj); free(pj); free(setv); rc = VR_EXIT_INTERNAL; goto out; }
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        /* the rows of one GPU count are points that differ in the GPU only, which often share
         * a graph: they go together, and children keep their graph between them */
        points_set_reuse(sh.scn, true);
        for (int k = 0; k < n_tries; k++) {
            int m = 0;
            for (int c = 0; c < n_counts; c++) {
                for (int i = c; i < n; i += n_counts) { /* rows go GPU by GPU, a row per count */
                    Row *r = &rows[i];
                    if (r->error && k == 0) continue; /* no price: nothing to simulate */
                    if (k > 0 && (r->count == 1 || r->error || r->fits)) continue;
                    if (r->count > 1) snprintf(r->strategy, sizeof r->strategy, "%s", one ? one : tries[k]);
                    rj[m].sets = setv + (size_t)m * ((size_t)n_sets + 3);
                    row_job(&rj[m], r, sets, n_sets, &pj[m]);
                    m++;
                }
            }
            if (m == 0) break;
            points_run_batch(sh.scn, sh.path, sh.src, pj, m, ncpu > 0 ? (int)ncpu : 1);
            for (int i = 0; i < m; i++) fill_row(&pj[i].out, images, job, rj[i].row);
        }
        free(rj);
        free(pj);
        free(setv);
    }
    if (n == 0) { safetext_eprintf("vrsim shop: --only %s names no catalog GPU\n", only); goto out; }
    qsort(rows, (size_t)n, sizeof(Row), cmp_rows);

    if (!(name = vr_strfmt("%s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path))) {
        rc = VR_EXIT_INTERNAL;
        goto out;
    }
    if (strlen(name) > 4 && strcmp(name + strlen(name) - 4, ".lua") == 0) name[strlen(name) - 4] = 0;
    printf("vrsim shop: ");
    safetext_fputs(stdout, name);
    printf(", a job of %.4g %s\n\n", job, images ? "images" : "tokens");
    printf("  %-15s %4s %-6s %-5s %9s %8s %10s %12s %10s %9s  %s\n", "gpu", "n", "dp", "fits", "resvd GiB",
           "of GiB", "step ms", images ? "images/s" : "tokens/s", "job", "cost $", "price ($/GPU-h; confidence, provider, date)");
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        printf("  %-15s %4d %-6s ", r->gpu, r->count, r->count > 1 ? r->strategy : "-");
        if (r->error) {
            printf("error: ");
            safetext_fputs(stdout, r->err);
            putchar('\n');
            continue;
        }
        printf("%-5s %9.2f %8.2f", r->fits ? "yes" : "NO", GIB(r->peak_res), GIB(r->capacity));
        if (r->fits && r->step_ms > 0) {
            char h[32];
            fmt_hours(h, sizeof h, r->hours);
            printf(" %10.1f %12.0f %10s", r->step_ms, r->per_step * r->count / (r->step_ms / 1e3), h);
            if (r->priced && isfinite(r->usd)) printf(r->usd < 1e8 ? " %9.2f" : " %9.3g", r->usd);
            else printf(" %9s", "-");
        } else {
            printf(" %10s %12s %10s %9s", "-", "-", "-", "-");
        }
        if (r->priced) printf("  %.3f; %s\n", r->price, r->price_note);
        else printf("  no price in lua/hw/prices.lua\n");
    }
    printf("\n  step times are the roofline model's (uncalibrated unless lua/hw/calibrated/ has the GPU);\n"
           "  prices are on-demand list prices from lua/hw/prices.lua with the dates shown: check them\n");
    printf("  several GPUs are data-parallel ranks on one node (dp: the strategy; resvd GiB is per GPU)\n");
    rc = VR_EXIT_OK;
out:
    points_free(sh.scn);
    catalog_free(sh.gpus);
    catalog_free(sh.prices);
    free(sh.src);
    free(rows);
    free(sets);
    free(envbuf);
    free(dir);
    free(name);
    return rc;
}
