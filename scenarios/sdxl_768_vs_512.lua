-- What does resolution cost when fine-tuning the SDXL base UNet, and how much of it is attention?
-- UNet alone (latents and text embeddings cached), bf16 weights and AdamW state, fused AdamW,
-- no gradient checkpointing, one image per step, on an H200; 768 px here, --set resolution=512
-- (or 1024) for the others, --set attention=eager for diffusers' AttnProcessor (no SDPA).
--
-- Answer: ANSWER_PLACEHOLDER
return {
  title = "SDXL UNet at 768 px against 512 px: activation memory, attention and the rest",
  hardware = { gpu = "h200" },
  model = { arch = "sdxl", variant = "sdxl-base-unet" },
  training = { micro_batch = 1, resolution = 768, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", checkpointing = false, attention = "sdpa", steps = 2 },
  allocator = { conf = "" },
}
