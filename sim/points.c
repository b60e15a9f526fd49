/* points.c: simulation points in forked children of a loaded Lua state (see points.h). */
#define _GNU_SOURCE /* close_range */
#include "points.h"
#include "infile.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "report.h"
#include "scenario.h"

/* idle children kept with their graphs, for each child a batch runs at once: one per architecture
 * class (lua/vrsim/nn.lua nn.arch_class), as points of one group differ in the GPU; each holds a
 * Lua state and a graph, some tens of MB */
enum { IDLE_PER_CHILD = 3 };

/* A child process running points: its answer pipe (read end), and with reuse its job pipe (write
 * end); how much of the running job's PointOut came; NULL job: idle, keeping its graph. */
typedef struct Child {
    pid_t pid;
    int fd;
    int task_fd;               /* -1 without reuse */
    size_t got;
    double deadline;           /* vr_now_s() past which it is killed; 0: none */
    PointJob *job;
    char **base;               /* with reuse: the sets of the job it loaded first (owned) */
    int n_base;
} Child;

struct PointRunner {
    ScenarioState *state;      /* owned; never used here, only in forked copies */
    char *dir;                 /* owned, or NULL */
    bool unsafe;
    double timeout_s;          /* <= 0: none */
    bool reuse;                /* children stay after a point, keeping its graph (points_set_reuse) */
    bool need;                 /* points that do not fit also give need_alloc (points_set_need) */
    Child *idle;               /* those children, waiting for a point, least recently used first: */
    int max_idle, cap_idle;    /* IDLE_PER_CHILD for each child a batch runs at once, at most */
    int n_idle;
    char *idle_src;            /* the scenario they loaded: chunkname, a NUL, then its source */
    size_t idle_src_len;
};

VrStatus points_new(const char *dir, bool unsafe, double timeout_s, PointRunner **out, char *err,
                    size_t errlen) {
    *out = NULL;
    PointRunner *r = calloc(1, sizeof *r);
    if (!r || (dir && !(r->dir = strdup(dir)))) {
        free(r);
        snprintf(err, errlen, "out of host memory");
        return VR_ENOMEM;
    }
    r->unsafe = unsafe;
    r->timeout_s = timeout_s;
    ScenarioOptions opts = {.unsafe = unsafe};
    VrStatus st = scenario_state_new(&opts, dir, &r->state, err, errlen);
    if (st) { points_free(r); return st; }
    *out = r;
    return VR_OK;
}

/* Ends child c (killed first when kill_it) and returns its wait status. */
static int end_child(Child *c, bool kill_it) {
    for (int i = 0; i < c->n_base; i++) free(c->base[i]);
    free(c->base);
    c->base = NULL;
    c->n_base = 0;
    close(c->fd);
    if (c->task_fd >= 0) close(c->task_fd);
    if (kill_it) kill(c->pid, SIGKILL);
    int ws = 0;
    while (waitpid(c->pid, &ws, 0) < 0 && errno == EINTR) {}
    return ws;
}

/* Ends every idle child: a closed job pipe makes it exit. */
static void drop_idle(PointRunner *r) {
    for (int i = 0; i < r->n_idle; i++) end_child(&r->idle[i], false);
    r->n_idle = 0;
    free(r->idle_src);
    r->idle_src = NULL;
}

void points_set_reuse(PointRunner *r, bool reuse) {
    if (!reuse) drop_idle(r);
    r->reuse = reuse;
}

void points_set_need(PointRunner *r, bool need) { r->need = need; }

void points_free(PointRunner *r) {
    if (!r) return;
    drop_idle(r);
    free(r->idle);
    scenario_state_free(r->state);
    free(r->dir);
    free(r);
}

/* Runs plan's graph through an allocator made from acfg, without a timeline or the live set at
 * the peak (no caller of points prints them), into out's step fields; returns the engine's
 * status (the message in out->err). */
