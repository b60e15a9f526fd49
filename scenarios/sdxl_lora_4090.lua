-- LoRA fine-tuning of SDXL at 1024 px on an RTX 4090 (24 GB): does it fit, and with what batch?
-- diffusers' train_text_to_image_lora_sdxl.py setup: peft LoRA rank 4 on every attention
-- projection of the UNet (to_q, to_k, to_v, to_out.0; 5,806,080 fp32 adapter parameters), the
-- UNet frozen in bf16, both text encoders frozen (bf16, no_grad), VAE encode in fp32 (no_grad),
-- gradient checkpointing, AdamW (foreach) on the adapters only.
--
-- Answer: ANSWER_PLACEHOLDER
return {
  title = "SDXL LoRA (rank 4, attention projections) at 1024 px on an RTX 4090",
  hardware = { gpu = "rtx4090" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 1024, precision = "lora_bf16",
               lora = { r = 4, alpha = 4, dropout = 0.0, targets = { "to_q", "to_k", "to_v", "to_out.0" } },
               optimizer = "adamw", optimizer_impl = "foreach", checkpointing = true,
               text_encoders = "frozen", vae = "fp32", steps = 2 },
  allocator = { conf = "" },
}
