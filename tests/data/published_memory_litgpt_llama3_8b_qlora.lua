-- litgpt's config_hub/finetune/llama-3-8b/qlora.yaml as vrsim reads it
-- (vrsim tests/data/recipes/...yaml --print-scenario gives these fields): bnb.nf4, LoRA r 32 on
-- query and value, micro-batch 2 of at most 512 tokens, global batch 8, on one A10G
-- (tests/data/published_memory.tsv's litgpt rows)
return {
  hardware = { gpu = "a10g" },
  model = { config = "recipes/Meta-Llama-3-8B/config.json" },
  training = { framework = "litgpt", precision = "lora_bf16", build = "direct", quant = "nf4", quant_double = false,
               lora = { r = 32, alpha = 16, dropout = 0.05, targets = { "q_proj", "v_proj" } },
               micro_batch = 2, grad_accum = 4, seq = 512, optimizer = "paged_adamw" },
}
