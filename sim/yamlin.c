/* yamlin.c: libyaml's event parser into a YamlNode tree, checked as yamlin.h says, and PyYAML's
 * SafeLoader rules for typing plain scalars (yaml/resolver.py's implicit resolvers and
 * yaml/constructor.py's construct_yaml_int / construct_yaml_float).
 *
 * The tree is built from events (never libyaml's document loader, which expands nothing but
 * would hold aliases), so the depth limit is checked as each collection opens: libyaml's own
 * stacks never grow past it. */
#include "yamlin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#define TAG_PREFIX "tag:yaml.org,2002:"

void yaml_tree_free(YamlNode *n) {
    /* siblings in a loop, children by recursion: depth is bounded by YamlLimits.max_depth */
    while (n) {
        YamlNode *next = n->next;
        yaml_tree_free(n->child);
        free(n->key);
        free(n->text);
        free(n);
        n = next;
    }
}

/* One open collection while its events arrive. */
typedef struct Open {
    YamlNode *node;
    YamlNode *last;            /* its last child, for appending */
    char *key;                 /* a mapping's key waiting for its value (owned), else NULL */
    size_t key_len;
    int key_line;
} Open;

typedef struct Builder {
    Open *stack;
    int depth, cap;
    long nodes;
    YamlLimits lim;
    YamlNode *root;
    char *err;
    size_t errlen;
} Builder;

static int line_of(const yaml_event_t *e) { return (int)e->start_mark.line + 1; }

/* The core type an explicit tag names ("str", ...) into *out; NULL for no tag. VR_EINVAL for a
 * tag that names anything else (!!python/object, a local !tag). */
static VrStatus core_tag(const unsigned char *tag, bool collection, const char **out) {
    static const char *const scalar[] = {"str", "int", "float", "bool", "null"};
    static const char *const coll[] = {"map", "seq"};
    *out = NULL;
    if (!tag || strcmp((const char *)tag, "!") == 0) return VR_OK;
    const char *t = (const char *)tag;
    if (strncmp(t, TAG_PREFIX, strlen(TAG_PREFIX)) != 0) return VR_EINVAL;
    t += strlen(TAG_PREFIX);
    const char *const *names = collection ? coll : scalar;
    size_t n = collection ? 2 : 5;
    for (size_t i = 0; i < n; i++)
        if (strcmp(t, names[i]) == 0) { *out = names[i]; return VR_OK; }
    return VR_EINVAL;
}

