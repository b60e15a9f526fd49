-- oracle capture llama2_7b_l2_mp_fp32_tp2_fsdp2: validation/oracle/specs_tp/llama2_7b_l2_mp_fp32_tp2_fsdp2.json (capture_tp.py)
return {
  title = "oracle: llama2_7b_l2_mp_fp32_tp2_fsdp2",
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
    precision = "mp_fp32",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    build = "direct",
    parallel = { tp = 2, dp_shard = 2 },
  },
}
