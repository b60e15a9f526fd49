/* engine.c: plays a graph through the allocator, op by op (see engine.h).
 *
 * State per storage (a tensor that is not a view):
 *   live[s]        the storage holds device memory at addr[s] of rsize[s] rounded bytes
 *   drops_total[s] references the ops of the current step list for s (or any view of it)
 *   drops_done[s]  references dropped so far in this step
 * Invariants, after every op (checked by engine_check when EngineConfig.check_invariants):
 *   a non-persistent storage is live  =>  drops_done < drops_total, or a slot holds it
 *   0 <= drops_done <= drops_total (a reference is never dropped twice)
 *   a live storage holds the allocator's block at addr, of rsize bytes; a view holds none
 *   sum over live storages of rsize == allocator allocated bytes - cuBLAS workspaces
 *   cat_bytes[c] == sum of rsize over live storages of category c
 *   the op just run read live storages only (its inputs' storages of nonzero size: a tensor is
 *   never used after its last reference freed it) and a slot holds a live storage or none
 *   within a step, the host's clock and every stream's clock only move forward, and the step's
 *   clock is at or past each of them
 * Memory follows the host's program order (PyTorch allocates when an op is launched, from the
 * pool of the stream it runs on). Time: the host thread issues ops one after another
 * (host_op_ns each); an op starts when its stream is free, its inputs are ready and it has been
 * issued, and lasts cost_op_ns (or device_op_ns without a calibrated profile). */
#include "engine.h"

