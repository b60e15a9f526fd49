-- torchtitan_llama3_8b.toml with [compile] enable = true (components "model" and "loss", its
-- defaults) and [activation_checkpoint] mode = "full", by hand: apply_ac wraps each
-- TransformerBlock in ptd_checkpoint_wrapper, then apply_compile compiles it (checkpoint_impl
-- "wrapper", every layer checkpointed whole), and build_cross_entropy_loss compiles the loss_fn
-- (compile_loss). The rest as torchtitan_llama3_8b.lua.
return {
  title = "torchtitan llama3 8B, FSDP over 8 H100s, full checkpointing, compiled blocks and loss",
  hardware = { gpu = "h100", count = 8 },
  model = { config = {
    architectures = { "LlamaForCausalLM" }, model_type = "llama", hidden_size = 4096, num_hidden_layers = 32,
    num_attention_heads = 32, num_key_value_heads = 8, intermediate_size = 14336, vocab_size = 128256,
    rms_norm_eps = 1e-5, rope_theta = 500000, max_position_embeddings = 8192, hidden_act = "silu",
    tie_word_embeddings = false,
  }, use_cache = false }, -- (torchtitan's Transformer has no KV cache)
  training = {
    micro_batch = 1, grad_accum = 1, seq = 8192,
    precision = "mp_fp32", build = "direct",
    checkpointing = true, checkpoint_impl = "wrapper",
    compile = true, compile_loss = true,
    optimizer = "adamw", optimizer_impl = "fused",
    attention = "sdpa", loss = "full",
    parallel = { dp_shard = 8 },
  },
}
