-- axolotl_full_zero2.yml by hand: `vrsim axolotl_full_zero2.yml --gpu h100 --gpus 4`.
return {
  title = "Llama-3.2-1B full fine-tuning, bf16, ZeRO-2 over 4 GPUs",
  hardware = { gpu = "h100", count = 4 },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    micro_batch = 2, grad_accum = 1, seq = 2048,
    precision = "bf16", checkpointing = true, attention = "flash",
    optimizer = "adamw", optimizer_impl = "fused",
    deepspeed = "zero2.json",
  },
}
