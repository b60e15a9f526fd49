/* tomlin.c: tomlc17's parser (third_party/tomlc17) behind the checks tomlin.h lists. */
#include "tomlin.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct TomlDoc {
    toml_result_t r;
};

/* tomlc17's messages read "(line N) what"; vrsim's read "line N: what". */
static void put_error(const char *msg, char *err, size_t errlen) {
    int line = 0, used = 0;
    if (sscanf(msg, "(line %d)%n", &line, &used) == 1 && used > 0) {
        const char *rest = msg + used;
        while (*rest == ' ') rest++;
        snprintf(err, errlen, "line %d: not valid TOML: %.160s", line, rest);
    } else {
        snprintf(err, errlen, "line 1: not valid TOML: %.160s", msg);
    }
}

/* The 1-based line of byte off of text. */
static int line_at(const char *text, size_t off) {
    int line = 1;
    for (size_t i = 0; i < off; i++) line += text[i] == '\n';
    return line;
}

typedef struct Walk {
    TomlLimits lim;
    long nodes;
    char *err;
    size_t errlen;
} Walk;

/* d and what it holds against the limits; depth is d's (the root's 1). tomlc17 bounds the
 * nesting it builds (30 levels of brackets and of braces, 10 dotted key parts), so this
 * recursion is bounded too. */
static VrStatus walk(Walk *w, const toml_datum_t *d, int depth) {
    if (++w->nodes > w->lim.max_nodes) {
        snprintf(w->err, w->errlen, "line %d: more than %ld values: refused", d->lineno, w->lim.max_nodes);
        return VR_EINVAL;
    }
    switch (d->type) {
    case TOML_TABLE:
    case TOML_ARRAY:
        if (depth > w->lim.max_depth) {
            snprintf(w->err, w->errlen, "line %d: nested deeper than %d levels: refused", d->lineno,
                     w->lim.max_depth);
            return VR_EINVAL;
        }
        if (d->type == TOML_TABLE) {
            for (int i = 0; i < d->u.tab.size; i++)
                if (walk(w, &d->u.tab.value[i], depth + 1)) return VR_EINVAL;
        } else {
            for (int i = 0; i < d->u.arr.size; i++)
                if (walk(w, &d->u.arr.elem[i], depth + 1)) return VR_EINVAL;
        }
        return VR_OK;
    case TOML_DATE:
    case TOML_TIME:
    case TOML_DATETIME:
    case TOML_DATETIMETZ:
        snprintf(w->err, w->errlen, "line %d: a date or time value, which no trainer config key takes",
                 d->lineno);
        return VR_EINVAL;
    case TOML_STRING:
    case TOML_INT64:
    case TOML_FP64:
    case TOML_BOOLEAN:
        return VR_OK;
    default:
        snprintf(w->err, w->errlen, "line %d: a value of no known TOML type", d->lineno);
        return VR_EINVAL;
    }
}

VrStatus toml_doc_parse(const char *text, size_t len, const TomlLimits *lim, TomlDoc **out, char *err,
                        size_t errlen) {
    *out = NULL;
    if (len >= INT_MAX) {
        snprintf(err, errlen, "line 1: larger than the TOML reader takes (%d bytes)", INT_MAX - 1);
        return VR_EINVAL;
    }
    const char *nul = memchr(text, 0, len);
    if (nul) {
        snprintf(err, errlen, "line %d: a NUL byte: not a text file", line_at(text, (size_t)(nul - text)));
        return VR_EINVAL;
    }
    TomlDoc *d = calloc(1, sizeof *d);
    if (!d) { snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    d->r = toml_parse(text, (int)len);
    if (!d->r.ok) {
        /* (tomlc17 says "out of memory" when an allocation failed) */
        VrStatus st = strstr(d->r.errmsg, "out of memory") ? VR_ENOMEM : VR_EINVAL;
        if (st == VR_ENOMEM) snprintf(err, errlen, "out of host memory");
        else put_error(d->r.errmsg, err, errlen);
        toml_doc_free(d);
        return st;
    }
    Walk w = {.err = err, .errlen = errlen};
    w.lim.max_depth = lim && lim->max_depth > 0 ? lim->max_depth : 64;
    w.lim.max_nodes = lim && lim->max_nodes > 0 ? lim->max_nodes : 100000;
    if (walk(&w, &d->r.toptab, 1)) {
        toml_doc_free(d);
        return VR_EINVAL;
    }
    *out = d;
    return VR_OK;
}

const toml_datum_t *toml_doc_root(const TomlDoc *d) { return &d->r.toptab; }

void toml_doc_free(TomlDoc *d) {
    if (!d) return;
    if (d->r.ok) toml_free(d->r);
    free(d);
}