static VrStatus simulate_plan(const Plan *plan, const AllocConfig *acfg, bool need, PointOut *out) {
    if (plan->pp) {
        /* a plan is one pipeline rank: the others and the step come from sim/cmd_pipeline.c */
        snprintf(out->err, sizeof out->err, "pipeline parallelism (training.parallel.pp > 1) is "
                 "simulated by vrsim SCENARIO only: this command runs one plan, one rank");
        return VR_EINVAL;
    }
    EngineConfig ec;
    SimResult *res = NULL;
    plan_engine_config(plan, false, &ec);
    ec.skip_live_at_peak = true;
    VrStatus st = engine_run(plan->graph, &ec, acfg, &res, out->err, sizeof out->err);
    if (!st && need && !report_fits(res)) {
        /* the same graph, no limit, no fragmentation: the most it holds at once */
        AllocConfig ideal = *acfg;
        ideal.kind = ALLOC_IDEAL;
        ideal.capacity = 0;
        SimResult *ir = NULL;
        char ierr[256];
        if (engine_run(plan->graph, &ec, &ideal, &ir, ierr, sizeof ierr) == VR_OK) {
            out->need_alloc = (double)ir->build_allocated;
            for (int i = 0; i < ir->n_steps; i++)
                if ((double)ir->steps[i].peak_allocated > out->need_alloc)
                    out->need_alloc = (double)ir->steps[i].peak_allocated;
        }
        engine_result_free(ir); /* without it, need_alloc stays 0: unknown */
    }
    if (st == VR_ENOMEM) snprintf(out->err, sizeof out->err, "out of host memory");
    if (!st) {
        const StepResult *sr = report_step(res);
        out->fits = report_fits(res);
        if (sr) {
            out->has_step = true;
            out->peak_alloc = (double)sr->peak_allocated;
            /* the reserve the verdict is of: the worst step's, as the run's FITS line gives it
             * (step 0 may reserve more than the steady steps) */
            int w = report_worst_step(res);
            out->peak_res = (double)(w >= 0 ? res->steps[w].peak_reserved : sr->peak_reserved);
            out->time_ns = sr->time_ns;
        }
    }
    engine_result_free(res);
    return st;
}

/* out's plan fields, from a loaded plan, and then its step fields when simulate. */
static VrStatus answer(const Plan *plan, bool simulate, bool need, PointOut *out) {
    snprintf(out->strategy, sizeof out->strategy, "%s", plan->strategy);
    snprintf(out->dev_name, sizeof out->dev_name, "%s", plan->dev.name);
    snprintf(out->title, sizeof out->title, "%s", plan->title);
    out->capacity = (double)plan->alloc.capacity;
    out->tokens_per_step = plan->tokens_per_step;
    out->samples_per_step = plan->samples_per_step;
    out->gpus = plan->gpus;
    return simulate ? simulate_plan(plan, &plan->alloc, need, out) : VR_OK;
}

/* The point itself: load (in state, or a fresh one when state is NULL) and simulate. */
static void simulate_point(ScenarioState *state, const char *dir, bool unsafe, bool need,
                           const char *chunkname, const char *src, const char *const *sets,
                           int n_sets, bool simulate, PointOut *out) {
    ScenarioOptions opts = {.sets = sets, .n_sets = n_sets, .unsafe = unsafe};
    Plan *plan = NULL;
    VrStatus st = state ? scenario_load_source_in(state, chunkname, src, &opts, &plan, out->err,
                                                  sizeof out->err)
                        : scenario_load_source(chunkname, src, dir, &opts, &plan, out->err,
                                               sizeof out->err);
    if (!st) st = answer(plan, simulate, need, out);
    out->status = st;
    plan_free(plan);
}

void points_simulate_plan(const Plan *plan, const AllocConfig *acfg, PointOut *out) {
    out->status = simulate_plan(plan, acfg, false, out);
}

/* ---- children that keep their graph (reuse) -------------------------------------------------
 * A job goes down the pipe as: simulate (int), n_sets (int), anew (int: load the point as a
 * fresh child would, dropping the graph kept), then each set as its length (int) and its bytes. */

