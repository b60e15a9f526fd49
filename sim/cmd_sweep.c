/* cmd_sweep.c: `vrsim sweep SCENARIO --set key=a,b,c --set key=lo..hi [-j N] [--shard i/n]`:
 * simulates the cross product of the given values, each point a full run of the scenario with
 * the point's --set overrides, in N forked worker processes.
 *
 * Data model. The sweep has axes (one per --set); axis a has n_a values. Point k (0 <= k <
 * prod n_a) takes value (k / stride_a) % n_a on axis a, where the last axis varies fastest
 * (stride_last = 1): nested loops in the order the --set options were given. A shard i/n runs
 * the points with k % n == i - 1; point numbers stay global, so the shards' CSV files merge by
 * concatenation.
 *
 * Workers. The points run in the worker pool of points.h (points_run_feed), -j N children at a
 * time, each forked from a Lua state that loaded vrsim's modules once: the pool asks the sweep
 * for the next point (feed_next) and hands back each answer as it comes (feed_done), which the
 * sweep turns into its journal's result line, appends to the journal and reads back into the
 * point's result, so a finished point and one a --resume reads from the journal are the same
 * bytes. A point whose child dies (a signal, the kernel's OOM killer) or runs past
 * --point-timeout is recorded as an error, and the sweep goes on.
 *
 * Order. The pool gets the points with the GPU axis varying fastest (Sweep.order), whatever the
 * order of the --set options, a group of points that differ in the GPU only at a time: such
 * points often share a graph, which the pool's children keep from one point to the next
 * (points_set_reuse). Each of the -j places the pool runs points in (a Slot) stays in its group
 * until the group's points are given out, so a group's points run one after another on the
 * graphs its first ones made, then starts the next group no place has started, or else helps in
 * one that is still going. The table and files list the points by number all the same.
 *
 * Invariants: done + |points running| + (points of order not yet given) == n_todo; every point
 * of the shard is recorded exactly once (ok, out of memory, or error). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "engine.h"
#include "journal.h"
#include "outpath.h"
#include "points.h"
#include "recipe.h"
#include "report.h"
#include "safetext.h"
#include "scenario.h"

#define GIB(x) ((double)(x) / 1073741824.0)
#define MAX_POINTS 10000000L   /* a cross product larger than this is a usage error */
#define MAX_RANGE 100000L      /* values one lo..hi range may expand to */
#define ERR_MAX JOURNAL_ERR_MAX
#define POINT_TIMEOUT_S 300.0  /* default --point-timeout: seconds one point may run */

static void usage(FILE *f) {
    fprintf(f,
        "usage: vrsim sweep SCENARIO.lua --set KEY=VALUES [--set KEY=VALUES ...] [options]\n"
        "       vrsim sweep CONFIG.yaml --gpu NAME [--gpus N] [--from FORMAT]\n"
        "                [--accelerate FILE] --set ... [options]\n"
        "\n"
        "Simulates every combination (the cross product) of the values given, each point a full\n"
        "run of the scenario with those --set overrides, in parallel worker processes. Prints a\n"
        "table (settings, fits, peak allocated / reserved GiB, step ms) and writes sweep.csv and\n"
        "sweep.json; the reserve is the worst step's, as the run's FITS line gives it (step 0 may\n"
        "reserve more than the steady steps), the rest the steady step's. A point that fails (bad\n"
        "value, unknown GPU, crash) is reported in its row and the sweep goes on. Points that\n"
        "differ only in the GPU share one graph where the graph does not depend on the GPU (it\n"
        "does through the attention kernel: Hopper, pre-Ampere and the rest differ), so an axis\n"
        "of GPUs is cheap; every answer is still the one vrsim SCENARIO --set ... gives.\n"
        "\n"
        "VALUES:\n"
        "  a,b,c          a list (a comma inside a value is written \\,)\n"
        "  lo..hi         integers: the powers of two from lo to hi when both are powers of two\n"
        "                 (1..32 = 1,2,4,8,16,32), otherwise every integer (3..6 = 3,4,5,6)\n"
        "  1..8,12,24     lists and ranges mix\n"
        "  one value      a constant applied to every point\n"
        "\n"
        "options:\n"
        "  -j N, --jobs N   worker processes (default: the number of online CPUs)\n"
        "  --shard I/N      run only the points k with k %% N == I-1 (I from 1 to N), so a large\n"
        "                   sweep splits over machines or jobs; point numbers stay global and\n"
        "                   files are named sweep.shard-I-of-N.csv/.json so shards can share --out\n"
        "  --out DIR        where sweep.csv and sweep.json go (default out/sweep-<scenario>/)\n"
        "  --no-files       write no files\n"
        "  --json           print sweep.json on stdout instead of the table\n"
        "  --resume         continue an interrupted sweep: the points it finished (kept in\n"
        "                   DIR/sweep.journal as they arrive) are read back, not run again;\n"
        "                   all of them run again when the scenario, a file it reads,\n"
        "                   PYTORCH_CUDA_ALLOC_CONF or vrsim changed since\n"
        "  --point-timeout S  a point still running after S seconds (default 300) is stopped\n"
        "                   and reported as failed; the sweep goes on\n"
        "  --gpu NAME, --gpus N, --from FORMAT   a trainer config's GPU, ranks and format, as\n"
        "                   for vrsim CONFIG (docs/recipes.md); the config is read once\n"
        "  --allocator KIND, --alloc-conf STR, --unsafe   as for vrsim SCENARIO (without\n"
        "                   --alloc-conf, PYTORCH_CUDA_ALLOC_CONF in the environment applies)\n"
        "\n"
        "examples:\n"
        "  vrsim sweep scenarios/llama7b_h200.lua --set micro_batch=1..32 \\\n"
        "        --set gpu=rtx4090,a100_80g,h100_sxm -j 2\n"
        "  vrsim sweep scenarios/llama7b_h200.lua --set seq=512..4096 --set checkpointing=false,true\n"
        "\n"
        "splitting a sweep (each shard writes its own files; merge the CSVs afterwards):\n"
        "  Slurm array job (sweep.sbatch):\n"
        "    #!/bin/sh\n"
        "    #SBATCH --array=1-8 --cpus-per-task=4\n"
        "    ./vrsim sweep scenarios/llama7b_h200.lua --set micro_batch=1..64 --set seq=256..8192 \\\n"
        "        --shard $SLURM_ARRAY_TASK_ID/8 -j $SLURM_CPUS_PER_TASK --out out/sweep-big\n"
        "    (sbatch sweep.sbatch; the array indices must run from 1 to N)\n"
        "  GNU parallel, 4 shards of one worker each (add -S host1,host2 for other machines):\n"
        "    parallel ./vrsim sweep scenarios/llama7b_h200.lua --set micro_batch=1..64 \\\n"
        "        --set seq=256..8192 --shard {}/4 -j 1 --out out/sweep-big ::: 1 2 3 4\n"
        "  merge, ordered by point number:\n"
        "    f=$(ls out/sweep-big/sweep.shard-*-of-*.csv); { head -n 1 $(echo $f | cut -d' ' -f1);\n"
        "      tail -q -n +2 $f | sort -t, -k1,1n; } > out/sweep-big/sweep.csv\n"
        "\n"
        "exit status: 0 the sweep ran (whatever each point gave), 2 bad usage or scenario,\n"
        "1 internal error\n");
}

