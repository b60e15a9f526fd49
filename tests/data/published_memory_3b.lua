-- torchtune's "Optimization flags" table (README.md): Llama 3.2 3B, full_finetune_single_device,
-- batch size 2, a dataset packed to 4096 tokens (every row full: micro-batch 2 x seq 4096), bf16,
-- one A100 (80 GB: the packed row's 60 GiB rules out the 40 GB card), torch's AdamW. Each row of
-- tests/data/published_memory.tsv adds its techniques with --set.
return {
  title = "torchtune README: Llama 3.2 3B full fine-tune, packed 2 x 4096, one A100",
  hardware = { gpu = "a100_80g" },
  model = { config = "llama-3.2-3b.json" },
  training = { micro_batch = 2, seq = 4096, precision = "bf16", optimizer = "adamw", build = "direct", steps = 3 },
}
