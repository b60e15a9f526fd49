-- Claims: data, pipeline and tensor parallelism save 30-50 %, 60-80 % and 50-70 % of memory per
-- GPU. (zero_stages.lua checks which ZeRO stage each GPU count needs.) With --set hardware.count=4
-- --set training.parallel.pp=4 it is a 4-stage 1F1B pipeline (docs/pipeline.md), with
-- --set training.parallel.tp=4 tensor parallelism over the four.
-- LLaMA2-7B bf16 with checkpointing on A100-80GBs (NVLink); reports/make_reports.sh runs it on
-- one GPU and with --set hardware.count=N --set training.strategy=ddp, zero1, zero2, zero3.
return {
  title = "LLaMA2-7B on A100-80GBs: memory per GPU under DDP and ZeRO stages",
  hardware = { gpu = "a100_80g" },
  model = { arch = "llama2", size = "7b" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", build = "direct",
               optimizer = "adamw", optimizer_impl = "fused", attention = "sdpa",
               checkpointing = true, steps = 2 },
}