typedef struct Axis {
    char key[128];             /* as given: "micro_batch" or "training.seq" */
    char **vals;               /* n values, owned */
    int n;
    long stride;               /* points between consecutive values of this axis */
} Axis;

/* A point given to the pool and not yet answered: its job and the memory of its sets. */
typedef struct Slot {
    PointJob job;
    long k;                    /* the point's number */
    long group;                /* the group (see Order) it takes its points from, -1: none yet */
    const char **sets;         /* consts then one "key=value" per axis; the axes' strings owned */
    struct Slot *next_free;
} Slot;

typedef struct Sweep {
    const char *path;          /* scenario file (argv, borrowed) */
    char *src;                 /* scenario source, owned */
    char *dir;                 /* the scenario's folder, for require, owned */
    Axis *axes; int n_axes;
    const char **consts; int n_consts; /* --allocator etc. as "key=value", borrowed */
    bool unsafe;
    long n_points;             /* whole cross product */
    long *todo; long n_todo;   /* this shard's points, ascending */
    long *order;               /* n_todo indices into todo: the order the pool gets them */
    long *grp_pos, *grp_end;   /* per group, a range of order: the next point to give and the end */
    long n_groups, next_group; /* groups, and the first that no place has started */
    long done;                 /* points with a result (those a --resume read included) */
    PointResult *res;          /* n_todo */
    Slot *slots, *free_slots;  /* one per point the pool may run at once */
    int n_slots;
    PointRunner *runner;       /* the loaded Lua state every point's child is forked from */
    double t0, last_draw;      /* the progress bar's start and last drawing (vr_now_s) */
    bool show_progress;
    FILE *journal;             /* finished points' result lines as they arrive, or NULL */
    bool journal_failed;       /* a line could not be written (said once) */
    const char *env_conf;      /* PYTORCH_CUDA_ALLOC_CONF of the environment, when it applies */
} Sweep;

/* ---- argument parsing ---------------------------------------------------------------------- */

static int add_val(Axis *a, const char *s, size_t len) {
    char **nv = realloc(a->vals, sizeof(char *) * (size_t)(a->n + 1));
    if (!nv) return -1;
    a->vals = nv;
    char *v = malloc(len + 1);
    if (!v) return -1;
    memcpy(v, s, len);
    v[len] = 0;
    a->vals[a->n++] = v;
    return 0;
}

static bool is_pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }

/* Parses "lo..hi" of integers; returns true if item is one. */
static bool parse_range(const char *item, long *lo, long *hi) {
    char *end;
    errno = 0;
    *lo = strtol(item, &end, 10);
    if (end == item || strncmp(end, "..", 2) != 0 || errno) return false;
    const char *h = end + 2;
    *hi = strtol(h, &end, 10);
    return end != h && *end == 0 && !errno;
}

/* Adds the values of one item (a value or a range) to the axis. Returns 0, -1 on host memory,
 * or 1 with a message in err for a bad range. */
static int add_item(Axis *a, const char *item, char *err, size_t errlen) {
    long lo, hi;
    if (!parse_range(item, &lo, &hi)) return add_val(a, item, strlen(item));
    if (lo > hi) {
        snprintf(err, errlen, "--set %s=...: range %s is empty (lo > hi)", a->key, item);
        return 1;
    }
    if (is_pow2(lo) && is_pow2(hi)) {
        for (long v = lo; v <= hi; v *= 2) {
            char b[32];
            int k = snprintf(b, sizeof b, "%ld", v);
            if (add_val(a, b, (size_t)k)) return -1;
        }
        return 0;
    }
    if (hi - lo >= MAX_RANGE) {
        snprintf(err, errlen, "--set %s=...: range %s has more than %ld values", a->key, item,
                 MAX_RANGE);
        return 1;
    }
    for (long v = lo; v <= hi; v++) {
        char b[32];
        int k = snprintf(b, sizeof b, "%ld", v);
        if (add_val(a, b, (size_t)k)) return -1;
    }
    return 0;
}

/* Parses "key=v1,v2,lo..hi" into a. Same return convention as add_item. */
static int parse_axis(Axis *a, const char *spec, char *err, size_t errlen) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec) {
        snprintf(err, errlen, "--set %s: expected KEY=VALUES", spec);
        return 1;
    }
    if ((size_t)(eq - spec) >= sizeof a->key) {
        snprintf(err, errlen, "--set %.*s...: no field has a name of %zu characters", 40, spec,
                 (size_t)(eq - spec));
        return 1;
    }
    memcpy(a->key, spec, (size_t)(eq - spec));
    a->key[eq - spec] = 0;
    size_t n = strlen(eq + 1);
    char *item = malloc(n + 1);
    if (!item) return -1;
    size_t k = 0;
    int rc = 0;
    for (const char *s = eq + 1;; s++) {
        if (*s == '\\' && s[1] == ',') { item[k++] = ','; s++; continue; }
        if (*s == ',' || *s == 0) {
            item[k] = 0; /* an empty value is kept: allocator.conf=,expandable_segments:True */
            if ((rc = add_item(a, item, err, errlen))) break;
            k = 0;
            if (*s == 0) break;
            continue;
        }
        item[k++] = *s;
    }
    free(item);
    return rc;
}

/* Lets go of slot sl's sets. */
static void slot_clear(const Sweep *s, Slot *sl) {
    if (!sl->sets) return;
    for (int i = s->n_consts; i < s->n_consts + s->n_axes; i++) free((char *)sl->sets[i]);
    free(sl->sets);
    sl->sets = NULL;
}

static void sweep_free(Sweep *s) {
    for (int i = 0; i < s->n_axes; i++) {
        for (int j = 0; j < s->axes[i].n; j++) free(s->axes[i].vals[j]);
        free(s->axes[i].vals);
    }
    free(s->axes);
    for (int i = 0; i < s->n_consts; i++) free((char *)s->consts[i]);
    free(s->consts);
    free(s->dir);
    free(s->src);
    free(s->todo);
    free(s->order);
    free(s->grp_pos);
    free(s->grp_end);
    free(s->res);
    for (int i = 0; i < s->n_slots; i++) slot_clear(s, &s->slots[i]);
    free(s->slots);
    points_free(s->runner);
    if (s->journal) fclose(s->journal);
}

/* The value of axis a at point k. */
static const char *point_val(const Sweep *s, int a, long k) {
    const Axis *x = &s->axes[a];
    return x->vals[(k / x->stride) % x->n];
}

/* ---- one point ----------------------------------------------------------------------------- */

