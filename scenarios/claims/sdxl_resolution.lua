-- Claim: SDXL training memory rises from about 18 GB at 512x512 to about 28 GB at 768x768.
-- The full SDXL base training step (VAE encode in fp32 under no_grad, both text encoders frozen,
-- UNet forward + backward, AdamW) in bf16 with fused AdamW, no checkpointing, on a card large
-- enough not to fail; reports/make_reports.sh runs it with --set resolution=512 and 768 and adds
-- the CUDA context to peak reserved (what nvidia-smi shows), and the same for LoRA on the UNet
-- (--set precision=lora_bf16).
return {
  title = "SDXL base training: 512 px against 768 px",
  hardware = { gpu = "h200" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 512, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", checkpointing = false, text_encoders = "frozen",
               vae = "fp32", steps = 2 },
}
