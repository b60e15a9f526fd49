-- oracle capture llama2_7b_l2_zero1_w4_bf16: validation/oracle/specs/llama2_7b_l2_zero1_w4_bf16.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_zero1_w4_bf16",
  hardware = {
    gpu = "h200",
    count = 4,
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
    steps = 1,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    strategy = "zero1",
    build = "cast",
  },
}