static int cmp_keys(const void *a, const void *b) {
    const YamlNode *x = *(YamlNode *const *)a, *y = *(YamlNode *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    return (x->key_line > y->key_line) - (x->key_line < y->key_line);
}

/* A closed mapping's keys, sorted, side by side: a duplicate is an error naming both lines. */
static VrStatus check_duplicates(Builder *b, const YamlNode *map) {
    if (map->n_children < 2) return VR_OK;
    YamlNode **v = malloc(sizeof *v * (size_t)map->n_children);
    if (!v) return VR_ENOMEM;
    int n = 0;
    for (YamlNode *c = map->child; c; c = c->next) v[n++] = c;
    qsort(v, (size_t)n, sizeof *v, cmp_keys);
    for (int i = 1; i < n; i++) {
        if (v[i]->key_len == v[i - 1]->key_len && memcmp(v[i]->key, v[i - 1]->key, v[i]->key_len) == 0) {
            snprintf(b->err, b->errlen, "line %d: key '%.80s' appears twice (first on line %d)",
                     v[i]->key_line, v[i]->key, v[i - 1]->key_line);
            free(v);
            return VR_EINVAL;
        }
    }
    free(v);
    return VR_OK;
}

/* Attaches a new node to the open collection on top (or makes it the root); a mapping's key
 * passes into it. */
static void attach(Builder *b, YamlNode *n) {
    if (b->depth == 0) { b->root = n; return; }
    Open *o = &b->stack[b->depth - 1];
    if (o->node->kind == YAML_MAP) {
        n->key = o->key;
        n->key_len = o->key_len;
        n->key_line = o->key_line;
        o->key = NULL;
    }
    if (o->last) o->last->next = n;
    else o->node->child = n;
    o->last = n;
    o->node->n_children++;
}

static YamlNode *new_node(Builder *b, YamlKind kind, int line) {
    YamlNode *n = calloc(1, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = line;
        b->nodes++;
    }
    return n;
}

/* One event into the tree. */
static VrStatus on_event(Builder *b, const yaml_event_t *e) {
    int line = line_of(e);
    bool want_key = b->depth > 0 && b->stack[b->depth - 1].node->kind == YAML_MAP &&
                    !b->stack[b->depth - 1].key;
    switch (e->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (b->root) {
            snprintf(b->err, b->errlen, "line %d: a second YAML document ('---'): one per file", line);
            return VR_EINVAL;
        }
        return VR_OK;
    case YAML_ALIAS_EVENT:
        snprintf(b->err, b->errlen, "line %d: an alias (*%.60s): aliases and merge keys are not "
                 "read (one can repeat a subtree without limit); write the values out", line,
                 (const char *)e->data.alias.anchor);
        return VR_EINVAL;
    case YAML_SCALAR_EVENT: {
        if (b->nodes >= b->lim.max_nodes) {
            snprintf(b->err, b->errlen, "line %d: more than %ld nodes: refused", line, b->lim.max_nodes);
            return VR_EINVAL;
        }
        const char *tag;
        if (core_tag(e->data.scalar.tag, false, &tag)) {
            snprintf(b->err, b->errlen, "line %d: tag '%.80s' is not one of YAML's core types "
                     "(!!str, !!int, !!float, !!bool, !!null)", line, (const char *)e->data.scalar.tag);
            return VR_EINVAL;
        }
        size_t len = e->data.scalar.length;
        char *text = malloc(len + 1);
        if (!text) return VR_ENOMEM;
        memcpy(text, e->data.scalar.value, len);
        text[len] = 0;
        bool plain = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        if (want_key) {
            if (plain && !tag && len == 2 && memcmp(text, "<<", 2) == 0) {
                free(text);
                snprintf(b->err, b->errlen, "line %d: a merge key (<<): aliases and merge keys are "
                         "not read; write the values out", line);
                return VR_EINVAL;
            }
            Open *o = &b->stack[b->depth - 1];
            o->key = text;
            o->key_len = len;
            o->key_line = line;
            b->nodes++;
            return VR_OK;
        }
        YamlNode *n = new_node(b, YAML_SCALAR, line);
        if (!n) { free(text); return VR_ENOMEM; }
        n->text = text;
        n->text_len = len;
        n->quoted = !plain;
        n->tag = tag;
        attach(b, n);
        return VR_OK;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool seq = e->type == YAML_SEQUENCE_START_EVENT;
        if (want_key) {
            snprintf(b->err, b->errlen, "line %d: a key that is a %s: keys are scalars", line,
                     seq ? "sequence" : "mapping");
            return VR_EINVAL;
        }
        if (b->depth >= b->lim.max_depth) {
            snprintf(b->err, b->errlen, "line %d: nested deeper than %d levels: refused", line,
                     b->lim.max_depth);
            return VR_EINVAL;
        }
        if (b->nodes >= b->lim.max_nodes) {
            snprintf(b->err, b->errlen, "line %d: more than %ld nodes: refused", line, b->lim.max_nodes);
            return VR_EINVAL;
        }
        const char *tag;
        const yaml_char_t *t = seq ? e->data.sequence_start.tag : e->data.mapping_start.tag;
        if (core_tag(t, true, &tag) || (tag && strcmp(tag, seq ? "seq" : "map") != 0)) {
            snprintf(b->err, b->errlen, "line %d: tag '%.80s' is not a core type of this node", line,
                     (const char *)t);
            return VR_EINVAL;
        }
        if (b->depth == b->cap) {
            int cap = b->cap ? b->cap * 2 : 16;
            Open *s = realloc(b->stack, sizeof *s * (size_t)cap);
            if (!s) return VR_ENOMEM;
            b->stack = s;
            b->cap = cap;
        }
        YamlNode *n = new_node(b, seq ? YAML_SEQ : YAML_MAP, line);
        if (!n) return VR_ENOMEM;
        attach(b, n);
        b->stack[b->depth++] = (Open){.node = n};
        return VR_OK;
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        Open *o = &b->stack[--b->depth];
        free(o->key); /* none is left by a well-formed stream; libyaml checks that */
        o->key = NULL;
        return o->node->kind == YAML_MAP ? check_duplicates(b, o->node) : VR_OK;
    }
    default:
        return VR_OK;
    }
}

VrStatus yaml_parse(const char *text, size_t len, const YamlLimits *lim, YamlNode **out,
                    char *err, size_t errlen) {
    *out = NULL;
    Builder b = {.err = err, .errlen = errlen};
    b.lim.max_depth = lim && lim->max_depth > 0 ? lim->max_depth : 64;
    b.lim.max_nodes = lim && lim->max_nodes > 0 ? lim->max_nodes : 100000;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) { snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    VrStatus st = VR_OK;
    for (bool done = false; !done && !st;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) {
            if (p.error == YAML_MEMORY_ERROR) {
                snprintf(err, errlen, "out of host memory");
                st = VR_ENOMEM;
            } else {
                snprintf(err, errlen, "line %d: not valid YAML: %.120s%s%.80s",
                         (int)p.problem_mark.line + 1, p.problem ? p.problem : "?",
                         p.context ? " " : "", p.context ? p.context : "");
                st = VR_EINVAL;
            }
            break;
        }
        done = e.type == YAML_STREAM_END_EVENT;
        st = on_event(&b, &e);
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&p);
    for (int i = 0; i < b.depth; i++) free(b.stack[i].key);
    free(b.stack);
    if (st == VR_ENOMEM) snprintf(err, errlen, "out of host memory");
    if (!st && !b.root) {
        snprintf(err, errlen, "line 1: an empty document");
        st = VR_EINVAL;
    }
    if (st) {
        yaml_tree_free(b.root);
        return st;
    }
    *out = b.root;
    return VR_OK;
}

