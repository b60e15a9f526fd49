-- oracle capture llama2_7b_l2_mp_fp32_cp2: validation/oracle/specs_cp/llama2_7b_l2_mp_fp32_cp2.json (capture_cp.py)
return {
  title = "oracle: llama2_7b_l2_mp_fp32_cp2",
  hardware = {
    gpu = "h200",
    count = 2,
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
    attention = "flash",
    parallel = { cp = 2 },
  },
}
