-- Claim: gradient checkpointing costs about 30 % more time.
-- reports/make_reports.sh runs this scenario with --set checkpointing=false and true and
-- compares step time (the calibrated H200 profile) and peak memory.
return {
  title = "LLaMA2-7B bf16, micro-batch 4 x 2048: gradient checkpointing's time cost",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 4, seq = 2048, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", attention = "sdpa", checkpointing = true, steps = 2 },
}
