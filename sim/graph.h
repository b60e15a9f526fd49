/* graph.h: tensors and ops of one training step, with autograd semantics.
 *
 * Data model. A Graph owns every Tensor and Op of a run (one arena, freed together).
 *   Tensor  a storage on the device: bytes, dtype, category, and whether autograd tracks it.
 *           A view shares its base's storage (Tensor.base) and allocates nothing.
 *   Op      one kernel-level operation as the framework dispatches it (aten level): inputs,
 *           outputs (allocated when it starts), workspaces (allocated after the outputs and
 *           freed when it ends), the tensors it saves for backward, and how its backward
 *           produces gradients for each input.
 * The scenario's model declares forward ops only (graph_add_op). graph_derive_backward then
 * appends the backward ops as autograd would run them: in reverse order of creation, each one
 * taking the gradients of its op's outputs and the saved tensors, producing input gradients
 * (new buffers, or the incoming gradient passed through), accumulating gradients of tensors with
 * several consumers out of place (InputBuffer), stealing the first gradient of a parameter into
 * .grad (AccumulateGrad), and releasing the saved tensors once it has run.
 *
 * Invariants:
 *   every Op input/output/saved index < graph_num_tensors
 *   a forward op's outputs are created by that op alone (Tensor.producer == op index)
 *   backward ops come after every forward op (phase order fwd < bwd < optimizer)
 */
#ifndef VR_GRAPH_H
#define VR_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "vr.h"

typedef struct Graph Graph;

typedef enum DType { DT_FP32 = 0, DT_FP16, DT_BF16, DT_FP8, DT_INT8, DT_UINT8, DT_INT32,
                     DT_INT64, DT_BOOL, DT_NF4, DT_COUNT } DType;

/* What a tensor is, for the breakdown at peak. */
typedef enum Category {
    CAT_PARAM = 0,   /* model parameters (trainable or frozen) */
    CAT_GRAD,        /* parameter gradients (.grad) */
    CAT_OPTSTATE,    /* optimizer state: moments, master weights, step counters */
    CAT_ACTIVATION,  /* forward outputs (saved for backward or not yet consumed) */
    CAT_TEMP,        /* workspaces, activation gradients, optimizer temporaries, inputs */
    CAT_COUNT
} Category;

typedef enum Phase { PH_BUILD = 0, PH_FWD, PH_BWD, PH_RECOMPUTE, PH_OPTIM, PH_ZERO_GRAD,
                     PH_COUNT } Phase;

/* How the backward of an op produces the gradient of one input. */
typedef enum GradMode {
    GRAD_NONE = 0, /* no gradient flows to this input */
    GRAD_NEW,      /* a new buffer of grad_bytes (default: the input's bytes) */
    GRAD_PASS,     /* the gradient of output pass_output, passed through unchanged */
    GRAD_SAVED,    /* saved tensor pass_output of the op, made in forward (a fused loss that
                      computes its input gradients there, as Liger's fused linear cross-entropy
                      does): the backward hands it on instead of dropping it */
} GradMode;

typedef struct Tensor {
    const char *name;      /* arena copy; for reports */
    uint64_t bytes;        /* storage size in bytes (unrounded, as the framework requests) */
    uint64_t numel;        /* elements (parameter counts in reports) */
    DType dtype;
    Category cat;
    int base;              /* -1, or the tensor whose storage this view shares */
    int producer;          /* op index, or -1 for parameters and inputs */
    int module;            /* parameters: index into graph modules, else -1 */
    bool requires_grad;    /* autograd tracks it */
    bool is_param;
    bool trainable;        /* parameter with requires_grad */
    bool grad_view;        /* an input gradient returned as a view (see GradSpec.view) */
    bool persistent;       /* lives across steps: parameters, .grad, optimizer state; never
                              freed by reference counting (only by a PH_ZERO_GRAD op) */
} Tensor;

/* The streams an op runs on (Op.stream); Lua names them in vrsim.core.streams. */
typedef enum StreamId {
    STREAM_COMPUTE = 0,        /* the default stream: kernels of the model and optimizer */
    STREAM_COLLECTIVE,         /* NCCL all-gathers, DDP's all-reduces */
    STREAM_H2D,                /* host-to-device copies (offload, device_map) */
    STREAM_D2H,                /* device-to-host copies */
    STREAM_REDUCE_SCATTER,     /* reduce-scatters (FSDP2, ZeRO), HSDP's replica all-reduce */
    STREAM_COUNT
} StreamId;

/* What the simulator does with an op, from its kind string (graph_add_op, graph_op_set_kind):
 * the cost model's GEMM path, fused attention, a link transfer, a host-side optimizer step, or
 * a memory-access class that the kind names (OPK_CLASS: "elementwise", "cast_up", ...). */
