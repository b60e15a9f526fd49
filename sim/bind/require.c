/* require.c: the sandboxed require and load of a scenario's state: modules from lua/ (or their
 * bytecode built into vrsim) and the scenario's folder only, text chunks only; and the checked
 * reads of every file a scenario names. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../infile.h"
#include "bind_int.h"
#include "luabc.h"

/* Reads a regular file of at most max bytes into a new buffer (*out, *len; the caller frees),
 * the checked way every reader of vrsim opens its files (infile.h): a FIFO or device cannot
 * stall vrsim. */
ReadStatus read_file(const char *path, size_t max, char **out, size_t *len) {
    switch (infile_read(path, max, out, len)) {
    case INFILE_OK: return RF_OK;
    case INFILE_MISSING: return RF_MISSING;
    case INFILE_NOTFILE: return RF_NOTFILE;
    case INFILE_TOOBIG: return RF_TOOBIG;
    case INFILE_NOMEM: return RF_NOMEM;
    case INFILE_IO: return RF_IO;
    }
    return RF_IO;
}

/* True when real (a resolved path) is root or lies under it. */
bool under(const char *real, const char *root) {
    size_t n = strlen(root);
    if (!n) return false;
    if (n == 1 && root[0] == '/') return true;
    return strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == 0);
}

/* read_file for a file a scenario names: path resolved with realpath (every symlink followed)
 * must lie under lua/ or the scenario's folder. RF_MISSING when there is no such file. */
ReadStatus read_inside(const Sandbox *sb, const char *path, char **out, size_t *len) {
    *out = NULL;
    char real[PATH_MAX];
    if (!realpath(path, real)) return RF_MISSING;
    if (!under(real, sb->lua_real) && !under(real, sb->scn_real)) return RF_OUTSIDE;
    return read_file(real, MAX_INPUT_BYTES, out, len);
}

/* Raises the error for a file `name` (a module or config) that could not be read. */
void raise_read(lua_State *L, const char *what, const char *name, ReadStatus rs) {
    switch (rs) {
    case RF_OUTSIDE:
        luaL_error(L, "%s '%s' resolves to a file outside lua/ and the scenario's folder (a "
                   "symlink?): refused", what, name);
        break;
    case RF_TOOBIG:
        luaL_error(L, "%s '%s' is larger than %d MiB: refused", what, name,
                   (int)(MAX_INPUT_BYTES >> 20));
        break;
    case RF_NOTFILE: luaL_error(L, "%s '%s' is not a regular file", what, name); break;
    case RF_NOMEM: luaL_error(L, "out of host memory reading %s '%s'", what, name); break;
    case RF_IO: luaL_error(L, "%s '%s' could not be read", what, name); break;
    default: luaL_error(L, "%s '%s' not found next to the scenario or in lua/", what, name); break;
    }
}

/* require(name): "a.b" -> <lua_dir>/a/b.lua or <scenario dir>/a/b.lua; text chunks only. The
 * planner's state (vrsim.planner set in the registry) searches lua/ alone: a scenario's folder
 * cannot put code into the planner. */
/* The precompiled dump of lua/'s module rel (its path without ".lua") whose text is the len
 * bytes at text, or NULL when there is none for that text (luabc.h). */
static const LuaBc *luabc_find(const char *rel, const char *text, size_t len) {
#ifdef VR_NO_LUABC
    (void)rel; (void)text; (void)len;
    return NULL;
#else
    for (int i = 0; i < VR_N_LUABC; i++) {
        const LuaBc *e = &VR_LUABC[i];
        if (strcmp(e->rel, rel) == 0)
            return e->text_len == len && e->text_hash == luabc_hash(text, len) ? e : NULL;
    }
    return NULL;
#endif
}

/* The pieces of a dump with its main function's source name replaced (load_dump), read in turn. */
typedef struct DumpReader {
    const char *piece[4];
    size_t len[4];
    int next;
} DumpReader;

static const char *dump_read(lua_State *L, void *ud, size_t *size) {
    (void)L;
    DumpReader *r = ud;
    while (r->next < 4 && !r->len[r->next]) r->next++;
    if (r->next == 4) {
        *size = 0;
        return NULL;
    }
    *size = r->len[r->next];
    return r->piece[r->next++];
}

/* Loads e's dump as the function that compiling its text under chunk name chunk gives: the
 * dump as it is but for its main function's source name, which becomes chunk (a nested
 * function's source is "its parent's" in a dump, so they follow). In Lua 5.4's format (ldump.c:
 * dumpHeader, then the main function's upvalue count, then dumpFunction) that name comes first
 * in the function, as a size (dumpSize: 7-bit groups, most significant first, the last marked
 * by 0x80; 0 for no name, else its length + 1) and its bytes. Returns lua_load's status, with
 * the message on the stack on failure. */
static int load_dump(lua_State *L, const LuaBc *e, const char *chunk) {
    enum { HEADER = 4 + 1 + 1 + 6 + 1 + 1 + 1 + sizeof(lua_Integer) + sizeof(lua_Number) + 1 };
    const unsigned char *d = e->dump;
    size_t at = HEADER, x = 0;
    bool ended = false;
    while (!ended && at < e->len && x < ((size_t)1 << 40)) {
        unsigned char b = d[at++];
        x = (x << 7) | (b & 0x7f);
        ended = b & 0x80;
    }
    size_t old = x ? x - 1 : 0;
    if (!ended || old > e->len - at) {
        lua_pushfstring(L, "%s: the precompiled module is damaged", chunk + 1);
        return LUA_ERRSYNTAX;
    }
    size_t n = strlen(chunk), v = n + 1, k = 16;
    unsigned char size[16];
    do {
        size[--k] = v & 0x7f;
        v >>= 7;
    } while (v);
    size[15] |= 0x80;
    DumpReader r = {.piece = {(const char *)d, (const char *)size + k, chunk, (const char *)d + at + old},
                    .len = {HEADER, 16 - k, n, e->len - at - old}};
    return lua_load(L, dump_read, &r, chunk, "b");
}