/* The --set overrides of point k into sets (consts, then one "key=value" per axis, each a new
 * string of the whole value, never cut to a buffer); -1 on host memory (then nothing is kept). */
static int point_sets(const Sweep *s, long k, const char **sets) {
    int m = 0;
    for (int i = 0; i < s->n_consts; i++) sets[m++] = s->consts[i];
    for (int a = 0; a < s->n_axes; a++) {
        char *v = vr_strfmt("%s=%s", s->axes[a].key, point_val(s, a, k));
        if (!v) {
            while (--a >= 0) free((char *)sets[--m]);
            return -1;
        }
        sets[m++] = v;
    }
    return m;
}

/* The sweep's result of a point from the pool's answer (simulate: the point was simulated). */
static void point_result(const PointOut *po, bool simulate, PointResult *out) {
    memset(out, 0, sizeof *out);
    out->done = true;
    if (po->status) {
        out->error = true;
        snprintf(out->err, sizeof out->err, "%.*s", (int)sizeof out->err - 1, po->err);
    } else if (simulate) {
        out->fits = po->fits;
        out->capacity = po->capacity;
        if (po->has_step) {
            out->peak_alloc = po->peak_alloc;
            out->peak_res = po->peak_res;
            out->step_ms = po->time_ns / 1e6;
            if (po->time_ns > 0 && po->tokens_per_step > 0)
                out->tokens_per_s = po->tokens_per_step / (po->time_ns / 1e9);
        }
    }
}

/* Loads point k's scenario without simulating it (the check that every key names a field). */
static void load_point(const Sweep *s, long k, PointResult *out) {
    const char **sets = calloc((size_t)(s->n_consts + s->n_axes) + 1, sizeof(char *));
    PointOut *po = malloc(sizeof *po);
    int m = sets && po ? point_sets(s, k, sets) : -1;
    if (m < 0) {
        memset(out, 0, sizeof *out);
        out->done = out->error = true;
        snprintf(out->err, sizeof out->err, "out of host memory");
    } else {
        points_run(s->runner, s->path, s->src, sets, m, false, po);
        point_result(po, false, out);
        for (int i = s->n_consts; i < m; i++) free((char *)sets[i]);
    }
    free(po);
    free(sets);
}

/* ---- the pool's feed ------------------------------------------------------------------------ */


/* Whether axis x sets the GPU ("gpu" or "hardware.gpu"). */
static bool is_gpu_axis(const Axis *x) {
    return strcmp(x->key, "gpu") == 0 || strcmp(x->key, "hardware.gpu") == 0;
}

/* The point's number with the GPU axis moved to vary fastest. */
static long gpu_last_number(const Sweep *s, long k) {
    long n = 0, gpu = -1, gpu_n = 1;
    for (int a = 0; a < s->n_axes; a++) {
        const Axis *x = &s->axes[a];
        long v = (k / x->stride) % x->n;
        if (gpu < 0 && is_gpu_axis(x)) {
            gpu = v;
            gpu_n = x->n;
        } else {
            n = n * x->n + v;
        }
    }
    return gpu < 0 ? n : n * gpu_n + gpu;
}

static const Sweep *order_sweep; /* for cmp_order (qsort has no user pointer) */

static int cmp_order(const void *a, const void *b) {
    const Sweep *s = order_sweep;
    long x = gpu_last_number(s, s->todo[*(const long *)a]);
    long y = gpu_last_number(s, s->todo[*(const long *)b]);
    return x < y ? -1 : x > y;
}

/* Fills s->order and the groups (see Order at the top). -1 on host memory. */
static int feed_order(Sweep *s) {
    s->order = malloc(sizeof(long) * (size_t)(s->n_todo + 1));
    s->grp_pos = malloc(sizeof(long) * (size_t)(s->n_todo + 1));
    s->grp_end = malloc(sizeof(long) * (size_t)(s->n_todo + 1));
    if (!s->order || !s->grp_pos || !s->grp_end) return -1;
    for (long i = 0; i < s->n_todo; i++) s->order[i] = i;
    order_sweep = s;
    qsort(s->order, (size_t)s->n_todo, sizeof(long), cmp_order);
    long gpu_n = 1;
    for (int a = 0; a < s->n_axes; a++)
        if (is_gpu_axis(&s->axes[a])) {
            gpu_n = s->axes[a].n;
            break;
        }
    s->n_groups = s->next_group = 0;
    long prev = -1;
    for (long i = 0; i < s->n_todo; i++) {
        long g = gpu_last_number(s, s->todo[s->order[i]]) / gpu_n;
        if (i == 0 || g != prev) s->grp_pos[s->n_groups++] = i;
        s->grp_end[s->n_groups - 1] = i + 1;
        prev = g;
    }
    return 0;
}

/* The group a place that has none left goes to (see Order), or -1 when every point is given. */
static long next_group(Sweep *s) {
    if (s->next_group < s->n_groups) return s->next_group++;
    for (long g = 0; g < s->n_groups; g++)
        if (s->grp_pos[g] < s->grp_end[g]) return g;
    return -1;
}

/* The next point for place sl, from its group while the group has points left (see Order), not
 * one a --resume found done; -1 when every point is given. */
static long next_point(Sweep *s, Slot *sl) {
    long g = sl->group;
    for (;;) {
        if (g < 0 || s->grp_pos[g] == s->grp_end[g]) g = next_group(s);
        if (g < 0) return -1;
        while (s->grp_pos[g] < s->grp_end[g] && s->res[s->order[s->grp_pos[g]]].done)
            s->grp_pos[g]++; /* finished before a --resume */
        if (s->grp_pos[g] == s->grp_end[g]) continue;
        sl->group = g;
        return s->todo[s->order[s->grp_pos[g]++]];
    }
}

