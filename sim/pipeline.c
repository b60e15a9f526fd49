/* pipeline.c: a pipeline schedule's step as a discrete-event simulation (see pipeline.h). */
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char KIND_CHAR[PP_KINDS] = {'F', 'B', 'I', 'W'};

void pipeline_plan_free(PpPlan *p) {
    if (!p) return;
    free(p->stage_layers);
    free(p->actions);
    free(p->op_first);
    free(p->op_end);
    free(p);
}

double pipeline_p2p_ns(const CollLink *link, double bytes) {
    if (!(bytes > 0)) return 0;
    return link->latency_ns + (link->bus_bw > 0 ? bytes / link->bus_bw * 1e9 : 0);
}

/* One transfer of `bytes` between two ranks of the spec, its shape exchange first where the spec
 * has one. */
static double transfer_ns(const PipelineSpec *s, double bytes) {
    return (s->shape_bytes > 0 ? pipeline_p2p_ns(&s->link, s->shape_bytes) : 0) + pipeline_p2p_ns(&s->link, bytes);
}

/* Per (stage, micro-batch): when its forward and its input-gradient backward ended, and when its
 * input activation and output gradient arrived; < 0 while unknown. */
typedef struct Times {
    double *f_end, *b_end, *act_at, *grad_at;
} Times;

/* A transfer ready at `t` from rank a to rank b (a != b) over their directed link: it starts once
 * the link has finished the transfers before it. Returns its arrival. */
static double transfer(const PipelineSpec *s, double *link_free, int a, int b, double t, double bytes) {
    double *lf = &link_free[a * s->ranks + b];
    double start = t > *lf ? t : *lf;
    double end = start + transfer_ns(s, bytes);
    *lf = end;
    return end;
}

/* When action a can start as far as its inputs go, or < 0 while one is still unknown. */
static double inputs_ready(const PipelineSpec *s, const Times *tm, const PpAction *a) {
    int k = a->stage * s->microbatches + a->mb;
    switch (a->kind) {
    case PP_F: return a->stage == 0 ? 0 : tm->act_at[k];
    case PP_B:
    case PP_I:
        if (tm->f_end[k] < 0) return -1;
        if (a->stage == s->stages - 1) return tm->f_end[k];
        return tm->grad_at[k] < 0 ? -1 : (tm->grad_at[k] > tm->f_end[k] ? tm->grad_at[k] : tm->f_end[k]);
    default: return tm->b_end[k];
    }
}

static VrStatus check_spec(const PipelineSpec *s, char *err, size_t errlen) {
    if (s->ranks < 1 || s->stages < s->ranks || s->stages % s->ranks || s->microbatches < 1) {
        snprintf(err, errlen, "pipeline: %d stages on %d ranks with %d micro-batches", s->stages,
                 s->ranks, s->microbatches);
        return VR_EINVAL;
    }
    for (int r = 0; r < s->ranks; r++)
        for (int i = 0; i < s->n_order[r]; i++) {
            const PpAction *a = &s->order[r][i];
            if (a->stage < 0 || a->stage >= s->stages || a->stage % s->ranks != r || a->mb < 0 ||
                a->mb >= s->microbatches || a->kind < 0 || a->kind >= PP_KINDS) {
                snprintf(err, errlen, "pipeline: rank %d's action %d (stage %d, micro-batch %d) is not "
                         "one of its stages' micro-batches", r, i, a->stage, a->mb);
                return VR_EINVAL;
            }
        }
    return VR_OK;
}

/* The lockstep composition (pipeline.h): time step by time step, every rank's action, then
 * its batch of transfers, which holds both ends until the later one posts it. */
