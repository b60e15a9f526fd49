/* luabc.h: vrsim's own Lua modules (lua/ ** / *.lua) precompiled at build time, so that a load
 * undumps them instead of parsing their text (tools/luabc_gen.c writes the table; sim/bind/bind.c
 * reads it).
 *
 * An entry is used only for the file it was made from: the module's text read at run time must
 * have the entry's length and hash (luabc_hash), otherwise the text is compiled as before. So a
 * module edited after the build runs as edited, and a scenario's own files are never looked up
 * (only lua/'s). The dump keeps its debug information (lines, local names); its main function's
 * source name is the placeholder "=?", which the loader replaces by the chunk name the text
 * would have had, so that messages and tracebacks read the same. */
#ifndef VR_LUABC_H
#define VR_LUABC_H

#include <stddef.h>
#include <stdint.h>

typedef struct LuaBc {
    const char *rel;            /* the module's path under lua/ without ".lua" ("vrsim/nn") */
    size_t text_len;            /* bytes of the text it was compiled from */
    uint64_t text_hash;         /* luabc_hash of that text */
    size_t len;                 /* bytes of the dump */
    const unsigned char *dump;  /* lua_dump of the compiled text (strip = 0) */
} LuaBc;

extern const LuaBc VR_LUABC[];
extern const int VR_N_LUABC;

/* FNV-1a, 64 bits, of the n bytes at s. */
static inline uint64_t luabc_hash(const char *s, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

#endif
