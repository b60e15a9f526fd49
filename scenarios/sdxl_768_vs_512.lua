-- What does resolution cost when fine-tuning the SDXL base UNet, and how much of it is attention?
-- UNet alone (latents and text embeddings cached), bf16 weights and AdamW state, fused AdamW,
-- no gradient checkpointing, one image per step, on an H200; 768 px here, --set resolution=512
-- (or 1024) for the others, --set attention=eager for diffusers' AttnProcessor (no SDPA).
--
-- Answer (vrsim 2026-12-01, ./vrsim scenarios/sdxl_768_vs_512.lua [--set resolution=512]
-- [--set attention=eager]), activation memory = forward peak - (weights + AdamW state):
--   SDPA    512 px  1687 MiB   768 px  3828 MiB (+2141 MiB, 2.3x)   1024 px  6620 MiB
--   eager   512 px  2099 MiB   768 px  5722 MiB (+3623 MiB, 2.7x)   1024 px 12448 MiB
-- Attention's share (from the shapes): with SDPA the 80 transformer blocks keep q, k, v, the
-- output and a row statistic per attention, linear in the tokens: 369 MiB at 512 px, 795 MiB at
-- 768 px (+426 MiB);
-- the other +1715 MiB of the 768 px step is the rest (convolutions, group norms, GEGLU
-- feed-forwards, skip connections), which scales with the pixels (2.25x). Eager attention adds
-- the s x s probabilities of every attention on top (443 MiB at 512 px, 2051 MiB at 768 px,
-- 6271 MiB at 1024 px: quadratic). The whole step at 768 px:
--   FITS: peak reserved 20.94 GiB of 139.05 GiB usable (15.1 %)   <- this file
-- (peak 20492 MiB allocated, in backward); 512 px 21.00 GiB (20173 MiB): on an H200
-- the weights, gradients and AdamW state (20 GB) dominate; on a 24 GB card the difference
-- decides.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/sdxl_768_vs_512.lua
--   FITS: peak reserved 20.94 GiB of 139.05 GiB usable (15.1 %), 118.12 GiB headroom
--   $ ./vrsim scenarios/sdxl_768_vs_512.lua --set resolution=512
--   FITS: peak reserved 21.00 GiB of 139.05 GiB usable (15.1 %), 118.05 GiB headroom
return {
  title = "SDXL UNet at 768 px against 512 px: activation memory, attention and the rest",
  hardware = { gpu = "h200" },
  model = { arch = "sdxl", variant = "sdxl-base-unet" },
  training = { micro_batch = 1, resolution = 768, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", checkpointing = false, attention = "sdpa", steps = 2 },
  allocator = { conf = "" },
}
