/* graph_ud.c: the Graph userdata that Lua builds a run's graph through (G:tensor, G:op, ...),
 * and the core functions that go with it (new_graph, row_sum_buffers, the field names). An op's
 * fields are those of sim/op_fields.h, read by name. */
#include <lauxlib.h>
#include <lua.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../device.h"
#include "../mincut.h"
#include "bind_int.h"
#include "watchdog.h"

typedef struct GraphBox { Graph *g; } GraphBox;
#define GRAPH_MT "vrsim.Graph"

static Graph *check_graph(lua_State *L) {
    GraphBox *b = luaL_checkudata(L, 1, GRAPH_MT);
    if (!b->g) luaL_error(L, "graph already taken");
    return b->g;
}

static int graph_gc(lua_State *L) {
    GraphBox *b = luaL_checkudata(L, 1, GRAPH_MT);
    graph_free(b->g);
    b->g = NULL;
    return 0;
}

/* The graph methods' field names as Lua strings, made once (bind_open_core) and kept as the methods'
 * upvalue: a lookup by one of them is a table lookup, where lua_getfield would first find its C
 * string among Lua's interned strings (a strcmp each time; 1.2 % of the instructions of a 7B DDP
 * run, callgrind). The array holds KEY_ID "id", then TENSOR_FIELDS from KEY_TENSOR0, then
 * OP_FIELDS from KEY_OP0. Only a graph method (which has the upvalue) may push one. */
enum { KEY_ID = 1, KEY_TENSOR0 = 2 };
static void push_key(lua_State *L, int k) { lua_rawgeti(L, lua_upvalueindex(1), k); }

/* Reads the value on top, an array field k of integers (tensor ids, 1-based in Lua -> 0-based)
 * or of tensors (tables whose field id is one), into a userdata buffer kept on the stack above
 * it; returns its length. upto_nil: the list ends at its first nil, as ipairs ends (nn.op's
 * lists); otherwise a nil within the length is an error. */
static int top_ids(lua_State *L, const char *k, int **out, bool ids, bool upto_nil, int *local,
                   int cap) {
    *out = NULL;
    if (lua_isnil(L, -1)) return 0; /* leaves nil on the stack: popped with the op's frame */
    luaL_checktype(L, -1, LUA_TTABLE);
    int t = lua_gettop(L);
    int n = (int)luaL_len(L, t);
    /* a short list into the caller's buffer (local, cap ints), a longer one into a userdata */
    int *buf = local && n <= cap ? local : lua_newuserdatauv(L, sizeof(int) * (size_t)(n + 1), 0);
    for (int i = 0; i < n; i++) {
        if (lua_geti(L, t, i + 1) == LUA_TNIL && upto_nil) {
            /* the length is a border: a tensor at n follows this hole */
            if (i + 1 < n) luaL_error(L, "%s[%d] is nil, and %s[%d] is not", k, i + 1, k, n);
            lua_pop(L, 1);
            n = i;
            break;
        }
        if (lua_istable(L, -1)) push_key(L, KEY_ID), lua_gettable(L, -2), lua_remove(L, -2);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "%s[%d] is not a tensor", k, i + 1);
        buf[i] = (int)(ids ? v - 1 : v);
        lua_pop(L, 1);
    }
    *out = buf;
    return n;
}

static int top_u64s(lua_State *L, const char *k, uint64_t **out) {
    *out = NULL;
    if (lua_isnil(L, -1)) return 0;
    luaL_checktype(L, -1, LUA_TTABLE);
    int n = (int)luaL_len(L, -1);
    uint64_t *buf = lua_newuserdatauv(L, sizeof(uint64_t) * (size_t)(n + 1), 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, -2, i + 1);
        double v = lua_tonumber(L, -1);
        if (!(v >= 0 && v <= 1e18)) luaL_error(L, "%s[%d] must be a byte count in [0, 1e18]", k, i + 1);
        buf[i] = (uint64_t)v;
        lua_pop(L, 1);
    }
    *out = buf;
    return n;
}

static const struct { const char *name; Category c; } CATS[] = {
    {"param", CAT_PARAM}, {"grad", CAT_GRAD}, {"optstate", CAT_OPTSTATE},
    {"activation", CAT_ACTIVATION}, {"temp", CAT_TEMP}};
static const struct { const char *name; Phase p; } PHASES[] = {
    {"build", PH_BUILD}, {"fwd", PH_FWD}, {"bwd", PH_BWD}, {"recompute", PH_RECOMPUTE},
    {"optim", PH_OPTIM}, {"zero_grad", PH_ZERO_GRAD}};

static void raise_status(lua_State *L, Graph *g, VrStatus st) {
    if (st == VR_ENOMEM) luaL_error(L, "out of host memory");
    luaL_error(L, "%s", graph_error(g));
}

/* Where a tensor's or an op's fields come from: the table at index t, by name (G:tensor{...},
 * G:op{...}), or the call's arguments from index base on, field f at base + f in the order of
 * names (G:tensorv(...): the op library's tensors, which name nothing). Absent and nil
 * are the same either way, and so are the errors. */
typedef struct Fields {
    int t;                     /* the table, or 0 for arguments */
    int base, n;               /* arguments: the first one's index and how many there are */
    const char *const *names;
    int key0;                  /* names[0]'s key (push_key) */
    bool spread;               /* t's fields copied to base + f already (spread_fields) */
    uint64_t absent;           /* bit f: field f is known to be nil (spread_fields,
                                * args_absent), so reading it is its default at once */
} Fields;

#define ABSENT(fs, f) ((fs)->absent >> (f) & 1)

/* Pushes field f. */
static void push_field(lua_State *L, const Fields *fs, int f) {
    if (fs->spread) lua_pushvalue(L, fs->base + f);
    else if (fs->t) push_key(L, fs->key0 + f), lua_gettable(L, fs->t);
    else if (f < fs->n) lua_pushvalue(L, fs->base + f);
    else lua_pushnil(L);
}

/* A plain table's fields (fs->t, no metatable: what lua_gettable reads is what lua_next visits)
 * copied in one pass to fresh stack slots, field f at base + f and nil where absent: an op table
 * from a strategy gives some 8 of OP_FIELDS' 44, and looking up each of the 44 by name was most
 * of reading it (8,800 instructions an op table, 5,900 this way: docs/speed.md). by_name (an
 * upvalue index): field name -> key (push_key's numbering).
 * A table with a metatable is read by name, as before. */