/* Index of point k in s->todo (ascending). */
static long todo_index(const Sweep *s, long k) {
    long lo = 0, hi = s->n_todo - 1;
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        if (s->todo[mid] == k) return mid;
        if (s->todo[mid] < k) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void progress(long done, long total, double t0, bool final) {
    double el = vr_now_s() - t0;
    if (final) { fprintf(stderr, "\r\033[K"); return; }
    int width = 30, fill = total ? (int)((double)width * (double)done / (double)total) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '-';
    bar[width] = 0;
    double eta = done ? el / (double)done * (double)(total - done) : 0;
    fprintf(stderr, "\rsweep [%s] %ld/%ld points  %.1f s", bar, done, total, el);
    if (done && done < total) fprintf(stderr, "  ETA %.0f s", ceil(eta));
    fprintf(stderr, "\033[K");
    fflush(stderr);
}

/* Appends a result line to the journal (newline added with nl) and flushes it; a failure (a full
 * disk) is said once: the sweep goes on, but an interruption would lose the points since. */
static void journal_append(Sweep *s, const char *line, bool nl) {
    fputs(line, s->journal);
    if (nl) fputc('\n', s->journal);
    if ((fflush(s->journal) != 0 || ferror(s->journal)) && !s->journal_failed) {
        s->journal_failed = true;
        fprintf(stderr, "\nvrsim sweep: the journal could not be written (%s): the sweep goes on, "
                "but --resume after an interruption would run the points from here again\n",
                strerror(errno));
    }
}

/* Records result line `line` (the journal's, with its newline) of point k: into the point's
 * result as the journal reads it back, and onto the journal. */
static void record(Sweep *s, long k, const char *line) {
    long lk, ti;
    PointResult r;
    size_t n = strlen(line);
    char *bare = strndup(line, n && line[n - 1] == '\n' ? n - 1 : n);
    bool parsed = bare && journal_parse(bare, &lk, &r) && lk == k;
    free(bare);
    if ((ti = todo_index(s, k)) < 0 || s->res[ti].done) return;
    if (!parsed) { /* no host memory for the copy, or a line the journal cannot read back */
        memset(&r, 0, sizeof r);
        r.done = r.error = true;
        snprintf(r.err, sizeof r.err, "the point's result could not be recorded");
    }
    s->res[ti] = r;
    s->done++;
    if (s->journal) journal_append(s, line, false);
}

/* points_run_feed's next: the next point for the place the pool has free (see Order), NULL when
 * every point is given (or, for host memory, recorded as failed). */
static PointJob *feed_next(void *ud) {
    Sweep *s = ud;
    Slot *sl = s->free_slots;
    long k;
    while (sl && (k = next_point(s, sl)) >= 0) {
        const char **sets = calloc((size_t)(s->n_consts + s->n_axes) + 1, sizeof(char *));
        int m = sets ? point_sets(s, k, sets) : -1;
        if (m < 0) {
            free(sets);
            PointResult r = {.done = true, .error = true};
            snprintf(r.err, sizeof r.err, "out of host memory");
            char line[ERR_MAX + 256];
            if (journal_format(line, sizeof line, k, &r) > 0) record(s, k, line);
            continue;
        }
        s->free_slots = sl->next_free;
        sl->sets = sets;
        sl->k = k;
        sl->job = (PointJob){.sets = sets, .n_sets = m, .simulate = true};
        return &sl->job;
    }
    return NULL;
}

/* points_run_feed's done: point's answer recorded, its slot free again. */
static void feed_done(void *ud, PointJob *job) {
    Sweep *s = ud;
    Slot *sl = (Slot *)((char *)job - offsetof(Slot, job));
    PointResult r;
    point_result(&job->out, true, &r);
    char line[ERR_MAX + 256];
    if (journal_format(line, sizeof line, sl->k, &r) > 0) record(s, sl->k, line);
    slot_clear(s, sl);
    sl->next_free = s->free_slots;
    s->free_slots = sl;
    if (s->show_progress && vr_now_s() - s->last_draw > 0.1) {
        progress(s->done, s->n_todo, s->t0, false);
        s->last_draw = vr_now_s();
    }
}

/* Runs every point of s->todo not done yet in n_jobs children of the pool. Returns 0, or -1 on
 * host memory. */
static int run_all(Sweep *s, int n_jobs, bool show_progress) {
    s->n_slots = n_jobs < POINTS_MAX_CHILDREN ? n_jobs : POINTS_MAX_CHILDREN;
    if (s->n_slots < 1) s->n_slots = 1;
    s->slots = calloc((size_t)s->n_slots, sizeof(Slot));
    if (!s->slots) return -1;
    for (int i = s->n_slots - 1; i >= 0; i--) {
        s->slots[i].group = -1;
        s->slots[i].next_free = s->free_slots;
        s->free_slots = &s->slots[i];
    }
    s->done = 0;
    for (long i = 0; i < s->n_todo; i++) s->done += s->res[i].done;
    s->t0 = vr_now_s();
    s->show_progress = show_progress;
    signal(SIGPIPE, SIG_IGN); /* a child that died leaves a closed pipe: its point says why */
    points_set_reuse(s->runner, true);
    PointFeed feed = {.next = feed_next, .done = feed_done, .ud = s};
    points_run_feed(s->runner, s->path, s->src, &feed, n_jobs);
    if (show_progress) progress(s->done, s->n_todo, s->t0, true);
    return 0;
}

/* ---- outputs ------------------------------------------------------------------------------- */

static bool shown(const Sweep *s, int a) {
    /* the table shows the axes that vary; if none varies, all of them */
    bool any = false;
    for (int i = 0; i < s->n_axes; i++) any |= s->axes[i].n > 1;
    return !any || s->axes[a].n > 1;
}

static void print_table(FILE *f, const Sweep *s) {
    int *wid = calloc((size_t)s->n_axes + 1, sizeof(int));
    if (!wid) return;
    for (int a = 0; a < s->n_axes; a++) {
        wid[a] = (int)strlen(s->axes[a].key);
        for (int j = 0; j < s->axes[a].n; j++) {
            int l = (int)strlen(s->axes[a].vals[j]);
            if (l > wid[a]) wid[a] = l;
        }
        if (wid[a] > 40) wid[a] = 40;
    }
    fprintf(f, "%6s", "point");
    for (int a = 0; a < s->n_axes; a++) if (shown(s, a)) fprintf(f, "  %-*s", wid[a], s->axes[a].key);
    fprintf(f, "  %-5s %10s %10s %10s %10s\n", "fits", "alloc GiB", "resvd GiB", "of GiB", "step ms");
    for (long i = 0; i < s->n_todo; i++) {
        long k = s->todo[i];
        const PointResult *r = &s->res[i];
        fprintf(f, "%6ld", k);
        for (int a = 0; a < s->n_axes; a++)
            if (shown(s, a)) fprintf(f, "  %-*.*s", wid[a], wid[a], point_val(s, a, k));
        if (r->error) { fprintf(f, "  error: %s\n", r->err); continue; }
        fprintf(f, "  %-5s %10.2f %10.2f %10.2f", r->fits ? "yes" : "NO", GIB(r->peak_alloc),
                GIB(r->peak_res), GIB(r->capacity));
        if (r->fits) fprintf(f, " %10.1f\n", r->step_ms);
        else fprintf(f, " %10s\n", "-");
    }
    free(wid);
}

/* CSV field: quoted when it holds a comma, quote or newline. */
static void csv_field(FILE *f, const char *v) {
    if (!strpbrk(v, ",\"\n\r")) { fputs(v, f); return; }
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '"') fputc('"', f);
        fputc(*v, f);
    }
    fputc('"', f);
}

