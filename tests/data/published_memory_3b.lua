-- torchtune's "Optimization flags" table (README.md): Llama 3.2 3B, full_finetune_single_device,
-- batch size 2, a dataset packed to 4096 tokens (every row full: micro-batch 2 x seq 4096), bf16,
-- one A100 (80 GB: the packed row's 60 GiB rules out the 40 GB card), torch's AdamW. Each row of
-- tests/data/published_memory.tsv adds its techniques with --set. Those rows compile, which vrsim
-- does not model with torchtune's packing (FlexAttention under torch.compiler.disable breaks each
-- compiled layer's graph): rows of 4096 under SDPA instead, the grouped keys and values expanded
-- to every query head as torchtune's attention does (repeat_kv); the first row, uncompiled, is
-- published_memory_3b_packed.lua.
return {
  title = "torchtune README: Llama 3.2 3B full fine-tune, packed 2 x 4096, one A100",
  hardware = { gpu = "a100_80g" },
  model = { config = "llama-3.2-3b.json", repeat_kv = true },
  training = { micro_batch = 2, seq = 4096, precision = "bf16", optimizer = "adamw", build = "direct", steps = 3 },
}
