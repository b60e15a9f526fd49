-- trainer_args_zero2.json (a script's TrainingArguments, as JSON) by hand, with the script's fp32
-- model and rows: `vrsim trainer_args_zero2.json --gpu a100_80g --gpus 4
-- --set model.config=llama-3.2-1b/config.json --set seq=1024`.
return {
  title = "Llama-3.2-1B full fine-tuning, fp32 weights under bf16 autocast, ZeRO-2 over 4 GPUs",
  hardware = { gpu = "a100_80g", count = 4 },
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    micro_batch = 2, grad_accum = 8, seq = 1024,
    precision = "amp_bf16", build = "direct", checkpointing = true,
    optimizer = "adamw", optimizer_impl = "foreach",
    attention = "sdpa",
    deepspeed = "zero2.json",
  },
}