/* ---- PyYAML's implicit types ---------------------------------------------------------------- */

static bool one_of(const char *s, const char *const *words) {
    for (; *words; words++) if (strcmp(s, *words) == 0) return true;
    return false;
}

static bool all_in(const char *s, const char *set) {
    if (!*s) return false;
    for (; *s; s++) if (!strchr(set, *s)) return false;
    return true;
}

/* [-+]?[1-9][0-9_]*(:[0-5]?[0-9])+ after the sign, the base-60 form (resolver.py) */
static bool base60(const char *s, bool frac) {
    if (*s < '1' || *s > '9') return false;
    while (*s && strchr("0123456789_", *s)) s++;
    int groups = 0;
    while (*s == ':') {
        s++;
        if (*s >= '0' && *s <= '5' && s[1] >= '0' && s[1] <= '9') s += 2;
        else if (*s >= '0' && *s <= '9') s++;
        else return false;
        groups++;
    }
    if (!groups) return false;
    if (frac) {
        if (*s != '.') return false;
        s++;
        while (*s && strchr("0123456789_", *s)) s++;
    }
    return *s == 0;
}

/* The value of base-60 text (digits, '_' and ':' after the sign; the last group may hold a
 * fraction), as construct_yaml_int/float sum it. */
static double base60_value(const char *s) {
    double v = 0;
    while (*s) {
        char part[64];
        size_t n = 0;
        for (; *s && *s != ':'; s++) if (*s != '_' && n + 1 < sizeof part) part[n++] = *s;
        part[n] = 0;
        v = v * 60 + strtod(part, NULL);
        if (*s == ':') s++;
    }
    return v;
}

/* [-+]?0b[01_]+ | [-+]?0[0-7_]+ | [-+]?(0|[1-9][0-9_]*) | [-+]?0x[0-9a-fA-F_]+ | base 60 */
/* 1 with the value in *out, 0 when s is not of this form, -1 when it is but holds no digit
 * ("0b_", which PyYAML's int() refuses: an error, not a string) */
static int int_value(const char *s, YamlValue *out) {
    bool neg = *s == '-';
    if (*s == '-' || *s == '+') s++;
    int base;
    const char *digits = s;
    if (strncmp(s, "0b", 2) == 0 && all_in(s + 2, "01_")) base = 2, digits = s + 2;
    else if (strncmp(s, "0x", 2) == 0 && all_in(s + 2, "0123456789abcdefABCDEF_")) base = 16, digits = s + 2;
    else if (strcmp(s, "0") == 0) base = 10;
    else if (s[0] == '0' && all_in(s + 1, "01234567_")) base = 8, digits = s + 1;
    else if (s[0] >= '1' && s[0] <= '9' && all_in(s, "0123456789_")) base = 10;
    else if (base60(s, false)) base = 60;
    else return 0;
    double v = 0;              /* the value as a float, for one beyond int64_t */
    uint64_t mag = 0;          /* its magnitude, exact while it fits */
    bool over = false;
    if (base == 60) {
        v = base60_value(s);
        over = v >= 9223372036854775808.0;
        if (!over) mag = (uint64_t)v;
    } else {
        bool any = false;
        for (const char *c = digits; *c; c++) {
            if (*c == '_') continue;
            unsigned d = (unsigned)(*c <= '9' ? *c - '0' : (*c | 0x20) - 'a' + 10);
            v = v * base + d;
            if (mag > (UINT64_MAX - d) / (uint64_t)base) over = true;
            else mag = mag * (uint64_t)base + d;
            any = true;
        }
        if (!any) return -1;
    }
    if (!over && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX)) {
        out->type = YT_INT;
        out->i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    } else {
        out->type = YT_FLOAT; /* beyond int64_t: as near as a float comes */
        out->f = neg ? -v : v;
    }
    return 1;
}

