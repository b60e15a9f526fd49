-- A DeepSpeed JSON config used as is: LLaMA2-7B with configs/ds_zero2.json (ZeRO-2, 2e8-element
-- buckets, micro-batch 2) on 8x A100-40GB. Does it fit per GPU? Yes: 31.6 GiB reserved of
-- 38.9 GiB; on 4 GPUs it does not (the Adam state partition no longer fits:
-- `vrsim scenarios/llama7b_deepspeed_json.lua --set count=4` exits 3). Unknown
-- zero_optimization keys are errors; keys that do not change memory are listed under notes.
return {
  title = "LLaMA2-7B with a user's DeepSpeed ZeRO-2 JSON on 8x A100-40GB",
  hardware = { gpu = "a100_40g", count = 8 },
  model = { arch = "llama2", size = "7b" },
  training = { seq = 2048, precision = "bf16", checkpointing = true, steps = 3,
               deepspeed = "configs/ds_zero2.json" },
}