static void spread_fields(lua_State *L, Fields *fs, int count, int by_name) {
    if (lua_getmetatable(L, fs->t)) { lua_pop(L, 1); return; }
    luaL_checkstack(L, count + 4, "op fields");
    int base = lua_gettop(L) + 1;
    uint64_t given = 0;
    lua_settop(L, base + count - 1);
    lua_pushnil(L);
    while (lua_next(L, fs->t)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            lua_pushvalue(L, -2);
            int f = lua_rawget(L, by_name) == LUA_TNUMBER ? (int)lua_tointeger(L, -1) - fs->key0 : -1;
            lua_pop(L, 1);
            if (f >= 0 && f < count && !lua_isnil(L, -1)) lua_copy(L, -1, base + f), given |= 1ull << f;
        }
        lua_pop(L, 1);
    }
    fs->base = base, fs->n = count, fs->spread = true, fs->absent = ~given;
}

/* The arguments' fields of fs that are nil (or beyond the last argument), of count. */
static void args_absent(lua_State *L, Fields *fs, int count) {
    uint64_t absent = 0;
    for (int f = 0; f < count; f++)
        if (f >= fs->n || lua_isnil(L, fs->base + f)) absent |= 1ull << f;
    fs->absent = absent;
}

static lua_Integer fs_int(lua_State *L, const Fields *fs, int f, lua_Integer def) {
    if (ABSENT(fs, f)) return def;
    push_field(L, fs, f);
    return top_int(L, fs->names[f], def);
}
static double fs_num(lua_State *L, const Fields *fs, int f, double def) {
    if (ABSENT(fs, f)) return def;
    push_field(L, fs, f);
    return top_num(L, fs->names[f], def);
}
static bool fs_bool(lua_State *L, const Fields *fs, int f, bool def) {
    if (ABSENT(fs, f)) return def;
    push_field(L, fs, f);
    return top_bool(L, def);
}
static const char *fs_str(lua_State *L, const Fields *fs, int f, char *buf, size_t n) {
    if (ABSENT(fs, f)) return NULL;
    push_field(L, fs, f);
    return top_str(L, buf, n);
}
static int fs_ids(lua_State *L, const Fields *fs, int f, int **out) {
    if (ABSENT(fs, f)) { *out = NULL; return 0; }
    push_field(L, fs, f);
    return top_ids(L, fs->names[f], out, true, false, NULL, 0);
}
/* A list of tensors (tables with an id, or ids): it ends at its last entry, and a hole before
 * that is an error. A list of at most cap goes into local (valid while the caller's frame is), a
 * longer one onto the stack. */
static int fs_tensors(lua_State *L, const Fields *fs, int f, int **out, int *local, int cap) {
    if (ABSENT(fs, f)) { *out = NULL; return 0; }
    push_field(L, fs, f);
    return top_ids(L, fs->names[f], out, true, true, local, cap);
}
static int fs_u64s(lua_State *L, const Fields *fs, int f, uint64_t **out) {
    if (ABSENT(fs, f)) { *out = NULL; return 0; }
    push_field(L, fs, f);
    return top_u64s(L, fs->names[f], out);
}

/* A tensor's fields, in the order G:tensorv takes them (lua/vrsim/nn.lua passes them so). */
enum { TF_NAME, TF_BYTES, TF_NUMEL, TF_DTYPE, TF_CAT, TF_REQUIRES_GRAD, TF_TRAINABLE, TF_PARAM,
       TF_PERSISTENT, TF_MODULE, TF_BASE, TF_COUNT };
static const char *const TENSOR_FIELDS[TF_COUNT] = {
    "name", "bytes", "numel", "dtype", "cat", "requires_grad", "trainable", "param",
    "persistent", "module", "base"};
enum { KEY_OP0 = KEY_TENSOR0 + TF_COUNT };

/* The tensor of fs into g; pushes its id (1-based). */
static int read_tensor(lua_State *L, Graph *g, const Fields *fs) {
    char name[160], dt[16] = "fp32", cat[16] = "activation";
    Tensor t = {.base = -1, .producer = -1, .module = -1};
    t.name = fs_str(L, fs, TF_NAME, name, sizeof name) ? name : "tensor";
    fs_str(L, fs, TF_DTYPE, dt, sizeof dt);
    t.dtype = parse_dtype(L, dt);
    double bytes = fs_num(L, fs, TF_BYTES, -1);
    if (bytes < 0) luaL_error(L, "tensor '%s': bytes must be >= 0", t.name);
    if (bytes > 1e18) {
        char b[32];
        snprintf(b, sizeof b, "%.3g", bytes);
        luaL_error(L, "tensor '%s': %s bytes is beyond any device", t.name, b);
    }
    t.bytes = (uint64_t)bytes;
    double numel = fs_num(L, fs, TF_NUMEL, 0);
    if (!(numel >= 0 && numel <= 1e18)) luaL_error(L, "tensor '%s': numel must be in [0, 1e18]", t.name);
    t.numel = (uint64_t)numel;
    fs_str(L, fs, TF_CAT, cat, sizeof cat);
    bool found = false;
    for (size_t i = 0; i < sizeof CATS / sizeof CATS[0]; i++)
        if (strcmp(cat, CATS[i].name) == 0) t.cat = CATS[i].c, found = true;
    if (!found) luaL_error(L, "unknown tensor category '%s'", cat);
    t.requires_grad = fs_bool(L, fs, TF_REQUIRES_GRAD, false);
    t.trainable = fs_bool(L, fs, TF_TRAINABLE, false);
    t.is_param = fs_bool(L, fs, TF_PARAM, false);
    t.persistent = fs_bool(L, fs, TF_PERSISTENT, t.is_param);
    t.module = (int)fs_int(L, fs, TF_MODULE, -1);
    t.base = (int)fs_int(L, fs, TF_BASE, 0) - 1;
    int id;
    VrStatus st = graph_add_tensor(g, &t, &id);
    if (st) raise_status(L, g, st);
    lua_pushinteger(L, id + 1);
    return 1;
}

/* G:tensor{name=, bytes=, numel=, dtype=, cat=, requires_grad=, trainable=, param=,
 *          persistent=, module=, base=} -> id (1-based) */
