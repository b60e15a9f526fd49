-- Claim: cap the process at 90 % of the card (torch.cuda.set_per_process_memory_fraction(0.9)).
-- reports/make_reports.sh runs this scenario (LLaMA2-7B LoRA on an RTX 4090 at the largest
-- micro-batch vrsim finds without a cap) with and without --set memory_fraction=0.9.
return {
  title = "LLaMA2-7B LoRA on an RTX 4090: what a 90 % memory-fraction cap changes",
  hardware = { gpu = "rtx4090" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "lora_bf16", build = "direct",
               optimizer = "adamw", optimizer_impl = "fused", attention = "sdpa",
               checkpointing = true, steps = 3 },
}
