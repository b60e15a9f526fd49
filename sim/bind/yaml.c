/* yaml.c: vrsim.core.read_yaml's pushing half: a YamlNode tree into Lua tables with a side
 * table of line numbers (bind.c finds and reads the file, as for read_config). */
#include <lauxlib.h>
#include <lua.h>

#include <stdlib.h>

#include "../yamlin.h"
#include "yaml.h"

#define YAML_MT "vrsim.YAML"

/* The tree, owned by a userdata while it is pushed: a Lua error (memory) cannot leak it. */
typedef struct YamlBox { YamlNode *root; } YamlBox;

static int yaml_gc(lua_State *L) {
    YamlBox *b = luaL_checkudata(L, 1, YAML_MT);
    yaml_tree_free(b->root);
    b->root = NULL;
    return 0;
}

void bind_yaml_open(lua_State *L) {
    luaL_newmetatable(L, YAML_MT);
    lua_pushcfunction(L, yaml_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}

/* Pushes the scalar n's value (nil for null). */
static void push_scalar(lua_State *L, const char *name, const YamlNode *n) {
    YamlValue v;
    if (yaml_scalar_value(n, &v)) {
        if (n->tag) lua_pushfstring(L, "%s:%d: '%s' is not a !!%s", name, n->line, n->text, n->tag);
        else lua_pushfstring(L, "%s:%d: '%s' is an integer with no digit (PyYAML refuses it)", name, n->line, n->text);
        lua_error(L);
    }
    switch (v.type) {
    case YT_NULL: lua_pushnil(L); break;
    case YT_BOOL: lua_pushboolean(L, v.b); break;
    case YT_INT: lua_pushinteger(L, (lua_Integer)v.i); break;
    case YT_FLOAT: lua_pushnumber(L, v.f); break;
    case YT_STRING: lua_pushlstring(L, n->text, n->text_len); break;
    }
}

/* Pushes node n; lines is the absolute index of the lines table. */
static void push_node(lua_State *L, const char *name, const YamlNode *n, int lines) {
    if (n->kind == YAML_SCALAR) { push_scalar(L, name, n); return; }
    luaL_checkstack(L, 8, "YAML nesting");
    bool map = n->kind == YAML_MAP;
    lua_createtable(L, map ? 0 : n->n_children, map ? n->n_children : 0);
    lua_createtable(L, map ? 0 : n->n_children + 1, map ? n->n_children : 0); /* its lines */
    lua_pushinteger(L, n->line);
    lua_rawseti(L, -2, 0);
    int i = 1;
    for (const YamlNode *c = n->child; c; c = c->next, i++) {
        if (map) lua_pushlstring(L, c->key, c->key_len);
        else lua_pushinteger(L, i);
        lua_pushvalue(L, -1);
        lua_pushinteger(L, map ? c->key_line : c->line);
        lua_rawset(L, -4);                  /* lines[key] = line */
        push_node(L, name, c, lines);
        lua_rawset(L, -4);                  /* t[key] = value (nil: a null, absent) */
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, lines);                   /* lines[t] = its lines */
}

int bind_push_yaml(lua_State *L, const char *name, char *src, size_t len) {
    YamlBox *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->root = NULL;
    luaL_setmetatable(L, YAML_MT);
    char err[300];
    VrStatus st = yaml_parse(src, len, NULL, &box->root, err, sizeof err);
    free(src);
    /* lua_error, not luaL_error: the message is the file's own line, not the caller's */
    if (st == VR_ENOMEM) return lua_pushfstring(L, "out of host memory reading '%s'", name), lua_error(L);
    if (st) return lua_pushfstring(L, "%s:%s", name, err + (err[0] == 'l' ? 5 : 0)), lua_error(L);
    if (box->root->kind != YAML_MAP)
        return lua_pushfstring(L, "%s:%d: the document is not a mapping of keys", name, box->root->line),
               lua_error(L);
    lua_newtable(L);
    int lines = lua_gettop(L);
    push_node(L, name, box->root, lines);
    lua_pushvalue(L, lines);
    yaml_tree_free(box->root);
    box->root = NULL;
    return 2;
}
