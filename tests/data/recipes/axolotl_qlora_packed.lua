-- The run of axolotl_qlora.yml with sample_packing: true, written by hand as a scenario: what
-- `vrsim axolotl_qlora.yml --gpu rtx4090` with that one key changed must simulate
-- (tests/test_recipes.sh compares the two). Flash attention packs: one row of up to
-- micro_batch_size x sequence_len tokens a micro-batch, padded to a multiple of sequence_len
-- (pad_to_sequence_len: true).
return {
  title = "Llama-3.2-1B QLoRA r32 on all Linear layers, axolotl's sample packing",
  hardware = { gpu = "rtx4090" },
  model = { config = "llama-3.2-1b/config.json", use_cache = false },
  training = {
    micro_batch = 1, grad_accum = 4,
    precision = "lora_bf16", build = "direct",
    quant = "nf4", quant_storage = "bf16",
    kbit_prepare = "axolotl",
    lora = { r = 32, alpha = 16, dropout = 0.05, targets = "all-linear" },
    checkpointing = true,
    optimizer = "adamw8bit",
    attention = "flash",
    data = { batching = "multipack", pack_length = 4096, max_length = 2048, pad_to_multiple_of = 2048 },
  },
}
