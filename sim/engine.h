/* engine.h: plays a Graph through an allocator and a device, step after step.
 *
 * Each op starts when its stream is free (one compute stream per GPU here; copy and
 * communication streams plug in as further stream indices). At its start the engine allocates
 * its outputs, then its workspaces; when it ends, it frees the workspaces and drops one
 * reference of every tensor in Op.frees. A storage is freed when every reference the graph lists
 * for it (its own and its views') has been dropped: the last user frees it, as CPython's
 * refcounting and autograd's release of saved variables do. Persistent tensors (parameters,
 * .grad, optimizer state) are freed only by a PH_ZERO_GRAD op.
 *
 * Build ops run once before the first step, `once` ops in the first step only. Peaks are reset
 * at every step start, as the measured runs reset them (torch.cuda.reset_peak_memory_stats).
 *
 * Repeated steps. The allocator is deterministic in its calls, so a step that begins in the
 * state (allocator, live storages, slots, handles) the step before it began in, with the same
 * ops to run, makes that step's calls again, and so does every step after it. The engine checks
 * this at each step start against a snapshot of the previous one (alloc_same_state) and, where
 * it holds, times the remaining steps op by op without the allocator: same figures, to the last
 * bit, at a fraction of the cost (SimResult.repeat_from says where it started). */
#ifndef VR_ENGINE_H
#define VR_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "alloc.h"
#include "device.h"
#include "graph.h"

typedef struct EngineConfig {
    int steps;                 /* training steps to simulate (>= 1) */
    int cublas_handles;        /* cuBLAS workspaces created lazily: 1st at the first forward GEMM,
                                  2nd at the first backward allocation (autograd's thread) */
    const DeviceSpec *dev;     /* borrowed */
    const struct CostModel *cost; /* borrowed; NULL: the device's roofline without a profile */
    double host_op_ns;         /* CPU time PyTorch spends dispatching one op (host thread) */
    double host_ckpt_op_ns;    /* the same inside a checkpointed region (0 = host_op_ns) */
    double host_ckpt_region_ns; /* torch.utils.checkpoint's own host time per region: saving the
                                   RNG state, the saved-tensor hooks, setting up recomputation */
    double host_ckpt_saved_ns; /* what a region's forward op adds per tensor it saves for backward
                                  (the pack hook, run once per SavedVariable); 0: the op's class's
                                  ckpt figure (Op.dispatch_ckpt_ns) or host_ckpt_op_ns instead */
    double host_launch_ns;     /* host time of each further kernel launch within one op */
    /* a torch.compile graph's host time (0: a bare launch a kernel, nothing a call): what its
     * generated code spends a kernel (Inductor's Triton launcher, an extern kernel's aten call,
     * its buffers), forward ([0], recomputation too) and backward ([1]), and what calling the
     * graph costs beyond them (dynamo's guards, AOTAutograd's runtime wrapper; its backward node) */
    double host_compiled_kernel_ns[2];
    double host_compiled_call_ns[2];
    /* Contention: how much longer a compute-stream kernel runs while an NCCL collective runs
     * beside it on the same GPU (its kernels take SMs and memory bandwidth), as a fraction of
     * the overlapped time: contention[0] for compute-bound kernels (GEMMs, convolutions, fused
     * attention), contention[1] for memory-bound ones, counted whichever of the kernel and the
     * collective was issued first. The card's own figure (lua/hw/calibrated/<gpu>_contention.lua:
     * measured by validation/harness/measure_contention.py on two GPUs, or published, its header
     * says which); 0 where it has none. */
    double contention[2];
    bool record_timeline;      /* keep memory samples and op spans for trace/CSV outputs */
    /* pages of unified memory (cudaMallocManaged: bitsandbytes' paged optimizer state) outside
     * the allocator: resident on the card in what the allocator's reserve leaves free, the rest
     * evicted to the host by the driver and brought back for the step (dev->host_bw each way) */
    uint64_t managed_bytes;
    bool check_invariants;     /* after every op, check the invariants of engine.c's opening
                                  comment and alloc_check (O(tensors) an op: for tests); a
                                  violation ends the run with VR_EINVAL and says which */
    bool skip_live_at_peak;    /* leave SimResult's live_at_peak, segmap and largest_free_at_peak
                                  empty: a caller that prints none of them saves the log of
                                  allocator calls they are rebuilt from */
    /* optional: every allocation (alloc = true) and free the engine makes, in order, with the
     * block's stream, the op that made it (-1 for the build's parameters) and the simulated host
     * clock then (what PyTorch's own trace stamps as time_us); size is the unrounded request */
    void (*on_alloc)(void *ud, bool alloc, uint64_t addr, uint64_t size, int stream, int op,
                     double host_ns);
    void *on_alloc_ud;
    /* the engine's host memory (its state and the SimResult's arrays), as AllocConfig.host_alloc
     * is the allocator's: NULL = the C library; tests fail the Nth call (tests/test_engine.c) */
    AllocHostFn host_alloc;
    void *host_ud;
} EngineConfig;

