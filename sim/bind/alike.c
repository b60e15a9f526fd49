/* alike.c: core.modules_alike, whether two decoder layers' module trees were declared alike
 * (lua/vrsim/replicate.lua), and core.rename_layer. */
#include <lauxlib.h>
#include <lua.h>

#include <stdio.h>
#include <string.h>

#include "bind_int.h"

/* What modules_alike does with a module's field, as the Lua side declares it (the roles table,
 * lua/vrsim/replicate.lua): skips it (links, the forward function, lists compared apart),
 * reads it as a name written for the other layer (or, for a module's key under its parent, the
 * two layer numbers themselves), as a layer number, or compares it as a value (a field the
 * table does not name). */
typedef enum { KEY_VALUE, KEY_SKIP, KEY_NAME, KEY_KEY, KEY_LAYER } AlikeKey;

static AlikeKey alike_key(lua_State *L, int k, int roles) {
    if (lua_type(L, k) != LUA_TSTRING) return KEY_VALUE;
    lua_pushvalue(L, k);
    lua_rawget(L, roles);
    const char *r = lua_tostring(L, -1);
    AlikeKey kind = !r ? KEY_VALUE : strcmp(r, "skip") == 0 ? KEY_SKIP : strcmp(r, "name") == 0 ? KEY_NAME
                  : strcmp(r, "key") == 0 ? KEY_KEY : strcmp(r, "layer") == 0 ? KEY_LAYER : (AlikeKey)-1;
    if ((int)kind < 0)
        luaL_error(L, "modules_alike: field '%s' has role '%s' (skip, name, key or layer)", lua_tostring(L, k), r);
    lua_pop(L, 1);
    return kind;
}

/* Two layers compared: their numbers, as integers and as strings, and the renaming between them. */
typedef struct Alike {
    lua_Integer la, lb;
    int roles;         /* stack index of the field roles (alike_key) */
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
        if (!lua_rawequal(L, -1, -2) && (kind = alike_key(L, k, c->roles)) != KEY_SKIP) {
            int tv = lua_type(L, -2), tw = lua_type(L, -1);
            if (kind == KEY_NAME || kind == KEY_KEY) {
                ok = tv == tw && (tv != LUA_TSTRING || names_alike(L, c, kind == KEY_KEY));
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
        if (alike_key(L, -1, c->roles) != KEY_SKIP) {
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
int bind_rename_layer(lua_State *L) {
    const char *s = luaL_checkstring(L, 1);
    lua_Integer from = luaL_checkinteger(L, 2), to = luaL_checkinteger(L, 3);
    char buf[512];
    graph_rename_layer(s, (int)from, (int)to, buf, sizeof buf);
    lua_pushstring(L, buf);
    return 1;
}

/* core.modules_alike(a, b, la, lb, roles): whether module trees a (layer la's) and b (lb's) were
 * declared alike (lua/vrsim/replicate.lua says what that means); roles: a module field's name ->
 * "skip", "name", "key" or "layer" (alike_key). */
int bind_modules_alike(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 5, LUA_TTABLE);
    Alike c = {.la = luaL_checkinteger(L, 3), .lb = luaL_checkinteger(L, 4), .roles = 5};
    snprintf(c.na, sizeof c.na, "%lld", (long long)c.la);
    snprintf(c.nb, sizeof c.nb, "%lld", (long long)c.lb);
    graph_renamer_init(&c.rn, (int)c.la, (int)c.lb);
    lua_pushboolean(L, modules_alike(L, 1, 2, &c, 0));
    return 1;
}
