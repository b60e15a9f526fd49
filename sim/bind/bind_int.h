/* bind_int.h: what the files of sim/bind/ share among themselves (nothing outside sim/bind/
 * includes it), one section per file: the sandbox of a scenario's states, the sandboxed reads,
 * reading Lua values, the Graph userdata, core.modules_alike, the `vrsim.core` module (bind.c)
 * and the plan reader. */
#ifndef VR_BIND_INT_H
#define VR_BIND_INT_H

#include <lua.h>

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../graph.h"
#include "../scenario.h"

/* ---- sandbox.c: a scenario's Lua states' memory and time ---- */
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
    const char *typed_launcher;  /* ScenarioOptions.typed_launcher (borrowed), NULL = none */
    /* the pool of small blocks (see sandbox_alloc): a free list per size class, and the chunks
     * they are cut from (freed with the sandbox) */
    void *pool_free[POOL_CLASSES];
    struct PoolChunk *pool_chunks;
    char *pool_next, *pool_end;  /* the current chunk's uncut space */
} Sandbox;

/* Frees sb (NULL: nothing) and its pool; every state on it must be closed. */
void sandbox_free(Sandbox *sb);
/* Adds a file's name and bytes to what the scenario read (ScenarioOptions.read_hash). */
void note_read(const Sandbox *sb, const char *name, const char *bytes, size_t len);
/* Whether name is a path the user typed on the command line (opened as typed). */
bool user_typed_path(const Sandbox *sb, const char *name);
/* The lua_Alloc of every state on a Sandbox (ud): counts its bytes against the limit. */
void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* The instruction hook of a scenario's state: stops it at the sandbox's limits. */
void count_hook(lua_State *L, lua_Debug *ar);
/* Marks P as the planner state about to run (NULL: none runs now): its time is bounded. */
void plan_watch(lua_State *P);

/* ---- require.c: the files a state may read ---- */
/* Files a scenario makes vrsim read (the scenario, modules, configs) are refused past this. */
#define MAX_INPUT_BYTES ((size_t)32 << 20)
typedef enum ReadStatus { RF_OK, RF_MISSING, RF_OUTSIDE, RF_TOOBIG, RF_NOTFILE, RF_NOMEM, RF_IO } ReadStatus;
ReadStatus read_file(const char *path, size_t max, char **out, size_t *len);
ReadStatus read_inside(const Sandbox *sb, const char *path, char **out, size_t *len);
void raise_read(lua_State *L, const char *what, const char *name, ReadStatus rs);
/* Whether the real path real lies under root. */
bool under(const char *real, const char *root);
/* require(name) of a sandboxed state: lua/'s modules and the scenario folder's only. */
int bind_require(lua_State *L);
/* Sets up a new state's libraries and globals as the sandbox allows (unsafe: --unsafe;
 * planner: vrsim's planner state). */
void open_sandbox(lua_State *L, bool unsafe, bool planner);

/* luaget.c. top_*: the value on top of the stack (popped) as field k's (def when nil); field_*:
 * field k of the table at t. A value of another type raises naming the field. top_str and
 * field_str copy the string into buf (n bytes) and return it, or NULL when nil. */
lua_Integer top_int(lua_State *L, const char *k, lua_Integer def);
double top_num(lua_State *L, const char *k, double def);
bool top_bool(lua_State *L, bool def);
const char *top_str(lua_State *L, char *buf, size_t n);
lua_Integer field_int(lua_State *L, int t, const char *k, lua_Integer def);
double field_num(lua_State *L, int t, const char *k, double def);
bool field_bool(lua_State *L, int t, const char *k, bool def);
const char *field_str(lua_State *L, int t, const char *k, char *buf, size_t n);
/* The DType of s; raises for an unknown name. */
DType parse_dtype(lua_State *L, const char *s);

/* graph_ud.c. bind_open_graph registers the Graph userdata's metatable (G:tensor, G:op, ...);
 * bind_graph_core sets new_graph, row_sum_buffers, op_fields, tensor_fields and streams in the
 * table on top (vrsim.core). */
void bind_open_graph(lua_State *L);
void bind_graph_core(lua_State *L);
/* The Graph of the userdata at idx, which the caller now owns (the userdata lets go of it);
 * raises when it was taken already. */
Graph *bind_take_graph(lua_State *L, int idx);

/* alike.c: core.modules_alike(a, b, la, lb, roles) and core.rename_layer(s, from, to). */
int bind_modules_alike(lua_State *L);
int bind_rename_layer(lua_State *L);

/* bind.c: pushes the vrsim.core module (require.c's require gives it to "vrsim.core"). */
int bind_open_core(lua_State *L);
/* bind.c: pushes require(name) through vrsim's own require, whatever the globals say. */
void bind_push_module(lua_State *L, const char *name);
/* bind.c: runs fn(ud) protected in a fresh sandboxed state of vrsim's modules (the planner's
 * limits; `what` names it in messages). VR_EINVAL with the message in err when it raises,
 * VR_ENOMEM without the host memory for the state. */
VrStatus bind_run_fresh(const char *what, lua_CFunction fn, void *ud, char *err, size_t errlen);

/* ---- plan_read.c: the plan table into a Plan ---- */
void read_device(lua_State *L, int t, DeviceSpec *d);
void read_profile(lua_State *L, int dev, Plan *p);
void read_alloc(lua_State *L, int t, AllocConfig *a);
/* The plan's pipeline rank (lua/vrsim/pipeline.lua P.run's table at t) into p->pp, which p owns
 * from the moment it is made (a raise after leaves it to plan_free). */
void read_pp(lua_State *L, int t, Plan *p);

#endif
