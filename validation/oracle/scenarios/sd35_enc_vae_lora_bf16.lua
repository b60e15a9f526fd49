-- oracle capture sd35_enc_vae_lora_bf16: validation/oracle/specs/sd35_enc_vae_lora_bf16.json (written by scenario_of.py)
return {
  title = "oracle: sd35_enc_vae_lora_bf16",
  hardware = {
    gpu = "h200",
  },
  model = {
    config = {
      _class_name = "SD3Transformer2DModel",
      _diffusers_version = "0.31.0.dev0",
      attention_head_dim = 64,
      caption_projection_dim = 1536,
      dual_attention_layers = { 0 },
      in_channels = 16,
      joint_attention_dim = 4096,
      num_attention_heads = 24,
      num_layers = 2,
      out_channels = 16,
      patch_size = 2,
      pooled_projection_dim = 2048,
      pos_embed_max_size = 384,
      qk_norm = "rms_norm",
      sample_size = 128,
    },
    arch = "sd3",
  },
  training = {
    micro_batch = 1,
    resolution = 256,
    precision = "lora_bf16",
    steps = 2,
    optimizer = "adamw",
    text_encoders = "frozen",
    vae = "fp32",
  },
}
