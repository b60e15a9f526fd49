/* yamlin.h: the YAML vrsim reads from users (trainer configs: axolotl, accelerate, torchtune),
 * parsed by libyaml (Debian's libyaml-dev) into a small tree, then held to what leaves no doubt
 * about the value it means:
 *   - one document, whose nodes are mappings, sequences and scalars; mapping keys are scalars;
 *   - no key twice in one mapping: PyYAML keeps the last, a reader that kept the first would mean
 *     another run; a duplicate is an error naming the key and both lines;
 *   - no aliases (*name) nor merge keys (<<): an alias can repeat a subtree without limit (the
 *     "billion laughs"), and no trainer config needs one; refused by name;
 *   - tags only where they name the core schema's types (!!str, !!int, ...);
 *   - limits on nesting depth and node count (YamlLimits).
 * Every node keeps its 1-based line, so a reader can say "file:line".
 *
 * Scalars are typed as PyYAML's SafeLoader resolves them (YAML 1.1, the loader axolotl and
 * accelerate call, yaml_scalar_type): a quoted scalar is a string; a plain one is null
 * (~, null, empty), a boolean (true/false/yes/no/on/off in their three spellings), an integer
 * (decimal, 0x, 0b, 0-octal, with '_' separators, base 60 with ':'), a float (with a '.', an
 * exponent only with its sign: 1.0e-5, not 1e-5, which PyYAML keeps a string; .inf, .nan) or
 * else a string. */
#ifndef VR_YAMLIN_H
#define VR_YAMLIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vr.h"

typedef enum YamlKind { YAML_MAP, YAML_SEQ, YAML_SCALAR } YamlKind;

typedef struct YamlNode {
    YamlKind kind;
    int line;                  /* 1-based line where the node starts */
    int key_line;              /* 1-based line of its key (a mapping's value), else 0 */
    char *key;                 /* its key (a mapping's value), NUL-terminated, else NULL */
    size_t key_len;            /* bytes of key (it may hold NUL) */
    char *text;                /* a scalar's text, NUL-terminated (it may hold NUL: text_len) */
    size_t text_len;
    bool quoted;               /* the scalar was quoted or a block (| >): always a string */
    const char *tag;           /* NULL, or the core type an explicit tag names: "str", "int",
                                  "float", "bool", "null" */
    struct YamlNode *child;    /* first item / value of a sequence / mapping */
    struct YamlNode *next;     /* next sibling */
    int n_children;
} YamlNode;

typedef struct YamlLimits {
    int max_depth;             /* nested collections, the root's counted as 1 (0: 64) */
    long max_nodes;            /* every node counted (0: 100000) */
} YamlLimits;

/* Parses the len bytes at text (NUL-terminated at text[len]). On VR_OK *out is the root node
 * (the caller frees it with yaml_tree_free); an empty document is VR_EINVAL. On VR_EINVAL err
 * holds what is wrong with its line, without a file name: "line 4: key 'lora_r' appears twice
 * (first on line 2)". VR_ENOMEM when host memory ran out. lim may be NULL (the defaults). */
VrStatus yaml_parse(const char *text, size_t len, const YamlLimits *lim, YamlNode **out /* OUT */,
                    char *err, size_t errlen);

void yaml_tree_free(YamlNode *n); /* NULL is a no-op */

typedef enum YamlType { YT_NULL, YT_BOOL, YT_INT, YT_FLOAT, YT_STRING } YamlType;

typedef struct YamlValue {
    YamlType type;
    bool b;                    /* YT_BOOL */
    int64_t i;                 /* YT_INT */
    double f;                  /* YT_FLOAT (also an integer too large for int64_t) */
} YamlValue;

/* The type a scalar node resolves to, as above (a node with a tag: the tag's type, VR_EINVAL
 * when its text is not of that type). VR_EINVAL also when n is not a scalar. */
VrStatus yaml_scalar_value(const YamlNode *n, YamlValue *out /* OUT */);

#endif
