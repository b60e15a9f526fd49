-- Claim: LLaMA2 weights need 28 / 52 / 280 GB in FP32 and 14 / 26 / 140 GB in FP16 for 7B / 13B /
-- 70B, and the smallest workable setups are an RTX 3090, an A100-40GB and 8x A100.
-- reports/make_reports.sh builds each size (--set model.size=13b, 70b) on a pretend card large
-- enough to hold any of them (--set capacity_gib=2048), reads the parameter count from --json,
-- and runs fp16 inference of 7B on an RTX 3090 and 13B on an A100-40GB (--set gpu=...).
return {
  title = "LLaMA2 weights in fp32 and fp16: 7B, 13B, 70B",
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 128, precision = "fp16", inference = true, steps = 1 },
}
