/* test_invariants.c: the engine's invariants (engine.c's opening comment, and the allocator's
 * alloc_check) hold after every op of real graphs: each configuration below is planned by the
 * Lua model layer as `vrsim` plans it, then played with EngineConfig.check_invariants, under the
 * caching allocator and under expandable segments. A broken invariant fails the run with
 * VR_EINVAL naming the op and the invariant.
 * Run from the repository root (make test does): lua_dir is "lua". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "engine.h"
#include "scenario.h"

/* Llama-2-7B's shapes cut to 2 layers, and a small SDXL; each line the training table's fields */
static const char *const LLAMA[] = {
    "precision = 'bf16'",
    "precision = 'bf16', build = 'cast', checkpointing = true",
    "precision = 'amp_bf16', optimizer_impl = 'fused', grad_accum = 2",
    "precision = 'fp32', optimizer = 'sgd', attention = 'eager'",
    "precision = 'bf16', checkpointing = true, checkpoint_scope = 'attention'",
    "precision = 'lora_bf16', lora = { r = 16, targets = 'all-linear' }, checkpointing = true",
    "precision = 'lora_bf16', quant = 'nf4', optimizer = 'adamw8bit'",
    "precision = 'bf16', strategy = 'ddp', grad_accum = 2",
    "precision = 'bf16', strategy = 'zero1'",
    "precision = 'bf16', strategy = 'zero2', zero = { offload_optimizer = 'cpu' }",
    "precision = 'bf16', strategy = 'zero3', checkpointing = true",
    "precision = 'mp_fp32', strategy = 'fsdp2', zero = { raf = false }",
    "precision = 'bf16', strategy = 'fsdp2', grad_accum = 2, zero = { offload_param = 'cpu', offload_optimizer = 'cpu' }",
    "precision = 'lora_bf16', quant = 'nf4', strategy = 'fsdp2', checkpointing = true",
    "precision = 'bf16', empty_cache_after_build = true",
};

static void run_checked(const char *src, const char *what, const char *conf) {
    ScenarioOptions o = {.lua_dir = "lua"};
    Plan *p = NULL;
    char err[1024] = "";
    if (scenario_load_source("invariants.lua", src, NULL, &o, &p, err, sizeof err) != VR_OK)
        fail_msg("%s: does not load: %s", what, err);
    EngineConfig ec;
    plan_engine_config(p, false, &ec);
    ec.check_invariants = true;
    ec.steps = 3;
    AllocConfig ac = p->alloc;
    ac.expandable_segments = conf != NULL;
    SimResult *r = NULL;
    VrStatus st = engine_run(p->graph, &ec, &ac, &r, err, sizeof err);
    if (st != VR_OK) fail_msg("%s%s: %s (%s)", what, conf ? " (expandable segments)" : "", vr_status_str(st), err);
    engine_result_free(r);
    plan_free(p);
}

static void test_llama_configurations(void **state) {
    (void)state;
    char src[1024];
    for (size_t i = 0; i < sizeof LLAMA / sizeof *LLAMA; i++) {
        snprintf(src, sizeof src,
                 "return { hardware = { gpu = 'h200', count = 2 }, model = { arch = 'llama2', size = '7b', layers = 2 },\n"
                 "  training = { micro_batch = 2, seq = 512, steps = 3, %s } }\n",
                 LLAMA[i]);
        run_checked(src, LLAMA[i], NULL);
        run_checked(src, LLAMA[i], "expandable_segments:True");
    }
}

static void test_sdxl(void **state) {
    (void)state;
    run_checked("return { hardware = { gpu = 'h200' }, model = { arch = 'sdxl' },\n"
                "  training = { micro_batch = 1, resolution = 256, precision = 'bf16', checkpointing = true, steps = 3 } }\n",
                "sdxl 256 px", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_configurations),
        cmocka_unit_test(test_sdxl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