static bool send_job(int fd, const PointJob *j, bool anew) {
    int head[3] = {j->simulate, j->n_sets, anew};
    if (!vr_write_all(fd, head, sizeof head)) return false;
    for (int i = 0; i < j->n_sets; i++) {
        int len = (int)strlen(j->sets[i]);
        if (!vr_write_all(fd, &len, sizeof len) || !vr_write_all(fd, j->sets[i], (size_t)len))
            return false;
    }
    return true;
}

/* The next job from fd into a new array of sets (the caller frees each and the array); false at
 * the pipe's end or on host memory. */
static bool recv_job(int fd, char ***sets, int *n_sets, bool *simulate, bool *anew) {
    int head[3];
    if (!vr_read_all(fd, head, sizeof head) || head[1] < 0 || head[1] > 100000) return false;
    char **v = calloc((size_t)head[1] + 1, sizeof *v);
    if (!v) return false;
    for (int i = 0; i < head[1]; i++) {
        int len;
        if (!vr_read_all(fd, &len, sizeof len) || len < 0 || !(v[i] = malloc((size_t)len + 1)) ||
            !vr_read_all(fd, v[i], (size_t)len)) {
            for (int k = 0; k <= i; k++) free(v[k]);
            free(v);
            return false;
        }
        v[i][len] = 0;
    }
    *sets = v;
    *n_sets = head[1];
    *simulate = head[0] != 0;
    *anew = head[2] != 0;
    return true;
}

/* A child with reuse: loads its first job as a fresh state would and answers it; then, while the
 * runner sends jobs, answers each with that job's plan made on the first one's graph (plan.lua
 * P.rebuild). A job it cannot answer that way it answers `stale`: the runner gives it to another
 * child, or a fresh one, so every answer is the fresh one. Where the graph differs it stays for
 * the next job; where anything else failed it exits. A job sent `anew` it loads as its first:
 * the graph it kept is dropped, and the load makes everything again in the state as it stands,
 * in which vrsim's modules keep nothing of an earlier load but caches of what they read once
 * (the GPU's joined profile rows, lua/vrsim/hardware.lua; P.build lets go of the last build before
 * it makes the next), so its answer is the fresh child's too. It reuses the pages the state and
 * the graph it dropped had, where a fresh child faults every page it writes in (docs/speed.md). */
static void reuse_child(PointRunner *r, const char *chunkname, const char *src, const PointJob *j,
                        int res_fd, int task_fd) {
    PointOut o;
    Plan *base = NULL;
    char **sets = NULL;
    int n_sets = j->n_sets;
    bool sim = j->simulate, anew = true;
    for (;;) {
        memset(&o, 0, sizeof o);
        ScenarioOptions opts = {.sets = sets ? (const char *const *)sets : j->sets,
                                .n_sets = n_sets, .unsafe = r->unsafe};
        if (anew) {
            plan_free(base);
            base = NULL;
            o.status = scenario_load_source_kept(r->state, chunkname, src, NULL, &opts, &base,
                                                 o.err, sizeof o.err);
            if (!o.status) o.status = answer(base, sim, r->need, &o);
            o.idle = o.status == VR_OK;
        } else {
            Plan *p = NULL;
            VrStatus st = scenario_load_source_kept(r->state, chunkname, src, base, &opts, &p,
                                                    o.err, sizeof o.err);
            if (!st) st = answer(p, sim, r->need, &o);
            plan_free(p);
            if (st) {
                memset(&o, 0, sizeof o);
                o.stale = true;
            }
            o.status = st;
            o.idle = !st || st == VR_ENOTSUP; /* another point may still share the graph */
        }
        if (sets) {
            for (int i = 0; i < n_sets; i++) free(sets[i]);
            free(sets);
            sets = NULL;
        }
        if (!vr_write_all(res_fd, &o, sizeof o) || !o.idle) _exit(0);
        if (!recv_job(task_fd, &sets, &n_sets, &sim, &anew)) _exit(0);
    }
}

/* ---- batches -------------------------------------------------------------------------------- */

