/* recipe.h: `vrsim CONFIG.yaml`: a trainer's config file (axolotl, accelerate) simulated as it
 * is. The file is read and mapped in the sandbox by lua/recipes/load.lua; this module writes the
 * short chunk that calls it, which cmd_run loads as the scenario's source. */
#ifndef VR_RECIPE_H
#define VR_RECIPE_H

#include <stdbool.h>

typedef struct RecipeOptions {
    const char *from;          /* --from FORMAT, NULL: found from the file's keys */
    const char *gpu;           /* --gpu NAME, NULL: none (load.lua's error names --gpu) */
    int count;                 /* --gpus N, 0: from the file, else 1 */
    const char *model_config;  /* the path a --set model.config=PATH names (borrowed): the
                                  file's model is not read; NULL = none */
} RecipeOptions;

/* Whether path names a YAML file (.yaml or .yml, any case): a trainer config, not a scenario. */
bool recipe_is_config(const char *path);

/* The Lua chunk that returns the scenario of the config at path (print false) or its text as a
 * scenario file (print true: --print-scenario). Strings are written as escapes, so no path can
 * end the chunk's string. The caller frees it; NULL when host memory ran out. */
char *recipe_chunk(const char *path, const RecipeOptions *o, bool print);

#endif
