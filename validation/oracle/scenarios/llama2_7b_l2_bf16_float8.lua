-- oracle capture llama2_7b_l2_bf16_float8: validation/oracle/specs/llama2_7b_l2_bf16_float8.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_bf16_float8",
  hardware = {
    gpu = "h200",
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
    optimizer = "sgd",
    build = "cast",
    float8 = {
      recipe = "tensorwise",
    },
  },
}
