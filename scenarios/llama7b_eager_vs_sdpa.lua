-- LLaMA2-7B full bf16 fine-tune on one H200 with long sequences (4096 tokens): what does
-- eager attention (the s x s score and probability matrices, kept for backward) cost against
-- SDPA (cuDNN/flash: no s x s matrix)?
--
-- Answer (vrsim run 2026-11-30, ./vrsim scenarios/llama7b_eager_vs_sdpa.lua [--set attention=eager]):
--   with SDPA it fits easily; with eager attention it does not fit at all.
--     sdpa   FITS: peak reserved 64.47 GiB of 139.05 GiB usable (46.4 %)   <- this file
--            step 0 (no optimizer state yet) forward peak 37577.6 MiB allocated; step time
--            371.2 ms (roofline, uncalibrated)
--     eager  DOES NOT FIT: CUDA out of memory in step 1 at op 'layers.27.q_rotary.cat'
--            step 0 still fits (its forward peaks at 135865.6 MiB allocated, 98288 MiB more
--            than SDPA: the 32 layers' fp32 probabilities, 2048 MiB each, and their bf16
--            copies are kept for backward); step 1 adds the 25705 MiB of AdamW state and fails
--     eager with --set checkpointing=true  FITS: peak reserved 69.00 GiB (49.6 %)
return {
  title = "LLaMA2-7B at 4096 tokens on an H200: SDPA against eager attention",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", checkpointing = false, steps = 4 },
  allocator = { conf = "" },
}
