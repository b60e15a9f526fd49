-- oracle capture tinyllama_l2_bf16: validation/oracle/specs/tinyllama_l2_bf16.json (written by scenario_of.py)
return {
  title = "oracle: tinyllama_l2_bf16",
  hardware = {
    gpu = "h200",
  },
  model = {
    config = {
      architectures = { "LlamaForCausalLM" },
      attention_bias = false,
      bos_token_id = 1,
      eos_token_id = 2,
      hidden_act = "silu",
      hidden_size = 2048,
      initializer_range = 0.02,
      intermediate_size = 5632,
      max_position_embeddings = 2048,
      model_type = "llama",
      num_attention_heads = 32,
      num_hidden_layers = 22,
      num_key_value_heads = 4,
      pretraining_tp = 1,
      rms_norm_eps = 1e-05,
      rope_theta = 10000.0,
      tie_word_embeddings = false,
      use_cache = true,
      vocab_size = 32000,
    },
    layers = 2,
  },
  training = {
    micro_batch = 2,
    seq = 256,
    precision = "bf16",
    steps = 2,
    optimizer = "adamw",
    optimizer_impl = "foreach",
  },
}
