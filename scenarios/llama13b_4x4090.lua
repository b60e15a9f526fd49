-- LLaMA2-13B on 4x RTX 4090 over PCIe (no peer-to-peer): can a full fine-tune fit at
-- micro-batch 1 x 2048 with checkpointing? Sharding alone (FSDP2/ZeRO-3) does not: the bf16
-- AdamW state still needs ~13 GB per card (vrsim scenarios/llama13b_4x4090.lua --set
-- zero.offload_optimizer=none exits 3). With the optimizer offloaded to the host (ZeRO-3
-- + CPU Adam) it fits; the step is bound by PCIe and the CPU.
return {
  title = "LLaMA2-13B, ZeRO-3 + optimizer offload over 4x RTX 4090 (PCIe 4.0, no P2P)",
  hardware = { gpu = "rtx4090", count = 4, interconnect = "pcie", host = "workstation_4x4090" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", strategy = "zero3",
               checkpointing = true, steps = 3, zero = { offload_optimizer = "cpu" } },
}
