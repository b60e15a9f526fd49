/* graph.c: tensors, ops and the derivation of backward ops (see graph.h for the data model).
 *
 * Memory: strings and op arrays live in an arena of chunks freed with the graph; the tensor and
 * op tables are growable arrays (pointers into them are invalidated by the next add). */
#define _GNU_SOURCE /* mremap */
#include "graph.h"

#include "collective.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap;  /* bytes */
    max_align_t data[];
} Chunk;

#define KINDS_SLOTS 256
#define KINDS_MAX 192
struct Graph {
    Tensor *tensors; int n_tensors, cap_tensors;
    int *param_grad; int n_param_grad; /* after derivation: tensor -> its .grad, -1 none */
    int derived_upto;                  /* ops before this index have had their backward derived */
    Op *ops; int n_ops, cap_ops;
    Chunk *arena;
    /* the distinct kind strings of the ops (arena copies, each with op_kind_of of it): ops of
     * one kind share one copy; open addressing, linear probing (a graph has some tens of
     * kinds; past KINDS_MAX more, each op of a new kind keeps a copy of its own) */
    struct { const char *s; uint32_t hash; OpKind id; } kinds[KINDS_SLOTS];
    int n_kinds;
    char err[256];
    VrHostAllocFn host_fn;             /* graph_new_hosted's hook (NULL: the C library, and */
    void *host_ud;                     /* large tables mapped: see table_resize) */
};

/* The graph's host memory: its hook, or the C library. */
static void *g_realloc(const Graph *g, void *p, size_t osize, size_t nsize) {
    return vr_host_realloc(g->host_fn, g->host_ud, p, osize, nsize);
}
static void *g_malloc(const Graph *g, size_t n) { return g_realloc(g, NULL, 0, n ? n : 1); }
static void *g_calloc(const Graph *g, size_t n, size_t size) {
    void *p = g_malloc(g, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}
static void g_free(const Graph *g, void *p) { g_realloc(g, p, 0, 0); }


static const char *const DTYPE_NAMES[DT_COUNT] = {
    "fp32", "fp16", "bf16", "fp8", "int8", "uint8", "int32", "int64", "bool", "nf4"};
static const size_t DTYPE_SIZES[DT_COUNT] = {4, 2, 2, 1, 1, 1, 4, 8, 1, 1};
static const char *const CATEGORY_NAMES[CAT_COUNT] = {
    "parameters", "gradients", "optimizer_state", "activations", "temporaries"};
static const char *const PHASE_NAMES[PH_COUNT] = {
    "build", "forward", "backward", "recompute", "optimizer", "zero_grad"};

size_t dtype_size(DType d) { return d < DT_COUNT ? DTYPE_SIZES[d] : 0; }
const char *dtype_name(DType d) { return d < DT_COUNT ? DTYPE_NAMES[d] : "?"; }
const char *category_name(Category c) { return c < CAT_COUNT ? CATEGORY_NAMES[c] : "?"; }
const char *phase_name(Phase p) { return p < PH_COUNT ? PHASE_NAMES[p] : "?"; }

VrStatus dtype_parse(const char *s, DType *out) {
    static const struct { const char *name; DType d; } aliases[] = {
        {"float32", DT_FP32}, {"float", DT_FP32}, {"float16", DT_FP16}, {"half", DT_FP16},
        {"bfloat16", DT_BF16}, {"long", DT_INT64}, {"int", DT_INT32}};
    for (int i = 0; i < DT_COUNT; i++)
        if (strcmp(s, DTYPE_NAMES[i]) == 0) { *out = (DType)i; return VR_OK; }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(s, aliases[i].name) == 0) { *out = aliases[i].d; return VR_OK; }
    return VR_EINVAL;
}

/* The tensor and op tables grow by doubling. Past TABLE_MAPPED bytes a table lives in
 * pages of its own (mmap) and grows with mremap, which moves the pages instead of copying them:
 * a large model's op table (hundreds of thousands of 432-byte ops) is otherwise copied at every
 * doubling, and each copy touches fresh pages (a fifth of a 7B sweep point's page faults,
 * docs/speed.md). Whether a table is mapped follows from its capacity alone, so table_free needs
 * no flag. Under AddressSanitizer the tables stay in the heap, where it checks every access. */
#if defined(__SANITIZE_ADDRESS__)
#define TABLE_MAPPED SIZE_MAX
#else
#define TABLE_MAPPED ((size_t)1 << 16)
#endif

/* Freed mapped tables are kept for the next graph this process makes (a sweep's child builds
 * graph after graph, sim/points.c): their pages are in memory already, where a new mapping
 * faults in each page it is written in. SPARE_MAPS of them at most, the largest; they are the
 * process's own (spare_pid): a forked child lets its parent's go, as writing them would copy
 * each page. Contents are stale: every table slot is written whole before it is read. */
enum { SPARE_MAPS = 4 };
typedef struct SpareMap { void *p; size_t bytes; } SpareMap;
static SpareMap spare[SPARE_MAPS];
static int n_spare;
static pid_t spare_pid;

static size_t page_round(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static void spare_own(void) {
    pid_t me = getpid();
    if (spare_pid == me) return;
    for (int i = 0; i < n_spare; i++) munmap(spare[i].p, spare[i].bytes);
    n_spare = 0;
    spare_pid = me;
}

/* The smallest spare mapping of at least bytes (its size into *got), taken; or NULL. */
static void *spare_take(size_t bytes, size_t *got) {
    spare_own();
    int best = -1;
    for (int i = 0; i < n_spare; i++)
        if (spare[i].bytes >= bytes && (best < 0 || spare[i].bytes < spare[best].bytes)) best = i;
    if (best < 0) return NULL;
    void *p = spare[best].p;
    *got = spare[best].bytes;
    spare[best] = spare[--n_spare];
    return p;
}

/* Keeps mapping p of bytes as a spare, in place of a smaller one when all are taken. */
static void spare_give(void *p, size_t bytes) {
    spare_own();
    int small = 0;
    for (int i = 1; i < n_spare; i++)
        if (spare[i].bytes < spare[small].bytes) small = i;
    if (n_spare < SPARE_MAPS) {
        spare[n_spare++] = (SpareMap){p, bytes};
    } else if (spare[small].bytes < bytes) {
        munmap(spare[small].p, spare[small].bytes);
        spare[small].p = p;
        spare[small].bytes = bytes;
    } else {
        munmap(p, bytes);
    }
}

static void table_free(const Graph *g, void *p, size_t cap_bytes) {
    if (!p) return;
    if (g->host_fn) g_free(g, p); /* a hooked graph maps no table */
    else if (cap_bytes >= TABLE_MAPPED) spare_give(p, page_round(cap_bytes));
    else free(p);
}

/* p (cap_bytes, NULL for 0) moved to a table of *ncap_bytes > cap_bytes, or NULL (p kept); a
 * mapped table may be larger than asked: *ncap_bytes is then its size. */
static void *table_resize(const Graph *g, void *p, size_t cap_bytes, size_t *ncap_bytes) {
    if (g->host_fn || *ncap_bytes < TABLE_MAPPED) return g_realloc(g, p, cap_bytes, *ncap_bytes);
    void *q;
    if (cap_bytes >= TABLE_MAPPED) {
        q = mremap(p, cap_bytes, *ncap_bytes, MREMAP_MAYMOVE);
    } else {
        size_t got;
        if ((q = spare_take(*ncap_bytes, &got))) *ncap_bytes = got;
        else q = mmap(NULL, *ncap_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q != MAP_FAILED && p) {
            memcpy(q, p, cap_bytes);
            free(p);
        }
    }
    return q == MAP_FAILED ? NULL : q;
}

VrStatus graph_new(Graph **out) { return graph_new_hosted(NULL, NULL, out); }

VrStatus graph_new_hosted(VrHostAllocFn fn, void *ud, Graph **out) {
    Graph proto = {.host_fn = fn, .host_ud = ud};
    *out = g_calloc(&proto, 1, sizeof(Graph));
    if (!*out) return VR_ENOMEM;
    (*out)->host_fn = fn;
    (*out)->host_ud = ud;
    return VR_OK;
}

void graph_free(Graph *g) {
    if (!g) return;
    for (Chunk *c = g->arena, *next; c; c = next) { next = c->next; g_free(g, c); }
    table_free(g, g->tensors, (size_t)g->cap_tensors * sizeof(Tensor));
    table_free(g, g->ops, (size_t)g->cap_ops * sizeof(Op));
    g_free(g, g->param_grad);
    g_free(g, g);
}

/* Arena space for n bytes, not cleared (the caller writes all of it). */
static void *arena_take(Graph *g, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!g->arena || g->arena->used + n > g->arena->cap) {
        size_t cap = n > 65536 ? n : 65536;
        Chunk *c = g_malloc(g, sizeof(Chunk) + cap);
        if (!c) return NULL;
        c->next = g->arena; c->used = 0; c->cap = cap;
        g->arena = c;
    }
    void *p = (char *)g->arena->data + g->arena->used;
    g->arena->used += n;
    return p;
}

void *graph_alloc(Graph *g, size_t n) {
    void *p = arena_take(g, n);
    if (p) memset(p, 0, n);
    return p;
}

const char *graph_strdup(Graph *g, const char *s) {
    if (!s) s = "";
    size_t n = strlen(s) + 1;
    char *p = arena_take(g, n);
    if (p) memcpy(p, s, n);
    return p;
}

static void *copy_array(Graph *g, const void *src, int n, size_t elem) {
    if (n <= 0 || !src) return NULL;
    void *p = arena_take(g, (size_t)n * elem);
    if (p) memcpy(p, src, (size_t)n * elem);
    return p;
}

static int grow(const Graph *g, void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int ncap = *cap ? *cap * 2 : 64;
    while (ncap < need) ncap *= 2;
    size_t nbytes = (size_t)ncap * elem;
    void *p = table_resize(g, *arr, (size_t)*cap * elem, &nbytes);
    if (!p) return -1;
    size_t got = nbytes / elem;
    *arr = p; *cap = got > INT_MAX ? INT_MAX : (int)got;
    return 0;
}

