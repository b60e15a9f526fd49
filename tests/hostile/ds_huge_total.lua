-- DeepSpeed train_batch_size 2^62: the micro-batch derived from it is past micro_batch's bound
return {
  hardware = { gpu = "h200", count = 2 },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1, deepspeed = "ds_huge_total.json" },
}
