-- oracle capture llama2_7b_l2_fsdp2_w4_mp_fp32: validation/oracle/specs/llama2_7b_l2_fsdp2_w4_mp_fp32.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_fsdp2_w4_mp_fp32",
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
    strategy = "fsdp2",
    zero = {
      init = "whole",
      raf = true,
    },
  },
}
