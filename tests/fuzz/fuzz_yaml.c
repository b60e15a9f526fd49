/* fuzz_yaml.c: the YAML reader of trainer configs (sim/yamlin.c): any bytes parsed under the
 * default limits, and every scalar of the tree typed, as vrsim.core.read_yaml does. Seeds:
 * tests/data/recipes/ and tests/hostile/yaml_*. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "yamlin.h"

static void walk(const YamlNode *n) {
    for (; n; n = n->next) {
        YamlValue v;
        if (n->kind == YAML_SCALAR) (void)yaml_scalar_value(n, &v);
        walk(n->child);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    YamlNode *root = NULL;
    char err[300];
    if (yaml_parse(text, size, NULL, &root, err, sizeof err) == VR_OK) walk(root);
    yaml_tree_free(root);
    free(text);
    return 0;
}
