-- Llama 3 70B on 64 H100s (8 nodes of 8, 8x 400 Gb/s InfiniBand NDR per node) as torchtitan lays
-- out its 3-D runs: TP 8 inside each node, PP 4 (1F1B, 8 micro-batches of 1 x 8192 tokens) over
-- the nodes, FSDP 2 over the rest; bf16, AdamW, full activation checkpointing. Does each stage
-- fit, what is the busiest stage's peak, tokens/s and the bubble?
--
-- Each pipeline rank's graph is its stage, tensor-parallel (torchtitan's plan with sequence
-- parallelism: 1/8 of every Linear, the embeddings and the head; each stage sends 1/8 of the
-- sequence), then fully_shard over dp_shard 2 with torchtitan's reshard_after_forward = False for
-- a pipeline: the stage's parameters are gathered at its first forward and kept all step, its
-- gradients accumulate unsharded over the 8 micro-batches and are reduce-scattered once
-- (docs/pipeline.md). torchtitan's split: 20, 21, 20 and 19 decoder layers.
--
-- vrsim's answer: every stage fits; the busiest is stage 0 (the embeddings and 20 layers), 18.6 GiB
-- allocated at peak (24.0 GiB reserved): its 2.3 G parameters' bf16 weights whole (4.2 GiB) beside
-- their shard, the unsharded gradients, the AdamW state of the shard. The step takes 4.02 s, the
-- bubble 28 % of it (1F1B's (p - 1) / (m + p - 1) is 27 % on equal stages), 509 tokens/s per GPU
-- (the dp_shard pair sits one rank a node: its reduce-scatter crosses the NICs).
-- Interleaved1F1B (--set parallel.pp_schedule=Interleaved1F1B) cuts the bubble to 16 %.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_70b_tp8_pp4_fsdp2.lua
--   FITS: peak reserved 24.11 GiB of 78.43 GiB usable (30.7 %), 54.32 GiB headroom
--   $ ./vrsim scenarios/llama3_70b_tp8_pp4_fsdp2.lua --set parallel.pp_schedule=Interleaved1F1B
--   FITS: peak reserved 23.09 GiB of 78.43 GiB usable (29.4 %), 55.34 GiB headroom
--   $ ./vrsim scenarios/llama3_70b_tp8_pp4_fsdp2.lua --set checkpointing=false
--   FITS: peak reserved 70.92 GiB of 78.43 GiB usable (90.4 %), 7.51 GiB headroom
return {
  title = "Llama 3 70B on 64 H100s: TP 8 x PP 4 (1F1B, 8 micro-batches of 1 x 8192) x FSDP 2, full checkpointing",
  hardware = { gpu = "h100_sxm", count = 64, gpus_per_node = 8, nics_per_node = 8, network = "ib_ndr" },
  model = { config = "configs/llama-3-70b.json" },
  training = { micro_batch = 1, seq = 8192, precision = "bf16", build = "direct", checkpointing = true,
               steps = 2, parallel = { tp = 8, pp = 4, dp_shard = 2, pp_schedule = "1F1B", pp_microbatches = 8 } },
}