static int l_tensor(lua_State *L) {
    Graph *g = check_graph(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    Fields fs = {.t = 2, .names = TENSOR_FIELDS, .key0 = KEY_TENSOR0};
    return read_tensor(L, g, &fs);
}

/* G:tensorv(name, bytes, numel, ...): the same fields as arguments, in TENSOR_FIELDS' order. */
static int l_tensorv(lua_State *L) {
    Graph *g = check_graph(L);
    int n = lua_gettop(L) - 1;
    Fields fs = {.base = 2, .n = n < TF_COUNT ? n : TF_COUNT, .names = TENSOR_FIELDS, .key0 = KEY_TENSOR0};
    args_absent(L, &fs, TF_COUNT);
    return read_tensor(L, g, &fs);
}

/* An op's fields that Lua gives, by name (sim/op_fields.h: every field whose read is not
 * OPR_NO), numbered in that file's order. */
#define OF_ENTRY_OPR_INT(m) OF_##m,
#define OF_ENTRY_OPR_NUM(m) OF_##m,
#define OF_ENTRY_OPR_BOOL(m) OF_##m,
#define OF_ENTRY_OPR_US(m) OF_##m,
#define OF_ENTRY_OPR_HAND(m) OF_##m,
#define OF_ENTRY_OPR_NO(m)
enum {
#define OP_VAL(type, member, dim, key, read, def, inherit) OF_ENTRY_##read(member)
#define OP_STR(member, key, read, inherit) OF_ENTRY_##read(member)
#define OP_LIST(type, member, count, key, read, elem, inherit) OF_ENTRY_##read(member)
#define OP_LISTX(type, member, count, key, read, elem, inherit) OF_ENTRY_##read(member)
#include "op_fields.h"
    OF_COUNT
};
#define OF_KEY_OPR_INT(k) k,
#define OF_KEY_OPR_NUM(k) k,
#define OF_KEY_OPR_BOOL(k) k,
#define OF_KEY_OPR_US(k) k,
#define OF_KEY_OPR_HAND(k) k,
#define OF_KEY_OPR_NO(k)
static const char *const OP_FIELDS[OF_COUNT] = {
#define OP_VAL(type, member, dim, key, read, def, inherit) OF_KEY_##read(key)
#define OP_STR(member, key, read, inherit) OF_KEY_##read(key)
#define OP_LIST(type, member, count, key, read, elem, inherit) OF_KEY_##read(key)
#define OP_LISTX(type, member, count, key, read, elem, inherit) OF_KEY_##read(key)
#include "op_fields.h"
};
_Static_assert(OF_COUNT <= 64, "Fields.absent holds one bit per op field");

/* An op being read (read_op): the record and the buffers its strings and short lists live in
 * until graph_add_op copies them. */
enum { LIST_CAP = 16 };
typedef struct OpRead {
    Op op;
    char name[160], kind[48], bwd_kind[48];
    int lists[4][LIST_CAP]; /* inputs, outputs, saves, frees, when short */
} OpRead;

/* G:op's grads (on top of the stack): true for "every input gets a new gradient", or one entry
 * per input: nil, false or "new", a new gradient in the input's dtype (fp32 where the input is a
 * tensor id, not a tensor table); a table {bytes=, dtype=, view=} a new one too (its dtype, else
 * the input's), {pass = k} the gradient of output k passed through, {saved = k} the op's saved
 * tensor k, made in forward; "none", no gradient. Returns the n specs in a userdata left on the
 * stack (zeroed past n). */
static GradSpec *read_grads(lua_State *L, const Fields *fs, const char *opname, int n) {
    int gt = lua_gettop(L);
    bool all_new = lua_isboolean(L, gt) && lua_toboolean(L, gt);
    if (!all_new && !lua_istable(L, gt)) luaL_error(L, "op '%s': grads must be true or a table", opname);
    push_field(L, fs, OF_inputs);
    int in = lua_gettop(L);
    GradSpec *gs = lua_newuserdatauv(L, sizeof(GradSpec) * (size_t)(n + 1), 0);
    memset(gs, 0, sizeof(GradSpec) * (size_t)(n + 1));
    char gdt[16];
    for (int i = 0; i < n; i++) {
        int g = 0;
        if (!all_new) {
            lua_geti(L, gt, i + 1);
            g = lua_gettop(L);
        }
        bool is_new = all_new || lua_isnil(L, g) || (lua_isboolean(L, g) && !lua_toboolean(L, g)) ||
                      (lua_type(L, g) == LUA_TSTRING && strcmp(lua_tostring(L, g), "new") == 0);
        bool is_table = !all_new && lua_istable(L, g);
        if (is_new || is_table) {
            gs[i].mode = GRAD_NEW;
            bool dt = false;
            snprintf(gdt, sizeof gdt, "fp32");
            if (is_table) {
                double gb = field_num(L, g, "bytes", 0);
                if (!(gb >= 0 && gb <= 1e18))
                    luaL_error(L, "op '%s': grads[%d].bytes must be in [0, 1e18]", opname, i + 1);
                gs[i].grad_bytes = (uint64_t)gb;
                lua_getfield(L, g, "dtype");
                if (lua_toboolean(L, -1)) dt = true, top_str(L, gdt, sizeof gdt);
                else lua_pop(L, 1);
            }
            if (!dt) {
                lua_geti(L, in, i + 1);
                if (lua_istable(L, -1)) field_str(L, lua_gettop(L), "dtype", gdt, sizeof gdt);
                lua_pop(L, 1);
            }
            gs[i].grad_dtype = parse_dtype(L, gdt);
            if (is_table) {
                gs[i].view = field_bool(L, g, "view", false);
                lua_Integer p = field_int(L, g, "pass", 0);
                if (p > 0) gs[i].mode = GRAD_PASS, gs[i].pass_output = (int)p - 1;
                lua_Integer sv = field_int(L, g, "saved", 0);
                if (sv > 0) gs[i].mode = GRAD_SAVED, gs[i].pass_output = (int)sv - 1;
            }
        } else if (lua_type(L, g) == LUA_TSTRING && strcmp(lua_tostring(L, g), "none") == 0) {
            gs[i].mode = GRAD_NONE;
            gs[i].grad_dtype = DT_FP32;
        } else {
            luaL_error(L, "op '%s': grads[%d] must be \"new\", \"none\", a table, false or nil", opname, i + 1);
        }
        if (!all_new) lua_pop(L, 1);
    }
    lua_remove(L, in); /* keeps gs on the stack, above the grads */
    return gs;
}

/* One reader per field that op_fields.h marks OPR_HAND, in that file's order (a later one may
 * use an earlier one's result). */
static void read_hand_name(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.name = fs_str(L, fs, OF_name, r->name, sizeof r->name) ? r->name : "op";
}
/* A kind names a cost curve or class: one cut short would name another (or none), so a kind
 * longer than the buffer is an error, not truncated as names are. */
static const char *kind_str(lua_State *L, const Fields *fs, int f, char *buf, size_t n, const OpRead *r) {
    const char *s = fs_str(L, fs, f, buf, n);
    if (s && strlen(s) == n - 1) {
        push_field(L, fs, f);
        size_t len = 0;
        lua_tolstring(L, -1, &len);
        lua_pop(L, 1);
        if (len >= n) luaL_error(L, "op '%s': %s longer than %d characters", r->name, fs->names[f], (int)n - 1);
    }
    return s;
}
static void read_hand_kind(lua_State *L, const Fields *fs, OpRead *r) {
    snprintf(r->kind, sizeof r->kind, "elementwise");
    kind_str(L, fs, OF_kind, r->kind, sizeof r->kind, r);
    r->op.kind = r->kind;
}
static void read_hand_bwd_kind(lua_State *L, const Fields *fs, OpRead *r) {
    if (kind_str(L, fs, OF_bwd_kind, r->bwd_kind, sizeof r->bwd_kind, r)) r->op.bwd_kind = r->bwd_kind;
}
static void read_hand_phase(lua_State *L, const Fields *fs, OpRead *r) {
    char phase[16] = "fwd";
    fs_str(L, fs, OF_phase, phase, sizeof phase);
    for (size_t i = 0; i < sizeof PHASES / sizeof PHASES[0]; i++)
        if (strcmp(phase, PHASES[i].name) == 0) {
            r->op.phase = PHASES[i].p;
            return;
        }
    luaL_error(L, "op '%s': unknown phase '%s'", r->op.name, phase);
}
static void read_hand_inputs(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.n_inputs = fs_tensors(L, fs, OF_inputs, &r->op.inputs, r->lists[0], LIST_CAP);
}
static void read_hand_outputs(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.n_outputs = fs_tensors(L, fs, OF_outputs, &r->op.outputs, r->lists[1], LIST_CAP);
}
static void read_hand_saves(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.n_saves = fs_tensors(L, fs, OF_saves, &r->op.saves, r->lists[2], LIST_CAP);
}
/* absent: each consumer holds its inputs until it ends (forward, recompute, build, optimizer) */
static void read_hand_frees(lua_State *L, const Fields *fs, OpRead *r) {
    Op *op = &r->op;
    if (!ABSENT(fs, OF_frees)) {
        push_field(L, fs, OF_frees);
        bool given = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (given) {
            op->n_frees = fs_tensors(L, fs, OF_frees, &op->frees, r->lists[3], LIST_CAP);
            return;
        }
    }
    if (op->phase == PH_FWD || op->phase == PH_RECOMPUTE || op->phase == PH_BUILD ||
        op->phase == PH_OPTIM)
        op->frees = op->inputs, op->n_frees = op->n_inputs;
}
static void read_hand_workspace(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.n_workspace = fs_u64s(L, fs, OF_workspace, &r->op.workspace);
}
static void read_hand_grads(lua_State *L, const Fields *fs, OpRead *r) {
    if (ABSENT(fs, OF_grads)) return;
    push_field(L, fs, OF_grads);
    if (lua_isnil(L, -1)) return;
    r->op.grads = read_grads(L, fs, r->op.name, r->op.n_inputs);
}
static void read_hand_grad_order(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.n_grad_order = fs_ids(L, fs, OF_grad_order, &r->op.grad_order);
}
static void read_hand_bwd_workspace(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.n_bwd_workspace = fs_u64s(L, fs, OF_bwd_workspace, &r->op.bwd_workspace);
}
static void read_hand_bwd_workspace_at(lua_State *L, const Fields *fs, OpRead *r) {
    if (ABSENT(fs, OF_bwd_workspace_at)) return;
    push_field(L, fs, OF_bwd_workspace_at);
    r->op.n_bwd_workspace_at = top_ids(L, "bwd_workspace_at", &r->op.bwd_workspace_at, false, false, NULL, 0);
}
static void read_hand_bwd_rowsum(lua_State *L, const Fields *fs, OpRead *r) {
    uint64_t *rowsum = NULL;
    int n = fs_u64s(L, fs, OF_bwd_rowsum, &rowsum);
    if (n && n != 2) luaL_error(L, "op '%s': bwd_rowsum is { rows, columns }", r->op.name);
    if (n) r->op.bwd_rowsum[0] = (int64_t)rowsum[0], r->op.bwd_rowsum[1] = (int64_t)rowsum[1];
}
static void read_hand_compute_dtype(lua_State *L, const Fields *fs, OpRead *r) {
    char dt[16] = "fp32";
    fs_str(L, fs, OF_compute_dtype, dt, sizeof dt);
    r->op.compute_dtype = parse_dtype(L, dt);
}
static void read_hand_grads_of(lua_State *L, const Fields *fs, OpRead *r) {
    r->op.n_grads_of = fs_ids(L, fs, OF_grads_of, &r->op.grads_of);
}
static void read_hand_remap_of(lua_State *L, const Fields *fs, OpRead *r) {
    int *remap = NULL;
    int n = fs_ids(L, fs, OF_remap_of, &remap);
    if (n && n != r->op.n_outputs) luaL_error(L, "op '%s': remap_of needs one entry per output", r->op.name);
    r->op.remap_of = remap;
}

/* The generated read of one field of op_fields.h, by its read kind. */
#define READ_OPR_INT(type, member, def) r.op.member = (type)fs_int(L, fs, OF_##member, def);
#define READ_OPR_NUM(type, member, def) r.op.member = (type)fs_num(L, fs, OF_##member, def);
#define READ_OPR_BOOL(type, member, def) r.op.member = fs_bool(L, fs, OF_##member, def);
#define READ_OPR_US(type, member, def) r.op.member = fs_num(L, fs, OF_##member, def) * 1e3;
#define READ_OPR_HAND(type, member, def) read_hand_##member(L, fs, &r);
#define READ_OPR_NO(type, member, def)

/* The op of fs into g (see lua/vrsim/nn.lua for the fields); pushes its index. */
static int read_op(lua_State *L, Graph *g, const Fields *fs) {
    luaL_checkstack(L, 2 * OF_COUNT, "op fields");
    int top = lua_gettop(L);
    OpRead r = {.op = {.fwd_op = -1}};
    Op *op = &r.op;
#define OP_VAL(type, member, dim, key, read, def, inherit) READ_##read(type, member, def)
#define OP_STR(member, key, read, inherit) READ_##read(const char *, member, NULL)
#define OP_LIST(type, member, count, key, read, elem, inherit) READ_##read(type *, member, NULL)
#define OP_LISTX(type, member, count, key, read, elem, inherit) READ_##read(type *, member, NULL)
#include "op_fields.h"
    if (op->kernels < 0 || op->bwd_kernels < 0) return luaL_error(L, "op '%s': kernels must be >= 0", op->name);
    if (op->slot < 0 || op->slot >= GRAPH_MAX_SLOTS)
        return luaL_error(L, "op '%s': slot must be 0..%d", op->name, GRAPH_MAX_SLOTS - 1);
    if (!(op->host_extra_ns >= 0)) return luaL_error(L, "op '%s': host_us must be >= 0", op->name);
    /* the op class's measured host dispatch, forward and backward node (nn.op sets both) */
    op->has_dispatch = op->dispatch_ns >= 0;
    if (!op->has_dispatch) op->dispatch_ns = 0;
    else if (!(op->bwd_dispatch_ns >= 0) || !(op->dispatch_ckpt_ns >= 0) || !(op->bwd_dispatch_ckpt_ns >= 0) ||
             !isfinite(op->dispatch_ns) || !isfinite(op->bwd_dispatch_ns) || !isfinite(op->dispatch_ckpt_ns) ||
             !isfinite(op->bwd_dispatch_ckpt_ns))
        return luaL_error(L, "op '%s': dispatch_us, bwd_dispatch_us and their _ckpt_us must be finite and >= 0",
                          op->name);
    if (op->hook < 0 || op->hook > 6) luaL_error(L, "op '%s': hook must be 0 to 6", op->name);
    if (op->region < 0) luaL_error(L, "op '%s': region must be >= 0", op->name);
    if (op->at_step < 0) luaL_error(L, "op '%s': at_step must be >= 0", op->name);
    if (op->from_step < 0) luaL_error(L, "op '%s': from_step must be >= 0", op->name);
    int id;
    VrStatus st = graph_add_op(g, op, &id);
    if (st) raise_status(L, g, st);
    lua_settop(L, top);
    lua_pushinteger(L, id);
    return 1;
}

/* G:op{...}: see lua/vrsim/nn.lua for the fields (sim/op_fields.h's keys). Returns the op
 * index. */
static int l_op(lua_State *L) {
    Graph *g = check_graph(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    Fields fs = {.t = 2, .names = OP_FIELDS, .key0 = KEY_OP0};
    spread_fields(L, &fs, OF_COUNT, lua_upvalueindex(2));
    return read_op(L, g, &fs);
}

/* The generated write of one field of op_fields.h into the table on top, by its read kind
 * (G:op_fields): what G:op would read back to the same op. */
#define PUSH_OPR_INT(member, key) lua_pushinteger(L, op->member), lua_setfield(L, -2, key);
#define PUSH_OPR_NUM(member, key) lua_pushnumber(L, op->member), lua_setfield(L, -2, key);
#define PUSH_OPR_BOOL(member, key) lua_pushboolean(L, op->member), lua_setfield(L, -2, key);
#define PUSH_OPR_US(member, key) lua_pushnumber(L, op->member / 1e3), lua_setfield(L, -2, key);
#define PUSH_OPR_HAND(member, key) push_hand(L, op, key);
#define PUSH_OPR_NO(member, key)

static void push_ids(lua_State *L, const int *ids, int n, int add) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) lua_pushinteger(L, ids[i] + add), lua_rawseti(L, -2, i + 1);
}

