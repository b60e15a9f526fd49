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
 *   a backward op comes after the forward ops it derives from (graph_derive_backward: after every
 *   forward op; graph_derive_backward_of: a pipeline's micro-batches interleave)
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
    int module;            /* parameters: a module index the model layer may give, else -1 */
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
    STREAM_SYMM_MEM,           /* symmetric memory's backend stream (torch.distributed.
                                  _symmetric_memory._get_backend_stream): the peer-to-peer copies
                                  of async tensor parallelism's micro-pipelined collectives */
    STREAM_COUNT
} StreamId;

/* What the simulator does with an op, from its kind string (graph_add_op, graph_op_set_kind):
 * the cost model's GEMM path, fused attention, a link transfer, a host-side optimizer step, or
 * a memory-access class that the kind names (OPK_CLASS: "elementwise", "cast_up", ...). */
typedef enum OpKind {
    OPK_CLASS = 0,             /* a memory-bound kernel of the class Op.kind names */
    OPK_NONE,                  /* "none": bookkeeping, no kernel */
    OPK_MM,                    /* "mm", "mm_<class>": a GEMM */
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

/* Which derived ops copy a field of their forward op as it is (sim/op_fields.h's last column). */
typedef enum OpInherit { OPI_NONE = 0, OPI_BWD = 1, OPI_RECOMPUTE = 2, OPI_BOTH = 3 } OpInherit;

/* One op: its fields, with what each means, are declared once in sim/op_fields.h, in three
 * parts: what it allocates and how autograd derives it, what it costs, when and where it runs. */
typedef struct Op {
#define OP_VAL(type, member, dim, key, read, def, inherit) type member dim;
#define OP_STR(member, key, read, inherit) const char *member;
#define OP_LIST(type, member, count, key, read, elem, inherit) type *member; int count;
#define OP_LISTX(type, member, count, key, read, elem, inherit) type *member;
#include "op_fields.h"
} Op;

/* Copies into dst every field that op_fields.h marks as inherited by `to` (OPI_BWD or
 * OPI_RECOMPUTE) from src, its forward op; the rest of dst is left as it is. */
void graph_op_inherit(Op *dst, const Op *src, OpInherit to);

/* Creates an empty graph. Returns VR_ENOMEM if the host is out of memory. */
VrStatus graph_new(Graph **out /* OUT */);
/* graph_new with every host allocation of the graph through fn (with ud; vr.h VrHostAllocFn),
 * for tests that fail the Nth one; NULL fn = the C library (graph_new). */
VrStatus graph_new_hosted(VrHostAllocFn fn, void *ud, Graph **out /* OUT */);
void graph_free(Graph *g); /* NULL is a no-op */

/* Copies s into the graph's arena; NULL on host allocation failure. */
const char *graph_strdup(Graph *g, const char *s);
/* Arena allocation of n zeroed bytes, freed with the graph; NULL on failure. */
void *graph_alloc(Graph *g, size_t n);

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

/* The backward of one micro-batch's forward, appended after whatever was declared since (other
 * micro-batches' forwards and backwards, as a pipeline schedule runs them): the forward ops
 * [first, end) that lead to tensor `output`, seeded with ones_like(output) when grad_out < 0 (the
 * loss), else with tensor grad_out (a stage's output gradient received from the next stage; the
 * stage's reference to `output` is dropped as it takes over). Gradients accumulate into the .grad
 * tensors earlier calls made, as graph_derive_backward's do. */
typedef struct BackwardOf {
    int first, end;        /* forward ops of the micro-batch */
    int output;            /* the tensor backward starts from (loss or stage output) */
    int grad_out;          /* its gradient, made by an op already declared; -1: ones_like */
    int input;             /* a tensor whose gradient the caller takes over (a stage's input, sent
                              on to the previous stage), -1 none */
    bool grad_out_held;    /* the caller holds grad_out through the backward (a schedule's local):
                              autograd's InputBuffer never adds into it in place (its use_count
                              is above 1) */
} BackwardOf;

/* Appends that backward. *in_grad: the gradient reaching b->input (the caller's to free), -1
 * when none did. VR_EINVAL (graph_error) on a range that is not forward ops of this graph or an
 * output that does not require grad. Does not move graph_derive_backward's "since" mark. */
VrStatus graph_derive_backward_of(Graph *g, const BackwardOf *b, int *in_grad /* OUT */);

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
/* Whether forward op i records an autograd node: an input that requires grad gets a gradient
 * from it (the rule its backward op is derived by). */
bool graph_op_records_autograd(const Graph *g, int i);
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
