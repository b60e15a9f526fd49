-- accelerate_fsdp2.yaml by hand, with the training script's model and batch:
-- `vrsim accelerate_fsdp2.yaml --gpu h100 --set model.config=... --set micro_batch=4 --set seq=2048`.
return {
  title = "Llama-3.2-1B under FSDP2 on 8 GPUs, bf16 mixed precision, activation checkpointing",
  hardware = { gpu = "h100", count = 8 },
  model = { config = "llama-3.2-1b/config.json" },
  training = {
    strategy = "fsdp2", precision = "mp_fp32", checkpointing = true,
    zero = { raf = true },
    micro_batch = 4, seq = 2048,
  },
}
