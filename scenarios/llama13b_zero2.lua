-- The headline question: LLaMA2-13B, bf16 with fp32 master weights, DeepSpeed ZeRO-2 over
-- 8x A100-80GB on NVLink: does it fit per GPU at micro-batch 4 x 2048 tokens, and how long is a
-- step? (Answer: see README, `vrsim scenarios/llama13b_zero2.lua`.)
return {
  title = "LLaMA2-13B, DeepSpeed ZeRO-2, 8x A100-80GB (NVLink), micro-batch 4 x 2048",
  hardware = { gpu = "a100_80g", count = 8, interconnect = "nvlink" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 4, seq = 2048, precision = "bf16", strategy = "zero2",
               checkpointing = true, steps = 3,
               zero = { reduce_bucket_size = 5e8, allgather_bucket_size = 5e8, overlap_comm = true,
                        contiguous_gradients = true } },
}
