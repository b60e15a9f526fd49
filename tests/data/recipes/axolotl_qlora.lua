-- The run of axolotl_qlora.yml written by hand as a scenario: what `vrsim axolotl_qlora.yml
-- --gpu rtx4090` must simulate (tests/test_recipes.sh compares the two).
return {
  title = "Llama-3.2-1B QLoRA r32 on all Linear layers, axolotl's settings",
  hardware = { gpu = "rtx4090" },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    micro_batch = 2, grad_accum = 4, seq = 2048,
    precision = "lora_bf16", build = "direct",
    quant = "nf4", quant_storage = "bf16",          -- axolotl's bnb_4bit_quant_storage
    kbit_prepare = "axolotl",                       -- _configure_embedding_dtypes, prepare_model_for_kbit_training
    lora = { r = 32, alpha = 16, dropout = 0.05, targets = "all-linear" },
    checkpointing = true,
    optimizer = "adamw8bit",
    attention = "flash",
  },
}
