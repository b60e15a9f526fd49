-- LLaMA2-7B full fine-tune in bf16 on one H200: does it fit at micro-batch 1 x 2048 tokens,
-- and how much headroom is left?
return {
  title = "LLaMA2-7B full fine-tune, bf16 weights and AdamW state, on one H200",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", checkpointing = false, steps = 4 },
  allocator = { conf = "" },
}
