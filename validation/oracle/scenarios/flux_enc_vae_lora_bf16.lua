-- oracle capture flux_enc_vae_lora_bf16: validation/oracle/specs/flux_enc_vae_lora_bf16.json (written by scenario_of.py)
return {
  title = "oracle: flux_enc_vae_lora_bf16",
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
      joint_attention_dim = 4096,
      num_attention_heads = 4,
      num_layers = 1,
      num_single_layers = 1,
      patch_size = 1,
      pooled_projection_dim = 768,
    },
    arch = "flux",
  },
  training = {
    micro_batch = 1,
    resolution = 256,
    precision = "lora_bf16",
    steps = 2,
    optimizer = "adamw",
    text_encoders = "frozen",
    vae = "weight",
  },
}
