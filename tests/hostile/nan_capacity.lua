-- a NaN capacity (FITS "of 0.00 GiB usable"); vrsim must name the field (line 4)
return {
  hardware = { gpu = "h200",
               capacity_gib = 0/0 },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
