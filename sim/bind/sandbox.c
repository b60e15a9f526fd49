/* sandbox.c: the memory a scenario's Lua states may take (a counting allocator with a pool of
 * small blocks) and the limits on the time they may run (the instruction hook of a scenario's
 * state, the watchdog's ticks for a planner state). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <lauxlib.h>
#include <lua.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../infile.h"
#include "../vr.h"
#include "bind_int.h"
#include "watchdog.h"

/* Frees sb (NULL: nothing) and its pool; every state on it must be closed. */
void sandbox_free(Sandbox *sb) {
    if (!sb) return;
    for (struct PoolChunk *c = sb->pool_chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(sb);
}

/* Folds a file the load read (its name and bytes) into the caller's hash, if it asked for one:
 * what a sweep's journal is keyed by besides the scenario (ScenarioOptions.read_hash). */
void note_read(const Sandbox *sb, const char *name, const char *bytes, size_t len) {
    if (!sb->read_hash) return;
    *sb->read_hash = vr_hash(*sb->read_hash, name, strlen(name));
    *sb->read_hash = vr_hash(*sb->read_hash, bytes, len);
}

/* Whether name is a file path the user typed on the command line (--set model.config=PATH or
 * training.deepspeed=PATH, or the trainer config of `vrsim CONFIG.yaml` and its --accelerate FILE): the folder rule is about what a scenario's code may open, so such a
 * path is opened as typed. Scenario code cannot add to the list. */
bool user_typed_path(const Sandbox *sb, const char *name) {
    static const char *const keys[] = {"model.config=", "config=", "training.deepspeed=", "deepspeed=",
                                       "training.data.lengths="};
    if (sb->typed_file && strcmp(sb->typed_file, name) == 0) return true;
    if (sb->typed_launcher && strcmp(sb->typed_launcher, name) == 0) return true;
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
void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
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


/* The instruction limit as a hard stop. Once reached, the flag stays set and the hook fires on
 * every instruction of every coroutine that runs on, each time raising the same error: a
 * scenario's pcall may catch one, but the next instruction after it raises again, so the error
 * climbs out through every pcall to vrsim's own, which reports sb->stop_msg whatever the
 * scenario made of the error on the way. The watchdog sees no more progress. */
void count_hook(lua_State *L, lua_Debug *ar) {
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
void plan_watch(lua_State *P) {
    plan_ticks = 0;
    plan_state = P;
    watchdog_on_tick(P ? plan_tick : NULL);
}
