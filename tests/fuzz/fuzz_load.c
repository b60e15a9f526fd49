/* fuzz_load.c: libFuzzer harnesses over the readers of user input that go through the sandbox,
 * one per FUZZ_MODE (tests/fuzz/Makefile builds each):
 *   1 fuzz_scenario   the input is a scenario's source (sandbox, planner, limits)
 *   2 fuzz_hf_config  the input is a Hugging Face config.json that a small scenario reads as
 *                     model.config
 *   3 fuzz_deepspeed  the input is a DeepSpeed JSON config (training.deepspeed)
 *   4 fuzz_record     the input is one validation record (cJSON, lua/vrsim/record.lua, planner)
 *   5 fuzz_trl        the input is a trainer config (lua/recipes/) read with --from FORMAT:
 *   6 fuzz_llamafactory  trl, llamafactory, torchtune or hf_trainer (a JSON), as vrsim CONFIG
 *   7 fuzz_torchtune     --gpu h100 loads it; its model may name the folder "m", which holds a
 *   8 fuzz_hf_trainer    small Llama config.json
 *   9 fuzz_data_lengths  the input is a file of sequence lengths (one a line, or JSONL) that a
 *                     small scenario reads as training.data.lengths (lua/strategies/data.lua),
 *                     padded, flattened or packed (TRL, axolotl, torchtune) by the input's size
 *  10 fuzz_torchtitan the input is a torchtitan TOML job config read as vrsim CONFIG.toml --gpu
 *                     h100 --gpus 8 (lua/recipes/torchtitan.lua; its flavors as they come)
 *  11 fuzz_diffusers  the input is a saved launch command (lua/recipes/cmdline.lua) read as
 *                     vrsim CMD.sh --gpu h100 (lua/recipes/diffusers.lua)
 *  12 fuzz_axolotl    an axolotl YAML, and
 *  13 fuzz_accelerate an accelerate config YAML, read as modes 5-8 read theirs
 * Any input must give a plan or a one-line error; a plan's graph must then simulate. A crash, a
 * sanitizer report or a hang is a finding. The instruction and memory limits are lowered so a
 * runaway input ends fast. Run from the repository root (lua/ is found there). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <errno.h>

#include <cjson/cJSON.h>
#include <gsl/gsl_errno.h>

#include "engine.h"
#include "recipe.h"
#include "scenario.h"

#ifndef FUZZ_MODE
#define FUZZ_MODE 1
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void simulate(Plan *p) {
    EngineConfig ec;
    plan_engine_config(p, false, &ec);
    ec.steps = 1;
    SimResult *res = NULL;
    char err[512];
    if (engine_run(p->graph, &ec, &p->alloc, &res, err, sizeof err) == VR_OK) engine_result_free(res);
}

/* Writes the input as dir/name (modes 2, 3, 5 to 8, 10 and 11). */
__attribute__((unused)) static int write_input(const char *name, const uint8_t *data, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, size, f);
    return fclose(f) != 0 || w != size ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        gsl_set_error_handler_off();
        snprintf(dir, sizeof dir, "/tmp/vrsim-fuzz.%ld", (long)getpid());
        if (mkdir(dir, 0700) && errno != EEXIST) abort();
        init = 1;
    }
    if (size > 1 << 16) return 0;
    ScenarioOptions so = {.instruction_limit = 20000000L, .memory_limit = (size_t)256 << 20};
    Plan *p = NULL;
    char err[1024];
    VrStatus st;
#if FUZZ_MODE == 1
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    st = scenario_load_source("fuzz.lua", src, dir, &so, &p, err, sizeof err);
    free(src);
#elif FUZZ_MODE == 2 || FUZZ_MODE == 3
    if (write_input(FUZZ_MODE == 2 ? "config.json" : "ds.json", data, size)) return 0;
    static const char *SRC = FUZZ_MODE == 2
        ? "return { hardware = { gpu = 'h200' }, model = { arch = 'llama2', config = 'config.json' },"
          " training = { seq = 16, steps = 1 } }"
        : "return { hardware = { gpu = 'h200', count = 2 }, model = { arch = 'llama2', size = '7b-l1',"
          " hidden = 64, intermediate = 128, heads = 2, kv_heads = 2, vocab = 256 },"
          " training = { seq = 16, steps = 1, deepspeed = 'ds.json' } }";
    st = scenario_load_source("fuzz.lua", SRC, dir, &so, &p, err, sizeof err);