VrStatus graph_add_tensor(Graph *g, const Tensor *t, int *id) {
    if (grow(g, (void **)&g->tensors, &g->cap_tensors, g->n_tensors + 1, sizeof(Tensor)))
        return VR_ENOMEM;
    if (t->base >= g->n_tensors) {
        snprintf(g->err, sizeof g->err, "tensor '%s': view of unknown tensor %d", t->name, t->base);
        return VR_EINVAL;
    }
    Tensor *n = &g->tensors[g->n_tensors];
    *n = *t;
    n->name = graph_strdup(g, t->name);
    if (!n->name) return VR_ENOMEM;
    *id = g->n_tensors++;
    return VR_OK;
}

int graph_num_tensors(const Graph *g) { return g->n_tensors; }
int graph_num_ops(const Graph *g) { return g->n_ops; }
Tensor *graph_tensor(Graph *g, int i) { return &g->tensors[i]; }
const Tensor *graph_tensor_c(const Graph *g, int i) { return &g->tensors[i]; }
OpKind op_kind_of(const char *kind) {
    static const struct { const char *name; OpKind k; } KINDS[] = {
        {"none", OPK_NONE}, {"mm", OPK_MM}, {"conv", OPK_CONV}, {"cpu_adam", OPK_CPU_ADAM},
        {"cpu_adamw_torch", OPK_CPU_ADAMW_TORCH}, {"empty_cache", OPK_EMPTY_CACHE}};
    if (!kind) return OPK_CLASS;
    if (strncmp(kind, "attention", 9) == 0) return OPK_ATTENTION;
    /* a GEMM whose kernel has a measured class of its own ("mm_align1"): a GEMM in every way,
     * its time no shorter than that class's rate over its bytes (cost.c cost_op_ns) */
    if (strncmp(kind, "mm_", 3) == 0) return OPK_MM;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
        if (strcmp(kind, KINDS[i].name) == 0) return KINDS[i].k;
    CollKind ck;
    if (coll_kind_parse(kind, &ck) == VR_OK) return OPK_COLLECTIVE;
    return OPK_CLASS;
}

/* The arena copy of kind string k shared by the ops of that kind, and its OpKind into *id
 * (NULL: out of host memory). */
static const char *intern_kind(Graph *g, const char *k, OpKind *id) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)k; *c; c++) h = (h ^ *c) * 16777619u;
    unsigned slot = h % KINDS_SLOTS;
    while (g->kinds[slot].s) {
        if (g->kinds[slot].hash == h && strcmp(g->kinds[slot].s, k) == 0) {
            *id = g->kinds[slot].id;
            return g->kinds[slot].s;
        }
        slot = (slot + 1) % KINDS_SLOTS;
    }
    const char *s = graph_strdup(g, k);
    if (!s) return NULL;
    *id = op_kind_of(s);
    if (g->n_kinds < KINDS_MAX) {
        g->kinds[slot].s = s;
        g->kinds[slot].hash = h;
        g->kinds[slot].id = *id;
        g->n_kinds++;
    }
    return s;
}

VrStatus graph_op_set_kind(Graph *g, int i, const char *kind) {
    OpKind id;
    const char *k = intern_kind(g, kind ? kind : "elementwise", &id);
    if (!k) return VR_ENOMEM;
    g->ops[i].kind = k;
    g->ops[i].kind_id = id;
    return VR_OK;
}

Op *graph_op(Graph *g, int i) { return &g->ops[i]; }
const Op *graph_op_c(const Graph *g, int i) { return &g->ops[i]; }
const char *graph_error(const Graph *g) { return g->err; }

int graph_param_grad(const Graph *g, int param) {
    return param >= 0 && param < g->n_param_grad ? g->param_grad[param] : -1;
}

int graph_storage_of(const Graph *g, int t) {
    while (g->tensors[t].base >= 0) t = g->tensors[t].base;
    return t;
}

static VrStatus check_indices(Graph *g, const char *what, const int *ids, int n, const Op *op) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= g->n_tensors) {
            snprintf(g->err, sizeof g->err, "op '%s': %s %d is not a tensor", op->name, what, ids[i]);
            return VR_EINVAL;
        }
    return VR_OK;
}

VrStatus graph_add_op(Graph *g, const Op *op, int *id) {
    VrStatus st;
    if ((st = check_indices(g, "input", op->inputs, op->n_inputs, op)) ||
        (st = check_indices(g, "output", op->outputs, op->n_outputs, op)) ||
        (st = check_indices(g, "saved tensor", op->saves, op->n_saves, op)) ||
        (st = check_indices(g, "freed tensor", op->frees, op->n_frees, op)))
        return st;
    for (int i = 0; i < op->n_bwd_workspace_at; i++)
        if (op->n_bwd_workspace_at != op->n_bwd_workspace || op->bwd_workspace_at[i] > op->n_inputs ||
            -op->bwd_workspace_at[i] > op->n_inputs) {
            snprintf(g->err, sizeof g->err, "op '%s': bwd_workspace_at needs one place per backward "
                     "workspace, each a gradient's position (+-1 .. %d) or 0", op->name, op->n_inputs);
            return VR_EINVAL;
        }
    for (int i = 0; i < op->n_grad_order; i++)
        if (op->grad_order[i] < 0 || op->grad_order[i] >= op->n_inputs) {
            snprintf(g->err, sizeof g->err, "op '%s': grad order names input %d of %d", op->name,
                     op->grad_order[i] + 1, op->n_inputs);
            return VR_EINVAL;
        }
    if (op->hook == 4 && op->region <= 0 && (op->anchor < 0 || op->anchor >= g->n_ops)) {
        snprintf(g->err, sizeof g->err, "op '%s': a hook before a backward node (hook 4) names a "
                 "checkpointed region or an earlier forward op (before_op)", op->name);
        return VR_EINVAL;
    }
    if (op->hook == 3 && op->n_grads_of < 1) {
        snprintf(g->err, sizeof g->err, "op '%s': a post-accumulate-grad hook (hook 3) names its "
                 "parameter in grads_of", op->name);
        return VR_EINVAL;
    }
    for (int i = 0; op->grads && i < op->n_inputs; i++) {
        const GradSpec *gs = &op->grads[i];
        if (gs->mode == GRAD_PASS && (gs->pass_output < 0 || gs->pass_output >= op->n_outputs)) {
            snprintf(g->err, sizeof g->err, "op '%s': input %d passes the gradient of output "
                     "%d, which does not exist", op->name, i + 1, gs->pass_output + 1);
            return VR_EINVAL;
        }
        if (gs->mode == GRAD_SAVED && (gs->pass_output < 0 || gs->pass_output >= op->n_saves)) {
            snprintf(g->err, sizeof g->err, "op '%s': input %d takes saved tensor %d as its "
                     "gradient, which does not exist", op->name, i + 1, gs->pass_output + 1);
            return VR_EINVAL;
        }
    }
    /* a row sum's staging buffers are two more workspaces */
    int rs = op->rowsum[0] > 0 ? 2 : 0, brs = op->bwd_rowsum[0] > 0 ? 2 : 0;
    if (op->n_workspace + rs > GRAPH_MAX_WORKSPACES ||
        op->n_bwd_workspace + brs > GRAPH_MAX_WORKSPACES) {
        snprintf(g->err, sizeof g->err, "op '%s': at most %d workspaces (a row sum's staging "
                 "buffers count two)", op->name, GRAPH_MAX_WORKSPACES);
        return VR_EINVAL;
    }
    if (op->rowsum[0] < 0 || op->rowsum[1] < 0 || op->bwd_rowsum[0] < 0 || op->bwd_rowsum[1] < 0) {
        snprintf(g->err, sizeof g->err, "op '%s': a row sum's rows and columns must be >= 0",
                 op->name);
        return VR_EINVAL;
    }
    if (grow(g, (void **)&g->ops, &g->cap_ops, g->n_ops + 1, sizeof(Op))) return VR_ENOMEM;
    Op n = *op;
    n.name = graph_strdup(g, op->name);
    n.kind = intern_kind(g, op->kind ? op->kind : "elementwise", &n.kind_id);
    OpKind bk;
    n.bwd_kind = op->bwd_kind ? intern_kind(g, op->bwd_kind, &bk) : NULL;
    if (!n.name || !n.kind || (op->bwd_kind && !n.bwd_kind)) return VR_ENOMEM;
    /* every list (op_fields.h), copied into the arena */
#define OP_LIST(type, member, count, key, read, elem, inherit) \
    n.member = copy_array(g, op->member, op->count, sizeof(type)); \
    if (op->count && op->member && !n.member) return VR_ENOMEM;
#define OP_LISTX(type, member, count, key, read, elem, inherit) \
    n.member = copy_array(g, op->member, op->count, sizeof(type)); \
    if (op->count && op->member && !n.member) return VR_ENOMEM;
#include "op_fields.h"
    if (op->stream < 0 || op->stream >= STREAM_COUNT) {
        snprintf(g->err, sizeof g->err, "op '%s': stream %d does not exist", op->name, op->stream);
        return VR_EINVAL;
    }
    int oid = g->n_ops;
    for (int i = 0; i < n.n_outputs; i++) g->tensors[n.outputs[i]].producer = oid;
    g->ops[g->n_ops++] = n;
    *id = oid;
    return VR_OK;
}

/* ---- backward derivation ------------------------------------------------------------------ */

void graph_op_inherit(Op *dst, const Op *src, OpInherit to) {
#define OP_VAL(type, member, dim, key, read, def, inherit) \
    if ((inherit) & to) memcpy(&dst->member, &src->member, sizeof dst->member);
#define OP_STR(member, key, read, inherit) if ((inherit) & to) dst->member = src->member;
#define OP_LIST(type, member, count, key, read, elem, inherit) \
    if ((inherit) & to) dst->member = src->member, dst->count = src->count;
#define OP_LISTX(type, member, count, key, read, elem, inherit) \
    if ((inherit) & to) dst->member = src->member;
#include "op_fields.h"
}


