-- a NaN bucket size passed every C check; it must be refused, naming the knob
return {
  hardware = { gpu = "h200", count = 2 },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1, strategy = "zero2", zero = { reduce_bucket_size = 0/0 } },
}
