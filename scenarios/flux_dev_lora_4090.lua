-- Flux.1-dev LoRA at 1024 px on a 24 GB card (RTX 4090) with gradient checkpointing: does it
-- fit, and with what? As diffusers' examples/dreambooth/train_dreambooth_lora_flux.py runs it
-- ("--mixed_precision=bf16 --resolution=1024 --train_batch_size=1 --gradient_checkpointing
-- --rank=4 --cache_latents" with one --instance_prompt, so the prompt embeddings are computed
-- once and CLIP-L and T5-XXL deleted): the transformer read from FLUX.1-dev's
-- transformer/config.json (configs/flux1-dev-transformer.json: 11,901,408,320 parameters), cast
-- to bf16 and frozen, rank-4 LoRA on to_k, to_q, to_v, to_out.0 (4,669,440 bf16 adapters),
-- AdamW, the forward under bf16 autocast, 512 T5 tokens beside the 4096 image tokens.
--
-- Answer (vrsim 2026-12-05, ./vrsim scenarios/flux_dev_lora_4090.lua [--set ...]): it does not
-- fit. The bf16 transformer alone is 22.17 GiB of the card's 22.97 usable, and checkpointing
-- cannot help with that: the 57 blocks' checkpointed inputs (1.9 GiB of activations) and one
-- block's recompute and backward overflow the rest. At 512 px it still does not fit; only
-- 512 px with the T5 prompt cut to 128 tokens squeezes in, with 0.03 GiB to spare, which no
-- real run would keep. What it takes is a larger card: a 32 GB RTX 5090 fits at 1024 px with
-- 5.6 GiB to spare (two images a step fit too), but not without checkpointing; computing the
-- text embeddings every step (custom prompts: T5-XXL's 8.9 GiB of bf16 weights stay on the GPU)
-- needs a 48 GB card. Quantizing the frozen transformer to 4 or 8 bits (bitsandbytes), which is
-- how people fit Flux LoRA on 24 GB, is not modelled for the diffusion models (exit 2).
--
-- Checked answers (make test runs each and fails when one drifts; make reports rewrites them):
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'transformer.transformer_blocks.11.attn.rope_q.mul_sin'
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'transformer.transformer_blocks.1.attn.cat_k'
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set resolution=512
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'transformer.single_transformer_blocks.37.attn.rope_q.stack (recompute)'
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set resolution=512 --set max_sequence_length=128
--   FITS: peak reserved 22.89 GiB of 22.97 GiB usable (99.7 %), 0.08 GiB headroom
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set gpu=rtx5090
--   FITS: peak reserved 24.89 GiB of 30.61 GiB usable (81.3 %), 5.72 GiB headroom
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set gpu=rtx5090 --set micro_batch=2
--   FITS: peak reserved 27.35 GiB of 30.61 GiB usable (89.3 %), 3.26 GiB headroom
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set gpu=rtx5090 --set checkpointing=false
--   DOES NOT FIT: CUDA out of memory in step 0 at op 'transformer.transformer_blocks.18.attn.rope_q.x_float'
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set gpu=rtx5090 --set text_encoders=frozen
--   DOES NOT FIT: CUDA out of memory while building the model (at 'parameters')
--   $ ./vrsim scenarios/flux_dev_lora_4090.lua --set gpu=l40s --set text_encoders=frozen --set vae=weight
--   FITS: peak reserved 34.10 GiB of 43.61 GiB usable (78.2 %), 9.51 GiB headroom
return {
  title = "Flux.1-dev LoRA at 1024 px on an RTX 4090 (24 GB) with gradient checkpointing",
  hardware = { gpu = "rtx4090" },
  model = { arch = "flux", config = "configs/flux1-dev-transformer.json" },
  training = { micro_batch = 1, resolution = 1024, precision = "lora_bf16", optimizer = "adamw",
               optimizer_impl = "foreach", checkpointing = true, text_encoders = "cached",
               vae = "cached", max_sequence_length = 512, steps = 2 },
  allocator = { conf = "" },
}
