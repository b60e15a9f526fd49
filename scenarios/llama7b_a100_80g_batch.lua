-- LLaMA2-7B full fine-tune in bf16 (AdamW foreach) on one A100-80GB at 2048 tokens per
-- sequence: what is the largest micro-batch that fits?
--
-- Answer (vrsim, 2026-12-01: ./vrsim scenarios/llama7b_a100_80g_batch.lua --set micro_batch=N):
--   the largest micro-batch that fits is 2 (./vrsim maxbatch
--   scenarios/llama7b_a100_80g_batch.lua:
--   "micro_batch = 2 fits (peak reserved 64.45 GiB of 78.45 GiB, step 1184.8 ms, 3457 tokens/s);
--    3 does not").
--     N=1  FITS: peak reserved 63.76 GiB of 78.45 GiB usable (81.3 %)
--     N=2  FITS: peak reserved 64.45 GiB of 78.45 GiB usable (82.2 %)   <- this file
--     N=3  DOES NOT FIT: CUDA out of memory in step 1 at op 'log_softmax'
--          (tried to allocate 750.00 MiB with 5.07 GiB reserved but unallocated: fragmentation)
--     N=4  DOES NOT FIT: CUDA out of memory in step 1 at op 'layers.27.mlp.silu'
--   N=3 does fit with --alloc-conf expandable_segments:True (75.36 GiB, 96.1 % reserved).
--   The OOMs come in step 1, not step 0: the AdamW state made in step 0 is what tips it over.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_a100_80g_batch.lua --set micro_batch=1
--   FITS: peak reserved 66.58 GiB of 78.45 GiB usable (84.9 %), 11.87 GiB headroom
--   $ ./vrsim scenarios/llama7b_a100_80g_batch.lua
--   FITS: peak reserved 64.29 GiB of 78.45 GiB usable (82.0 %), 14.16 GiB headroom
--   $ ./vrsim scenarios/llama7b_a100_80g_batch.lua --set micro_batch=3
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'log_softmax.backward'
--   $ ./vrsim scenarios/llama7b_a100_80g_batch.lua --set micro_batch=4
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'layers.27.mlp.mul'
--   $ ./vrsim scenarios/llama7b_a100_80g_batch.lua --set micro_batch=3 --alloc-conf expandable_segments:True
--   FITS: peak reserved 75.36 GiB of 78.45 GiB usable (96.1 %), 3.09 GiB headroom
return {
  title = "LLaMA2-7B full bf16 fine-tune on an A100-80GB: the largest micro-batch that fits",
  hardware = { gpu = "a100_80g" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 2, seq = 2048, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", checkpointing = false, steps = 4 },
  allocator = { conf = "" },
}
