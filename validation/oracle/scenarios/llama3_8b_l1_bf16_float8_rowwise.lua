-- oracle capture llama3_8b_l1_bf16_float8_rowwise: validation/oracle/specs/llama3_8b_l1_bf16_float8_rowwise.json (written by scenario_of.py)
return {
  title = "oracle: llama3_8b_l1_bf16_float8_rowwise",
  hardware = {
    gpu = "h200",
  },
  model = {
    config = {
      architectures = { "LlamaForCausalLM" },
      attention_bias = false,
      attention_dropout = 0.0,
      bos_token_id = 128000,
      eos_token_id = 128001,
      hidden_act = "silu",
      hidden_size = 4096,
      initializer_range = 0.02,
      intermediate_size = 14336,
      max_position_embeddings = 8192,
      model_type = "llama",
      num_attention_heads = 32,
      num_hidden_layers = 32,
      num_key_value_heads = 8,
      pretraining_tp = 1,
      rms_norm_eps = 1e-05,
      rope_theta = 500000.0,
      tie_word_embeddings = false,
      use_cache = true,
      vocab_size = 128256,
    },
    layers = 1,
  },
  training = {
    micro_batch = 1,
    seq = 256,
    precision = "bf16",
    steps = 2,
    optimizer = "sgd",
    build = "cast",
    float8 = {
      recipe = "rowwise",
    },
  },
}
