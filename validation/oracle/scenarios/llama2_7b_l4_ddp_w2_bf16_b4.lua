-- oracle capture llama2_7b_l4_ddp_w2_bf16_b4: validation/oracle/specs/llama2_7b_l4_ddp_w2_bf16_b4.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l4_ddp_w2_bf16_b4",
  hardware = {
    gpu = "h200",
    count = 2,
  },
  model = {
    arch = "llama2",
    size = "7b",
    layers = 4,
  },
  training = {
    micro_batch = 4,
    seq = 2048,
    precision = "bf16",
    steps = 1,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    strategy = "ddp",
    build = "cast",
  },
}
