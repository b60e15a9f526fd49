-- Qwen2.5-0.5B (q/k/v biases, tied embeddings, a 151,936-token vocabulary) full bf16 fine-tune
-- on an RTX 4090 at 2048 tokens: which micro-batch fits?
--
-- Answer (vrsim, 2026-12-01: ./vrsim scenarios/qwen25_05b_full_4090.lua [--set ...]):
--   micro-batch 2 (./vrsim maxbatch scenarios/qwen25_05b_full_4090.lua: "micro_batch = 2 fits
--   (peak reserved 16.90 GiB of 22.97 GiB, step 304.1 ms, 13467 tokens/s); 3 does not"), 5 with
--   checkpointing (--set checkpointing=true: 22.21 GiB). Half a billion parameters, but the
--   vocabulary makes the loss 1.2 GiB of fp32 logits per sequence, three times over.
-- Measured (gen-cap23521-qwen25-05b-*): on an H200 capped at 23521 MiB, batch 2 fits at 15437.82
-- MiB allocated / 17452 reserved (vrsim on that cap: 15437.01 / 17448 predicted before the run, 15437.51 / 17452 now that the
-- tied head's constructed weight is modelled), batch 3 runs out at step
-- 1 (vrsim: step 1).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/qwen25_05b_full_4090.lua
--   FITS: peak reserved 10.25 GiB of 22.97 GiB usable (44.6 %), 12.72 GiB headroom
return {
  title = "Qwen2.5-0.5B full bf16 fine-tune on an RTX 4090 at 2048 tokens",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/qwen2.5-0.5b.json" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", build = "direct" },
}