static char *build_csv(const Sweep *s, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return NULL;
    fprintf(f, "point");
    for (int a = 0; a < s->n_axes; a++) { fputc(',', f); csv_field(f, s->axes[a].key); }
    fprintf(f, ",status,fits,peak_allocated_bytes,peak_reserved_bytes,capacity_bytes,step_time_ms,"
            "tokens_per_s,error\n");
    for (long i = 0; i < s->n_todo; i++) {
        long k = s->todo[i];
        const PointResult *r = &s->res[i];
        fprintf(f, "%ld", k);
        for (int a = 0; a < s->n_axes; a++) { fputc(',', f); csv_field(f, point_val(s, a, k)); }
        if (r->error) {
            fprintf(f, ",error,,,,,,,");
            csv_field(f, r->err);
            fputc('\n', f);
            continue;
        }
        fprintf(f, ",%s,%s,%.0f,%.0f,%.0f,", r->fits ? "ok" : "oom", r->fits ? "true" : "false",
                r->peak_alloc, r->peak_res, r->capacity);
        if (r->fits) fprintf(f, "%.3f,%.1f,\n", r->step_ms, r->tokens_per_s);
        else fprintf(f, ",,\n"); /* an OOM step has no step time */
    }
    if (fclose(f)) { free(text); return NULL; }
    return text;
}

/* A --set value as JSON: a number when the whole text is one, true/false, else a string. */
static cJSON *json_value(const char *v) {
    char *end;
    double d = strtod(v, &end);
    if (*v && *end == 0 && isfinite(d)) return cJSON_CreateNumber(d);
    if (strcmp(v, "true") == 0) return cJSON_CreateTrue();
    if (strcmp(v, "false") == 0) return cJSON_CreateFalse();
    return cJSON_CreateString(v);
}

static char *build_json(const Sweep *s, const char *name, int shard_i, int shard_n) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "scenario", name);
    cJSON *keys = cJSON_AddArrayToObject(o, "keys");
    for (int a = 0; a < s->n_axes; a++) cJSON_AddItemToArray(keys, cJSON_CreateString(s->axes[a].key));
    cJSON_AddNumberToObject(o, "points_total", (double)s->n_points);
    if (shard_n > 1) {
        cJSON *sh = cJSON_AddObjectToObject(o, "shard");
        cJSON_AddNumberToObject(sh, "index", shard_i);
        cJSON_AddNumberToObject(sh, "count", shard_n);
    }
    cJSON *pts = cJSON_AddArrayToObject(o, "points");
    for (long i = 0; i < s->n_todo; i++) {
        long k = s->todo[i];
        const PointResult *r = &s->res[i];
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "point", (double)k);
        cJSON *set = cJSON_AddObjectToObject(p, "settings");
        for (int a = 0; a < s->n_axes; a++)
            cJSON_AddItemToObject(set, s->axes[a].key, json_value(point_val(s, a, k)));
        cJSON_AddStringToObject(p, "status", r->error ? "error" : r->fits ? "ok" : "oom");
        if (r->error) {
            cJSON_AddStringToObject(p, "error", r->err);
        } else {
            cJSON_AddBoolToObject(p, "fits", r->fits);
            cJSON_AddNumberToObject(p, "peak_allocated_bytes", r->peak_alloc);
            cJSON_AddNumberToObject(p, "peak_reserved_bytes", r->peak_res);
            cJSON_AddNumberToObject(p, "capacity_bytes", r->capacity);
            if (r->fits) cJSON_AddNumberToObject(p, "step_time_ms", r->step_ms);
            if (r->fits && r->tokens_per_s > 0) cJSON_AddNumberToObject(p, "tokens_per_s", r->tokens_per_s);
        }
        cJSON_AddItemToArray(pts, p);
    }
    char *raw = cJSON_Print(o);
    cJSON_Delete(o);
    /* names and values as valid UTF-8 (a byte that is not becomes U+FFFD) */
    char *text = raw ? safetext_utf8(raw, strlen(raw), NULL) : NULL;
    free(raw);
    return text;
}

/* ---- the journal: finished points as they arrive, for --resume (journal.h) --------------
 *
 * <out>/sweep<suffix>.journal is made whole beside its place (a temporary renamed into it: a
 * full disk leaves no journal rather than an empty one), then has each finished point appended
 * and flushed as it arrives. The sweep holds a lock on it while it runs (fcntl, gone with the
 * process however it ends), so a second sweep into the same --out is refused rather than mixing
 * its points into the first's; a journal of another, interrupted sweep is refused as well. An
 * interrupted sweep leaves its journal behind; --resume takes its whole lines when it is this
 * sweep's with the same inputs, and runs every point again when an input changed. A sweep that
 * wrote its files removes its journal. */

/* Folds the bytes of the file at path into h, if it is a regular file of at most 32 MiB (what a
 * scenario may read); its absence or refusal folds in a marker instead. */
static uint64_t hash_file(uint64_t h, const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (32 << 20)) {
        if (fd >= 0) close(fd);
        return vr_hash(h, "(none)", 6);
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) h = vr_hash(h, buf, (size_t)n);
    close(fd);
    return h;
}

/* Whether axis x names a file a point reads (a config typed on the command line). */
static bool is_path_axis(const Axis *x) {
    static const char *const KEYS[] = {"model.config", "config", "training.deepspeed", "deepspeed"};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++)
        if (strcmp(x->key, KEYS[i]) == 0) return true;
    return false;
}

/* The journal's key (journal.h): read_hash is what loading the scenario read (modules,
 * configs: ScenarioOptions.read_hash); the files an axis names are read here, as typed and
 * beside the scenario (where a point would look for them). */
static JournalKey journal_key(const Sweep *s, uint64_t read_hash, int shard_i, int shard_n) {
    uint64_t h = VR_HASH_INIT;
    h = vr_hash(h, s->path, strlen(s->path));
    for (int a = 0; a < s->n_axes; a++) {
        h = vr_hash(h, s->axes[a].key, strlen(s->axes[a].key));
        for (int j = 0; j < s->axes[a].n; j++) h = vr_hash(h, s->axes[a].vals[j], strlen(s->axes[a].vals[j]));
    }
    for (int i = 0; i < s->n_consts; i++)
        if (!s->env_conf || i != s->n_consts - 1) h = vr_hash(h, s->consts[i], strlen(s->consts[i]));
    h = vr_hash(h, s->unsafe ? "unsafe" : "", s->unsafe ? 6 : 0);
    uint64_t in = VR_HASH_INIT;
    in = vr_hash(in, s->src, strlen(s->src));
    in = vr_hash(in, &read_hash, sizeof read_hash);
    for (int a = 0; a < s->n_axes; a++)
        for (int j = 0; is_path_axis(&s->axes[a]) && j < s->axes[a].n; j++) {
            char *beside = vr_strfmt("%s/%s", s->dir, s->axes[a].vals[j]);
            in = hash_file(in, s->axes[a].vals[j]);
            in = beside ? hash_file(in, beside) : vr_hash(in, "(oom)", 5);
            free(beside);
        }
    in = vr_hash(in, s->env_conf ? s->env_conf : "", s->env_conf ? strlen(s->env_conf) : 0);
    in = vr_hash(in, VRSIM_VERSION, strlen(VRSIM_VERSION));
    return (JournalKey){.sweep = h, .inputs = in, .n_points = s->n_points, .shard_i = shard_i,
                        .shard_n = shard_n};
}

