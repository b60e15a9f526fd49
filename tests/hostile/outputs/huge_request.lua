-- one parameter of 8 TiB (bf16) on a card of 1 PiB: larger than any one request the allocator takes
-- (4 TiB); the run must say so, not stop at "vrsim: FILE: "
return {
  hardware = { gpu = "h200", capacity_gib = 1048576 },
  model = { arch = "llama2", size = "7b-l1", hidden = 1048576, intermediate = 4194304, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
