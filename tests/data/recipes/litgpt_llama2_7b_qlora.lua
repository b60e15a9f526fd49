-- litgpt_llama2_7b_qlora.yaml written by hand (tests/test_litgpt.sh: the same figures)
return {
  hardware = { gpu = "a10g" },
  model = { config = "Llama-2-7b-hf/config.json" },
  training = { framework = "litgpt", precision = "lora_bf16", build = "direct", quant = "nf4", quant_double = false,
               lora = { r = 32, alpha = 16, dropout = 0.05, targets = { "q_proj", "v_proj" } },
               micro_batch = 2, grad_accum = 4, seq = 512, optimizer = "paged_adamw" },
}
