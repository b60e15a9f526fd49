-- accelerate_zero3.yaml by hand, with the training script's model and batch:
-- `vrsim accelerate_zero3.yaml --gpu a100_80g --set model.config=... --set micro_batch=2 --set seq=4096`.
return {
  title = "Llama-3.2-1B under ZeRO-3, optimizer state offloaded to the CPU, 4 GPUs",
  hardware = { gpu = "a100_80g", count = 4 },
  model = { config = "llama-3.2-1b/config.json" },
  training = {
    strategy = "zero3", precision = "bf16", grad_accum = 2,
    zero = { offload_optimizer = "cpu" },
    micro_batch = 2, seq = 4096,
  },
}