typedef enum OpKind {
    OPK_CLASS = 0,             /* a memory-bound kernel of the class Op.kind names */
    OPK_NONE,                  /* "none": bookkeeping, no kernel */
    OPK_MM,                    /* "mm": a GEMM */
    OPK_CONV,                  /* "conv": an implicit-GEMM convolution */
    OPK_ATTENTION,             /* "attention_<backend>[_cross|_masked]": fused attention */
    OPK_CPU_ADAM,              /* "cpu_adam": DeepSpeed's CPU Adam */
    OPK_CPU_ADAMW_TORCH,       /* "cpu_adamw_torch": torch's AdamW on the host */
    OPK_EMPTY_CACHE,           /* "empty_cache": torch.cuda.empty_cache() */
    OPK_COLLECTIVE,            /* an NCCL collective (collective.h coll_kind_parse's names) */
    OPK_COUNT
} OpKind;

/* The OpKind of a kind string (NULL: the default "elementwise", a class). */
OpKind op_kind_of(const char *kind);

typedef struct GradSpec {
    GradMode mode;
    int pass_output;       /* GRAD_PASS: which output's gradient (index into op outputs);
                              GRAD_SAVED: which saved tensor (index into op saves) */
    uint64_t grad_bytes;   /* GRAD_NEW: 0 = the input's bytes */
    DType grad_dtype;      /* GRAD_NEW: dtype of the new gradient */
    bool view;             /* GRAD_NEW: the kernel returns the gradient as a view of a larger
                              result (matmul folding dims), so it cannot be accumulated into */
} GradSpec;

