/* test_yaml.c: the YAML reader of trainer configs (sim/yamlin.h): the tree and its lines, each
 * scalar typed as PyYAML's SafeLoader types it, and the refusals: duplicate keys (naming both
 * lines), aliases and merge keys, foreign tags, nesting past the depth limit, more nodes than the
 * limit, a second document, an empty one, and libyaml's own syntax errors with their line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "yamlin.h"

static YamlNode *parse_ok(const char *text) {
    YamlNode *root = NULL;
    char err[300] = "";
    VrStatus st = yaml_parse(text, strlen(text), NULL, &root, err, sizeof err);
    if (st) fprintf(stderr, "unexpected: %s\n", err);
    assert_int_equal(st, VR_OK);
    assert_non_null(root);
    return root;
}

/* The error of a refused text (with limits lim), which must contain want. */
static void parse_bad(const char *text, const YamlLimits *lim, const char *want) {
    YamlNode *root = (YamlNode *)1;
    char err[300] = "";
    VrStatus st = yaml_parse(text, strlen(text), lim, &root, err, sizeof err);
    assert_int_equal(st, VR_EINVAL);
    assert_null(root);
    if (!strstr(err, want)) fprintf(stderr, "error '%s' lacks '%s'\n", err, want);
    assert_non_null(strstr(err, want));
}

static const YamlNode *child(const YamlNode *map, const char *key) {
    for (const YamlNode *c = map->child; c; c = c->next)
        if (c->key && strcmp(c->key, key) == 0) return c;
    return NULL;
}

static void test_tree_and_lines(void **state) {
    (void)state;
    YamlNode *root = parse_ok("# a config\n"
                              "base_model: ./llama\n"
                              "lora_target_modules:\n"
                              "  - q_proj\n"
                              "  - v_proj\n"
                              "fsdp_config:\n"
                              "  fsdp_version: 2\n"
                              "empty:\n");
    assert_int_equal(root->kind, YAML_MAP);
    assert_int_equal(root->n_children, 4);
    const YamlNode *bm = child(root, "base_model");
    assert_non_null(bm);
    assert_int_equal(bm->kind, YAML_SCALAR);
    assert_string_equal(bm->text, "./llama");
    assert_int_equal(bm->key_line, 2);
    const YamlNode *ltm = child(root, "lora_target_modules");
    assert_int_equal(ltm->kind, YAML_SEQ);
    assert_int_equal(ltm->key_line, 3);
    assert_int_equal(ltm->n_children, 2);
    assert_string_equal(ltm->child->next->text, "v_proj");
    assert_int_equal(ltm->child->next->line, 5);
    const YamlNode *fc = child(root, "fsdp_config");
    assert_int_equal(fc->kind, YAML_MAP);
    assert_int_equal(child(fc, "fsdp_version")->key_line, 7);
    YamlValue v;
    assert_int_equal(yaml_scalar_value(child(root, "empty"), &v), VR_OK);
    assert_int_equal(v.type, YT_NULL);
    yaml_tree_free(root);
}

/* One scalar "k: TEXT" typed. */
static YamlValue typed(const char *text) {
    char doc[200];
    snprintf(doc, sizeof doc, "k: %s\n", text);
    YamlNode *root = parse_ok(doc);
    YamlValue v;
    assert_int_equal(yaml_scalar_value(root->child, &v), VR_OK);
    yaml_tree_free(root);
    return v;
}