typedef struct Deriv {
    Graph *g;
    size_t cap;      /* entries in grad_of and param_grad */
    int *grad_of;    /* tensor -> its pending (accumulated) gradient tensor, -1 none */
    int *owners;     /* gradient tensor -> how many tensors it is pending for:
                      * owners[t] == |{x : grad_of[x] == t}| (kept by set_grad_of) */
    int *param_grad; /* parameter -> its .grad tensor, -1 none */
    int *remap;      /* tensor -> its recomputed copy inside the region being derived, -1 */
    int n_fwd;       /* forward ops end here (derivation covers [first, n_fwd)) */
    int first;       /* first forward op of this backward pass (micro-batch) */
    int recomputed;  /* the region whose recompute ops were emitted last, 0 = none */
    int *hooks;      /* the forward ops in [first, n_fwd) that are hooks, in order */
    int n_hooks;
    int *post_left;  /* per entry of hooks: a post-accumulate-grad hook's (Op.hook 3) gradients
                      * of its parameter still to arrive in this backward, 0 once it has run;
                      * a hook before a backward node (Op.hook 4): 1 until it has run */
    int *post_next;  /* per entry of hooks: the next hook 3 of the same parameter, -1 none */
    int *post_head;  /* per tensor (n_post_head of them): its first hook 3, -1 none */
    int n_post_head;
    int n_before;    /* hooks before a backward node (hook 4) not yet run */
    int *unpacked;   /* the outputs of the hooks before the node being derived (hook 4): the
                      * node holds them until it is done, n_unpacked of cap_unpacked */
    int n_unpacked, cap_unpacked;
    struct RegionInfo *regions; /* by checkpointed region id (index 0 unused), n_regions */
    int n_regions;
    int *freer_start; /* forward frees indexed by tensor (made on first need): the forward ops */
    int *freers;      /* in [first, n_fwd) that free tensor t are freers[freer_start[t] ..
                       * freer_start[t + 1]), for t < n_indexed */
    int n_indexed;
} Deriv;

/* What the derivation needs of each checkpointed region, found once (scanning all forward ops
 * for every op of every region would be quadratic in the model's size). */
typedef struct RegionInfo {
    int last_op;        /* the region's last forward op */
    int earliest_saver; /* its first forward op that saves a tensor, -1 none */
    int *args;          /* the checkpointed function's non-persistent arguments (ckpt_args) */
    int n_args;
} RegionInfo;

/* Grows the per-tensor maps to at least n entries (new entries -1); nonzero on ENOMEM. */
static int ensure_cap(Deriv *d, size_t n) {
    if (n <= d->cap) return 0;
    size_t ncap = d->cap ? d->cap : 1024;
    while (ncap < n) ncap *= 2;
    const Graph *g = d->g;
    int *a = g_realloc(g, d->grad_of, d->cap * sizeof(int), ncap * sizeof(int));
    if (!a) return -1;
    d->grad_of = a;
    int *b = g_realloc(g, d->param_grad, d->cap * sizeof(int), ncap * sizeof(int));
    if (!b) return -1;
    d->param_grad = b;
    int *c = g_realloc(g, d->remap, d->cap * sizeof(int), ncap * sizeof(int));
    if (!c) return -1;
    d->remap = c;
    int *o = g_realloc(g, d->owners, d->cap * sizeof(int), ncap * sizeof(int));
    if (!o) return -1;
    d->owners = o;
    for (size_t i = d->cap; i < ncap; i++) {
        d->grad_of[i] = d->param_grad[i] = d->remap[i] = -1;
        d->owners[i] = 0;
    }
    d->cap = ncap;
    return 0;
}

/* a then b into buf of n bytes, cut as snprintf(buf, n, "%s%s", a, b) cuts it (the names of
 * derived tensors and ops: made for every op, where snprintf's formatting showed) */
static void join2(char *buf, size_t n, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > n - 1) la = n - 1;
    memcpy(buf, a, la);
    if (lb > n - 1 - la) lb = n - 1 - la;
    memcpy(buf + la, b, lb);
    buf[la + lb] = 0;
}

static VrStatus new_tensor(Graph *g, const char *prefix, const char *name, uint64_t bytes,
                           DType dt, Category cat, int *id) {
    char buf[200];
    join2(buf, sizeof buf, prefix, name);
    Tensor t = {.name = buf, .bytes = bytes, .dtype = dt, .cat = cat, .base = -1,
                .producer = -1, .module = -1};
    return graph_add_tensor(g, &t, id);
}

/* Adds a small backward op (accumulation, copy into .grad). */
static VrStatus add_simple(Graph *g, const char *name, const char *kind, int fwd, int *in, int nin,
                           int *out, int nout, int *frees, int nfrees, double bytes, int layer) {
    Op op = {.name = name, .kind = kind, .phase = PH_BWD, .fwd_op = fwd, .inputs = in,
             .n_inputs = nin, .outputs = out, .n_outputs = nout, .frees = frees,
             .n_frees = nfrees, .bytes_moved = bytes, .layer = layer};
    int id;
    return graph_add_op(g, &op, &id);
}

static bool fresh_buffer(const Deriv *d, int t);

/* InputBuffer's out-of-place sum of tensor x's gradients a and b into *sum, a new buffer of
 * category cat sized as tensor `like`; the op frees both. */
static VrStatus sum_out_of_place(Graph *g, int x, int a, int b, int like, Category cat, int fwd,
                                 int layer, int *sum) {
    uint64_t bytes = g->tensors[like].bytes;
    VrStatus st = new_tensor(g, "grad:", g->tensors[x].name, bytes, g->tensors[like].dtype, cat, sum);
    if (st) return st;
    int in[2] = {a, b}, out[1] = {*sum};
    return add_simple(g, "InputBuffer::accumulate", "elementwise", fwd, in, 2, out, 1, in, 2,
                      3.0 * (double)bytes, layer);
}

/* The gradient sum just added, where the gradient comes from the backward of an op of a
 * torch.compile graph: the sum is an add of the compiled backward graph, which Inductor fuses into
 * the kernel that reads it (Op.compiled 2: no launch); the bytes of the summands are that
 * kernel's (lua/strategies/compile.lua M.backward_bytes). Its buffers are the eager ones. */
static void fuse_compiled_sum(Graph *g, int fwd) {
    if (fwd < 0 || fwd >= graph_num_ops(g) || !graph_op(g, fwd)->compiled) return;
    Op *sum = graph_op(g, graph_num_ops(g) - 1);
    sum->compiled = 2;
    sum->bytes_moved = 0;
}

/* grad_of[x] = v, keeping the owner counts. */
static void set_grad_of(Deriv *d, int x, int v) {
    int old = d->grad_of[x];
    if (old >= 0) d->owners[old]--;
    if (v >= 0) d->owners[v]++;
    d->grad_of[x] = v;
}

/* Routes gradient `gi` (just produced, or passed through) to tensor x: into .grad for a
 * trainable parameter (AccumulateGrad steals a fresh buffer, copies a shared one), else into x's
 * pending gradient (InputBuffer: the second gradient is added out of place, both inputs freed). */
static VrStatus route_grad(Deriv *d, int x, int gi, bool fresh, int fwd, int layer) {
    Graph *g = d->g;
    VrStatus st;
    /* a view no op made (reshape without copy) hands its gradient to its base unchanged */
    while (g->tensors[x].base >= 0 && g->tensors[x].producer < 0) x = g->tensors[x].base;
    /* x's fields read once: adding a tensor below may move g->tensors */
    const bool trainable = g->tensors[x].trainable;
    const uint64_t x_bytes = g->tensors[x].bytes;
    if (trainable) {
        if (d->param_grad[x] < 0 && fresh) {
            Tensor *tg = &g->tensors[gi];
            tg->cat = CAT_GRAD;
            tg->persistent = true;
            d->param_grad[x] = gi;
            return VR_OK;
        }
        if (d->param_grad[x] < 0) { /* shared buffer: .grad gets a copy */
            int c;
            if ((st = new_tensor(g, "grad:", g->tensors[x].name, x_bytes, g->tensors[x].dtype,
                                 CAT_GRAD, &c)))
                return st;
            g->tensors[c].persistent = true;
            d->param_grad[x] = c;
            int in[1] = {gi}, out[1] = {c};
            return add_simple(g, "AccumulateGrad(copy)", "elementwise", fwd, in, 1, out, 1, in, 1,
                              2.0 * (double)x_bytes, layer);
        }
        /* A second gradient in this pass (a weight used twice: tied embeddings): the engine sums
         * the two in the AccumulateGrad node's InputBuffer before .grad is set, in place into the
         * first only where that is a buffer of its own and not a view (a Linear's weight gradient
         * is a transposed view of its GEMM's result), else out of place, both freed; .grad then
         * takes the sum (torch/csrc/autograd/input_buffer.cpp accumulate; the trace of
         * gen3p-llama32-3b-bf16-b2-ckpt-fused-stacks: a third 751.5 MiB block at the embedding's
         * backward, the other two freed after it) */
        int first = d->param_grad[x];
        bool this_pass = x >= g->n_param_grad || g->param_grad[x] < 0;
        if (this_pass && g->tensors[first].grad_view) {
            int sum;
            if ((st = sum_out_of_place(g, x, first, gi, x, CAT_GRAD, fwd, layer, &sum))) return st;
            g->tensors[sum].persistent = true;
            g->tensors[first].persistent = false; /* it was .grad only until now */
            g->tensors[first].cat = CAT_TEMP;
            d->param_grad[x] = sum;
            return VR_OK;
        }
        /* .grad exists (gradient accumulation): added in place, the incoming one dropped */
        int in[2] = {d->param_grad[x], gi};
        int fr[1] = {gi};
        return add_simple(g, "AccumulateGrad(add_)", "elementwise", fwd, in, 2, NULL, 0, fr, 1,
                          3.0 * (double)x_bytes, layer);
    }
    if (d->grad_of[x] < 0) { set_grad_of(d, x, gi); return VR_OK; }
    if (!g->tensors[d->grad_of[x]].grad_view && fresh_buffer(d, d->grad_of[x])) {
        /* InputBuffer adds in place into a buffer it owns alone that is not a view */
        int in[2] = {d->grad_of[x], gi}, fr[1] = {gi};
        st = add_simple(g, "InputBuffer::accumulate(add_)", "elementwise", fwd, in, 2, NULL, 0,
                        fr, 1, 3.0 * (double)g->tensors[gi].bytes, layer);
        if (st) return st;
        fuse_compiled_sum(g, fwd);
        return VR_OK;
    }
    int sum;
    if ((st = sum_out_of_place(g, x, d->grad_of[x], gi, gi, CAT_TEMP, fwd, layer, &sum))) return st;
    fuse_compiled_sum(g, fwd);
    set_grad_of(d, x, sum);
    return VR_OK;
}