static VrStatus compose_lockstep(const PipelineSpec *s, Times *tm, double *end_ns, double *busy_ns,
                                 char *err, size_t errlen) {
    int steps = 0;
    for (int r = 0; r < s->ranks; r++)
        for (int i = 0; i < s->n_order[r]; i++) {
            int t = s->order[r][i].slot;
            if (t < 0 || t >= 1 << 20 || (i > 0 && t <= s->order[r][i - 1].slot)) {
                snprintf(err, errlen, "pipeline: rank %d's action %d has time step %d, not after the one before", r, i, t);
                return VR_EINVAL;
            }
            if (t + 1 > steps) steps = t + 1;
        }
    int *next = calloc((size_t)s->ranks, sizeof(int));
    const PpAction **now = calloc((size_t)s->ranks, sizeof(PpAction *));
    double *done = calloc((size_t)s->ranks, sizeof(double)); /* when the rank's last step ended */
    double *comp = calloc((size_t)s->ranks, sizeof(double)); /* when this step's compute ended */
    if (!next || !now || !done || !comp) {
        free(next); free(now); free(done); free(comp);
        return VR_ENOMEM;
    }
    VrStatus st = VR_OK;
    for (int t = 0; t < steps && !st; t++) {
        for (int r = 0; r < s->ranks; r++) {
            now[r] = next[r] < s->n_order[r] && s->order[r][next[r]].slot == t ? &s->order[r][next[r]++] : NULL;
            comp[r] = done[r];
            if (!now[r]) continue;
            const PpAction *a = now[r];
            double ready = inputs_ready(s, tm, a);
            if (ready < 0) {
                snprintf(err, errlen, "pipeline: rank %d runs %d%c%d at time step %d before its input is sent",
                         r, a->stage, KIND_CHAR[a->kind], a->mb, t);
                st = VR_EINVAL;
                break;
            }
            double dur = s->action_ns[a->stage * PP_KINDS + a->kind];
            comp[r] = (ready > done[r] ? ready : done[r]) + dur;
            busy_ns[r] += dur;
            int k = a->stage * s->microbatches + a->mb;
            if (a->kind == PP_F) tm->f_end[k] = comp[r];
            else if (a->kind == PP_B || a->kind == PP_I) tm->b_end[k] = comp[r];
        }
        if (st) break;
        for (int r = 0; r < s->ranks; r++) done[r] = comp[r];
        /* the transfers: each send meets its receive, posted by the peer at this time step */
        for (int r = 0; r < s->ranks; r++) {
            const PpAction *a = now[r];
            if (!a) continue;
            int k = a->stage * s->microbatches + a->mb, to = -1, at = -1;
            double bytes = 0;
            if (a->kind == PP_F && a->stage + 1 < s->stages) {
                to = (a->stage + 1) % s->ranks; at = k + s->microbatches; bytes = s->send_bytes[a->stage];
            } else if ((a->kind == PP_B || a->kind == PP_I) && a->stage > 0) {
                to = (a->stage - 1) % s->ranks; at = k - s->microbatches; bytes = s->send_bytes[a->stage - 1];
            }
            if (to < 0) continue;
            double arrive = to == r ? comp[r] : (comp[r] > comp[to] ? comp[r] : comp[to]) + transfer_ns(s, bytes);
            if (a->kind == PP_F) tm->act_at[at] = arrive;
            else tm->grad_at[at] = arrive;
            if (arrive > done[r]) done[r] = arrive;
            if (arrive > done[to]) done[to] = arrive;
        }
        for (int r = 0; r < s->ranks; r++)
            if (now[r]) end_ns[r] = done[r];
    }
    free(next);
    free(now);
    free(done);
    free(comp);
    return st;
}

