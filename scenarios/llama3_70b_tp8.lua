-- Llama 3 70B on 8 nodes of 8 H100 SXM: tensor parallelism over the 8 GPUs of each node (NVLink)
-- and FSDP2 over the 8 nodes (8x 400 Gb/s InfiniBand NDR per node, rail-optimised), as
-- torchtitan lays out its 2-D runs: training.parallel = { tp = 8 } and dp_shard the rest.
-- torchtitan's plan with sequence parallelism (lua/strategies/tp.lua): each GPU holds 1/8 of every
-- Linear, embedding and head and the whole norms, and FSDP2 shards that over the 8 nodes; between
-- the blocks the activations are 1/8 of the sequence, all-gathered before attention and the MLP
-- and reduce-scattered after; the head's logits are each rank's 1/8 of the vocabulary (loss
-- parallel). bf16, AdamW foreach, full activation checkpointing per decoder layer, micro-batch
-- 2 x 8192 tokens per tensor-parallel group.
--
-- Variants: --set parallel.tp=4 (TP 4 x FSDP 16), --set checkpointing=false.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama3_70b_tp8.lua
--   FITS: peak reserved 16.93 GiB of 78.43 GiB usable (21.6 %), 61.50 GiB headroom
--   $ ./vrsim scenarios/llama3_70b_tp8.lua --set parallel.tp=4
--   FITS: peak reserved 25.44 GiB of 78.43 GiB usable (32.4 %), 52.99 GiB headroom
--   $ ./vrsim scenarios/llama3_70b_tp8.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.62.self_attn.o_proj: reduce_scatter (chunk cat)'
return {
  title = "Llama 3 70B, TP 8 inside each node x FSDP2 over 8 nodes, 64 H100 SXM, micro-batch 2 x 8192",
  hardware = { gpu = "h100_sxm", count = 64, gpus_per_node = 8, nics_per_node = 8, network = "ib_ndr" },
  model = { config = "configs/llama-3-70b.json" },
  training = { micro_batch = 2, seq = 8192, precision = "bf16", checkpointing = true, steps = 3,
               parallel = { tp = 8 } },
}
