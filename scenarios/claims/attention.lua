-- Claim: flash attention halves attention memory.
-- reports/make_reports.sh runs this scenario with --set attention=eager and attention=sdpa (the
-- flash kernel: saves q, k, v, out and logsumexp instead of the s x s probabilities) and
-- compares the memory alive after forward (activations) and the peaks.
return {
  title = "LLaMA2-7B at 4096 tokens: eager attention against SDPA (flash)",
  hardware = { gpu = "h200", capacity_gib = 1024 }, -- pretend: eager at 4096 tokens must not fail
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", optimizer = "adamw",
               optimizer_impl = "fused", attention = "sdpa", steps = 2 },
}
