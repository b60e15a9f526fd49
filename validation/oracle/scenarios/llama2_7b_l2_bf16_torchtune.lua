-- oracle capture llama2_7b_l2_bf16_torchtune: validation/oracle/specs/llama2_7b_l2_bf16_torchtune.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_bf16_torchtune",
  hardware = {
    gpu = "h200",
  },
  model = {
    arch = "llama2",
    size = "7b",
    layers = 2,
    code = "torchtune",
  },
  training = {
    micro_batch = 2,
    seq = 128,
    precision = "bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    build = "direct",
    loss = "chunked",
  },
}
