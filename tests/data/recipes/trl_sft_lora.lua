-- trl_sft_lora.yaml by hand: `vrsim trl_sft_lora.yaml --gpu h100`.
return {
  title = "Llama-3.2-1B LoRA r32 SFT on every Linear, TRL's defaults",
  hardware = { gpu = "h100" },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    micro_batch = 4, grad_accum = 4, seq = 2048,
    precision = "lora_bf16", build = "direct",
    lora = { r = 32, alpha = 16, dropout = 0.05, targets = "all-linear" },
    checkpointing = true,                          -- SFTConfig's default
    optimizer = "adamw", optimizer_impl = "fused", -- TrainingArguments' adamw_torch_fused
    attention = "sdpa",
  },
}
