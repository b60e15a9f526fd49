/* variants.c: the changes that could make a run fit or hold less, each simulated (see
 * variants.h). */
#include "variants.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "points.h"
#include "report.h"

#define GIB(x) ((double)(x) / 1073741824.0)

/* The settings a change touches: two changes make a pair only when they touch none in common. */
enum {
    G_BATCH = 1 << 0,          /* micro_batch, grad_accum */
    G_CKPT = 1 << 1,           /* checkpointing, checkpoint_scope */
    G_IMPL = 1 << 2,           /* optimizer_impl */
    G_OPT = 1 << 3,            /* optimizer */
    G_STRAT = 1 << 4,          /* strategy, hardware.count, zero.offload_optimizer */
    G_ALLOC = 1 << 5,          /* allocator.conf */
    G_GPU = 1 << 6,            /* hardware.gpu */
    G_PREC = 1 << 7,           /* precision, quant */
    G_BUILD = 1 << 8,          /* build */
};

enum { MAX_SETS = 6, MAX_CANDS = 160, MAX_PAIRS = 40 };

/* One change: its words, its --set overrides, and its simulation's answer. */
typedef struct Cand {
    char label[128];
    char sets[MAX_SETS][80];   /* key=value overrides on top of the run's own */
    int n_sets;
    unsigned groups;           /* G_*: the settings it touches */
    VariantKind kind;
    bool changes_training;
    bool alloc_only;           /* only allocator settings change: the run's graph may serve */
    double usable;             /* VK_LARGER_GPU: the card's usable bytes (the smallest that fits
                                  is kept) */
    PointOut out;              /* its simulation's answer */
} Cand;

struct Variants {
    Cand *c;                   /* candidates, owned: those of the first round (report.html's single
                                  changes) first, then those the search added */
    int n, n1;                 /* in all; in the first round */
    const Plan *plan;          /* the run's plan (borrowed) */
    char *path;                /* the scenario file, owned */
    const char *const *base_sets; /* the run's --set overrides (borrowed from the caller's options) */
    int n_base;
    bool unsafe;
    PointRunner *runner;       /* in the process that simulates: made at its first round */
    char *src;                 /* the scenario's source there, owned */
    VrStatus runner_st;        /* why the runner or the source could not be had */
    char runner_err[256];
    pid_t pid;                 /* the helper, or -1: the rounds run in this process */
    int res_fd, cmd_fd;        /* its pipes: answers from it, the order to search to it */
    bool round1_done;          /* in this process (no helper) */
};

/* The order that follows the first round: whether to search on, and what the run needs. */
typedef struct Order {
    int go;
    double need;
} Order;

/* ---- the settings of the run ----------------------------------------------------------------- */

/* The value of key in knobs (Plan.knobs, "key=value" words) into val; false when absent. */
static bool knob(const char *knobs, const char *key, char *val, size_t n) {
    size_t k = strlen(key);
    for (const char *w = knobs; *w;) {
        while (*w == ' ') w++;
        size_t len = strcspn(w, " ");
        if (len > k && strncmp(w, key, k) == 0 && w[k] == '=') {
            snprintf(val, n, "%.*s", (int)(len - k - 1), w + k + 1);
            return true;
        }
        w += len;
    }
    val[0] = 0;
    return false;
}

/* Whether the word w (a key=value set) is one of the space-separated words of knobs. */
static bool knob_in_effect(const char *knobs, const char *w) {
    size_t n = strlen(w);
    for (const char *k = knobs; (k = strstr(k, w)) != NULL; k += n)
        if ((k == knobs || k[-1] == ' ') && (k[n] == ' ' || k[n] == 0)) return true;
    return false;
}

/* ---- candidates -------------------------------------------------------------------------------- */

/* Adds a change (label, its sets up to a NULL) to v, unless every set of it is already in effect
 * (it would simulate this run again) or there is no room. Returns it, or NULL. */
