-- Fine-tuning the whole SDXL base UNet at 1024 px on an RTX 3090 (24 GB): which settings fit?
-- The full training step of diffusers' / kohya's SDXL scripts: VAE encode of the image batch in
-- fp32 under no_grad, both text encoders frozen (bf16, no_grad), UNet forward + backward, MSE on
-- the predicted noise, AdamW; UNet weights, gradients and AdamW state in bf16.
--
-- Answer (vrsim 2026-12-05, ./vrsim scenarios/sdxl_train_3090.lua [--set ...]): batch 1 at
-- 1024 px with the VAE encode in the step does not fit as the allocator is configured by default:
--   as written (fused AdamW, checkpointing):
--       DOES NOT FIT (fragmentation: step 1's VAE encode asks cuDNN for a 1.0 GB workspace while
--       its fp32 feature maps, 512 MiB each, are held by the encoder's Python variables, and no
--       piece of the 4.8 GiB reserved but free takes it; the run never holds more than 21.21 GiB)
--       with expandable_segments:True (--alloc-conf) it fits at 22.60 GiB reserved
--   --set optimizer_impl=forloop               DOES NOT FIT (the same)
--   --set optimizer_impl=foreach               DOES NOT FIT (OOM in step 0 at adamw._foreach_sqrt:
--       the foreach step makes a sqrt copy of every exp_avg_sq, another 4.9 GB at once)
--   --set checkpointing=false                  DOES NOT FIT (OOM in step 1's VAE encode)
--   --set micro_batch=2                        DOES NOT FIT (OOM in the fp32 VAE encode, whose
--       128-channel convolutions at 1024 px ask cuDNN for a 2.1 GB workspace at batch 2)
--   --set precision=amp_bf16                   DOES NOT FIT (fp32 weights, grads and AdamW state
--       alone are 39 GB: diffusers' default --mixed_precision is for 40 GB+ cards)
--   --set text_encoders=trained                DOES NOT FIT
-- With cached latents and text embeddings (--set text_encoders=cached --set vae=cached: the
-- VAE and text encoders never loaded) it is comfortable: 20.57 GiB (89.1 %); without
-- checkpointing 22.04 GiB (95.5 %); with checkpointing up to micro-batch 7 (22.76 GiB,
-- ./vrsim maxbatch scenarios/sdxl_train_3090.lua --set text_encoders=cached --set vae=cached),
-- micro-batch 8 runs out in backward.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/sdxl_train_3090.lua
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'vae.encoder.down_blocks.0.resnets.0.conv1'
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set optimizer_impl=forloop
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'vae.encoder.down_blocks.0.resnets.0.conv1'
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set optimizer_impl=foreach
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'adamw._foreach_sqrt'
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'vae.encoder.down_blocks.0.resnets.1.conv1'
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set micro_batch=2
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'vae.encoder.down_blocks.0.resnets.0.silu1'
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set precision=amp_bf16
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'adamw.init unet.down_blocks.2.attentions.0.transformer_blocks.2.attn2.to_out.0.weight'
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set text_encoders=trained
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'adamw.init unet.up_blocks.0.attentions.2.transformer_blocks.2.attn1.to_q.weight'
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set text_encoders=cached --set vae=cached
--   FITS: peak reserved 20.57 GiB of 23.09 GiB usable (89.1 %), 2.52 GiB headroom
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set text_encoders=cached --set vae=cached --set checkpointing=false
--   FITS: peak reserved 22.04 GiB of 23.09 GiB usable (95.5 %), 1.04 GiB headroom
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set text_encoders=cached --set vae=cached --set micro_batch=7
--   FITS: peak reserved 22.76 GiB of 23.09 GiB usable (98.6 %), 0.33 GiB headroom
--   $ ./vrsim scenarios/sdxl_train_3090.lua --set text_encoders=cached --set vae=cached --set micro_batch=8
--   DOES NOT FIT: CUDA out of memory in step 1 at op 'unet.down_blocks.1.attentions.1.transformer_blocks.1.ff.geglu.backward'
return {
  title = "SDXL UNet full fine-tune at 1024 px on an RTX 3090: what fits in 24 GB",
  hardware = { gpu = "rtx3090" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 1024, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", checkpointing = true, text_encoders = "frozen",
               vae = "fp32", steps = 2 },
  allocator = { conf = "" },
}
