/* bind.c: the sandboxed Lua state that runs scenarios, and the `vrsim` Lua module.
 *
 * The only code in vrsim that includes lua.h. The flow of scenario_load_source:
 *   1. a fresh state with a counting allocator (memory limit) and an instruction-count hook;
 *      only base/string/table/math/utf8 are opened unless --unsafe; dofile/loadfile are removed
 *      and `load` accepts text only; `require` is replaced by one that searches lua/ and the
 *      scenario's folder only;
 *   2. the scenario chunk runs and must return a table;
 *   3. lua/vrsim/plan.lua validates it (unknown fields get a file:line error and a suggestion),
 *      applies --set overrides and builds the graph through a Graph userdata;
 *   4. the returned plan table is read into a C Plan.
 * C objects are full userdata with __gc; the Graph is created after its userdata so a Lua
 * error never leaks it. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../cost.h"
#include "../infile.h"
#include "../jsonin.h"
#include "../pipeline.h"
#include "../scenario.h"
#include "luabc.h"
#include "watchdog.h"
#include "yaml.h"

#define DEFAULT_INSTRUCTIONS 400000000L
/* A scenario's own code also has this many seconds: 400 M instructions take from 0.4 s (an empty
 * loop) to half a minute (a loop that raises and catches an error each time). */
#define SCENARIO_LIMIT_S 5
#define DEFAULT_MEMORY ((size_t)1 << 30)
#define HOOK_EVERY 10000

/* Lua's blocks of up to POOL_MAX bytes come from a pool of size classes POOL_GRAIN bytes apart:
 * a model build makes and drops hundreds of thousands of small tables and strings, and a free
 * list per class serves them faster than malloc. Lua passes every block's exact size back
 * (osize), so a block needs no header to say its class. Sanitizer builds use malloc for every
 * block, so that it checks Lua's memory as before. */
#define POOL_GRAIN 16
#define POOL_MAX 256
#define POOL_CLASSES (POOL_MAX / POOL_GRAIN)
#define POOL_CHUNK ((size_t)64 << 10)
#if defined(__SANITIZE_ADDRESS__)
#define POOL_ON 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POOL_ON 0
#endif
#endif
#ifndef POOL_ON
#define POOL_ON 1
#endif
typedef struct PoolChunk {
    struct PoolChunk *next;
    max_align_t data[];
} PoolChunk;

typedef struct Sandbox {
    size_t used, limit;          /* bytes, over every state that shares this sandbox */
    long instructions, limit_ins;
    double deadline_s;           /* vr_cpu_s() past which the scenario's code is stopped (0: none):
                                    CPU time, so that a loaded machine stops a runaway loop at
                                    the instruction limit as an idle one does */
    int stopped;                 /* a limit was reached: every hook call raises */
    char stop_msg[400];          /* the message it raises (and the load reports) */
    char lua_dir[PATH_MAX];
    char scn_dir[PATH_MAX];      /* "" = none */
    char lua_real[PATH_MAX];     /* realpath of lua_dir / scn_dir: what every file read must */
    char scn_real[PATH_MAX];     /* lie under ("" = none) */
    const char *const *sets;     /* the command line's --set key=value strings (borrowed, valid
                                    while the scenario loads): paths the user typed */
    int n_sets;
    uint64_t *read_hash;         /* ScenarioOptions.read_hash (NULL: none) */
    const char *typed_file;      /* ScenarioOptions.typed_file (borrowed), NULL = none */
    /* the pool of small blocks (see sandbox_alloc): a free list per size class, and the chunks
     * they are cut from (freed with the sandbox) */
    void *pool_free[POOL_CLASSES];
    struct PoolChunk *pool_chunks;
    char *pool_next, *pool_end;  /* the current chunk's uncut space */
} Sandbox;

/* Frees sb (NULL: nothing) and its pool; every state on it must be closed. */
static void sandbox_free(Sandbox *sb) {
    if (!sb) return;
    for (struct PoolChunk *c = sb->pool_chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(sb);
}

/* Folds a file the load read (its name and bytes) into the caller's hash, if it asked for one:
 * what a sweep's journal is keyed by besides the scenario (ScenarioOptions.read_hash). */
static void note_read(const Sandbox *sb, const char *name, const char *bytes, size_t len) {
    if (!sb->read_hash) return;
    *sb->read_hash = vr_hash(*sb->read_hash, name, strlen(name));
    *sb->read_hash = vr_hash(*sb->read_hash, bytes, len);
}

/* Files a scenario makes vrsim read (the scenario, modules, configs) are refused past this. */
#define MAX_INPUT_BYTES ((size_t)32 << 20)
/* Whether name is a file path the user typed on the command line (--set model.config=PATH or
 * training.deepspeed=PATH, or the trainer config of `vrsim CONFIG.yaml`): the folder rule is about what a scenario's code may open, so such a
 * path is opened as typed. Scenario code cannot add to the list. */
static bool user_typed_path(const Sandbox *sb, const char *name) {
    static const char *const keys[] = {"model.config=", "config=", "training.deepspeed=", "deepspeed=",
                                       "training.data.lengths="};
    if (sb->typed_file && strcmp(sb->typed_file, name) == 0) return true;
    for (int i = 0; i < sb->n_sets; i++)
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            size_t n = strlen(keys[k]);
            if (strncmp(sb->sets[i], keys[k], n) == 0 && strcmp(sb->sets[i] + n, name) == 0) return true;
        }
    return false;
}

/* The size class of a block of n bytes (1 <= n <= POOL_MAX), and the bytes of its blocks. */
static inline int pool_class(size_t n) { return (int)((n + POOL_GRAIN - 1) / POOL_GRAIN) - 1; }

/* A block of class c from sb's pool (NULL: out of host memory). */
static void *pool_take(Sandbox *sb, int c) {
    void *p = sb->pool_free[c];
    if (p) {
        sb->pool_free[c] = *(void **)p;
        return p;
    }
    size_t bs = (size_t)(c + 1) * POOL_GRAIN;
    if ((size_t)(sb->pool_end - sb->pool_next) < bs) {
        PoolChunk *k = malloc(sizeof(PoolChunk) + POOL_CHUNK);
        if (!k) return NULL;
        k->next = sb->pool_chunks;
        sb->pool_chunks = k;
        sb->pool_next = (char *)k->data;
        sb->pool_end = sb->pool_next + POOL_CHUNK;
    }
    p = sb->pool_next;
    sb->pool_next += bs;
    return p;
}

static void pool_give(Sandbox *sb, void *p, int c) {
    *(void **)p = sb->pool_free[c];
    sb->pool_free[c] = p;
}

/* Lua's allocator: the memory limit counts the bytes Lua asks for (sb->used, whatever the pool
 * holds besides); small blocks come from the pool, the others from malloc. */
static void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    Sandbox *sb = ud;
    size_t old = ptr ? osize : 0;
    bool small_old = POOL_ON && ptr && old <= POOL_MAX;
    if (nsize == 0) {
        sb->used -= old;
        if (small_old) pool_give(sb, ptr, pool_class(old));
        else free(ptr);
        return NULL;
    }
    if (nsize > old && sb->used + (nsize - old) > sb->limit) return NULL;
    void *p;
    if (!POOL_ON || (nsize > POOL_MAX && !small_old)) {
        p = realloc(ptr, nsize);
    } else if (small_old && nsize <= POOL_MAX && pool_class(nsize) == pool_class(old)) {
        p = ptr;
    } else {
        /* into or out of the pool, or to another class: a new block, the old one's bytes */
        p = nsize <= POOL_MAX ? pool_take(sb, pool_class(nsize)) : malloc(nsize);
        if (p && ptr) {
            memcpy(p, ptr, old < nsize ? old : nsize);
            if (small_old) pool_give(sb, ptr, pool_class(old));
            else free(ptr);
        }
    }
    if (p) sb->used = sb->used - old + nsize;
    return p;
}

static bool under(const char *real, const char *root);

/* The instruction limit as a hard stop. Once reached, the flag stays set and the hook fires on
 * every instruction of every coroutine that runs on, each time raising the same error: a
 * scenario's pcall may catch one, but the next instruction after it raises again, so the error
 * climbs out through every pcall to vrsim's own, which reports sb->stop_msg whatever the
 * scenario made of the error on the way. The watchdog sees no more progress. */
static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    Sandbox *sb;
    lua_getallocf(L, (void **)&sb);
    if (!sb->stopped) {
        sb->instructions += HOOK_EVERY;
        watchdog_beat();
        bool late = sb->deadline_s > 0 && vr_cpu_s() > sb->deadline_s;
        if (sb->instructions <= sb->limit_ins && !late) return;
        /* inside the hook, level 0 is the Lua function that was running: name its line, and
         * say whether that was the scenario's code or vrsim's own building the plan */
        lua_Debug d;
        bool own = false;
        if (lua_getstack(L, 0, &d) && lua_getinfo(L, "S", &d) && d.source[0] == '@') {
            char real[PATH_MAX];
            own = realpath(d.source + 1, real) && under(real, sb->lua_real);
        }
        luaL_where(L, 0);
        if (late)
            snprintf(sb->stop_msg, sizeof sb->stop_msg,
                     "%stime limit reached (the scenario's code ran for %d s of CPU): a runaway loop in "
                     "the scenario?", lua_tostring(L, -1), SCENARIO_LIMIT_S);
        else if (own)
            snprintf(sb->stop_msg, sizeof sb->stop_msg,
                     "%sinstruction limit reached (%ld Lua instructions) while vrsim built the "
                     "plan: the model, sequence, micro-batch or grad_accum is too large to "
                     "simulate within the limit", lua_tostring(L, -1), sb->limit_ins);
        else
            snprintf(sb->stop_msg, sizeof sb->stop_msg,
                     "%sinstruction limit reached (%ld Lua instructions): a runaway loop in the "
                     "scenario?", lua_tostring(L, -1), sb->limit_ins);
        lua_pop(L, 1);
        sb->stopped = 1;
    }
    lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
    lua_pushstring(L, sb->stop_msg);
    lua_error(L);
}

/* The planner's state runs vrsim's own modules only (the scenario reaches it as data), so it
 * carries no instruction hook: in Lua 5.4 any count hook sends every instruction through the
 * debugger's dispatch (luaG_traceexec), some 10 % of a model build. Its bound is time instead:
 * while a planner state runs (plan_watch), the watchdog's one-second tick arms plan_hook, which
 * beats the watchdog and, once the planner has run PLAN_LIMIT_S ticks, stops it exactly as the
 * instruction limit stops a scenario (the error every instruction after it raises again, so no
 * pcall swallows it); otherwise it takes itself off until the next tick. The scenario's own
 * state keeps the exact instruction count. */
#ifndef PLAN_LIMIT_S
#define PLAN_LIMIT_S 60
#endif
static lua_State *volatile plan_state; /* the planner state running now, or NULL */
static volatile sig_atomic_t plan_ticks;

static void plan_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    Sandbox *sb;
    lua_getallocf(L, (void **)&sb);
    watchdog_beat();
    if (!sb->stopped && plan_ticks < PLAN_LIMIT_S) {
        lua_sethook(L, NULL, 0, 0);
        return;
    }
    if (!sb->stopped) {
        luaL_where(L, 0);
        snprintf(sb->stop_msg, sizeof sb->stop_msg,
                 "%stime limit reached (%d s) while vrsim built the plan: the model, sequence, "
                 "micro-batch or grad_accum is too large to simulate within the limit",
                 lua_tostring(L, -1), PLAN_LIMIT_S);
        lua_pop(L, 1);
        sb->stopped = 1;
    }
    lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
    lua_pushstring(L, sb->stop_msg);
    lua_error(L);
}

