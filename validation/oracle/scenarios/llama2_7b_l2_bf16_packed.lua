-- oracle capture llama2_7b_l2_bf16_packed: validation/oracle/specs/llama2_7b_l2_bf16_packed.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_bf16_packed",
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
    build = "cast",
    transformers = "5.17.0",
    micro_batch = 3,
    data = {
      lengths = { 100, 90, 66 },
      batching = "padding_free",
      order = "given",
    },
  },
}
