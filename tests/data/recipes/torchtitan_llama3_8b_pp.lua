-- torchtitan_llama3_8b_pp.toml by hand: `vrsim torchtitan_llama3_8b_pp.toml --gpu h100 --gpus 8`.
-- Pipeline 2 (1F1B, local_batch_size 4 / microbatch size 1 = 4 micro-batches of one row) x
-- FSDP2 2 x tensor parallelism 2; bf16 parameters, FSDP2's reduce in fp32, full checkpointing,
-- fused AdamW (JobConfig's default implementation).
return {
  title = "torchtitan llama3 8B, PP 2 x FSDP 2 x TP 2 on 8 H100s",
  hardware = { gpu = "h100", count = 8 },
  model = { config = {
    architectures = { "LlamaForCausalLM" }, model_type = "llama", hidden_size = 4096, num_hidden_layers = 32,
    num_attention_heads = 32, num_key_value_heads = 8, intermediate_size = 14336, vocab_size = 128256,
    rms_norm_eps = 1e-5, rope_theta = 500000, max_position_embeddings = 4096, hidden_act = "silu",
    tie_word_embeddings = false,
  }, use_cache = false }, -- (torchtitan's Transformer has no KV cache)
  training = {
    micro_batch = 1, grad_accum = 1, seq = 4096,
    precision = "bf16", build = "direct", checkpointing = true,
    optimizer = "adamw", optimizer_impl = "fused",
    attention = "sdpa", loss = "full",
    zero = { reduce_dtype = "fp32" },
    parallel = { pp = 2, tp = 2, dp_shard = 2, pp_schedule = "1F1B", pp_microbatches = 4 },
  },
}
