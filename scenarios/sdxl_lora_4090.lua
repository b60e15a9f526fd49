-- LoRA fine-tuning of SDXL at 1024 px on an RTX 4090 (24 GB): does it fit, and with what batch?
-- diffusers' train_text_to_image_lora_sdxl.py setup: peft LoRA rank 4 on every attention
-- projection of the UNet (to_q, to_k, to_v, to_out.0; 5,806,080 adapter parameters, in bf16 as
-- unet.add_adapter makes them: the script casts them to fp32 only for fp16), the UNet frozen in
-- bf16, both text encoders frozen (bf16, no_grad), VAE encode in fp32 (no_grad), gradient
-- checkpointing, AdamW (foreach) on the adapters only.
--
-- Answer (vrsim 2026-12-05, ./vrsim scenarios/sdxl_lora_4090.lua [--set ...]): LoRA fits easily:
--   as written (batch 1, checkpointing):
--       FITS: peak reserved 11.24 GiB of 22.97 GiB usable (48.9 %)   <- this file
--       the peak (10029 MiB allocated) is the fp32 VAE encode (a 1.08 GB cuDNN workspace for
--       the 128-channel convolutions at 1024 px, beside five of its 512 MiB feature maps that
--       the encoder's Python variables hold at once), not the UNet
--   --set checkpointing=false              FITS: 12.38 GiB (53.9 %)
--   micro-batch 3 is the largest that fits (17.40 GiB; ./vrsim maxbatch scenarios/sdxl_lora_4090.lua);
--   --set micro_batch=4                    DOES NOT FIT (OOM in the fp32 VAE encode, step 1)
--   --set micro_batch=6, 8                 DOES NOT FIT (the same; batch 8 in step 0)
--   with cached latents and embeddings, --set text_encoders=cached --set vae=cached
--   --set micro_batch=8                    FITS: 10.52 GiB (45.8 %)
-- Weights (frozen UNet 4.9 GB bf16, text encoders 1.6 GB, VAE 0.3 GB) are most of it; the
-- adapters, their gradients and AdamW state are 44 MiB.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/sdxl_lora_4090.lua
--   FITS: peak reserved 11.24 GiB of 22.97 GiB usable (48.9 %), 11.73 GiB headroom
--   $ ./vrsim scenarios/sdxl_lora_4090.lua --set checkpointing=false
--   FITS: peak reserved 12.38 GiB of 22.97 GiB usable (53.9 %), 10.60 GiB headroom
--   $ ./vrsim scenarios/sdxl_lora_4090.lua --set micro_batch=4
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'vae.encoder.down_blocks.0.resnets.1.conv1'
--   $ ./vrsim scenarios/sdxl_lora_4090.lua --set micro_batch=6
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'vae.encoder.down_blocks.0.resnets.1.conv1'
--   $ ./vrsim scenarios/sdxl_lora_4090.lua --set micro_batch=8
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'vae.encoder.down_blocks.0.resnets.0.output_scale'
--   $ ./vrsim scenarios/sdxl_lora_4090.lua --set text_encoders=cached --set vae=cached --set micro_batch=8
--   FITS: peak reserved 10.52 GiB of 22.97 GiB usable (45.8 %), 12.45 GiB headroom
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
