-- LLaMA2-7B full fine-tune in bf16 on one H200: does it fit at micro-batch 1 x 2048 tokens,
-- and how much headroom is left?
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama7b_h200.lua
--   FITS: peak reserved 66.57 GiB of 139.05 GiB usable (47.9 %), 72.49 GiB headroom
--   $ ./vrsim scenarios/llama7b_h200.lua --set optimizer_impl=fused
--   FITS: peak reserved 54.26 GiB of 139.05 GiB usable (39.0 %), 84.79 GiB headroom
return {
  title = "LLaMA2-7B full fine-tune, bf16 weights and AdamW state, on one H200",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", checkpointing = false, steps = 4 },
  allocator = { conf = "" },
}
