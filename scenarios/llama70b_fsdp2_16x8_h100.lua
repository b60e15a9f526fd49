-- LLaMA2-70B with FSDP2 on 16 nodes of 8x H100 SXM, each node with 8x 400 Gb/s InfiniBand NDR
-- NICs (rail-optimised, one per GPU, as DGX/HGX H100): tokens/s and where the time goes.
-- bf16 parameters and gradients (FSDP2 over bf16 modules), AdamW foreach, full activation
-- checkpointing per decoder layer, micro-batch 2 x 4096 tokens per GPU.
--
-- The H100's figures are the H200's measured profile carried through the H100's dense peak at
-- the H200's measured in-step clock and its 3.35 TB/s HBM (lua/hw/carry.lua, docs/step-time.md);
-- cross-node collectives run at 8 NICs x 47 GB/s of bus bandwidth per rank (sim/collective.h).
-- Variants: --set training.zero.shard_group=16 (HSDP: shard over two nodes, replicate over 8),
-- --set nics_per_node=1 (one NIC per node), --set training.zero.reduce_dtype=fp32.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama70b_fsdp2_16x8_h100.lua
--   FITS: peak reserved 30.81 GiB of 78.43 GiB usable (39.3 %), 47.62 GiB headroom
--   $ ./vrsim scenarios/llama70b_fsdp2_16x8_h100.lua --set training.zero.shard_group=16
--   FITS: peak reserved 61.25 GiB of 78.43 GiB usable (78.1 %), 17.18 GiB headroom
--   $ ./vrsim scenarios/llama70b_fsdp2_16x8_h100.lua --set nics_per_node=1
--   FITS: peak reserved 30.81 GiB of 78.43 GiB usable (39.3 %), 47.62 GiB headroom
return {
  title = "LLaMA2-70B, FSDP2, 16 nodes x 8 H100 SXM, 8x 400G NDR per node, micro-batch 2 x 4096",
  hardware = { gpu = "h100_sxm", count = 128, gpus_per_node = 8, nics_per_node = 8, network = "ib_ndr" },
  model = { arch = "llama2", size = "70b" },
  training = { micro_batch = 2, seq = 4096, precision = "bf16", build = "direct", strategy = "fsdp2",
               checkpointing = true, steps = 3,
               -- built on the meta device and sharded before materialising, as torchtitan does
               zero = { init = "meta" } },
}
