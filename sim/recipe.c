/* recipe.c: the chunk that runs lua/recipes/load.lua on a trainer config (recipe.h). */
#include "recipe.h"
#include "scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool recipe_is_config(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot && !strchr(dot, '/') && (strcasecmp(dot, ".yaml") == 0 || strcasecmp(dot, ".yml") == 0 ||
                                        strcasecmp(dot, ".json") == 0 || strcasecmp(dot, ".toml") == 0 ||
                                        strcasecmp(dot, ".sh") == 0);
}

/* Appends s to buf (at *n) as a Lua string literal, every byte but letters and digits as a
 * decimal escape. buf has room: the caller sized it 4 bytes a byte. */
static void put_string(char *buf, size_t *n, const char *s) {
    buf[(*n)++] = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))
            buf[(*n)++] = (char)*c;
        else
            *n += (size_t)sprintf(buf + *n, "\\%03u", *c);
    }
    buf[(*n)++] = '"';
}

char *recipe_chunk(const char *path, const RecipeOptions *o, bool print) {
    size_t cap = 256 + 4 * (strlen(path) + (o->from ? strlen(o->from) : 0) + (o->gpu ? strlen(o->gpu) : 0) +
                               (o->model_config ? strlen(o->model_config) : 0) +
                               (o->accelerate ? strlen(o->accelerate) : 0) + 5);
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t n = (size_t)sprintf(buf, "return require(\"recipes.load\").%s(", print ? "source" : "scenario");
    put_string(buf, &n, path);
    n += (size_t)sprintf(buf + n, ", {");
    if (o->from) { n += (size_t)sprintf(buf + n, "from = "); put_string(buf, &n, o->from); buf[n++] = ','; }
    if (o->gpu) { n += (size_t)sprintf(buf + n, "gpu = "); put_string(buf, &n, o->gpu); buf[n++] = ','; }
    if (o->count > 0) n += (size_t)sprintf(buf + n, "count = %d,", o->count);
    if (o->model_config) {
        n += (size_t)sprintf(buf + n, "model_config = ");
        put_string(buf, &n, o->model_config);
        buf[n++] = ',';
    }
    if (o->accelerate) {
        n += (size_t)sprintf(buf + n, "accelerate = ");
        put_string(buf, &n, o->accelerate);
        buf[n++] = ',';
    }
    sprintf(buf + n, "})\n");
    return buf;
}

VrStatus recipe_source(const char *path, const RecipeOptions *o, const char *const *sets,
                       int n_sets, char **out, char *err, size_t errlen) {
    RecipeOptions ro = *o;
    for (int k = 0; k < n_sets; k++)
        if (strncmp(sets[k], "model.config=", 13) == 0 || strncmp(sets[k], "config=", 7) == 0)
            ro.model_config = strchr(sets[k], '=') + 1;
    char *chunk = recipe_chunk(path, &ro, true);
    if (!chunk) { snprintf(err, errlen, "out of host memory"); return VR_ENOMEM; }
    ScenarioOptions opts = {.typed_file = path, .typed_launcher = o->accelerate};
    VrStatus st = scenario_eval_text(path, chunk, ".", &opts, out, err, errlen);
    free(chunk);
    return st;
}

int recipe_option(int argc, char **argv, int *i, RecipeOptions *o, char *err, size_t errlen) {
    const char *a = argv[*i];
    if (strcmp(a, "--from") != 0 && strcmp(a, "--gpu") != 0 && strcmp(a, "--gpus") != 0 &&
        strcmp(a, "--accelerate") != 0)
        return 0;
    const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    bool count = strcmp(a, "--gpus") == 0;
    char *end = NULL;
    long n = val && count ? strtol(val, &end, 10) : 0;
    if (!val || (count && (end == val || *end || n < 1 || n > 1 << 20))) {
        snprintf(err, errlen, "%s needs a %s", a, count ? "count from 1 to 1048576" : "value");
        return -1;
    }
    if (a[2] == 'f') o->from = val;
    else if (a[2] == 'a') o->accelerate = val;
    else if (count) o->count = (int)n;
    else o->gpu = val;
    (*i)++;
    return 1;
}
