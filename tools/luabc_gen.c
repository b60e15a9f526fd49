/* luabc_gen.c: writes the C table of sim/bind/luabc.h: `luabc_gen ROOT OUT.c FILE.lua ...`
 * compiles each FILE (a path under ROOT) as text with the Lua library vrsim links, dumps it with
 * its debug information and writes it, with the text's length and hash, into OUT.c. Exit status
 * 0, or 1 with a message when a file cannot be read or compiled or OUT.c cannot be written. */
#include <lauxlib.h>
#include <lua.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bind/luabc.h"

typedef struct Buf { unsigned char *p; size_t n, cap; } Buf;

static int writer(lua_State *L, const void *p, size_t sz, void *ud) {
    (void)L;
    Buf *b = ud;
    if (b->n + sz > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->n + sz) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) return 1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, sz);
    b->n += sz;
    return 0;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    if (ferror(f)) { free(b); b = NULL; }
    fclose(f);
    *len = n;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: luabc_gen ROOT OUT.c FILE.lua ...\n");
        return 1;
    }
    const char *root = argv[1];
    size_t rl = strlen(root);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *out = fopen(tmp, "w");
    if (!out) { fprintf(stderr, "luabc_gen: cannot write %s\n", tmp); return 1; }
    fprintf(out, "/* made by tools/luabc_gen.c from the files under %s: do not edit */\n"
                 "#include \"bind/luabc.h\"\n\n", root);
    lua_State *L = luaL_newstate();
    int n = argc - 3;
    for (int i = 0; i < n; i++) {
        const char *path = argv[3 + i];
        size_t len;
        char *text = read_all(path, &len);
        if (!text) { fprintf(stderr, "luabc_gen: cannot read %s\n", path); return 1; }
        if (luaL_loadbufferx(L, text, len, "=?", "t")) {
            fprintf(stderr, "luabc_gen: %s: %s\n", path, lua_tostring(L, -1));
            return 1;
        }
        Buf b = {0};
        if (lua_dump(L, writer, &b, 0) || !b.n) { fprintf(stderr, "luabc_gen: cannot dump %s\n", path); return 1; }
        lua_pop(L, 1);
        fprintf(out, "/* %s */\n#define T%d_LEN %zu\n#define T%d_HASH %lluull\n", path, i, len, i,
                (unsigned long long)luabc_hash(text, len));
        fprintf(out, "static const unsigned char D%d[%zu] = {", i, b.n);
        for (size_t k = 0; k < b.n; k++) fprintf(out, "%s%u,", k % 32 ? "" : "\n", b.p[k]);
        fprintf(out, "\n};\n");
        free(b.p);
        free(text);
    }
    fprintf(out, "\nconst LuaBc VR_LUABC[] = {\n");
    for (int i = 0; i < n; i++) {
        const char *path = argv[3 + i];
        const char *rel = strncmp(path, root, rl) == 0 && path[rl] == '/' ? path + rl + 1 : path;
        size_t k = strlen(rel);
        if (k > 4 && strcmp(rel + k - 4, ".lua") == 0) k -= 4;
        fprintf(out, "    {\"%.*s\", T%d_LEN, T%d_HASH, sizeof D%d, D%d},\n", (int)k, rel, i, i, i, i);
    }
    fprintf(out, "    {NULL, 0, 0, 0, NULL}\n};\nconst int VR_N_LUABC = %d;\n", n);
    lua_close(L);
    if (fclose(out) != 0 || rename(tmp, argv[2]) != 0) {
        fprintf(stderr, "luabc_gen: cannot write %s\n", argv[2]);
        remove(tmp);
        return 1;
    }
    return 0;
}
