-- torchtitan_llama3_8b_float8.toml by hand: `vrsim torchtitan_llama3_8b_float8.toml --gpu h200
-- --gpus 32`. torchtitan's llama3 8B (as torchtitan_llama3_8b.lua) under FSDP2 over the 32 GPUs
-- with fp32 shards and bf16 compute, two rows of 8192 tokens, per-op selective checkpointing
-- inside each compiled block (training.compile true: apply_ac, then apply_compile, and the loss
-- compiled), fused AdamW; converter "float8" with no recipe_name: torchao's default
-- Float8LinearConfig (tensorwise) on every Linear but the output (filter_fqns = ["output"]), the
-- weights' shards cast to float8 before FSDP's all-gather (enable_fsdp_float8_all_gather with
-- dp_shard 32).
return {
  title = "torchtitan llama3 8B, float8 (tensorwise, float8 all-gather), FSDP over 32 H200s, compiled",
  hardware = { gpu = "h200", count = 32 },
  model = { config = {
    architectures = { "LlamaForCausalLM" }, model_type = "llama", hidden_size = 4096, num_hidden_layers = 32,
    num_attention_heads = 32, num_key_value_heads = 8, intermediate_size = 14336, vocab_size = 128256,
    rms_norm_eps = 1e-5, rope_theta = 500000, max_position_embeddings = 8192, hidden_act = "silu",
    tie_word_embeddings = false,
  }, use_cache = false }, -- (torchtitan's Transformer has no KV cache)
  training = {
    micro_batch = 2, grad_accum = 1, seq = 8192,
    precision = "mp_fp32", build = "direct",
    checkpointing = true, checkpoint_scope = "op", checkpoint_impl = "wrapper",
    compile = true, compile_loss = true,
    float8 = { recipe = "tensorwise", fsdp_float8_all_gather = true },
    optimizer = "adamw", optimizer_impl = "fused",
    attention = "sdpa", loss = "full",
    parallel = { dp_shard = 32 },
  },
}
