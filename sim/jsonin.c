/* jsonin.c: cJSON's parse held to the rules of jsonin.h. */
#include "jsonin.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1-based line of position p in text */
static int line_at(const char *text, const char *p) {
    int line = 1;
    for (const char *q = text; q < p; q++) line += *q == '\n';
    return line;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The first \u0000 escape (or raw NUL byte) inside a string of valid JSON text, or NULL. In
 * valid JSON a backslash only ever starts an escape inside a string, so a scan that skips each
 * escape whole cannot mistake an escaped backslash followed by "u0000" for one. */
static const char *nul_escape(const char *text, size_t len) {
    const char *end = text + len;
    bool in_string = false;
    for (const char *p = text; p < end; p++) {
        if (!in_string) {
            in_string = *p == '"';
        } else if (*p == 0) {
            return p; /* a raw NUL byte: cJSON takes it into the string, which it then ends */
        } else if (*p == '"') {
            in_string = false;
        } else if (*p == '\\' && p + 1 < end) {
            if (p[1] == 'u' && end - p >= 6 && memcmp(p + 2, "0000", 4) == 0) return p;
            p++; /* the escaped character (a 'u' escape's hex digits are never '"' or '\\') */
        }
    }
    return NULL;
}

static int cmp_key(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string, y->string);
}

/* Writes the path of key k under prefix into buf ("zero_optimization.stage"). */
static void key_path(char *buf, size_t n, const char *prefix, const char *k) {
    snprintf(buf, n, "%s%s%s", prefix, prefix[0] ? "." : "", k);
}

/* VR_EINVAL with err naming the first key that appears twice in an object under v (prefix: the
 * path to v), VR_ENOMEM, or VR_OK. Keys are sorted (a copy of the child list), so an object of n
 * keys costs n log n, whatever the input. cJSON's parse already bounds the depth (1000). */
static VrStatus dup_keys(const cJSON *v, const char *prefix, char *err, size_t errlen) {
    if (cJSON_IsObject(v)) {
        size_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next) n++;
        if (n > 1) {
            const cJSON **ks = malloc(n * sizeof *ks);
            if (!ks) return VR_ENOMEM;
            size_t i = 0;
            for (const cJSON *c = v->child; c; c = c->next) ks[i++] = c;
            qsort(ks, n, sizeof *ks, cmp_key);
            for (i = 1; i < n; i++)
                if (strcmp(ks[i - 1]->string, ks[i]->string) == 0) {
                    char path[256];
                    key_path(path, sizeof path, prefix, ks[i]->string);
                    snprintf(err, errlen, "key '%s' appears twice (give each key once)", path);
                    free(ks);
                    return VR_EINVAL;
                }
            free(ks);
        }
    }
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        int i = 0;
        for (const cJSON *c = v->child; c; c = c->next, i++) {
            char path[256];
            if (cJSON_IsObject(v)) key_path(path, sizeof path, prefix, c->string);
            else snprintf(path, sizeof path, "%s[%d]", prefix, i);
            VrStatus st = dup_keys(c, path, err, errlen);
            if (st != VR_OK) return st;
        }
    }
    return VR_OK;
}

VrStatus jsonin_check(const char *text, size_t len, const cJSON *v, const char *end, char *err,
                      size_t errlen) {
    const char *p = end && end >= text && end <= text + len ? end : text + len;
    while (p < text + len && blank(*p)) p++;
    if (p < text + len) {
        snprintf(err, errlen, "trailing data after the JSON value (line %d)", line_at(text, p));
        return VR_EINVAL;
    }
    const char *nul = nul_escape(text, len);
    if (nul) {
        snprintf(err, errlen, "a string holds \\u0000, a NUL character (line %d)",
                 line_at(text, nul));
        return VR_EINVAL;
    }
    VrStatus st = dup_keys(v, "", err, errlen);
    if (st == VR_ENOMEM) snprintf(err, errlen, "out of host memory");
    return st;
}

VrStatus jsonin_parse(const char *text, size_t len, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!v) {
        /* cJSON also fails without memory; it cannot say which, and a text this reader was
         * given fits in memory many times over */
        snprintf(err, errlen, "not valid JSON (line %d)",
                 line_at(text, end && end >= text && end <= text + len ? end : text));
        return VR_EINVAL;
    }
    VrStatus st = jsonin_check(text, len, v, end, err, errlen);
    if (st != VR_OK) {
        cJSON_Delete(v);
        return st;
    }
    *out = v;
    return VR_OK;
}
