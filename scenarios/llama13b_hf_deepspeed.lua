-- The Hugging Face docs' DeepSpeed examples used as they are published (transformers
-- docs/source/en/deepspeed.md, "ZeRO configuration"): configs/hf_docs_zero3.json (ZeRO-3, CPU
-- offload of optimizer and parameters, "auto" bucket sizes) with LLaMA2-13B on 8x A100-80GB,
-- micro-batch 4 x 2048 with gradient checkpointing and 4 micro-batches per step. The ZeRO-2
-- example (configs/hf_docs_zero2.json, the comma the docs miss added) runs with
-- --set training.deepspeed=configs/hf_docs_zero2.json.
--
-- vrsim resolves the "auto" values as the HF Trainer does (reduce_bucket_size = 5120^2,
-- stage3_prefetch_bucket_size = 0.9 x 5120^2, stage3_param_persistence_threshold = 10 x 5120)
-- and prints what it read under "DeepSpeed config read".
--
-- Answer (vrsim scenarios/llama13b_hf_deepspeed.lua, 2026-12-01): FITS, peak reserved 12.09 GiB
-- of 78.45 GiB usable (15.4 %), step 20.1 s (roofline figures: no calibrated A100 profile).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama13b_hf_deepspeed.lua
--   FITS: peak reserved 12.05 GiB of 78.45 GiB usable (15.4 %), 66.39 GiB headroom
--   $ ./vrsim scenarios/llama13b_hf_deepspeed.lua --set training.deepspeed=configs/hf_docs_zero2.json
--   FITS: peak reserved 37.67 GiB of 78.45 GiB usable (48.0 %), 40.78 GiB headroom
return {
  title = "LLaMA2-13B with the HF docs' ZeRO-3 offload config, 8x A100-80GB, 4 x 2048 x 4 accumulation",
  hardware = { gpu = "a100_80g", count = 8, host = "dgx_a100" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 4, seq = 2048, grad_accum = 4, precision = "bf16", build = "direct",
               checkpointing = true, steps = 3, deepspeed = "configs/hf_docs_zero3.json" },
}
