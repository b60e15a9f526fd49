-- The base scenario of tests/data/published_pipeline.tsv's rows: Llama 3.1 405B's shapes (its
-- config.json's sizes) on H100s, bf16, full activation checkpointing; the rows' --set arguments
-- give the layout.
return {
  title = "torchtitan's published pipeline runs",
  hardware = { gpu = "h100_sxm", count = 8, gpus_per_node = 8 },
  model = { config = { architectures = { "LlamaForCausalLM" }, model_type = "llama", hidden_size = 16384,
                       intermediate_size = 53248, num_attention_heads = 128, num_key_value_heads = 8,
                       num_hidden_layers = 126, vocab_size = 128256, rms_norm_eps = 1e-05,
                       rope_theta = 500000.0, max_position_embeddings = 131072,
                       tie_word_embeddings = false, torch_dtype = "bfloat16" } },
  training = { micro_batch = 1, seq = 8192, precision = "bf16", checkpointing = true, steps = 2,
               parallel = { pp = 8 } },
}
