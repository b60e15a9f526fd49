-- trl_sft_full.yaml launched by accelerate_fsdp2.yaml, by hand:
-- `vrsim trl_sft_full.yaml --accelerate accelerate_fsdp2.yaml --gpu h100`.
return {
  title = "Llama-3.2-1B full SFT under FSDP2 on 8 GPUs, bf16 mixed precision, FSDP's checkpointing",
  hardware = { gpu = "h100", count = 8 },           -- the launcher's num_processes
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    strategy = "fsdp2", zero = { raf = true },       -- the launcher's FSDP plugin
    precision = "mp_fp32",                           -- fp32 shards, bf16 compute (bf16 in both files)
    checkpointing = true,                            -- fsdp_activation_checkpointing
    micro_batch = 4, grad_accum = 2, seq = 2048,     -- the trainer's
    build = "direct", attention = "sdpa",
    optimizer = "adamw", optimizer_impl = "fused",   -- TrainingArguments' adamw_torch_fused
  },
}