VrStatus pipeline_compose(const PipelineSpec *s, PipelineResult *out, double *end_ns, double *busy_ns,
                          char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    VrStatus st = check_spec(s, err, errlen);
    if (st) return st;
    size_t n = (size_t)s->stages * (size_t)s->microbatches;
    Times tm;
    double *buf = malloc(sizeof(double) * (4 * n + (size_t)s->ranks * (size_t)s->ranks));
    int *next = calloc((size_t)s->ranks, sizeof(int));
    double *free_at = calloc((size_t)s->ranks, sizeof(double));
    if (!buf || !next || !free_at) {
        free(buf); free(next); free(free_at);
        return VR_ENOMEM;
    }
    tm.f_end = buf; tm.b_end = buf + n; tm.act_at = buf + 2 * n; tm.grad_at = buf + 3 * n;
    for (size_t i = 0; i < 4 * n; i++) buf[i] = -1;
    double *link_free = buf + 4 * n;
    for (int i = 0; i < s->ranks * s->ranks; i++) link_free[i] = 0;
    for (int r = 0; r < s->ranks; r++) end_ns[r] = busy_ns[r] = 0;

    if (s->lockstep) st = compose_lockstep(s, &tm, end_ns, busy_ns, err, errlen);
    /* each round runs the one action, among the ranks' next ones whose inputs are known, that
     * starts first (ties: the lower rank), so that the links see their transfers in time order */
    for (; !s->lockstep;) {
        int pick = -1;
        double pick_start = 0;
        bool left = false;
        for (int r = 0; r < s->ranks; r++) {
            if (next[r] >= s->n_order[r]) continue;
            left = true;
            double ready = inputs_ready(s, &tm, &s->order[r][next[r]]);
            if (ready < 0) continue;
            double start = ready > free_at[r] ? ready : free_at[r];
            if (pick < 0 || start < pick_start) { pick = r; pick_start = start; }
        }
        if (!left) break;
        if (pick < 0) {
            int len = snprintf(err, errlen, "pipeline: the schedule deadlocks: every rank waits (");
            for (int r = 0; r < s->ranks && len > 0 && (size_t)len < errlen; r++)
                if (next[r] < s->n_order[r]) {
                    const PpAction *a = &s->order[r][next[r]];
                    len += snprintf(err + len, errlen - (size_t)len, "%srank %d at %d%c%d", r ? ", " : "",
                                    r, a->stage, KIND_CHAR[a->kind], a->mb);
                }
            if (len > 0 && (size_t)len < errlen) snprintf(err + len, errlen - (size_t)len, ")");
            st = VR_EINVAL;
            break;
        }
        const PpAction *a = &s->order[pick][next[pick]++];
        double dur = s->action_ns[a->stage * PP_KINDS + a->kind];
        double end = pick_start + dur;
        free_at[pick] = end;
        busy_ns[pick] += dur;
        end_ns[pick] = end;
        int k = a->stage * s->microbatches + a->mb;
        if (a->kind == PP_F) {
            tm.f_end[k] = end;
            if (a->stage + 1 < s->stages) {
                int to = (a->stage + 1) % s->ranks, kn = k + s->microbatches;
                tm.act_at[kn] = to == pick ? end : transfer(s, link_free, pick, to, end, s->send_bytes[a->stage]);
            }
        } else if (a->kind == PP_B || a->kind == PP_I) {
            tm.b_end[k] = end;
            if (a->stage > 0) {
                int to = (a->stage - 1) % s->ranks, kp = k - s->microbatches;
                tm.grad_at[kp] = to == pick ? end
                                            : transfer(s, link_free, pick, to, end, s->send_bytes[a->stage - 1]);
            }
        }
    }
    if (!st) {
        double busy = 0;
        for (int r = 0; r < s->ranks; r++) {
            double e = end_ns[r] + (s->rest_ns ? s->rest_ns[r] : 0);
            if (e > out->step_ns) out->step_ns = e;
            if (end_ns[r] > out->span_ns) out->span_ns = end_ns[r];
            busy += busy_ns[r];
        }
        out->bubble = out->span_ns > 0 ? 1 - busy / (s->ranks * out->span_ns) : 0;
        out->send_ns = s->stages > 1 ? transfer_ns(s, s->send_bytes[0]) : 0;
    }
    free(buf);
    free(next);
    free(free_at);
    return st;
}
