/* luaget.c: reading a Lua value, or a table's field, as a C number, flag or string, with an
 * error that names the field when it is something else: what every reader of sim/bind/ uses. */
#include <lauxlib.h>
#include <lua.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bind_int.h"

/* The value on top of the stack (popped) as integer field k (def when nil): an integer, or a
 * float with an integral value, within int's range; anything else raises naming the field. */
lua_Integer top_int(lua_State *L, const char *k, lua_Integer def) {
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
double top_num(lua_State *L, const char *k, double def) {
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

bool top_bool(lua_State *L, bool def) {
    bool v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Copies the value on top (popped; a string) into buf; returns buf or NULL when nil. A string
 * is copied as it is (the planner's strings have no __tostring, so this is what luaL_tolstring
 * would give, without its metatable look-up); any other value as luaL_tolstring makes it. */
const char *top_str(lua_State *L, char *buf, size_t n) {
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
lua_Integer field_int(lua_State *L, int t, const char *k, lua_Integer def) {
    lua_getfield(L, t, k);
    return top_int(L, k, def);
}
double field_num(lua_State *L, int t, const char *k, double def) {
    lua_getfield(L, t, k);
    return top_num(L, k, def);
}
bool field_bool(lua_State *L, int t, const char *k, bool def) {
    lua_getfield(L, t, k);
    return top_bool(L, def);
}
const char *field_str(lua_State *L, int t, const char *k, char *buf, size_t n) {
    lua_getfield(L, t, k);
    return top_str(L, buf, n);
}

DType parse_dtype(lua_State *L, const char *s) {
    DType d;
    if (dtype_parse(s, &d)) luaL_error(L, "unknown dtype '%s'", s);
    return d;
}
