-- oracle capture flux_cut_lora_ckpt: validation/oracle/specs/flux_cut_lora_ckpt.json (written by scenario_of.py)
return {
  title = "oracle: flux_cut_lora_ckpt",
  hardware = {
    gpu = "h200",
  },
  model = {
    config = {
      _class_name = "FluxTransformer2DModel",
      _diffusers_version = "0.30.0.dev0",
      attention_head_dim = 32,
      axes_dims_rope = { 8, 12, 12 },
      guidance_embeds = true,
      in_channels = 64,
      joint_attention_dim = 256,
      num_attention_heads = 4,
      num_layers = 2,
      num_single_layers = 2,
      patch_size = 1,
      pooled_projection_dim = 64,
    },
    arch = "flux",
  },
  training = {
    micro_batch = 1,
    resolution = 256,
    precision = "lora_bf16",
    steps = 2,
    checkpointing = true,
    optimizer = "adamw",
    text_encoders = "cached",
    vae = "cached",
    max_sequence_length = 64,
  },
}
