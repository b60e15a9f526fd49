-- Claim: LLaMA2-13B trains on one RTX 4090 (24 GB) with micro-batch 2 and gradient
-- accumulation 8.
-- reports/make_reports.sh runs this scenario (full bf16 fine-tune with checkpointing) and the
-- LoRA variant (--set precision=lora_bf16).
return {
  title = "LLaMA2-13B on one RTX 4090: micro-batch 2, accumulation 8",
  hardware = { gpu = "rtx4090" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 2, grad_accum = 8, seq = 2048, precision = "bf16", build = "direct",
               optimizer = "adamw", optimizer_impl = "fused", attention = "sdpa",
               checkpointing = true, steps = 2 },
}