/* A field G:op reads by hand, as G:op takes it: lists of tensor ids and indices 1-based. */
static void push_hand(lua_State *L, const Op *op, const char *key) {
    if (strcmp(key, "name") == 0) lua_pushstring(L, op->name);
    else if (strcmp(key, "kind") == 0) lua_pushstring(L, op->kind);
    else if (strcmp(key, "bwd_kind") == 0) lua_pushstring(L, op->bwd_kind);
    else if (strcmp(key, "phase") == 0) {
        lua_pushnil(L);
        for (size_t i = 0; i < sizeof PHASES / sizeof PHASES[0]; i++)
            if (PHASES[i].p == op->phase) lua_pop(L, 1), lua_pushstring(L, PHASES[i].name);
    }
    else if (strcmp(key, "dtype") == 0) lua_pushstring(L, dtype_name(op->compute_dtype));
    else if (strcmp(key, "inputs") == 0) push_ids(L, op->inputs, op->n_inputs, 1);
    else if (strcmp(key, "outputs") == 0) push_ids(L, op->outputs, op->n_outputs, 1);
    else if (strcmp(key, "saves") == 0) push_ids(L, op->saves, op->n_saves, 1);
    else if (strcmp(key, "frees") == 0) push_ids(L, op->frees, op->n_frees, 1);
    else if (strcmp(key, "grad_order") == 0) push_ids(L, op->grad_order, op->n_grad_order, 1);
    else if (strcmp(key, "bwd_workspace_at") == 0) push_ids(L, op->bwd_workspace_at, op->n_bwd_workspace_at, 0);
    else if (strcmp(key, "grads_of") == 0) push_ids(L, op->grads_of, op->n_grads_of, 1);
    else if (strcmp(key, "remap_of") == 0 && op->remap_of) push_ids(L, op->remap_of, op->n_outputs, 1);
    else if (strcmp(key, "workspace") == 0 || strcmp(key, "bwd_workspace") == 0 || strcmp(key, "bwd_rowsum") == 0) {
        bool ws = key[0] == 'w';
        const uint64_t *v = ws ? op->workspace : op->bwd_workspace;
        int n = ws ? op->n_workspace : op->n_bwd_workspace;
        if (key[4] == 'r') n = op->bwd_rowsum[0] > 0 ? 2 : 0;
        lua_createtable(L, n, 0);
        for (int i = 0; i < n; i++) {
            lua_pushnumber(L, key[4] == 'r' ? (double)op->bwd_rowsum[i] : (double)v[i]);
            lua_rawseti(L, -2, i + 1);
        }
    } else if (strcmp(key, "grads") == 0 && op->grads) {
        lua_createtable(L, op->n_inputs, 0);
        for (int i = 0; i < op->n_inputs; i++) {
            const GradSpec *gs = &op->grads[i];
            if (gs->mode == GRAD_NONE) {
                lua_pushstring(L, "none");
            } else {
                lua_createtable(L, 0, 4);
                if (gs->mode == GRAD_PASS) lua_pushinteger(L, gs->pass_output + 1), lua_setfield(L, -2, "pass");
                if (gs->mode == GRAD_SAVED) lua_pushinteger(L, gs->pass_output + 1), lua_setfield(L, -2, "saved");
                lua_pushnumber(L, (double)gs->grad_bytes), lua_setfield(L, -2, "bytes");
                lua_pushstring(L, dtype_name(gs->grad_dtype)), lua_setfield(L, -2, "dtype");
                lua_pushboolean(L, gs->view), lua_setfield(L, -2, "view");
            }
            lua_rawseti(L, -2, i + 1);
        }
    } else lua_pushnil(L);
    lua_setfield(L, -2, key);
}

