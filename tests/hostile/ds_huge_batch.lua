-- a DeepSpeed JSON whose train_micro_batch_size_per_gpu (1e30) was silently dropped
return {
  hardware = { gpu = "h200", count = 2 },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1, deepspeed = "ds_huge_batch.json" },
}
