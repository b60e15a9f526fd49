-- torchtune's "Optimization flags" table (README.md), its first row: Llama 3.2 3B,
-- full_finetune_single_device, batch size 2 of a dataset packed to 4096 tokens, bf16, one A100
-- (80 GB), torch's AdamW, nothing else on: torchtune's PackedDataset (training.data's batching
-- torchtune; the alpaca lengths unknown, so each pack one document: the memory is the same for
-- any pack) and FlexAttention over the batch's document BlockMask, the grouped keys and values
-- expanded to every query head as torchtune's attention does (repeat_kv). The rows after it turn
-- on compile, which vrsim does not model with torchtune's packing (published_memory_3b.lua).
return {
  title = "torchtune README: Llama 3.2 3B full fine-tune, packed 2 x 4096, one A100",
  hardware = { gpu = "a100_80g" },
  model = { config = "llama-3.2-3b.json", repeat_kv = true },
  training = { micro_batch = 2, precision = "bf16", optimizer = "adamw", build = "direct", steps = 3,
               attention = "flex", data = { batching = "torchtune", pack_length = 4096 } },
}
