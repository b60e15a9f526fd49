-- Claim: a two-GPU device_map with 20 GiB each (Accelerate's device_map="auto" with
-- max_memory={0: "20GiB", 1: "20GiB"}).
-- LLaMA2-13B fp16 inference over two RTX 3090s; reports/make_reports.sh runs it for each GPU
-- (--set rank=0, rank=1).
return {
  title = "LLaMA2-13B fp16 inference over 2x RTX 3090 with device_map=auto, max_memory 20 GiB",
  hardware = { gpu = "rtx3090", count = 2, max_memory_gib = 20, rank = 0 },
  model = { arch = "llama2", size = "13b" },
  training = { micro_batch = 1, seq = 2048, precision = "fp16", inference = true,
               device_map = "auto", steps = 2 },
}
