-- Claim: ZeRO-1 for one card, ZeRO-2 for two to four, ZeRO-3 for eight.
-- LLaMA2-13B bf16 with checkpointing on A100-80GBs (NVLink): reports/make_reports.sh runs it
-- with --set hardware.count=N (1, 2, 4, 8) and --set training.strategy=zero1, zero2, zero3 and
-- reports the lowest stage that fits at each count (lower stages communicate less).
return {
  title = "LLaMA2-13B on A100-80GBs: which ZeRO stage each GPU count needs",
  hardware = { gpu = "a100_80g" },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", build = "direct",
               optimizer = "adamw", optimizer_impl = "fused", attention = "sdpa",
               checkpointing = true, steps = 2 },
}
