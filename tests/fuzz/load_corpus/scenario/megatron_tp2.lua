-- a seed of training.parallel.tp_impl: Megatron's tensor parallelism over 2 ranks, a small
-- Llama-shaped model
return {
  hardware = { gpu = "h200", count = 2 },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 2, kv_heads = 2, vocab = 128 },
  training = { seq = 8, steps = 1, precision = "bf16", attention = "eager", parallel = { tp = 2, tp_impl = "megatron" } },
}