#include "cost.h"
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The host memory of one run: EngineConfig.host_alloc (with host_ud), or the C library. Sizes of
 * frees are passed as 0 (the hook's contract frees whenever nsize is 0). */
typedef struct Host { AllocHostFn fn; void *ud; } Host;

static void *h_realloc(const Host *h, void *p, size_t osize, size_t nsize) {
    return vr_host_realloc(h->fn, h->ud, p, osize, nsize);
}

static void *h_malloc(const Host *h, size_t n) { return h_realloc(h, NULL, 0, n ? n : 1); }

static void *h_calloc(const Host *h, size_t n, size_t size) {
    void *p = h_malloc(h, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

static void h_free(const Host *h, void *p) {
    if (p) h_realloc(h, p, 0, 0);
}

typedef struct Run {
    const Graph *g;
    Host host;
    uint64_t refused_bytes;  /* a request the allocator refused as no card's (ALLOC_MAX_REQUEST), */
    const char *refused_what; /* and what it was for (a tensor's or an op's name): engine_run's
                                 message */
    const EngineConfig *cfg;
    Alloc *a;
    int n_t;
    int *storage;          /* tensor -> storage tensor */
    int *drops_total, *drops_done;
    uint64_t *addr, *rsize;
    unsigned char *live;
    uint64_t cat_bytes[CAT_COUNT];
    uint64_t workspace_bytes;   /* cuBLAS workspaces held (category temporaries) */
    int handles;                /* cuBLAS handles created so far */
    double clock_ns;            /* latest end of any stream */
    double stream_ns[STREAM_COUNT]; /* each stream is free from this time */
    double coll_start_ns[STREAM_COUNT], coll_end_ns[STREAM_COUNT]; /* each stream's latest collective */
    /* this step's compute-stream kernels so far, in order (their times as scheduled and whether
     * compute-bound): a collective issued after them can still run beside them, the host being
     * ahead of the device (contended_before) */
    struct Kern { double start, end; unsigned char compute; } *kern;
    int n_kern, cap_kern;
    double *ready_ns;           /* per storage: when its producer finished */
    double busy_ns[STREAM_COUNT];   /* this step: time each stream was busy */
    double host_ns;             /* the host thread has issued everything up to this time */
    double build_host_ns;       /* the build's host time, which the steps' clock starts after */
    int fwd_region;             /* checkpointed region the last forward op ran in (0: none) */
    int compiled_graph;         /* the compiled graph the last kernel ran in, a key of its layer
                                   and direction (compiled_graph_of); 0 after an eager op */
    long alloc_seq;             /* allocations within the current step */
    int slot_held[GRAPH_MAX_SLOTS]; /* storage held in each slot (Op.slot), -1 none */
    char check_err[200];        /* the invariant engine_check found broken */
    double check_stream_ns[STREAM_COUNT], check_host_ns; /* the clocks at the last check, for
                                                            engine_check's monotony */
    /* the allocator calls of the run, in order, for the live set at the peak (see live_log) */
    struct LogEv *log; long n_log, cap_log;
    long *peak_log;             /* per step: log length just after the step's peak allocation */
    double *op_ns;              /* per op: its device time (op_time), valid where op_ns_set */
    unsigned char *op_ns_set;
    bool logging;
    /* the allocator and the live storages as the last step began (alloc_clone), so that the
     * live set at that step's peak is found by replaying that step's calls alone; snap is NULL
     * when none was taken (then the replay starts from the run's start) */
    Alloc *snap;
    long snap_log;              /* log length when it was taken */
    unsigned char *snap_live;
    uint64_t *snap_addr, *snap_rsize;
    /* ... and the rest of what a step's allocator calls depend on, and the step it began */
    uint64_t snap_cat_bytes[CAT_COUNT], snap_workspace_bytes;
    int snap_handles, snap_slot_held[GRAPH_MAX_SLOTS], snap_step;
    /* Repeated steps. From step steady_from on every step runs the same ops (Op.once, at_step
     * and from_step say which run when), so a step that begins in the state an earlier one
     * began in makes the same allocator calls, to the same peaks, as that one did: repeat_of is
     * that earlier step (-1: none found), and the steps from there on are timed op by op
     * without the allocator (op_timing), their memory figures the earlier step's */
    int steady_from, repeat_of;
    SimResult *res;
} Run;

/* One allocator call of the run. Replaying a prefix of the log on a fresh allocator rebuilds
 * the allocator (and the live storages) exactly as they stood at that point of the run, because
 * the allocator is deterministic in its calls: this is how the live set and the segment map at
 * the peak are found without simulating the run a second time. */
typedef enum LogKind { LOG_MALLOC = 0, LOG_FREE, LOG_EMPTY_CACHE, LOG_RESET_PEAKS } LogKind;
typedef struct LogEv {
    uint64_t v;                 /* LOG_MALLOC: requested bytes; LOG_FREE: address */
    int stream;                 /* LOG_MALLOC: the pool's stream */
    int storage;                /* the storage allocated or freed, -1 for workspaces */
    LogKind kind;
} LogEv;

/* Appends one call to the log (when the run keeps one). */
static VrStatus log_ev(Run *r, LogKind kind, uint64_t v, int stream, int storage) {
    if (!r->logging) return VR_OK;
    if (r->n_log == r->cap_log) {
        long ncap = r->cap_log ? r->cap_log * 2 : 4096;
        LogEv *p = h_realloc(&r->host, r->log, (size_t)r->cap_log * sizeof *p, (size_t)ncap * sizeof *p);
        if (!p) return VR_ENOMEM;
        r->log = p;
        r->cap_log = ncap;
    }
    r->log[r->n_log++] = (LogEv){.v = v, .stream = stream, .storage = storage, .kind = kind};
    return VR_OK;
}

static VrStatus grow_array(const Host *h, void **arr, int *n, int *cap, size_t elem) {
    if (*n < *cap) return VR_OK;
    int ncap = *cap ? *cap * 2 : 1024;
    void *p = h_realloc(h, *arr, (size_t)*cap * elem, (size_t)ncap * elem);
    if (!p) return VR_ENOMEM;
    *arr = p;
    *cap = ncap;
    return VR_OK;
}

typedef struct Growth { int cap_samples, cap_spans; } Growth;

static VrStatus sample(Run *r, Growth *gr, int op) {
    if (!r->cfg->record_timeline) return VR_OK;
    SimResult *res = r->res;
    if (grow_array(&r->host, (void **)&res->samples, &res->n_samples, &gr->cap_samples, sizeof(MemSample)))
        return VR_ENOMEM;
    MemSample *m = &res->samples[res->n_samples++];
    m->t_ns = r->clock_ns;
    m->allocated = alloc_allocated_bytes(r->a);
    m->reserved = alloc_reserved_bytes(r->a);
    memcpy(m->cat, r->cat_bytes, sizeof m->cat);
    m->op = op;
    return VR_OK;
}

/* Reports an allocation or free to the optional listener. */
static void notify(Run *r, bool alloc, uint64_t addr, uint64_t size, int op) {
    if (r->cfg->on_alloc)
        r->cfg->on_alloc(r->cfg->on_alloc_ud, alloc, addr, size, alloc_block_stream(r->a, addr), op,
                         r->build_host_ns + r->host_ns);
}

/* The stream whose pool an op's allocations come from (PyTorch's current stream when it runs). */
static int op_stream(const Run *r, int op) {
    return op >= 0 ? graph_op_c(r->g, op)->stream : 0;
}

/* Records the step's peak if allocated memory just rose above it (with the breakdown then). */
static void note_peak(Run *r, StepResult *sr, int op) {
    if (!sr) return;
    uint64_t allocated = alloc_allocated_bytes(r->a); /* cheap: no free-set walk */
    if (allocated <= sr->peak_allocated) return;
    sr->peak_allocated = allocated;
    memcpy(sr->peak_breakdown, r->cat_bytes, sizeof sr->peak_breakdown);
    sr->peak_breakdown[CAT_TEMP] += r->workspace_bytes;
    sr->peak_op = op;
    sr->peak_alloc_index = r->alloc_seq;
    r->peak_log[r->res->n_steps] = r->n_log; /* the step being run is steps[n_steps] */
}

/* alloc_malloc for op; a request the allocator refuses outright (larger than any card,
 * ALLOC_MAX_REQUEST, on a capacity larger still) is noted for engine_run's message. */
static VrStatus dev_malloc(Run *r, uint64_t bytes, int stream, const char *what, uint64_t *addr) {
    VrStatus st = alloc_malloc(r->a, bytes, stream, 0, addr);
    if (st == VR_EINVAL) {
        r->refused_bytes = bytes;
        r->refused_what = what;
    }
    return st;
}

/* Allocates storage s for op; VR_OOM is passed back for the caller to record. */
static VrStatus alloc_storage(Run *r, int s, StepResult *sr, int op) {
    const Tensor *t = graph_tensor_c(r->g, s);
    if (r->live[s]) return VR_OK;
    if (t->bytes == 0) return VR_OK; /* zero-byte tensors never reach the allocator */
    uint64_t addr;
    int stream = op_stream(r, op);
    VrStatus st = dev_malloc(r, t->bytes, stream, t->name, &addr);
    if (st) return st;
    if ((st = log_ev(r, LOG_MALLOC, t->bytes, stream, s))) return st;
    notify(r, true, addr, t->bytes, op);
    r->live[s] = 1;
    r->addr[s] = addr;
    r->rsize[s] = alloc_block_size(r->a, addr);
    r->cat_bytes[t->cat] += r->rsize[s];
    r->alloc_seq++;
    note_peak(r, sr, op);
    return VR_OK;
}

static VrStatus free_storage(Run *r, int s, int op) {
    if (!r->live[s]) return VR_OK;
    const Tensor *t = graph_tensor_c(r->g, s);
    notify(r, false, r->addr[s], t->bytes, op);
    alloc_dealloc(r->a, r->addr[s]);
    r->live[s] = 0;
    r->cat_bytes[t->cat] -= r->rsize[s];
    return log_ev(r, LOG_FREE, r->addr[s], 0, s);
}

static bool runs_in_step(const Op *op, int step) {
    if (op->phase == PH_BUILD || op->hook) return false;
    if (op->once && step > 0) return false;
    if (op->at_step > 0 && step != op->at_step) return false;
    if (op->from_step > 0 && step < op->from_step) return false;
    return true;
}

static void count_drops(Run *r, int step) {
    memset(r->drops_total, 0, sizeof(int) * (size_t)r->n_t);
    memset(r->drops_done, 0, sizeof(int) * (size_t)r->n_t);
    for (int i = 0; i < graph_num_ops(r->g); i++) {
        const Op *op = graph_op_c(r->g, i);
        if (step >= 0 ? !runs_in_step(op, step) : op->phase != PH_BUILD) continue;
        for (int k = 0; k < op->n_frees; k++) r->drops_total[r->storage[op->frees[k]]]++;
    }
}

/* Creates a cuBLAS workspace (a cached allocation never freed, docs/allocator.md 10.1). */
static VrStatus cublas_workspace(Run *r, StepResult *sr, int op) {
    uint64_t bytes = r->cfg->dev ? r->cfg->dev->cublas_workspace_bytes : 0;
    r->handles++;
    if (!bytes) return VR_OK;
    uint64_t addr;
    VrStatus st = dev_malloc(r, bytes, 0, "the cuBLAS workspace", &addr);
    if (st) return st;
    if ((st = log_ev(r, LOG_MALLOC, bytes, 0, -1))) return st;
    notify(r, true, addr, bytes, op);
    r->workspace_bytes += alloc_block_size(r->a, addr);
    r->alloc_seq++;
    note_peak(r, sr, op);
    return VR_OK;
}

/* Allocates op i's outputs (views allocate nothing); a thread's first GEMM creates its cuBLAS
 * workspace right after the first output. */
static VrStatus alloc_outputs(Run *r, const Op *op, int i, StepResult *sr, bool *new_handle) {
    VrStatus st;
    for (int k = 0; k < op->n_outputs; k++) {
        int t = op->outputs[k];
        if (graph_tensor_c(r->g, t)->base < 0) {
            if ((st = alloc_storage(r, t, sr, i))) return st;
        }
        if (*new_handle) {
            if ((st = cublas_workspace(r, sr, i))) return st;
            *new_handle = false;
        }
    }
    return VR_OK;
}

/* Op i's workspaces in the order it allocates them: its own, then the staging buffers of a row
 * sum for the GPU it runs on (Op.rowsum). Returns how many were written to ws. */
static int op_workspaces(const Run *r, const Op *op, uint64_t *ws) {
    int n = op->n_workspace; /* graph_add_op keeps n + 2 <= GRAPH_MAX_WORKSPACES */
    for (int k = 0; k < n; k++) ws[k] = op->workspace[k];
    if (op->rowsum[0] > 0) n += device_row_sum_buffers(r->cfg->dev, op->rowsum[0], op->rowsum[1], ws + n);
    return n;
}

/* Allocates op i's n workspaces of ws bytes (temporaries freed when it ends) into ws_addr. */
static VrStatus alloc_workspaces(Run *r, const Op *op, int i, StepResult *sr, const uint64_t *ws,
                                 int n, uint64_t *ws_addr) {
    VrStatus st;
    for (int k = 0; k < n; k++) {
        if (!ws[k]) continue;
        if ((st = dev_malloc(r, ws[k], op->stream, op->name, &ws_addr[k]))) return st;
        if ((st = log_ev(r, LOG_MALLOC, ws[k], op->stream, -1))) return st;
        notify(r, true, ws_addr[k], ws[k], i);
        r->cat_bytes[CAT_TEMP] += alloc_block_size(r->a, ws_addr[k]);
        r->alloc_seq++;
        note_peak(r, sr, i);
    }
    return VR_OK;
}

/* Frees op i's workspace k (ws bytes) at ws_addr[k], if it holds one, and clears it. */
static VrStatus free_workspace(Run *r, int i, const uint64_t *ws, uint64_t *ws_addr, int k) {
    uint64_t a = ws_addr[k];
    if (!a) return VR_OK;
    r->cat_bytes[CAT_TEMP] -= alloc_block_size(r->a, a);
    notify(r, false, a, ws[k], i);
    alloc_dealloc(r->a, a);
    ws_addr[k] = 0;
    return log_ev(r, LOG_FREE, a, 0, -1);
}

/* Op i's outputs and workspaces in the order Op.workspace_at places them: before output j
 * (1-based) the workspaces placed at j or -j, in their order; those at -j are freed before the
 * output is made, those at j after it. Workspaces placed nowhere (0, or at no output) come after
 * the outputs and are freed with the op, as alloc_workspaces' are. */
static VrStatus alloc_placed(Run *r, const Op *op, int i, StepResult *sr, const uint64_t *ws, int n_ws,
                             uint64_t *ws_addr, bool *new_handle) {
    VrStatus st;
    int n_at = op->n_workspace_at < n_ws ? op->n_workspace_at : n_ws;
    bool placed[GRAPH_MAX_WORKSPACES] = {false};
    for (int j = 1; j <= op->n_outputs; j++) {
        for (int k = 0; k < n_at; k++) {
            if (op->workspace_at[k] != j && op->workspace_at[k] != -j) continue;
            placed[k] = true;
            if ((st = alloc_workspaces(r, op, i, sr, ws + k, 1, ws_addr + k))) return st;
        }
        for (int k = n_at - 1; k >= 0; k--)
            if (op->workspace_at[k] == -j && (st = free_workspace(r, i, ws, ws_addr, k))) return st;
        int t = op->outputs[j - 1];
        if (graph_tensor_c(r->g, t)->base < 0 && (st = alloc_storage(r, t, sr, i))) return st;
        if (*new_handle) {
            if ((st = cublas_workspace(r, sr, i))) return st;
            *new_handle = false;
        }
        for (int k = n_at - 1; k >= 0; k--)
            if (op->workspace_at[k] == j && (st = free_workspace(r, i, ws, ws_addr, k))) return st;
    }
    for (int k = 0; k < n_ws; k++)
        if (!placed[k] && (st = alloc_workspaces(r, op, i, sr, ws + k, 1, ws_addr + k))) return st;
    return VR_OK;
}

/* Compute-bound kinds (GEMM, convolution, fused attention) take contention[0], the others
 * contention[1]. */
static bool compute_bound(const Op *op) {
    return op->kind_id == OPK_MM || op->kind_id == OPK_CONV || op->kind_id == OPK_ATTENTION;
}

/* The time a compute-stream kernel [start, start + dur) loses to collectives issued before it and
 * running beside it (EngineConfig.contention): its kind's fraction of the time it overlaps each
 * stream's latest collective; 0 without a figure. Collectives issued after it: contended_before. */
static double contended_ns(const Run *r, const Op *op, double start, double dur) {
    bool compute = compute_bound(op);
    double f = r->cfg->contention[compute ? 0 : 1];
    if (!(f > 0)) return 0;
    double extra = 0;
    for (int s = STREAM_COMPUTE + 1; s < STREAM_COUNT; s++) {
        double lo = start > r->coll_start_ns[s] ? start : r->coll_start_ns[s];
        double hi = start + dur < r->coll_end_ns[s] ? start + dur : r->coll_end_ns[s];
        if (hi > lo) extra += f * (hi - lo);
    }
    return extra;
}

/* What the compute stream loses to collective op [start, end), issued after kernels that run
 * beside it: the host issues a prefetched all-gather while the kernels of the layers before are
 * still queued, so it overlaps kernels that were timed before it (contended_ns sees only the
 * collectives issued before a kernel). Each kernel already timed loses the fraction of its kind
 * (EngineConfig.contention) of its time beside the collective; the stream takes that time at its
 * tail, after the kernels already queued, which moves the step's end as stretching each would. */
static double contended_before(const Run *r, double start, double end) {
    if (!(r->cfg->contention[0] > 0 || r->cfg->contention[1] > 0)) return 0;
    double extra = 0;
    for (int k = r->n_kern - 1; k >= 0 && r->kern[k].end > start; k--) {
        double lo = r->kern[k].start > start ? r->kern[k].start : start;
        double hi = r->kern[k].end < end ? r->kern[k].end : end;
        if (hi > lo) extra += r->cfg->contention[r->kern[k].compute ? 0 : 1] * (hi - lo);
    }
    return extra;
}

/* Op i's device time before contention: cost_op_ns (or device_op_ns without a calibrated
 * profile), a function of the op and the model alone, so worked out once per op and kept for
 * the steps after. */
static double op_time(Run *r, int i, const Op *op) {
    if (r->op_ns_set[i]) return r->op_ns[i];
    double dur = op->device_ns > 0 ? op->device_ns /* measured for this op (Op.device_ns) */
               : r->cfg->cost ? cost_op_ns(r->cfg->cost, op)
               : r->cfg->dev ? device_op_ns(r->cfg->dev, op) : 0.0;
    r->op_ns[i] = dur;
    r->op_ns_set[i] = 1;
    return dur;
}

/* Which compiled graph op belongs to, as Run.compiled_graph holds it: one per layer and direction
 * (torch.compile on each block: its forward graph, rerun in a recomputation, and its backward). */
static int compiled_graph_of(const Op *op) {
    return (op->layer + 2) * 2 + (op->phase == PH_BWD ? 1 : 0);
}

/* Op i's times: the host's dispatch, the op's start (its stream free, its inputs ready, the
 * host past its launch) and end, and the stream and step figures they add to. Apart from the
 * allocator: a step whose allocator calls repeat an earlier step's is timed by this alone
 * (simulate). Returns the op's device time (contention included); it ran from *start_out. */
static double op_timing(Run *r, int i, const Op *op, StepResult *sr, double *start_out) {
    /* time: the op starts when its stream is free and its inputs are ready */
    double dur = op_time(r, i, op);
    int sid = op->stream;
    double host_was = r->host_ns;
    /* entering a checkpointed region in forward: checkpoint()'s own work, once per region (its
     * recomputation's set-up included) */
    if (op->phase == PH_FWD) {
        if (op->region > 0 && op->region != r->fwd_region && !op->compiled)
            r->host_ns += r->cfg->host_ckpt_region_ns;
        r->fwd_region = op->region;
    }
    /* the host thread issues ops one after another; a kernel cannot start before its launch.
     * An op of a measured class costs its class's dispatch (launches included), and in a
     * checkpointed region what checkpointing adds to that class; any other op the one per-op
     * figure of module-heavy code (of checkpointed code in a region), and each further kernel
     * a bare launch */
    /* what checkpointing adds to an op is its saved-tensor hooks: pack in forward and in the
     * recomputation, unpack in backward (torch/utils/checkpoint.py _checkpoint_hook,
     * _recomputation_hook), run where a SavedVariable is made. An op that records no autograd
     * node (no input that needs a gradient: LoRA's modulation of the frozen timestep embedding,
     * a block's ops before its first adapter) makes none, so it is issued, and re-issued in
     * the recomputation, at its plain cost */
    bool records = op->phase == PH_BWD ||
                   (op->phase == PH_FWD && graph_op_records_autograd(r->g, i)) ||
                   (op->phase == PH_RECOMPUTE && op->fwd_op >= 0 &&
                    graph_op_records_autograd(r->g, op->fwd_op));
    bool in_region = (op->region > 0 || op->in_ckpt) && records;
    /* in a region's forward, checkpointing's cost is its pack hook, once per tensor the op saves
     * (an op that saves none costs its plain figure) */
    bool per_saved = in_region && op->phase == PH_FWD && r->cfg->host_ckpt_saved_ns > 0;
    double saved_ns = per_saved ? op->n_saves * r->cfg->host_ckpt_saved_ns : 0;
    if (op->compiled) {
        /* a compiled graph's code launches its kernels itself, none for an op fused into another's
         * kernel (Op.compiled): each at what the generated code spends a kernel where the profile
         * measured it, else a bare launch; and a call of the graph (a layer's, in one direction)
         * once, when its first kernel is issued */
        if (op->compiled == 1 && op->kind_id != OPK_NONE) {
            int dir = op->phase == PH_BWD ? 1 : 0;
            double k_ns = r->cfg->host_compiled_kernel_ns[dir] > 0 ? r->cfg->host_compiled_kernel_ns[dir]
                                                                  : r->cfg->host_launch_ns;
            r->host_ns += (op->kernels > 1 ? op->kernels : 1) * k_ns;
            int g = compiled_graph_of(op);
            if (g != r->compiled_graph) r->host_ns += r->cfg->host_compiled_call_ns[dir];
            r->compiled_graph = g;
        }
    } else if (op->has_dispatch) {
        r->host_ns += op->dispatch_ns + (per_saved ? saved_ns : in_region ? op->dispatch_ckpt_ns : 0);
        r->compiled_graph = 0;
    } else if (op->kind_id != OPK_NONE) {
        bool ck = in_region && r->cfg->host_ckpt_op_ns > 0 && !per_saved;
        r->compiled_graph = 0;
        r->host_ns += (ck ? r->cfg->host_ckpt_op_ns : r->cfg->host_op_ns) + saved_ns;
        /* one dispatch, then each further kernel the op launches (foreach chunks, a GEMM
         * backward's second GEMM) costs a bare launch */
        if (op->kernels > 1) r->host_ns += (op->kernels - 1) * r->cfg->host_launch_ns;
    }
    /* work the host does per tensor (an optimizer step's bookkeeping, zero_grad's loop), measured
     * with the dispatch costs, so only where those are modelled */
    if (r->cfg->host_op_ns > 0) r->host_ns += op->host_extra_ns;
    if (sr) sr->host_phase_ns[op->phase] += r->host_ns - host_was;
    double start = r->stream_ns[sid] > r->host_ns ? r->stream_ns[sid] : r->host_ns;
    for (int k = 0; k < op->n_inputs; k++) {
        double rd = r->ready_ns[r->storage[op->inputs[k]]];
        if (rd > start) start = rd;
    }
    /* compute work that follows a collective in program order waits for it when it consumes
     * its result; the optimizer waits for every stream (the step's gradients are complete) */
    if (op->phase == PH_OPTIM && sid == STREAM_COMPUTE)
        for (int k = 1; k < STREAM_COUNT; k++)
            if (r->stream_ns[k] > start) start = r->stream_ns[k];
    if (op->wait_stream > 0 && op->wait_stream < STREAM_COUNT && r->stream_ns[op->wait_stream] > start)
        start = r->stream_ns[op->wait_stream];
    if (dur > 0 && sid == STREAM_COMPUTE) dur += contended_ns(r, op, start, dur);
    double end = start + dur;
    if (dur > 0) r->stream_ns[sid] = end;
    if (dur > 0 && sid == STREAM_COMPUTE && r->n_kern < r->cap_kern)
        r->kern[r->n_kern++] = (struct Kern){start, end, compute_bound(op)};
    if (dur > 0 && sid != STREAM_COMPUTE && op->kind_id == OPK_COLLECTIVE) {
        r->coll_start_ns[sid] = start, r->coll_end_ns[sid] = end;
        double lost = contended_before(r, start, end);
        if (lost > 0) {
            r->stream_ns[STREAM_COMPUTE] += lost;
            r->busy_ns[STREAM_COMPUTE] += lost;
            if (r->stream_ns[STREAM_COMPUTE] > r->clock_ns) r->clock_ns = r->stream_ns[STREAM_COMPUTE];
        }
    }
    for (int k = 0; k < op->n_outputs; k++) r->ready_ns[r->storage[op->outputs[k]]] = end;
    /* torch.cuda.synchronize() after the op: the host goes on once every stream is done */
    if (op->sync)
        for (int k = 0; k < STREAM_COUNT; k++)
            if (r->stream_ns[k] > r->host_ns) r->host_ns = r->stream_ns[k];
    if (end > r->clock_ns) r->clock_ns = end;
    if (r->host_ns > r->clock_ns) r->clock_ns = r->host_ns;
    r->busy_ns[sid] += dur;
    if (sr) sr->phase_ns[op->phase] += dur;
    *start_out = start;
    return dur;
}

/* Runs one op. Returns VR_OOM when an allocation fails (recorded by the caller). */
static VrStatus run_op(Run *r, int i, int step, StepResult *sr, Growth *gr) {
    const Graph *g = r->g;
    const Op *op = graph_op_c(g, i);
    VrStatus st;
    if (op->kind_id == OPK_EMPTY_CACHE) { /* torch.cuda.empty_cache() */
        alloc_empty_cache(r->a);
        if ((st = log_ev(r, LOG_EMPTY_CACHE, 0, 0, -1))) return st;
        return sample(r, gr, i);
    }
    /* a thread's first GEMM creates its cuBLAS handle and workspace when the GEMM runs: after
     * the op's first output is allocated (the autograd thread has a handle of its own: its
     * workspace comes with backward's first GEMM, fulltrace_pub-c05 after the loss's backward
     * allocations; fulltrace_dev-x2-zero1-trace after lm_head's weight gradient) */
    uint64_t ws[GRAPH_MAX_WORKSPACES];
    int n_ws = op_workspaces(r, op, ws);
    bool allocates = op->n_outputs > 0 || n_ws > 0;
    bool new_handle = false;
    if (r->handles < r->cfg->cublas_handles && allocates) {
        bool first_fwd_gemm = r->handles == 0 && op->kind_id == OPK_MM &&
                              (op->phase == PH_FWD || op->phase == PH_RECOMPUTE);
        bool first_bwd = r->handles == 1 && op->phase == PH_BWD && op->kind_id == OPK_MM;
        new_handle = first_fwd_gemm || first_bwd;
    }
    if (new_handle && op->n_outputs == 0) {
        if ((st = cublas_workspace(r, sr, i))) return st;
        new_handle = false;
    }
    /* the slot's previous tensor goes first (its space may serve this op's outputs), or once
     * they are allocated */
    int slot_prev = op->slot > 0 ? r->slot_held[op->slot] : -1;
    if (slot_prev >= 0 && !op->slot_free_after) {
        if ((st = free_storage(r, slot_prev, i))) return st;
        slot_prev = -1;
    }
    if (op->slot > 0) r->slot_held[op->slot] = -1;
    uint64_t ws_addr[GRAPH_MAX_WORKSPACES] = {0};
    if (op->n_workspace_at > 0) {
        /* a derivative formula whose temporaries come and go between its gradients */
        if ((st = alloc_placed(r, op, i, sr, ws, n_ws, ws_addr, &new_handle))) return st;
    } else {
        /* most kernels allocate their results and then scratch; a composite derivative formula
         * (PowBackward0, a broadcast MulBackward0) computes its temporaries first */
        for (int pass = 0; pass < 2; pass++) {
            if ((pass == 0) == op->workspace_first) {
                if ((st = alloc_workspaces(r, op, i, sr, ws, n_ws, ws_addr))) return st;
            } else {
                if ((st = alloc_outputs(r, op, i, sr, &new_handle))) return st;
            }
        }
    }
    if (slot_prev >= 0 && (st = free_storage(r, slot_prev, i))) return st;
    double start;
    double dur = op_timing(r, i, op, sr, &start);
    double end = start + dur;
    int sid = op->stream;
    if (r->cfg->record_timeline && op->phase != PH_BUILD && dur > 0) {
        SimResult *res = r->res;
        if (grow_array(&r->host, (void **)&res->spans, &res->n_spans, &gr->cap_spans, sizeof(OpSpan)))
            return VR_ENOMEM;
        res->spans[res->n_spans++] = (OpSpan){.op = i, .step = step, .stream = sid,
                                              .start_ns = start, .end_ns = end};
    }
    for (int k = n_ws - 1; k >= 0; k--)
        if ((st = free_workspace(r, i, ws, ws_addr, k))) return st;
    for (int k = 0; k < op->n_frees; k++) {
        int s = r->storage[op->frees[k]];
        const Tensor *ts = graph_tensor_c(g, s);
        if (ts->persistent) {
            if ((op->phase == PH_ZERO_GRAD || op->phase == PH_BUILD || op->drop_persistent) &&
                (st = free_storage(r, s, i)))
                return st;
            continue;
        }
        if (++r->drops_done[s] >= r->drops_total[s] && (st = free_storage(r, s, i))) return st;
    }
    /* the slot keeps the first output; other outputs nobody holds die with the op (a result
     * nobody reads) */
    if (op->slot > 0 && op->n_outputs > 0) r->slot_held[op->slot] = r->storage[op->outputs[0]];
    for (int k = op->slot > 0 ? 1 : 0; k < op->n_outputs; k++) {
        int s = r->storage[op->outputs[k]];
        if (!graph_tensor_c(g, s)->persistent && r->drops_total[s] == 0 &&
            (st = free_storage(r, s, i)))
            return st;
    }
    return sample(r, gr, i);
}

static bool held_in_slot(const Run *r, int s) {
    for (int k = 0; k < GRAPH_MAX_SLOTS; k++)
        if (r->slot_held[k] == s) return true;
    return false;
}

/* Sets engine_check's record of the clocks to where they stand now (at a step's start, where
 * the engine moves every stream to the step's start time). */
static void check_clocks_from(Run *r) {
    memcpy(r->check_stream_ns, r->stream_ns, sizeof r->check_stream_ns);
    r->check_host_ns = r->host_ns;
}

/* The first broken invariant about tensors after op (-1: the build's parameters), with the
 * tensor in *bad; NULL when none is. */
static const char *check_tensors(const Run *r, int op, int *bad) {
    const Graph *g = r->g;
    for (int s = 0; s < r->n_t; s++) {
        const Tensor *t = graph_tensor_c(g, s);
        *bad = s;
        if (r->drops_done[s] < 0 || r->drops_done[s] > r->drops_total[s])
            return "references dropped outside 0 .. the references listed";
        if (!r->live[s]) continue;
        if (t->base >= 0) return "a view holds memory";
        if (alloc_block_size(r->a, r->addr[s]) != r->rsize[s])
            return "the allocator's block at its address is not its size";
        if (!t->persistent && r->drops_done[s] >= r->drops_total[s] && !held_in_slot(r, s))
            return "live after its last reference was dropped";
    }
    if (op >= 0) {
        const Op *o = graph_op_c(g, op);
        for (int k = 0; k < o->n_inputs; k++) {
            int s = r->storage[o->inputs[k]];
            *bad = s;
            /* an input the op itself frees was live when it ran */
            bool freed_here = false;
            for (int f = 0; f < o->n_frees; f++) freed_here |= r->storage[o->frees[f]] == s;
            if (!r->live[s] && !freed_here && graph_tensor_c(g, s)->bytes > 0 &&
                !graph_tensor_c(g, s)->persistent)
                return "read by the op after its last reference freed it";
        }
    }
    for (int k = 0; k < GRAPH_MAX_SLOTS; k++) {
        int s = r->slot_held[k];
        *bad = s;
        if (s >= 0 && !r->live[s] && graph_tensor_c(g, s)->bytes > 0) return "held in a slot but not live";
    }
    return NULL;
}

/* The first broken invariant about the clocks since the last check, NULL if none. */
static const char *check_clocks(Run *r) {
    if (r->host_ns < r->check_host_ns) return "the host's clock went back";
    for (int k = 0; k < STREAM_COUNT; k++) {
        if (r->stream_ns[k] < r->check_stream_ns[k]) return "a stream's clock went back";
        if (r->stream_ns[k] > r->clock_ns) return "a stream's clock is past the step's clock";
    }
    if (r->host_ns > r->clock_ns) return "the host's clock is past the step's clock";
    check_clocks_from(r);
    return NULL;
}

/* engine_check: the invariants of the opening comment as they stand after op (-1: the build's
 * parameters), and the allocator's own (alloc_check), as alloc_check checks the allocator's.
 * VR_EINVAL with r->check_err set where one is broken. */
static VrStatus engine_check(Run *r, int op) {
    const Graph *g = r->g;
    const char *name = op >= 0 ? graph_op_c(g, op)->name : "(parameters)";
    int bad = -1;
    const char *why = check_tensors(r, op, &bad);
    if (why) {
        snprintf(r->check_err, sizeof r->check_err, "engine invariant after op '%s': tensor '%s': %s",
                 name, graph_tensor_c(g, bad)->name, why);
        return VR_EINVAL;
    }
    uint64_t cat[CAT_COUNT] = {0}, sum = 0;
    for (int s = 0; s < r->n_t; s++) {
        if (!r->live[s]) continue;
        cat[graph_tensor_c(g, s)->cat] += r->rsize[s];
        sum += r->rsize[s];
    }
    AllocStats as;
    alloc_stats(r->a, &as);
    if (sum + r->workspace_bytes != as.allocated)
        why = "live storages + cuBLAS workspaces != the allocator's allocated bytes";
    for (int c = 0; !why && c < CAT_COUNT; c++)
        if (cat[c] != r->cat_bytes[c]) why = "a category's bytes != the sum of its live storages";
    if (!why) why = check_clocks(r);
    if (!why && alloc_check(r->a) != VR_OK) why = "the allocator's own invariants (alloc_check)";
    if (why) {
        snprintf(r->check_err, sizeof r->check_err, "engine invariant after op '%s': %s", name, why);
        return VR_EINVAL;
    }
    return VR_OK;
}

static void record_oom(Run *r, int step, int op) {
    SimResult *res = r->res;
    res->oom = true;
    res->oom_step = step;
    res->oom_op = op;
    alloc_last_oom(r->a, &res->oom_info);
    res->oom_request = res->oom_info.requested;
}

static void step_end_stats(Run *r, StepResult *sr) {
    AllocStats as;
    alloc_stats(r->a, &as);
    sr->peak_reserved = as.reserved_peak;
    if (as.allocated_peak > sr->peak_allocated) sr->peak_allocated = as.allocated_peak;
    sr->end_allocated = as.allocated;
    sr->end_reserved = as.reserved;
    sr->num_alloc_retries = as.num_alloc_retries;
    sr->num_cuda_mallocs = as.num_segment_allocs;
    sr->inactive_split = as.inactive_split;
}

static void drop_snapshot(Run *r) {
    alloc_free(r->snap);
    h_free(&r->host, r->snap_live);
    h_free(&r->host, r->snap_addr);
    h_free(&r->host, r->snap_rsize);
    r->snap = NULL;
    r->snap_live = NULL;
    r->snap_addr = r->snap_rsize = NULL;
}

/* Keeps the allocator and the live storages as they stand at the start of step in r->snap (see
 * Run), in place of any earlier one. Without the host memory for it, none is kept: collect_peak
 * then replays from the start, to the same answer, and no step is found repeated. */
static void take_snapshot(Run *r, int step) {
    drop_snapshot(r);
    size_t n = (size_t)r->n_t + 1;
    r->snap_live = h_malloc(&r->host, n);
    r->snap_addr = h_malloc(&r->host, n * sizeof(uint64_t));
    r->snap_rsize = h_malloc(&r->host, n * sizeof(uint64_t));
    if (!r->snap_live || !r->snap_addr || !r->snap_rsize || alloc_clone(r->a, &r->snap) != VR_OK) {
        drop_snapshot(r);
        return;
    }
    memcpy(r->snap_live, r->live, n);
    memcpy(r->snap_addr, r->addr, n * sizeof(uint64_t));
    memcpy(r->snap_rsize, r->rsize, n * sizeof(uint64_t));
    memcpy(r->snap_cat_bytes, r->cat_bytes, sizeof r->snap_cat_bytes);
    r->snap_workspace_bytes = r->workspace_bytes;
    r->snap_handles = r->handles;
    memcpy(r->snap_slot_held, r->slot_held, sizeof r->snap_slot_held);
    r->snap_log = r->n_log;
    r->snap_step = step;
}

/* Whether the run stands where it stood when the snapshot was taken, in all that its allocator
 * calls depend on: the allocator, the live storages at their addresses, the slots, the cuBLAS
 * handles (the clocks start afresh each step, and no input is ready after a step's start). */
static bool same_as_snapshot(const Run *r) {
    if (!r->snap || r->handles != r->snap_handles || r->workspace_bytes != r->snap_workspace_bytes ||
        memcmp(r->cat_bytes, r->snap_cat_bytes, sizeof r->cat_bytes) != 0 ||
        memcmp(r->slot_held, r->snap_slot_held, sizeof r->slot_held) != 0)
        return false;
    for (int t = 0; t < r->n_t; t++) {
        if (r->live[t] != r->snap_live[t]) return false;
        if (r->live[t] && (r->addr[t] != r->snap_addr[t] || r->rsize[t] != r->snap_rsize[t]))
            return false;
    }
    return alloc_same_state(r->a, r->snap);
}

/* The order a step runs its ops in, position k of 2 x the graph's ops: pass 0 the ops that
 * open the step (Op.step_start), pass 1 the rest, each in graph order. The op at position k,
 * or NULL where none runs there (k % n_ops is its index). */
static const Op *step_op(const Graph *g, int step, int k) {
    int n_ops = graph_num_ops(g);
    const Op *op = graph_op_c(g, k % n_ops);
    return runs_in_step(op, step) && op->step_start == (k < n_ops) ? op : NULL;
}

/* The first step from which every step runs the same ops (see runs_in_step). */
static int steady_step(const Graph *g) {
    int from = 1;
    for (int i = 0; i < graph_num_ops(g); i++) {
        const Op *op = graph_op_c(g, i);
        if (op->at_step > 0 && op->at_step + 1 > from) from = op->at_step + 1;
        if (op->from_step > from) from = op->from_step;
    }
    return from;
}

/* Step `step` of a run whose allocator calls repeat those of step r->repeat_of: its ops timed
 * (op_timing, in step_op's order, as simulate runs them), its memory figures those of that step, the
 * cumulative counters grown by what that step added. */
static void time_repeated_step(Run *r, int step, StepResult *sr) {
    const Graph *g = r->g;
    int n_ops = graph_num_ops(g);
    const StepResult *like = &r->res->steps[r->repeat_of];
    const StepResult *before = &r->res->steps[r->repeat_of - 1];
    *sr = *like;
    memset(sr->phase_ns, 0, sizeof sr->phase_ns);
    memset(sr->host_phase_ns, 0, sizeof sr->host_phase_ns);
    if (step > 0) {
        const StepResult *prev = &r->res->steps[step - 1];
        sr->num_alloc_retries = prev->num_alloc_retries + (like->num_alloc_retries - before->num_alloc_retries);
        sr->num_cuda_mallocs = prev->num_cuda_mallocs + (like->num_cuda_mallocs - before->num_cuda_mallocs);
    }
    r->peak_log[step] = r->peak_log[r->repeat_of];
    for (int k = 0; k < 2 * n_ops; k++) {
        const Op *op = step_op(g, step, k);
        if (!op || op->kind_id == OPK_EMPTY_CACHE) continue;
        double start;
        (void)op_timing(r, k % n_ops, op, sr, &start);
    }
}

/* Unified memory outside the allocator (EngineConfig.managed_bytes): the driver gives the
 * allocator's cudaMalloc the card first, evicting managed pages to the host when it needs them, so
 * the pages never make an OOM; what the step's peak reserve leaves of the card holds them, and
 * the rest goes out during forward and backward and comes back for the optimizer step (bitsandbytes
 * prefetches the paged state before it), each way over the host link, after the step's work. */
static void page_managed(Run *r, StepResult *sr) {
    uint64_t m = r->cfg->managed_bytes;
    sr->managed_resident = 0;
    sr->managed_ns = 0;
    if (!m) return;
    /* the card's memory, not the allocator's cap: a memory fraction limits the allocator only */
    const DeviceSpec *d = r->cfg->dev;
    uint64_t card = d && d->total_bytes > d->context_bytes ? d->total_bytes - d->context_bytes : 0;
    uint64_t room = !d ? m : card > sr->peak_reserved ? card - sr->peak_reserved : 0;
    sr->managed_resident = m < room ? m : room;
    uint64_t out = m - sr->managed_resident;
    double bw = d ? d->host_bw : 0;
    if (out && bw > 0) {
        sr->managed_ns = 2.0 * (double)out / bw * 1e9;
        r->clock_ns += sr->managed_ns;
    }
}

/* Whether any op, of any phase, reads, saves or frees tensor t (by id, as the graph holds it). */
static bool referenced(const Graph *g, int t) {
    for (int i = 0; i < graph_num_ops(g); i++) {
        const Op *op = graph_op_c(g, i);
        for (int k = 0; k < op->n_inputs; k++) if (op->inputs[k] == t) return true;
        for (int k = 0; k < op->n_saves; k++) if (op->saves[k] == t) return true;
        for (int k = 0; k < op->n_frees; k++) if (op->frees[k] == t) return true;
    }
    return false;
}

/* One full pass: build, then the steps. */
static VrStatus simulate(Run *r) {
    const Graph *g = r->g;
    VrStatus st = VR_OK;
    Growth gr = {0};
    SimResult *res = r->res;
    int n_ops = graph_num_ops(g);

    /* build: tensors no op produces (parameters, inputs) in declaration order, then build ops */
    count_drops(r, -1);
    for (int t = 0; t < r->n_t; t++) {
        const Tensor *tt = graph_tensor_c(g, t);
        if (tt->producer >= 0 || tt->base >= 0) continue;
        if ((st = alloc_storage(r, t, NULL, -1))) {
            if (st == VR_OOM) { record_oom(r, -1, -1); return VR_OK; }
            return st;
        }
        /* one no op reads and no one keeps dies at once, its segment left cached: transformers'
         * caching_allocator_warmup, torch.empty of the model's bytes dropped before the load
         * (lua/strategies/warmup.lua) */
        if (!tt->persistent && r->drops_total[t] == 0 && !referenced(g, t) &&
            (st = free_storage(r, t, -1)))
            return st;
    }
    bool check = r->cfg->check_invariants;
    if (check && (st = engine_check(r, -1))) return st;
    for (int i = 0; i < n_ops; i++) {
        if (graph_op_c(g, i)->phase != PH_BUILD) continue;
        if ((st = run_op(r, i, -1, NULL, &gr))) {
            if (st == VR_OOM) { record_oom(r, -1, i); return VR_OK; }
            return st;
        }
        if (check && (st = engine_check(r, i))) return st;
    }
    AllocStats as;
    alloc_stats(r->a, &as);
    res->build_allocated = as.allocated;
    res->build_reserved = as.reserved;
    r->build_host_ns = r->host_ns;
    r->clock_ns = 0;

    /* a repeated step is found only where nothing watches the steps' allocator calls one by
     * one (the timeline's memory samples, the allocation listener) */
    bool may_repeat = !r->cfg->record_timeline && !r->cfg->on_alloc;
    for (int step = 0; step < r->cfg->steps; step++) {
        StepResult *sr = &res->steps[step];
        bool last = step == r->cfg->steps - 1;
        if (r->repeat_of < 0) {
            memset(sr, 0, sizeof *sr);
            sr->peak_op = -1;
            r->peak_log[step] = -1;
            alloc_reset_peaks(r->a);
            if ((st = log_ev(r, LOG_RESET_PEAKS, 0, 0, -1))) return st;
            alloc_stats(r->a, &as);
            sr->peak_allocated = as.allocated;
            memcpy(sr->peak_breakdown, r->cat_bytes, sizeof sr->peak_breakdown);
            sr->peak_breakdown[CAT_TEMP] += r->workspace_bytes;
            count_drops(r, step);
            /* this step begins where the step before began: it, and every step after, repeats
             * that one (the snapshot of its start stays, for collect_peak) */
            if (may_repeat && r->snap && r->snap_step == step - 1 && step - 1 >= r->steady_from &&
                same_as_snapshot(r))
                r->repeat_of = step - 1, res->repeat_from = step;
            else if ((may_repeat && step >= r->steady_from && !last) || (r->logging && last))
                take_snapshot(r, step);
        }
        r->alloc_seq = 0;
        double t0 = r->clock_ns;
        for (int k = 0; k < STREAM_COUNT; k++)
            r->stream_ns[k] = t0, r->busy_ns[k] = 0, r->coll_start_ns[k] = r->coll_end_ns[k] = 0;
        r->n_kern = 0;
        r->host_ns = t0;
        r->fwd_region = 0;
        r->compiled_graph = 0;
        check_clocks_from(r);
        if (r->repeat_of >= 0) {
            time_repeated_step(r, step, sr);
        } else {
            Phase prev = PH_FWD;
            for (int k = 0; k < 2 * n_ops; k++) {
                const Op *op = step_op(g, step, k);
                if (!op) continue;
                int i = k % n_ops;
                if (op->phase != prev) {
                    alloc_stats(r->a, &as);
                    if (prev == PH_FWD) sr->fwd_peak_allocated = as.allocated_peak;
                    if ((prev == PH_BWD || prev == PH_RECOMPUTE) && op->phase >= PH_OPTIM)
                        sr->bwd_peak_allocated = as.allocated_peak;
                    prev = op->phase;
                }
                st = run_op(r, i, step, sr, &gr);
                if (st == VR_OOM) {
                    record_oom(r, step, i);
                    step_end_stats(r, sr);
                    return VR_OK;
                }
                if (st) return st;
                if (check && (st = engine_check(r, i))) return st;
            }
            step_end_stats(r, sr);
        }
        page_managed(r, sr);
        sr->time_ns = r->clock_ns - t0;
        for (int k = 0; k < STREAM_COUNT; k++) sr->stream_busy_ns[k] = r->busy_ns[k];
        sr->host_ns = r->host_ns - t0; /* the host never waits in this model: all dispatch */
        res->n_steps = step + 1;
    }
    return VR_OK;
}

static void run_free(Run *r) {
    alloc_free(r->a);
    h_free(&r->host, r->storage);
    h_free(&r->host, r->drops_total);
    h_free(&r->host, r->drops_done);
    h_free(&r->host, r->addr);
    h_free(&r->host, r->rsize);
    h_free(&r->host, r->live);
    h_free(&r->host, r->ready_ns);
    h_free(&r->host, r->log);
    h_free(&r->host, r->peak_log);
    h_free(&r->host, r->op_ns);
    h_free(&r->host, r->op_ns_set);
    h_free(&r->host, r->kern);
    drop_snapshot(r);
}

static VrStatus run_init(Run *r, const Graph *g, const EngineConfig *cfg,
                         const AllocConfig *acfg, SimResult *res) {
    memset(r, 0, sizeof *r);
    r->g = g;
    r->cfg = cfg;
    r->res = res;
    r->host = (Host){cfg->host_alloc, cfg->host_ud};
    r->logging = !cfg->skip_live_at_peak;
    r->steady_from = steady_step(g);
    r->repeat_of = -1;
    for (int k = 0; k < GRAPH_MAX_SLOTS; k++) r->slot_held[k] = -1;
    r->n_t = graph_num_tensors(g);
    size_t n = (size_t)r->n_t + 1;
    const Host *h = &r->host;
    r->storage = h_malloc(h, n * sizeof(int));
    r->drops_total = h_malloc(h, n * sizeof(int));
    r->drops_done = h_malloc(h, n * sizeof(int));
    r->addr = h_calloc(h, n, sizeof(uint64_t));
    r->rsize = h_calloc(h, n, sizeof(uint64_t));
    r->live = h_calloc(h, n, 1);
    r->ready_ns = h_calloc(h, n, sizeof(double));
    r->peak_log = h_calloc(h, (size_t)cfg->steps + 1, sizeof(long));
    size_t n_ops = (size_t)graph_num_ops(g) + 1;
    r->op_ns = h_malloc(h, n_ops * sizeof(double));
    r->op_ns_set = h_calloc(h, n_ops, 1);
    /* a step runs each op at most twice (step_op); only a run with contention keeps its kernels */
    if (cfg->contention[0] > 0 || cfg->contention[1] > 0) {
        r->kern = h_malloc(h, 2 * n_ops * sizeof *r->kern);
        if (!r->kern) return VR_ENOMEM;
        r->cap_kern = (int)(2 * n_ops);
    }
    if (!r->op_ns || !r->op_ns_set || !r->peak_log || !r->ready_ns || !r->storage || !r->drops_total || !r->drops_done || !r->addr || !r->rsize || !r->live)
        return VR_ENOMEM;
    for (int t = 0; t < r->n_t; t++) r->storage[t] = graph_storage_of(g, t);
    return alloc_new(acfg, &r->a);
}

static int cmp_live(const void *a, const void *b) {
    const LiveTensor *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->tensor - y->tensor;
}

/* Copies r's live tensors (sorted by size) and segment map into res: the moment r stands at. */
static VrStatus copy_live_set(Run *r, SimResult *res) {
    int n = 0;
    for (int t = 0; t < r->n_t; t++) n += r->live[t];
    res->live_at_peak = h_malloc(&r->host, sizeof(LiveTensor) * (size_t)(n + 1));
    if (!res->live_at_peak) return VR_ENOMEM;
    for (int t = 0; t < r->n_t; t++)
        if (r->live[t]) res->live_at_peak[res->n_live_at_peak++] = (LiveTensor){t, r->rsize[t]};
    qsort(res->live_at_peak, (size_t)res->n_live_at_peak, sizeof(LiveTensor), cmp_live);
    VrStatus st = alloc_segment_map(r->a, &res->segmap, &res->n_segmap);
    AllocStats as;
    alloc_stats(r->a, &as);
    res->largest_free_at_peak = as.largest_free_block;
    return st;
}

/* The live set and the segment map at the peak of `step`: the run's allocator calls up to that
 * step's peak allocation replayed (the engine is not run again), the live storages followed
 * through the same calls; from the snapshot of the last step's start where there is one (and
 * the peak lies after it), else on a fresh allocator from the run's start. Takes the snapshot
 * (run->snap and its arrays: the replay runs on them). */
static VrStatus collect_peak(Run *run, const AllocConfig *acfg, SimResult *res, int step) {
    long end = run->peak_log[step];
    if (end < 0) return VR_OK;
    Alloc *a = NULL;
    int n_t = run->n_t;
    unsigned char *live;
    uint64_t *rsize, *addr;
    long from = 0;
    VrStatus st = VR_OK;
    if (run->snap && run->snap_log <= end) {
        a = run->snap;
        live = run->snap_live;
        rsize = run->snap_rsize;
        addr = run->snap_addr;
        from = run->snap_log;
        run->snap = NULL;
        run->snap_live = NULL;
        run->snap_rsize = run->snap_addr = NULL;
    } else {
        live = h_calloc(&run->host, (size_t)n_t + 1, 1);
        rsize = h_calloc(&run->host, (size_t)n_t + 1, sizeof(uint64_t));
        addr = h_calloc(&run->host, (size_t)n_t + 1, sizeof(uint64_t));
        st = live && rsize && addr ? alloc_new(acfg, &a) : VR_ENOMEM;
    }
    for (long k = from; !st && k < end; k++) {
        const LogEv *e = &run->log[k];
        if (e->kind == LOG_MALLOC) {
            uint64_t at;
            st = alloc_malloc(a, e->v, e->stream, 0, &at);
            if (!st && e->storage >= 0) {
                live[e->storage] = 1;
                addr[e->storage] = at;
                rsize[e->storage] = alloc_block_size(a, at);
            }
        } else if (e->kind == LOG_FREE) {
            alloc_dealloc(a, e->v);
            if (e->storage >= 0) live[e->storage] = 0;
        } else if (e->kind == LOG_EMPTY_CACHE) {
            alloc_empty_cache(a);
        } else {
            alloc_reset_peaks(a);
        }
    }
    if (!st) {
        int n = 0;
        for (int t = 0; t < n_t; t++) n += live[t];
        res->live_at_peak = h_malloc(&run->host, sizeof(LiveTensor) * (size_t)(n + 1));
        if (!res->live_at_peak) st = VR_ENOMEM;
        for (int t = 0; !st && t < n_t; t++)
            if (live[t]) res->live_at_peak[res->n_live_at_peak++] = (LiveTensor){t, rsize[t]};
    }
    if (!st) {
        qsort(res->live_at_peak, (size_t)res->n_live_at_peak, sizeof(LiveTensor), cmp_live);
        st = alloc_segment_map(a, &res->segmap, &res->n_segmap);
        AllocStats as;
        alloc_stats(a, &as);
        res->largest_free_at_peak = as.largest_free_block;
    }
    /* the replay made the same calls as the run: a different outcome is a bug, not an OOM */
    if (st == VR_OOM) st = VR_EINVAL;
    alloc_free(a);
    h_free(&run->host, live);
    h_free(&run->host, rsize);
    h_free(&run->host, addr);
    return st;
}

VrStatus engine_run(const Graph *g, const EngineConfig *cfg, const AllocConfig *acfg,
                    SimResult **out, char *err, size_t errlen) {
    *out = NULL;
    if (cfg->steps < 1) {
        snprintf(err, errlen, "steps must be >= 1");
        return VR_EINVAL;
    }
    Host host = {cfg->host_alloc, cfg->host_ud};
    SimResult *res = h_calloc(&host, 1, sizeof *res);
    if (!res) return VR_ENOMEM;
    res->host_alloc = cfg->host_alloc;
    res->host_ud = cfg->host_ud;
    res->oom_step = res->oom_op = -1;
    res->repeat_from = -1;
    res->steps = h_calloc(&host, (size_t)cfg->steps, sizeof(StepResult));
    Run r;
    memset(&r, 0, sizeof r);
    VrStatus st = res->steps ? run_init(&r, g, cfg, acfg, res) : VR_ENOMEM;
    if (!st) st = simulate(&r);
    /* after an OOM, the live set, breakdown and segment map are those of the failing moment */
    if (!st && res->oom) {
        memcpy(res->oom_breakdown, r.cat_bytes, sizeof res->oom_breakdown);
        res->oom_breakdown[CAT_TEMP] += r.workspace_bytes;
        st = copy_live_set(&r, res);
    }
    int last = res->n_steps - 1;
    if (!st && !res->oom && r.logging && last >= 0 && res->steps[last].peak_alloc_index > 0)
        st = collect_peak(&r, acfg, res, last);
    run_free(&r);
    if (st) {
        if (st == VR_EINVAL && r.check_err[0]) {
            snprintf(err, errlen, "%s", r.check_err);
        } else if (st == VR_EINVAL && r.refused_bytes) {
            snprintf(err, errlen, "'%s' needs one allocation of %.1f TiB: the simulated "
                     "allocator takes at most %.0f TiB in one request (no card has more); lower "
                     "the model's size, the batch or the sequence",
                     r.refused_what ? r.refused_what : "?", (double)r.refused_bytes / (double)(VR_GIB * 1024),
                     (double)ALLOC_MAX_REQUEST / (double)(VR_GIB * 1024));
        } else if (st == VR_EINVAL) {
            const char *ge = graph_error(g);
            snprintf(err, errlen, "%s", ge && ge[0] ? ge : "the simulation stopped on an input "
                     "the engine could not take (no message)");
        }
        engine_result_free(res);
        return st;
    }
    *out = res;
    return VR_OK;
}

void engine_result_free(SimResult *r) {
    if (!r) return;
    Host host = {r->host_alloc, r->host_ud};
    h_free(&host, r->steps);
    h_free(&host, r->samples);
    h_free(&host, r->spans);
    h_free(&host, r->live_at_peak);
    free(r->segmap); /* alloc_segment_map's: the C library's */
    h_free(&host, r);
}