/* The watchdog's tick (a signal handler: lua_sethook may be called asynchronously). */
static void plan_tick(void) {
    lua_State *L = plan_state;
    if (!L) return;
    plan_ticks = plan_ticks + 1;
    lua_sethook(L, plan_hook, LUA_MASKCOUNT, 1);
}

/* Marks P as the planner state about to run (NULL: none runs now). */
static void plan_watch(lua_State *P) {
    plan_ticks = 0;
    plan_state = P;
    watchdog_on_tick(P ? plan_tick : NULL);
}

/* ---- Graph userdata ------------------------------------------------------------------- */

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

/* The value on top of the stack (popped) as integer field k (def when nil): an integer, or a
 * float with an integral value, within int's range; anything else raises naming the field. */
static lua_Integer top_int(lua_State *L, const char *k, lua_Integer def) {
    lua_Integer v = def;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok) {
            if (!lua_isnumber(L, -1)) luaL_error(L, "field '%s' must be a number", k);
            double d = lua_tonumber(L, -1);
            if (!(d >= INT_MIN && d <= INT_MAX) || d != floor(d)) {
                char b[32];
                snprintf(b, sizeof b, "%.17g", d);
                luaL_error(L, "field '%s' must be an integer in [%d, %d], not %s", k, INT_MIN,
                           INT_MAX, b);
            }
            v = (lua_Integer)d;
        }
        if (v < INT_MIN || v > INT_MAX)
            luaL_error(L, "field '%s' must be an integer in [%d, %d], not %I", k, INT_MIN,
                       INT_MAX, v);
    }
    lua_pop(L, 1);
    return v;
}

/* The value on top (popped) as number field k (def when nil): finite, or it raises naming the
 * field (a NaN passes every `< 0` check, and an infinity turns into nonsense once converted to
 * bytes). */
static double top_num(lua_State *L, const char *k, double def) {
    double v = def;
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) luaL_error(L, "field '%s' must be a number", k);
        v = lua_tonumber(L, -1);
        if (!isfinite(v)) {
            char b[32];
            snprintf(b, sizeof b, "%g", v);
            luaL_error(L, "field '%s' must be a finite number, not %s", k, b);
        }
    }
    lua_pop(L, 1);
    return v;
}

