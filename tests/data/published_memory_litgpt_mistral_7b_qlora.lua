-- litgpt's config_hub/finetune/mistral-7b/qlora.yaml (Mistral-7B-v0.1) as vrsim reads it: bf16-true with --quantize bnb.nf4, LoRA r 32 (alpha 16,
-- dropout 0.05) on query and value, micro-batch 2 of at most 512 tokens, global batch 8, on one A10G
-- (tests/data/published_memory.tsv's litgpt rows). The model's config is given by --set model.config.
return {
  hardware = { gpu = "a10g" },
  model = { config = "mistral-7b-v0.1.json" },
  training = { framework = "litgpt", precision = "lora_bf16", build = "direct", quant = "nf4", quant_double = false,
               lora = { r = 32, alpha = 16, dropout = 0.05, targets = { "q_proj", "v_proj" } },
               micro_batch = 2, grad_accum = 4, seq = 512, optimizer = "paged_adamw" },
}
