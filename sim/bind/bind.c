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
 * error never leaks it. This file makes the states and runs the scenario and
 * the planner in them; the rest of sim/bind/ is split by job (bind_int.h): sandbox.c the
 * states' memory pool and time limits, require.c the sandboxed require and file reads,
 * graph_ud.c the Graph userdata, alike.c core.modules_alike, plan_read.c the plan table and the
 * profile cache, luaget.c the readers of Lua values every file uses. */
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
#include "../scenario.h"
#include "luabc.h"
#include "watchdog.h"
#include "bind_int.h"
#include "toml.h"
#include "yaml.h"

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
        /* A null member reads as nil, like a key left out; transformers tells the two apart (a
         * null sliding_window is full attention, an absent one MistralConfig's 4096), so the
         * object's null keys are kept in its metatable's __json_null set (models/hf.lua H.is_null),
         * out of the way of pairs() and of every unknown-key check. */
        lua_newtable(L);
        int nulls = 0;
        for (const cJSON *it = v->child; it; it = it->next) {
            if (cJSON_IsNull(it)) {
                if (!nulls) {
                    lua_createtable(L, 0, 1);          /* the metatable */
                    lua_newtable(L);                   /* its __json_null set */
                    lua_setfield(L, -2, "__json_null");
                    lua_setmetatable(L, -2);
                    nulls = 1;
                }
                lua_getmetatable(L, -1);
                lua_getfield(L, -1, "__json_null");
                lua_pushboolean(L, 1);
                lua_setfield(L, -2, it->string);
                lua_pop(L, 2);
                continue;
            }
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

/* vrsim.core.read_toml(name): a TOML file (read_named; a torchtitan job config) as a Lua table
 * and its lines (sim/bind/toml.h). */
static int l_read_toml(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    size_t len = 0;
    char *src = NULL;
    read_named(L, name, &src, &len);
    return bind_push_toml(L, name, src, len);
}

int bind_open_core(lua_State *L) {
    bind_yaml_open(L);
    bind_toml_open(L);
    luaL_newmetatable(L, JSON_MT);
    lua_pushcfunction(L, json_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    bind_open_graph(L);
    lua_newtable(L);
    lua_pushcfunction(L, l_read_config);
    lua_setfield(L, -2, "read_config");
    lua_pushcfunction(L, l_read_yaml);
    lua_setfield(L, -2, "read_yaml");
    lua_pushcfunction(L, l_read_toml);
    lua_setfield(L, -2, "read_toml");
    lua_pushcfunction(L, l_read_text);
    lua_setfield(L, -2, "read_text");
    lua_pushcfunction(L, bind_modules_alike);
    lua_setfield(L, -2, "modules_alike");
    lua_pushcfunction(L, bind_rename_layer);
    lua_setfield(L, -2, "rename_layer");
    bind_graph_core(L);
    return 1;
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
    lua_pushcfunction(L, bind_require);
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
    p->managed_bytes = field_num(L, pt, "managed_bytes", 0);
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
    p->graph = bind_take_graph(L, -1); /* the plan takes ownership */
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
    sb->typed_launcher = opts->typed_launcher;
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
        lua_pushcfunction(L, bind_require);
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

void bind_push_module(lua_State *L, const char *name) { push_module(L, name); }

VrStatus bind_run_fresh(const char *what, lua_CFunction fn, void *ud, char *err, size_t errlen) {
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
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, ud);
    VrStatus st = VR_OK;
    watchdog_arm(what);
    plan_watch(L);
    int rc = lua_pcall(L, 1, 0, 0);
    plan_watch(NULL);
    if (rc || sb->stopped) {
        pcall_message(L, rc, sb, what, err, errlen);
        st = VR_EINVAL;
    }
    lua_close(L);
    watchdog_disarm();
    sandbox_free(sb);
    return st;
}

VrStatus scenario_report_text(const char *module, const char *fn, bool flag, char **out,
                              char *err, size_t errlen) {
    ReportCtx c = {.module = module, .fn = fn, .flag = flag};
    VrStatus st = bind_run_fresh(module, report_protected, &c, err, errlen);
    if (st) {
        free(c.text);
        c.text = NULL;
    }
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
