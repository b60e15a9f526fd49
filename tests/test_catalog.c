/* test_catalog.c: catalog_read (catalog.h) reads lua/hw/'s data modules as data: every entry of
 * the GPU catalog under its name, in byte order, with its numbers, strings and booleans (nested
 * tables left out); a price entry's fields; a module that is missing or not a table of entries
 * is an error with a message, never a crash.
 * Run from the repository root (make test does): lua/ is found as ./lua. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "catalog.h"

static void test_gpus_entries(void **state) {
    (void)state;
    Catalog *c = NULL;
    char err[512] = "";
    assert_int_equal(catalog_read("hw.gpus", &c, err, sizeof err), VR_OK);
    assert_true(c->n > 10);
    for (int i = 1; i < c->n; i++) assert_true(strcmp(c->entries[i - 1].key, c->entries[i].key) < 0);
    const CatalogEntry *e = catalog_entry(c, "h100_sxm");
    assert_non_null(e);
    assert_string_equal(e->key, "h100_sxm");
    const CatalogField *f = catalog_field(e, "memory_bytes");
    assert_non_null(f);
    assert_int_equal(f->kind, CATALOG_NUMBER);
    assert_true(f->num == 85899345920.0);
    f = catalog_field(e, "arch");
    assert_non_null(f);
    assert_int_equal(f->kind, CATALOG_STRING);
    assert_string_equal(f->str, "hopper");
    f = catalog_field(e, "p2p");
    assert_non_null(f);
    assert_int_equal(f->kind, CATALOG_BOOL);
    assert_null(catalog_field(e, "pcie"));     /* a nested table */
    assert_null(catalog_field(e, "no_such_field"));
    assert_null(catalog_entry(c, "h100"));     /* names are exact: no alias, no prefix */
    assert_null(catalog_field(NULL, "arch"));
    catalog_free(c);
}

static void test_price_entry(void **state) {
    (void)state;
    Catalog *c = NULL;
    char err[512] = "";
    assert_int_equal(catalog_read("hw.prices", &c, err, sizeof err), VR_OK);
    const CatalogEntry *e = catalog_entry(c, "h100_sxm");
    assert_non_null(e);
    const CatalogField *f = catalog_field(e, "usd_per_gpu_hour");
    assert_non_null(f);
    assert_true(f->num == 3.78);
    assert_string_equal(catalog_field(e, "provider")->str, "Lambda");
    catalog_free(c);
}

static void test_bad_modules(void **state) {
    (void)state;
    Catalog *c = (Catalog *)state; /* must be reset to NULL */
    char err[512] = "";
    assert_int_equal(catalog_read("hw.no_such_module", &c, err, sizeof err), VR_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "no_such_module"));
    /* a module that returns a table of functions, not of entries */
    err[0] = 0;
    assert_int_equal(catalog_read("hw.memory", &c, err, sizeof err), VR_EINVAL);
    assert_null(c);
    assert_true(err[0] != 0);
    catalog_free(NULL); /* a no-op */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpus_entries),
        cmocka_unit_test(test_price_entry),
        cmocka_unit_test(test_bad_modules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