/* True if gradient buffer t is not pending for any other tensor (autograd's use_count == 1).
 * A count kept as grad_of changes, not a scan of every tensor: a scan per accumulation made
 * gradient accumulation quadratic in its micro-batches. */
static bool fresh_buffer(const Deriv *d, int t) {
    return d->owners[t] <= 1;
}

static bool input_gets_grad(const Graph *g, const Op *op, int i) {
    const Tensor *t = &g->tensors[op->inputs[i]];
    return t->requires_grad && op->grads && op->grads[i].mode != GRAD_NONE;
}

bool graph_op_records_autograd(const Graph *g, int i) {
    const Op *op = &g->ops[i];
    for (int k = 0; k < op->n_inputs; k++)
        if (input_gets_grad(g, op, k)) return true;
    return false;
}

/* Maps tensor t into the recompute of the current region: outputs of region ops were cloned;
 * a view made without an op (a reshape) of a cloned tensor gets a clone of its own, made on
 * first use. Returns -1 on host allocation failure. */
static int remapped(Deriv *d, int t) {
    if (d->remap[t] >= 0) return d->remap[t];
    Graph *g = d->g;
    int x_base = g->tensors[t].base;
    if (x_base < 0 || g->tensors[t].producer >= 0) return t;
    int base = remapped(d, x_base);
    if (base < 0) return -1;
    if (base == x_base) return t;
    /* read t only now: remapping its base may have added tensors and moved g->tensors */
    Tensor c = g->tensors[t];
    c.base = base;
    int id;
    if (graph_add_tensor(g, &c, &id) || ensure_cap(d, (size_t)g->n_tensors + 16)) return -1;
    d->remap[t] = id;
    return id;
}

/* Whether op o saves one of its own outputs for backward. */
static bool saves_an_output(const Op *o) {
    for (int s = 0; s < o->n_saves; s++)
        for (int k = 0; k < o->n_outputs; k++)
            if (o->saves[s] == o->outputs[k]) return true;
    return false;
}

/* Which forward ops free each tensor, indexed once per backward pass: the early stop asks it
 * of every output of every recomputed region, and a scan of the rest of the forward for each
 * made the derivation quadratic in the model's depth. */
static VrStatus index_forward_frees(Deriv *d) {
    Graph *g = d->g;
    int n = g->n_tensors, total = 0;
    int *start = g_calloc(g, (size_t)n + 2, sizeof(int));
    if (!start) return VR_ENOMEM;
    for (int f = d->first; f < d->n_fwd; f++) {
        const Op *o = &g->ops[f];
        if (o->phase != PH_FWD) continue;
        for (int j = 0; j < o->n_frees; j++)
            if (o->frees[j] >= 0 && o->frees[j] < n) start[o->frees[j] + 2]++, total++;
    }
    for (int t = 2; t <= n + 1; t++) start[t] += start[t - 1];
    int *ops = g_malloc(g, sizeof(int) * ((size_t)total + 1));
    if (!ops) { g_free(g, start); return VR_ENOMEM; }
    /* start[t + 1] is the cursor of tensor t while filling, and ends as its end */
    for (int f = d->first; f < d->n_fwd; f++) {
        const Op *o = &g->ops[f];
        if (o->phase != PH_FWD) continue;
        for (int j = 0; j < o->n_frees; j++)
            if (o->frees[j] >= 0 && o->frees[j] < n) ops[start[o->frees[j] + 1]++] = f;
    }
    d->freer_start = start;
    d->freers = ops;
    d->n_indexed = n;
    return VR_OK;
}

/* Non-reentrant checkpointing (torch.utils.checkpoint, use_reentrant=False): the forward of a
 * region kept only its inputs; the first backward access re-runs the region's forward ops (as
 * PH_RECOMPUTE, new output tensors) until every tensor the region saved has been saved again
 * (early stop), and the region's backward ops use those copies.
 *
 * The recomputation stops inside the last op that saves anything, at its last save: the saved-
 * tensor pack hook raises _StopRecomputationError there. Autograd saves an op's inputs before
 * its kernel runs and its outputs after, so that op runs again only if it saves an output.
 * A LLaMA layer's down_proj saves only its input: PyTorch's recomputation allocates gate, silu,
 * up and their product, and never down_proj's output (validation/traces/optrace_pub-c05.csv.gz: the
 * recompute_fn allocations at modeling_llama.py:175 are four, against five in forward). */
static VrStatus emit_recompute(Deriv *d, int region, int n_fwd) {
    Graph *g = d->g;
    VrStatus st;
    int first = -1, last_needed = -1, last = -1;
    bool full = false;
    for (int f = d->first; f < n_fwd; f++) {
        const Op *o = &g->ops[f];
        if (o->phase != PH_FWD || o->region != region) continue;
        if (first < 0) first = f;
        if (o->n_saves > 0 && f > last_needed) last_needed = f;
        last = f;
        full = full || o->full_recompute;
    }
    if (last_needed >= 0 && !saves_an_output(&g->ops[last_needed])) last_needed--;
    if (full) last_needed = last;
    for (int f = first; f >= 0 && f <= last_needed; f++) {
        Op o = g->ops[f];
        if (o.phase != PH_FWD || o.region != region || o.ckpt_args || o.not_recomputed) continue;
        if (o.sac_saved) {
            /* the caching mode's stored outputs stand for the op's: the recomputation uses the
             * forward's tensors and the cache drops its reference to them here */
            int *fr = graph_alloc(g, sizeof(int) * (size_t)(o.n_outputs + 1));
            if (!fr) return VR_ENOMEM;
            for (int k = 0; k < o.n_outputs; k++) d->remap[o.outputs[k]] = fr[k] = o.outputs[k];
            char name[200];
            join2(name, sizeof name, o.name, " (replayed from the selective checkpoint's cache)");
            Op r = {.name = name, .kind = "none", .phase = PH_RECOMPUTE, .fwd_op = f, .frees = fr,
                    .n_frees = o.n_outputs, .layer = o.layer, .in_ckpt = true};
            int id;
            if ((st = graph_add_op(g, &r, &id))) return st;
            continue;
        }
        if (ensure_cap(d, (size_t)g->n_tensors + (size_t)o.n_outputs + 16)) return VR_ENOMEM;
        int *in = graph_alloc(g, sizeof(int) * (size_t)(o.n_inputs + 1));
        int *out = graph_alloc(g, sizeof(int) * (size_t)(o.n_outputs + 1));
        int *fr = graph_alloc(g, sizeof(int) * (size_t)(o.n_frees + 1));
        if (!in || !out || !fr) return VR_ENOMEM;
        for (int k = 0; k < o.n_inputs; k++)
            if ((in[k] = remapped(d, o.inputs[k])) < 0) return VR_ENOMEM;
        for (int k = 0; k < o.n_frees; k++)
            if ((fr[k] = remapped(d, o.frees[k])) < 0) return VR_ENOMEM;
        for (int k = 0; k < o.n_outputs; k++) {
            Tensor c = g->tensors[o.outputs[k]];
            char nm[200];
            join2(nm, sizeof nm, c.name, " (recomputed)");
            c.name = nm;
            c.producer = -1;
            if (c.base >= 0 && (c.base = remapped(d, c.base)) < 0) return VR_ENOMEM;
            int id;
            if ((st = graph_add_tensor(g, &c, &id))) return st;
            d->remap[o.outputs[k]] = id;
            out[k] = id;
        }
        char name[200];
        join2(name, sizeof name, o.name, " (recompute)");
        Op r = {.name = name, .phase = PH_RECOMPUTE, .fwd_op = f, .inputs = in,
                .n_inputs = o.n_inputs, .outputs = out, .n_outputs = o.n_outputs, .frees = fr,
                .n_frees = o.n_frees, .region = 0, .in_ckpt = true};
        graph_op_inherit(&r, &o, OPI_RECOMPUTE);
        /* the recomputation costs the op's plain dispatch: what checkpointing adds to it is
         * measured with the backward node (bwd_dispatch_ckpt_ns) */
        int id;
        if ((st = graph_add_op(g, &r, &id))) return st;
        /* a view created without an op inside the region follows its recomputed base */
    }
    /* The early stop is an exception: it unwinds the recomputation's Python frames, and every
     * local they held goes at once. So a recomputed tensor the forward still held past the stop
     * point (a residual, a normed input, released by ops that are not re-run) lives until the
     * stop, not only until its last re-run use (fulltrace_pub-c05: the recomputed residual
     * outlives the post-attention norm). That includes what the region returns, released in
     * forward by the ops after it: a block's local bound before the stop (SD3's hidden_states
     * after its feed-forward, recomputed ahead of the context stream's) is held by the frame
     * too (the capture of sd35_medium_cut_lora_ckpt: the recomputed sum lives through the
     * context feed-forward). Only for a region whose frame of arguments is modelled
     * (ckpt_args): a UNet's blocks (checkpoint.lua module_hooks) model neither. */
    if (!d->freer_start && (st = index_forward_frees(d))) return st;
    int n_held = 0, *held = NULL, held_cap = 0;
    int end = region < d->n_regions ? d->regions[region].last_op : n_fwd - 1;
    int beyond = region < d->n_regions && d->regions[region].n_args > 0 ? n_fwd - 1 : end;
    for (int f = first; f >= 0 && f <= last_needed; f++) held_cap += g->ops[f].n_outputs;
    for (int f = first; f >= 0 && f <= last_needed; f++) {
        const Op *o = &g->ops[f];
        if (o->phase != PH_FWD || o->region != region || o->ckpt_args) continue;
        for (int k = 0; k < o->n_outputs; k++) {
            int t = o->outputs[k];
            bool later = false;
            int j0 = t < d->n_indexed ? d->freer_start[t] : 0, j1 = t < d->n_indexed ? d->freer_start[t + 1] : 0;
            for (int j = j0; j < j1 && !later; j++) {
                int h = d->freers[j];
                later = h > last_needed && h <= beyond && (h > end || g->ops[h].region == region);
            }
            if (!later || d->remap[t] < 0) continue;
            if (!held && !(held = graph_alloc(g, sizeof(int) * (size_t)held_cap))) return VR_ENOMEM;
            held[n_held++] = d->remap[t];
        }
    }
    if (n_held) {
        Op rel = {.name = "checkpoint recomputation stops: its frames unwind", .kind = "none",
                  .phase = PH_RECOMPUTE, .fwd_op = -1, .frees = held, .n_frees = n_held,
                  .layer = g->ops[last_needed].layer, .in_ckpt = true};
        int id;
        if ((st = graph_add_op(g, &rel, &id))) return st;
    }
    d->recomputed = region;
    return VR_OK;
}

