-- Fine-tuning the whole Stable Diffusion 1.5 UNet at 512 px on an RTX 4090 (24 GB), as the
-- diffusers README's example runs examples/text_to_image/train_text_to_image.py
-- ("--resolution=512 --train_batch_size=1 --gradient_checkpointing --mixed_precision=fp16
-- --use_ema"; the README: "With gradient_checkpointing and mixed_precision it should be possible
-- to fine tune the model on a single 24GB GPU"): does it fit, and what does a bigger batch need?
-- The UNet is read from SD 1.5's unet/config.json (configs/sd15-unet.json: 859,520,964
-- parameters, 8 heads in every block, 1x1-convolution projections); fp32 weights, gradients,
-- AdamW state and the EMA copy, fp16 autocast; the CLIP ViT-L/14 text encoder and the VAE in
-- fp16 (the script's weight_dtype), frozen. (The README's --gradient_accumulation_steps=4 is
-- left out: vrsim does not model gradient accumulation for the diffusion models, and it does
-- not change the peak, which is in the optimizer step.)
--
-- Answer (vrsim 2026-12-05, ./vrsim scenarios/sd15_train_4090.lua [--set ...]): it fits, with
-- the peak in the optimizer step, not in the UNet: fp32 weights, gradients, AdamW's two moments
-- and the EMA copy are 16.0 GiB before any activation, and the foreach step's sqrt copy of
-- every exp_avg_sq adds 3.2 GiB at once. So checkpointing changes little at batch 1, and a
-- larger batch is bounded by the optimizer, not by activations; 8-bit AdamW is what frees room.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/sd15_train_4090.lua
--   FITS: peak reserved 20.08 GiB of 22.97 GiB usable (87.4 %), 2.89 GiB headroom
--   $ ./vrsim scenarios/sd15_train_4090.lua --set checkpointing=false
--   FITS: peak reserved 20.31 GiB of 22.97 GiB usable (88.4 %), 2.66 GiB headroom
--   $ ./vrsim scenarios/sd15_train_4090.lua --set micro_batch=4
--   FITS: peak reserved 21.82 GiB of 22.97 GiB usable (95.0 %), 1.15 GiB headroom
--   $ ./vrsim scenarios/sd15_train_4090.lua --set micro_batch=4 --set checkpointing=false
--   FITS: peak reserved 22.08 GiB of 22.97 GiB usable (96.1 %), 0.89 GiB headroom
--   $ ./vrsim scenarios/sd15_train_4090.lua --set optimizer=adamw8bit --set micro_batch=8
--   FITS: peak reserved 15.52 GiB of 22.97 GiB usable (67.6 %), 7.45 GiB headroom
--   $ ./vrsim scenarios/sd15_train_4090.lua --set precision=lora_fp16 --set ema=false --set micro_batch=8
--   FITS: peak reserved 6.22 GiB of 22.97 GiB usable (27.1 %), 16.75 GiB headroom
-- SD 2.1 (768-v) at 768 px, the same way (its UNet config and OpenCLIP ViT-H/14 text encoder; its
-- v-prediction target, one latent-sized tensor, is taken as the noise):
--   $ ./vrsim scenarios/sd15_train_4090.lua --set model.config=configs/sd21-unet.json --set resolution=768
--   FITS: peak reserved 21.09 GiB of 22.97 GiB usable (91.8 %), 1.88 GiB headroom
--   $ ./vrsim scenarios/sd15_train_4090.lua --set model.config=configs/sd21-unet.json --set resolution=768 --set micro_batch=4
--   FITS: peak reserved 22.16 GiB of 22.97 GiB usable (96.5 %), 0.81 GiB headroom
return {
  title = "Stable Diffusion 1.5 full fine-tune at 512 px on an RTX 4090, as diffusers' README runs it",
  hardware = { gpu = "rtx4090" },
  model = { arch = "sd", config = "configs/sd15-unet.json" },
  training = { micro_batch = 1, resolution = 512, precision = "amp_fp16", optimizer = "adamw",
               optimizer_impl = "foreach", checkpointing = true, ema = true,
               text_encoders = "frozen", vae = "weight", steps = 2 },
  allocator = { conf = "" },
}