static void test_scalar_types(void **state) {
    (void)state;
    /* booleans: YAML 1.1's words in PyYAML's three spellings, nothing else */
    const char *yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "ON"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        YamlValue v = typed(yes[i]);
        assert_int_equal(v.type, YT_BOOL);
        assert_true(v.b);
    }
    YamlValue v = typed("off");
    assert_int_equal(v.type, YT_BOOL);
    assert_false(v.b);
    assert_int_equal(typed("tRue").type, YT_STRING);
    assert_int_equal(typed("y").type, YT_STRING); /* PyYAML keeps y/n strings */
    assert_int_equal(typed("~").type, YT_NULL);
    assert_int_equal(typed("Null").type, YT_NULL);
    /* integers */
    struct { const char *t; int64_t i; } ints[] = {
        {"16", 16}, {"-3", -3}, {"+7", 7}, {"0", 0}, {"1_000", 1000}, {"0x1F", 31}, {"0b101", 5},
        {"010", 8}, {"1:30", 90}, {"9223372036854775807", INT64_MAX}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        v = typed(ints[i].t);
        assert_int_equal(v.type, YT_INT);
        assert_true(v.i == ints[i].i);
    }
    /* floats: a '.' and, with an exponent, its sign (PyYAML's 1.1 resolver) */
    struct { const char *t; double f; } floats[] = {
        {"0.05", 0.05}, {"2.0e-5", 2e-5}, {"1.", 1.0}, {".5", 0.5}, {"-1_0.5", -10.5}, {"1:30.5", 90.5}};
    for (size_t i = 0; i < sizeof floats / sizeof *floats; i++) {
        v = typed(floats[i].t);
        assert_int_equal(v.type, YT_FLOAT);
        assert_true(v.f == floats[i].f);
    }
    v = typed("-.inf");
    assert_int_equal(v.type, YT_FLOAT);
    assert_true(v.f < -1e308);
    v = typed(".nan");
    assert_true(v.type == YT_FLOAT && v.f != v.f);
    assert_int_equal(typed("1e-5").type, YT_STRING);   /* no '.': a string to PyYAML */
    assert_int_equal(typed("2.0e5").type, YT_STRING);  /* an exponent without its sign */
    assert_int_equal(typed("08").type, YT_STRING);
    assert_int_equal(typed("99999999999999999999").type, YT_FLOAT);
    /* quoted and tagged */
    assert_int_equal(typed("\"true\"").type, YT_STRING);
    assert_int_equal(typed("'16'").type, YT_STRING);
    assert_int_equal(typed("!!str 16").type, YT_STRING);
    v = typed("!!float 3");
    assert_true(v.type == YT_FLOAT && v.f == 3.0);
    YamlNode *root = parse_ok("k: !!int abc\n");
    assert_int_equal(yaml_scalar_value(root->child, &v), VR_EINVAL);
    yaml_tree_free(root);
    root = parse_ok("k: 0b_\n"); /* an int with no digit: PyYAML raises */
    assert_int_equal(yaml_scalar_value(root->child, &v), VR_EINVAL);
    yaml_tree_free(root);
    /* a NUL in a double-quoted scalar stays a string of its full length */
    root = parse_ok("k: \"a\\0b\"\n");
    assert_int_equal(root->child->text_len, 3);
    assert_int_equal(yaml_scalar_value(root->child, &v), VR_OK);
    assert_int_equal(v.type, YT_STRING);
    yaml_tree_free(root);
}

static void test_refusals(void **state) {
    (void)state;
    parse_bad("a: 1\nb: 2\na: 3\n", NULL, "line 3: key 'a' appears twice (first on line 1)");
    parse_bad("x:\n  y: 1\n  y: 1\n", NULL, "key 'y' appears twice");
    parse_bad("a: &x [1, 2]\nb: *x\n", NULL, "line 2: an alias (*x)");
    parse_bad("a: &x {k: 1}\nb:\n  <<: *x\n", NULL, "line 3: a merge key");
    parse_bad("a: !!python/object:os.system x\n", NULL, "line 1: tag");
    parse_bad("a: !local x\n", NULL, "not one of YAML's core types");
    parse_bad("? [a]\n: 1\n", NULL, "a key that is a sequence");
    parse_bad("a: 1\n---\nb: 2\n", NULL, "a second YAML document");
    parse_bad("", NULL, "an empty document");
    parse_bad("# only a comment\n", NULL, "an empty document");
    parse_bad("a: 1\nb: [1, 2\nc: 3\n", NULL, "not valid YAML");
    parse_bad("a:\n  - b\n c: 1\n", NULL, "line 3: not valid YAML");
    YamlLimits few = {.max_nodes = 10};
    parse_bad("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\n", &few, "more than 10 nodes");
}

static void test_depth_limit(void **state) {
    (void)state;
    char deep[400];
    /* 64 nested sequences: read; 65: refused at the 65th's line */
    for (int depth = 64; depth <= 65; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        deep[2 * depth] = 0;
        YamlNode *root = NULL;
        char err[300];
        VrStatus st = yaml_parse(deep, strlen(deep), NULL, &root, err, sizeof err);
        assert_int_equal(st, depth == 64 ? VR_OK : VR_EINVAL);
        if (st) assert_non_null(strstr(err, "nested deeper than 64 levels"));
        yaml_tree_free(root);
    }
    /* a billion-laughs document a thousand levels deep stops at the limit, never at the end */
    char *big = malloc(200001);
    assert_non_null(big);
    memset(big, '[', 100000);
    memset(big + 100000, ']', 100000);
    big[200000] = 0;
    parse_bad(big, NULL, "nested deeper than 64 levels");
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_and_lines),
        cmocka_unit_test(test_scalar_types),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_depth_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
