-- axolotl_lora_ddp.yml by hand: `vrsim axolotl_lora_ddp.yml --gpu h100 --gpus 2`.
return {
  title = "Llama-3.2-1B LoRA r16 on q, k, v, o over 2 GPUs (DDP)",
  hardware = { gpu = "h100", count = 2 },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    strategy = "ddp", micro_batch = 4, grad_accum = 2, seq = 1024,
    precision = "lora_bf16",
    lora = { r = 16, alpha = 32, dropout = 0.0, targets = { "q_proj", "k_proj", "v_proj", "o_proj" } },
    optimizer = "adamw", optimizer_impl = "foreach",
    attention = "sdpa",
  },
}
