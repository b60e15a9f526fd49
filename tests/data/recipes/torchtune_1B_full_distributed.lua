-- torchtune_1B_full_distributed.yaml by hand: `vrsim torchtune_1B_full_distributed.yaml --gpu h100
-- --gpus 4` (tune run --nproc_per_node 4 full_finetune_distributed). FSDP2 over the 4 GPUs on
-- the bf16 parameters (no MixedPrecisionPolicy), reshard_after_forward off, gradient
-- checkpointing, fused AdamW, 8 micro-batches of 4 x 2048.
return {
  title = "Llama-3.2-1B full fine-tuning in bf16 under FSDP2 on 4 GPUs, torchtune's distributed recipe",
  hardware = { gpu = "h100", count = 4 },
  -- (torchtune's own decoder, model.code: no KV cache in training, its RMSNorm and RoPE, and its
  -- attention expands the 8 key-value heads to the 32 query heads before SDPA)
  model = { config = "llama-3.2-1b/config.json", use_cache = false, code = "torchtune" },
  training = {
    micro_batch = 4, grad_accum = 8, seq = 2048,
    precision = "bf16", build = "direct",
    strategy = "fsdp2", zero = { raf = false },
    checkpointing = true,
    optimizer = "adamw", optimizer_impl = "fused",
    loss = "chunked",
    attention = "sdpa",
  },
}
