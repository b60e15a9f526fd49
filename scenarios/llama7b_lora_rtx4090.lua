-- LLaMA2-7B LoRA fine-tune (r = 8 on q and v, bf16 base weights) on one RTX 4090 (24 GB) at
-- 2048 tokens per sequence: what does it take to fit, and at which micro-batch?
--
-- Answer (vrsim, 2026-12-01: ./vrsim scenarios/llama7b_lora_rtx4090.lua [--set ...]):
--   it fits only with the weights loaded straight in bf16 and with gradient checkpointing, up
--   to micro-batch 7 (./vrsim maxbatch scenarios/llama7b_lora_rtx4090.lua:
--   "micro_batch = 7 fits (peak reserved 21.83 GiB of 22.97 GiB, step 8120.0 ms, 1766 tokens/s);
--    8 does not").
--     as this file (build direct, checkpointing, N=4)
--               FITS: peak reserved 18.92 GiB of 22.97 GiB usable (82.3 %)   <- this file
--               peak 18093.9 MiB allocated at 'log_softmax.backward': frozen parameters
--               12868.5 MiB, activations 3177.0, temporaries 2016.3, allocator slack 1276.1
--     --set build=cast (built in fp32, then .to(bf16), as from_config does)
--               DOES NOT FIT: CUDA out of memory while building the model (at 'parameters')
--     --set checkpointing=false --set micro_batch=1
--               DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.30.mlp.silu'
--     --set micro_batch=1  FITS: peak reserved 14.21 GiB (61.9 %)
--     --set micro_batch=2  FITS: peak reserved 15.78 GiB (68.7 %)
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_lora_rtx4090.lua
--   FITS: peak reserved 18.87 GiB of 22.97 GiB usable (82.1 %), 4.11 GiB headroom
--   $ ./vrsim scenarios/llama7b_lora_rtx4090.lua --set build=cast
--   DOES NOT FIT: CUDA out of memory while building the model (at 'parameters')
--   $ ./vrsim scenarios/llama7b_lora_rtx4090.lua --set checkpointing=false --set micro_batch=1
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.30.mlp.gate_proj'
--   $ ./vrsim scenarios/llama7b_lora_rtx4090.lua --set micro_batch=1
--   FITS: peak reserved 14.19 GiB of 22.97 GiB usable (61.8 %), 8.78 GiB headroom
--   $ ./vrsim scenarios/llama7b_lora_rtx4090.lua --set micro_batch=2
--   FITS: peak reserved 15.75 GiB of 22.97 GiB usable (68.6 %), 7.22 GiB headroom
return {
  title = "LLaMA2-7B LoRA on an RTX 4090: loading, checkpointing and the largest micro-batch",
  hardware = { gpu = "rtx4090" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 4, seq = 2048, precision = "lora_bf16", build = "direct",
               checkpointing = true, optimizer = "adamw", optimizer_impl = "foreach",
               attention = "sdpa", steps = 4 },
  allocator = { conf = "" },
}