/* [0-9_]* then an optional [eE][-+][0-9]+ to the end */
static bool frac_exp(const char *s) {
    while (*s && strchr("0123456789_", *s)) s++;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s != '-' && *s != '+') return false;
        s++;
        if (!*s) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == 0;
}

static bool float_value(const char *s, YamlValue *out) {
    const char *t = s;
    bool neg = *t == '-';
    bool sign = *t == '-' || *t == '+';
    if (sign) t++;
    double v;
    if (!sign && one_of(s, (const char *const[]){".nan", ".NaN", ".NAN", NULL})) {
        v = NAN;
    } else if (one_of(t, (const char *const[]){".inf", ".Inf", ".INF", NULL})) {
        v = neg ? -INFINITY : INFINITY;
    } else if (base60(t, true)) {
        v = base60_value(t);
        if (neg) v = -v;
    } else {
        bool ok;
        if (*t == '.') ok = !sign && t[1] >= '0' && t[1] <= '9' && frac_exp(t + 1);
        else {
            const char *c = t;
            if (!(*c >= '0' && *c <= '9')) return false;
            while (*c && strchr("0123456789_", *c)) c++;
            ok = *c == '.' && frac_exp(c + 1);
        }
        if (!ok) return false;
        char buf[128];
        size_t n = 0;
        for (const char *c = s; *c; c++) {
            if (*c == '_') continue;
            if (n + 1 >= sizeof buf) return false;
            buf[n++] = *c;
        }
        buf[n] = 0;
        v = strtod(buf, NULL);
    }
    out->type = YT_FLOAT;
    out->f = v;
    return true;
}

VrStatus yaml_scalar_value(const YamlNode *n, YamlValue *out) {
    memset(out, 0, sizeof *out);
    if (!n || n->kind != YAML_SCALAR) return VR_EINVAL;
    out->type = YT_STRING;
    const char *s = n->text;
    bool has_nul = strlen(s) != n->text_len;
    static const char *const yes[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", NULL};
    static const char *const no[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", NULL};
    static const char *const null[] = {"~", "null", "Null", "NULL", "", NULL};
    const char *tag = n->tag;
    if (tag && strcmp(tag, "str") == 0) return VR_OK;
    if (!tag && (n->quoted || has_nul)) return VR_OK;
    if (has_nul) return VR_EINVAL; /* a tagged non-string holding NUL */
    if ((!tag || strcmp(tag, "null") == 0) && one_of(s, null)) { out->type = YT_NULL; return VR_OK; }
    if (!tag || strcmp(tag, "bool") == 0) {
        if (one_of(s, yes)) { out->type = YT_BOOL; out->b = true; return VR_OK; }
        if (one_of(s, no)) { out->type = YT_BOOL; out->b = false; return VR_OK; }
    }
    if ((!tag || strcmp(tag, "float") == 0) && float_value(s, out)) return VR_OK;
    int iv = !tag || strcmp(tag, "int") == 0 || strcmp(tag, "float") == 0 ? int_value(s, out) : 0;
    if (iv < 0) { out->type = YT_STRING; return VR_EINVAL; }
    if (iv > 0 && (!tag || strcmp(tag, "int") == 0)) return VR_OK;
    if (iv > 0) {
        out->f = out->type == YT_INT ? (double)out->i : out->f; /* !!float 3 is 3.0 */
        out->type = YT_FLOAT;
        return VR_OK;
    }
    if (tag) { out->type = YT_STRING; return VR_EINVAL; }
    out->type = YT_STRING;
    return VR_OK;
}
