-- trl_sft_full.yaml with torch_compile: true, launched by accelerate_ddp_compile.yaml, by hand:
-- `vrsim trl_sft_full.yaml --accelerate accelerate_ddp_compile.yaml --gpu h100` (the test adds
-- torch_compile: true to the config).
return {
  title = "Llama-3.2-1B full SFT under DDP on 2 GPUs, bf16 autocast, each decoder layer compiled",
  hardware = { gpu = "h100", count = 2 },           -- the launcher's num_processes
  model = { config = "llama-3.2-1b/config.json", use_cache = false }, -- (the Trainer's use_cache, False)
  training = {
    strategy = "ddp",
    precision = "amp_bf16",                          -- float32 weights, bf16 autocast
    compile = true,                                  -- regional compilation: each decoder layer
    checkpointing = false,
    micro_batch = 4, grad_accum = 2, seq = 2048,
    build = "direct", attention = "sdpa",
    optimizer = "adamw", optimizer_impl = "fused",
  },
}