static Cand *add(Variants *v, unsigned groups, VariantKind kind, const char *label, ...) {
    if (v->n >= MAX_CANDS) return NULL;
    Cand *x = &v->c[v->n];
    memset(x, 0, sizeof *x);
    va_list ap;
    va_start(ap, label);
    bool all_in_effect = true;
    for (const char *s; (s = va_arg(ap, const char *)) != NULL && x->n_sets < MAX_SETS;) {
        snprintf(x->sets[x->n_sets++], sizeof x->sets[0], "%s", s);
        if (!knob_in_effect(v->plan->knobs, s)) all_in_effect = false;
    }
    va_end(ap);
    if (all_in_effect) return NULL;
    snprintf(x->label, sizeof x->label, "%s", label);
    x->groups = groups;
    x->kind = kind;
    x->changes_training = kind == VK_TRAINING;
    v->n++;
    return x;
}

/* The first round: single changes that may lower the peak of any run (report.html's rows for a
 * run that fits, and the start of the search for one that does not). */
static void first_round(Variants *v) {
    const Plan *p = v->plan;
    char a[64], b[64], lbl[128], ga_s[32];
    knob(p->knobs, "training.grad_accum", ga_s, sizeof ga_s);
    int ga = atoi(ga_s) > 0 ? atoi(ga_s) : 1;
    add(v, G_CKPT, VK_SAME, "gradient checkpointing", "training.checkpointing=true", NULL);
    add(v, G_PREC, VK_TRAINING, "LoRA on frozen bf16 weights (r=8 on q, v): changes the training",
        "training.precision=lora_bf16", NULL);
    add(v, G_IMPL, VK_SAME, "fused AdamW (no foreach temporaries)", "training.optimizer_impl=fused", NULL);
    int mb = (int)p->samples_per_step;
    if (mb >= 2) {
        snprintf(a, sizeof a, "training.micro_batch=%d", mb / 2);
        snprintf(b, sizeof b, "training.grad_accum=%d", ga * 2);
        snprintf(lbl, sizeof lbl, "micro-batch %d accumulated %d times (instead of %d x %d)", mb / 2,
                 ga * 2, mb, ga);
        add(v, G_BATCH, VK_SAME, lbl, a, b, NULL);
    }
    if (!p->alloc.expandable_segments) {
        Cand *x = add(v, G_ALLOC, VK_ALLOCATOR, "expandable segments",
                      "allocator.conf=expandable_segments:True", NULL);
        /* the graph of a change of allocator settings alone is this plan's own when building it
         * read none (plan.lua watches): that change runs this graph, not a new build */
        if (x) x->alloc_only = !p->graph_reads_allocator;
    }
    if (p->gpus > 1) {
        add(v, G_STRAT, VK_SAME, "ZeRO-2 (shard gradients and optimizer state)", "training.strategy=zero2", NULL);
        add(v, G_STRAT, VK_SAME, "ZeRO-3 (shard parameters too)", "training.strategy=zero3", NULL);
        add(v, G_STRAT, VK_OFFLOAD, "ZeRO-3 with the optimizer state offloaded to the CPU",
            "training.strategy=zero3", "training.zero.offload_optimizer=cpu", NULL);
    }
    v->n1 = v->n;
}

/* The catalog's cards with more usable memory than the run's, smallest first, as further
 * changes of the GPU. A catalog that cannot be read adds none. */
static void larger_cards(Variants *v) {
    char *text = NULL, err[256];
    if (scenario_report_text("vrsim.gpus_report", "usable", false, &text, err, sizeof err)) return;
    double mine = -1;
    for (const char *l = text; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] ? 1 : 0)) {
        char key[64];
        double bytes;
        if (sscanf(l, "%63s %lf", key, &bytes) == 2 && strcmp(key, v->plan->dev.key) == 0) mine = bytes;
    }
    for (const char *l = text; mine > 0 && *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] ? 1 : 0)) {
        char key[64], set[96], lbl[128];
        double bytes;
        if (sscanf(l, "%63s %lf", key, &bytes) != 2 || bytes <= mine) continue;
        snprintf(set, sizeof set, "hardware.gpu=%s", key);
        snprintf(lbl, sizeof lbl, "a larger card: %s (%.1f GiB)", key, GIB(bytes));
        Cand *x = add(v, G_GPU, VK_LARGER_GPU, lbl, set, NULL);
        if (x) x->usable = bytes;
    }
    free(text);
}

