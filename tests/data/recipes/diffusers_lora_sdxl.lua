-- diffusers_lora_sdxl.sh by hand: `vrsim diffusers_lora_sdxl.sh --gpu rtx4090`. SDXL base's UNet
-- frozen in bf16 with peft LoRA rank 4 (alpha 4) on to_q, to_k, to_v, to_out.0, the adapters in
-- bf16 (cast to fp32 only under fp16), both text encoders frozen in bf16, the VAE encoding in
-- fp32, gradient checkpointing, torch's AdamW (foreach), one 1024 px image a step.
return {
  title = "diffusers train_text_to_image_lora_sdxl.py, rank 4, bf16, on an RTX 4090",
  hardware = { gpu = "rtx4090" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 1024, precision = "lora_bf16",
               lora = { r = 4, alpha = 4, dropout = 0.0, targets = { "to_q", "to_k", "to_v", "to_out.0" } },
               optimizer = "adamw", optimizer_impl = "foreach", checkpointing = true,
               text_encoders = "frozen", vae = "fp32", attention = "sdpa" },
}
