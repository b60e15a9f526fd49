-- LLaMA2-7B full bf16 fine-tune on one H200 with long sequences (4096 tokens): what does
-- eager attention (the s x s score and probability matrices, kept for backward) cost against
-- SDPA (cuDNN/flash: no s x s matrix)?
--
-- Answer (vrsim, 2026-11-30: ./vrsim scenarios/llama7b_eager_vs_sdpa.lua [--set
-- attention=eager]):
--   with SDPA it fits easily; with eager attention it does not fit at all.
--     sdpa   FITS: peak reserved 64.49 GiB of 139.05 GiB usable (46.4 %)   <- this file
--            step 0 (no optimizer state yet) forward peak 37577.6 MiB allocated (--json,
--            steps[0].fwd_peak_allocated_bytes); step time 453.7 ms (kernel costs from the
--            calibrated profile)
--     eager  DOES NOT FIT: CUDA out of memory in step 0 at op
--            'layers.31.self_attn.softmax.backward'
--            already in step 0, before any optimizer state: its forward peaks at 136095.5 MiB
--            allocated, 98517.9 MiB more than SDPA, mostly the 32 layers' fp32 softmax
--            probabilities (2048 MiB each) and their bf16 copies, kept for backward; the first
--            softmax backward then asks for 2048 MiB more
--     eager with --set checkpointing=true  FITS: peak reserved 73.05 GiB (52.5 %)
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_eager_vs_sdpa.lua
--   FITS: peak reserved 64.34 GiB of 139.05 GiB usable (46.3 %), 74.71 GiB headroom
--   $ ./vrsim scenarios/llama7b_eager_vs_sdpa.lua --set attention=eager
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'layers.26.self_attn.softmax'
--   $ ./vrsim scenarios/llama7b_eager_vs_sdpa.lua --set attention=eager --set checkpointing=true
--   FITS: peak reserved 65.49 GiB of 139.05 GiB usable (47.1 %), 73.56 GiB headroom
return {
  title = "LLaMA2-7B at 4096 tokens on an H200: SDPA against eager attention",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", checkpointing = false, steps = 4 },
  allocator = { conf = "" },
}
