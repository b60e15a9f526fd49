-- How much does LoRA (r = 8 on q_proj and v_proj, peft) save against a full bf16 fine-tune of
-- LLaMA2-7B on an A100-80GB, both with gradient checkpointing, micro-batch 1 x 2048?
--
-- Answer (./vrsim scenarios/llama7b_lora_saving.lua, then --set precision=bf16):
--   LoRA        FITS: peak reserved 25.67 GiB of 78.45 GiB usable (32.7 %)
--   full bf16   FITS: peak reserved 63.09 GiB of 78.45 GiB usable (80.4 %)
--   LoRA needs 59 % less: no weight gradients and AdamW state for 6.7 B frozen parameters (the
--   frozen bf16 weights, 12.6 GiB, remain). Step time 618.8 ms against 856.8 ms (vrsim,
--   2026-12-01; the H200's measured profile carried to the A100, as the step time line says):
--   frozen layers skip their weight-gradient GEMMs.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_lora_saving.lua
--   FITS: peak reserved 14.19 GiB of 78.45 GiB usable (18.1 %), 64.26 GiB headroom
--   $ ./vrsim scenarios/llama7b_lora_saving.lua --set precision=bf16
--   FITS: peak reserved 64.46 GiB of 78.45 GiB usable (82.2 %), 13.99 GiB headroom
return {
  title = "LLaMA2-7B: LoRA r=8 (q, v) against a full bf16 fine-tune on an A100-80GB",
  hardware = { gpu = "a100_80g" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "lora_bf16", checkpointing = true },
}
