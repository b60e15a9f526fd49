-- Fine-tuning the whole SDXL base UNet at 1024 px on an RTX 3090 (24 GB): which settings fit?
-- The full training step of diffusers' / kohya's SDXL scripts: VAE encode of the image batch in
-- fp32 under no_grad, both text encoders frozen (bf16, no_grad), UNet forward + backward, MSE on
-- the predicted noise, AdamW; UNet weights, gradients and AdamW state in bf16.
--
-- Answer: ANSWER_PLACEHOLDER
return {
  title = "SDXL UNet full fine-tune at 1024 px on an RTX 3090: what fits in 24 GB",
  hardware = { gpu = "rtx3090" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 1024, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", checkpointing = true, text_encoders = "frozen",
               vae = "fp32", steps = 2 },
  allocator = { conf = "" },
}