/* The job's answer once its child is done (ws its wait status): kept when whole, else why not. */
static void finish(const PointRunner *r, Child *c, bool timed_out, int ws) {
    PointOut *out = &c->job->out;
    if (c->got == sizeof *out && !timed_out) return;
    memset(out, 0, sizeof *out);
    out->status = VR_EIO;
    if (timed_out) {
        out->timed_out = true;
        snprintf(out->err, sizeof out->err, "timed out: still running after %g s (--point-timeout)",
                 r->timeout_s);
    } else if (WIFSIGNALED(ws)) {
        snprintf(out->err, sizeof out->err, "the simulation died on signal %d (%s)", WTERMSIG(ws),
                 strsignal(WTERMSIG(ws)));
    } else {
        snprintf(out->err, sizeof out->err, "the simulation ended without an answer (exit %d)",
                 WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    }
}

/* Makes the sets of job j those child c loaded its graph with (may_share compares them). */
static void set_base(Child *c, const PointJob *j) {
    for (int i = 0; i < c->n_base; i++) free(c->base[i]);
    free(c->base);
    c->n_base = 0;
    if ((c->base = calloc((size_t)j->n_sets + 1, sizeof(char *)))) {
        for (int i = 0; i < j->n_sets && (c->base[i] = strdup(j->sets[i])); i++) c->n_base = i + 1;
        if (c->n_base < j->n_sets) c->n_base = -1; /* no host memory: matches no job */
    } else {
        c->n_base = -1;
    }
}

/* Forks the child of job j into *c; false (and the job run here, in a fresh state) when no
 * child can be made. With reuse the child keeps only its own pipes (the runner's other pipes held
 * open in it would hide their end from the children at their other ends). */
static bool start(PointRunner *r, const char *chunkname, const char *src, PointJob *j, Child *c) {
    int fd[2], tfd[2] = {-1, -1};
    pid_t pid = -1;
    if (pipe(fd) == 0) {
        if (r->reuse && pipe(tfd) != 0) {
            close(fd[0]);
            close(fd[1]);
        } else {
            fflush(NULL); /* the child must not write the parent's buffered output again */
            pid = fork();
            if (pid < 0) {
                close(fd[0]); close(fd[1]);
                if (tfd[0] >= 0) close(tfd[0]), close(tfd[1]);
            }
        }
    }
    if (pid < 0) { /* no child: this process, a fresh state */
        simulate_point(NULL, r->dir, r->unsafe, r->need, chunkname, src, j->sets, j->n_sets,
                       j->simulate, &j->out);
        return false;
    }
    if (pid == 0) {
        close(fd[0]);
        signal(SIGPIPE, SIG_IGN);
        if (r->reuse) {
            close(tfd[1]);
            int lo = fd[1] < tfd[0] ? fd[1] : tfd[0], hi = fd[1] < tfd[0] ? tfd[0] : fd[1];
            close_range(3, (unsigned)lo - 1, 0);
            close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
            close_range((unsigned)hi + 1, ~0U, 0);
            reuse_child(r, chunkname, src, j, fd[1], tfd[0]);
        }
        PointOut o;
        memset(&o, 0, sizeof o);
        simulate_point(r->state, r->dir, r->unsafe, r->need, chunkname, src, j->sets, j->n_sets,
                       j->simulate, &o);
        _exit(vr_write_all(fd[1], &o, sizeof o) ? 0 : 1);
    }
    close(fd[1]);
    if (tfd[0] >= 0) close(tfd[0]);
    *c = (Child){.pid = pid, .fd = fd[0], .task_fd = tfd[1], .job = j,
                 .deadline = r->timeout_s > 0 ? vr_now_s() + r->timeout_s : 0};
    if (r->reuse) set_base(c, j);
    return true;
}

/* Whether a child that loaded a job with the sets base may have the graph of job j: the same
 * sets but for the hardware and allocator sections' (the GPU, the capacity), which graphs mostly
 * do not read. Only a filter, to spare children that surely differ the try: the child itself
 * decides (lua/vrsim/plan.lua P.rebuild). */
static bool may_share(char *const *base, int n_base, const PointJob *j) {
    static const char *const bare[] = {"gpu", "capacity_gib", "capacity_mib", "memory_fraction"};
    if (n_base != j->n_sets) return false;
    for (int i = 0; i < n_base; i++) {
        const char *a = base[i], *b = j->sets[i];
        if (strcmp(a, b) == 0) continue;
        size_t ka = strcspn(a, "="), kb = strcspn(b, "=");
        if (ka != kb || strncmp(a, b, ka) != 0) return false;
        bool ok = strncmp(a, "hardware.", 9) == 0 || strncmp(a, "allocator.", 10) == 0;
        for (size_t k = 0; !ok && k < sizeof bare / sizeof bare[0]; k++)
            ok = strlen(bare[k]) == ka && strncmp(a, bare[k], ka) == 0;
        if (!ok) return false;
    }
    return true;
}

/* Whether pid is among the n pids of tried (the children a job has tried). */
static bool was_tried(const pid_t *tried, int n, pid_t pid) {
    for (int k = 0; k < n; k++)
        if (tried[k] == pid) return true;
    return false;
}

/* The idle child most recently used that may have job j's graph and that j has not tried
 * (tried: the pids of those it has, n of them), or -1. */
static int idle_for(const PointRunner *r, const PointJob *j, const pid_t *tried, int n) {
    for (int i = r->n_idle - 1; i >= 0; i--)
        if (!was_tried(tried, n, r->idle[i].pid) && may_share(r->idle[i].base, r->idle[i].n_base, j))
            return i;
    return -1;
}

/* The idle child to make a new graph in, with every place for one taken: the most recently used
 * that the job has not tried (tried: the pids of those it has, n of them), whose pages are the
 * likeliest to be in the processor's caches still (a sweep's points of one graph come together,
 * so the next point seldom needs the graph it drops: docs/speed.md); one that answered the job
 * `stale` keeps its graph, which the job's group may need again (a GPU of the other attention
 * kernel). With every one tried, the least recently used. */
static int recycle(const PointRunner *r, const pid_t *tried, int n) {
    for (int i = r->n_idle - 1; i >= 0; i--)
        if (!was_tried(tried, n, r->idle[i].pid)) return i;
    return 0;
}

/* Gives job j to idle child i into *c, to answer on its graph or, anew, on a graph of its own;
 * false (the child ended) when it cannot take it. */
static bool resume(PointRunner *r, int i, PointJob *j, Child *c, bool anew) {
    *c = r->idle[i];
    memmove(&r->idle[i], &r->idle[i + 1], sizeof(Child) * (size_t)(r->n_idle - i - 1));
    r->n_idle--;
    if (send_job(c->task_fd, j, anew)) {
        if (anew) set_base(c, j);
        c->job = j;
        c->got = 0;
        c->deadline = r->timeout_s > 0 ? vr_now_s() + r->timeout_s : 0;
        return true;
    }
    end_child(c, false);
    return false;
}

/* Keeps child c idle (the most recently used), ending the least recently used beyond max_idle. */
static void keep_idle(PointRunner *r, Child *c) {
    while (r->n_idle > 0 && r->n_idle >= r->max_idle) {
        end_child(&r->idle[0], false);
        memmove(&r->idle[0], &r->idle[1], sizeof(Child) * (size_t)(r->n_idle - 1));
        r->n_idle--;
    }
    if (r->max_idle < 1) { /* no place to keep it */
        end_child(c, false);
        return;
    }
    c->job = NULL;
    r->idle[r->n_idle++] = *c;
}

/* Ends child c: reaps it (killed first when timed_out) and fills its job's answer. */
static void reap(const PointRunner *r, Child *c, bool timed_out) {
    finish(r, c, timed_out, end_child(c, timed_out));
}

/* With reuse, idle children belong to the scenario they loaded: another one ends them. */
static void keep_idle_for(PointRunner *r, const char *chunkname, const char *src) {
    size_t a = strlen(chunkname), b = strlen(src);
    if (r->idle_src && r->idle_src_len == a + 1 + b && memcmp(r->idle_src, chunkname, a + 1) == 0 &&
        memcmp(r->idle_src + a + 1, src, b) == 0)
        return;
    drop_idle(r);
    if ((r->idle_src = malloc(a + b + 2))) {
        memcpy(r->idle_src, chunkname, a + 1);
        memcpy(r->idle_src + a + 1, src, b + 1);
        r->idle_src_len = a + 1 + b;
    }
}

/* Makes room for IDLE_PER_CHILD idle children for each of the max_children a batch runs at once
 * (each keeps the graphs its points need: a sweep's points of one group differ in the GPU, whose
 * attention kernel may need another graph); fewer, never none, without the host memory. */
static void idle_places(PointRunner *r, int max_children) {
    int want = IDLE_PER_CHILD * max_children;
    if (want > r->cap_idle) {
        Child *p = realloc(r->idle, sizeof *p * (size_t)want);
        if (p) r->idle = p, r->cap_idle = want;
        else if (!r->idle && (r->idle = malloc(sizeof *r->idle * IDLE_PER_CHILD))) r->cap_idle = IDLE_PER_CHILD;
    }
    r->max_idle = want < r->cap_idle ? want : r->cap_idle;
}

/* A job's answer is in: told to the feed (the job's memory is the feed's again). */
static void answered(const PointFeed *feed, PointJob *j) {
    if (feed->done) feed->done(feed->ud, j);
}

void points_run_feed(PointRunner *r, const char *chunkname, const char *src, const PointFeed *feed,
                     int max_children) {
    if (max_children < 1) max_children = 1;
    if (max_children > POINTS_MAX_CHILDREN) max_children = POINTS_MAX_CHILDREN;
    Child *ch = malloc(sizeof *ch * (size_t)max_children);
    struct pollfd *pf = malloc(sizeof *pf * (size_t)max_children);
    /* jobs an idle child answered `stale`, to start again before any new one, for the children
     * they have not tried (the idle ones, then a fresh one): each was running, so there are never
     * more than max_children */
    PointJob **again = malloc(sizeof *again * (size_t)max_children);
    if (!ch || !pf || !again) {
        free(ch);
        free(pf);
        free(again);
        for (PointJob *j; (j = feed->next(feed->ud));) {
            memset(&j->out, 0, sizeof j->out);
            j->out.status = VR_ENOMEM;
            snprintf(j->out.err, sizeof j->out.err, "out of host memory");
            answered(feed, j);
        }
        return;
    }
    if (r->reuse) keep_idle_for(r, chunkname, src);
    if (r->reuse && !r->idle_src) points_set_reuse(r, false); /* no host memory: no reuse */
    if (r->reuse) idle_places(r, max_children);
    int n_again = 0, live = 0;
    bool fed_all = false;
    for (;;) {
        while (live < max_children) {
            PointJob *j = n_again > 0 ? again[--n_again] : NULL;
            if (!j && !fed_all) {
                if ((j = feed->next(feed->ud))) {
                    memset(&j->out, 0, sizeof j->out);
                    j->n_tried = 0;
                } else {
                    fed_all = true;
                }
            }
            if (!j) break;
            int i = r->reuse && j->n_tried < POINTS_MAX_TRIED ? idle_for(r, j, j->tried, j->n_tried) : -1;
            if (i >= 0) {
                pid_t pid = r->idle[i].pid;
                if (resume(r, i, j, &ch[live], false)) live++;
                else j->tried[j->n_tried++] = pid, again[n_again++] = j; /* gone: try the next */
                continue;
            }
            /* a new graph: with every place for a child taken (the running ones count: each will
             * be idle again, with its graph), in an idle one (recycle), else in a fresh child */
            if (r->reuse && r->n_idle > 0 && r->n_idle + live >= r->max_idle) {
                if (resume(r, recycle(r, j->tried, j->n_tried), j, &ch[live], true)) live++;
                else again[n_again++] = j; /* gone: a fresh child, next */
                continue;
            }
            if (start(r, chunkname, src, j, &ch[live])) live++;
            else answered(feed, j); /* it ran here */
        }
        if (live <= 0) break;
        /* wait for output from any child, up to the nearest deadline */
        double now = vr_now_s(), soonest = 0;
        for (int i = 0; i < live; i++)
            if (ch[i].deadline > 0 && (soonest == 0 || ch[i].deadline < soonest)) soonest = ch[i].deadline;
        int wait_ms = -1;
        if (soonest > 0) {
            double left = soonest - now;
            wait_ms = left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
        }
        for (int i = 0; i < live; i++) pf[i] = (struct pollfd){.fd = ch[i].fd, .events = POLLIN};
        int pr = poll(pf, (nfds_t)live, wait_ms);
        if (pr < 0 && errno != EINTR) { /* cannot wait: every live child is ended as it stands */
            for (int i = 0; i < live; i++) {
                reap(r, &ch[i], false);
                answered(feed, ch[i].job);
            }
            live = 0;
            continue;
        }
        now = vr_now_s();
        for (int i = 0; i < live;) {
            Child *c = &ch[i];
            bool done = false, timed_out = false;
            if (pr > 0 && (pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t k = read(c->fd, (char *)&c->job->out + c->got, sizeof c->job->out - c->got);
                if (k > 0) c->got += (size_t)k;
                else if (!(k < 0 && errno == EINTR)) done = true;
                if (c->got == sizeof c->job->out) done = true;
            }
            if (!done && c->deadline > 0 && now >= c->deadline) done = timed_out = true;
            if (!done) { i++; continue; }
            PointJob *j = c->job;
            PointOut *o = &j->out;
            bool whole = c->got == sizeof *o && !timed_out;
            if (whole && o->stale) { /* again, next, in another child */
                j->tried[j->n_tried++] = c->pid;
                again[n_again++] = j;
                bool stays = o->idle;
                memset(o, 0, sizeof *o);
                if (stays && r->reuse) keep_idle(r, c);
                else end_child(c, false);
            } else if (whole && o->idle && r->reuse) {
                o->idle = false;
                keep_idle(r, c);
                answered(feed, j);
            } else {
                reap(r, c, timed_out);
                answered(feed, j);
            }
            ch[i] = ch[live - 1]; /* the order children are waited on does not matter */
            pf[i] = pf[live - 1];
            live--;
        }
    }
    free(ch);
    free(pf);
    free(again);
}

/* points_run_batch's feed: the jobs of an array, in order. */
typedef struct BatchFeed { PointJob *jobs; int n, next; } BatchFeed;

static PointJob *batch_next(void *ud) {
    BatchFeed *b = ud;
    return b->next < b->n ? &b->jobs[b->next++] : NULL;
}

void points_run_batch(PointRunner *r, const char *chunkname, const char *src, PointJob *jobs,
                      int n, int max_children) {
    BatchFeed b = {.jobs = jobs, .n = n};
    PointFeed feed = {.next = batch_next, .ud = &b};
    points_run_feed(r, chunkname, src, &feed, max_children);
}

void points_run(PointRunner *r, const char *chunkname, const char *src, const char *const *sets,
                int n_sets, bool simulate, PointOut *out) {
    PointJob j = {.sets = sets, .n_sets = n_sets, .simulate = simulate};
    points_run_batch(r, chunkname, src, &j, 1, 1);
    *out = j.out;
}

char *points_read_scenario(const char *path, char *err, size_t errlen) {
    /* the checked open every reader uses: a FIFO, a device or a folder is refused, not waited on */
    char *b = NULL;
    size_t n = 0;
    InfileStatus s = infile_read(path, (size_t)32 << 20, &b, &n);
    if (s != INFILE_OK) {
        if (s == INFILE_TOOBIG) snprintf(err, errlen, "%s: larger than 32 MiB", path);
        else snprintf(err, errlen, "%s: %s", path, infile_reason(s));
        return NULL;
    }
    if (memchr(b, 0, n)) {
        free(b);
        snprintf(err, errlen, "%s: not a text file", path);
        return NULL;
    }
    return b;
}
