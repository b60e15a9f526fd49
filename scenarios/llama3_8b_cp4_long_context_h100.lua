-- Llama 3 8B on one node of 8 H100 SXM with context parallelism: how long a context fits?
-- torchtitan's layout for long sequences: CP 4 (ring attention over the node's NVLink) and FSDP2
-- over dp_shard 2 x cp 4 (torchtitan folds cp into FSDP's mesh); bf16, AdamW foreach, full
-- activation checkpointing, one sequence per CP group. Each rank runs 1/4 of the sequence (the
-- head-tail chunks r and 7 - r), every activation, the rotary tables and the logits of its
-- tokens only; attention all-gathers the group's keys and values once a layer (torch's
-- "allgather" rotate method) and merges the four partial outputs (lua/strategies/cp.lua).
--
-- vrsim's answer: 131072 tokens fit with CP 4 (76.2 GiB reserved of 78.4: the logits' fp32
-- log-softmax of the rank's 32768 tokens over the 128256-entry vocabulary is the peak), 13.4 s a
-- step, 2438 tokens/s per GPU. Without CP (FSDP2 over all 8) the longest that fits is 34370
-- tokens (vrsim maxbatch ... --field seq --set parallel.cp=1); 65536 does not. CP 8 fits 262144.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_8b_cp4_long_context_h100.lua
--   FITS: peak reserved 76.33 GiB of 78.43 GiB usable (97.3 %), 2.10 GiB headroom
--   $ ./vrsim scenarios/llama3_8b_cp4_long_context_h100.lua --set parallel.cp=1 --set seq=65536
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'log_softmax'
--   $ ./vrsim scenarios/llama3_8b_cp4_long_context_h100.lua --set parallel.cp=8 --set seq=262144
--   FITS: peak reserved 76.71 GiB of 78.43 GiB usable (97.8 %), 1.73 GiB headroom
return {
  title = "Llama 3 8B on 8 H100 SXM, CP 4 x FSDP 2, one 131072-token sequence, full checkpointing",
  hardware = { gpu = "h100_sxm", count = 8 },
  model = { config = "configs/llama-3-8b.json" },
  training = { micro_batch = 1, seq = 131072, precision = "bf16", checkpointing = true, steps = 2,
               parallel = { cp = 4 } },
}
