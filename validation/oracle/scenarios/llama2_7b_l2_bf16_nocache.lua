-- oracle capture llama2_7b_l2_bf16_nocache: validation/oracle/specs/llama2_7b_l2_bf16_nocache.json (written by scenario_of.py)
return {
  title = "oracle: llama2_7b_l2_bf16_nocache",
  hardware = {
    gpu = "h200",
  },
  model = {
    config = {
      architectures = { "LlamaForCausalLM" },
      hidden_act = "silu",
      hidden_size = 4096,
      intermediate_size = 11008,
      max_position_embeddings = 4096,
      model_type = "llama",
      num_attention_heads = 32,
      num_hidden_layers = 32,
      num_key_value_heads = 32,
      rms_norm_eps = 1e-05,
      vocab_size = 32000,
      use_cache = false,
    },
    layers = 2,
  },
  training = {
    micro_batch = 1,
    seq = 256,
    precision = "bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    build = "cast",
  },
}
