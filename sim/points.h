/* points.h: many simulations of one scenario (sweep points, maxbatch probes, shop rows), each in
 * a forked child of a process that loaded the Lua state and vrsim's modules once.
 *
 * A PointRunner holds a ScenarioState (scenario.h): a sandboxed Lua state in which every module
 * under lua/ is already compiled and loaded. points_run forks; the child loads the scenario with
 * the point's --set overrides in its copy of that state, simulates it op by op through the
 * allocator (without a timeline or the live set at the peak, which no caller prints) and writes
 * a PointOut back through a pipe; the runner's own state stays unused for the next point. The
 * child is a fresh copy each time (with reuse, below, one that keeps nothing of an earlier point
 * but its graph and caches), so no point sees what an earlier one did to the Lua state: every
 * point gives what `vrsim SCENARIO --set ...` gives.
 *
 * Limits. A child still running timeout_s seconds after it was given its point is killed
 * (SIGKILL) and its point reported as failed ("timed out"); a child that dies without an answer
 * (a crash, the kernel's OOM killer) is reported as failed with its signal. Either way the
 * caller goes on. */
#ifndef VR_POINTS_H
#define VR_POINTS_H

#include <stdbool.h>
#include <sys/types.h>

#include "scenario.h"
#include "vr.h"

/* What a point gave. status is VR_OK, the status of the load or the engine run (VR_EINVAL bad
 * input, VR_ENOMEM out of host memory), or VR_EIO when the child timed out or died; err says
 * why for any status but VR_OK. */
typedef struct PointOut {
    VrStatus status;
    bool timed_out;            /* killed at the timeout */
    bool has_step;             /* a step result exists (report_step): the peak fields are set */
    bool fits;                 /* report_fits */
    double peak_alloc, peak_res; /* bytes, of report_step */
    double capacity;           /* bytes the allocator may reserve */
    double time_ns;            /* step time of report_step */
    double tokens_per_step, samples_per_step; /* per GPU (Plan) */
    double need_alloc;         /* with points_set_need, a point that does not fit: the peak
                                  allocated bytes of its graph through the ideal allocator with
                                  no limit (what it needs without fragmentation); else 0 */
    int gpus;                  /* Plan.gpus */
    char strategy[32];         /* Plan.strategy */
    char dev_name[128];        /* Plan.dev.name */
    char title[256];           /* Plan.title */
    char err[1024];
    bool stale, idle;          /* between a child and the runner only (reuse): the child could not
                                  reuse its graph for the point / stays for the next one */
} PointOut;

typedef struct PointRunner PointRunner;

/* Makes a runner for scenarios whose `require` may also search dir (NULL: none), unsafe as
 * for scenario_load; timeout_s <= 0 means no timeout. Fails only for host memory or a missing
 * lua/ folder (message in err). The caller owns *out (points_free). */
VrStatus points_new(const char *dir, bool unsafe, double timeout_s, PointRunner **out /* OUT */,
                    char *err, size_t errlen);
void points_free(PointRunner *r); /* NULL is a no-op */

/* With reuse on, a child stays after its point, keeping that point's Lua state and graph, and
 * takes the next point of the same scenario, which it answers on that graph where the graph read
 * nothing that differs between the two points (lua/vrsim/plan.lua P.rebuild: points that differ
 * in the GPU only, most often); a point it cannot answer so runs in a fresh child or, once a few
 * children are kept, in one of them, which drops its graph and loads the point anew in the state
 * it has (points.c reuse_child). Every answer is the one a fresh child gives. For callers whose
 * points often share a graph (vrsim sweep, shop); off by default. Turning it off ends the
 * children kept. */
void points_set_reuse(PointRunner *r, bool reuse);

/* With need on, a point that does not fit is simulated a second time, on the same graph, through
 * the ideal allocator without a capacity, for PointOut.need_alloc: how far a change that does
 * not fit got (vrsim's out-of-memory suggestions, sim/variants.c). Off by default. */
void points_set_need(PointRunner *r, bool need);

/* Loads the scenario source src (named chunkname in messages) with the n_sets "key=value"
 * overrides and, when simulate is true, runs it; fills *out. Where fork fails, the point runs
 * in this process in a fresh state (no timeout). */
void points_run(PointRunner *r, const char *chunkname, const char *src, const char *const *sets,
                int n_sets, bool simulate, PointOut *out /* OUT */);

/* Children running points at once (points_run_feed's max_children) at most, and the idle
 * children (reuse) a job tries for a graph it may share before a fresh one makes it. */
enum { POINTS_MAX_CHILDREN = 1024, POINTS_MAX_TRIED = 3 };

/* One point of a batch: its "key=value" overrides (borrowed), whether to simulate, and its
 * answer (filled by points_run_feed, as points_run fills its out). */
typedef struct PointJob {
    const char *const *sets;
    int n_sets;
    bool simulate;
    PointOut out;              /* OUT */
    pid_t tried[POINTS_MAX_TRIED]; /* points_run_feed's own: the idle children that answered the */
    int n_tried;                  /* job `stale` (it goes to another) */
} PointJob;

/* Where points_run_feed takes its jobs and gives their answers: next returns the next job to run
 * (the caller's memory, untouched by the runner until then), NULL when there is none left; done
 * (optional) is called once for each job with its answer in job->out, in the order the answers
 * come, after which the job's memory is the caller's again. A job is done or running between the
 * two, so a caller needs memory for max_children jobs at a time, not for all of them. */
typedef struct PointFeed {
    PointJob *(*next)(void *ud);
    void (*done)(void *ud, PointJob *job);
    void *ud;
} PointFeed;

/* The worker pool every command's simulations go through (vrsim sweep, maxbatch, shop, the
 * "what would help" suggestions): runs the feed's jobs as points_run runs one, up to
 * max_children (at most POINTS_MAX_CHILDREN) children at a time, each with its own timeout:
 * the answers are those points_run gives, in any order of running. */
void points_run_feed(PointRunner *r, const char *chunkname, const char *src, const PointFeed *feed,
                     int max_children);

/* points_run_feed over the n jobs of an array, in order. */
void points_run_batch(PointRunner *r, const char *chunkname, const char *src, PointJob *jobs,
                      int n, int max_children);

/* Simulates an already loaded plan with the allocator settings acfg (in this process, no
 * timeout) into *out, as points_run simulates a point: for a run that differs from plan's only
 * in allocator settings, when plan->graph_reads_allocator is false. */
void points_simulate_plan(const Plan *plan, const AllocConfig *acfg,
                          PointOut *out /* OUT: status and the step fields */);

/* Reads a scenario file as scenario_load does: NULL with scenario_load's message in err when it
 * cannot be read or is not text. The caller frees the result. */
char *points_read_scenario(const char *path, char *err, size_t errlen);

#endif
