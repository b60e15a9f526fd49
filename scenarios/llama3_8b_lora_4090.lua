-- Llama-3-8B with the most common LoRA recipe (all-linear, r = 16, alpha 32, dropout 0.05) on a
-- 24 GB RTX 4090 at 2048 tokens: does it fit, and what is the largest micro-batch?
--
-- Answer (vrsim, 2026-12-01: ./vrsim scenarios/llama3_8b_lora_4090.lua [--set ...]):
--   with the weights loaded in bf16 and gradient checkpointing it fits up to micro-batch 2
--   (./vrsim maxbatch scenarios/llama3_8b_lora_4090.lua: "micro_batch = 2 fits (peak reserved
--   22.93 GiB of 22.97 GiB, step 3440.4 ms, 1191 tokens/s); 3 does not"), with 40 MiB to spare.
--     as this file (N=1)   FITS: peak reserved 20.30 GiB of 22.97 GiB usable (88.4 %)
--     --set checkpointing=false
--                          DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.11.mlp.up_proj.lora_scale'
--     --set build=cast     DOES NOT FIT: CUDA out of memory while building the model
-- Measured (validation/records/llama_h200_gen_families.jsonl, gen-cap23521-*): on an H200 capped at the
-- 23521 MiB this card leaves the allocator, batch 1 peaks at 19411.55 MiB allocated and 20822 MiB
-- reserved (vrsim: 19411.53 and 20822 for the same cap on the H200); batch 2 runs out of memory
-- there, as vrsim predicts for the H200 (cuDNN attention), while on the 4090 (flash attention)
-- vrsim has it fit by 40 MiB.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_8b_lora_4090.lua
--   FITS: peak reserved 20.31 GiB of 22.97 GiB usable (88.4 %), 2.66 GiB headroom
return {
  title = "Llama-3-8B, all-linear LoRA r16, on a 24 GB RTX 4090 at 2048 tokens",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/llama-3-8b.json" },
  training = { micro_batch = 1, seq = 2048, precision = "lora_bf16", build = "direct",
               checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" } },
}