/* G:op_fields(i) -> the fields of op i (an index G:op returned) as G:op{...} takes them, under
 * the same keys: an absent list is an empty one, and a derived op's fields are those the
 * derivation gave it. */
static int l_op_fields(lua_State *L) {
    Graph *g = check_graph(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 0 || i >= graph_num_ops(g)) return luaL_error(L, "op_fields: no op %d", (int)i);
    const Op *op = graph_op_c(g, (int)i);
    lua_createtable(L, 0, OF_COUNT);
#define OP_VAL(type, member, dim, key, read, def, inherit) PUSH_##read(member, key)
#define OP_STR(member, key, read, inherit) PUSH_##read(member, key)
#define OP_LIST(type, member, count, key, read, elem, inherit) PUSH_##read(member, key)
#define OP_LISTX(type, member, count, key, read, elem, inherit) PUSH_##read(member, key)
#include "op_fields.h"
    if (!op->has_dispatch) lua_pushnil(L), lua_setfield(L, -2, "dispatch_us");
    return 1;
}

/* The LayerMap of the table at idx: t_first (a tensor id, as Lua's), t_count, op_first (an op
 * index), op_count, from_layer, to_layer, region_delta, ext_from and ext_to (lists of tensor ids
 * of one length); the lists in the userdata it pushes. */
