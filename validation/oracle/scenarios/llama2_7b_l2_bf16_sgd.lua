-- oracle capture llama2_7b_l2_bf16_sgd: validation/oracle/specs/llama2_7b_l2_bf16_sgd.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_bf16_sgd",
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
    optimizer_impl = "foreach",
    build = "cast",
  },
}