#elif (FUZZ_MODE >= 5 && FUZZ_MODE <= 8) || FUZZ_MODE == 12 || FUZZ_MODE == 13
    /* by FUZZ_MODE - 5: modes 5-8, then 12 and 13 (9-11 take the branches above and below) */
    static const char *FORMAT[] = {"trl", "llamafactory", "torchtune", "hf_trainer", "", "", "",
                                   "axolotl", "accelerate"};
    static const char *TINY = "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], "
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
        "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"vocab_size\": 256, "
        "\"max_position_embeddings\": 256, \"torch_dtype\": \"bfloat16\"}";
    static int model_written;
    if (!model_written) {
        char mdir[96];
        snprintf(mdir, sizeof mdir, "%s/m", dir);
        if (mkdir(mdir, 0700) && errno != EEXIST) abort();
        if (write_input("m/config.json", (const uint8_t *)TINY, strlen(TINY))) abort();
        model_written = 1;
    }
    const char *name = FUZZ_MODE == 8 ? "config.json" : "config.yaml";
    if (write_input(name, data, size)) return 0;
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    RecipeOptions ro = {.from = FORMAT[FUZZ_MODE - 5], .gpu = "h100"};
    char *chunk = recipe_chunk(path, &ro, false);
    if (!chunk) return 0;
    so.typed_file = path;
    st = scenario_load_source(path, chunk, dir, &so, &p, err, sizeof err);
    free(chunk);
#elif FUZZ_MODE == 10 || FUZZ_MODE == 11
    const char *name = FUZZ_MODE == 10 ? "config.toml" : "train.sh";
    if (write_input(name, data, size)) return 0;
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    RecipeOptions ro = {.from = FUZZ_MODE == 10 ? "torchtitan" : "diffusers", .gpu = "h100",
                        .count = FUZZ_MODE == 10 ? 8 : 0};
    /* fuzz_diffusers: the command's scenario text alone (--print-scenario), not its plan: the
     * SDXL model every command builds takes a second under the sanitizers, and the planner and
     * engine are the other targets' */
    char *chunk = recipe_chunk(path, &ro, FUZZ_MODE == 11);
    if (!chunk) return 0;
    so.typed_file = path;
    if (FUZZ_MODE == 11) {
        char *text = NULL;
        st = scenario_eval_text(path, chunk, dir, &so, &text, err, sizeof err);
        free(text);
    } else {
        st = scenario_load_source(path, chunk, dir, &so, &p, err, sizeof err);
    }
    free(chunk);
#elif FUZZ_MODE == 9
    if (write_input("lengths.txt", data, size)) return 0;
    /* each batching by the input's size: padded, flattened, TRL's packing (whose rows of 64
     * tokens the lengths are cut to, split into or packed into), axolotl's (bins of 128
     * tokens, a sequence over 64 dropped, cut or refused, one row a micro-batch, flash attention)
     * torchtune's (packs of 200 or 64, split across or not, FlexAttention) and torchtitan's
     * stream (rows of 96, FlexAttention) */
    static const char *BATCHING[] = {
        "micro_batch = 2, attention = 'sdpa', data = { batching = 'pad'",
        "micro_batch = 2, attention = 'sdpa', data = { batching = 'padding_free'",
        "micro_batch = 2, attention = 'sdpa', data = { batching = 'bfd', pack_length = 64",
        "micro_batch = 2, attention = 'sdpa', data = { batching = 'bfd_split', pack_length = 64",
        "micro_batch = 1, attention = 'flash', data = { batching = 'multipack', pack_length = 128,"
        " max_length = 64, pad_to_multiple_of = 64, bin_sequences = 3, group_size = 5",
        "micro_batch = 1, attention = 'flash', data = { batching = 'multipack', pack_length = 128,"
        " max_length = 64, too_long = 'truncate', order = 'given'",
        "micro_batch = 1, attention = 'flash', data = { batching = 'multipack', pack_length = 128,"
        " max_length = 64, too_long = 'raise', batch = 'p50'",
        "micro_batch = 2, attention = 'flex', data = { batching = 'torchtune', pack_length = 200",
        "micro_batch = 1, attention = 'flex', data = { batching = 'torchtune', pack_length = 64,"
        " split_across_pack = true, order = 'given', batch = 'p50'",
        "micro_batch = 2, attention = 'flex', data = { batching = 'torchtitan', pack_length = 96, batch = 'p50'" };
    char src[640];
    snprintf(src, sizeof src,
             "return { hardware = { gpu = 'h200' }, model = { arch = 'llama2', size = '7b-l1',"
             " hidden = 64, intermediate = 128, heads = 2, kv_heads = 2, vocab = 256 },"
             " training = { steps = 1, precision = 'bf16', %s, lengths = 'lengths.txt' } } }",
             BATCHING[size % 10]);
    st = scenario_load_source("fuzz.lua", src, dir, &so, &p, err, sizeof err);
#else
    cJSON *rec = cJSON_ParseWithLength((const char *)data, size);
    if (!rec) return 0;
    st = scenario_load_record("fuzz.jsonl:1", rec, 1 + (int)(size % 3), (int)(size % 2), &so, &p,
                              err, sizeof err);
    cJSON_Delete(rec);
#endif
    /* FUZZ_VERBOSE=1: each input's outcome, to check that the seeds reach a plan */
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "fuzz_load: %s\n", st == VR_OK ? "a plan" : err);
    if (st == VR_OK) {
        /* a model too large for one fuzz iteration is skipped, not simulated */
        if (p && graph_num_tensors(p->graph) < 20000) simulate(p);
        plan_free(p);
    } else if (!memchr(err, 0, sizeof err)) {
        abort(); /* the message must be a terminated string */
    }
    return 0;
}
