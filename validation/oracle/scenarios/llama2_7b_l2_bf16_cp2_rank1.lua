-- oracle capture llama2_7b_l2_bf16_cp2_rank1: validation/oracle/specs_cp/llama2_7b_l2_bf16_cp2_rank1.json (capture_cp.py)
return {
  title = "oracle: llama2_7b_l2_bf16_cp2_rank1",
  hardware = {
    gpu = "h200",
    count = 2,
    rank = 1,
  },
  model = {
    arch = "llama2",
    size = "7b",
    layers = 2,
  },
  training = {
    micro_batch = 1,
    seq = 256,
    precision = "bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    build = "direct",
    attention = "flash",
    parallel = { cp = 2 },
  },
}
