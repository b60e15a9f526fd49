-- oracle capture llama2_7b_l2_lora_all: validation/oracle/specs/llama2_7b_l2_lora_all.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_lora_all",
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
    precision = "lora_bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    build = "cast",
    lora = {
      r = 16,
      alpha = 32,
      dropout = 0.05,
      targets = "all-linear",
    },
  },
}
