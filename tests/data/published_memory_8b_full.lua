-- torchtune's "Memory and training speed" table (README.md): Llama 3.1 8B full fine-tune on one
-- RTX 4090, batch size 2, packed to 2048 tokens, torch.compile on, bf16, with
-- recipes/configs/llama3_1/8B_full_single_device.yaml's settings: activation checkpointing,
-- bitsandbytes' PagedAdamW8bit stepped in backward (optimizer_in_bwd), a chunked loss.
-- (measured before torchtune's F.rms_norm, #2054 of 2024-11-25: its RMSNorm is 0.4.0's Python one,
-- training.torchtune = "0.4.0")
return {
  title = "torchtune README: Llama 3.1 8B full, packed 2 x 2048, compiled, one RTX 4090",
  hardware = { gpu = "rtx4090" },
  model = { config = "llama-3-8b.json", code = "torchtune" },  -- scenarios/configs/llama-3-8b.json, given by --set model.config
  training = { torchtune = "0.4.0", attention = "flex", data = { batching = "torchtune", pack_length = 2048 },
               micro_batch = 2, precision = "bf16", optimizer = "paged_adamw_8bit", build = "direct",
               steps = 3, compile = true, checkpointing = true, checkpoint_impl = "wrapper", loss = "chunked",
               optimizer_in_backward = true },
}