int bind_require(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, "vrsim.loaded");
    lua_getfield(L, -1, name);
    if (!lua_isnil(L, -1)) return 1;
    lua_pop(L, 1);
    if (strcmp(name, "vrsim.core") == 0) {
        bind_open_core(L);
    } else {
        if (!name[0] || strlen(name) > 200)
            luaL_error(L, "require '%s': not a module name", name);
        for (const char *p = name; *p; p++)
            if (!(*p == '.' || *p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9')))
                luaL_error(L, "require '%s': module names are letters, digits, '_' and '.'", name);
        Sandbox *sb;
        lua_getallocf(L, (void **)&sb);
        lua_getfield(L, LUA_REGISTRYINDEX, "vrsim.planner");
        bool planner = lua_toboolean(L, -1);
        lua_pop(L, 1);
        char rel[256], path[PATH_MAX + 300];
        snprintf(rel, sizeof rel, "%s", name);
        for (char *p = rel; *p; p++) if (*p == '.') *p = '/';
        const char *dirs[2] = {sb->lua_dir, planner ? "" : sb->scn_dir};
        char *src = NULL;
        size_t len = 0;
        ReadStatus rs = RF_MISSING;
        int i_found = -1;
        for (int i = 0; i < 2 && rs == RF_MISSING; i++) {
            if (!dirs[i][0]) continue;
            snprintf(path, sizeof path, "%s/%s.lua", dirs[i], rel);
            rs = read_inside(sb, path, &src, &len);
            i_found = i;
        }
        if (rs == RF_MISSING)
            luaL_error(L, "module '%s' not found in lua/%s", name, planner ? "" : " or the scenario's folder");
        if (rs != RF_OK) raise_read(L, "module", name, rs);
        note_read(sb, name, src, len); /* by module name: the same whichever path vrsim runs from */
        char chunk[sizeof path + 1];
        snprintf(chunk, sizeof chunk, "@%s", path);
        /* one of lua/'s own modules as it was built: its dump; otherwise (a scenario's module,
         * or a module edited since the build) the text */
        const LuaBc *bc = i_found == 0 ? luabc_find(rel, src, len) : NULL;
        int rc = bc ? load_dump(L, bc, chunk) : luaL_loadbufferx(L, src, len, chunk, "t");
        free(src);
        if (rc) lua_error(L);
        lua_pushstring(L, name);
        lua_call(L, 1, 1);
        if (lua_isnil(L, -1)) { lua_pop(L, 1); lua_pushboolean(L, 1); }
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
    return 1;
}

/* load(chunk, name, mode, env) limited to text chunks */
static int l_load_text(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "=(load)");
    if (luaL_loadbufferx(L, s, len, name, "t")) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    if (!lua_isnoneornil(L, 4)) {
        lua_pushvalue(L, 4);
        if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
    }
    return 1;
}

/* Opens the libraries a scenario may use (all of them with unsafe) and vrsim's require. planner
 * marks the planner's own state, whose require searches lua/ only. */
void open_sandbox(lua_State *L, bool unsafe, bool planner) {
    if (unsafe) {
        luaL_openlibs(L);
    } else {
        static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base}, {LUA_TABLIBNAME, luaopen_table},
                                        {LUA_STRLIBNAME, luaopen_string},
                                        {LUA_MATHLIBNAME, luaopen_math},
                                        {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};
        for (const luaL_Reg *l = libs; l->func; l++) {
            luaL_requiref(L, l->name, l->func, 1);
            lua_pop(L, 1);
        }
        lua_pushnil(L); lua_setglobal(L, "dofile");
        lua_pushnil(L); lua_setglobal(L, "loadfile");
        lua_pushcfunction(L, l_load_text); lua_setglobal(L, "load");
    }
    /* xpcall's message handler runs where the error was raised, and for the instruction
     * limit's error that is inside the count hook, where Lua runs no hook: a handler that loops
     * would be beyond the limit. Here the handler runs once the failed call has returned, with
     * the hook live (what it loses is the failing frame, which only the debug library, absent
     * from the sandbox, could have looked at). */
    static const char XPCALL[] =
        "local pcall, pack, unpack = pcall, table.pack, table.unpack\n"
        "return function(f, h, ...)\n"
        "  local r = pack(pcall(f, ...))\n"
        "  if r[1] then return unpack(r, 1, r.n) end\n"
        "  local ok, m = pcall(h, r[2])\n"
        "  return false, m\n"
        "end\n";
    if (luaL_loadbufferx(L, XPCALL, sizeof XPCALL - 1, "=xpcall", "t") == LUA_OK &&
        lua_pcall(L, 0, 1, 0) == LUA_OK)
        lua_setglobal(L, "xpcall");
    else
        lua_pop(L, 1);
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "vrsim.loaded");
    lua_pushboolean(L, planner);
    lua_setfield(L, LUA_REGISTRYINDEX, "vrsim.planner");
    lua_pushcfunction(L, bind_require);
    lua_setglobal(L, "require");
}