typedef struct Op {
    const char *name;      /* arena copy */
    const char *kind;      /* arena copy: "mm", "attention", "elementwise", "broadcast", ... (the
                              cost model's GEMM path or memory-access class) */
    OpKind kind_id;        /* op_kind_of(kind), set by graph_add_op and graph_op_set_kind */
    const char *bwd_kind;  /* arena copy or NULL: the kind of the derived backward op, when it
                              differs (a view whose backward copies a strided gradient) */
    Phase phase;
    int fwd_op;            /* backward/recompute ops: the forward op they derive from, else -1 */
    int *inputs;  int n_inputs;
    int *outputs; int n_outputs;
    int *saves;   int n_saves;        /* forward: tensors kept for backward */
    int *frees;   int n_frees;        /* tensors whose reference this op drops when it ends */
    uint64_t *workspace; int n_workspace; /* bytes; allocated after outputs, freed at end */
    GradSpec *grads;                  /* forward: one per input */
    int *grad_order; int n_grad_order;/* forward: order in which backward allocates input grads */
    uint64_t *bwd_workspace; int n_bwd_workspace; /* backward temporaries, bytes */
    int64_t rowsum[2];     /* (rows, columns) > 0: the op sums an m x c tensor over its rows, and
                              ATen's staging buffers for it (device.h device_row_sum_buffers)
                              are further workspaces, worked out for the GPU the op runs on */
    int64_t bwd_rowsum[2]; /* forward op: the same for its derived backward */
    double flops;          /* forward (or this op's) floating-point operations */
    double bytes_moved;    /* bytes read and written by the kernel(s) */
    double bwd_flops;      /* backward flops (0 = 2 x flops) */
    double bwd_bytes;      /* backward bytes moved (0 = 2 x bytes_moved) */
    double layout_bytes[2];/* bytes cuDNN's layout transforms around the op's kernel move (read
                              and written): [0] activations between NCHW and NHWC, [1] a filter
                              between KCRS and KRSC; kernels of their own, priced by the profile's
                              classes "layout" and "layout_filter" */
    double bwd_layout_bytes[2]; /* forward op: the same for its derived backward */
    double rowwise_rows;   /* a row-per-block statistics kernel beside the op's own (GroupNorm's
                              RowwiseMomentsCUDAKernel): its blocks, one per row... */
    double rowwise_row_bytes; /* ...and each row's bytes (bf16 elements x 2); priced by the
                              profile's class "rowwise" (sim/cost.c rowwise_ns); 0: none */
    bool in_ckpt;          /* recompute or backward of a checkpointed region: torch.utils.checkpoint's
                              saved-tensor hooks make its host dispatch dearer */
    int kernels;           /* kernel launches the op makes (a foreach op: one per tensor-list
                              chunk; a derived GEMM backward: one per input gradient); 0 = 1 */
    int bwd_kernels;       /* forward op: launches of its backward (0: derived as above) */
    int slot;              /* > 0: the op's first output is held in this slot until the next op of
                              the same slot runs, which frees it just before allocating its own
                              outputs, or just after with slot_free_after (FSDP2 keeps each
                              all-gather output and reduce-scatter input until the next collective
                              of its kind, instead of record_stream) */
    bool slot_free_after;
    bool workspace_first;  /* allocate the workspaces before the outputs (a derivative formula
                              that computes its temporaries first) */
    bool bwd_workspace_first; /* forward op: its derived backward has workspace_first */
    double host_extra_ns;  /* host CPU time the op costs beyond its dispatch and launches: the
                              per-parameter Python and C++ work of an optimizer step */
    bool has_dispatch;     /* the op's host dispatch was measured for its op class (a module
                              call, a cast, ...: lua/hw/calibrated/<gpu>_torch.lua host_class_us):
                              dispatch_ns replaces the profile's one figure per op, and its
                              launches are inside it */
    double dispatch_ns;    /* has_dispatch: host time to issue the op (its launches included) */
    double dispatch_ckpt_ns; /* has_dispatch: what torch.utils.checkpoint adds to it in a
                              checkpointed region (its saved-tensor hooks); a recomputation op
                              has 0: its figure is the backward node's */
    double bwd_dispatch_ns;/* has_dispatch, forward op: the same of its derived backward node */
    double bwd_dispatch_ckpt_ns; /* and its checkpointed-region addition (the recomputation's
                              hooks included) */
    int gemms;             /* GEMM kernels the op runs (a derived backward GEMM op: one per input
                              that needs a gradient); 0 = 1 */
    int lora_rank;         /* > 0: a GEMM of a LoRA adapter of this rank (its backward too), of
                              matrix lora_role 'A' (x A^T, rank-wide output) or 'B' (a B^T,
                              rank-deep product): priced by the profile's adapter GEMM table
                              where it has one (sim/cost.c lora_op_s) */
    char lora_role;
    DType compute_dtype;   /* dtype the math runs in (cost model) */
    int layer;             /* decoder layer / block index, -1 if none (reports) */
    int stream;            /* 0 compute, 1 communication (NCCL), 2 host-to-device, 3 device-to-host,
                              4 a second communication stream (FSDP2's reduce-scatter); allocations
                              an op makes come from its stream's pool */
    int hook;              /* 0; 1: a copy of this op runs just before the backward of layer
                              `layer`, 2: just after it (ZeRO/FSDP gathers and reductions); 3:
                              just after the last gradient of parameter grads_of[0] in this
                              backward is accumulated (a post-accumulate-grad hook: the
                              optimizer step in backward); 4: just before the backward node of
                              forward op `anchor` runs, or, for a hook op of a checkpointed
                              region (region > 0), just before that region's recomputation (a
                              saved tensor brought back as backward unpacks it); 5: just
                              before the backward of layer `layer` even where its hook-1 ops
                              were prefetched (FSDP2's all-gather copy-out: the prefetch issues
                              the all-gather, the layer's own pre-backward copies it out) */
    int anchor;            /* hook 4 without a region: the forward op index it precedes, else -1 */
    int *grads_of; int n_grads_of; /* hook ops: parameters whose .grad are extra inputs */
    bool free_grads;       /* hook ops: drop those .grad tensors when the op ends */
    int *remap_of;         /* hook ops, one per output (or NULL): backward ops derived after this
                              one use output k wherever they saved tensor remap_of[k] (a
                              parameter gathered again for backward, as ZeRO-3/FSDP do) */
    bool drop_persistent;  /* frees of persistent tensors are honoured (param.grad = None) */
    int world;             /* collectives: ranks taking part */
    int region;            /* checkpointed region (> 0) whose saved tensors are recomputed in
                              backward instead of kept; 0 = none */
    bool ckpt_args;        /* a marker (kind "none") naming region's checkpointed function's
                              arguments as its inputs: torch.utils.checkpoint's frame holds them
                              until the region's backward is done */
    bool once;             /* runs in the first step only (optimizer state creation) */
    int at_step;           /* > 0: runs in that step only (DDP rebuilds its buckets in step 1);
                              0 = every step (or the first, with once) */
    int from_step;         /* > 0: runs in that step and every later one (DDP's rebuilt buckets) */
    bool step_start;       /* runs as its steps begin, before every other op, whatever its place
                              in the graph (DDP's bucket rebuild, declared once forward has shown
                              the order gradients become ready) */
    bool no_grad;          /* forward op run under torch.no_grad(): outputs need no grad */
} Op;

/* Creates an empty graph. Returns VR_ENOMEM if the host is out of memory. */
VrStatus graph_new(Graph **out /* OUT */);
void graph_free(Graph *g); /* NULL is a no-op */

