-- torchtitan_llama3_8b.toml with flavor "8B_flex", by hand: `vrsim CONFIG --gpu h100 --gpus 8`.
-- The "8B" flavor's shapes with attn_type "flex" and attn_mask_type "block_causal": FlexAttention
-- over each row's documents (the data set's text stream cut into rows of seq_len: training.data's
-- batching torchtitan, one document a row without the lengths). torchtitan's llama3 "8B" flavor (dim 4096, 32 layers, 32 heads, 8 kv heads, vocab 128256,
-- FeedForward hidden int(1.3 * int(2 * 16384 / 3)) = 14198 rounded up to a multiple of 1024:
-- 14336), FSDP2 over the 8 GPUs with fp32 shards and bf16 compute (mixed_precision_param),
-- per-op selective checkpointing, fused AdamW, one row of 8192 tokens.
return {
  title = "torchtitan llama3 8B_flex, FSDP over 8 H100s, per-op selective checkpointing",
  hardware = { gpu = "h100", count = 8 },
  model = { config = {
    architectures = { "LlamaForCausalLM" }, model_type = "llama", hidden_size = 4096, num_hidden_layers = 32,
    num_attention_heads = 32, num_key_value_heads = 8, intermediate_size = 14336, vocab_size = 128256,
    rms_norm_eps = 1e-5, rope_theta = 500000, max_position_embeddings = 8192, hidden_act = "silu",
    tie_word_embeddings = false,
  }, use_cache = false }, -- (torchtitan's Transformer has no KV cache)
  training = {
    micro_batch = 1, grad_accum = 1,
    data = { batching = "torchtitan", pack_length = 8192 },
    precision = "mp_fp32", build = "direct",
    checkpointing = true, checkpoint_scope = "op",
    optimizer = "adamw", optimizer_impl = "fused",
    attention = "flex", loss = "full",
    parallel = { dp_shard = 8 },
  },
}
