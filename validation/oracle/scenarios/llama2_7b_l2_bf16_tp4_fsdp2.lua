-- oracle capture llama2_7b_l2_bf16_tp4_fsdp2: validation/oracle/specs_tp/llama2_7b_l2_bf16_tp4_fsdp2.json (capture_tp.py)
return {
  title = "oracle: llama2_7b_l2_bf16_tp4_fsdp2",
  hardware = {
    gpu = "h200",
    count = 8,
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
    parallel = { tp = 4, dp_shard = 2 },
  },
}