/* journal_read's taker: a finished point of this shard, once. */
static void take_point(void *ud, long k, const PointResult *r) {
    Sweep *s = ud;
    long ti = todo_index(s, k);
    if (ti >= 0 && !s->res[ti].done) s->res[ti] = *r;
}

static void take_nothing(void *ud, long k, const PointResult *r) { (void)ud; (void)k; (void)r; }

/* Takes a write lock on all of fd's file, released when this process ends however it ends.
 * False when another process holds one: *holder is its pid (0 when unknown). */
static bool lock_file(int fd, long *holder) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    *holder = 0;
    if (fcntl(fd, F_SETLK, &fl) == 0) return true;
    if (errno != EACCES && errno != EAGAIN) return true; /* a file system without locks */
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK) *holder = (long)q.l_pid;
    return false;
}

/* Reads the journal at jpath, if there is one, into s->res (with resume) and says what it found.
 * Returns VR_OK, or VR_EINVAL (refused: another sweep's, or one being written now) / VR_EIO with
 * a message in err. */
static VrStatus journal_open_old(Sweep *s, const char *jpath, const JournalKey *key, bool resume,
                                 bool quiet, char *err, size_t errlen) {
    struct stat st;
    if (lstat(jpath, &st) != 0) {
        if (resume) safetext_eprintf("vrsim sweep: --resume: no journal %s: running every point\n", jpath);
        return VR_OK;
    }
    VrStatus cs = outpath_check_file(jpath, "--out", NULL, NULL, err, errlen);
    if (cs) return cs;
    int fd = open(jpath, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    FILE *jf = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!jf) {
        snprintf(err, errlen, "cannot read %s: %s", jpath, strerror(errno));
        if (fd >= 0) close(fd);
        return VR_EIO;
    }
    long holder;
    if (!lock_file(fd, &holder)) {
        fclose(jf);
        snprintf(err, errlen, "%s: another sweep (process %ld) is writing into this folder now: two "
                 "sweeps into one --out would mix their points; give another --out", jpath, holder);
        return VR_EINVAL;
    }
    JournalMatch m;
    long got = journal_read(jf, key, &m, resume ? take_point : take_nothing, s);
    fclose(jf);
    if (got < 0) {
        snprintf(err, errlen, "out of host memory");
        return VR_ENOMEM;
    }
    if (m == JOURNAL_FOREIGN) {
        snprintf(err, errlen, "%s is from another sweep, interrupted (another scenario, --set "
                 "values, settings or shard, or an older vrsim): finish that one with its own command and "
                 "--resume, remove the journal, or give another --out", jpath);
        return VR_EINVAL;
    }
    if (resume && m == JOURNAL_STALE && !quiet)
        safetext_eprintf("vrsim sweep: --resume: the scenario, a file it reads, the allocator "
                "settings of the environment or vrsim changed since %s was written: running every "
                "point again\n", jpath);
    if (resume && m == JOURNAL_EMPTY && !quiet)
        safetext_eprintf("vrsim sweep: --resume: %s holds no finished point: running every point\n", jpath);
    return VR_OK;
}

/* Makes the journal at jpath whole (the header and the points s->res holds) and leaves it open
 * in s->journal, locked, for the points to come. VR_OK, or VR_EIO / VR_EINVAL with err. */
static VrStatus journal_start(Sweep *s, const char *jpath, const JournalKey *key, char *err,
                              size_t errlen) {
    char *tmp = NULL;
    int fd = outpath_temp_file(jpath, &tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", jpath, strerror(errno));
        if (fd >= 0) { close(fd); unlink(tmp); }
        free(tmp);
        return VR_EIO;
    }
    long holder;
    lock_file(fd, &holder);
    char header[256], line[ERR_MAX + 256];
    journal_header(key, header, sizeof header);
    fputs(header, f);
    for (long i = 0; i < s->n_todo; i++)
        if (s->res[i].done && journal_format(line, sizeof line, s->todo[i], &s->res[i]) > 0)
            fputs(line, f);
    if (fflush(f) != 0 || ferror(f)) {
        snprintf(err, errlen, "cannot write %s: %s", jpath, strerror(errno));
        fclose(f);
        unlink(tmp);
        free(tmp);
        return VR_EIO;
    }
    VrStatus st = outpath_commit_file(tmp, jpath, "--out", NULL, NULL, err, errlen);
    free(tmp);
    if (st) { fclose(f); return st; }
    s->journal = f;
    return VR_OK;
}

/* ---- the command --------------------------------------------------------------------------- */

static bool parse_int(const char *s, long *v) {
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return *s && *end == 0 && !errno;
}

