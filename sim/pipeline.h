/* pipeline.h: a pipeline-parallel step composed from its stages' actions, as a discrete-event
 * simulation of the ranks running their schedule (torch.distributed.pipelining).
 *
 * Data model. `ranks` pipeline ranks hold `stages` stages (stage s on rank s % ranks, torch's
 * loop placement; several per rank for the interleaved schedules). Each rank runs its compute
 * actions (PpAction: a micro-batch's forward F, full backward B, input-gradient backward I or
 * weight-gradient backward W of one of its stages) one at a time, in its schedule's order; an
 * action's duration comes from the stage's own engine run (PipelineSpec.action_ns). A forward's
 * output goes to the next stage and a backward's input gradient to the previous one as a
 * point-to-point transfer over the link between their ranks; transfers on one directed link run
 * one after another (NCCL's one send stream per peer), beside the compute, which they never stall.
 *
 * An action starts at max(its rank free, its inputs there):
 *   F(s, m)  after F(s-1, m)'s activation arrived (s > 0)
 *   B/I(s,m) after F(s, m) and, but for the last stage, B/I(s+1, m)'s gradient arrived
 *   W(s, m)  after I(s, m)
 * Lockstep (the multi-stage schedules: PipelineScheduleMulti._step_microbatches runs the rank's
 * pipeline_order time step by time step, idle slots included): at each time step a rank runs its
 * action, if any, then posts one batch of point-to-point ops (the sends of its action, the
 * receives for what its neighbours run at that same time step) and waits for all of them
 * (_batch_p2p(ops).wait()). A send completes only once its receiver has posted the receive
 * (NCCL's rendezvous), so a transfer between two neighbours ends at the later of their two
 * actions' ends plus its time, and each of them moves on to its next time step only then: a
 * rank with nothing to compute, or a short forward, waits for its neighbours' step.
 * Invariants: every action runs once; a rank's actions run in its order without overlap;
 * busy_ns[r] == sum of its actions' durations <= end_ns[r]. An order that waits for an action
 * no rank will run first (a deadlock) is VR_EINVAL. */
#ifndef VR_PIPELINE_H
#define VR_PIPELINE_H

#include "collective.h"
#include "vr.h"

typedef enum PpKind { PP_F = 0, PP_B, PP_I, PP_W, PP_KINDS } PpKind;

typedef struct PpAction {
    int stage;             /* global stage index */
    PpKind kind;
    int mb;                /* micro-batch */
    int slot;              /* its time step in the rank's pipeline_order (lockstep schedules) */
} PpAction;

typedef struct PipelineSpec {
    int ranks;                     /* pipeline ranks (pp) */
    int stages;                    /* global stages, a multiple of ranks */
    int microbatches;
    const PpAction *const *order;  /* per rank: its compute actions, in order (borrowed) */
    const int *n_order;            /* per rank: how many */
    const double *action_ns;       /* [stage * PP_KINDS + kind]: one action's time, ns */
    const double *rest_ns;         /* per rank: the step's time after its last action (gradient
                                      reduction, optimizer), ns; NULL: none */
    const double *send_bytes;      /* [s], s < stages - 1: bytes stage s sends to s + 1 per
                                      micro-batch (the gradient back is as large) */
    CollLink link;                 /* the link between pipeline ranks */
    double shape_bytes;            /* > 0: each transfer is preceded by an exchange of its shape,
                                      these bytes both ways (Megatron's variable_seq_lengths) */
    bool lockstep;                 /* the orders run by time step (PpAction.slot), below */
} PipelineSpec;

typedef struct PipelineResult {
    double step_ns;                /* max over ranks of end_ns + rest_ns */
    double span_ns;                /* the pipeline's part: max over ranks of end_ns */
    double bubble;                 /* idle share of the ranks' time in the span:
                                      1 - sum(busy_ns) / (ranks * span_ns) */
    double send_ns;                /* one transfer's time on the link, stage 0's bytes */
} PipelineResult;

/* One pipeline rank's plan (lua/vrsim/pipeline.lua): its schedule and where each action's ops lie
 * in the rank's graph. Owned by its Plan (plan_free frees it with pipeline_plan_free). */
typedef struct PpPlan {
    int ranks;                     /* pipeline ranks (pp) */
    int stages;                    /* global stages */
    int virtual_stages;            /* stages per rank */
    int microbatches;
    int rank;                      /* the pipeline rank this plan simulates */
    int gpus_per_rank;             /* hardware.count / ranks: the stride between pipeline peers */
    char schedule[32];             /* torchtitan's name: "1F1B", "GPipe", ... */
    double send_bytes;             /* bytes a stage sends per micro-batch (activation or gradient) */
    double shape_bytes;            /* PipelineSpec.shape_bytes */
    int *stage_layers;             /* per stage: its decoder layers (stages of them) */
    PpAction *actions;             /* the rank's compute actions, in order (n_actions) */
    int *op_first, *op_end;        /* per action: its ops [op_first, op_end) in the graph */
    int n_actions;
    bool lockstep;                 /* the actions carry their time steps (PpAction.slot) */
} PpPlan;

void pipeline_plan_free(PpPlan *p); /* NULL is a no-op */

/* Time of one point-to-point transfer of `bytes` over the link: its latency plus the bytes at
 * its bandwidth (a send moves the buffer once). */
double pipeline_p2p_ns(const CollLink *link, double bytes);

/* Runs the schedule. end_ns and busy_ns (OUT, `ranks` entries each): when each rank's last
 * action ends and how long it computed. VR_EINVAL (message in err) on a bad spec or a deadlock;
 * VR_ENOMEM. */
VrStatus pipeline_compose(const PipelineSpec *s, PipelineResult *out /* OUT */,
                          double *end_ns /* OUT */, double *busy_ns /* OUT */,
                          char *err, size_t errlen);

#endif
