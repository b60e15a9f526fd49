-- torchtune's "Optimization flags" table (README.md): Llama 3.2 3B, full_finetune_single_device,
-- batch size 2 of a dataset packed to 4096 tokens, bf16, one A100 (80 GB: the packed row's 60 GiB
-- rules out the 40 GB card), torch's AdamW: torchtune's PackedDataset (training.data's batching
-- torchtune; the alpaca lengths unknown, so each pack one document, the memory any pack has) and
-- FlexAttention over the batch's document BlockMask, the grouped keys and values expanded to every
-- query head as torchtune's attention does (model.code = "torchtune": its own decoder). Each row of
-- tests/data/published_memory.tsv adds its techniques with --set.
-- the table was measured on torchtune's main of 2024-11-18 (the table's commit, 1814feb17), whose
-- RMSNorm is 0.4.0's Python one (F.rms_norm came a week later, #2054): training.torchtune = "0.4.0".
return {
  title = "torchtune README: Llama 3.2 3B full fine-tune, packed 2 x 4096, one A100",
  hardware = { gpu = "a100_80g" },
  model = { config = "llama-3.2-3b.json", code = "torchtune" },
  training = { torchtune = "0.4.0", attention = "flex", data = { batching = "torchtune", pack_length = 4096 },
               micro_batch = 2, precision = "bf16", optimizer = "adamw", build = "direct", steps = 3 },
}
