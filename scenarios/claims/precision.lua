-- Claim: mixed precision cuts training memory by about 40 %.
-- reports/make_reports.sh runs this scenario with --set precision=fp32, amp_bf16 and bf16 and
-- compares peak reserved memory (and step time).
return {
  title = "LLaMA2-7B full fine-tune: fp32 against mixed precision (amp bf16) and pure bf16",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "fp32", optimizer = "adamw",
               optimizer_impl = "foreach", attention = "sdpa", steps = 3 },
}
