/* scenario.h: a scenario file turned into a Plan: the graph of one training step, the device,
 * the allocator settings and what the report needs to name things.
 *
 * The scenario runs in a sandboxed Lua state (sim/bind/): only base, string, table, math and
 * utf8 libraries, `require` limited to the project's lua/ folder and the scenario's own folder,
 * and an instruction and memory limit. --unsafe opens the rest of the standard library. */
#ifndef VR_SCENARIO_H
#define VR_SCENARIO_H

#include <stdbool.h>
#include <stdint.h>

#include "alloc.h"
#include "device.h"
#include "graph.h"

struct CostModel;

typedef struct Plan {
    Graph *graph;              /* owned, unless graph_borrowed */
    bool graph_borrowed;       /* graph is another plan's (scenario_load_source_kept), which must
                                  outlive this one */
    struct CostModel *cost;    /* owned; NULL when the GPU has no calibrated profile */
    double host_op_ns;         /* CPU dispatch time per op (from the profile, else 0) */
    double host_ckpt_op_ns;    /* the same inside checkpointed regions (0 = host_op_ns) */
    double host_ckpt_region_ns; /* torch.utils.checkpoint's own host time per region */
    double host_ckpt_saved_ns;  /* its pack hook per tensor a forward op saves (0: per op class) */
    double host_launch_ns;     /* a further kernel launch within one op (profile launch_us) */
    double host_compiled_kernel_ns[2]; /* EngineConfig's: a compiled graph's kernel, fwd / bwd */
    double host_compiled_call_ns[2];   /* and its call, fwd / bwd */
    double contention[2];      /* EngineConfig.contention, from the profile's contention table */
    char profile[512];         /* where the op costs come from, for reports */
    DeviceSpec dev;
    AllocConfig alloc;
    int steps;                 /* steps to simulate */
    int gpus;                  /* data-parallel ranks (symmetric: simulated once) */
    char name[128];            /* scenario name, e.g. "llama7b_h200" */
    char title[256];           /* the question the scenario answers */
    char model[128];           /* e.g. "llama2-7b" */
    double tokens_per_step;    /* per GPU; 0 if not a language model */
    double samples_per_step;   /* per GPU */
    char settings[1024];       /* one line: the knobs that decide memory */
    char strategy[32];         /* "none", "ddp", "zero2", ... */
    char interconnect[48];     /* link the collectives run on (and the network between nodes) */
    double ds_estimate_bytes;  /* DeepSpeed's model-state estimator for this plan, 0 = n/a */
    double host_bytes;         /* bytes the plan keeps in host memory (offload) */
    double host_capacity;      /* host RAM available to it, bytes (0 = unknown) */
    double managed_bytes;      /* unified memory outside the allocator (paged optimizer state) */
    char notes[16384];         /* what the planner could not model, one line each (a compiled
                                  * Flux run's partitioner notes list some hundred tensors) */
    char deepspeed_read[1024]; /* a DeepSpeed JSON config: what was read from it ("" = none) */
    char deepspeed_unknown[512]; /* its keys DeepSpeed does not know, comma-separated */
    char overrides[1024];      /* the --set overrides, comma-separated (titles follow them) */
    char alloc_conf[512];      /* PYTORCH_CUDA_ALLOC_CONF as applied */
    bool alloc_conf_from_env;  /* it came from the environment (cmd_run sets this) */
    int64_t n_params;          /* the base model's parameters (numel summed, before adapters),
                                  -1 = unknown */
    int64_t n_trainable;       /* parameters that require grad, adapters included, -1 = unknown */
    char knobs[512];           /* settings in effect that the "what would help" changes start
                                  from (sim/variants.c), as space-separated key=value words
                                  (plan.lua's `knobs`) */
    struct PpPlan *pp;         /* owned: the pipeline rank this plan is (sim/pipeline.h), NULL
                                  without pipeline parallelism */
    bool graph_reads_allocator; /* building the graph read the allocator settings (plan.lua
                                   watches): false means the graph is the same whatever they
                                   are, so a run that changes only them may reuse it */
} Plan;

typedef struct ScenarioOptions {
    const char *const *sets;   /* "key=value" overrides, borrowed */
    int n_sets;
    bool unsafe;               /* open io/os/package in the Lua state */
    const char *typed_file;    /* a file the user named on the command line (vrsim CONFIG.yaml's
                                  trainer config), which the scenario may read as typed; NULL =
                                  none. Borrowed */
    const char *typed_launcher; /* the launcher's config typed beside it (--accelerate FILE), read
                                  as typed too; NULL = none. Borrowed */
    const char *lua_dir;       /* the project's lua/ folder; NULL = found from the executable */
    long instruction_limit;    /* 0 = default */
    size_t memory_limit;       /* bytes, 0 = default */
    uint64_t *read_hash;       /* NULL, or a hash (vr_hash) into which the load folds the name and
                                  bytes of every file it reads (modules, configs), in order */
} ScenarioOptions;

