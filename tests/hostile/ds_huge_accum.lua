-- DeepSpeed gradient_accumulation_steps 1e9: past grad_accum's bound (4096), which --set enforces
return {
  hardware = { gpu = "h200", count = 2 },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1, deepspeed = "ds_huge_accum.json" },
}
