/* test_toml.c: the TOML reader of trainer configs (sim/tomlin.h over the vendored tomlc17): the
 * tree, its values' lines and types, and the refusals: TOML's own errors with their line (a key
 * twice, a value cut short), a NUL byte, a date, nesting past the depth limit, more values than
 * the limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tomlin.h"

static TomlDoc *parse_ok(const char *text) {
    TomlDoc *d = NULL;
    char err[300] = "";
    VrStatus st = toml_doc_parse(text, strlen(text), NULL, &d, err, sizeof err);
    if (st) fprintf(stderr, "unexpected: %s\n", err);
    assert_int_equal(st, VR_OK);
    assert_non_null(d);
    return d;
}

/* The error of a refused text of len bytes (with limits lim), which must contain want. */
static void parse_bad(const char *text, size_t len, const TomlLimits *lim, const char *want) {
    TomlDoc *d = (TomlDoc *)1;
    char err[300] = "";
    VrStatus st = toml_doc_parse(text, len, lim, &d, err, sizeof err);
    assert_int_equal(st, VR_EINVAL);
    assert_null(d);
    if (!strstr(err, want)) fprintf(stderr, "error '%s' lacks '%s'\n", err, want);
    assert_non_null(strstr(err, want));
}

static void test_tree_and_lines(void **state) {
    (void)state;
    TomlDoc *d = parse_ok("# a job\n[training]\nseq_len = 8192\ndtype = \"bfloat16\"\n\n"
                          "[parallelism]\ndata_parallel_shard_degree = -1\nlr = 3e-4\nok = true\n"
                          "list = [\"a\",\n  \"b\"]\n");
    const toml_datum_t *root = toml_doc_root(d);
    assert_int_equal(root->type, TOML_TABLE);
    toml_datum_t tr = toml_get(*root, "training");
    assert_int_equal(tr.type, TOML_TABLE);
    toml_datum_t seq = toml_get(tr, "seq_len");
    assert_int_equal(seq.type, TOML_INT64);
    assert_int_equal(seq.u.int64, 8192);
    assert_int_equal(seq.lineno, 3);
    toml_datum_t dt = toml_get(tr, "dtype");
    assert_string_equal(dt.u.s, "bfloat16");
    assert_int_equal(dt.lineno, 4);
    toml_datum_t pa = toml_get(*root, "parallelism");
    assert_int_equal(toml_get(pa, "data_parallel_shard_degree").u.int64, -1);
    assert_int_equal(toml_get(pa, "lr").type, TOML_FP64);
    assert_true(toml_get(pa, "ok").u.boolean);
    toml_datum_t l = toml_get(pa, "list");
    assert_int_equal(l.type, TOML_ARRAY);
    assert_int_equal(l.u.arr.size, 2);
    assert_int_equal(l.u.arr.elem[1].lineno, 11);
    toml_doc_free(d);
}

static void test_refusals(void **state) {
    (void)state;
    const char *twice = "[training]\nseq_len = 1\nseq_len = 2\n";
    parse_bad(twice, strlen(twice), NULL, "line 3: not valid TOML");
    const char *cut = "[training]\nx = [1,\n";
    parse_bad(cut, strlen(cut), NULL, "not valid TOML");
    const char nul[] = "[job]\na = 1\n\0[training]\n";
    parse_bad(nul, sizeof nul - 1, NULL, "line 3: a NUL byte");
    const char *date = "[job]\nwhen = 1979-05-27T07:32:00Z\n";
    parse_bad(date, strlen(date), NULL, "line 2: a date or time value");
}

static void test_limits(void **state) {
    (void)state;
    /* depth: the root is 1, [a] 2, b's array 3, its inner array 4 */
    const char *deep = "[a]\nb = [[1]]\n";
    TomlLimits three = {.max_depth = 3};
    parse_bad(deep, strlen(deep), &three, "line 2: nested deeper than 3 levels");
    TomlLimits four = {.max_depth = 4};
    TomlDoc *d = NULL;
    char err[300];
    assert_int_equal(toml_doc_parse(deep, strlen(deep), &four, &d, err, sizeof err), VR_OK);
    toml_doc_free(d);
    /* values: the root, a, b (the outer array), the inner array and the 1: 5 */
    TomlLimits four_values = {.max_nodes = 4};
    parse_bad(deep, strlen(deep), &four_values, "more than 4 values");
    TomlLimits five_values = {.max_nodes = 5};
    d = NULL;
    assert_int_equal(toml_doc_parse(deep, strlen(deep), &five_values, &d, err, sizeof err), VR_OK);
    toml_doc_free(d);
    toml_doc_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_and_lines),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
