/* catalog.c: catalog_read (sim/catalog.h): a data module of lua/hw/ copied out of a fresh
 * sandboxed state, entry by entry. */
#include <lauxlib.h>
#include <lua.h>

#include <stdlib.h>
#include <string.h>

#include "../catalog.h"
#include "bind_int.h"

typedef struct ReadCtx { const char *module; Catalog *cat; } ReadCtx;

static char *dup_or_raise(lua_State *L, const char *s) {
    char *d = strdup(s);
    if (!d) luaL_error(L, "out of host memory");
    return d;
}

/* Copies the scalar fields of the entry table on top of the stack into e. */
static void read_entry(lua_State *L, CatalogEntry *e) {
    int n = 0;
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) n++;
    if (!(e->fields = calloc((size_t)n + 1, sizeof *e->fields))) luaL_error(L, "out of host memory");
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING) continue;
        CatalogField f = {0};
        int t = lua_type(L, -1);
        if (t == LUA_TNUMBER) f.kind = CATALOG_NUMBER, f.num = lua_tonumber(L, -1);
        else if (t == LUA_TBOOLEAN) f.kind = CATALOG_BOOL, f.b = lua_toboolean(L, -1);
        else if (t == LUA_TSTRING) f.kind = CATALOG_STRING;
        else continue; /* a nested table: not copied */
        /* the name first: a field is counted only once both its strings are held */
        f.name = dup_or_raise(L, lua_tostring(L, -2));
        if (f.kind == CATALOG_STRING && !(f.str = strdup(lua_tostring(L, -1)))) {
            free(f.name);
            luaL_error(L, "out of host memory");
        }
        e->fields[e->n_fields++] = f;
    }
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const CatalogEntry *)a)->key, ((const CatalogEntry *)b)->key);
}

static int read_protected(lua_State *L) {
    ReadCtx *c = lua_touserdata(L, 1);
    bind_push_module(L, c->module);
    if (!lua_istable(L, -1)) luaL_error(L, "%s: returns a %s, not a table", c->module, luaL_typename(L, -1));
    int n = 0;
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) n++;
    Catalog *cat = c->cat;
    if (!(cat->entries = calloc((size_t)n + 1, sizeof *cat->entries))) luaL_error(L, "out of host memory");
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING || !lua_istable(L, -1)) {
            const char *type = luaL_typename(L, -1);
            luaL_error(L, "%s: every entry must be a table under a name (%s is a %s)", c->module,
                       luaL_tolstring(L, -2, NULL), type);
        }
        CatalogEntry *e = &cat->entries[cat->n++];
        e->key = dup_or_raise(L, lua_tostring(L, -2));
        read_entry(L, e);
    }
    qsort(cat->entries, (size_t)cat->n, sizeof *cat->entries, cmp_entry);
    return 0;
}

VrStatus catalog_read(const char *module, Catalog **out, char *err, size_t errlen) {
    *out = NULL;
    Catalog *cat = calloc(1, sizeof *cat);
    if (!cat) {
        snprintf(err, errlen, "out of host memory");
        return VR_ENOMEM;
    }
    ReadCtx c = {.module = module, .cat = cat};
    VrStatus st = bind_run_fresh(module, read_protected, &c, err, errlen);
    if (st) {
        catalog_free(cat);
        return st;
    }
    *out = cat;
    return VR_OK;
}

void catalog_free(Catalog *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        CatalogEntry *e = &c->entries[i];
        for (int k = 0; k < e->n_fields; k++) {
            free(e->fields[k].name);
            free(e->fields[k].str);
        }
        free(e->fields);
        free(e->key);
    }
    free(c->entries);
    free(c);
}

const CatalogEntry *catalog_entry(const Catalog *c, const char *key) {
    CatalogEntry k = {.key = (char *)key};
    return c && c->n ? bsearch(&k, c->entries, (size_t)c->n, sizeof k, cmp_entry) : NULL;
}

const CatalogField *catalog_field(const CatalogEntry *e, const char *name) {
    for (int k = 0; e && k < e->n_fields; k++)
        if (strcmp(e->fields[k].name, name) == 0) return &e->fields[k];
    return NULL;
}
