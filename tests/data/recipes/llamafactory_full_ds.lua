-- llamafactory_full_ds.yaml by hand: `vrsim llamafactory_full_ds.yaml --gpu h100 --gpus 4`.
return {
  title = "Llama-3.2-1B full SFT, bf16, ZeRO-2 over 4 GPUs, LLaMA-Factory's settings",
  hardware = { gpu = "h100", count = 4 },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    micro_batch = 1, grad_accum = 2, seq = 2048,
    precision = "bf16", build = "direct", checkpointing = true, attention = "sdpa",
    optimizer = "adamw", optimizer_impl = "fused",
    deepspeed = "zero2.json",
  },
}
