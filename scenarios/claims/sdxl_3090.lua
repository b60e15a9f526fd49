-- Claim: SDXL training on an RTX 3090 uses 22-24 GB, split as UNet 12 GB, text encoder 3 GB,
-- VAE decoder 2 GB and intermediates 5 GB.
-- The full SDXL base step at 1024 px on an RTX 3090 with what it takes to fit (bf16 weights and
-- AdamW state, fused AdamW, gradient checkpointing); reports/make_reports.sh splits the peak by
-- module from --json (parameter counts per module, breakdown per category).
return {
  title = "SDXL base training at 1024 px on an RTX 3090: where the memory goes",
  hardware = { gpu = "rtx3090" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 1024, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", checkpointing = true, text_encoders = "frozen",
               vae = "fp32", steps = 2 },
}
