-- oracle capture heldout_llama2_7b_l4_lora_all_do_ckpt_b6: validation/oracle/specs/heldout_llama2_7b_l4_lora_all_do_ckpt_b6.json (written by scenario_of.py)
return {
  title = "oracle: heldout_llama2_7b_l4_lora_all_do_ckpt_b6",
  hardware = {
    gpu = "h200",
  },
  model = {
    arch = "llama2",
    size = "7b",
    layers = 4,
  },
  training = {
    micro_batch = 6,
    seq = 2048,
    precision = "lora_bf16",
    steps = 2,
    checkpointing = true,
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
