-- LLaMA2-13B on 4x RTX 4090 over PCIe (no peer-to-peer): can a full fine-tune fit at
-- micro-batch 1 x 2048 with checkpointing?
--
-- Answer (vrsim scenarios/llama13b_4x4090.lua):
--   with ZeRO-3 and the optimizer offloaded to the host: FITS, peak reserved 13.15 GiB of
--   22.97 GiB per card, 48.5 GiB of host memory per GPU; the step (6.5 s) is bound by PCIe:
--   4.6 s of collectives, only 76 % hidden under compute.
--   Sharding alone does not fit: the bf16 AdamW state still needs ~13 GB per card
--   (--set zero.offload_optimizer=none exits 3).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/llama13b_4x4090.lua
--   FITS: peak reserved 13.13 GiB of 22.97 GiB usable (57.2 %), 9.84 GiB headroom
--   $ ./vrsim scenarios/llama13b_4x4090.lua --set zero.offload_optimizer=none
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'adamw.init model.layers.31.mlp.up_proj.weight (shard)'
return {
  title = "LLaMA2-13B, ZeRO-3 + optimizer offload over 4x RTX 4090 (PCIe 4.0, no P2P)",
  hardware = { gpu = "rtx4090", count = 4, interconnect = "pcie", host = "workstation_4x4090" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", build = "direct", strategy = "zero3",
               checkpointing = true, steps = 3, zero = { offload_optimizer = "cpu" } },
}