/* A copy of hook op f appended to the backward, its grads_of resolved into the parameters'
 * .grad tensors (further inputs, dropped with free_grads). */
static VrStatus emit_hook_op(Deriv *d, int f) {
    Graph *g = d->g;
    Op o = g->ops[f]; /* copy: g->ops may move as ops are added */
    int n_in = o.n_inputs + o.n_grads_of, n_fr = o.n_frees + (o.free_grads ? o.n_grads_of : 0);
    int *in = graph_alloc(g, sizeof(int) * (size_t)(n_in + 1));
    int *fr = graph_alloc(g, sizeof(int) * (size_t)(n_fr + 1));
    if (!in || !fr) return VR_ENOMEM;
    int ni = 0, nf = 0;
    for (int k = 0; k < o.n_inputs; k++) in[ni++] = o.inputs[k];
    for (int k = 0; k < o.n_frees; k++) fr[nf++] = o.frees[k];
    for (int k = 0; k < o.n_grads_of; k++) {
        int p = o.grads_of[k];
        int gp = (size_t)p < d->cap ? d->param_grad[p] : -1;
        if (gp < 0) continue; /* no gradient reached this parameter */
        in[ni++] = gp;
        if (o.free_grads) fr[nf++] = gp;
        /* a post-accumulate-grad hook that drops .grad (param.grad = None: Megatron's DDP hook)
         * leaves the parameter without one, so the next micro-batch's derivation makes it anew
         * (AccumulateGrad steals the incoming gradient) rather than adding into the dropped one */
        if (o.free_grads && o.hook == 3) d->param_grad[p] = -1;
    }
    Op c = o;
    c.hook = 0;
    c.region = 0;
    c.anchor = -1;
    c.inputs = in; c.n_inputs = ni;
    c.frees = fr; c.n_frees = nf;
    c.grads_of = NULL; c.n_grads_of = 0;
    c.phase = PH_BWD;
    c.fwd_op = f;
    int id;
    VrStatus st = graph_add_op(g, &c, &id);
    if (st) return st;
    if (o.remap_of)
        for (int k = 0; k < o.n_outputs; k++)
            if (o.remap_of[k] >= 0 && (size_t)o.remap_of[k] < d->cap)
                d->remap[o.remap_of[k]] = o.outputs[k];
    return VR_OK;
}

/* Appends copies of the hook ops of `layer` and `kind` (1 before its backward, or before the
 * layer after it when prefetched; 5 before its backward, never prefetched; 2 after): each
 * copy takes the .grad of its grads_of parameters as further inputs (and drops them with
 * free_grads). */
static VrStatus emit_hooks(Deriv *d, int layer, int kind) {
    Graph *g = d->g;
    for (int h = 0; h < d->n_hooks; h++) {
        int f = d->hooks[h];
        if (g->ops[f].hook != kind || g->ops[f].layer != layer) continue;
        VrStatus st = emit_hook_op(d, f);
        if (st) return st;
    }
    return VR_OK;
}

/* The tensor a gradient routed to x lands on: a view no op made hands it to its base. */
static int grad_target(const Graph *g, int x) {
    while (g->tensors[x].base >= 0 && g->tensors[x].producer < 0) x = g->tensors[x].base;
    return x;
}

/* Post-accumulate-grad hooks (Op.hook 3, torch's register_post_accumulate_grad_hook): the
 * gradients each one's parameter (grads_of[0]) gets in this backward, one per forward op input
 * through which a gradient reaches it, counted once before derivation in one pass over the
 * forward ops; and each parameter's hooks chained (post_head, post_next), so that an arriving
 * gradient visits its own. Hooks before a backward node (hook 4) are pending (1). */
static VrStatus count_post_hooks(Deriv *d) {
    Graph *g = d->g;
    int n_t = g->n_tensors;
    int *arrivals = g_calloc(g, (size_t)n_t + 1, sizeof(int));
    d->post_head = g_malloc(g, sizeof(int) * ((size_t)n_t + 1));
    d->post_next = g_malloc(g, sizeof(int) * ((size_t)d->n_hooks + 1));
    if (!arrivals || !d->post_head || !d->post_next) { g_free(g, arrivals); return VR_ENOMEM; }
    d->n_post_head = n_t;
    for (int t = 0; t < n_t; t++) d->post_head[t] = -1;
    for (int f = d->first; f < d->n_fwd; f++) {
        const Op *c = &g->ops[f];
        if (c->phase != PH_FWD || c->hook) continue;
        for (int i = 0; i < c->n_inputs; i++)
            if (input_gets_grad(g, c, i)) arrivals[grad_target(g, c->inputs[i])]++;
    }
    for (int h = d->n_hooks - 1; h >= 0; h--) {
        const Op *o = &g->ops[d->hooks[h]];
        d->post_left[h] = o->hook == 4;
        d->n_before += o->hook == 4;
        d->post_next[h] = -1;
        if (o->hook != 3 || o->grads_of[0] < 0 || o->grads_of[0] >= n_t) continue;
        int p = o->grads_of[0];
        d->post_left[h] = arrivals[p];
        d->post_next[h] = d->post_head[p];
        d->post_head[p] = h;
    }
    g_free(g, arrivals);
    return VR_OK;
}

/* The hooks before a backward node (Op.hook 4) that precede forward op f's backward (f >= 0)
 * or region `region`'s recomputation (region > 0), each once. */
static VrStatus emit_before(Deriv *d, int f, int region) {
    Graph *g = d->g;
    for (int h = 0; d->n_before > 0 && h < d->n_hooks; h++) {
        const Op *o = &g->ops[d->hooks[h]];
        if (o->hook != 4 || d->post_left[h] <= 0) continue;
        if (region > 0 ? o->region != region : (o->region > 0 || o->anchor != f)) continue;
        d->post_left[h] = 0;
        d->n_before--;
        VrStatus st = emit_hook_op(d, d->hooks[h]);
        if (st) return st;
        /* what it brought back is held by the node that reads it until that node is done */
        const Op *e = &g->ops[d->hooks[h]];
        if (d->n_unpacked + e->n_outputs > d->cap_unpacked) {
            int ncap = (d->cap_unpacked ? d->cap_unpacked * 2 : 16) + e->n_outputs;
            int *nu = g_realloc(g, d->unpacked, sizeof(int) * (size_t)d->cap_unpacked, sizeof(int) * (size_t)ncap);
            if (!nu) return VR_ENOMEM;
            d->unpacked = nu;
            d->cap_unpacked = ncap;
        }
        for (int k = 0; k < e->n_outputs; k++) d->unpacked[d->n_unpacked++] = e->outputs[k];
    }
    return VR_OK;
}

/* A gradient of tensor x has just been accumulated: the post-accumulate-grad hooks of x whose
 * last gradient this was run now, as AccumulateGrad's post hooks do. */
static VrStatus post_accumulated(Deriv *d, int x) {
    Graph *g = d->g;
    x = grad_target(g, x);
    if (x >= d->n_post_head || !g->tensors[x].trainable) return VR_OK;
    for (int h = d->post_head[x]; h >= 0; h = d->post_next[h]) {
        if (d->post_left[h] <= 0) continue;
        if (--d->post_left[h] == 0) {
            VrStatus st = emit_hook_op(d, d->hooks[h]);
            if (st) return st;
        }
    }
    return VR_OK;
}

/* torch.utils.checkpoint keeps the checkpointed function's arguments (the hidden state, an
 * attention mask, rotary tables: the region's ckpt_args marker names them) in its frame, which
 * the hooks of every saved tensor of the region refer to. The frame, and the arguments with
 * it, go when the region's last saved tensor is reset: in the backward node of the region's
 * earliest op that saves anything, as it releases its saved tensors (optrace_pub-c05: each
 * layer's input is freed from PySavedVariableHooks' destructor as its input_layernorm's
 * PowBackward0 finishes). Fills d->regions for the forward ops [first, n_fwd). */
static VrStatus find_regions(Deriv *d) {
    Graph *g = d->g;
    int max = 0, n_args = 0;
    for (int f = d->first; f < d->n_fwd; f++)
        if (g->ops[f].phase == PH_FWD && g->ops[f].region > max) max = g->ops[f].region;
    if (max == 0) return VR_OK;
    RegionInfo *r = g_calloc(g, (size_t)max + 1, sizeof *r);
    if (!r) return VR_ENOMEM;
    d->regions = r;
    d->n_regions = max + 1;
    for (int k = 0; k <= max; k++) r[k].earliest_saver = -1;
    /* room first: every marker input of each region (n_args counts them), then the distinct ones */
    for (int f = d->first; f < d->n_fwd; f++) {
        const Op *o = &g->ops[f];
        if (o->phase != PH_FWD || o->region <= 0) continue;
        RegionInfo *ri = &r[o->region];
        ri->last_op = f;
        if (o->ckpt_args) n_args += o->n_inputs, ri->n_args += o->n_inputs;
        else if (o->n_saves > 0 && ri->earliest_saver < 0) ri->earliest_saver = f;
    }
    if (n_args == 0) return VR_OK;
    for (int k = 1; k <= max; k++) {
        if (!r[k].n_args) continue;
        if (!(r[k].args = graph_alloc(g, sizeof(int) * (size_t)r[k].n_args))) return VR_ENOMEM;
        r[k].n_args = 0;
    }
    for (int f = d->first; f < d->n_fwd; f++) {
        const Op *o = &g->ops[f];
        if (o->phase != PH_FWD || o->region <= 0 || !o->ckpt_args) continue;
        RegionInfo *ri = &r[o->region];
        for (int k = 0; k < o->n_inputs; k++) {
            int t = o->inputs[k];
            if (g->tensors[t].persistent) continue;
            bool seen = false;
            for (int j = 0; j < ri->n_args && !seen; j++) seen = ri->args[j] == t;
            if (!seen) ri->args[ri->n_args++] = t;
        }
    }
    return VR_OK;
}

