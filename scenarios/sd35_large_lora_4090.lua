-- Stable Diffusion 3.5 Large LoRA at 1024 px on a 24 GB card (RTX 4090) with gradient
-- checkpointing: does it fit? As diffusers' examples/dreambooth/train_dreambooth_lora_sd3.py runs
-- it ("--mixed_precision=bf16 --resolution=1024 --train_batch_size=1 --gradient_checkpointing
-- --rank=4 --cache_latents" with one --instance_prompt, so the prompt embeddings are computed
-- once and CLIP-L, CLIP-G and T5-XXL deleted): the transformer read from SD 3.5 Large's
-- transformer/config.json (configs/sd35-large-transformer.json: 8,056,627,520 parameters, and
-- the 192^2 x 2432 position table, a 171 MiB bf16 buffer), cast to bf16 and frozen, rank-4 LoRA
-- on to_k, to_q, to_v, to_out.0 (2,957,312 bf16 adapters), AdamW, the forward under bf16
-- autocast, 77 CLIP and 77 T5 tokens beside the 4096 image tokens.
--
-- Answer (vrsim 2026-12-05, ./vrsim scenarios/sd35_large_lora_4090.lua [--set ...]): it fits,
-- with 5.9 GiB to spare: the frozen bf16 transformer takes 15.5 GiB of the card's 22.97 usable,
-- and checkpointing keeps only the 38 blocks' inputs. Without checkpointing it does not fit.
-- With checkpointing, four images a step still fit (1.5 GiB to spare); encoding the latents
-- every step (the fp32 VAE on the GPU) costs 3.0 GiB and fits. Computing the text embeddings
-- every step (custom prompts: T5-XXL's 8.9 GiB of bf16 weights stay on the GPU) does not fit on
-- 24 GB and fits on a 32 GB RTX 5090 (2.9 GiB to spare). SD 3.5 Medium fits on the 4090 even
-- with the encoders and VAE run every step, and without checkpointing.
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua
--   FITS: peak reserved 17.10 GiB of 22.97 GiB usable (74.5 %), 5.87 GiB headroom
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'transformer.transformer_blocks.16.norm2.scale'
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua --set micro_batch=4
--   FITS: peak reserved 21.57 GiB of 22.97 GiB usable (93.9 %), 1.40 GiB headroom
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua --set vae=fp32
--   FITS: peak reserved 20.14 GiB of 22.97 GiB usable (87.7 %), 2.83 GiB headroom
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua --set text_encoders=frozen
--   DOES NOT FIT: CUDA out of memory while building the model (at 'parameters')
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua --set text_encoders=frozen --set gpu=rtx5090
--   FITS: peak reserved 27.65 GiB of 30.61 GiB usable (90.3 %), 2.96 GiB headroom
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua --set model.config=configs/sd35-medium-transformer.json --set text_encoders=frozen --set vae=fp32
--   FITS: peak reserved 19.87 GiB of 22.97 GiB usable (86.5 %), 3.10 GiB headroom
--   $ ./vrsim scenarios/sd35_large_lora_4090.lua --set model.config=configs/sd35-medium-transformer.json --set checkpointing=false
--   FITS: peak reserved 13.99 GiB of 22.97 GiB usable (60.9 %), 8.98 GiB headroom
return {
  title = "Stable Diffusion 3.5 Large LoRA at 1024 px on an RTX 4090 (24 GB) with gradient checkpointing",
  hardware = { gpu = "rtx4090" },
  model = { arch = "sd3", config = "configs/sd35-large-transformer.json" },
  training = { micro_batch = 1, resolution = 1024, precision = "lora_bf16", optimizer = "adamw",
               optimizer_impl = "foreach", checkpointing = true, text_encoders = "cached",
               vae = "cached", max_sequence_length = 77, steps = 2 },
  allocator = { conf = "" },
}