typedef struct StepResult {
    uint64_t peak_allocated, peak_reserved;   /* bytes, peaks since this step began */
    uint64_t fwd_peak_allocated;              /* running peak read after forward */
    uint64_t bwd_peak_allocated;              /* running peak read after backward */
    uint64_t end_allocated, end_reserved;     /* after zero_grad */
    uint64_t peak_breakdown[CAT_COUNT];       /* rounded bytes per category at peak allocated */
    double time_ns;                           /* step time */
    double phase_ns[PH_COUNT];                /* busy time per phase (all streams) */
    double stream_busy_ns[STREAM_COUNT];      /* busy time per stream */
    double host_ns;                           /* the host thread's dispatch time (no waits) */
    double host_phase_ns[PH_COUNT];           /* of host_ns, what it spent issuing each phase's ops */
    uint64_t managed_resident;                /* of EngineConfig.managed_bytes, on the card */
    double managed_ns;                        /* the evicted pages' transfers, in time_ns */
    uint64_t num_alloc_retries;               /* cumulative, as torch reports it */
    uint64_t num_cuda_mallocs;                /* cumulative segment allocations */
    uint64_t inactive_split;                  /* bytes at step end */
    int peak_op;                              /* op at whose allocation the peak happened */
    long peak_alloc_index;                    /* allocations into the step at that moment */
} StepResult;

typedef struct MemSample {
    double t_ns;
    uint64_t allocated, reserved;
    uint64_t cat[CAT_COUNT];   /* rounded bytes per category */
    int op;                    /* op that caused the sample */
} MemSample;

typedef struct OpSpan {
    int op, step, stream;
    double start_ns, end_ns;
} OpSpan;

/* A live tensor at the steady-state peak, for reports. */
typedef struct LiveTensor {
    int tensor;
    uint64_t bytes;            /* rounded */
} LiveTensor;

typedef struct SimResult {
    int n_steps;               /* steps completed (without OOM) */
    StepResult *steps;         /* n_steps (+1 if an OOM cut a step short: partial figures) */
    bool oom;
    int oom_step, oom_op;      /* where PyTorch would have raised OutOfMemoryError */
    uint64_t oom_request;      /* bytes the failing allocation asked for */
    AllocOomInfo oom_info;
    uint64_t build_allocated, build_reserved; /* after the build ops (model + optimizer made) */
    MemSample *samples; int n_samples;
    OpSpan *spans; int n_spans;
    LiveTensor *live_at_peak; int n_live_at_peak; /* at the last completed step's peak, or at the
                                                     moment of the OOM; sorted by size desc */
    AllocBlockInfo *segmap; size_t n_segmap;      /* segment map at that moment */
    uint64_t oom_breakdown[CAT_COUNT];            /* rounded bytes per category at the OOM */
    int repeat_from;           /* the first step found to begin as the step before it began, so
                                  that it and the steps after make that step's allocator calls:
                                  their memory figures are its, their times timed op by op
                                  (-1: none; never with a timeline or an allocation listener) */
    uint64_t largest_free_at_peak;
    AllocHostFn host_alloc;    /* EngineConfig's, which engine_result_free frees with */
    void *host_ud;
} SimResult;

/* Runs cfg->steps steps of g through a fresh allocator made from acfg. The caller owns *out
 * (free with engine_result_free). A simulated OOM is a result (res->oom), not an error.
 * Returns VR_EINVAL for an inconsistent graph (message in graph_error-like err), VR_ENOMEM. */
VrStatus engine_run(const Graph *g, const EngineConfig *cfg, const AllocConfig *acfg,
                    SimResult **out /* OUT */, char *err, size_t errlen);
void engine_result_free(SimResult *r); /* NULL is a no-op */

#endif