/* The backward op of forward op f: see graph.h. */
static VrStatus derive_one(Deriv *d, int f) {
    Graph *g = d->g;
    VrStatus st;
    Op fop = g->ops[f]; /* copy: g->ops may move as ops are added */
    int n_out_grads = 0;
    for (int i = 0; i < fop.n_outputs; i++)
        if (d->grad_of[fop.outputs[i]] >= 0) n_out_grads++;
    bool needs = false;
    for (int i = 0; i < fop.n_inputs; i++) needs |= input_gets_grad(g, &fop, i);
    if (!n_out_grads || !needs) return VR_OK; /* autograd never runs this node */
    /* torch.utils.checkpoint (non-reentrant) recomputes a region when backward first unpacks a
     * tensor it saved (checkpoint.py _checkpoint_hook's unpack_hook): the region's nodes that
     * save nothing (a cast back to the output dtype, an add, a product by a Python scalar, as
     * peft's LoRA ends a Linear) run before it, and their gradients are live through it */
    if (fop.region > 0 && d->recomputed != fop.region && fop.n_saves > 0) {
        VrStatus rs = emit_before(d, -1, fop.region);
        if (!rs) rs = emit_recompute(d, fop.region, d->n_fwd);
        if (rs) return rs;
    }
    /* the hooks anchored on this node (before_op) run before it, after its region's
     * recomputation where it has one (Megatron's column-parallel linear gathers its saved input
     * again inside its backward, a recomputed one too) */
    if ((st = emit_before(d, f, 0))) return st;

    const RegionInfo *ri = fop.region > 0 && fop.region < d->n_regions ? &d->regions[fop.region] : NULL;
    bool frame_goes = ri && ri->earliest_saver == f && ri->n_args > 0;
    int args_cap = frame_goes ? ri->n_args : 0;
    int cap = fop.n_outputs + fop.n_saves + fop.n_inputs + 1;
    int *in = graph_alloc(g, (size_t)cap * sizeof(int));
    int *out = graph_alloc(g, (size_t)(fop.n_inputs + 1) * sizeof(int));
    int *frees = graph_alloc(g, (size_t)(cap + args_cap + d->n_unpacked) * sizeof(int));
    int *gi_of = graph_alloc(g, (size_t)(fop.n_inputs + 1) * sizeof(int));
    if (!in || !out || !frees || !gi_of) return VR_ENOMEM;
    int nin = 0, nout = 0, nfree = 0;
    for (int i = 0; i < fop.n_outputs; i++) {
        int go = d->grad_of[fop.outputs[i]];
        if (go >= 0) { in[nin++] = go; frees[nfree++] = go; }
    }
    for (int i = 0; i < fop.n_saves; i++) {
        int sv = fop.saves[i];
        /* a saved tensor that is an input's gradient is handed on, not dropped */
        bool handed_on = false;
        for (int k = 0; k < fop.n_inputs && fop.grads; k++)
            handed_on |= fop.grads[k].mode == GRAD_SAVED && fop.grads[k].pass_output == i &&
                         input_gets_grad(g, &fop, k);
        if (handed_on) continue;
        if (fop.region > 0) {
            if ((sv = remapped(d, sv)) < 0) return VR_ENOMEM; /* the recomputed copy */
        } else if (d->remap[sv] >= 0) {
            sv = d->remap[sv]; /* gathered again for backward (ZeRO-3/FSDP) */
        }
        in[nin++] = sv;
        frees[nfree++] = sv;
    }
    /* the frame holds the region's recomputed tensors and its arguments: the recomputed ones
     * go first as it is destroyed (fulltrace_pub-c05: the recomputed x, then the layer input) */
    for (int k = 0; frame_goes && k < ri->n_args; k++) frees[nfree++] = ri->args[k];
    /* saved tensors brought back for this node (hook 4) go when it is done */
    for (int k = 0; k < d->n_unpacked; k++) frees[nfree++] = d->unpacked[k];
    d->n_unpacked = 0;

    /* input gradients, in the order the kernel allocates them */
    for (int k = 0; k < fop.n_inputs; k++) gi_of[k] = -1;
    for (int k = 0; k < fop.n_inputs; k++) {
        int i = k < fop.n_grad_order ? fop.grad_order[k] : k;
        if (k >= fop.n_grad_order && fop.n_grad_order > 0) {
            /* inputs not named in grad_order come after, in input order */
            bool named = false;
            for (int j = 0; j < fop.n_grad_order; j++) named |= fop.grad_order[j] == k;
            if (named) continue;
            i = k;
        }
        if (!input_gets_grad(g, &fop, i) || gi_of[i] >= 0) continue;
        const GradSpec *gs = &fop.grads[i];
        const Tensor *x = &g->tensors[fop.inputs[i]];
        if (gs->mode == GRAD_PASS) {
            gi_of[i] = d->grad_of[fop.outputs[gs->pass_output]];
            continue; /* may be -1: that output got no gradient */
        }
        if (gs->mode == GRAD_SAVED) {
            gi_of[i] = fop.saves[gs->pass_output];
            continue;
        }
        /* a view owns no storage, but its gradient is a tensor of the view's size (a Linear on
         * the attention output's view: MmBackward0 allocates dX, optrace_pub-c04) */
        uint64_t bytes = gs->grad_bytes ? gs->grad_bytes
                       : x->base >= 0 ? (uint64_t)x->numel * dtype_size(x->dtype) : x->bytes;
        int t;
        if ((st = new_tensor(g, "grad:", x->name, bytes, gs->grad_dtype, CAT_TEMP, &t))) return st;
        g->tensors[t].grad_view = gs->view;
        out[nout++] = t;
        gi_of[i] = t;
    }
    /* unless the op says, backward moves twice what the forward moved (an assumption: most
     * derivative formulas read the output gradient and a saved tensor and write the input
     * gradient, often in more than one kernel); a node whose gradients all pass through (an
     * add) launches no kernel */
    double bwd_bytes = fop.bwd_bytes > 0 ? fop.bwd_bytes : fop.bwd_bytes < 0 ? 0 : 2.0 * fop.bytes_moved;
    bool launches = nout > 0 || fop.n_bwd_workspace > 0 || fop.bwd_rowsum[0] > 0 ||
                    fop.bwd_flops > 0 || fop.bwd_bytes > 0;
    /* a GEMM's backward launches one GEMM per input that gets a gradient (dX = dY W, dW = dY^T X) */
    bool gemm = fop.kind_id == OPK_MM || fop.kind_id == OPK_CONV;
    int kernels = fop.bwd_kernels > 0 ? fop.bwd_kernels : gemm && nout > 1 ? nout : 1;
    char name[160];
    join2(name, sizeof name, fop.name, ".backward");
    Op b = {.name = name, .kind = !launches ? "none" : fop.bwd_kind ? fop.bwd_kind : fop.kind,
            .phase = PH_BWD,
            .fwd_op = f, .inputs = in,
            .n_inputs = nin, .outputs = out, .n_outputs = nout, .frees = frees, .n_frees = nfree,
            .workspace = fop.bwd_workspace, .n_workspace = fop.n_bwd_workspace,
            .rowsum = {fop.bwd_rowsum[0], fop.bwd_rowsum[1]},
            .flops = fop.bwd_flops > 0 ? fop.bwd_flops : 2.0 * fop.flops, .rate_at = fop.bwd_rate_at,
            .bytes_moved = bwd_bytes, .kernels = kernels,
            .gemms = fop.flops > 0 && fop.bwd_flops > 0 ? (int)(fop.bwd_flops / fop.flops + 0.5) : 2,
            .in_ckpt = fop.region > 0, .workspace_first = fop.bwd_workspace_first,
            .workspace_at = fop.bwd_workspace_at, .n_workspace_at = fop.n_bwd_workspace_at,
            .dispatch_ns = fop.bwd_dispatch_ns, .dispatch_ckpt_ns = fop.bwd_dispatch_ckpt_ns,
            .layout_bytes = {fop.bwd_layout_bytes[0], fop.bwd_layout_bytes[1]}};
    graph_op_inherit(&b, &fop, OPI_BWD); /* its dtype, layer, stream, world, ... */
    int bid;
    if ((st = graph_add_op(g, &b, &bid))) return st;
    for (int i = 0; i < fop.n_outputs; i++) set_grad_of(d, fop.outputs[i], -1);

    for (int i = 0; i < fop.n_inputs; i++) {
        if (gi_of[i] < 0) continue;
        bool fresh = fop.grads[i].mode == GRAD_NEW || fop.grads[i].mode == GRAD_SAVED;
        /* the same tensor may appear twice among the inputs (x * x): both gradients route */
        if ((st = route_grad(d, fop.inputs[i], gi_of[i], fresh, f, fop.layer))) return st;
        if (d->post_left && (st = post_accumulated(d, fop.inputs[i]))) return st;
    }
    return VR_OK;
}

/* The backward of the forward ops [first, n_fwd), seeded at tensor `loss` by ones_like(loss)
 * (grad_in < 0) or by the given gradient grad_in (a pipeline stage's output gradient, received
 * from the next stage); the gradient reaching tensor `keep` (>= 0) is handed back in *kept
 * instead of released with the graph (-1 when none reached it). */
