/* points.c: simulation points in forked children of a loaded Lua state (see points.h). */
#include "points.h"

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

struct PointRunner {
    ScenarioState *state;      /* owned; never used here, only in forked copies */
    char *dir;                 /* owned, or NULL */
    bool unsafe;
    double timeout_s;          /* <= 0: none */
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

void points_free(PointRunner *r) {
    if (!r) return;
    scenario_state_free(r->state);
    free(r->dir);
    free(r);
}

/* Runs plan's graph through an allocator made from acfg, without a timeline or the live set at
 * the peak (no caller of points prints them), into out's step fields; returns the engine's
 * status (the message in out->err). */
static VrStatus simulate_plan(const Plan *plan, const AllocConfig *acfg, PointOut *out) {
    EngineConfig ec;
    SimResult *res = NULL;
    plan_engine_config(plan, false, &ec);
    ec.skip_live_at_peak = true;
    VrStatus st = engine_run(plan->graph, &ec, acfg, &res, out->err, sizeof out->err);
    if (st == VR_ENOMEM) snprintf(out->err, sizeof out->err, "out of host memory");
    if (!st) {
        const StepResult *sr = report_step(res);
        out->fits = report_fits(res);
        if (sr) {
            out->has_step = true;
            out->peak_alloc = (double)sr->peak_allocated;
            out->peak_res = (double)sr->peak_reserved;
            out->time_ns = sr->time_ns;
        }
    }
    engine_result_free(res);
    return st;
}

/* The point itself: load (in state, or a fresh one when state is NULL) and simulate. */
static void simulate_point(ScenarioState *state, const char *dir, bool unsafe,
                           const char *chunkname, const char *src, const char *const *sets,
                           int n_sets, bool simulate, PointOut *out) {
    ScenarioOptions opts = {.sets = sets, .n_sets = n_sets, .unsafe = unsafe};
    Plan *plan = NULL;
    VrStatus st = state ? scenario_load_source_in(state, chunkname, src, &opts, &plan, out->err,
                                                  sizeof out->err)
                        : scenario_load_source(chunkname, src, dir, &opts, &plan, out->err,
                                               sizeof out->err);
    if (!st) {
        snprintf(out->strategy, sizeof out->strategy, "%s", plan->strategy);
        snprintf(out->dev_name, sizeof out->dev_name, "%s", plan->dev.name);
        snprintf(out->title, sizeof out->title, "%s", plan->title);
        out->capacity = (double)plan->alloc.capacity;
        out->tokens_per_step = plan->tokens_per_step;
        out->samples_per_step = plan->samples_per_step;
    }
    if (!st && simulate) st = simulate_plan(plan, &plan->alloc, out);
    out->status = st;
    plan_free(plan);
}

void points_simulate_plan(const Plan *plan, const AllocConfig *acfg, PointOut *out) {
    out->status = simulate_plan(plan, acfg, out);
}

/* A child running one job of a batch: its pipe's read end and how much of its PointOut came. */
typedef struct Child {
    pid_t pid;
    int fd;
    size_t got;
    double deadline;           /* vr_now_s() past which it is killed; 0: none */
    PointJob *job;
} Child;

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

/* Forks the child of job j into *c; false (and the job run here, in a fresh state) when no
 * child can be made. */
static bool start(PointRunner *r, const char *chunkname, const char *src, PointJob *j, Child *c) {
    int fd[2];
    pid_t pid = -1;
    if (pipe(fd) == 0) {
        fflush(NULL); /* the child must not write the parent's buffered output again */
        pid = fork();
        if (pid < 0) { close(fd[0]); close(fd[1]); }
    }
    if (pid < 0) { /* no child: this process, a fresh state */
        simulate_point(NULL, r->dir, r->unsafe, chunkname, src, j->sets, j->n_sets, j->simulate,
                       &j->out);
        return false;
    }
    if (pid == 0) {
        close(fd[0]);
        signal(SIGPIPE, SIG_IGN);
        PointOut o;
        memset(&o, 0, sizeof o);
        simulate_point(r->state, r->dir, r->unsafe, chunkname, src, j->sets, j->n_sets,
                       j->simulate, &o);
        _exit(vr_write_all(fd[1], &o, sizeof o) ? 0 : 1);
    }
    close(fd[1]);
    *c = (Child){.pid = pid, .fd = fd[0], .job = j,
                 .deadline = r->timeout_s > 0 ? vr_now_s() + r->timeout_s : 0};
    return true;
}

/* Ends child c: reaps it (killed first when timed_out) and fills its job's answer. */
static void reap(const PointRunner *r, Child *c, bool timed_out) {
    close(c->fd);
    if (timed_out) kill(c->pid, SIGKILL);
    int ws = 0;
    while (waitpid(c->pid, &ws, 0) < 0 && errno == EINTR) {}
    finish(r, c, timed_out, ws);
}

void points_run_batch(PointRunner *r, const char *chunkname, const char *src, PointJob *jobs,
                      int n, int max_children) {
    enum { MAX_CHILDREN = 64 };
    Child ch[MAX_CHILDREN];
    struct pollfd pf[MAX_CHILDREN];
    if (max_children < 1) max_children = 1;
    if (max_children > MAX_CHILDREN) max_children = MAX_CHILDREN;
    for (int i = 0; i < n; i++) memset(&jobs[i].out, 0, sizeof jobs[i].out);
    int next = 0, live = 0;
    while (next < n || live > 0) {
        while (next < n && live < max_children) {
            PointJob *j = &jobs[next++];
            if (start(r, chunkname, src, j, &ch[live])) live++;
        }
        if (live <= 0) continue;
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
            for (int i = 0; i < live; i++) reap(r, &ch[i], false);
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
            reap(r, c, timed_out);
            ch[i] = ch[live - 1]; /* the order children are waited on does not matter */
            pf[i] = pf[live - 1];
            live--;
        }
    }
}

void points_run(PointRunner *r, const char *chunkname, const char *src, const char *const *sets,
                int n_sets, bool simulate, PointOut *out) {
    PointJob j = {.sets = sets, .n_sets = n_sets, .simulate = simulate};
    points_run_batch(r, chunkname, src, &j, 1, 1);
    *out = j.out;
}

char *points_read_scenario(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read the scenario file", path);
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t k = fread(b + n, 1, cap - n - 1, f);
        n += k;
        if (n < cap - 1) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!b) { snprintf(err, errlen, "out of host memory"); return NULL; }
    b[n] = 0;
    if (bad) {
        free(b);
        snprintf(err, errlen, "%s: cannot read the scenario file", path);
        return NULL;
    }
    if (memchr(b, 0, n)) {
        free(b);
        snprintf(err, errlen, "%s: not a text file", path);
        return NULL;
    }
    return b;
}
