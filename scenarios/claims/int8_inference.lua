-- Claim: LLaMA2-7B inference runs in 8-bit (LLM.int8, bitsandbytes).
-- reports/make_reports.sh runs it on an RTX 3090 and again in fp16 (--set quant=none).
return {
  title = "LLaMA2-7B inference in 8-bit on an RTX 3090",
  hardware = { gpu = "rtx3090" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "fp16", inference = true, quant = "int8",
               build = "direct", steps = 2 },
}
