-- litgpt's config_hub/finetune/tiny-llama/lora.yaml (TinyLlama-1.1B-intermediate-step-1431k-3T) as vrsim reads it: bf16-true without --quantize, LoRA r 32 (alpha 16,
-- dropout 0.05) on query, key, value, projection, MLP and head, micro-batch 8 of at most 512 tokens, global batch 8, on one A10G
-- (tests/data/published_memory.tsv's litgpt rows). The model's config is given by --set model.config.
return {
  hardware = { gpu = "a10g" },
  model = { config = "tinyllama-1.1b.json" },
  training = { framework = "litgpt", precision = "lora_bf16", build = "direct",
               lora = { r = 32, alpha = 16, dropout = 0.05, targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head" } },
               micro_batch = 8, grad_accum = 1, seq = 512, optimizer = "adamw" },
}