static VrStatus derive(Graph *g, int first, int n_fwd, int loss, int grad_in, bool grad_in_held, int keep,
                       int *kept) {
    if (loss < 0 || loss >= g->n_tensors || !g->tensors[loss].requires_grad) {
        snprintf(g->err, sizeof g->err, "the loss tensor does not require grad: nothing to train");
        return VR_EINVAL;
    }
    VrStatus st = VR_ENOMEM;
    Deriv d = {.g = g, .recomputed = 0};
    d.n_fwd = n_fwd;
    d.first = first;
    if (kept) *kept = -1;
    int *never_run = NULL;
    size_t n_saved = 0;
    for (int f = d.first; f < n_fwd; f++) n_saved += (size_t)g->ops[f].n_saves;
    if (ensure_cap(&d, (size_t)g->n_tensors + 16)) goto out;
    /* an earlier micro-batch's backward left .grad tensors: later ones accumulate into them */
    for (int t = 0; t < g->n_param_grad && (size_t)t < d.cap; t++) d.param_grad[t] = g->param_grad[t];

    int oid;
    if (grad_in >= 0) {
        /* torch.autograd.backward(stage_output, grad): the stage drops its output (the
         * pipeline stage's forward cache) as the gradient takes over */
        int io[2] = {loss, grad_in}, lossv[1] = {loss};
        Op seed_op = {.name = "backward(stage output, received gradient)", .kind = "none",
                      .phase = PH_BWD, .fwd_op = -1, .inputs = io, .n_inputs = 2, .frees = lossv,
                      .n_frees = 1, .layer = -1};
        if ((st = graph_add_op(g, &seed_op, &oid))) goto out;
        set_grad_of(&d, loss, grad_in);
        /* the caller's reference: an owner that is never released, so the buffer is never fresh */
        if (grad_in_held) d.owners[grad_in]++;
    } else {
        /* loss.backward(): ones_like(loss) seeds the gradient */
        int seed;
        if ((st = new_tensor(g, "grad:", g->tensors[loss].name, g->tensors[loss].bytes,
                             g->tensors[loss].dtype, CAT_TEMP, &seed)))
            goto out;
        int lossv[1] = {loss}, seedv[1] = {seed};
        Op ones = {.name = "ones_like(loss)", .kind = "elementwise", .phase = PH_BWD, .fwd_op = -1,
                   .inputs = lossv, .n_inputs = 1, .outputs = seedv, .n_outputs = 1,
                   .frees = lossv, .n_frees = 1, .bytes_moved = 4, .layer = -1};
        if ((st = graph_add_op(g, &ones, &oid))) goto out;
        set_grad_of(&d, loss, seed);
    }

    never_run = g_malloc(g, sizeof(int) * (n_saved + 1));
    if (!never_run) { st = VR_ENOMEM; goto out; }
    int n_never = 0;
    int cur_layer = -2; /* layer whose backward is being derived; -2 none yet */
    int prefetched = -2; /* layer whose pre-backward hooks were already issued early */
    if ((st = find_regions(&d))) goto out;
    /* the hook ops, found once: emit_hooks runs for every layer */
    d.hooks = g_malloc(g, sizeof(int) * (size_t)(n_fwd - d.first + 1));
    if (!d.hooks) { st = VR_ENOMEM; goto out; }
    for (int f = d.first; f < n_fwd; f++)
        if (g->ops[f].hook) d.hooks[d.n_hooks++] = f;
    bool any_hooks = d.n_hooks > 0;
    bool any_post = false;
    for (int h = 0; h < d.n_hooks; h++) any_post |= g->ops[d.hooks[h]].hook == 3 || g->ops[d.hooks[h]].hook == 4;
    if (any_post) {
        if (!(d.post_left = g_malloc(g, sizeof(int) * (size_t)d.n_hooks))) { st = VR_ENOMEM; goto out; }
        if ((st = count_post_hooks(&d))) goto out;
    }
    /* the root's pre-backward hooks (FSDP2 with reshard_after_forward=True gathers the root
     * again) run as backward starts, before anything of the head's backward */
    if (any_hooks && ((st = emit_hooks(&d, -1, 1)) || (st = emit_hooks(&d, -1, 5)))) goto out;
    for (int f = n_fwd - 1; f >= d.first; f--) {
        if (g->ops[f].phase != PH_FWD || g->ops[f].hook) continue;
        if (any_hooks && g->ops[f].layer != cur_layer) {
            if (cur_layer >= 0 && (st = emit_hooks(&d, cur_layer, 2))) break;
            cur_layer = g->ops[f].layer;
            if (cur_layer >= 0 && cur_layer != prefetched && (st = emit_hooks(&d, cur_layer, 1)))
                break;
            if (cur_layer >= 0 && (st = emit_hooks(&d, cur_layer, 5))) break;
            /* backward prefetch (FSDP2, ZeRO-3): the next layer's pre-backward hooks (its
             * all-gather) are issued as this layer's backward starts; as backward itself starts
             * (the head and loss, outside every layer) the root's pre-backward prefetches the
             * last layer (fulltrace_dev-x2-fsdp2-raf1-trace: its all-gather comes before the
             * loss's backward) */
            int next = -1;
            for (int k = f - 1; k >= d.first && next < 0; k--)
                if (g->ops[k].phase == PH_FWD && !g->ops[k].hook && g->ops[k].layer != cur_layer &&
                    g->ops[k].layer >= 0)
                    next = g->ops[k].layer;
            if (next >= 0 && next != prefetched) {
                if ((st = emit_hooks(&d, next, 1))) break;
                prefetched = next;
            }
        }
        if (ensure_cap(&d, (size_t)g->n_tensors + 2 * (size_t)g->ops[f].n_inputs + 16)) {
            st = VR_ENOMEM;
            break;
        }
        int before = g->n_ops;
        if ((st = derive_one(&d, f))) break;
        if (g->n_ops == before) /* no backward node ran: its saved tensors go with the graph */
            for (int i = 0; i < g->ops[f].n_saves; i++) never_run[n_never++] = g->ops[f].saves[i];
    }
    if (!st && any_hooks && cur_layer >= 0) st = emit_hooks(&d, cur_layer, 2);
    /* post hooks of parameters outside every layer (embeddings, head) run when backward ends */
    if (!st && any_hooks) st = emit_hooks(&d, -1, 2);
    /* then the root's final callback (hook 6), every layer's in op order */
    for (int h = 0; !st && any_hooks && h < d.n_hooks; h++)
        if (g->ops[d.hooks[h]].hook == 6) st = emit_hook_op(&d, d.hooks[h]);
    /* a post-accumulate-grad hook whose parameter got some of its gradients but not all (a
     * consumer whose backward never ran) runs as backward ends */
    for (int h = 0; !st && any_post && h < d.n_hooks; h++) {
        const Op *o = &g->ops[d.hooks[h]];
        if (o->hook == 3 && d.post_left[h] > 0 && (size_t)o->grads_of[0] < d.cap &&
            d.param_grad[o->grads_of[0]] >= 0)
            st = emit_hook_op(&d, d.hooks[h]);
    }
    /* gradients left pending on inputs that need none further (e.g. the embedding output when
     * the embedding is frozen) and the saved tensors of nodes that never ran are released when
     * backward() returns and the graph is freed */
    if (!st) {
        int *grown = g_realloc(g, never_run, sizeof(int) * (n_saved + 1),
                               sizeof(int) * (n_saved + (size_t)g->n_tensors + 1));
        if (!grown) { st = VR_ENOMEM; goto out; }
        never_run = grown;
        if (keep >= 0 && (size_t)keep < d.cap && d.grad_of[keep] >= 0) {
            *kept = d.grad_of[keep];
            set_grad_of(&d, keep, -1);
        }
        for (int t = 0; t < g->n_tensors && (size_t)t < d.cap; t++)
            if (d.grad_of[t] >= 0) never_run[n_never++] = d.grad_of[t];
        if (n_never) {
            Op rel = {.name = "release graph", .kind = "none", .phase = PH_BWD, .fwd_op = -1,
                      .frees = never_run, .n_frees = n_never, .layer = -1};
            st = graph_add_op(g, &rel, &oid);
        }
    }
out:
    g_free(g, never_run);
    g_free(g, d.regions);
    g_free(g, d.freer_start);
    g_free(g, d.freers);
    g_free(g, d.hooks);
    g_free(g, d.post_left);
    g_free(g, d.post_next);
    g_free(g, d.post_head);
    g_free(g, d.unpacked);
    g_free(g, d.grad_of);
    g_free(g, d.owners);
    g_free(g, d.remap);
    if (!st) {
        g_free(g, g->param_grad);
        g->param_grad = d.param_grad;
        g->n_param_grad = (int)d.cap;
    } else {
        g_free(g, d.param_grad);
    }
    if (st == VR_ENOMEM) snprintf(g->err, sizeof g->err, "out of host memory deriving backward");
    return st;
}

VrStatus graph_derive_backward(Graph *g, int loss) {
    VrStatus st = derive(g, g->derived_upto, g->n_ops, loss, -1, false, -1, NULL);
    if (!st) g->derived_upto = g->n_ops;
    return st;
}

VrStatus graph_derive_backward_of(Graph *g, const BackwardOf *b, int *in_grad) {
    if (in_grad) *in_grad = -1;
    if (!b || b->first < 0 || b->end < b->first || b->end > g->n_ops) {
        snprintf(g->err, sizeof g->err, "derive backward: forward ops [%d, %d) outside the graph's %d ops",
                 b ? b->first : -1, b ? b->end : -1, g->n_ops);
        return VR_EINVAL;
    }
    /* (a hook op is declared in forward for the backward it joins: FSDP2's gradient hooks) */
    for (int f = b->first; f < b->end; f++)
        if (g->ops[f].phase != PH_FWD && g->ops[f].phase != PH_BUILD && !g->ops[f].hook) {
            snprintf(g->err, sizeof g->err, "derive backward: op %d (%s) in [%d, %d) is not a forward op",
                     f, g->ops[f].name, b->first, b->end);
            return VR_EINVAL;
        }
    if (b->grad_out >= g->n_tensors || b->input >= g->n_tensors) {
        snprintf(g->err, sizeof g->err, "derive backward: no tensor %d", b->grad_out >= g->n_tensors ? b->grad_out : b->input);
        return VR_EINVAL;
    }
    return derive(g, b->first, b->end, b->output, b->grad_out, b->grad_out_held, b->input, in_grad);
}

/* ---- a layer as another layer's --------------------------------------------------------- */

void graph_renamer_init(LayerRenamer *r, int from, int to) {
    static const char *const fmt[2] = {"layers.%d", "layer %d"};
    for (int p = 0; p < 2; p++) {
        snprintf(r->from[p], sizeof r->from[p], fmt[p], from);
        snprintf(r->to[p], sizeof r->to[p], fmt[p], to);
        r->from_len[p] = strlen(r->from[p]);
        r->to_len[p] = strlen(r->to[p]);
    }
}

