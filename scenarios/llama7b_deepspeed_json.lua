-- A DeepSpeed JSON config used as is: LLaMA2-7B with configs/ds_zero2.json (ZeRO-2, 2e8-element
-- buckets, micro-batch 2) on 8x A100-40GB. Does it fit per GPU?
--
-- Answer (vrsim scenarios/llama7b_deepspeed_json.lua): FITS, peak reserved 30.91 GiB of
-- 38.88 GiB usable (79.5 %); on 4 GPUs (--set count=4) it does not fit. Unknown zero_optimization keys are errors; keys that do not change memory are
-- listed under notes.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_deepspeed_json.lua
--   FITS: peak reserved 30.88 GiB of 38.88 GiB usable (79.4 %), 8.00 GiB headroom
--   $ ./vrsim scenarios/llama7b_deepspeed_json.lua --set count=4
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'Adam state (partition)'
return {
  title = "LLaMA2-7B with a user's DeepSpeed ZeRO-2 JSON on 8x A100-40GB",
  hardware = { gpu = "a100_40g", count = 8 },
  model = { arch = "llama2", size = "7b" },
  training = { seq = 2048, precision = "bf16", build = "direct", checkpointing = true, steps = 3,
               deepspeed = "configs/ds_zero2.json" },
}
