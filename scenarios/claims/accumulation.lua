-- Claim: accumulating 4 micro-batches of 8 fits where a batch of 32 does not.
-- reports/make_reports.sh runs this scenario (8 x 4 accumulated) and again with
-- --set micro_batch=32 --set grad_accum=1.
return {
  title = "LLaMA2-7B bf16 with checkpointing on an A100-80GB: 4 x 8 accumulated against 32",
  hardware = { gpu = "a100_80g" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 8, grad_accum = 4, seq = 2048, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", attention = "sdpa", checkpointing = true, steps = 2 },
}