/* s with r's "layers.F" and "layer F" (F not followed by a digit) written for the other layer,
 * into out (n bytes, cut short if it must). */
void graph_renamer_apply(const LayerRenamer *r, const char *s, char *out, size_t n) {
    size_t k = 0;
    while (*s && k + 1 < n) {
        const char *h = strstr(s, "layer");
        size_t plain = h ? (size_t)(h - s) : strlen(s);
        if (plain > n - 1 - k) plain = n - 1 - k;
        memcpy(out + k, s, plain);
        k += plain;
        s += plain;
        if (!h || k + 1 >= n) break;
        int hit = -1;
        for (int p = 0; p < 2 && hit < 0; p++)
            if (strncmp(s, r->from[p], r->from_len[p]) == 0 && !(s[r->from_len[p]] >= '0' && s[r->from_len[p]] <= '9'))
                hit = p;
        if (hit >= 0 && k + r->to_len[hit] < n) {
            memcpy(out + k, r->to[hit], r->to_len[hit]);
            k += r->to_len[hit];
            s += r->from_len[hit];
        } else {
            out[k++] = *s++;
        }
    }
    out[k] = 0;
}

void graph_rename_layer(const char *s, int from, int to, char *out, size_t n) {
    LayerRenamer r;
    graph_renamer_init(&r, from, to);
    graph_renamer_apply(&r, s, out, n);
}

/* Where map carries tensor x when the copies start at t0 (the template's own tensors) */
static int map_tensor(const LayerMap *m, int t0, int x) {
    if (x >= m->t_first && x < m->t_first + m->t_count) return t0 + (x - m->t_first);
    for (int i = 0; i < m->n_ext; i++)
        if (m->ext_from[i] == x) return m->ext_to[i];
    return x;
}

static int map_op(const LayerMap *m, int op0, int x) {
    return x >= m->op_first && x < m->op_first + m->op_count ? op0 + (x - m->op_first) : x;
}

static void map_ids(const LayerMap *m, int t0, const int *in, int n, int *out) {
    for (int i = 0; i < n; i++) out[i] = map_tensor(m, t0, in[i]);
}

/* The template's tensor i carried over (copies starting at t0 / op0), its name in name. */
static Tensor carried_tensor(const Graph *g, const LayerMap *m, const LayerRenamer *rn, int i,
                             int t0, int op0, char *name, size_t name_n) {
    Tensor t = g->tensors[i];
    graph_renamer_apply(rn, t.name, name, name_n);
    t.name = name;
    if (t.base >= 0) t.base = map_tensor(m, t0, t.base);
    if (t.producer >= 0) t.producer = map_op(m, op0, t.producer);
    return t;
}

/* carried_op's step for one list of op_fields.h: a list of tensor ids is mapped into buf */
#define CARRY_OPE_TENSORS(member, count) \
    if (o.member) { \
        map_ids(m, t0, o.member, o.count, p); \
        o.member = p; \
        p += o.count; \
    }
#define CARRY_OPE_INTS(member, count)
#define CARRY_OPE_BYTES(member, count)
#define CARRY_OPE_GRADS(member, count)

/* The template's op j carried over (copies starting at t0 / op0), its arrays in buf (room for
 * 6 x the largest list) and its name in name. */
static Op carried_op(const Graph *g, const LayerMap *m, const LayerRenamer *rn, int j, int t0, int *buf,
                     char *name, size_t name_n) {
    Op o = g->ops[j];
    int *p = buf;
    graph_renamer_apply(rn, o.name, name, name_n);
    o.name = name;
    /* every list of tensor ids (op_fields.h OPE_TENSORS) maps to the copies */
#define OP_LIST(type, member, count, key, read, elem, inherit) CARRY_##elem(member, count)
#define OP_LISTX(type, member, count, key, read, elem, inherit) CARRY_##elem(member, count)
#include "op_fields.h"
    if (o.layer == m->from_layer) o.layer = m->to_layer;
    if (o.region > 0) o.region += m->region_delta;
    return o;
}

/* The room carried_op needs for the largest op of the template: its tensor-id lists. */
static size_t max_list(const Graph *g, const LayerMap *m) {
    size_t mx = 1;
    for (int j = m->op_first; j < m->op_first + m->op_count; j++) {
        const Op *o = &g->ops[j];
        size_t n = 0;
#define LIST_ROOM_OPE_TENSORS(count) n += (size_t)o->count;
#define LIST_ROOM_OPE_INTS(count)
#define LIST_ROOM_OPE_BYTES(count)
#define LIST_ROOM_OPE_GRADS(count)
#define OP_LIST(type, member, count, key, read, elem, inherit) LIST_ROOM_##elem(count)
#define OP_LISTX(type, member, count, key, read, elem, inherit) LIST_ROOM_##elem(count)
#include "op_fields.h"
        if (n > mx) mx = n;
    }
    return mx;
}

static bool template_ok(const Graph *g, const LayerMap *m) {
    if (m->t_first < 0 || m->t_count < 0 || m->t_first + m->t_count > g->n_tensors ||
        m->op_first < 0 || m->op_count < 0 || m->op_first + m->op_count > g->n_ops)
        return false;
    for (int j = m->op_first; j < m->op_first + m->op_count; j++)
        if (g->ops[j].fwd_op != -1) return false; /* a derived op: backward is derived later */
    return true;
}

VrStatus graph_replicate(Graph *g, const LayerMap *m, int *t_first, int *op_first) {
    if (!template_ok(g, m)) {
        snprintf(g->err, sizeof g->err, "replicate: not a range of declared (not derived) ops");
        return VR_EINVAL;
    }
    int t0 = g->n_tensors, op0 = g->n_ops;
    char name[512];
    LayerRenamer rn;
    graph_renamer_init(&rn, m->from_layer, m->to_layer);
    for (int i = m->t_first; i < m->t_first + m->t_count; i++) {
        Tensor t = carried_tensor(g, m, &rn, i, t0, op0, name, sizeof name);
        t.producer = -1; /* graph_add_op sets it as the copied op is added */
        int id;
        VrStatus st = graph_add_tensor(g, &t, &id);
        if (st) return st;
    }
    int *buf = g_malloc(g, sizeof(int) * max_list(g, m));
    if (!buf) return VR_ENOMEM;
    for (int j = m->op_first; j < m->op_first + m->op_count; j++) {
        Op o = carried_op(g, m, &rn, j, t0, buf, name, sizeof name);
        int id;
        VrStatus st = graph_add_op(g, &o, &id);
        if (st) { g_free(g, buf); return st; }
    }
    g_free(g, buf);
    *t_first = t0;
    *op_first = op0;
    return VR_OK;
}

static bool same_ints(const int *a, const int *b, int n) {
    return n == 0 || (a && b && memcmp(a, b, sizeof(int) * (size_t)n) == 0);
}
static bool same_u64s(const uint64_t *a, const uint64_t *b, int n) {
    return n == 0 || (a && b && memcmp(a, b, sizeof(uint64_t) * (size_t)n) == 0);
}
static bool same_str(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

static bool same_tensor(const Tensor *a, const Tensor *b) {
    return same_str(a->name, b->name) && a->bytes == b->bytes && a->numel == b->numel &&
           a->dtype == b->dtype && a->cat == b->cat && a->base == b->base &&
           a->producer == b->producer && a->module == b->module &&
           a->requires_grad == b->requires_grad && a->is_param == b->is_param &&
           a->trainable == b->trainable && a->grad_view == b->grad_view &&
           a->persistent == b->persistent;
}

static bool same_grads(const GradSpec *x, const GradSpec *y, int n) {
    if (!x || !y) return !x && !y;
    for (int i = 0; i < n; i++)
        if (x[i].mode != y[i].mode || x[i].pass_output != y[i].pass_output ||
            x[i].grad_bytes != y[i].grad_bytes || x[i].grad_dtype != y[i].grad_dtype ||
            x[i].view != y[i].view)
            return false;
    return true;
}

/* Lists of op_fields.h alike: the same length (OP_LIST) and elements; a list whose length is
 * another's (OP_LISTX) present in both or neither */
#define SAME_OPE_TENSORS(x, y, n) same_ints(x, y, n)
#define SAME_OPE_INTS(x, y, n) same_ints(x, y, n)
#define SAME_OPE_BYTES(x, y, n) same_u64s(x, y, n)
#define SAME_OPE_GRADS(x, y, n) same_grads(x, y, n)

/* Every field of op_fields.h alike (values byte for byte, strings and lists by content). */
static bool same_op(const Op *a, const Op *b) {
#define OP_VAL(type, member, dim, key, read, def, inherit) \
    if (memcmp(&a->member, &b->member, sizeof a->member) != 0) return false;
#define OP_STR(member, key, read, inherit) if (!same_str(a->member, b->member)) return false;
#define OP_LIST(type, member, count, key, read, elem, inherit) \
    if (a->count != b->count || !SAME_##elem(a->member, b->member, a->count)) return false;
#define OP_LISTX(type, member, count, key, read, elem, inherit) \
    if ((!a->member) != (!b->member) || \
        (a->member && !SAME_##elem(a->member, b->member, a->count))) return false;
#include "op_fields.h"
    return true;
}

bool graph_is_replica(const Graph *g, const LayerMap *m, int t_first, int op_first) {
    if (!template_ok(g, m) || t_first < 0 || op_first < 0 || t_first + m->t_count > g->n_tensors ||
        op_first + m->op_count > g->n_ops)
        return false;
    char name[512];
    LayerRenamer rn;
    graph_renamer_init(&rn, m->from_layer, m->to_layer);
    for (int i = 0; i < m->t_count; i++) {
        Tensor t = carried_tensor(g, m, &rn, m->t_first + i, t_first, op_first, name, sizeof name);
        if (!same_tensor(&t, &g->tensors[t_first + i])) return false;
    }
    int *buf = g_malloc(g, sizeof(int) * max_list(g, m));
    if (!buf) return false;
    bool same = true;
    for (int j = 0; same && j < m->op_count; j++) {
        Op o = carried_op(g, m, &rn, m->op_first + j, t_first, buf, name, sizeof name);
        same = same_op(&o, &g->ops[op_first + j]);
    }
    g_free(g, buf);
    return same;
}