static void read_layer_map(lua_State *L, int idx, LayerMap *m) {
    luaL_checktype(L, idx, LUA_TTABLE);
    m->t_first = (int)field_int(L, idx, "t_first", 1) - 1;
    m->t_count = (int)field_int(L, idx, "t_count", 0);
    m->op_first = (int)field_int(L, idx, "op_first", 0);
    m->op_count = (int)field_int(L, idx, "op_count", 0);
    m->from_layer = (int)field_int(L, idx, "from_layer", -1);
    m->to_layer = (int)field_int(L, idx, "to_layer", -1);
    m->region_delta = (int)field_int(L, idx, "region_delta", 0);
    lua_getfield(L, idx, "ext_from");
    int *from = NULL, *to = NULL;
    int n = top_ids(L, "ext_from", &from, true, false, NULL, 0);
    lua_getfield(L, idx, "ext_to");
    int n2 = top_ids(L, "ext_to", &to, true, false, NULL, 0);
    if (n != n2) luaL_error(L, "replicate: ext_from and ext_to differ in length");
    m->ext_from = from, m->ext_to = to, m->n_ext = n;
}

/* G:replicate(map): the template's tensors and ops carried over (graph.h graph_replicate);
 * returns the first new tensor's id and the first new op's index. */
static int l_replicate(lua_State *L) {
    Graph *g = check_graph(L);
    LayerMap m;
    read_layer_map(L, 2, &m);
    int t0, op0;
    VrStatus st = graph_replicate(g, &m, &t0, &op0);
    if (st) raise_status(L, g, st);
    lua_pushinteger(L, t0 + 1);
    lua_pushinteger(L, op0);
    return 2;
}

/* G:is_replica(map, t_first, op_first): whether the tensors from t_first (an id) and ops from
 * op_first are the template carried over (graph.h graph_is_replica). */
static int l_is_replica(lua_State *L) {
    Graph *g = check_graph(L);
    LayerMap m;
    read_layer_map(L, 2, &m);
    lua_Integer t0 = luaL_checkinteger(L, 3), op0 = luaL_checkinteger(L, 4);
    lua_pushboolean(L, graph_is_replica(g, &m, (int)t0 - 1, (int)op0));
    return 1;
}

static int l_num_ops(lua_State *L) {
    lua_pushinteger(L, graph_num_ops(check_graph(L)));
    return 1;
}

/* core.row_sum_buffers(m, c, sm_count, compute_capability): the two staging buffers (bytes) of
 * a row sum of an m x c tensor on such a GPU (device.h device_row_sum_buffers), or nil when it
 * does not split; sm_count and compute_capability may be nil (unknown). */
