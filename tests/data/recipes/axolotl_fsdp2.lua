-- axolotl_fsdp2.yml by hand: `vrsim axolotl_fsdp2.yml --gpu h100 --gpus 8`.
return {
  title = "Llama-3.2-1B full fine-tuning under FSDP2 on 8 GPUs, bf16 compute over fp32 shards",
  hardware = { gpu = "h100", count = 8 },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    strategy = "fsdp2", precision = "mp_fp32", zero = { raf = true },
    micro_batch = 2, grad_accum = 2, seq = 4096,
    checkpointing = true, attention = "flash",
    optimizer = "adamw", optimizer_impl = "fused",
  },
}
