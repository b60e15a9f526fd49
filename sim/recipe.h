/* recipe.h: `vrsim CONFIG.yaml`: a trainer's config file (axolotl, accelerate) simulated as it
 * is. The file is read and mapped in the sandbox by lua/recipes/load.lua; this module writes the
 * short chunk that calls it, which cmd_run loads as the scenario's source. */
#ifndef VR_RECIPE_H
#define VR_RECIPE_H

#include <stdbool.h>
#include <stddef.h>

#include "vr.h"

typedef struct RecipeOptions {
    const char *from;          /* --from FORMAT, NULL: found from the file's keys */
    const char *gpu;           /* --gpu NAME, NULL: none (load.lua's error names --gpu) */
    int count;                 /* --gpus N, 0: from the file, else 1 */
    const char *accelerate;    /* --accelerate FILE: the launcher's config beside a TRL or
                                  TrainingArguments config (recipes/launch.lua); NULL = none */
    const char *model_config;  /* the path a --set model.config=PATH names (borrowed): the
                                  file's model is not read; NULL = none */
} RecipeOptions;

/* Whether path names a YAML, JSON or TOML file or a saved launch command (.yaml, .yml, .json,
 * .toml, .sh, any case): a trainer config, not a scenario. */
bool recipe_is_config(const char *path);

/* The Lua chunk that returns the scenario of the config at path (print false) or its text as a
 * scenario file (print true: --print-scenario). Strings are written as escapes, so no path can
 * end the chunk's string. The caller frees it; NULL when host memory ran out. */
char *recipe_chunk(const char *path, const RecipeOptions *o, bool print);

/* The scenario text of the config at path (what --print-scenario prints), for a command that
 * loads one scenario many times (sweep, maxbatch): the config is read once, and each point loads
 * this text as a scenario whose paths are read from the working folder ("."), as the config's
 * are. sets are the command's --set overrides: a model.config=PATH among them stands in for the
 * file's model, as for vrsim CONFIG. VR_OK with *out (the caller frees it), else VR_EINVAL with
 * err ("FILE:LINE: KEY: why") or VR_ENOMEM. */
VrStatus recipe_source(const char *path, const RecipeOptions *o, const char *const *sets,
                       int n_sets, char **out /* OUT */, char *err, size_t errlen);

/* Reads a trainer config's option at argv[*i] (--from FORMAT, --gpu NAME, --gpus N,
 * --accelerate FILE) into o,
 * moving *i past its value. 1: read; 0: not one of them; -1: a bad or missing value, with err. */
int recipe_option(int argc, char **argv, int *i, RecipeOptions *o, char *err, size_t errlen);

#endif