/* The search's further single changes, for a run that does not fit. */
static void second_round(Variants *v) {
    const Plan *p = v->plan;
    char opt[32], strat[32], quant[32], prec[32], ga_s[32], a[64], b[64], lbl[128];
    knob(p->knobs, "training.optimizer", opt, sizeof opt);
    knob(p->knobs, "training.strategy", strat, sizeof strat);
    knob(p->knobs, "training.quant", quant, sizeof quant);
    knob(p->knobs, "training.precision", prec, sizeof prec);
    knob(p->knobs, "training.grad_accum", ga_s, sizeof ga_s);
    int ga = atoi(ga_s) > 0 ? atoi(ga_s) : 1;
    bool adam = strcmp(opt, "adamw") == 0 || strcmp(opt, "adam") == 0;
    add(v, G_CKPT, VK_SAME, "selective checkpointing (attention only)", "training.checkpointing=true",
        "training.checkpoint_scope=attention", NULL);
    if (adam) {
        add(v, G_IMPL, VK_SAME, "for-loop AdamW (one parameter at a time)", "training.optimizer_impl=forloop", NULL);
        add(v, G_OPT | G_IMPL, VK_SAME, "8-bit AdamW (bitsandbytes)", "training.optimizer=adamw8bit", NULL);
    }
    int mb = (int)p->samples_per_step;
    if (mb >= 4) {
        snprintf(a, sizeof a, "training.micro_batch=%d", mb / 4);
        snprintf(b, sizeof b, "training.grad_accum=%d", ga * 4);
        snprintf(lbl, sizeof lbl, "micro-batch %d accumulated %d times (instead of %d x %d)", mb / 4,
                 ga * 4, mb, ga);
        add(v, G_BATCH, VK_SAME, lbl, a, b, NULL);
    }
    if (p->gpus == 1 && strcmp(strat, "none") == 0) {
        add(v, G_STRAT, VK_OFFLOAD, "ZeRO-2 with the optimizer state offloaded to the CPU (1 GPU)",
            "training.strategy=zero2", "training.zero.offload_optimizer=cpu", NULL);
        add(v, G_STRAT, VK_OFFLOAD, "ZeRO-3 with the optimizer state offloaded to the CPU (1 GPU)",
            "training.strategy=zero3", "training.zero.offload_optimizer=cpu", NULL);
    }
    if (p->gpus > 1)
        add(v, G_STRAT, VK_SAME, "FSDP2 (shard parameters, gradients and optimizer state)",
            "training.strategy=fsdp2", NULL);
    for (int c = 2; c <= 8; c *= 2) {
        if (c <= p->gpus) continue;
        snprintf(a, sizeof a, "hardware.count=%d", c);
        snprintf(lbl, sizeof lbl, "FSDP2 over %d GPUs", c);
        add(v, G_STRAT, VK_MORE_GPUS_FSDP, lbl, "training.strategy=fsdp2", a, NULL);
        snprintf(lbl, sizeof lbl, "ZeRO-3 over %d GPUs", c);
        add(v, G_STRAT, VK_MORE_GPUS_ZERO, lbl, "training.strategy=zero3", a, NULL);
    }
    /* the fp32 model that from_config's build makes before .to(dtype) is gone when the model is
     * loaded as fine-tuning scripts load it, from_pretrained(torch_dtype=...) */
    add(v, G_BUILD, VK_SAME, "build in the training dtype (from_pretrained(torch_dtype=...))",
        "training.build=direct", NULL);
    larger_cards(v);
    if (strcmp(quant, "none") == 0 && strncmp(prec, "lora", 4) != 0)
        add(v, G_PREC, VK_TRAINING, "QLoRA: LoRA on 4-bit (nf4) base weights: changes the training",
            "training.precision=lora_bf16", "training.quant=nf4", NULL);
}

/* Whether change x did not fit, needs no more than the run (need: the run's, 0 unknown), and may
 * be paired: a change of the GPUs' number or use, or of the same GPUs' settings. One that leaves
 * the need as it was may still help in a pair: checkpointing cuts the activations of a run whose
 * peak is in the optimizer step, under its peak, and 8-bit AdamW then lowers that peak below the
 * activations' (the LLaMA-2-13B case of tests/test_doctor.sh). */
static bool pairable(const Cand *x, double need) {
    if (x->out.status || x->out.fits || x->changes_training) return false;
    if (x->groups & (G_GPU | G_ALLOC | G_PREC)) return false;
    return x->out.need_alloc > 0 && (need <= 0 || x->out.need_alloc <= need);
}

