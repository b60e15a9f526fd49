-- Claim: LoRA (r = 8 on q and v) cuts training memory by about 70 %.
-- reports/make_reports.sh runs this scenario (LoRA on frozen bf16 weights) and again with
-- --set precision=bf16 (full fine-tune, the same everything else) and --set precision=fp32.
-- lora_bf16 is peft's LoRA with the default adapter of vrsim: r = 8 on q_proj and v_proj.
return {
  title = "LLaMA2-7B: LoRA r=8 on q_proj and v_proj against a full fine-tune",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "lora_bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", steps = 3 },
}
