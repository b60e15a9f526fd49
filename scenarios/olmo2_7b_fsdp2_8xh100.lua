-- OLMo-2-7B (norms after attention and MLP, q/k norms over the whole projections, every norm's
-- weight multiplied in fp32) fully fine-tuned with AMP bf16 and FSDP2 over one node of eight H100
-- SXM cards at its 4096-token context: what is the largest micro-batch per GPU, with and without
-- gradient checkpointing?
--
-- Answer (vrsim, 2026-12-05: ./vrsim scenarios/olmo2_7b_fsdp2_8xh100.lua [--set ...]):
--   micro-batch 6 with checkpointing (./vrsim maxbatch scenarios/olmo2_7b_fsdp2_8xh100.lua:
--   "micro_batch = 6 fits (peak reserved 77.53 GiB of 78.43 GiB ...); 7 does not"), 49,152
--   tokens a step over the node. Without checkpointing micro-batch 1 fits with 0.91 GiB to spare
--   and 2 does not: each of the 32 layers keeps, for each of its four Olmo2RMSNorms (post-attention,
--   post-MLP, and q_norm / k_norm over the 4096-wide q and k), the fp32 copy of the input and the
--   fp32 normalized input its weight's gradient is made from.
-- Not measured on a GPU: the ops are transformers 5.25's modeling_olmo2.py (lua/models/olmo2.lua);
-- tests/test_families.sh checks the parameter count against transformers.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/olmo2_7b_fsdp2_8xh100.lua
--   FITS: peak reserved 43.84 GiB of 78.43 GiB usable (55.9 %), 34.59 GiB headroom
--   $ ./vrsim scenarios/olmo2_7b_fsdp2_8xh100.lua --set micro_batch=6
--   FITS: peak reserved 78.35 GiB of 78.43 GiB usable (99.9 %), 0.08 GiB headroom
--   $ ./vrsim scenarios/olmo2_7b_fsdp2_8xh100.lua --set micro_batch=7
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'log_softmax'
--   $ ./vrsim scenarios/olmo2_7b_fsdp2_8xh100.lua --set checkpointing=false
--   FITS: peak reserved 77.52 GiB of 78.43 GiB usable (98.8 %), 0.91 GiB headroom
--   $ ./vrsim scenarios/olmo2_7b_fsdp2_8xh100.lua --set checkpointing=false --set micro_batch=2
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'layers.25.mlp.mul'
return {
  title = "OLMo-2-7B full fine-tune, AMP bf16, FSDP2 over 8 H100 SXM, at 4096 tokens",
  hardware = { gpu = "h100_sxm", count = 8 },
  model = { config = "configs/olmo-2-1124-7b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "amp_bf16", strategy = "fsdp2", checkpointing = true },
}
