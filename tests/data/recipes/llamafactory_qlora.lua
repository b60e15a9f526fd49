-- llamafactory_qlora.yaml by hand: `vrsim llamafactory_qlora.yaml --gpu rtx4090`.
return {
  title = "Llama-3.2-1B QLoRA r16 on every Linear, LLaMA-Factory's settings",
  hardware = { gpu = "rtx4090" },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    micro_batch = 2, grad_accum = 8, seq = 1024,
    precision = "lora_bf16", build = "direct",
    quant = "nf4", quant_storage = "bf16",          -- bnb_4bit_quant_storage = compute_dtype
    lora = { r = 16, alpha = 32, dropout = 0.0, targets = "all-linear" }, -- alpha: rank * 2
    checkpointing = true,                           -- on unless disable_gradient_checkpointing
    optimizer = "adamw", optimizer_impl = "fused",  -- TrainingArguments' adamw_torch_fused
    attention = "sdpa",                             -- flash_attn: auto
  },
}
