/* cmd_pipeline.c: a scenario with pipeline parallelism (training.parallel.pp > 1): every pipeline
 * rank simulated, then the step composed and reported (vrsim SCENARIO, from cmd_run).
 *
 * Each rank is a plan of its own (lua/vrsim/pipeline.lua: its stages' parameters and its
 * schedule's actions declared in order), loaded as the scenario with hardware.rank set to one of
 * its GPUs, and run through the engine: its peak memory is what it holds as its schedule runs.
 * The engine's op spans of the steady step give each action's time (a stage's forward or backward
 * of one micro-batch: from its first op's start to its last op's end), averaged over the
 * micro-batches; sim/pipeline.c then runs the ranks' schedules against each other, the
 * activations and gradients crossing the link between neighbouring pipeline ranks, for the step
 * time and the bubble. The busiest rank (highest peak reserved) is the verdict, its summary
 * printed in full. */
#include "cmds.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "pipeline.h"
#include "report.h"
#include "safetext.h"
#include "scenario.h"

static const char KIND_CHAR[PP_KINDS] = {'F', 'B', 'I', 'W'};

/* Every rank's plan and engine result, and what the composition needs of them. */
typedef struct Ranks {
    int n;
    Plan **plans;
    SimResult **res;
    double *action_ns;  /* [stage * PP_KINDS + kind] */
    double *rest_ns;    /* per rank */
    double *own_ns;     /* per rank: its engine step, its work alone */
    double *end_ns, *busy_ns;
    const PpAction **order;
    int *n_order;
} Ranks;

static void ranks_free(Ranks *r) {
    for (int i = 0; r->plans && i < r->n; i++) plan_free(r->plans[i]);
    for (int i = 0; r->res && i < r->n; i++) engine_result_free(r->res[i]);
    free(r->plans);
    free(r->res);
    free(r->action_ns);
    free(r->rest_ns);
    free(r->own_ns);
    free(r->end_ns);
    free(r->busy_ns);
    free(r->order);
    free(r->n_order);
}

/* The plan of pipeline rank `rank`: the scenario loaded again with hardware.rank on its first
 * GPU (pp is the mesh's outermost dimension); from src where the scenario is source text (a
 * trainer config's chunk, sim/recipe.h), else from path. */
static VrStatus load_rank(const char *path, const char *src, const ScenarioOptions *opts, int rank, int stride,
                          Plan **out, char *err, size_t errlen) {
    const char **sets = calloc((size_t)opts->n_sets + 1, sizeof(char *));
    if (!sets) return VR_ENOMEM;
    for (int i = 0; i < opts->n_sets; i++) sets[i] = opts->sets[i];
    char set[64];
    snprintf(set, sizeof set, "hardware.rank=%d", rank * stride);
    sets[opts->n_sets] = set;
    ScenarioOptions o = *opts;
    o.sets = sets;
    o.n_sets = opts->n_sets + 1;
    VrStatus st = src ? scenario_load_source(path, src, ".", &o, out, err, errlen)
                      : scenario_load(path, &o, out, err, errlen);
    free(sets);
    return st;
}

/* Each action's time on rank r, from the engine's spans of its last complete step; stage times
 * averaged over micro-batches into action_ns; the rest of the step into rest_ns[r]. Returns
 * false when the rank completed no step (out of memory in its first). */
static bool action_times(Ranks *k, int r, double *sum, int *cnt) {
    const Plan *p = k->plans[r];
    const SimResult *res = k->res[r];
    const PpPlan *pp = p->pp;
    if (res->n_steps < 1) return false;
    int step = res->n_steps - 1;
    int n_ops = graph_num_ops(p->graph);
    int *action_of = malloc(sizeof(int) * (size_t)(n_ops + 1));
    double *start = malloc(sizeof(double) * (size_t)(pp->n_actions + 1));
    double *end = malloc(sizeof(double) * (size_t)(pp->n_actions + 1));
    if (!action_of || !start || !end) {
        free(action_of); free(start); free(end);
        return false;
    }
    for (int i = 0; i < n_ops; i++) action_of[i] = -1;
    for (int a = 0; a < pp->n_actions; a++) {
        start[a] = -1;
        end[a] = -1;
        for (int o = pp->op_first[a]; o < pp->op_end[a] && o < n_ops; o++)
            if (o >= 0) action_of[o] = a;
    }
    /* (an action's range holds its derived backward ops too: declared as the action ran) */
    for (int i = 0; i < res->n_spans; i++) {
        const OpSpan *s = &res->spans[i];
        if (s->step != step || s->op < 0 || s->op >= n_ops) continue;
        int a = action_of[s->op];
        if (a < 0) continue;
        if (start[a] < 0 || s->start_ns < start[a]) start[a] = s->start_ns;
        if (s->end_ns > end[a]) end[a] = s->end_ns;
    }
    /* An action's time is what it adds to the rank's timeline: from the later of its first op's
     * start and the previous action's end, to its last op's end. Its first op can start long
     * before the previous action ends: a stage's first forward all-gathers the stage's parameters
     * (FSDP2) on the all-gather stream, which the engine, seeing no dependency, starts at the
     * step's start, beside the rank's other stage; counted from there, that forward would hold
     * the other stage's compute too and the actions would add up to more than the step. */
    double total = 0, prev_end = -1;
    for (int a = 0; a < pp->n_actions; a++) {
        double s0 = start[a] > prev_end ? start[a] : prev_end;
        double d = start[a] >= 0 && end[a] > s0 ? end[a] - s0 : 0;
        if (start[a] >= 0 && end[a] > prev_end) prev_end = end[a];
        const PpAction *x = &pp->actions[a];
        sum[x->stage * PP_KINDS + x->kind] += d;
        cnt[x->stage * PP_KINDS + x->kind]++;
        total += d;
    }
    k->own_ns[r] = report_step(res)->time_ns;
    double rest = k->own_ns[r] - total;
    k->rest_ns[r] = rest > 0 ? rest : 0;
    free(action_of);
    free(start);
    free(end);
    return true;
}

