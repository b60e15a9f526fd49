-- Where does the memory of an SDXL fine-tuning step go? diffusers' train_text_to_image_sdxl.py
-- with --mixed_precision bf16: fp32 UNet weights and AdamW state under bf16 autocast (each
-- weight cast to bf16 once per forward), both text encoders and the VAE loaded for the step
-- (text encoders frozen in bf16, VAE encode in fp32, both under no_grad), 1024 px, batch 1,
-- gradient checkpointing, foreach AdamW, on an A100 80GB.
--
-- Answer: ANSWER_PLACEHOLDER
return {
  title = "SDXL full fine-tune (amp bf16, fp32 master weights) at 1024 px on an A100 80GB: the breakdown",
  hardware = { gpu = "a100_80g" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 1024, precision = "amp_bf16", optimizer = "adamw",
               optimizer_impl = "foreach", checkpointing = true, text_encoders = "frozen",
               vae = "fp32", steps = 2 },
  allocator = { conf = "" },
}
