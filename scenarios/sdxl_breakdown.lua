-- Where does the memory of an SDXL fine-tuning step go? diffusers' train_text_to_image_sdxl.py
-- with --mixed_precision bf16: fp32 UNet weights and AdamW state under bf16 autocast (each
-- weight cast to bf16 once per forward), both text encoders and the VAE loaded for the step
-- (text encoders frozen in bf16, VAE encode in fp32, both under no_grad), 1024 px, batch 1,
-- gradient checkpointing, foreach AdamW, on an A100 80GB.
--
-- Answer (vrsim 2026-12-05, ./vrsim scenarios/sdxl_breakdown.lua):
--   FITS: peak reserved 55.23 GiB of 78.45 GiB usable (70.4 %)   <- this file
-- The peak, 51333 MiB allocated, is AdamW's foreach sqrt in the optimizer step. At that moment:
--   parameters        11767 MiB  (UNet fp32 9794 MiB + text encoders bf16 1560 MiB + VAE fp32
--                                 319 MiB, plus the caching allocator's rounding of 1,700 blocks)
--   gradients          9905 MiB  (UNet, fp32)
--   optimizer state   19780 MiB  (AdamW exp_avg + exp_avg_sq, fp32)
--   temporaries        9881 MiB  (the foreach sqrt of every exp_avg_sq, 9794 MiB, cuBLAS
--                                 workspaces, the batch)
--   activations           0 MiB  (all released by then)
--   allocator slack    5219 MiB  (reserved but not allocated: fragmentation, much of it left by
--                                 the VAE encode's 1 GB cuDNN workspaces)
--   CUDA context        719 MiB  (outside the allocator)
-- The forward peaks at 37258 MiB: weights and AdamW state, the bf16 copy of every UNet weight
-- that autocast caches for the forward (4.9 GB), checkpoint inputs and skip connections; the
-- backward at 41762 MiB. --set optimizer_impl=fused removes the 9.8 GB of sqrt temporaries
-- (FITS at 45.43 GiB reserved).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/sdxl_breakdown.lua
--   FITS: peak reserved 55.26 GiB of 78.45 GiB usable (70.4 %), 23.19 GiB headroom
--   $ ./vrsim scenarios/sdxl_breakdown.lua --set optimizer_impl=fused
--   FITS: peak reserved 45.47 GiB of 78.45 GiB usable (58.0 %), 32.98 GiB headroom
return {
  title = "SDXL full fine-tune (amp bf16, fp32 master weights) at 1024 px on an A100 80GB: the breakdown",
  hardware = { gpu = "a100_80g" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 1024, precision = "amp_bf16", optimizer = "adamw",
               optimizer_impl = "foreach", checkpointing = true, text_encoders = "frozen",
               vae = "fp32", steps = 2 },
  allocator = { conf = "" },
}
