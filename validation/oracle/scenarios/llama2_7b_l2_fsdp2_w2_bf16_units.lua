-- oracle capture llama2_7b_l2_fsdp2_w2_bf16_units: validation/oracle/specs/llama2_7b_l2_fsdp2_w2_bf16_units.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_fsdp2_w2_bf16_units",
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
    precision = "bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    strategy = "fsdp2",
    build = "cast",
    zero = {
      init = "whole",
      raf = true,
      units = { "model.embed_tokens", "lm_head" },
    },
  },
}
