-- oracle capture llama2_7b_l2_bf16_padded_eager: validation/oracle/specs/llama2_7b_l2_bf16_padded_eager.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_bf16_padded_eager",
  hardware = {
    gpu = "h200",
  },
  model = {
    arch = "llama2",
    size = "7b",
    layers = 2,
  },
  training = {
    precision = "bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    attention = "eager",
    build = "cast",
    micro_batch = 3,
    data = {
      lengths = { 256, 200, 97 },
      batching = "pad",
      order = "given",
    },
  },
}
