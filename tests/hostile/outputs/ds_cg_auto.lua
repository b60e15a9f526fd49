-- ZeRO-2 from a DeepSpeed JSON whose contiguous_gradients is "auto": DeepSpeed reads the key at
-- stage 2 (engine.py _configure_zero_optimizer), so nothing may call it unused there, and the HF
-- Trainer fills no "auto" in it: DeepSpeed's config validation refuses the string
return {
  hardware = { gpu = "h200", count = 2 },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1, deepspeed = "ds_cg_auto.json" },
}
