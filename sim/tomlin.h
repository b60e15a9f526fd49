/* tomlin.h: the TOML vrsim reads from users (torchtitan's job configs), parsed by tomlc17
 * (third_party/tomlc17, vendored: Debian packages no C TOML library) and then held to what a
 * trainer config holds:
 *   - TOML's own rules are tomlc17's: a key or table defined twice, a value of no TOML type, a
 *     bracket nesting deeper than its 30 levels are errors with their line;
 *   - no NUL byte in the text (tomlc17 would stop reading there and the rest of the file would
 *     be silently left out);
 *   - no date or time values: no trainer key takes one, so one is a mistake said by its line;
 *   - limits on nesting depth and on the number of values (TomlLimits), checked on the parsed
 *     tree before any reader walks it.
 * Every value keeps its 1-based line (toml_datum_t.lineno), so a reader can say "file:line". */
#ifndef VR_TOMLIN_H
#define VR_TOMLIN_H

#include <stddef.h>

#include "tomlc17.h"
#include "vr.h"

typedef struct TomlLimits {
    int max_depth;             /* nested tables and arrays, the root table counted as 1 (0: 64) */
    long max_nodes;            /* every value counted, tables and arrays too (0: 100000) */
} TomlLimits;

typedef struct TomlDoc TomlDoc;

/* Parses the len bytes at text (NUL-terminated at text[len], as tomlc17 wants). On VR_OK *out holds the document (toml_doc_free frees it). On
 * VR_EINVAL err holds what is wrong with its line, without a file name ("line 6: table defined
 * more than once"). VR_ENOMEM when host memory ran out. lim may be NULL (the defaults). */
VrStatus toml_doc_parse(const char *text, size_t len, const TomlLimits *lim, TomlDoc **out /* OUT */,
                        char *err, size_t errlen);

/* The document's top-level table (valid until toml_doc_free). */
const toml_datum_t *toml_doc_root(const TomlDoc *d);

void toml_doc_free(TomlDoc *d); /* NULL is a no-op */

#endif
