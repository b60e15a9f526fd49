-- Llama-3.2-1B (tied embeddings, a 128,256-token vocabulary, head_dim 64) full fine-tune in bf16 on
-- one A10G (24 GB, an AWS g5 instance) at 2048 tokens: which micro-batch fits?
--
-- Answer (vrsim, 2026-12-01: ./vrsim scenarios/llama32_1b_full_a10g.lua [--set ...]):
--   micro-batch 2 without checkpointing (./vrsim maxbatch scenarios/llama32_1b_full_a10g.lua:
--   "micro_batch = 2 fits (peak reserved 19.86 GiB of 21.38 GiB, step 1093.4 ms, 3746
--   tokens/s); 3 does not"), 3 with it (--set checkpointing=true: 19.22 GiB, 3300 tokens/s).
--   The loss dominates: at 2048 tokens the fp32 logits are 1 GiB per sequence.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama32_1b_full_a10g.lua
--   FITS: peak reserved 14.53 GiB of 21.38 GiB usable (68.0 %), 6.85 GiB headroom
return {
  title = "Llama-3.2-1B full bf16 fine-tune on one A10G (24 GB) at 2048 tokens",
  hardware = { gpu = "a10g" },
  model = { config = "configs/llama-3.2-1b.json" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", build = "direct" },
}
