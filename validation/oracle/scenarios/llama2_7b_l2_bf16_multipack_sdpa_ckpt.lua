-- oracle capture llama2_7b_l2_bf16_multipack_sdpa_ckpt: validation/oracle/specs/llama2_7b_l2_bf16_multipack_sdpa_ckpt.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_bf16_multipack_sdpa_ckpt",
  hardware = {
    gpu = "h200",
  },
  model = {
    arch = "llama2",
    size = "7b",
    layers = 2,
  },
  training = {
    precision = "bf16",
    steps = 2,
    checkpointing = true,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    build = "cast",
    micro_batch = 2,
    data = {
      lengths = { 300, 200, 400, 100 },
      batching = "multipack",
      order = "given",
      real_batches = true,
      pack_length = 512,
      max_length = 512,
      pad_to_multiple_of = 512,
    },
  },
}
