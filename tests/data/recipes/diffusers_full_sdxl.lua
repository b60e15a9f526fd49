-- diffusers_full_sdxl.sh by hand: `vrsim diffusers_full_sdxl.sh --gpu h100`. SDXL base's UNet
-- trained in fp32 under bf16 autocast (accelerate launch --mixed_precision=bf16), an fp32 EMA copy,
-- bitsandbytes' AdamW8bit, gradient checkpointing; the prompt embeddings and latents computed
-- before training (text encoders and VAE not loaded while it runs); 2 images of 1024 px a step.
return {
  title = "diffusers train_text_to_image_sdxl.py, bf16 autocast, EMA, 8-bit Adam, on an H100",
  hardware = { gpu = "h100" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 2, resolution = 1024, precision = "amp_bf16",
               optimizer = "adamw8bit", checkpointing = true, ema = true,
               text_encoders = "cached", vae = "cached", attention = "sdpa" },
}
