-- Llama 3 70B on H100s as a 4-stage pipeline (1F1B, 8 micro-batches of 1 x 8192 tokens, full
-- activation checkpointing), torchtitan's split: does each stage fit, which is the busiest?
--
-- The layout of 64 H100s with TP 8, PP 4 and FSDP 2 is scenarios/llama3_70b_tp8_pp4_fsdp2.lua;
-- this is its pipeline alone, each stage on one GPU: 20, 21, 20 and 19 decoder layers (the embeddings and the head
-- counted as a layer each), each stage's bf16 weights, gradients and AdamW state whole. Llama 3
-- 8B's pipeline (--set model.config=configs/llama-3-8b.json) fits: its last stage, with the head
-- and the loss's fp32 logits, is the busiest; the bubble takes 29 % of the step (1F1B's
-- (p - 1) / (m + p - 1) is 27 % on equal stages).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_70b_pp4_h100.lua --set model.config=configs/llama-3-8b.json
--   FITS: peak reserved 31.42 GiB of 78.43 GiB usable (40.1 %), 47.01 GiB headroom
--   $ ./vrsim scenarios/llama3_70b_pp4_h100.lua
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.0.mlp.down_proj.backward'
return {
  title = "Llama 3 70B, pipeline of 4 H100s (1F1B, 8 micro-batches of 1 x 8192), full checkpointing",
  hardware = { gpu = "h100_sxm", count = 4, gpus_per_node = 8 },
  model = { config = "configs/llama-3-70b.json" },
  training = { micro_batch = 1, seq = 8192, precision = "bf16", build = "direct", checkpointing = true,
               steps = 2, parallel = { pp = 4, pp_schedule = "1F1B", pp_microbatches = 8 } },
}
