-- Claim: torch.compile improves memory efficiency by about 15 %.
-- reports/make_reports.sh runs this scenario (a full bf16 fine-tune, eager) and again with
-- --set compile=true (each decoder layer compiled, mode "default", as torchtitan and torchtune
-- compile them), then both with --set precision=lora_bf16 (LoRA r=8 on q and v), and compares
-- peak reserved memory and what forward holds beside the weights and optimizer state.
return {
  title = "LLaMA2-7B: eager against torch.compile of each decoder layer",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", steps = 3 },
}
