-- torchtitan_llama3_8b_tp.toml by hand: `vrsim torchtitan_llama3_8b_tp.toml --gpu h100 --gpus 8`.
-- Tensor parallelism 2 innermost, FSDP2 over the other 4 (data_parallel_shard_degree -1: the
-- rest), bf16 parameters with FSDP2's reduce in fp32 (mixed_precision_reduce), full
-- checkpointing, foreach AdamW, 2 rows of 4096 tokens a rank.
return {
  title = "torchtitan llama3 8B, TP 2 x FSDP 4 on 8 H100s",
  hardware = { gpu = "h100", count = 8 },
  model = { config = {
    architectures = { "LlamaForCausalLM" }, model_type = "llama", hidden_size = 4096, num_hidden_layers = 32,
    num_attention_heads = 32, num_key_value_heads = 8, intermediate_size = 14336, vocab_size = 128256,
    rms_norm_eps = 1e-5, rope_theta = 500000, max_position_embeddings = 4096, hidden_act = "silu",
    tie_word_embeddings = false,
  }, use_cache = false }, -- (torchtitan's Transformer has no KV cache)
  training = {
    micro_batch = 2, grad_accum = 1, seq = 4096,
    precision = "bf16", build = "direct", checkpointing = true,
    optimizer = "adamw", optimizer_impl = "foreach",
    attention = "sdpa", loss = "full",
    zero = { reduce_dtype = "fp32" },
    parallel = { tp = 2, dp_shard = 4 },
  },
}