static int l_row_sum_buffers(lua_State *L) {
    lua_Integer m = luaL_checkinteger(L, 1), c = luaL_checkinteger(L, 2);
    DeviceSpec d = {.sm_count = (int)luaL_optinteger(L, 3, 0),
                    .compute_capability = luaL_optnumber(L, 4, 0)};
    uint64_t b[2];
    if (device_row_sum_buffers(&d, m, c, b) == 0) return 0;
    lua_createtable(L, 2, 0);
    for (int k = 0; k < 2; k++) {
        lua_pushinteger(L, (lua_Integer)b[k]);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

/* core.mincut(n, source, sink, edges): the minimum cut of a graph of n nodes (numbered 0 .. n-1)
 * whose edges are the flat list { from, to, capacity, from, to, capacity, ... } (math.huge: an
 * edge never cut), by sim/mincut.h: returns the cut's capacity and a list of n booleans, entry
 * v + 1 true for a node on the source side. Errors name a bad edge, or an infinite cut. */
static int l_mincut(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1), s = luaL_checkinteger(L, 2), t = luaL_checkinteger(L, 3);
    luaL_checktype(L, 4, LUA_TTABLE);
    if (n < 2 || n > 50000000) return luaL_error(L, "mincut: %d nodes", (int)n);
    lua_Integer len = (lua_Integer)lua_rawlen(L, 4);
    if (len % 3) return luaL_error(L, "mincut: the edge list's length is not a multiple of 3");
    /* the result table first: any Lua call may raise, and the graph must not leak then */
    unsigned char *side = lua_newuserdatauv(L, (size_t)n, 0);
    MinCut *m;
    if (mincut_new((int)n, &m)) return luaL_error(L, "mincut: out of host memory");
    VrStatus st = VR_OK;
    for (lua_Integer k = 0; k < len && !st; k += 3) {
        lua_Integer e[2];
        double cap;
        lua_rawgeti(L, 4, k + 1);
        lua_rawgeti(L, 4, k + 2);
        lua_rawgeti(L, 4, k + 3);
        int ok0, ok1;
        e[0] = lua_tointegerx(L, -3, &ok0);
        e[1] = lua_tointegerx(L, -2, &ok1);
        cap = lua_tonumber(L, -1);
        bool num = lua_type(L, -1) == LUA_TNUMBER;
        lua_pop(L, 3);
        if (!ok0 || !ok1 || !num || e[0] < 0 || e[0] >= n || e[1] < 0 || e[1] >= n)
            st = VR_EINVAL;
        else
            st = mincut_add_edge(m, (int)e[0], (int)e[1], cap);
        if (st) {
            mincut_free(m);
            return luaL_error(L, "mincut: edge %d (%s)", (int)(k / 3 + 1),
                              st == VR_ENOMEM ? "out of host memory" : "bad nodes or capacity");
        }
    }
    double value;
    st = s < 0 || s >= n || t < 0 || t >= n ? VR_EINVAL : mincut_solve(m, (int)s, (int)t, &value, side);
    mincut_free(m);
    if (st) return luaL_error(L, "mincut: no finite cut separates node %d from node %d", (int)s, (int)t);
    lua_pushnumber(L, value);
    lua_createtable(L, (int)n, 0);
    for (lua_Integer v = 0; v < n; v++) {
        lua_pushboolean(L, side[v]);
        lua_rawseti(L, -2, v + 1);
    }
    return 2;
}

/* G:op_layout(op, fwd_act, fwd_filter, bwd_act, bwd_filter): the bytes of cuDNN's layout
 * transforms around op (an index G:op returned) and around its backward (graph.h
 * Op.layout_bytes). */
static int l_op_layout(lua_State *L) {
    Graph *g = check_graph(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 0 || i >= graph_num_ops(g)) return luaL_error(L, "op_layout: no op %d", (int)i);
    double v[4];
    for (int k = 0; k < 4; k++) {
        v[k] = luaL_optnumber(L, 3 + k, 0);
        if (!(v[k] >= 0) || !isfinite(v[k]))
            return luaL_error(L, "op_layout: bytes must be finite and >= 0");
    }
    Op *op = graph_op(g, (int)i);
    op->layout_bytes[0] = v[0], op->layout_bytes[1] = v[1];
    op->bwd_layout_bytes[0] = v[2], op->bwd_layout_bytes[1] = v[3];
    return 0;
}

/* G:op_rowwise(op, rows, row_bytes): a row-per-block statistics kernel beside op's own (graph.h
 * Op.rowwise_rows). */
static int l_op_rowwise(lua_State *L) {
    Graph *g = check_graph(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 0 || i >= graph_num_ops(g)) return luaL_error(L, "op_rowwise: no op %d", (int)i);
    double rows = luaL_checknumber(L, 3), bytes = luaL_checknumber(L, 4);
    if (!(rows >= 0) || !(bytes >= 0) || !isfinite(rows) || !isfinite(bytes))
        return luaL_error(L, "op_rowwise: rows and bytes must be finite and >= 0");
    Op *op = graph_op(g, (int)i);
    op->rowwise_rows = rows;
    op->rowwise_row_bytes = bytes;
    return 0;
}

/* G:op_lora(i, rank, role): op i (a forward GEMM) is one of a LoRA adapter's, of that rank and
 * matrix ("A" or "B"): graph.h Op.lora_rank. */
static int l_op_lora(lua_State *L) {
    Graph *g = check_graph(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 0 || i >= graph_num_ops(g)) return luaL_error(L, "op_lora: no op %d", (int)i);
    lua_Integer r = luaL_checkinteger(L, 3);
    const char *role = luaL_checkstring(L, 4);
    if (r < 1 || r > 1 << 20) return luaL_error(L, "op_lora: rank must be 1..%d", 1 << 20);
    if (strcmp(role, "A") != 0 && strcmp(role, "B") != 0) return luaL_error(L, "op_lora: role must be \"A\" or \"B\"");
    Op *op = graph_op(g, (int)i);
    if (op->kind_id != OPK_MM || op->phase == PH_BWD) return luaL_error(L, "op_lora: op '%s' is not a forward GEMM", op->name);
    op->lora_rank = (int)r;
    op->lora_role = role[0];
    return 0;
}

/* G:op_sac(i, full_recompute): marks forward op i as one the selective checkpoint's policy saves
 * (Op.sac_saved; it must be in a checkpointed region), and its region's recomputation as running
 * to the end when full_recompute (Op.full_recompute). */
static int l_op_sac(lua_State *L) {
    Graph *g = check_graph(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 0 || i >= graph_num_ops(g)) return luaL_error(L, "op_sac: no op %d", (int)i);
    Op *op = graph_op(g, (int)i);
    if (op->phase != PH_FWD || op->region <= 0)
        return luaL_error(L, "op_sac: op '%s' is not a forward op of a checkpointed region", op->name);
    op->sac_saved = true;
    op->full_recompute = lua_toboolean(L, 3);
    return 0;
}

/* G:op_partition(i, role, kernel, bytes[, bwd_bytes]): torch.compile's partitioner's decision for forward op i
 * of a compiled region (lua/strategies/compile.lua): "save" (its outputs kept from forward for
 * backward, as Op.sac_saved), "recompute" (run again in backward) or "skip" (its outputs never
 * needed in backward: Op.not_recomputed). The region's backward recomputes what it needs, to its
 * end, in every case (Op.full_recompute): the partition, not an early stop, decides what runs
 * again. kernel: nil for an extern kernel (a GEMM, attention: Op.compiled 1); "kernel" or
 * "fused" for an op of one of Inductor's fused kernels, forward and backward (Op.compiled 1 where
 * it launches the kernel, 2 where it is inside another's): it has no temporaries of its own
 * (workspaces), an input's gradient is of the input's own size (0 for a fused intermediate), and
 * it moves `bytes` (its materialized inputs and outputs) forward and `bwd_bytes` backward (the
 * gradients its backward kernel reads and writes and the saved tensors it reads:
 * compile.lua M.backward_bytes; twice `bytes` where not given). */
static int l_op_partition(lua_State *L) {
    Graph *g = check_graph(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    static const char *const ROLES[] = {"save", "recompute", "skip", NULL};
    int role = luaL_checkoption(L, 3, NULL, ROLES);
    if (i < 0 || i >= graph_num_ops(g)) return luaL_error(L, "op_partition: no op %d", (int)i);
    Op *op = graph_op(g, (int)i);
    if (op->phase != PH_FWD || op->region <= 0)
        return luaL_error(L, "op_partition: op '%s' is not a forward op of a compiled region", op->name);
    op->sac_saved = role == 0;
    op->not_recomputed = role == 2;
    op->full_recompute = true;
    static const char *const KERNELS[] = {"kernel", "fused", NULL};
    int kernel = lua_isnoneornil(L, 4) ? -1 : luaL_checkoption(L, 4, NULL, KERNELS);
    op->compiled = kernel == 1 ? 2 : 1;
    if (kernel >= 0) {
        double bytes = luaL_checknumber(L, 5);
        op->n_workspace = op->n_bwd_workspace = 0;
        for (int k = 0; op->grads && k < op->n_inputs; k++) op->grads[k].grad_bytes = 0;
        op->bytes_moved = bytes;
        /* bwd_bytes 0 means "twice bytes_moved" to graph.c; a backward of no bytes is -1 */
        double bwd = lua_isnoneornil(L, 6) ? 2 * bytes : luaL_checknumber(L, 6);
        op->bwd_bytes = bwd > 0 ? bwd : -1;
    }
    return 0;
}

/* G:tensor_fused(t): tensor t (an id G:tensor gave) is an intermediate of a fused kernel
 * (Inductor's fusion, lua/strategies/compile.lua): it is never materialized, and has no bytes,
 * nor has its recomputed copy or a gradient autograd would make of its size. */
static int l_tensor_fused(lua_State *L) {
    Graph *g = check_graph(L);
    lua_Integer t = luaL_checkinteger(L, 2) - 1; /* Lua's ids count from 1 */
    if (t < 0 || t >= graph_num_tensors(g)) return luaL_error(L, "tensor_fused: no tensor %d", (int)t + 1);
    Tensor *x = graph_tensor(g, (int)t);
    if (x->persistent || x->is_param || x->base >= 0)
        return luaL_error(L, "tensor_fused: '%s' is not an activation of its own storage", x->name);
    x->bytes = 0;
    return 0;
}

static int l_derive_backward(lua_State *L) {
    Graph *g = check_graph(L);
    int loss = (int)luaL_checkinteger(L, 2) - 1;
    watchdog_enter_c();
    VrStatus st = graph_derive_backward(g, loss);
    watchdog_leave_c();
    if (st) raise_status(L, g, st);
    return 0;
}

/* G:derive_backward_of(first, end, output, grad_out, input, held) -> the id of input's gradient,
 * or nil: the backward of forward ops [first, end) (op indices as G:num_ops counts them) from
 * tensor output, seeded by tensor grad_out (nil: ones_like), input's gradient handed back (nil:
 * none); held: the caller keeps grad_out through the backward (never added into in place) */
static int l_derive_backward_of(lua_State *L) {
    Graph *g = check_graph(L);
    BackwardOf b = {.first = (int)luaL_checkinteger(L, 2), .end = (int)luaL_checkinteger(L, 3),
                    .output = (int)luaL_checkinteger(L, 4) - 1,
                    .grad_out = (int)luaL_optinteger(L, 5, 0) - 1,
                    .input = (int)luaL_optinteger(L, 6, 0) - 1, .grad_out_held = lua_toboolean(L, 7)};
    int in_grad = -1;
    watchdog_enter_c();
    VrStatus st = graph_derive_backward_of(g, &b, &in_grad);
    watchdog_leave_c();
    if (st) raise_status(L, g, st);
    if (in_grad < 0) lua_pushnil(L);
    else lua_pushinteger(L, in_grad + 1);
    return 1;
}

/* G:param_grad(id) -> id of its .grad, or nil */
static int l_param_grad(lua_State *L) {
    Graph *g = check_graph(L);
    int t = graph_param_grad(g, (int)luaL_checkinteger(L, 2) - 1);
    if (t < 0) lua_pushnil(L);
    else lua_pushinteger(L, t + 1);
    return 1;
}

static int l_num_tensors(lua_State *L) {
    lua_pushinteger(L, graph_num_tensors(check_graph(L)));
    return 1;
}

static int l_new_graph(lua_State *L) {
    GraphBox *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->g = NULL;
    luaL_setmetatable(L, GRAPH_MT);
    if (graph_new(&b->g)) luaL_error(L, "out of host memory");
    return 1;
}

static const luaL_Reg GRAPH_METHODS[] = {
    {"tensor", l_tensor}, {"op", l_op}, {"tensorv", l_tensorv},
    {"op_fields", l_op_fields}, {"op_layout", l_op_layout},
    {"op_rowwise", l_op_rowwise}, {"op_lora", l_op_lora}, {"op_sac", l_op_sac},
    {"op_partition", l_op_partition}, {"tensor_fused", l_tensor_fused},
    {"derive_backward", l_derive_backward}, {"derive_backward_of", l_derive_backward_of},
    {"param_grad", l_param_grad},
    {"num_tensors", l_num_tensors}, {"num_ops", l_num_ops}, {"replicate", l_replicate},
    {"is_replica", l_is_replica}, {NULL, NULL}};

/* __newindex of the graph metatable's read-only view */
static int readonly_newindex(lua_State *L) {
    return luaL_error(L, "a graph's metatable is read-only (setting '%s')",
                      lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?");
}

Graph *bind_take_graph(lua_State *L, int idx) {
    GraphBox *b = luaL_checkudata(L, idx, GRAPH_MT);
    if (!b->g) luaL_error(L, "the plan's graph was already taken or freed");
    Graph *g = b->g;
    b->g = NULL;
    return g;
}

void bind_open_graph(lua_State *L) {
    luaL_newmetatable(L, GRAPH_MT);
    lua_pushcfunction(L, graph_gc);
    lua_setfield(L, -2, "__gc");
    luaL_newlibtable(L, GRAPH_METHODS);
    lua_createtable(L, KEY_OP0 + OF_COUNT - 1, 0); /* the methods' upvalue: push_key's strings */
    lua_pushstring(L, "id");
    lua_rawseti(L, -2, KEY_ID);
    for (int i = 0; i < TF_COUNT; i++) lua_pushstring(L, TENSOR_FIELDS[i]), lua_rawseti(L, -2, KEY_TENSOR0 + i);
    for (int i = 0; i < OF_COUNT; i++) lua_pushstring(L, OP_FIELDS[i]), lua_rawseti(L, -2, KEY_OP0 + i);
    lua_createtable(L, 0, OF_COUNT); /* the second: an op field's name -> its key (spread_fields) */
    for (int i = 0; i < OF_COUNT; i++) lua_pushinteger(L, KEY_OP0 + i), lua_setfield(L, -2, OP_FIELDS[i]);
    luaL_setfuncs(L, GRAPH_METHODS, 2);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "__index");
    /* getmetatable(G) gives a read-only view of {__gc, __index}, not the metatable itself: a
     * scenario that set __gc to nil there would leave every graph's C memory, which the
     * sandbox's limit does not count, unfreed */
    lua_createtable(L, 0, 0);              /* the view */
    lua_createtable(L, 0, 3);              /* its metatable */
    lua_createtable(L, 0, 2);              /* what the view reads */
    lua_rotate(L, -4, -1);                 /* the methods to the top */
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, graph_gc);
    lua_setfield(L, -2, "__gc");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, readonly_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
}

void bind_graph_core(lua_State *L) {
    lua_pushcfunction(L, l_new_graph);
    lua_setfield(L, -2, "new_graph");
    lua_pushcfunction(L, l_row_sum_buffers);
    lua_setfield(L, -2, "row_sum_buffers");
    lua_pushcfunction(L, l_mincut);
    lua_setfield(L, -2, "mincut");
    /* G:op's field names and G:tensorv's argument order, for Lua code that gives or records ops
     * itself (nn.op, the op library's tests) */
    const char *const *lists[2] = {OP_FIELDS, TENSOR_FIELDS};
    const int counts[2] = {OF_COUNT, TF_COUNT};
    const char *keys[2] = {"op_fields", "tensor_fields"};
    for (int k = 0; k < 2; k++) {
        lua_createtable(L, counts[k], 0);
        for (int i = 0; i < counts[k]; i++) {
            lua_pushstring(L, lists[k][i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, keys[k]);
    }
    /* the stream ids of Op.stream (graph.h StreamId), by name */
    static const struct { const char *name; StreamId id; } STREAMS[] = {
        {"compute", STREAM_COMPUTE}, {"collective", STREAM_COLLECTIVE}, {"h2d", STREAM_H2D},
        {"d2h", STREAM_D2H}, {"reduce_scatter", STREAM_REDUCE_SCATTER},
        {"symm_mem", STREAM_SYMM_MEM}};
    lua_createtable(L, 0, STREAM_COUNT);
    for (size_t i = 0; i < sizeof STREAMS / sizeof STREAMS[0]; i++) {
        lua_pushinteger(L, STREAMS[i].id);
        lua_setfield(L, -2, STREAMS[i].name);
    }
    lua_setfield(L, -2, "streams");
}
