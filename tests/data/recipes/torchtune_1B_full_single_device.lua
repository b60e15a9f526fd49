-- torchtune_1B_full_single_device.yaml by hand, with its optimizer torch.optim.AdamW (fused)
-- instead of bitsandbytes' PagedAdamW8bit (tests/test_recipes.sh makes that edit; with
-- training.optimizer = "paged_adamw_8bit" it is the config as it is): `vrsim EDITED.yaml --gpu h100`
-- (tune run full_finetune_single_device).
return {
  title = "Llama-3.2-1B full fine-tuning in bf16, optimizer in backward, torchtune's single-device recipe",
  hardware = { gpu = "h100" },
  -- (torchtune's own decoder, model.code: no KV cache in training, its RMSNorm and RoPE, and its
  -- attention expands the 8 key-value heads to the 32 query heads before SDPA)
  model = { config = "llama-3.2-1b/config.json", use_cache = false, code = "torchtune" },
  training = {
    micro_batch = 4, grad_accum = 1, seq = 2048,
    precision = "bf16", build = "direct",
    checkpointing = false, optimizer_in_backward = true,
    optimizer = "adamw", optimizer_impl = "fused",
    loss = "chunked",
    attention = "sdpa",
  },
}
