/* fuzz_toml.c: the TOML reader of trainer configs (sim/tomlin.c over the vendored tomlc17): any
 * bytes parsed under the default limits and the whole tree walked, as vrsim.core.read_toml
 * pushes it. Seeds: tests/data/recipes/ (its .toml files). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tomlin.h"

static size_t walk(const toml_datum_t *d) {
    size_t n = 1;
    if (d->type == TOML_TABLE) {
        for (int i = 0; i < d->u.tab.size; i++) n += strlen(d->u.tab.key[i]) + walk(&d->u.tab.value[i]);
    } else if (d->type == TOML_ARRAY) {
        for (int i = 0; i < d->u.arr.size; i++) n += walk(&d->u.arr.elem[i]);
    } else if (d->type == TOML_STRING) {
        n += (size_t)d->u.str.len + strlen(d->u.s);
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    TomlDoc *doc = NULL;
    char err[300];
    if (toml_doc_parse(text, size, NULL, &doc, err, sizeof err) == VR_OK) (void)walk(toml_doc_root(doc));
    toml_doc_free(doc);
    free(text);
    return 0;
}