static int by_need(const void *a, const void *b) {
    const double *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Pairs of the changes so far that did not fit alone but helped, touching different settings:
 * the most promising (least needed by the two alone) first, MAX_PAIRS at most. */
static void pairs(Variants *v, double need) {
    int n = v->n;
    double (*pr)[3] = malloc(sizeof *pr * (size_t)(n * n + 1));
    if (!pr) return;
    int m = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (pairable(&v->c[i], need) && pairable(&v->c[j], need) &&
                !(v->c[i].groups & v->c[j].groups)) {
                pr[m][0] = v->c[i].out.need_alloc + v->c[j].out.need_alloc;
                pr[m][1] = i * n + j;
                m++;
            }
    qsort(pr, (size_t)m, sizeof *pr, by_need);
    for (int k = 0; k < m && k < MAX_PAIRS && v->n < MAX_CANDS; k++) {
        int i = (int)pr[k][1] / n, j = (int)pr[k][1] % n;
        const Cand *x = &v->c[i], *y = &v->c[j];
        Cand *z = &v->c[v->n];
        memset(z, 0, sizeof *z);
        char lx[sizeof x->label], ly[sizeof y->label];
        memcpy(lx, x->label, sizeof lx);
        memcpy(ly, y->label, sizeof ly);
        snprintf(z->label, sizeof z->label, "%.60s + %.60s", lx, ly);
        for (int s = 0; s < x->n_sets && z->n_sets < MAX_SETS; s++)
            memcpy(z->sets[z->n_sets++], x->sets[s], sizeof z->sets[0]);
        for (int s = 0; s < y->n_sets && z->n_sets < MAX_SETS; s++)
            memcpy(z->sets[z->n_sets++], y->sets[s], sizeof z->sets[0]);
        z->groups = x->groups | y->groups;
        z->kind = x->kind == VK_MORE_GPUS_FSDP || y->kind == VK_MORE_GPUS_FSDP ? VK_MORE_GPUS_FSDP
                : x->kind == VK_MORE_GPUS_ZERO || y->kind == VK_MORE_GPUS_ZERO ? VK_MORE_GPUS_ZERO
                : x->kind == VK_OFFLOAD || y->kind == VK_OFFLOAD ? VK_OFFLOAD : VK_SAME;
        v->n++;
    }
    free(pr);
}

/* ---- simulating them ------------------------------------------------------------------------- */

/* The runner and the scenario's source, made once in the process that simulates. */
static bool have_runner(Variants *v) {
    if (v->runner && v->src) return true;
    if (v->runner_st) return false;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", v->path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    v->runner_st = points_new(dir, v->unsafe, 0, &v->runner, v->runner_err, sizeof v->runner_err);
    if (!v->runner_st) {
        /* children keep their graphs: the larger cards differ in the GPU only, one graph answers
         * them all; a change that does not fit also says what it needs, for the pairs */
        points_set_reuse(v->runner, true);
        points_set_need(v->runner, true);
        v->src = points_read_scenario(v->path, v->runner_err, sizeof v->runner_err);
        if (!v->src) v->runner_st = VR_EINVAL;
    }
    return !v->runner_st;
}

/* Simulates candidates [lo, hi) into their out: the run's overrides and each change's, as a
 * batch of the worker pool, as many at a time as there are CPUs; a change of allocator settings
 * alone on the run's graph, here. */
static void simulate(Variants *v, int lo, int hi) {
    if (hi <= lo) return;
    if (!have_runner(v)) {
        for (int i = lo; i < hi; i++) {
            memset(&v->c[i].out, 0, sizeof v->c[i].out);
            v->c[i].out.status = v->runner_st;
            snprintf(v->c[i].out.err, sizeof v->c[i].out.err, "%s", v->runner_err);
        }
        return;
    }
    int n = hi - lo, per = v->n_base + MAX_SETS;
    PointJob *jobs = calloc((size_t)n, sizeof *jobs);
    const char **all = calloc((size_t)n * (size_t)per, sizeof *all);
    int *at = calloc((size_t)n, sizeof *at);
    if (!jobs || !all || !at) {
        for (int i = lo; i < hi; i++) {
            memset(&v->c[i].out, 0, sizeof v->c[i].out);
            v->c[i].out.status = VR_ENOMEM;
            snprintf(v->c[i].out.err, sizeof v->c[i].out.err, "out of host memory");
        }
        free(jobs); free(all); free(at);
        return;
    }
    int m = 0;
    for (int i = lo; i < hi; i++) {
        Cand *x = &v->c[i];
        if (x->alloc_only) {
            /* its settings are what plan.lua's read_alloc makes of the --set (the conf given
             * replaces the run's; kind and capacity come from elsewhere) */
            const Plan *p = v->plan;
            AllocConfig ac;
            alloc_config_default(&ac);
            memset(&x->out, 0, sizeof x->out);
            const char *conf = strchr(x->sets[0], '=') + 1;
            if (alloc_config_parse(&ac, conf, x->out.err, sizeof x->out.err)) {
                x->out.status = VR_EINVAL;
            } else {
                ac.kind = p->alloc.kind;
                ac.capacity = p->alloc.capacity;
                ac.fraction_set = p->alloc.fraction_set;
                points_simulate_plan(p, &ac, &x->out);
                x->out.gpus = p->gpus;
            }
            continue;
        }
        const char **js = all + (size_t)m * (size_t)per;
        int k = 0;
        for (int s = 0; s < v->n_base; s++) js[k++] = v->base_sets[s];
        for (int s = 0; s < x->n_sets; s++) js[k++] = x->sets[s];
        jobs[m] = (PointJob){.sets = js, .n_sets = k, .simulate = true};
        at[m++] = i;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    points_run_batch(v->runner, v->path, v->src, jobs, m, ncpu > 0 ? (int)ncpu : 1);
    for (int k = 0; k < m; k++) v->c[at[k]].out = jobs[k].out;
    free(jobs);
    free(all);
    free(at);
}

/* The search that follows the first round for a run that does not fit: the further single
 * changes, then the pairs of those that helped. */
static void search(Variants *v, double need) {
    int from = v->n;
    second_round(v);
    simulate(v, from, v->n);
    from = v->n;
    pairs(v, need);
    simulate(v, from, v->n);
}

/* ---- the helper process ------------------------------------------------------------------------ */

/* The helper: the first round, its answers down the pipe; then, when ordered, the search and
 * its candidates whole. */
static void helper(Variants *v, int res_fd, int cmd_fd) {
    simulate(v, 0, v->n1);
    bool ok = true;
    for (int i = 0; i < v->n1 && ok; i++) ok = vr_write_all(res_fd, &v->c[i].out, sizeof v->c[i].out);
    Order o;
    if (ok && vr_read_all(cmd_fd, &o, sizeof o) && o.go) {
        search(v, o.need);
        int more = v->n - v->n1;
        ok = vr_write_all(res_fd, &more, sizeof more);
        for (int i = v->n1; i < v->n && ok; i++) ok = vr_write_all(res_fd, &v->c[i], sizeof v->c[i]);
    }
    points_free(v->runner);
    _exit(ok ? 0 : 1);
}

VrStatus variants_start(const char *path, const ScenarioOptions *base, const Plan *p,
                        Variants **out) {
    *out = NULL;
    Variants *v = calloc(1, sizeof *v);
    if (!v || !(v->c = calloc(MAX_CANDS, sizeof *v->c)) || !(v->path = strdup(path))) {
        if (v) free(v->c);
        free(v);
        return VR_ENOMEM;
    }
    v->plan = p;
    v->base_sets = base->sets;
    v->n_base = base->n_sets;
    v->unsafe = base->unsafe;
    v->pid = -1;
    v->res_fd = v->cmd_fd = -1;
    first_round(v);
    /* a helper simulates them while the caller goes on; where it cannot be made, they are
     * simulated in variants_finish */
    int rf[2], cf[2];
    if (pipe(rf) == 0) {
        if (pipe(cf) == 0) {
            fflush(NULL); /* the helper must not write the caller's buffered output again */
            pid_t pid = fork();
            if (pid == 0) {
                close(rf[0]);
                close(cf[1]);
                signal(SIGPIPE, SIG_IGN);
                helper(v, rf[1], cf[0]);
            }
            if (pid > 0) {
                close(rf[1]);
                close(cf[0]);
                v->pid = pid;
                v->res_fd = rf[0];
                v->cmd_fd = cf[1];
            } else {
                close(cf[0]); close(cf[1]); close(rf[0]); close(rf[1]);
            }
        } else {
            close(rf[0]); close(rf[1]);
        }
    }
    *out = v;
    return VR_OK;
}

/* Ends the helper (killed first when kill_it) and closes its pipes. */
static void end_helper(Variants *v, bool kill_it) {
    if (v->pid < 0) return;
    close(v->res_fd);
    close(v->cmd_fd);
    if (kill_it) kill(v->pid, SIGKILL);
    int ws;
    while (waitpid(v->pid, &ws, 0) < 0 && errno == EINTR) {}
    v->pid = -1;
    v->res_fd = v->cmd_fd = -1;
}

void variants_cancel(Variants *v) {
    if (!v) return;
    end_helper(v, true);
    points_free(v->runner);
    free(v->src);
    free(v->path);
    free(v->c);
    free(v);
}

/* Reads n bytes from fd into buf; false at the pipe's end. */
static bool read_n(int fd, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        got += (size_t)k;
    }
    return true;
}

/* The first round's answers (and, with o.go, the search's candidates) from the helper or, without
 * one, simulated here. false when the helper's answers did not all come. */
static bool gather(Variants *v, Order o) {
    if (v->pid < 0) {
        simulate(v, 0, v->n1);
        if (o.go) search(v, o.need);
        return true;
    }
    bool ok = true;
    for (int i = 0; i < v->n1 && ok; i++) ok = read_n(v->res_fd, &v->c[i].out, sizeof v->c[i].out);
    if (ok) {
        /* a helper that died leaves a closed pipe: no SIGPIPE for the order */
        void (*old)(int) = signal(SIGPIPE, SIG_IGN);
        ok = vr_write_all(v->cmd_fd, &o, sizeof o);
        signal(SIGPIPE, old);
    }
    if (ok && o.go) {
        int more = 0;
        ok = read_n(v->res_fd, &more, sizeof more) && more >= 0 && v->n1 + more <= MAX_CANDS;
        for (int i = 0; ok && i < more; i++) ok = read_n(v->res_fd, &v->c[v->n1 + i], sizeof v->c[0]);
        if (ok) v->n = v->n1 + more;
    }
    end_helper(v, !ok);
    return ok;
}

/* The row of candidate x. */
static ReportVariant row(const Cand *x) {
    ReportVariant r;
    memset(&r, 0, sizeof r);
    snprintf(r.label, sizeof r.label, "%s", x->label);
    size_t len = 0;
    for (int s = 0; s < x->n_sets; s++)
        len += (size_t)snprintf(r.set + len, len < sizeof r.set ? sizeof r.set - len : 0, "%s%s",
                                s ? " " : "", x->sets[s]);
    r.fits = x->out.fits;
    r.peak_reserved = x->out.has_step ? x->out.peak_res : 0;
    r.step_ms = x->out.has_step ? x->out.time_ns / 1e6 : 0;
    r.gpus = x->out.gpus;
    r.kind = (int)x->kind;
    r.changes_training = x->changes_training;
    return r;
}

/* Ranking of a search's fits: the training unchanged first, then fewer GPUs, then an allocator
 * setting, then step time. */
static int by_rank(const void *a, const void *b) {
    const ReportVariant *x = a, *y = b;
    if (x->changes_training != y->changes_training) return x->changes_training ? 1 : -1;
    if (x->gpus != y->gpus) return x->gpus < y->gpus ? -1 : 1;
    if ((x->kind == VK_ALLOCATOR) != (y->kind == VK_ALLOCATOR)) return x->kind == VK_ALLOCATOR ? -1 : 1;
    if (x->step_ms != y->step_ms) return x->step_ms < y->step_ms ? -1 : 1;
    return strcmp(x->set, y->set);
}

VrStatus variants_finish(Variants *v, const SimResult *r, double need, ReportVariant **out,
                         int *n_out) {
    *out = NULL;
    *n_out = 0;
    bool base_fits = report_fits(r);
    Order o = {.go = !base_fits, .need = need};
    bool whole = gather(v, o);
    ReportVariant *rows = calloc((size_t)v->n + 1, sizeof *rows);
    if (!rows) { variants_cancel(v); return VR_ENOMEM; }
    const StepResult *s0 = report_step(r);
    int kept = 0;
    bool nomem = false, card_kept = false;
    for (int i = 0; i < v->n; i++) {
        const Cand *x = &v->c[i];
        if (!whole || x->out.status) {
            /* a change this scenario cannot take (a model without LoRA, ...) is left out */
            nomem = nomem || (whole && x->out.status == VR_ENOMEM);
            continue;
        }
        if (!x->out.fits) continue;
        /* for a run that fits, a change helps if it holds less; the same figures mean the
         * scenario already had it */
        if (base_fits && s0 && !(x->out.has_step && x->out.peak_res < (double)s0->peak_reserved))
            continue;
        /* of the larger cards, the smallest that fits (they come smallest first) */
        if (x->kind == VK_LARGER_GPU) {
            if (card_kept) continue;
            card_kept = true;
        }
        rows[kept++] = row(x);
    }
    variants_cancel(v);
    if (nomem) { free(rows); return VR_ENOMEM; }
    if (base_fits) {
        /* most memory saved first */
        for (int i = 1; i < kept; i++)
            for (int j = i; j > 0 && rows[j].peak_reserved < rows[j - 1].peak_reserved; j--) {
                ReportVariant t = rows[j - 1]; rows[j - 1] = rows[j]; rows[j] = t;
            }
    } else {
        qsort(rows, (size_t)kept, sizeof *rows, by_rank);
    }
    *out = rows;
    *n_out = kept;
    return VR_OK;
}

/* Which of the n ranked rows to print: of each kind the first (the fastest of the fewest GPUs)
 * and the one that leaves the most memory free on as many GPUs (or, where that is the first, the
 * next); at most max in all, in rank order. */
static void pick(const ReportVariant *v, int n, int max, bool *show) {
    int first[VK_COUNT], shown = 0;
    for (int k = 0; k < VK_COUNT; k++) first[k] = -1;
    for (int i = 0; i < n; i++) {
        show[i] = false;
        int k = v[i].kind >= 0 && v[i].kind < VK_COUNT ? v[i].kind : VK_SAME;
        if (first[k] < 0) first[k] = i;
    }
    for (int k = 0; k < VK_COUNT; k++) {
        int f = first[k], roomiest = -1, next = -1;
        if (f < 0) continue;
        show[f] = true;
        for (int i = f + 1; i < n; i++) {
            if (v[i].kind != k) continue;
            if (next < 0) next = i;
            if (v[i].gpus == v[f].gpus && v[i].peak_reserved < v[f].peak_reserved &&
                (roomiest < 0 || v[i].peak_reserved < v[roomiest].peak_reserved))
                roomiest = i;
        }
        if (roomiest >= 0) show[roomiest] = true;
        else if (next >= 0) show[next] = true;
    }
    for (int i = 0; i < n; i++) {
        if (show[i] && shown >= max) show[i] = false;
        if (show[i]) shown++;
    }
}

void variants_print(FILE *f, const ReportVariant *v, int n, int max, bool run_fits) {
    fprintf(f, "\nwhat would %s (each simulated):\n", run_fits ? "lower the peak" : "help");
    if (n == 0 && run_fits) {
        fprintf(f, "  none of the changes tried lowers the peak\n");
        return;
    }
    if (n == 0) {
        fprintf(f, "  none of the changes tried fits (checkpointing, optimizers, micro-batch with\n"
                   "  accumulation, offload, sharding over more GPUs, larger cards, LoRA/QLoRA)\n");
        return;
    }
    bool *show = calloc((size_t)n, sizeof *show);
    if (!show) return;
    pick(v, n, max, show);
    int shown = 0;
    for (int i = 0; i < n; i++) {
        if (!show[i]) continue;
        const ReportVariant *x = &v[i];
        shown++;
        fprintf(f, "  %s\n", x->label);
        fprintf(f, "      %s: peak reserved %.2f GiB, step %.1f ms", x->fits ? "fits" : "does not fit",
                GIB(x->peak_reserved), x->step_ms);
        if (x->gpus > 1) fprintf(f, " on each of %d GPUs", x->gpus);
        fprintf(f, "\n      ");
        for (const char *s = x->set; *s;) {
            size_t len = strcspn(s, " ");
            fprintf(f, "--set %.*s%s", (int)len, s, s[len] ? " " : "");
            s += len;
            while (*s == ' ') s++;
        }
        fprintf(f, "\n");
    }
    free(show);
    if (shown < n) fprintf(f, "  (and %d more that %s)\n", n - shown, run_fits ? "lower it" : "fit");
}