/* Copies s into the graph's arena; NULL on host allocation failure. */
const char *graph_strdup(Graph *g, const char *s);
/* Arena allocation of n zeroed bytes, freed with the graph; NULL on failure. */
void *graph_alloc(Graph *g, size_t n);

/* Adds a module name (parameter grouping for reports); returns its index or -1 on ENOMEM. */
int graph_add_module(Graph *g, const char *name);
const char *graph_module_name(const Graph *g, int i);
int graph_num_modules(const Graph *g);

/* Adds a tensor (copied) and returns its index in *id. The name is copied. */
VrStatus graph_add_tensor(Graph *g, const Tensor *t, int *id /* OUT */);

/* Adds an op; the graph copies op and every array it points to. Output tensors get
 * producer = the new op. Returns VR_EINVAL (message via graph_error) on a bad index. */
VrStatus graph_add_op(Graph *g, const Op *op, int *id /* OUT */);

/* Appends backward ops for the forward ops that lead to tensor `loss` (autograd semantics,
 * see the top of this file), for the forward ops declared since the previous call. Call it once
 * per micro-batch: gradients of trainable parameters accumulate into the .grad tensors an
 * earlier call made (gradient accumulation). */
VrStatus graph_derive_backward(Graph *g, int loss);

/* After graph_derive_backward: the .grad tensor of a trainable parameter, -1 if none. */
int graph_param_grad(const Graph *g, int param);

int graph_num_tensors(const Graph *g);
int graph_num_ops(const Graph *g);
Tensor *graph_tensor(Graph *g, int i);          /* borrowed; valid until the next add */
const Tensor *graph_tensor_c(const Graph *g, int i);
Op *graph_op(Graph *g, int i);                  /* borrowed; valid until the next add */
/* Sets op i's kind (copied) and its kind_id. VR_ENOMEM. */
VrStatus graph_op_set_kind(Graph *g, int i, const char *kind);
const Op *graph_op_c(const Graph *g, int i);
/* Index of the tensor owning the storage of t (follows views). */
int graph_storage_of(const Graph *g, int t);

/* A decoder layer's tensors and ops carried over to another alike layer (lua/vrsim/replicate.lua):
 * the template's tensors [t_first, t_first + t_count) and ops [op_first, op_first + op_count) (as
 * the forward declared them: none derived); their names' "layers.F" and "layer F" and Op.layer F
 * become to_layer; Op.region > 0 moves by region_delta; a tensor the template made maps to its
 * copy, one in ext_from to the same place of ext_to (the layer's parameters and input), any other
 * stays. */
typedef struct LayerMap {
    int t_first, t_count, op_first, op_count;
    int from_layer, to_layer, region_delta;
    const int *ext_from, *ext_to;
    int n_ext;
} LayerMap;

/* Appends the carried-over copies (tensors, then ops, in the template's order); their first ids
 * in *t_first, *op_first. VR_EINVAL when the range holds a derived op. */
VrStatus graph_replicate(Graph *g, const LayerMap *m, int *t_first /* OUT */, int *op_first /* OUT */);

/* Whether the tensors from t_first and ops from op_first (as many as the template's) are exactly
 * the template carried over by m: every field, names and ids included. */
bool graph_is_replica(const Graph *g, const LayerMap *m, int t_first, int op_first);

/* s with "layers.F" and "layer F" (F not followed by a digit) written for layer to, into out (n
 * bytes; cut short if it must): the names graph_replicate gives a layer's copies. */
void graph_rename_layer(const char *s, int from, int to, char *out, size_t n);

/* The same rule with its two spellings of each layer number made once (a caller renaming many
 * names between one pair of layers). */
typedef struct LayerRenamer {
    char from[2][32], to[2][32];
    size_t from_len[2], to_len[2];
} LayerRenamer;
void graph_renamer_init(LayerRenamer *r, int from, int to);
void graph_renamer_apply(const LayerRenamer *r, const char *s, char *out, size_t n);

/* The last error message (static lifetime per graph). */
const char *graph_error(const Graph *g);

size_t dtype_size(DType d);          /* bytes per element (NF4: 1, two values per byte) */
const char *dtype_name(DType d);
#define GRAPH_MAX_WORKSPACES 16 /* workspaces (and backward workspaces) of one op */
#define GRAPH_MAX_SLOTS 8       /* hold slots (Op.slot), 1..GRAPH_MAX_SLOTS-1 */

/* Parses "fp32", "float32", "bf16", ... ; returns VR_EINVAL for an unknown name. */
VrStatus dtype_parse(const char *s, DType *out /* OUT */);
const char *category_name(Category c);
const char *phase_name(Phase p);

#endif
