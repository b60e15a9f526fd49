-- torchtune_1B_lora_single_device.yaml by hand: `vrsim torchtune_1B_lora_single_device.yaml --gpu rtx4090`
-- (tune run lora_finetune_single_device).
return {
  title = "Llama-3.2-1B LoRA r64 on q, v, output and the MLP, torchtune's single-device recipe",
  hardware = { gpu = "rtx4090" },
  -- (torchtune's own decoder, model.code: no KV cache in training, its RMSNorm and RoPE, and its
  -- attention expands the 8 key-value heads to the 32 query heads before SDPA)
  model = { config = "llama-3.2-1b/config.json", use_cache = false, code = "torchtune" },
  training = {
    micro_batch = 4, grad_accum = 8, seq = 2048,
    precision = "lora_bf16", build = "direct",
    -- output_proj is transformers' o_proj; apply_lora_to_mlp: w1, w2, w3 (gate, down, up);
    -- every parameter bf16 (the model built under set_default_dtype), the adapters too
    lora = { r = 64, alpha = 128, dropout = 0.0, dtype = "bf16",
             targets = { "q_proj", "v_proj", "o_proj", "gate_proj", "down_proj", "up_proj" } },
    checkpointing = false,
    optimizer = "adamw", optimizer_impl = "fused",
    loss = "chunked",                              -- CEWithChunkedOutputLoss
    attention = "sdpa",
  },
}
