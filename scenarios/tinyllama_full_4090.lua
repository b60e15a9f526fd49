-- TinyLlama-1.1B (grouped-query attention, 4 key/value heads) full bf16 fine-tune with gradient
-- checkpointing on an RTX 4090 at 2048 tokens: how large a micro-batch?
--
-- Answer (vrsim, 2026-12-01: ./vrsim maxbatch scenarios/tinyllama_full_4090.lua):
--   "micro_batch = 14 fits (peak reserved 22.09 GiB of 22.97 GiB, step 3735.5 ms, 7676
--   tokens/s); 15 does not".
--     as this file (N=1)   FITS: peak reserved 10.97 GiB of 22.97 GiB usable (47.8 %)
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/tinyllama_full_4090.lua
--   FITS: peak reserved 10.97 GiB of 22.97 GiB usable (47.8 %), 12.00 GiB headroom
return {
  title = "TinyLlama-1.1B full bf16 fine-tune on an RTX 4090 at 2048 tokens",
  hardware = { gpu = "rtx4090" },
  model = { config = "configs/tinyllama-1.1b.json" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", build = "direct", checkpointing = true },
}
