-- trl_sft_full.yaml launched by accelerate_zero3.yaml, by hand:
-- `vrsim trl_sft_full.yaml --accelerate accelerate_zero3.yaml --gpu a100_80g`.
return {
  title = "Llama-3.2-1B full SFT under the launcher's DeepSpeed ZeRO-3 on 4 GPUs, optimizer offload",
  hardware = { gpu = "a100_80g", count = 4 },        -- the launcher's num_processes
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    strategy = "zero3", zero = { offload_optimizer = "cpu" }, -- the launcher's DeepSpeed plugin
    precision = "bf16",                              -- DeepSpeed's bf16 (bf16 in both files)
    checkpointing = false,
    micro_batch = 4, seq = 2048,
    grad_accum = 2,                                  -- the same in both files
    build = "direct", attention = "sdpa",
    optimizer = "adamw", optimizer_impl = "fused",   -- TrainingArguments' adamw_torch_fused
  },
}