int cmd_sweep(int argc, char **argv) {
    Sweep s = {0};
    const char *outdir = NULL;
    bool files = true, json = false, resume = false;
    double timeout_s = POINT_TIMEOUT_S;
    long jobs = sysconf(_SC_NPROCESSORS_ONLN);
    int shard_i = 1, shard_n = 1;
    int rc = VR_EXIT_USAGE;
    char *name = NULL, *dir = NULL, *jpath = NULL;
    const char *conf_given = NULL;
    char err[1024];
    RecipeOptions rcp = {0};
    if (jobs < 1) jobs = 1;
    s.axes = calloc((size_t)argc + 1, sizeof(Axis));
    s.consts = calloc(4, sizeof(char *)); /* --allocator, --alloc-conf or the environment's */
    if (!s.axes || !s.consts) { sweep_free(&s); return VR_EXIT_INTERNAL; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); sweep_free(&s); return 0; }
        if (strcmp(a, "--no-files") == 0) { files = false; continue; }
        if (strcmp(a, "--json") == 0) { json = true; continue; }
        if (strcmp(a, "--unsafe") == 0) { s.unsafe = true; continue; }
        if (strcmp(a, "--resume") == 0) { resume = true; continue; }
        int ro = recipe_option(argc, argv, &i, &rcp, err, sizeof err);
        if (ro < 0) { safetext_eprintf("vrsim sweep: %s\n", err); goto out; }
        if (ro) continue;
        if (strncmp(a, "--set=", 6) == 0) { val = a + 6; a = "--set"; i--; }
        else if (strncmp(a, "-j", 2) == 0 && a[2]) { val = a + 2; a = "-j"; i--; }
        bool takes = strcmp(a, "--set") == 0 || strcmp(a, "-j") == 0 || strcmp(a, "--jobs") == 0 ||
                     strcmp(a, "--shard") == 0 || strcmp(a, "--out") == 0 ||
                     strcmp(a, "--allocator") == 0 || strcmp(a, "--alloc-conf") == 0 ||
                     strcmp(a, "--point-timeout") == 0;
        if (takes) {
            if (!val) { safetext_eprintf("vrsim sweep: %s needs a value (vrsim sweep --help)\n", a); goto out; }
            i++;
            if (strcmp(a, "--set") == 0) {
                Axis *ax = &s.axes[s.n_axes];
                int pr = parse_axis(ax, val, err, sizeof err);
                s.n_axes++;
                if (pr < 0) { rc = VR_EXIT_INTERNAL; goto out; }
                if (pr) { safetext_eprintf("vrsim sweep: %s\n", err); goto out; }
                for (int j = 0; j < s.n_axes - 1; j++)
                    if (strcmp(s.axes[j].key, ax->key) == 0) {
                        safetext_eprintf("vrsim sweep: --set %s given twice\n", ax->key);
                        goto out;
                    }
            } else if (strcmp(a, "-j") == 0 || strcmp(a, "--jobs") == 0) {
                if (!parse_int(val, &jobs) || jobs < 1 || jobs > 1024) {
                    safetext_eprintf("vrsim sweep: %s %s: expected a number of workers from 1 to 1024\n", a, val);
                    goto out;
                }
            } else if (strcmp(a, "--shard") == 0) {
                /* whole numbers within range, or refused: never wrapped into another shard */
                const char *sl = strchr(val, '/');
                char *ib = sl ? strndup(val, (size_t)(sl - val)) : NULL;
                long li = 0, ln = 0;
                bool good = ib && parse_int(ib, &li) && parse_int(sl + 1, &ln) && ln >= 1 &&
                            ln <= MAX_POINTS && li >= 1 && li <= ln;
                free(ib);
                if (good) { shard_i = (int)li; shard_n = (int)ln; }
                if (!good) {
                    safetext_eprintf("vrsim sweep: --shard %s: expected I/N, whole numbers with 1 <= I "
                            "<= N <= %ld (Slurm: --shard $SLURM_ARRAY_TASK_ID/N with --array=1-N)\n",
                            val, MAX_POINTS);
                    goto out;
                }
            } else if (strcmp(a, "--out") == 0) {
                outdir = val;
            } else if (strcmp(a, "--point-timeout") == 0) {
                char *end;
                timeout_s = strtod(val, &end);
                if (end == val || *end || !(timeout_s > 0) || timeout_s > 1e6) {
                    safetext_eprintf("vrsim sweep: --point-timeout %s: expected seconds, more than 0 "
                            "and at most 1e6\n", val);
                    goto out;
                }
            } else {
                /* the whole value, however long (never cut to a buffer) */
                bool kind = strcmp(a, "--allocator") == 0;
                if (!kind) conf_given = val;
                for (int c = 0; c < s.n_consts; c++)
                    if (strncmp(s.consts[c], kind ? "allocator.kind=" : "allocator.conf=", 15) == 0) {
                        safetext_eprintf("vrsim sweep: %s given twice\n", a);
                        goto out;
                    }
                char *c = vr_strfmt("%s=%s", kind ? "allocator.kind" : "allocator.conf", val);
                if (!c) { rc = VR_EXIT_INTERNAL; goto out; }
                s.consts[s.n_consts++] = c;
            }
            continue;
        }
        if (a[0] == '-') { safetext_eprintf("vrsim sweep: unknown option %s (vrsim sweep --help)\n", a); goto out; }
        if (s.path) { safetext_eprintf("vrsim sweep: one scenario at a time (got %s and %s)\n", s.path, a); goto out; }
        s.path = a;
    }
    if (!s.path) { usage(stderr); goto out; }
    /* PyTorch reads PYTORCH_CUDA_ALLOC_CONF from the environment, and so does a run:
     * --alloc-conf stands in for it, as it does for vrsim SCENARIO */
    if (!conf_given) {
        const char *env = getenv("PYTORCH_CUDA_ALLOC_CONF");
        char *c = env && env[0] ? vr_strfmt("allocator.conf=%s", env) : NULL;
        if (env && env[0] && !c) { rc = VR_EXIT_INTERNAL; goto out; }
        if (c) { s.consts[s.n_consts++] = c; s.env_conf = env; } /* the last constant */
    }
    const char *env_note = s.env_conf ? " (allocator settings from PYTORCH_CUDA_ALLOC_CONF in the "
                                        "environment)" : "";
    if (s.n_axes == 0) {
        safetext_eprintf("vrsim sweep: nothing to sweep: give --set KEY=VALUES (vrsim sweep --help)\n");
        goto out;
    }
    if (resume && !files) {
        safetext_eprintf("vrsim sweep: --resume continues from the files in --out: it cannot go with "
                "--no-files\n");
        goto out;
    }
    /* the cross product */
    s.n_points = 1;
    for (int a = s.n_axes - 1; a >= 0; a--) {
        s.axes[a].stride = s.n_points;
        if (s.n_points > MAX_POINTS / s.axes[a].n) {
            safetext_eprintf("vrsim sweep: more than %ld points; split the sweep\n", MAX_POINTS);
            goto out;
        }
        s.n_points *= s.axes[a].n;
    }
    s.todo = malloc(sizeof(long) * (size_t)(s.n_points / shard_n + 1));
    if (!s.todo) { rc = VR_EXIT_INTERNAL; goto out; }
    for (long k = shard_i - 1; k < s.n_points; k += shard_n) s.todo[s.n_todo++] = k;
    if (feed_order(&s)) { rc = VR_EXIT_INTERNAL; goto out; }
    s.res = calloc((size_t)s.n_todo + 1, sizeof(PointResult));
    if (!s.res) { rc = VR_EXIT_INTERNAL; goto out; }
    bool recipe = rcp.from || recipe_is_config(s.path);
    if (!recipe && rcp.accelerate) {
        safetext_eprintf("vrsim sweep: --accelerate is for a TRL or TrainingArguments config "
                "(CONFIG.yaml), not a scenario\n");
        goto out;
    }
    if (!recipe && (rcp.gpu || rcp.count)) {
        safetext_eprintf("vrsim sweep: --gpu and --gpus are for a trainer config (CONFIG.yaml); a "
                "scenario's GPU is --set gpu=NAMES\n");
        goto out;
    }
    if (recipe) {
        /* a trainer config, read once into the scenario text every point loads (its paths read
         * from the working folder); a model.config among the constants stands in for its model */
        const char **cs = calloc((size_t)s.n_axes + 1, sizeof(char *));
        int n_cs = 0;
        VrStatus st = cs ? VR_OK : VR_ENOMEM;
        for (int a = 0; a < s.n_axes && !st; a++)
            if (s.axes[a].n == 1 && !(cs[n_cs++] = vr_strfmt("%s=%s", s.axes[a].key, s.axes[a].vals[0])))
                st = VR_ENOMEM;
        if (!st) st = recipe_source(s.path, &rcp, cs, n_cs, &s.src, err, sizeof err);
        for (int c = 0; c < n_cs; c++) free((char *)cs[c]);
        free(cs);
        if (st) {
            safetext_eprintf("vrsim sweep: %s\n", st == VR_ENOMEM ? "out of host memory" : err);
            rc = st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
            goto out;
        }
    } else if (!(s.src = points_read_scenario(s.path, err, sizeof err))) {
        safetext_eprintf("vrsim sweep: %s\n", err);
        if (strcmp(err, "out of host memory") == 0) rc = VR_EXIT_INTERNAL;
        goto out;
    }
    /* the scenario's whole folder: a cut one would widen what require may read to its parent */
    if (!(s.dir = recipe ? vr_strfmt(".") : vr_dirname(s.path))) { rc = VR_EXIT_INTERNAL; goto out; }
    /* the Lua state with vrsim's modules loaded, which every worker inherits and forks its
     * points from */
    {
        VrStatus st = points_new(s.dir, s.unsafe, timeout_s, &s.runner, err, sizeof err);
        if (st) { safetext_eprintf("vrsim sweep: %s\n", err); rc = st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE; goto out; }
    }
    /* The scenario itself must load (with the constants), and every key must name a field: a
     * typo would fail every point. A point's own values may still fail, in its row. */
    uint64_t read_hash = VR_HASH_INIT; /* every file the load reads, for the journal's key */
    {
        ScenarioOptions opts = {.sets = s.consts, .n_sets = s.n_consts, .unsafe = s.unsafe,
                                .read_hash = &read_hash};
        Plan *p = NULL;
        VrStatus st = scenario_load_source(s.path, s.src, s.dir, &opts, &p, err, sizeof err);
        plan_free(p);
        if (st) {
            safetext_eprintf("vrsim sweep: %s%s\n", err, env_note);
            rc = st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
            goto out;
        }
        PointResult first;
        load_point(&s, 0, &first);
        if (first.error && (strstr(first.err, "unknown field") || strstr(first.err, "several sections") ||
                            strstr(first.err, "expected key=value") || strstr(first.err, "cannot be set"))) {
            safetext_eprintf("vrsim sweep: %s\n", first.err);
            goto out;
        }
    }
    {
        const char *b = strrchr(s.path, '/');
        name = vr_strfmt("%s", b ? b + 1 : s.path);
        if (!name) { rc = VR_EXIT_INTERNAL; goto out; }
        char *dot = strrchr(name, '.');
        if (dot && (strcmp(dot, ".lua") == 0 || recipe)) *dot = 0;
    }
    char suffix[64] = "";
    dir = outdir ? vr_strfmt("%s", outdir) : vr_strfmt("out/sweep-%s", name);
    if (shard_n > 1) snprintf(suffix, sizeof suffix, ".shard-%d-of-%d", shard_i, shard_n);
    if (!dir || !(jpath = vr_strfmt("%s/sweep%s.journal", dir, suffix))) { rc = VR_EXIT_INTERNAL; goto out; }
    long n_resumed = 0;
    if (files) {
        /* the files must be writable where they go before any point runs: only over a regular
         * file, never a link, a folder, a device or the scenario */
        const char *inputs[] = {s.path, NULL};
        VrStatus st = VR_OK;
        for (int f = 0; f < 2 && !st; f++) {
            char *path = vr_strfmt("%s/sweep%s.%s", dir, suffix, f ? "json" : "csv");
            if (!path) { rc = VR_EXIT_INTERNAL; goto out; }
            st = outpath_check_file(path, "--out", inputs, NULL, err, sizeof err);
            free(path);
        }
        JournalKey key = journal_key(&s, read_hash, shard_i, shard_n);
        if (!st) st = journal_open_old(&s, jpath, &key, resume, json, err, sizeof err);
        if (!st) st = report_make_dir(dir, err, sizeof err);
        if (!st) st = journal_start(&s, jpath, &key, err, sizeof err);
        if (st) {
            safetext_eprintf("vrsim sweep: %s\n", err);
            rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
            goto out;
        }
        for (long i = 0; i < s.n_todo; i++) n_resumed += s.res[i].done;
    }
    if (n_resumed > 0 && !json)
        safetext_eprintf("vrsim sweep: resuming: %ld of %ld points already done\n", n_resumed, s.n_todo);
    double t0 = vr_now_s();
    bool bar = isatty(STDERR_FILENO) && s.n_todo - n_resumed > 1;
    if (s.n_todo > n_resumed && run_all(&s, (int)jobs, bar)) {
        safetext_eprintf("vrsim sweep: out of host memory\n");
        rc = VR_EXIT_INTERNAL;
        goto out;
    }
    double el = vr_now_s() - t0;
    long n_ok = 0, n_oom = 0, n_err = 0;
    for (long i = 0; i < s.n_todo; i++) {
        if (s.res[i].error) n_err++;
        else if (s.res[i].fits) n_ok++;
        else n_oom++;
    }
    char *js = build_json(&s, name, shard_i, shard_n);
    if (!js) { rc = VR_EXIT_INTERNAL; goto out; }
    if (json) {
        puts(js);
    } else {
        printf("vrsim sweep: ");
        safetext_fputs(stdout, name);
        printf(", %ld point%s", s.n_points, s.n_points == 1 ? "" : "s");
        if (shard_n > 1) printf(" (shard %d/%d: %ld of them)", shard_i, shard_n, s.n_todo);
        printf("\n\n");
        /* the values and error texts are the user's and the scenario's: safe for a terminal */
        char *table = NULL;
        size_t tlen = 0;
        FILE *m = open_memstream(&table, &tlen);
        if (m) {
            print_table(m, &s);
            if (fclose(m) == 0) safetext_fputs(stdout, table);
        }
        free(table);
        printf("\n  %ld fit, %ld do not fit, %ld failed; %.2f s with %ld worker%s (%.0f points/s)\n",
               n_ok, n_oom, n_err, el, jobs < s.n_todo ? jobs : s.n_todo,
               (jobs < s.n_todo ? jobs : s.n_todo) == 1 ? "" : "s",
               el > 0 ? (double)(s.n_todo - n_resumed) / el : 0);
    }
    rc = VR_EXIT_OK;
    if (files) {
        size_t clen = 0;
        char *csv = build_csv(&s, &clen);
        VrStatus st = report_make_dir(dir, err, sizeof err);
        if (!st && !csv) { snprintf(err, sizeof err, "out of host memory"); st = VR_ENOMEM; }
        for (int f = 0; f < 2 && !st; f++) {
            char *path = vr_strfmt("%s/sweep%s.%s", dir, suffix, f ? "json" : "csv");
            if (!path) { snprintf(err, sizeof err, "out of host memory"); st = VR_ENOMEM; break; }
            outpath_clean_stale(path); /* temporaries of a sweep that was killed */
            st = f ? report_write_file(path, js, strlen(js), err, sizeof err)
                   : report_write_file(path, csv, clen, err, sizeof err);
            free(path);
        }
        free(csv);
        if (st) { safetext_eprintf("vrsim sweep: %s\n", err); rc = VR_EXIT_INTERNAL; }
        else if (!json) printf("  files: %s/sweep%s.csv, sweep%s.json\n", dir, suffix, suffix);
        if (!st) { /* the sweep is complete: nothing to resume */
            fclose(s.journal);
            s.journal = NULL;
            remove(jpath);
        }
    }
    free(js);
out:
    sweep_free(&s);
    free(name);
    free(dir);
    free(jpath);
    return rc;
}