/* The link between neighbouring pipeline ranks: NVLink (the collective link) inside a node, the
 * network (one GPU's share of its node's rail NICs) when `stride` GPUs apart leaves the node. */
static CollLink pp_link(const DeviceSpec *d, int stride, bool *across) {
    *across = d->gpus_per_node > 0 && stride >= d->gpus_per_node && d->nic_bw > 0;
    if (*across) {
        double share = d->nics_per_node > 0 ? (double)d->nics_per_node / d->gpus_per_node : 1;
        return (CollLink){.latency_ns = d->nic_latency_ns, .bus_bw = d->nic_bw * (share < 1 ? share : 1)};
    }
    return (CollLink){.latency_ns = d->coll_latency_ns, .bus_bw = d->coll_bw};
}

/* "0-19 +embed" : a stage's decoder layers (counted from its place in the split) and parts. */
static void stage_layers(const PpPlan *pp, int stage, char *out, size_t n) {
    int first = 0;
    for (int s = 0; s < stage; s++) first += pp->stage_layers[s];
    int cnt = pp->stage_layers[stage];
    if (cnt > 0) snprintf(out, n, "%d-%d", first, first + cnt - 1);
    else snprintf(out, n, "none");
    if (stage == 0) strncat(out, " +embed", n - strlen(out) - 1);
    if (stage == pp->stages - 1) strncat(out, " +head,loss", n - strlen(out) - 1);
}

static double peak_reserved(const SimResult *r) {
    const StepResult *s = report_step(r);
    return s ? (double)s->peak_reserved : 0;
}

