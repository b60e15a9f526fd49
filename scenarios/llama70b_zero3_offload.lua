-- LLaMA2-70B on 8x A100-80GB: with ZeRO-3 and the optimizer offloaded to the host (CPU Adam),
-- does a full fine-tune fit per GPU at micro-batch 1 x 4096 with checkpointing, and how much
-- host memory and step time does it cost? (vrsim scenarios/llama70b_zero3_offload.lua)
return {
  title = "LLaMA2-70B, DeepSpeed ZeRO-3 + optimizer offload, 8x A100-80GB (NVLink)",
  hardware = { gpu = "a100_80g", count = 8, interconnect = "nvlink", host = "dgx_a100" },
  model = { arch = "llama2", size = "70b" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", strategy = "zero3",
               checkpointing = true, steps = 3,
               zero = { offload_optimizer = "cpu", stage3_param_persistence_threshold = 1e5 } },
}
