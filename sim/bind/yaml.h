/* yaml.h: YAML documents (sim/yamlin.h) as Lua tables, for vrsim.core.read_yaml. */
#ifndef VRSIM_BIND_YAML_H
#define VRSIM_BIND_YAML_H

#include <stddef.h>

typedef struct lua_State lua_State;

/* Registers the metatable that owns a parsed tree while it is pushed (call once per state,
 * before bind_push_yaml). */
void bind_yaml_open(lua_State *L);

/* Parses the len bytes at src (NUL-terminated at src[len]; consumed: freed here, whatever
 * happens) and pushes two values: the document, and its lines. The document's mappings are
 * tables keyed by each key's text, sequences arrays from 1, scalars typed as yamlin.h says (a
 * null is nil: its key is absent from the table). lines maps each of the document's tables to a
 * table of its keys (indices for a sequence) and the 1-based line of each, a null's key
 * included, with [0] the line of the table itself. name names the file in errors, which are
 * raised as "NAME:LINE: what". The document must be a mapping. */
int bind_push_yaml(lua_State *L, const char *name, char *src, size_t len);

#endif
