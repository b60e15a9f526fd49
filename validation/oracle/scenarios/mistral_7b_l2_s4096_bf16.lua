-- oracle capture mistral_7b_l2_s4096_bf16: validation/oracle/specs/mistral_7b_l2_s4096_bf16.json (written by scenario_of.py)
return {
  title = "oracle: mistral_7b_l2_s4096_bf16",
  hardware = {
    gpu = "h200",
  },
  model = {
    config = {
      architectures = { "MistralForCausalLM" },
      bos_token_id = 1,
      eos_token_id = 2,
      hidden_act = "silu",
      hidden_size = 4096,
      initializer_range = 0.02,
      intermediate_size = 14336,
      max_position_embeddings = 32768,
      model_type = "mistral",
      num_attention_heads = 32,
      num_hidden_layers = 32,
      num_key_value_heads = 8,
      rms_norm_eps = 1e-05,
      rope_theta = 10000.0,
      sliding_window = 4096,
      tie_word_embeddings = false,
      use_cache = true,
      vocab_size = 32000,
    },
    layers = 2,
  },
  training = {
    micro_batch = 1,
    seq = 4096,
    precision = "bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
    build = "cast",
  },
}
