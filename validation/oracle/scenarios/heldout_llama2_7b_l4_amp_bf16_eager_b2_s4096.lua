-- oracle capture heldout_llama2_7b_l4_amp_bf16_eager_b2_s4096: validation/oracle/specs/heldout_llama2_7b_l4_amp_bf16_eager_b2_s4096.json (written by scenario_of.py)
return {
  title = "oracle: heldout_llama2_7b_l4_amp_bf16_eager_b2_s4096",
  hardware = {
    gpu = "h200",
  },
  model = {
    arch = "llama2",
    size = "7b",
    layers = 4,
  },
  training = {
    micro_batch = 2,
    seq = 4096,
    precision = "amp_bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    attention = "eager",
  },
}
