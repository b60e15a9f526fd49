/* toml.c: vrsim.core.read_toml's pushing half: a parsed TOML document (sim/tomlin.h) into Lua
 * tables with a side table of line numbers, the shape bind/yaml.c gives a YAML document, so
 * lua/recipes/reader.lua reads either alike. */
#include <lauxlib.h>
#include <lua.h>

#include <stdlib.h>

#include "../tomlin.h"
#include "toml.h"

#define TOML_MT "vrsim.TOML"

/* The document, owned by a userdata while it is pushed: a Lua error (memory) cannot leak it. */
typedef struct TomlBox { TomlDoc *doc; } TomlBox;

static int toml_gc(lua_State *L) {
    TomlBox *b = luaL_checkudata(L, 1, TOML_MT);
    toml_doc_free(b->doc);
    b->doc = NULL;
    return 0;
}

void bind_toml_open(lua_State *L) {
    luaL_newmetatable(L, TOML_MT);
    lua_pushcfunction(L, toml_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}

/* Pushes datum d; lines is the absolute index of the lines table. (tomlin.c has refused dates
 * and times and bounded the depth.) */
static void push_datum(lua_State *L, const toml_datum_t *d, int lines) {
    switch (d->type) {
    case TOML_STRING: lua_pushlstring(L, d->u.str.ptr, (size_t)d->u.str.len); return;
    case TOML_INT64: lua_pushinteger(L, (lua_Integer)d->u.int64); return;
    case TOML_FP64: lua_pushnumber(L, d->u.fp64); return;
    case TOML_BOOLEAN: lua_pushboolean(L, d->u.boolean); return;
    case TOML_TABLE:
    case TOML_ARRAY: break;
    default: lua_pushnil(L); return;
    }
    luaL_checkstack(L, 8, "TOML nesting");
    bool tab = d->type == TOML_TABLE;
    int n = tab ? d->u.tab.size : d->u.arr.size;
    lua_createtable(L, tab ? 0 : n, tab ? n : 0);
    lua_createtable(L, tab ? 0 : n + 1, tab ? n : 0); /* its lines */
    lua_pushinteger(L, d->lineno);
    lua_rawseti(L, -2, 0);
    for (int i = 0; i < n; i++) {
        const toml_datum_t *v = tab ? &d->u.tab.value[i] : &d->u.arr.elem[i];
        if (tab) lua_pushlstring(L, d->u.tab.key[i], (size_t)d->u.tab.len[i]);
        else lua_pushinteger(L, i + 1);
        lua_pushvalue(L, -1);
        lua_pushinteger(L, v->lineno);
        lua_rawset(L, -4);                  /* lines[key] = line */
        push_datum(L, v, lines);
        lua_rawset(L, -4);                  /* t[key] = value */
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, lines);                   /* lines[t] = its lines */
}

int bind_push_toml(lua_State *L, const char *name, char *src, size_t len) {
    TomlBox *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->doc = NULL;
    luaL_setmetatable(L, TOML_MT);
    char err[300];
    VrStatus st = toml_doc_parse(src, len, NULL, &box->doc, err, sizeof err);
    free(src);
    /* lua_error, not luaL_error: the message is the file's own line, not the caller's */
    if (st == VR_ENOMEM) return lua_pushfstring(L, "out of host memory reading '%s'", name), lua_error(L);
    if (st) return lua_pushfstring(L, "%s:%s", name, err + (err[0] == 'l' ? 5 : 0)), lua_error(L);
    lua_newtable(L);
    int lines = lua_gettop(L);
    push_datum(L, toml_doc_root(box->doc), lines);
    lua_pushvalue(L, lines);
    toml_doc_free(box->doc);
    box->doc = NULL;
    return 2;
}