int cmd_pipeline(const char *path, const char *src, const ScenarioOptions *opts, Plan *plan0, bool json) {
    Ranks k = {0};
    const PpPlan *pp0 = plan0->pp;
    int n = pp0->ranks;
    char err[1024];
    int rc = VR_EXIT_OK;
    k.n = n;
    k.plans = calloc((size_t)n, sizeof(Plan *));
    k.res = calloc((size_t)n, sizeof(SimResult *));
    k.action_ns = calloc((size_t)pp0->stages * PP_KINDS, sizeof(double));
    k.rest_ns = calloc((size_t)n, sizeof(double));
    k.own_ns = calloc((size_t)n, sizeof(double));
    k.end_ns = calloc((size_t)n, sizeof(double));
    k.busy_ns = calloc((size_t)n, sizeof(double));
    k.order = calloc((size_t)n, sizeof(PpAction *));
    k.n_order = calloc((size_t)n, sizeof(int));
    double *sum = calloc((size_t)pp0->stages * PP_KINDS, sizeof(double));
    int *cnt = calloc((size_t)pp0->stages * PP_KINDS, sizeof(int));
    if (!k.plans || !k.res || !k.action_ns || !k.rest_ns || !k.own_ns || !k.end_ns || !k.busy_ns || !k.order ||
        !k.n_order || !sum || !cnt) {
        safetext_eprintf("vrsim: out of host memory\n");
        plan_free(plan0);
        rc = VR_EXIT_INTERNAL;
        goto out;
    }
    k.plans[pp0->rank] = plan0;
    for (int r = 0; r < n; r++) {
        if (k.plans[r]) continue;
        VrStatus st = load_rank(path, src, opts, r, pp0->gpus_per_rank, &k.plans[r], err, sizeof err);
        if (st || !k.plans[r]->pp || k.plans[r]->pp->rank != r) {
            safetext_eprintf("vrsim: pipeline rank %d: %s\n", r, st ? err : "the plan is not that rank's");
            rc = st == VR_ENOMEM ? VR_EXIT_INTERNAL : VR_EXIT_USAGE;
            goto out;
        }
    }
    bool all_fit = true, timed = true;
    int busiest = 0;
    for (int r = 0; r < n; r++) {
        EngineConfig ec;
        plan_engine_config(k.plans[r], true, &ec);
        VrStatus st = engine_run(k.plans[r]->graph, &ec, &k.plans[r]->alloc, &k.res[r], err, sizeof err);
        if (st) {
            safetext_eprintf("vrsim: %s: pipeline rank %d: %s\n", path, r, st == VR_ENOMEM ? "out of host memory" : err);
            rc = st == VR_EINVAL ? VR_EXIT_USAGE : VR_EXIT_INTERNAL;
            goto out;
        }
        all_fit &= report_fits(k.res[r]);
        if (!report_fits(k.res[r]) && report_fits(k.res[busiest])) busiest = r;
        else if (report_fits(k.res[r]) == report_fits(k.res[busiest]) &&
                 peak_reserved(k.res[r]) > peak_reserved(k.res[busiest]))
            busiest = r;
        const PpPlan *pp = k.plans[r]->pp;
        k.order[r] = pp->actions;
        k.n_order[r] = pp->n_actions;
        timed &= action_times(&k, r, sum, cnt);
    }
    for (int i = 0; i < pp0->stages * PP_KINDS; i++) k.action_ns[i] = cnt[i] ? sum[i] / cnt[i] : 0;
    bool across = false;
    CollLink link = pp_link(&plan0->dev, pp0->gpus_per_rank, &across);
    double *send = calloc((size_t)pp0->stages, sizeof(double));
    if (!send) { rc = VR_EXIT_INTERNAL; goto out; }
    for (int s = 0; s < pp0->stages; s++) send[s] = pp0->send_bytes;
    PipelineSpec spec = {.ranks = n, .stages = pp0->stages, .microbatches = pp0->microbatches,
                         .order = k.order, .n_order = k.n_order, .action_ns = k.action_ns,
                         .rest_ns = k.rest_ns, .send_bytes = send, .link = link,
                         .shape_bytes = pp0->shape_bytes, .lockstep = pp0->lockstep};
    PipelineResult pr = {0};
    if (timed) {
        VrStatus st = pipeline_compose(&spec, &pr, k.end_ns, k.busy_ns, err, sizeof err);
        if (st) {
            safetext_eprintf("vrsim: %s: %s\n", path, err);
            free(send);
            rc = VR_EXIT_INTERNAL;
            goto out;
        }
    }
    free(send);
    const Plan *bp = k.plans[busiest];
    double step_s = pr.step_ns / 1e9;
    double job_tps = timed && step_s > 0 ? bp->tokens_per_step * pp0->gpus_per_rank / step_s : 0;
    if (json) {
        char *js = report_summary_json(bp, k.res[busiest]);
        cJSON *o = js ? cJSON_Parse(js) : NULL;
        free(js);
        cJSON *pj = o ? cJSON_AddObjectToObject(o, "pipeline") : NULL;
        if (!pj) {
            cJSON_Delete(o);
            safetext_eprintf("vrsim: out of host memory\n");
            rc = VR_EXIT_INTERNAL;
            goto out;
        }
        cJSON_ReplaceItemInObject(o, "fits", cJSON_CreateBool(all_fit));
        if (timed) {
            cJSON_ReplaceItemInObject(o, "step_time_ms", cJSON_CreateNumber(pr.step_ns / 1e6));
            cJSON_ReplaceItemInObject(o, "tokens_per_s", cJSON_CreateNumber(job_tps));
        }
        cJSON_AddStringToObject(pj, "schedule", pp0->schedule);
        cJSON_AddNumberToObject(pj, "pp", n);
        cJSON_AddNumberToObject(pj, "stages", pp0->stages);
        cJSON_AddNumberToObject(pj, "stages_per_rank", pp0->virtual_stages);
        cJSON_AddNumberToObject(pj, "microbatches", pp0->microbatches);
        cJSON_AddNumberToObject(pj, "busiest_rank", busiest);
        cJSON_AddBoolToObject(pj, "timed", timed);
        cJSON_AddNumberToObject(pj, "step_time_ms", pr.step_ns / 1e6);
        cJSON_AddNumberToObject(pj, "pipeline_ms", pr.span_ns / 1e6);
        cJSON_AddNumberToObject(pj, "bubble", pr.bubble);
        cJSON_AddNumberToObject(pj, "send_ms", pr.send_ns / 1e6);
        cJSON_AddNumberToObject(pj, "send_bytes", pp0->send_bytes);
        cJSON_AddStringToObject(pj, "link", across ? "network" : "intra-node");
        cJSON_AddNumberToObject(pj, "tokens_per_s", job_tps);
        cJSON_AddNumberToObject(pj, "tokens_per_s_per_gpu", plan0->gpus ? job_tps / plan0->gpus : 0);
        cJSON *ra = cJSON_AddArrayToObject(pj, "ranks");
        for (int r = 0; ra && r < n; r++) {
            const PpPlan *pp = k.plans[r]->pp;
            const StepResult *s = report_step(k.res[r]);
            cJSON *e = cJSON_CreateObject();
            if (!e) break;
            cJSON_AddItemToArray(ra, e);
            cJSON_AddNumberToObject(e, "rank", r);
            cJSON *st = cJSON_AddArrayToObject(e, "stages");
            cJSON *ly = cJSON_AddArrayToObject(e, "stage_layers");
            for (int g = r; g < pp->stages; g += n) {
                char buf[64];
                stage_layers(pp, g, buf, sizeof buf);
                cJSON_AddItemToArray(st, cJSON_CreateNumber(g));
                cJSON_AddItemToArray(ly, cJSON_CreateString(buf));
            }
            cJSON_AddBoolToObject(e, "fits", report_fits(k.res[r]));
            cJSON_AddNumberToObject(e, "peak_allocated_bytes", s ? (double)s->peak_allocated : 0);
            cJSON_AddNumberToObject(e, "peak_reserved_bytes", s ? (double)s->peak_reserved : 0);
            cJSON_AddNumberToObject(e, "busy_ms", k.busy_ns[r] / 1e6);
            cJSON_AddNumberToObject(e, "rest_ms", k.rest_ns[r] / 1e6);
            cJSON_AddNumberToObject(e, "own_step_ms", k.own_ns[r] / 1e6);
            cJSON *ac = cJSON_AddArrayToObject(e, "actions");
            for (int a = 0; ac && a < pp->n_actions; a++) {
                char buf[48];
                snprintf(buf, sizeof buf, "%d%c%d", pp->actions[a].stage, KIND_CHAR[pp->actions[a].kind],
                         pp->actions[a].mb);
                cJSON_AddItemToArray(ac, cJSON_CreateString(buf));
            }
        }
        char *txt = cJSON_Print(o);
        cJSON_Delete(o);
        if (!txt) { rc = VR_EXIT_INTERNAL; goto out; }
        puts(txt);
        free(txt);
    } else {
        printf("pipeline: %s over %d ranks, %d stage%s each, %d micro-batches; %d GPU%s per rank\n",
               pp0->schedule, n, pp0->virtual_stages, pp0->virtual_stages > 1 ? "s" : "",
               pp0->microbatches, pp0->gpus_per_rank, pp0->gpus_per_rank > 1 ? "s" : "");
        printf("  rank  stage layers                      peak allocated   peak reserved  fits   busy ms\n");
        for (int r = 0; r < n; r++) {
            const PpPlan *pp = k.plans[r]->pp;
            const StepResult *s = report_step(k.res[r]);
            char lay[160] = "";
            for (int g = r; g < pp->stages; g += n) {
                char buf[64];
                stage_layers(pp, g, buf, sizeof buf);
                size_t len = strlen(lay);
                snprintf(lay + len, sizeof lay - len, "%s%d: %s", len ? "; " : "", g, buf);
            }
            printf("  %4d  %-32s %10.1f MiB  %10.1f MiB  %-5s %9.1f%s\n", r, lay,
                   s ? s->peak_allocated / 1048576.0 : 0, s ? s->peak_reserved / 1048576.0 : 0,
                   report_fits(k.res[r]) ? "yes" : "NO", k.busy_ns[r] / 1e6, r == busiest ? "  <- busiest" : "");
        }
        if (timed)
            printf("  step %.1f ms (pipeline %.1f ms), bubble %.1f %%, %.0f tokens/s (%.0f per GPU); "
                   "each send %.3f ms over the %s link\n\n",
                   pr.step_ns / 1e6, pr.span_ns / 1e6, 100 * pr.bubble, job_tps,
                   plan0->gpus ? job_tps / plan0->gpus : 0, pr.send_ns / 1e6, across ? "network" : "intra-node");
        else
            printf("  step time: not composed (a rank ran out of memory in its first step)\n\n");
        /* (the rank's own summary times its work alone, as if it never waited on its neighbours:
         * the step and tokens/s of the run are the pipeline's line above) */
        printf("pipeline rank %d (busiest); its step time below is its own work alone, without the "
               "schedule's waits: the run's step and tokens/s are the pipeline line above\n", busiest);
        report_print_summary(stdout, bp, k.res[busiest]);
    }
    rc = all_fit ? VR_EXIT_OK : VR_EXIT_OOM;
out:
    free(sum);
    free(cnt);
    ranks_free(&k);
    return rc;
}