static bool top_bool(lua_State *L, bool def) {
    bool v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Copies the value on top (popped; a string) into buf; returns buf or NULL when nil. A string
 * is copied as it is (the planner's strings have no __tostring, so this is what luaL_tolstring
 * would give, without its metatable look-up); any other value as luaL_tolstring makes it. */
static const char *top_str(lua_State *L, char *buf, size_t n) {
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    bool str = lua_type(L, -1) == LUA_TSTRING;
    size_t len;
    const char *s = str ? lua_tolstring(L, -1, &len) : luaL_tolstring(L, -1, &len);
    if (len >= n) len = n - 1; /* truncated as snprintf truncates */
    memcpy(buf, s, len);
    buf[len] = 0;
    lua_pop(L, str ? 1 : 2);
    return buf;
}

/* The same for field k of the table at t. */
static lua_Integer field_int(lua_State *L, int t, const char *k, lua_Integer def) {
    lua_getfield(L, t, k);
    return top_int(L, k, def);
}
static double field_num(lua_State *L, int t, const char *k, double def) {
    lua_getfield(L, t, k);
    return top_num(L, k, def);
}
static bool field_bool(lua_State *L, int t, const char *k, bool def) {
    lua_getfield(L, t, k);
    return top_bool(L, def);
}
static const char *field_str(lua_State *L, int t, const char *k, char *buf, size_t n) {
    lua_getfield(L, t, k);
    return top_str(L, buf, n);
}

static DType parse_dtype(lua_State *L, const char *s) {
    DType d;
    if (dtype_parse(s, &d)) luaL_error(L, "unknown dtype '%s'", s);
    return d;
}

/* The graph methods' field names as Lua strings, made once (open_vrsim) and kept as the methods'
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

/* G:module(name) -> index */
static int l_module(lua_State *L) {
    Graph *g = check_graph(L);
    int m = graph_add_module(g, luaL_checkstring(L, 2));
    if (m < 0) luaL_error(L, "out of host memory");
    lua_pushinteger(L, m);
    return 1;
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
    char name[160], kind[32], bwd_kind[32];
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
static void read_hand_kind(lua_State *L, const Fields *fs, OpRead *r) {
    snprintf(r->kind, sizeof r->kind, "elementwise");
    fs_str(L, fs, OF_kind, r->kind, sizeof r->kind);
    r->op.kind = r->kind;
}
static void read_hand_bwd_kind(lua_State *L, const Fields *fs, OpRead *r) {
    if (fs_str(L, fs, OF_bwd_kind, r->bwd_kind, sizeof r->bwd_kind)) r->op.bwd_kind = r->bwd_kind;
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
    if (op->hook < 0 || op->hook > 5) luaL_error(L, "op '%s': hook must be 0 to 5", op->name);
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

/* ---- core.modules_alike: two decoder layers declared alike (lua/vrsim/replicate.lua) ---- */

/* What modules_alike does with a module's field: skips it (links, the forward function, lists
 * compared apart), reads it as a name written for the other layer, as a layer number, or
 * compares it as a value. One switch on the key's length, as every field of every module of a
 * layer goes through it. */
typedef enum { KEY_VALUE, KEY_SKIP, KEY_NAME, KEY_LAYER } AlikeKey;

static AlikeKey alike_key(lua_State *L, int k) {
    if (lua_type(L, k) != LUA_TSTRING) return KEY_VALUE;
    size_t n;
    const char *s = lua_tolstring(L, k, &n);
#define IS(lit) (n == sizeof(lit) - 1 && memcmp(s, lit, n) == 0)
    switch (n) {
    case 1: return IS("p") ? KEY_SKIP : KEY_VALUE;
    case 3: return IS("key") ? KEY_NAME : KEY_VALUE;
    case 4: return IS("path") || IS("lpre") || IS("name") ? KEY_NAME : KEY_VALUE;
    case 5: return IS("hooks") || IS("decls") || IS("order") ? KEY_SKIP : IS("layer") ? KEY_LAYER : KEY_VALUE;
    case 6: return IS("parent") ? KEY_SKIP : IS("opname") ? KEY_NAME : IS("dm_key") ? KEY_LAYER : KEY_VALUE;
    case 7: return IS("forward") ? KEY_SKIP : IS("dm_unit") ? KEY_LAYER : KEY_VALUE;
    case 8: return IS("children") ? KEY_SKIP : IS("layer_of") ? KEY_LAYER : KEY_VALUE;
    case 12: return IS("saved_region") ? KEY_SKIP : KEY_VALUE;
    default: return KEY_VALUE;
    }
#undef IS
}

/* Two layers compared: their numbers, as integers and as strings, and the renaming between them. */
typedef struct Alike {
    lua_Integer la, lb;
    char na[24], nb[24];
    LayerRenamer rn;
} Alike;

static lua_Integer raw_len_of(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    lua_Integer n = lua_istable(L, -1) ? (lua_Integer)lua_rawlen(L, -1) : -1;
    lua_pop(L, 1);
    return n;
}

/* Whether the strings at -2 (layer la's) and -1 (lb's) are one name: la's written for lb, or
 * (is_key: a module's key under its parent) the two layer numbers themselves. */
static bool names_alike(lua_State *L, const Alike *c, bool is_key) {
    const char *v = lua_tostring(L, -2), *w = lua_tostring(L, -1);
    char buf[512];
    graph_renamer_apply(&c->rn, v, buf, sizeof buf);
    if (strcmp(buf, w) == 0) return true;
    return is_key && strcmp(v, c->na) == 0 && strcmp(w, c->nb) == 0;
}

/* Whether the tables at -2 and -1 hold the same scalars under the same keys (nested tables only
 * as keys present in both). */
static bool shallow_alike(lua_State *L) {
    int v = lua_absindex(L, -2), w = lua_absindex(L, -1);
    lua_pushnil(L);
    while (lua_next(L, v)) {
        if (!lua_istable(L, -1)) {
            lua_pushvalue(L, -2);
            lua_rawget(L, w);
            bool eq = lua_rawequal(L, -1, -2);
            lua_pop(L, 1);
            if (!eq) { lua_pop(L, 2); return false; }
        }
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    while (lua_next(L, w)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawget(L, v);
        bool has = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (!has) { lua_pop(L, 1); return false; }
    }
    return true;
}

/* The modules at a and b (layers la, lb): see replicate.lua's alike. */
static bool modules_alike(lua_State *L, int a, int b, const Alike *c, int depth) {
    luaL_checkstack(L, 12, "modules_alike");
    if (depth > 8) return false;
    lua_getfield(L, a, "cls");
    lua_getfield(L, b, "cls");
    bool same_cls = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    static const char *const LISTS[] = {"hooks", "order", "decls"};
    if (!same_cls) return false;
    for (int i = 0; i < 3; i++)
        if (raw_len_of(L, a, LISTS[i]) != raw_len_of(L, b, LISTS[i])) return false;
    /* a's fields against b's */
    lua_pushnil(L);
    while (lua_next(L, a)) {
        int k = lua_absindex(L, -2);
        lua_pushvalue(L, k);
        lua_rawget(L, b); /* stack: k v w */
        bool ok = true;
        AlikeKey kind = KEY_VALUE;
        if (!lua_rawequal(L, -1, -2) && (kind = alike_key(L, k)) != KEY_SKIP) {
            int tv = lua_type(L, -2), tw = lua_type(L, -1);
            if (kind == KEY_NAME) {
                ok = tv == tw && (tv != LUA_TSTRING ||
                                  names_alike(L, c, strcmp(lua_tostring(L, k), "key") == 0));
            } else if (kind == KEY_LAYER) {
                ok = lua_isinteger(L, -2) && lua_isinteger(L, -1) && lua_tointeger(L, -2) == c->la &&
                     lua_tointeger(L, -1) == c->lb;
            } else if (tv == LUA_TTABLE || tw == LUA_TTABLE) {
                ok = tv == tw && shallow_alike(L);
            } else {
                ok = tv == LUA_TFUNCTION;
            }
        }
        lua_pop(L, 2);
        if (!ok) { lua_pop(L, 1); return false; }
    }
    /* and no field of b's that a lacks */
    lua_pushnil(L);
    while (lua_next(L, b)) {
        lua_pop(L, 1);
        if (alike_key(L, -1) != KEY_SKIP) {
            lua_pushvalue(L, -1);
            lua_rawget(L, a);
            bool has = !lua_isnil(L, -1);
            lua_pop(L, 1);
            if (!has) { lua_pop(L, 1); return false; }
        }
    }
    /* parameter declarations: key, dtype, trainable, shape */
    lua_getfield(L, a, "decls");
    lua_getfield(L, b, "decls");
    int da = lua_absindex(L, -2), db = lua_absindex(L, -1);
    lua_Integer nd = (lua_Integer)lua_rawlen(L, da);
    for (lua_Integer i = 1; i <= nd; i++) {
        lua_rawgeti(L, da, i);
        lua_rawgeti(L, db, i);
        int x = lua_absindex(L, -2), y = lua_absindex(L, -1);
        bool ok = lua_istable(L, x) && lua_istable(L, y);
        static const char *const F[] = {"key", "dtype", "trainable"};
        for (int f = 0; ok && f < 3; f++) {
            lua_getfield(L, x, F[f]);
            lua_getfield(L, y, F[f]);
            ok = lua_rawequal(L, -1, -2);
            lua_pop(L, 2);
        }
        if (ok) {
            lua_getfield(L, x, "shape");
            lua_getfield(L, y, "shape");
            ok = lua_istable(L, -1) && lua_istable(L, -2) && shallow_alike(L);
            lua_pop(L, 2);
        }
        lua_pop(L, 2);
        if (!ok) { lua_pop(L, 2); return false; }
    }
    lua_pop(L, 2);
    /* children, in order */
    lua_getfield(L, a, "order");
    lua_getfield(L, b, "order");
    lua_getfield(L, a, "children");
    lua_getfield(L, b, "children");
    int oa = lua_absindex(L, -4), ob = lua_absindex(L, -3), ca = lua_absindex(L, -2),
        cb = lua_absindex(L, -1);
    lua_Integer no = (lua_Integer)lua_rawlen(L, oa);
    bool ok = true;
    for (lua_Integer i = 1; ok && i <= no; i++) {
        lua_rawgeti(L, oa, i);
        lua_rawgeti(L, ob, i);
        ok = lua_rawequal(L, -1, -2) || names_alike(L, c, true);
        if (ok) {
            lua_rawget(L, cb); /* b's child (pops kb) */
            lua_insert(L, -2);
            lua_rawget(L, ca); /* a's child */
            ok = lua_istable(L, -1) && lua_istable(L, -2) &&
                 modules_alike(L, lua_absindex(L, -1), lua_absindex(L, -2), c, depth + 1);
        }
        lua_pop(L, 2);
    }
    lua_pop(L, 4);
    return ok;
}

/* core.rename_layer(s, from, to): s with "layers.from" and "layer from" written for layer to
 * (graph.h graph_rename_layer). */
static int l_rename_layer(lua_State *L) {
    const char *s = luaL_checkstring(L, 1);
    lua_Integer from = luaL_checkinteger(L, 2), to = luaL_checkinteger(L, 3);
    char buf[512];
    graph_rename_layer(s, (int)from, (int)to, buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

/* core.modules_alike(a, b, la, lb): whether module trees a (layer la's) and b (lb's) were declared
 * alike (lua/vrsim/replicate.lua says what that means). */
static int l_modules_alike(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    Alike c = {.la = luaL_checkinteger(L, 3), .lb = luaL_checkinteger(L, 4)};
    snprintf(c.na, sizeof c.na, "%lld", (long long)c.la);
    snprintf(c.nb, sizeof c.nb, "%lld", (long long)c.lb);
    graph_renamer_init(&c.rn, (int)c.la, (int)c.lb);
    lua_pushboolean(L, modules_alike(L, 1, 2, &c, 0));
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

static int l_derive_backward(lua_State *L) {
    Graph *g = check_graph(L);
    int loss = (int)luaL_checkinteger(L, 2) - 1;
    watchdog_enter_c();
    VrStatus st = graph_derive_backward(g, loss);
    watchdog_leave_c();
    if (st) raise_status(L, g, st);
    return 0;
}

/* G:derive_backward_of(first, end, output, grad_out, input) -> the id of input's gradient, or nil:
 * the backward of forward ops [first, end) (op indices as G:num_ops counts them) from tensor
 * output, seeded by tensor grad_out (nil: ones_like), input's gradient handed back (nil: none) */
static int l_derive_backward_of(lua_State *L) {
    Graph *g = check_graph(L);
    BackwardOf b = {.first = (int)luaL_checkinteger(L, 2), .end = (int)luaL_checkinteger(L, 3),
                    .output = (int)luaL_checkinteger(L, 4) - 1,
                    .grad_out = (int)luaL_optinteger(L, 5, 0) - 1,
                    .input = (int)luaL_optinteger(L, 6, 0) - 1};
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

typedef enum ReadStatus { RF_OK, RF_MISSING, RF_OUTSIDE, RF_TOOBIG, RF_NOTFILE, RF_NOMEM, RF_IO } ReadStatus;
static ReadStatus read_file(const char *path, size_t max, char **out, size_t *len);
static ReadStatus read_inside(const Sandbox *sb, const char *path, char **out, size_t *len);
static void raise_read(lua_State *L, const char *what, const char *name, ReadStatus rs);

/* Pushes a JSON value as a Lua value (objects and arrays become tables; depth-limited). */
static void push_json(lua_State *L, const cJSON *v, int depth) {
    if (depth > 32) luaL_error(L, "JSON nested too deeply");
    luaL_checkstack(L, 4, "JSON");
    if (cJSON_IsNumber(v)) lua_pushnumber(L, v->valuedouble);
    else if (cJSON_IsString(v)) lua_pushstring(L, v->valuestring);
    else if (cJSON_IsBool(v)) lua_pushboolean(L, cJSON_IsTrue(v));
    else if (cJSON_IsArray(v)) {
        lua_newtable(L);
        int i = 1;
        for (const cJSON *it = v->child; it; it = it->next) {
            push_json(L, it, depth + 1);
            lua_rawseti(L, -2, i++);
        }
    } else if (cJSON_IsObject(v)) {
        lua_newtable(L);
        for (const cJSON *it = v->child; it; it = it->next) {
            push_json(L, it, depth + 1);
            lua_setfield(L, -2, it->string);
        }
    } else {
        lua_pushnil(L);
    }
}

/* A parsed JSON document owned by a userdata, so that a Lua error while it is being pushed
 * (memory, depth) does not leak it. */
#define JSON_MT "vrsim.JSON"
typedef struct JsonBox { cJSON *j; } JsonBox;
static int json_gc(lua_State *L) {
    JsonBox *b = luaL_checkudata(L, 1, JSON_MT);
    cJSON_Delete(b->j);
    b->j = NULL;
    return 0;
}

/* A config file a scenario names (name): as typed where the user typed it on the command line,
 * else next to the scenario or under lua/, where once every symlink is resolved it must lie; a
 * regular file of at most MAX_INPUT_BYTES. Its bytes into *src (the caller frees), or an error
 * raised. */
static void read_named(lua_State *L, const char *name, char **src, size_t *len) {
    Sandbox *sb;
    lua_getallocf(L, (void **)&sb);
    char path[2 * PATH_MAX + 8];
    ReadStatus rs = RF_MISSING;
    bool typed = user_typed_path(sb, name);
    if (typed) rs = read_file(name, MAX_INPUT_BYTES, src, len); /* as typed, from the working folder */
    if (typed && rs != RF_OK && rs != RF_MISSING) raise_read(L, "config", name, rs);
    if (typed && rs == RF_MISSING && (name[0] == '/' || strstr(name, "..")))
        (lua_pushfstring(L, "config '%s': cannot read it", name), lua_error(L));
    if (!typed && (name[0] == '/' || strstr(name, ".."))) {
        (lua_pushfstring(L, "config '%s': give a path inside the scenario's folder (or type it on the "
                         "command line: --set model.config=PATH, --set training.deepspeed=PATH, --set "
                         "training.data.lengths=PATH)", name),
         lua_error(L));
    }
    const char *dirs[2] = {sb->scn_dir, sb->lua_dir};
    for (int i = 0; i < 2 && rs == RF_MISSING; i++) {
        if (!dirs[i][0]) continue;
        snprintf(path, sizeof path, "%s/%s", dirs[i], name);
        rs = read_inside(sb, path, src, len);
    }
    if (rs != RF_OK) raise_read(L, "config", name, rs);
    note_read(sb, name, *src, *len);
}

/* vrsim.core.read_config(name): a JSON file (read_named) as a Lua table: a Hugging Face
 * config.json, a DeepSpeed config. */
static int l_read_config(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    size_t len = 0;
    char *src = NULL;
    read_named(L, name, &src, &len);
    JsonBox *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->j = NULL;
    luaL_setmetatable(L, JSON_MT);
    char jerr[300];
    cJSON *j = NULL;
    VrStatus js = jsonin_parse(src, len, &j, jerr, sizeof jerr);
    free(src);
    if (js == VR_ENOMEM) luaL_error(L, "out of host memory reading config '%s'", name);
    if (js != VR_OK) (lua_pushfstring(L, "config '%s': %s", name, jerr), lua_error(L));
    box->j = j;
    if (!cJSON_IsObject(box->j))
        (lua_pushfstring(L, "config '%s' is not a JSON object", name), lua_error(L));
    push_json(L, box->j, 0);
    cJSON_Delete(box->j);
    box->j = NULL;
    return 1;
}

/* vrsim.core.read_text(name): a text file (read_named; a data set's sequence lengths) as a
 * string. */
static int l_read_text(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    size_t len = 0;
    char *src = NULL;
    read_named(L, name, &src, &len);
    luaL_Buffer b;
    /* (were the buffer to raise for want of host memory, the read copy would be lost with
     * the run that error ends) */
    char *dst = luaL_buffinitsize(L, &b, len);
    memcpy(dst, src, len);
    free(src);
    luaL_pushresultsize(&b, len);
    return 1;
}

/* vrsim.core.read_yaml(name): a YAML file (read_named; a trainer config) as a Lua table and its
 * lines (sim/bind/yaml.h). */
static int l_read_yaml(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    size_t len = 0;
    char *src = NULL;
    read_named(L, name, &src, &len);
    return bind_push_yaml(L, name, src, len);
}

static int l_new_graph(lua_State *L) {
    GraphBox *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->g = NULL;
    luaL_setmetatable(L, GRAPH_MT);
    if (graph_new(&b->g)) luaL_error(L, "out of host memory");
    return 1;
}

static const luaL_Reg GRAPH_METHODS[] = {
    {"module", l_module}, {"tensor", l_tensor}, {"op", l_op}, {"tensorv", l_tensorv},
    {"op_fields", l_op_fields}, {"op_layout", l_op_layout},
    {"op_rowwise", l_op_rowwise}, {"op_lora", l_op_lora}, {"op_sac", l_op_sac},
    {"derive_backward", l_derive_backward}, {"derive_backward_of", l_derive_backward_of},
    {"param_grad", l_param_grad},
    {"num_tensors", l_num_tensors}, {"num_ops", l_num_ops}, {"replicate", l_replicate},
    {"is_replica", l_is_replica}, {NULL, NULL}};

/* __newindex of the graph metatable's read-only view */
static int readonly_newindex(lua_State *L) {
    return luaL_error(L, "a graph's metatable is read-only (setting '%s')",
                      lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?");
}

static int open_vrsim(lua_State *L) {
    bind_yaml_open(L);
    luaL_newmetatable(L, JSON_MT);
    lua_pushcfunction(L, json_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
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
    lua_newtable(L);
    lua_pushcfunction(L, l_new_graph);
    lua_setfield(L, -2, "new_graph");
    lua_pushcfunction(L, l_read_config);
    lua_setfield(L, -2, "read_config");
    lua_pushcfunction(L, l_read_yaml);
    lua_setfield(L, -2, "read_yaml");
    lua_pushcfunction(L, l_read_text);
    lua_setfield(L, -2, "read_text");
    lua_pushcfunction(L, l_row_sum_buffers);
    lua_setfield(L, -2, "row_sum_buffers");
    lua_pushcfunction(L, l_modules_alike);
    lua_setfield(L, -2, "modules_alike");
    lua_pushcfunction(L, l_rename_layer);
    lua_setfield(L, -2, "rename_layer");
    /* the argument orders of G:opv and G:tensorv, for Lua code that records ops itself (the op
     * library's tests) */
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
        {"d2h", STREAM_D2H}, {"reduce_scatter", STREAM_REDUCE_SCATTER}};
    lua_createtable(L, 0, STREAM_COUNT);
    for (size_t i = 0; i < sizeof STREAMS / sizeof STREAMS[0]; i++) {
        lua_pushinteger(L, STREAMS[i].id);
        lua_setfield(L, -2, STREAMS[i].name);
    }
    lua_setfield(L, -2, "streams");
    return 1;
}

/* ---- sandboxed require ---------------------------------------------------------------- */

/* Reads a regular file of at most max bytes into a new buffer (*out, *len; the caller frees),
 * the checked way every reader of vrsim opens its files (infile.h): a FIFO or device cannot
 * stall vrsim. */
static ReadStatus read_file(const char *path, size_t max, char **out, size_t *len) {
    switch (infile_read(path, max, out, len)) {
    case INFILE_OK: return RF_OK;
    case INFILE_MISSING: return RF_MISSING;
    case INFILE_NOTFILE: return RF_NOTFILE;
    case INFILE_TOOBIG: return RF_TOOBIG;
    case INFILE_NOMEM: return RF_NOMEM;
    case INFILE_IO: return RF_IO;
    }
    return RF_IO;
}

/* True when real (a resolved path) is root or lies under it. */
static bool under(const char *real, const char *root) {
    size_t n = strlen(root);
    if (!n) return false;
    if (n == 1 && root[0] == '/') return true;
    return strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == 0);
}

/* read_file for a file a scenario names: path resolved with realpath (every symlink followed)
 * must lie under lua/ or the scenario's folder. RF_MISSING when there is no such file. */
static ReadStatus read_inside(const Sandbox *sb, const char *path, char **out, size_t *len) {
    *out = NULL;
    char real[PATH_MAX];
    if (!realpath(path, real)) return RF_MISSING;
    if (!under(real, sb->lua_real) && !under(real, sb->scn_real)) return RF_OUTSIDE;
    return read_file(real, MAX_INPUT_BYTES, out, len);
}

/* Raises the error for a file `name` (a module or config) that could not be read. */
static void raise_read(lua_State *L, const char *what, const char *name, ReadStatus rs) {
    switch (rs) {
    case RF_OUTSIDE:
        luaL_error(L, "%s '%s' resolves to a file outside lua/ and the scenario's folder (a "
                   "symlink?): refused", what, name);
        break;
    case RF_TOOBIG:
        luaL_error(L, "%s '%s' is larger than %d MiB: refused", what, name,
                   (int)(MAX_INPUT_BYTES >> 20));
        break;
    case RF_NOTFILE: luaL_error(L, "%s '%s' is not a regular file", what, name); break;
    case RF_NOMEM: luaL_error(L, "out of host memory reading %s '%s'", what, name); break;
    case RF_IO: luaL_error(L, "%s '%s' could not be read", what, name); break;
    default: luaL_error(L, "%s '%s' not found next to the scenario or in lua/", what, name); break;
    }
}

/* require(name): "a.b" -> <lua_dir>/a/b.lua or <scenario dir>/a/b.lua; text chunks only. The
 * planner's state (vrsim.planner set in the registry) searches lua/ alone: a scenario's folder
 * cannot put code into the planner. */
/* The precompiled dump of lua/'s module rel (its path without ".lua") whose text is the len
 * bytes at text, or NULL when there is none for that text (luabc.h). */
static const LuaBc *luabc_find(const char *rel, const char *text, size_t len) {
#ifdef VR_NO_LUABC
    (void)rel; (void)text; (void)len;
    return NULL;
#else
    for (int i = 0; i < VR_N_LUABC; i++) {
        const LuaBc *e = &VR_LUABC[i];
        if (strcmp(e->rel, rel) == 0)
            return e->text_len == len && e->text_hash == luabc_hash(text, len) ? e : NULL;
    }
    return NULL;
#endif
}

/* The pieces of a dump with its main function's source name replaced (load_dump), read in turn. */
typedef struct DumpReader {
    const char *piece[4];
    size_t len[4];
    int next;
} DumpReader;

static const char *dump_read(lua_State *L, void *ud, size_t *size) {
    (void)L;
    DumpReader *r = ud;
    while (r->next < 4 && !r->len[r->next]) r->next++;
    if (r->next == 4) {
        *size = 0;
        return NULL;
    }
    *size = r->len[r->next];
    return r->piece[r->next++];
}

/* Loads e's dump as the function that compiling its text under chunk name chunk gives: the
 * dump as it is but for its main function's source name, which becomes chunk (a nested
 * function's source is "its parent's" in a dump, so they follow). In Lua 5.4's format (ldump.c:
 * dumpHeader, then the main function's upvalue count, then dumpFunction) that name comes first
 * in the function, as a size (dumpSize: 7-bit groups, most significant first, the last marked
 * by 0x80; 0 for no name, else its length + 1) and its bytes. Returns lua_load's status, with
 * the message on the stack on failure. */
static int load_dump(lua_State *L, const LuaBc *e, const char *chunk) {
    enum { HEADER = 4 + 1 + 1 + 6 + 1 + 1 + 1 + sizeof(lua_Integer) + sizeof(lua_Number) + 1 };
    const unsigned char *d = e->dump;
    size_t at = HEADER, x = 0;
    bool ended = false;
    while (!ended && at < e->len && x < ((size_t)1 << 40)) {
        unsigned char b = d[at++];
        x = (x << 7) | (b & 0x7f);
        ended = b & 0x80;
    }
    size_t old = x ? x - 1 : 0;
    if (!ended || old > e->len - at) {
        lua_pushfstring(L, "%s: the precompiled module is damaged", chunk + 1);
        return LUA_ERRSYNTAX;
    }
    size_t n = strlen(chunk), v = n + 1, k = 16;
    unsigned char size[16];
    do {
        size[--k] = v & 0x7f;
        v >>= 7;
    } while (v);
    size[15] |= 0x80;
    DumpReader r = {.piece = {(const char *)d, (const char *)size + k, chunk, (const char *)d + at + old},
                    .len = {HEADER, 16 - k, n, e->len - at - old}};
    return lua_load(L, dump_read, &r, chunk, "b");
}

static int l_require(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, "vrsim.loaded");
    lua_getfield(L, -1, name);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (strcmp(name, "vrsim.core") == 0) {
        open_vrsim(L);
    } else {
        if (!name[0] || strlen(name) > 200)
            luaL_error(L, "require '%s': not a module name", name);
        for (const char *p = name; *p; p++)
            if (!(*p == '.' || *p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9')))
                luaL_error(L, "require '%s': module names are letters, digits, '_' and '.'", name);
        Sandbox *sb;
        lua_getallocf(L, (void **)&sb);
        lua_getfield(L, LUA_REGISTRYINDEX, "vrsim.planner");
        bool planner = lua_toboolean(L, -1);
        lua_pop(L, 1);
        char rel[256], path[PATH_MAX + 300];
        snprintf(rel, sizeof rel, "%s", name);
        for (char *p = rel; *p; p++) if (*p == '.') *p = '/';
        const char *dirs[2] = {sb->lua_dir, planner ? "" : sb->scn_dir};
        char *src = NULL;
        size_t len = 0;
        ReadStatus rs = RF_MISSING;
        int i_found = -1;
        for (int i = 0; i < 2 && rs == RF_MISSING; i++) {
            if (!dirs[i][0]) continue;
            snprintf(path, sizeof path, "%s/%s.lua", dirs[i], rel);
            rs = read_inside(sb, path, &src, &len);
            i_found = i;
        }
        if (rs == RF_MISSING)
            luaL_error(L, "module '%s' not found in lua/%s", name, planner ? "" : " or the scenario's folder");
        if (rs != RF_OK) raise_read(L, "module", name, rs);
        note_read(sb, name, src, len); /* by module name: the same whichever path vrsim runs from */
        char chunk[sizeof path + 1];
        snprintf(chunk, sizeof chunk, "@%s", path);
        /* one of lua/'s own modules as it was built: its dump; otherwise (a scenario's module,
         * or a module edited since the build) the text */
        const LuaBc *bc = i_found == 0 ? luabc_find(rel, src, len) : NULL;
        int rc = bc ? load_dump(L, bc, chunk) : luaL_loadbufferx(L, src, len, chunk, "t");
        free(src);
        if (rc) lua_error(L);
        lua_pushstring(L, name);
        lua_call(L, 1, 1);
        if (lua_isnil(L, -1)) { lua_pop(L, 1); lua_pushboolean(L, 1); }
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
    return 1;
}

/* load(chunk, name, mode, env) limited to text chunks */
static int l_load_text(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "=(load)");
    if (luaL_loadbufferx(L, s, len, name, "t")) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    if (!lua_isnoneornil(L, 4)) {
        lua_pushvalue(L, 4);
        if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
}

/* Opens the libraries a scenario may use (all of them with unsafe) and vrsim's require. planner
 * marks the planner's own state, whose require searches lua/ only. */
static void open_sandbox(lua_State *L, bool unsafe, bool planner) {
    if (unsafe) {
        luaL_openlibs(L);
    } else {
        static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base}, {LUA_TABLIBNAME, luaopen_table},
                                        {LUA_STRLIBNAME, luaopen_string},
                                        {LUA_MATHLIBNAME, luaopen_math},
                                        {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};
        for (const luaL_Reg *l = libs; l->func; l++) {
            luaL_requiref(L, l->name, l->func, 1);
            lua_pop(L, 1);
        }
        lua_pushnil(L); lua_setglobal(L, "dofile");
        lua_pushnil(L); lua_setglobal(L, "loadfile");
        lua_pushcfunction(L, l_load_text); lua_setglobal(L, "load");
    }
    /* xpcall's message handler runs where the error was raised, and for the instruction
     * limit's error that is inside the count hook, where Lua runs no hook: a handler that loops
     * would be beyond the limit. Here the handler runs once the failed call has returned, with
     * the hook live (what it loses is the failing frame, which only the debug library, absent
     * from the sandbox, could have looked at). */
    static const char XPCALL[] =
        "local pcall, pack, unpack = pcall, table.pack, table.unpack\n"
        "return function(f, h, ...)\n"
        "  local r = pack(pcall(f, ...))\n"
        "  if r[1] then return unpack(r, 1, r.n) end\n"
        "  local ok, m = pcall(h, r[2])\n"
        "  return false, m\n"
        "end\n";
    if (luaL_loadbufferx(L, XPCALL, sizeof XPCALL - 1, "=xpcall", "t") == LUA_OK &&
        lua_pcall(L, 0, 1, 0) == LUA_OK)
        lua_setglobal(L, "xpcall");
    else
        lua_pop(L, 1);
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "vrsim.loaded");
    lua_pushboolean(L, planner);
    lua_setfield(L, LUA_REGISTRYINDEX, "vrsim.planner");
    lua_pushcfunction(L, l_require);
    lua_setglobal(L, "require");
}

/* ---- reading the plan table ----------------------------------------------------------- */

static void read_nccl(lua_State *L, int dev, DeviceSpec *d);

static void read_device(lua_State *L, int t, DeviceSpec *d) {
    field_str(L, t, "key", d->key, sizeof d->key);
    field_str(L, t, "name", d->name, sizeof d->name);
    d->total_bytes = (uint64_t)field_num(L, t, "total_bytes", 0);
    d->context_bytes = (uint64_t)field_num(L, t, "context_bytes", 0);
    d->cublas_workspace_bytes = (uint64_t)field_num(L, t, "cublas_workspace_bytes", 0);
    d->mem_bw = field_num(L, t, "mem_bw", 0);
    d->eff_compute = field_num(L, t, "eff_compute", 1);
    d->eff_memory = field_num(L, t, "eff_memory", 1);
    d->launch_ns = field_num(L, t, "launch_ns", 0);
    d->sm_count = (int)field_num(L, t, "sm_count", 0);
    d->compute_capability = field_num(L, t, "compute_capability", 0);
    d->price_per_hour = field_num(L, t, "price_per_hour", 0);
    d->world = (int)field_num(L, t, "world", 1);
    d->coll_bw = field_num(L, t, "coll_bw", 0);
    d->coll_latency_ns = field_num(L, t, "coll_latency_ns", 0);
    d->gpus_per_node = (int)field_num(L, t, "gpus_per_node", 0);
    d->nics_per_node = (int)field_num(L, t, "nics_per_node", 0);
    d->nic_bw = field_num(L, t, "nic_bw", 0);
    d->nic_latency_ns = field_num(L, t, "nic_latency_ns", 0);
    d->replicate = (int)field_num(L, t, "replicate", 0);
    d->host_bw = field_num(L, t, "host_bw", 0);
    d->host_latency_ns = field_num(L, t, "host_latency_ns", 0);
    d->cpu_adam_rate = field_num(L, t, "cpu_adam_rate", 0);
    d->cpu_torch_adamw_rate = field_num(L, t, "cpu_torch_adamw_rate", 0);
    read_nccl(L, t, d);
    lua_getfield(L, t, "peak_flops");
    if (lua_istable(L, -1)) {
        int k = lua_gettop(L);
        for (int i = 0; i < DT_COUNT; i++) d->peak_flops[i] = field_num(L, k, dtype_name(i), 0);
    }
    lua_pop(L, 1);
}

/* The length of profile table `key` (0 when absent), left on the stack as a table or nil. */
static int profile_table(lua_State *L, int prof, const char *key) {
    lua_getfield(L, prof, key);
    if (lua_isnil(L, -1)) return 0;
    if (!lua_istable(L, -1)) luaL_error(L, "profile.%s must be a list of rows", key);
    return (int)luaL_len(L, -1);
}

/* Row i of the table on top of the stack, pushed; an error unless it is a table. */
static int profile_row(lua_State *L, const char *key, int i) {
    if (lua_geti(L, -1, i) != LUA_TTABLE) luaL_error(L, "profile.%s[%d] is not a row", key, i);
    return lua_gettop(L);
}

/* Copies `copy` and `elementwise` (the generic streaming curve), or `torch_ops` (with each row's
 * class, copied into names: n rows of 32 bytes), into rows[n..]; returns the new count. */
static int read_points(lua_State *L, int prof, const char *key, CostStreamRow *rows, int n,
                       char (*names)[32]) {
    int len = profile_table(L, prof, key);
    for (int i = 1; i <= len; i++) {
        int e = profile_row(L, key, i);
        rows[n] = (CostStreamRow){NULL, field_num(L, e, "ms", 0), field_num(L, e, "gbps", 0)};
        if (names) {
            lua_getfield(L, e, "class");
            size_t cl = 0;
            const char *cls = lua_tolstring(L, -1, &cl);
            if (cls && cl >= sizeof names[0])
                luaL_error(L, "profile.%s[%d]: class '%s' is longer than %d bytes", key, i, cls,
                           (int)sizeof names[0] - 1);
            snprintf(names[n], sizeof names[0], "%s", cls ? cls : "");
            rows[n].cls = names[n];
            lua_pop(L, 1);
        }
        n++;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return n;
}

/* Copies profile.sdpa (validation/harness/measure_sdpa.py: each shape with its time per
 * backend) into rows; returns the count. */
static int read_sdpa(lua_State *L, int prof, CostSdpaRow *rows) {
    int len = profile_table(L, prof, "sdpa");
    for (int i = 1; i <= len; i++) {
        int e = profile_row(L, "sdpa", i);
        CostSdpaRow *r = &rows[i - 1];
        *r = (CostSdpaRow){.batch = field_num(L, e, "batch", 0), .heads = field_num(L, e, "heads", 0),
                           .seq_q = field_num(L, e, "seq_q", 0), .seq_k = field_num(L, e, "seq_k", 0),
                           .dim = field_num(L, e, "dim", 0), .causal = field_bool(L, e, "causal", false),
                           .kernel_time = field_bool(L, e, "kernel_time", false),
                           .masked = field_bool(L, e, "masked", false)};
        lua_getfield(L, e, "backends");
        if (lua_istable(L, -1)) {
            int bt = lua_gettop(L);
            for (int b = 0; b < COST_SDPA_COUNT; b++) {
                if (lua_getfield(L, bt, cost_sdpa_backend(b)) == LUA_TTABLE) {
                    r->fwd_ms[b] = field_num(L, bt + 1, "fwd_ms", 0);
                    r->fwdbwd_ms[b] = field_num(L, bt + 1, "fwdbwd_ms", 0);
                }
                lua_pop(L, 1);
            }
        }
        lua_settop(L, e - 1);
    }
    lua_pop(L, 1);
    return len;
}

/* The cost models made from calibrated profiles, kept for the life of the process. A profile
 * that lua/vrsim/plan.lua marks with a cost_key (the GPU whose calibrated files it joined, and
 * whether it took their LoRA table) holds the same rows every time it is read from one lua/
 * folder, so its curves are made once, and each plan gets a copy priced on its own device
 * (cost_clone: the same curves to the bit). The rows are some 60,000 fields; a sweep's parent
 * reads them before it forks its workers, so no point reads them again. */
#define COST_CACHE 16
static struct CostCache {
    char key[PATH_MAX + 64];
    CostModel *model;
} cost_cache[COST_CACHE];
static int n_cost_cache;

/* The cache's key of the profile at prof (its cost_key under this state's lua/ folder) into key,
 * or false when it has none, or one too long to keep whole. */
static bool cost_cache_key(lua_State *L, int prof, char *key, size_t n) {
    bool keyed = false;
    if (lua_getfield(L, prof, "cost_key") == LUA_TSTRING) {
        Sandbox *sb;
        lua_getallocf(L, (void **)&sb);
        size_t len;
        const char *ck = lua_tolstring(L, -1, &len);
        int w = snprintf(key, n, "%s|%s", sb->lua_real, ck);
        keyed = w >= 0 && (size_t)w < n && strlen(ck) == len;
    }
    lua_pop(L, 1);
    return keyed;
}

static CostModel *cost_cached(const char *key) {
    for (int i = 0; i < n_cost_cache; i++)
        if (strcmp(cost_cache[i].key, key) == 0) return cost_cache[i].model;
    return NULL;
}

/* Reads the profile's rows at prof into a cost model for p->dev (p->cost). */
static void read_profile_rows(lua_State *L, int prof, Plan *p) {
    /* the grid a profile's `gemm` table holds (plan.lua puts the idle-card grid of <gpu>_gemm.lua
     * there when there is one: a step's GEMMs run below the power limit, so a gemm_sustained
     * table is a record, not read) */
    int n_gemm = profile_table(L, prof, "gemm");
    lua_pop(L, 1);
    int n_stream = profile_table(L, prof, "copy");
    lua_pop(L, 1);
    n_stream += profile_table(L, prof, "elementwise");
    lua_pop(L, 1);
    int n_ops = profile_table(L, prof, "torch_ops");
    lua_pop(L, 1);
    int n_sdpa = profile_table(L, prof, "sdpa");
    lua_pop(L, 1);
    int n_lora = profile_table(L, prof, "lora_gemm");
    lua_pop(L, 1);
    /* the rows live in userdata (freed by Lua's collector if a field raises), dtype and class
     * names copied into it: nothing borrowed from Lua outlives this call */
    size_t bytes = sizeof(CostGemmRow) * (size_t)n_gemm + sizeof(char[16]) * (size_t)n_gemm +
                   sizeof(CostStreamRow) * (size_t)(n_stream + n_ops) + sizeof(char[32]) * (size_t)n_ops +
                   sizeof(CostSdpaRow) * (size_t)n_sdpa + sizeof(CostLoraRow) * (size_t)n_lora +
                   sizeof(char[16]) * 2 * (size_t)n_lora;
    char *buf = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
    CostGemmRow *gemm = (CostGemmRow *)buf;
    CostSdpaRow *sdpa = (CostSdpaRow *)(gemm + n_gemm);
    CostLoraRow *lora = (CostLoraRow *)(sdpa + n_sdpa);
    CostStreamRow *stream = (CostStreamRow *)(lora + n_lora);
    CostStreamRow *ops = stream + n_stream;
    char (*dtypes)[16] = (char (*)[16])(ops + n_ops);
    char (*lora_names)[16] = dtypes + n_gemm; /* per row: its dtype, then its gemm */
    char (*classes)[32] = (char (*)[32])(lora_names + 2 * n_lora);
    profile_table(L, prof, "gemm");
    for (int i = 1; i <= n_gemm; i++) {
        int e = profile_row(L, "gemm", i);
        const char *dt = field_str(L, e, "dtype", dtypes[i - 1], sizeof dtypes[0]);
        gemm[i - 1] = (CostGemmRow){dt, field_num(L, e, "m", 0), field_num(L, e, "n", 0),
                                    field_num(L, e, "k", 0), field_num(L, e, "batch", 1),
                                    field_num(L, e, "tflops", 0),
                                    field_bool(L, e, "kernel_time", false)};
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    int ns = read_points(L, prof, "copy", stream, 0, NULL);
    read_points(L, prof, "elementwise", stream, ns, NULL);
    /* PyTorch's kernels by memory-access class (validation/harness/measure_torch_ops.py) */
    read_points(L, prof, "torch_ops", ops, 0, classes);
    read_sdpa(L, prof, sdpa);
    /* LoRA adapters' GEMMs, kernel time by rank, tokens and width (measure_lora_gemms.py) */
    profile_table(L, prof, "lora_gemm");
    for (int i = 1; i <= n_lora; i++) {
        int e = profile_row(L, "lora_gemm", i);
        lora[i - 1] = (CostLoraRow){field_str(L, e, "dtype", lora_names[2 * (i - 1)], sizeof lora_names[0]),
                                    field_str(L, e, "gemm", lora_names[2 * (i - 1) + 1], sizeof lora_names[0]),
                                    field_num(L, e, "rank", 0), field_num(L, e, "tokens", 0),
                                    field_num(L, e, "width", 0), field_num(L, e, "ms", 0)};
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    CostProfile cp = {gemm, n_gemm, stream, n_stream, ops, n_ops, sdpa, n_sdpa, lora, n_lora,
                      field_num(L, prof, "launch_device_us", 0), field_num(L, prof, "kernel_gap_us", 0)};
    char why[160], src[200] = "?";
    VrStatus st = cost_from_profile(&p->dev, &cp, &p->cost, why, sizeof why);
    if (st == VR_ENOMEM) luaL_error(L, "out of memory building the cost model of %s", p->dev.key);
    if (st) {
        field_str(L, prof, "source", src, sizeof src);
        luaL_error(L, "the calibrated profile of %s (%s): %s", p->dev.key, src, why);
    }
    lua_pop(L, 1); /* the rows */
}

/* Builds the plan's cost model from device.profile (a calibrated profile table), if any: its
 * tables copied into the cost module's rows (cost.h, cost_from_profile, turns them into curves),
 * or the process's model of the same rows copied. */
static void read_profile(lua_State *L, int dev, Plan *p) {
    lua_getfield(L, dev, "profile");
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
    int prof = lua_gettop(L);
    char key[sizeof cost_cache[0].key];
    bool keyed = cost_cache_key(L, prof, key, sizeof key);
    const CostModel *kept = keyed ? cost_cached(key) : NULL;
    if (kept) {
        if (cost_clone(kept, &p->dev, &p->cost))
            luaL_error(L, "out of memory building the cost model of %s", p->dev.key);
    } else {
        read_profile_rows(L, prof, p);
        CostModel *copy;
        if (keyed && n_cost_cache < COST_CACHE && !cost_clone(p->cost, &p->dev, &copy)) {
            snprintf(cost_cache[n_cost_cache].key, sizeof cost_cache[0].key, "%s", key);
            cost_cache[n_cost_cache++].model = copy;
        }
    }
    /* a GPU without a profile of its own: the reference GPU's profile carried to it
     * (device.carry, made by lua/hw/carry.lua; cost.h says what is carried and how) */
    lua_getfield(L, dev, "carry");
    if (lua_istable(L, -1)) {
        int ct = lua_gettop(L);
        CostCarry k = {.sm = field_num(L, ct, "sm", 0), .bw = field_num(L, ct, "bw", 0)};
        lua_getfield(L, ct, "compute");
        if (lua_istable(L, -1))
            for (int d = 0; d < DT_COUNT; d++) k.compute[d] = field_num(L, lua_gettop(L), dtype_name(d), 0);
        lua_pop(L, 1);
        if (cost_carry(p->cost, &p->dev, &k))
            luaL_error(L, "cannot carry the calibrated profile to %s: bad ratios", p->dev.key);
    }
    lua_pop(L, 1);
    double host_us = field_num(L, prof, "host_op_us", field_num(L, prof, "launch_us", 0));
    p->host_op_ns = host_us * 1e3;
    p->host_ckpt_op_ns = field_num(L, prof, "host_ckpt_op_us", 0) * 1e3;
    p->host_ckpt_region_ns = field_num(L, prof, "host_ckpt_region_us", 0) * 1e3;
    p->host_launch_ns = field_num(L, prof, "launch_us", 0) * 1e3; /* empty kernel, back to back */
    /* compute kernels slowed by a collective beside them (measure_contention.py), if measured */
    if (lua_getfield(L, prof, "contention") == LUA_TTABLE) {
        int ct = lua_gettop(L);
        p->contention[0] = field_num(L, ct, "compute", 0);
        p->contention[1] = field_num(L, ct, "memory", 0);
        if (!(p->contention[0] >= 0 && p->contention[0] < 10 && p->contention[1] >= 0 && p->contention[1] < 10))
            luaL_error(L, "profile contention: compute and memory must be in [0, 10)");
    }
    lua_pop(L, 1);
    /* which kind of figure the step time rests on (measured here, carried from the reference) */
    if (!field_str(L, prof, "basis", p->profile, sizeof p->profile))
        field_str(L, prof, "source", p->profile, sizeof p->profile);
    lua_settop(L, prof - 1);
}

/* Fits each collective's latency and bus bandwidth from device.nccl (measured points of a
 * calibrated link profile: {op=, bytes=, ms=}) with the ranks of device.nccl_ranks. */
static void read_nccl(lua_State *L, int dev, DeviceSpec *d) {
    lua_getfield(L, dev, "nccl");
    if (!lua_istable(L, -1)) { lua_pop(L, 1); return; }
    int t = lua_gettop(L);
    int ranks = (int)field_num(L, dev, "nccl_ranks", 2);
    int len = (int)luaL_len(L, t);
    /* every row is read (userdata: freed by the collector if a field raises) */
    CollPoint *pts = lua_newuserdatauv(L, sizeof *pts * (size_t)(len > 0 ? len : 1), 0);
    for (int k = 0; k < COLL_COUNT; k++) {
        int n = 0;
        for (int i = 1; i <= len; i++) {
            lua_geti(L, t, i);
            int e = lua_gettop(L);
            char op[32] = "";
            field_str(L, e, "op", op, sizeof op);
            CollKind ck;
            if (!coll_kind_parse(op, &ck) && (int)ck == k) {
                double bytes = field_num(L, e, "bytes", 0);
                pts[n++] = (CollPoint){coll_bus_bytes(ck, bytes, ranks), ranks,
                                       field_num(L, e, "ms", 0) * 1e6};
            }
            lua_pop(L, 1);
        }
        if (n >= 2 && coll_fit(pts, n, &d->coll[k]) != VR_OK) d->coll[k] = (CollLink){0, 0};
    }
    lua_pop(L, 2); /* the points, the nccl table */
}

static void read_alloc(lua_State *L, int t, AllocConfig *a) {
    char kind[16];
    alloc_config_default(a);
    /* the conf string is parsed where it lies: any length, never cut to a buffer */
    lua_getfield(L, t, "conf");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "allocator.conf must be a string");
        size_t n;
        const char *conf = lua_tolstring(L, -1, &n);
        if (strlen(conf) != n) luaL_error(L, "allocator.conf holds a NUL byte");
        char err[256];
        if (n && alloc_config_parse(a, conf, err, sizeof err)) luaL_error(L, "allocator.conf: %s", err);
    }
    lua_pop(L, 1);
    if (field_str(L, t, "kind", kind, sizeof kind)) {
        if (strcmp(kind, "ideal") == 0) a->kind = ALLOC_IDEAL;
        else if (strcmp(kind, "caching") == 0) a->kind = ALLOC_CACHING;
        else luaL_error(L, "allocator.kind must be \"caching\" or \"ideal\", not \"%s\"", kind);
    }
    /* 0 would be "no limit" to the allocator model: a capacity is always given, and positive */
    double cap = field_num(L, t, "capacity_bytes", 0);
    if (!(cap >= 1 && cap <= 1e18)) {
        char b[32];
        snprintf(b, sizeof b, "%.0f", cap);
        luaL_error(L, "the memory PyTorch may use must be between 1 byte and 1e18 bytes, not %s "
                   "(hardware.capacity_gib, capacity_mib, memory_fraction)", b);
    }
    a->capacity = (uint64_t)cap;
    a->fraction_set = field_bool(L, t, "fraction_set", false);
}

typedef struct LoadCtx {
    const char *chunkname;      /* "@name", as Lua names chunks */
    const char *src;            /* the scenario's source; NULL for a record */
    lua_State *S;               /* the scenario's own state, its table on top (source only) */
    const cJSON *record;        /* a validation record, or NULL */
    int rec_steps, rec_rank;
    const ScenarioOptions *opts;
    Plan *plan;
    bool skipped;               /* record.lua said why the record cannot be modelled, or
                                   plan.lua's rebuild why it cannot reuse the graph: */
    char skip[512];             /* ... this */
    const Plan *base;           /* non-NULL: plan.lua's rebuild, reusing base's graph */
} LoadCtx;

/* Pushes require(name) through vrsim's own require, whatever the globals say. */
static void push_module(lua_State *L, const char *name) {
    lua_pushcfunction(L, l_require);
    lua_pushstring(L, name);
    lua_call(L, 1, 1);
}

/* In the scenario's state: runs the chunk and leaves the table it returns. */
static int scenario_protected(lua_State *L) {
    LoadCtx *c = lua_touserdata(L, 1);
    if (luaL_loadbufferx(L, c->src, strlen(c->src), c->chunkname, "t")) lua_error(L);
    lua_call(L, 0, 1);
    if (!lua_istable(L, -1))
        luaL_error(L, "%s: the scenario must return a table (hardware, model, training, "
                   "allocator)", c->chunkname + 1);
    return 1;
}

/* Copies the value at index idx of S onto P's stack as plain data: nil, booleans, numbers,
 * strings and tables of them, read raw (no metamethod of S runs). Anything else (a function, a
 * userdata such as a graph, a coroutine) or nesting deeper than 32 raises in P, naming where
 * (path). Reads S with calls that cannot raise. */
static void copy_data(lua_State *P, lua_State *S, int idx, int depth, const char *path) {
    int ty = lua_type(S, idx);
    switch (ty) {
    case LUA_TNIL: lua_pushnil(P); return;
    case LUA_TBOOLEAN: lua_pushboolean(P, lua_toboolean(S, idx)); return;
    case LUA_TNUMBER:
        if (lua_isinteger(S, idx)) lua_pushinteger(P, lua_tointeger(S, idx));
        else lua_pushnumber(P, lua_tonumber(S, idx));
        return;
    case LUA_TSTRING: {
        size_t n;
        const char *str = lua_tolstring(S, idx, &n);
        lua_pushlstring(P, str, n);
        return;
    }
    case LUA_TTABLE: break;
    default:
        luaL_error(P, "%s is a %s: a scenario's fields are data (strings, numbers, booleans and "
                   "tables of them)", path, lua_typename(S, ty));
    }
    if (depth >= 32) luaL_error(P, "%s: tables nested too deeply (a table that holds itself?)", path);
    if (!lua_checkstack(S, 4)) luaL_error(P, "out of host memory");
    luaL_checkstack(P, 6, "scenario table");
    int t = lua_absindex(S, idx);
    lua_newtable(P);
    lua_pushnil(S);
    while (lua_next(S, t)) {
        char sub[256];
        int kt = lua_type(S, -2);
        if (kt == LUA_TSTRING) snprintf(sub, sizeof sub, "%s.%s", path, lua_tostring(S, -2));
        else if (kt == LUA_TNUMBER && lua_isinteger(S, -2))
            snprintf(sub, sizeof sub, "%s[%lld]", path, (long long)lua_tointeger(S, -2));
        else if (kt == LUA_TNUMBER || kt == LUA_TBOOLEAN) snprintf(sub, sizeof sub, "%s[?]", path);
        else luaL_error(P, "%s has a key that is a %s: keys are strings or numbers", path, lua_typename(S, kt));
        copy_data(P, S, -2, depth + 1, sub);
        copy_data(P, S, -1, depth + 1, sub);
        lua_rawset(P, -3);
        lua_pop(S, 1);
    }
}

/* In the planner's state: gets the scenario table (copied from the scenario's state, or made
 * from a record by lua/vrsim/record.lua), runs lua/vrsim/plan.lua's build on it and reads the
 * plan table into c->plan. */
/* The plan's pipeline rank (lua/vrsim/pipeline.lua P.run's table) into p->pp, which p owns from
 * the moment it is made (a raise after leaves it to plan_free). */
static void read_pp(lua_State *L, int t, Plan *p) {
    PpPlan *pp = calloc(1, sizeof *pp);
    if (!pp) luaL_error(L, "out of host memory");
    p->pp = pp;
    pp->ranks = (int)field_int(L, t, "ranks", 1);
    pp->stages = (int)field_int(L, t, "stages", 1);
    pp->virtual_stages = (int)field_int(L, t, "virtual", 1);
    pp->microbatches = (int)field_int(L, t, "microbatches", 1);
    pp->rank = (int)field_int(L, t, "rank", 0);
    pp->send_bytes = field_num(L, t, "send_bytes", 0);
    field_str(L, t, "schedule", pp->schedule, sizeof pp->schedule);
    if (pp->ranks < 1 || pp->stages < pp->ranks || pp->stages > 1 << 16 || pp->microbatches < 1)
        luaL_error(L, "the plan's pipeline: %d stages on %d ranks", pp->stages, pp->ranks);
    pp->gpus_per_rank = p->gpus / pp->ranks > 0 ? p->gpus / pp->ranks : 1;
    lua_getfield(L, t, "stage_layers");
    luaL_checktype(L, -1, LUA_TTABLE);
    if (!(pp->stage_layers = calloc((size_t)pp->stages, sizeof(int)))) luaL_error(L, "out of host memory");
    for (int i = 0; i < pp->stages; i++) {
        lua_rawgeti(L, -1, i + 1);
        pp->stage_layers[i] = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, t, "actions");
    luaL_checktype(L, -1, LUA_TTABLE);
    int at = lua_gettop(L);
    lua_Integer n = luaL_len(L, at);
    if (n < 0 || n > 1 << 24) luaL_error(L, "the plan's pipeline: %d actions", (int)n);
    pp->actions = calloc((size_t)n + 1, sizeof(PpAction));
    pp->op_first = calloc((size_t)n + 1, sizeof(int));
    pp->op_end = calloc((size_t)n + 1, sizeof(int));
    if (!pp->actions || !pp->op_first || !pp->op_end) luaL_error(L, "out of host memory");
    for (lua_Integer i = 0; i < n; i++) {
        lua_rawgeti(L, at, i + 1);
        int a = lua_gettop(L);
        pp->actions[i] = (PpAction){.stage = (int)field_int(L, a, "stage", 0),
                                    .kind = (PpKind)field_int(L, a, "kind", 0),
                                    .mb = (int)field_int(L, a, "mb", 0)};
        pp->op_first[i] = (int)field_int(L, a, "op_first", 0);
        pp->op_end[i] = (int)field_int(L, a, "op_end", 0);
        lua_pop(L, 1);
    }
    pp->n_actions = (int)n;
    lua_pop(L, 1);
}

static int load_protected(lua_State *L) {
    LoadCtx *c = lua_touserdata(L, 1);
    if (c->record) {
        push_module(L, "vrsim.record");
        lua_getfield(L, -1, "scenario");
        push_json(L, c->record, 0);
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, c->rec_steps);
        lua_setfield(L, -2, "steps");
        lua_pushinteger(L, c->rec_rank);
        lua_setfield(L, -2, "rank");
        lua_call(L, 2, 2);
        if (!lua_istable(L, -2)) {
            const char *why = lua_tostring(L, -1);
            snprintf(c->skip, sizeof c->skip, "%s", why ? why : "record.lua gave no scenario");
            c->skipped = true;
            return 0;
        }
        lua_pop(L, 1);
    } else {
        copy_data(L, c->S, lua_gettop(c->S), 0, lua_pushfstring(L, "%s: the scenario's table", c->chunkname + 1));
        lua_remove(L, -2); /* the path string */
    }
    int scn = lua_gettop(L);
    push_module(L, "vrsim.plan");
    lua_getfield(L, -1, c->base ? "rebuild" : "build");
    lua_pushvalue(L, scn);
    lua_newtable(L);
    for (int i = 0; i < c->opts->n_sets; i++) {
        lua_pushstring(L, c->opts->sets[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushstring(L, c->chunkname + 1);
    if (c->src) lua_pushstring(L, c->src);
    else lua_pushnil(L);
    lua_call(L, 4, 2);
    int pt = lua_gettop(L) - 1;
    if (c->base && lua_isnil(L, pt)) {
        const char *why = lua_tostring(L, pt + 1);
        snprintf(c->skip, sizeof c->skip, "%s", why ? why : "the graph cannot be reused");
        c->skipped = true;
        return 0;
    }
    if (!lua_istable(L, pt)) luaL_error(L, "the planner returned no plan");
    Plan *p = c->plan;
    field_str(L, pt, "title", p->title, sizeof p->title);
    field_str(L, pt, "model", p->model, sizeof p->model);
    field_str(L, pt, "settings", p->settings, sizeof p->settings);
    snprintf(p->strategy, sizeof p->strategy, "none");
    field_str(L, pt, "strategy", p->strategy, sizeof p->strategy);
    field_str(L, pt, "interconnect", p->interconnect, sizeof p->interconnect);
    field_str(L, pt, "notes", p->notes, sizeof p->notes);
    field_str(L, pt, "deepspeed_read", p->deepspeed_read, sizeof p->deepspeed_read);
    field_str(L, pt, "deepspeed_unknown", p->deepspeed_unknown, sizeof p->deepspeed_unknown);
    field_str(L, pt, "overrides", p->overrides, sizeof p->overrides);
    field_str(L, pt, "knobs", p->knobs, sizeof p->knobs);
    p->ds_estimate_bytes = field_num(L, pt, "ds_estimate_bytes", 0);
    p->host_bytes = field_num(L, pt, "host_bytes", 0);
    p->host_capacity = field_num(L, pt, "host_capacity", 0);
    p->steps = (int)field_int(L, pt, "steps", 3);
    p->gpus = (int)field_int(L, pt, "gpus", 1);
    p->tokens_per_step = field_num(L, pt, "tokens_per_step", 0);
    p->samples_per_step = field_num(L, pt, "samples_per_step", 0);
    p->graph_reads_allocator = field_bool(L, pt, "graph_reads_allocator", true);
    double np = field_num(L, pt, "n_params", -1), nt = field_num(L, pt, "n_trainable", -1);
    p->n_params = np >= 0 && np < 9e18 ? (int64_t)np : -1;
    p->n_trainable = nt >= 0 && nt < 9e18 ? (int64_t)nt : -1;
    lua_getfield(L, pt, "device");
    luaL_checktype(L, -1, LUA_TTABLE);
    read_device(L, lua_gettop(L), &p->dev);
    read_profile(L, lua_gettop(L), p);
    lua_pop(L, 1);
    lua_getfield(L, pt, "allocator");
    luaL_checktype(L, -1, LUA_TTABLE);
    field_str(L, lua_gettop(L), "conf", p->alloc_conf, sizeof p->alloc_conf);
    read_alloc(L, lua_gettop(L), &p->alloc);
    lua_pop(L, 1);
    lua_getfield(L, pt, "pp");
    if (lua_istable(L, -1)) read_pp(L, lua_gettop(L), p);
    lua_pop(L, 1);
    if (c->base && field_bool(L, pt, "graph_reused", false)) {
        p->graph = c->base->graph; /* the base plan keeps ownership */
        p->graph_borrowed = true;
        return 0;
    }
    lua_getfield(L, pt, "graph");
    GraphBox *b = luaL_checkudata(L, -1, GRAPH_MT);
    if (!b->g) luaL_error(L, "the plan's graph was already taken or freed");
    p->graph = b->g; /* the plan takes ownership */
    b->g = NULL;
    return 0;
}

static void dirname_of(const char *path, char *out, size_t n) {
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash == out) out[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(out, n, ".");
}

/* A new state on sandbox sb with vrsim's libraries and, unless it is the planner's, the
 * instruction hook (NULL: no memory). */
static lua_State *new_state(Sandbox *sb, bool unsafe, bool planner) {
    lua_State *L = lua_newstate(sandbox_alloc, sb);
    if (!L) return NULL;
    if (!planner) lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY); /* planner: plan_hook */
    /* generational collection: a model build makes many short-lived tables (op specs, shapes)
     * and keeps few; 4-6 % faster runs than the incremental default (tests/bench.sh) */
    lua_gc(L, LUA_GCGEN, 0, 0);
    open_sandbox(L, unsafe, planner);
    return L;
}

/* The message of a failed lua_pcall of state L (rc its status) into err. */
static void pcall_message(lua_State *L, int rc, const Sandbox *sb, const char *chunkname,
                          char *err, size_t errlen) {
    if (sb->stopped) {
        snprintf(err, errlen, "%s", sb->stop_msg);
    } else if (rc == LUA_ERRMEM) {
        snprintf(err, errlen, "%s: the scenario exceeded its memory limit (%zu MiB)", chunkname,
                 sb->limit >> 20);
    } else if (lua_isstring(L, -1)) {
        snprintf(err, errlen, "%s", lua_tostring(L, -1));
    } else {
        snprintf(err, errlen, "%s: the scenario raised an error that is not a message (a %s "
                 "value); raise error(\"...\") with a string", chunkname, luaL_typename(L, -1));
    }
}

/* A sandbox for one load: its limits, lua/ and the scenario's folder (dir, NULL: none) with
 * their resolved paths, and the --set strings. */
static VrStatus sandbox_new(const ScenarioOptions *opts, const char *dir, Sandbox **out,
                            char *err, size_t errlen) {
    *out = NULL;
    Sandbox *sb = calloc(1, sizeof *sb);
    if (!sb) { snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    sb->limit = opts->memory_limit ? opts->memory_limit : DEFAULT_MEMORY;
    sb->limit_ins = opts->instruction_limit ? opts->instruction_limit : DEFAULT_INSTRUCTIONS;
    char found[PATH_MAX];
    const char *ld = opts->lua_dir;
    if (!ld && scenario_find_lua_dir(found, sizeof found)) ld = found;
    if (!ld || strlen(ld) >= sizeof sb->lua_dir || !realpath(ld, sb->lua_real)) {
        snprintf(err, errlen, "cannot find vrsim's lua/ folder (run from the project folder or "
                 "set VRSIM_LUA)");
        sandbox_free(sb);
        return VR_EINVAL;
    }
    snprintf(sb->lua_dir, sizeof sb->lua_dir, "%s", ld);
    sb->sets = opts->sets;
    sb->n_sets = opts->n_sets;
    sb->read_hash = opts->read_hash;
    sb->typed_file = opts->typed_file;
    if (dir) {
        if (strlen(dir) >= sizeof sb->scn_dir) {
            snprintf(err, errlen, "%s: the scenario's folder name is too long", dir);
            sandbox_free(sb);
            return VR_EINVAL;
        }
        snprintf(sb->scn_dir, sizeof sb->scn_dir, "%s", dir);
        if (!realpath(dir, sb->scn_real)) sb->scn_real[0] = 0;
    }
    *out = sb;
    return VR_OK;
}

/* Loads a scenario (src, run in its own sandboxed state) or a record (rec, made into a scenario
 * by record.lua) into a Plan. The scenario's state and the planner's are separate: the planner
 * receives the scenario's table as data, so nothing a scenario does to its globals, to the
 * modules it requires, to the string metatable or with finalizers reaches the planner. Both
 * share one sandbox: one memory limit, one instruction limit. Takes sb and the planner's state
 * P (either may be NULL: made here) and uses them up, unless keep (both then stay the caller's,
 * for a later load in P). With base, the planner is plan.lua's rebuild: the plan reuses base's
 * graph, or the load returns VR_ENOTSUP with the reason it cannot in err. */
static VrStatus load_in(Sandbox *sb, lua_State *P, const char *chunkname, const char *src,
                        const cJSON *rec, int steps, int rank, const ScenarioOptions *opts,
                        const Plan *base, bool keep, Plan **out, char *err, size_t errlen) {
    *out = NULL;
    Plan *p = calloc(1, sizeof *p);
    size_t cn = strlen(chunkname) + 2;
    char *chunk = malloc(cn);
    if (!P && sb) P = new_state(sb, false, true);
    lua_State *S = src && P ? new_state(sb, opts->unsafe, false) : NULL;
    if (!p || !chunk || !P || (src && !S)) {
        if (P && !keep) lua_close(P);
        if (S) lua_close(S);
        if (!keep) sandbox_free(sb);
        free(chunk); free(p);
        snprintf(err, errlen, "out of host memory");
        return VR_ENOMEM;
    }
    p->n_params = p->n_trainable = -1;
    snprintf(chunk, cn, "@%s", chunkname);
    LoadCtx c = {.chunkname = chunk, .src = src, .S = S, .record = rec, .rec_steps = steps,
                 .rec_rank = rank, .opts = opts, .plan = p, .base = base};
    VrStatus st = VR_OK;
    watchdog_arm(chunkname); /* until lua_close, which runs the finalizers */
    if (S) {
        lua_pushcfunction(S, scenario_protected);
        lua_pushlightuserdata(S, &c);
        sb->deadline_s = vr_cpu_s() + SCENARIO_LIMIT_S;
        int rc = lua_pcall(S, 1, 1, 0);
        sb->deadline_s = 0;
        if (rc || sb->stopped) {
            pcall_message(S, rc, sb, chunkname, err, errlen);
            st = VR_EINVAL;
        }
    }
    if (!st) {
        lua_pushcfunction(P, load_protected);
        lua_pushlightuserdata(P, &c);
        plan_watch(P);
        int rc = lua_pcall(P, 1, 0, 0);
        plan_watch(NULL);
        if (rc || sb->stopped) {
            pcall_message(P, rc, sb, chunkname, err, errlen);
            st = VR_EINVAL;
        } else if (c.skipped) {
            snprintf(err, errlen, "%s", c.skip);
            st = VR_ENOTSUP;
        }
    }
    if (S) lua_close(S);
    if (!keep) {
        lua_close(P);
        sandbox_free(sb);
    }
    watchdog_disarm();
    free(chunk);
    if (st) {
        plan_free(p);
        return st;
    }
    const char *slash = strrchr(chunkname, '/');
    snprintf(p->name, sizeof p->name, "%s", slash ? slash + 1 : chunkname);
    char *dot = strrchr(p->name, '.');
    if (dot && strcmp(dot, ".lua") == 0) *dot = 0;
    *out = p;
    return VR_OK;
}

static VrStatus load_common(const char *chunkname, const char *src, const cJSON *rec, int steps,
                            int rank, const char *dir, const ScenarioOptions *opts, Plan **out,
                            char *err, size_t errlen) {
    *out = NULL;
    Sandbox *sb;
    VrStatus st = sandbox_new(opts, dir, &sb, err, errlen);
    if (st) return st;
    return load_in(sb, NULL, chunkname, src, rec, steps, rank, opts, NULL, false, out, err, errlen);
}

VrStatus scenario_load_source(const char *chunkname, const char *src, const char *dir,
                              const ScenarioOptions *opts, Plan **out, char *err,
                              size_t errlen) {
    return load_common(chunkname, src, NULL, 0, 0, dir, opts, out, err, errlen);
}

VrStatus scenario_load_record(const char *chunkname, const cJSON *rec, int steps, int rank,
                              const ScenarioOptions *opts, Plan **out, char *err, size_t errlen) {
    *out = NULL;
    if (!rec) { snprintf(err, errlen, "%s: no record", chunkname); return VR_EINVAL; }
    return load_common(chunkname, NULL, rec, steps, rank, NULL, opts, out, err, errlen);
}

/* ---- a planner state with vrsim's modules loaded, for many loads of one scenario ---------- */

struct ScenarioState {
    Sandbox *sb;
    lua_State *P;   /* the planner's state; each load makes the scenario's own state fresh */
    bool unsafe;
    bool kept;      /* scenario_load_source_kept has loaded in it */
};

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds the module names of the .lua files under root/rel (recursively) to names. */
static void list_modules(const char *root, const char *rel, char ***names, int *n, int *cap,
                         int depth) {
    char path[2 * PATH_MAX + 2];
    snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = depth < 4 ? opendir(path) : NULL;
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (nm[0] == '.') continue;
        char sub[PATH_MAX];
        if ((size_t)snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", nm) >= sizeof sub)
            continue;
        size_t len = strlen(nm);
        if (len > 4 && strcmp(nm + len - 4, ".lua") == 0) {
            if (*n == *cap) {
                int nc = *cap ? *cap * 2 : 64;
                char **nn = realloc(*names, sizeof(char *) * (size_t)nc);
                if (!nn) break;
                *names = nn;
                *cap = nc;
            }
            char *m = strdup(sub);
            if (!m) break;
            m[strlen(m) - 4] = 0;
            for (char *c = m; *c; c++) if (*c == '/') *c = '.';
            (*names)[(*n)++] = m;
        } else {
            list_modules(root, sub, names, n, cap, depth + 1);
        }
    }
    closedir(d);
}

/* require()s each module named in the table at index 1, ignoring those that fail (a load that
 * needs one sees its error then, as it would have). */
static int preload_protected(lua_State *L) {
    int n = (int)luaL_len(L, 1);
    for (int i = 1; i <= n; i++) {
        lua_pushcfunction(L, l_require);
        lua_geti(L, 1, i);
        lua_pcall(L, 1, 0, 0) == LUA_OK ? (void)0 : lua_pop(L, 1);
    }
    return 0;
}

VrStatus scenario_state_new(const ScenarioOptions *opts, const char *dir, ScenarioState **out,
                            char *err, size_t errlen) {
    *out = NULL;
    ScenarioState *ss = calloc(1, sizeof *ss);
    if (!ss) { snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    VrStatus st = sandbox_new(opts, dir, &ss->sb, err, errlen);
    if (st) { free(ss); return st; }
    ss->P = new_state(ss->sb, false, true);
    if (!ss->P) { sandbox_free(ss->sb); free(ss); snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    ss->unsafe = opts->unsafe;
    char **names = NULL;
    int n = 0, cap = 0;
    list_modules(ss->sb->lua_dir, "", &names, &n, &cap, 0);
    if (n > 1) qsort(names, (size_t)n, sizeof(char *), cmp_str);
    lua_State *L = ss->P;
    lua_pushcfunction(L, preload_protected);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
        free(names[i]);
    }
    free(names);
    watchdog_arm("(vrsim's modules)");
    plan_watch(L);
    int rc = lua_pcall(L, 1, 0, 0);
    plan_watch(NULL);
    watchdog_disarm();
    if (rc) lua_pop(L, 1); /* out of memory: the load requires them itself, or fails as it would */
    lua_gc(L, LUA_GCCOLLECT);
    /* the load's instruction budget is its own, as in a fresh state */
    ss->sb->instructions = 0;
    ss->sb->stopped = 0;
    *out = ss;
    return VR_OK;
}

void scenario_state_free(ScenarioState *ss) {
    if (!ss) return;
    if (ss->P) lua_close(ss->P);
    sandbox_free(ss->sb);
    free(ss);
}

/* Readies ss's sandbox for one more load with opts: its own instruction budget and --set
 * strings, as a fresh state would have. */
static void sandbox_rearm(ScenarioState *ss, const ScenarioOptions *opts) {
    Sandbox *sb = ss->sb;
    sb->limit_ins = opts->instruction_limit ? opts->instruction_limit : DEFAULT_INSTRUCTIONS;
    sb->instructions = 0;
    /* the --set strings of this load (the paths typed on the command line) */
    sb->sets = opts->sets;
    sb->n_sets = opts->n_sets;
    sb->read_hash = opts->read_hash;
}

VrStatus scenario_load_source_in(ScenarioState *ss, const char *chunkname, const char *src,
                                 const ScenarioOptions *opts, Plan **out, char *err,
                                 size_t errlen) {
    *out = NULL;
    if (!ss || !ss->P || ss->unsafe != opts->unsafe || ss->kept) {
        snprintf(err, errlen, "internal: a used or mismatched scenario state");
        return VR_EINVAL;
    }
    sandbox_rearm(ss, opts);
    Sandbox *sb = ss->sb;
    lua_State *P = ss->P;
    ss->sb = NULL;
    ss->P = NULL;
    return load_in(sb, P, chunkname, src, NULL, 0, 0, opts, NULL, false, out, err, errlen);
}

VrStatus scenario_load_source_kept(ScenarioState *ss, const char *chunkname, const char *src,
                                   const Plan *base, const ScenarioOptions *opts, Plan **out,
                                   char *err, size_t errlen) {
    *out = NULL;
    if (!ss || !ss->P || ss->unsafe != opts->unsafe || (base && !ss->kept) || ss->sb->stopped) {
        snprintf(err, errlen, "internal: a used or mismatched scenario state");
        return VR_EINVAL;
    }
    sandbox_rearm(ss, opts);
    ss->kept = true;
    return load_in(ss->sb, ss->P, chunkname, src, NULL, 0, 0, opts, base, true, out, err, errlen);
}

typedef struct ReportCtx { const char *module, *fn; bool flag; char *text; } ReportCtx;

static int report_protected(lua_State *L) {
    ReportCtx *c = lua_touserdata(L, 1);
    push_module(L, c->module);
    lua_getfield(L, -1, c->fn);
    lua_pushboolean(L, c->flag);
    lua_call(L, 1, 1);
    size_t n;
    const char *s = luaL_checklstring(L, -1, &n);
    c->text = malloc(n + 1);
    if (!c->text) luaL_error(L, "out of host memory");
    memcpy(c->text, s, n + 1);
    return 0;
}

VrStatus scenario_report_text(const char *module, const char *fn, bool flag, char **out,
                              char *err, size_t errlen) {
    *out = NULL;
    Sandbox *sb = calloc(1, sizeof *sb);
    if (!sb) { snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    sb->limit = DEFAULT_MEMORY;
    sb->limit_ins = DEFAULT_INSTRUCTIONS;
    if (!scenario_find_lua_dir(sb->lua_dir, sizeof sb->lua_dir) ||
        !realpath(sb->lua_dir, sb->lua_real)) {
        sandbox_free(sb);
        snprintf(err, errlen, "cannot find vrsim's lua/ folder (run from the project folder or set VRSIM_LUA)");
        return VR_EINVAL;
    }
    lua_State *L = new_state(sb, false, true);
    if (!L) { sandbox_free(sb); snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    ReportCtx c = {.module = module, .fn = fn, .flag = flag};
    lua_pushcfunction(L, report_protected);
    lua_pushlightuserdata(L, &c);
    VrStatus st = VR_OK;
    watchdog_arm(module);
    plan_watch(L);
    int rc = lua_pcall(L, 1, 0, 0);
    plan_watch(NULL);
    if (rc || sb->stopped) {
        pcall_message(L, rc, sb, module, err, errlen);
        free(c.text);
        c.text = NULL;
        st = VR_EINVAL;
    }
    lua_close(L);
    watchdog_disarm();
    sandbox_free(sb);
    *out = c.text;
    return st;
}

/* In a scenario's state: runs the chunk, which must return a string, and copies it out. */
typedef struct EvalCtx { const char *chunkname, *src; char *text; } EvalCtx;
static int eval_protected(lua_State *L) {
    EvalCtx *c = lua_touserdata(L, 1);
    if (luaL_loadbufferx(L, c->src, strlen(c->src), c->chunkname, "t")) lua_error(L);
    lua_call(L, 0, 1);
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    if (!s) luaL_error(L, "%s: gave no text", c->chunkname + 1);
    c->text = malloc(n + 1);
    if (!c->text) luaL_error(L, "out of host memory");
    memcpy(c->text, s, n + 1);
    return 0;
}

VrStatus scenario_eval_text(const char *chunkname, const char *src, const char *dir,
                            const ScenarioOptions *opts, char **out, char *err, size_t errlen) {
    *out = NULL;
    Sandbox *sb;
    VrStatus st = sandbox_new(opts, dir, &sb, err, errlen);
    if (st) return st;
    lua_State *S = new_state(sb, opts->unsafe, false);
    size_t cn = strlen(chunkname) + 2;
    char *chunk = malloc(cn);
    if (!S || !chunk) {
        if (S) lua_close(S);
        sandbox_free(sb);
        free(chunk);
        snprintf(err, errlen, "out of host memory");
        return VR_ENOMEM;
    }
    snprintf(chunk, cn, "@%s", chunkname);
    EvalCtx c = {.chunkname = chunk, .src = src};
    watchdog_arm(chunkname);
    lua_pushcfunction(S, eval_protected);
    lua_pushlightuserdata(S, &c);
    sb->deadline_s = vr_now_s() + SCENARIO_LIMIT_S;
    int rc = lua_pcall(S, 1, 0, 0);
    sb->deadline_s = 0;
    if (rc || sb->stopped) {
        pcall_message(S, rc, sb, chunkname, err, errlen);
        free(c.text);
        c.text = NULL;
        st = VR_EINVAL;
    }
    lua_close(S);
    watchdog_disarm();
    sandbox_free(sb);
    free(chunk);
    *out = c.text;
    return st;
}

VrStatus scenario_load(const char *path, const ScenarioOptions *opts, Plan **out, char *err,
                       size_t errlen) {
    size_t len;
    *out = NULL;
    char *z = NULL;
    ReadStatus rs = read_file(path, MAX_INPUT_BYTES, &z, &len);
    if (rs != RF_OK) {
        snprintf(err, errlen, "%s: %s", path,
                 rs == RF_TOOBIG ? "the scenario file is larger than 32 MiB"
                 : rs == RF_NOTFILE ? "not a regular file"
                 : rs == RF_NOMEM ? "out of host memory reading it"
                 : "cannot read the scenario file");
        return rs == RF_NOMEM ? VR_ENOMEM : VR_EINVAL;
    }
    if (memchr(z, 0, len)) {
        free(z);
        snprintf(err, errlen, "%s: not a text file", path);
        return VR_EINVAL;
    }
    char dir[PATH_MAX];
    if (strlen(path) >= sizeof dir) {
        free(z);
        snprintf(err, errlen, "%s: the path is too long", path);
        return VR_EINVAL;
    }
    dirname_of(path, dir, sizeof dir);
    VrStatus st = scenario_load_source(path, z, dir, opts, out, err, errlen);
    free(z);
    return st;
}
