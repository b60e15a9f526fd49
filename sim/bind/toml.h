/* toml.h: TOML documents (sim/tomlin.h) as Lua tables, for vrsim.core.read_toml. */
#ifndef VRSIM_BIND_TOML_H
#define VRSIM_BIND_TOML_H

#include <stddef.h>

typedef struct lua_State lua_State;

/* Registers the metatable that owns a parsed document while it is pushed (call once per state,
 * before bind_push_toml). */
void bind_toml_open(lua_State *L);

/* Parses the len bytes at src (NUL-terminated at src[len]; consumed: freed here, whatever
 * happens) and pushes two values, as bind_push_yaml does: the document (tables keyed by each
 * key, arrays from 1, integers, floats, booleans and strings as Lua's) and its lines (each of
 * the document's tables to a table of its keys or indices and the 1-based line of each, [0] the
 * line of the table itself). name names the file in errors, raised as "NAME:LINE: what". */
int bind_push_toml(lua_State *L, const char *name, char *src, size_t len);

#endif