/* Loads the scenario file at path. On failure returns VR_EINVAL (or VR_ENOMEM) with a one-line
 * message naming the file and line in err. The caller owns *out (plan_free). */
VrStatus scenario_load(const char *path, const ScenarioOptions *opts, Plan **out /* OUT */,
                       char *err, size_t errlen);

/* The same for a scenario given as source text; chunkname names it in messages and dir is
 * the folder `require` may also search (NULL: none). */
VrStatus scenario_load_source(const char *chunkname, const char *src, const char *dir,
                              const ScenarioOptions *opts, Plan **out /* OUT */, char *err,
                              size_t errlen);

/* The same for a measured run: rec is one record of a validation .jsonl (the format of
 * docs/validation.md, "Record format"), which lua/vrsim/record.lua turns into a scenario table as data (no
 * part of it becomes Lua source); steps and rank are what to simulate. Returns VR_ENOTSUP with
 * the reason in err when the record cannot be modelled, VR_EINVAL when the planner rejects the
 * scenario it makes. chunkname names the record in messages. */
struct cJSON;
VrStatus scenario_load_record(const char *chunkname, const struct cJSON *rec, int steps, int rank,
                              const ScenarioOptions *opts, Plan **out /* OUT */, char *err,
                              size_t errlen);

void plan_free(Plan *p); /* NULL is a no-op */

/* A sandboxed Lua state, made as scenario_load_source makes its own, in which every module
 * under lua/ has already been require()d (and compiled): commands that load one scenario many
 * times (sweep, maxbatch, shop) make one, then fork a child per point that loads the scenario in
 * its copy with scenario_load_source_in, so no point compiles the modules again. dir is the
 * scenario's folder (as for scenario_load_source); opts->unsafe must be the loads' own. A module
 * that fails to load is left out (a scenario that requires it sees the error then). */
typedef struct ScenarioState ScenarioState;
VrStatus scenario_state_new(const ScenarioOptions *opts, const char *dir,
                            ScenarioState **out /* OUT */, char *err, size_t errlen);
void scenario_state_free(ScenarioState *s); /* NULL is a no-op */

/* scenario_load_source in the state s instead of a fresh one. s is used up (it may only be
 * freed afterwards): load in a forked copy to keep the original for the next point. */
VrStatus scenario_load_source_in(ScenarioState *s, const char *chunkname, const char *src,
                                 const ScenarioOptions *opts, Plan **out /* OUT */, char *err,
                                 size_t errlen);

/* scenario_load_source_in that keeps s for further loads: with base NULL, the first load in s (a
 * fresh state, as scenario_state_new made it); with base, a later one that reuses base's graph
 * (base the plan of this state's previous load without base) where that graph read nothing that
 * differs between the two scenarios (lua/vrsim/plan.lua P.rebuild): the plan borrows it
 * (graph_borrowed), and is what scenario_load_source would give. Where the graph cannot be reused,
 * VR_ENOTSUP with the reason in err; a later load with base may still succeed. Any other failure
 * leaves s unfit for more loads (free it). s may then only be used by this function. */
VrStatus scenario_load_source_kept(ScenarioState *s, const char *chunkname, const char *src,
                                   const Plan *base, const ScenarioOptions *opts,
                                   Plan **out /* OUT */, char *err, size_t errlen);

/* Runs the chunk src (named chunkname in messages) in a scenario's sandboxed state (dir as for
 * scenario_load_source) and returns the string it returns in *out (the caller frees it): the
 * scenario text `vrsim CONFIG.yaml --print-scenario` prints. VR_EINVAL with the message in err
 * when it raises or returns no string. */
VrStatus scenario_eval_text(const char *chunkname, const char *src, const char *dir,
                            const ScenarioOptions *opts, char **out /* OUT */, char *err,
                            size_t errlen);

/* Runs require(module)[fn](flag) in the sandbox and returns the string it returns in *out (the
 * caller frees it). For catalog listings such as `vrsim gpus`. */
VrStatus scenario_report_text(const char *module, const char *fn, bool flag, char **out /* OUT */,
                              char *err, size_t errlen);

/* The engine settings that simulate plan p as `vrsim SCENARIO` does (steps, cuBLAS handles,
 * device, calibrated costs, host dispatch); record_timeline as given. Every command that runs a
 * plan should use this, so their figures agree. p must outlive the engine run. */
struct EngineConfig;
void plan_engine_config(const Plan *p, bool record_timeline, struct EngineConfig *out /* OUT */);

/* Finds the project's lua/ folder: $VRSIM_LUA, then lua/ beside the executable, then ./lua.
 * Writes it into buf and returns true, or false if none exists. */
bool scenario_find_lua_dir(char *buf, size_t n);

#endif
