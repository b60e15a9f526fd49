return { hardware = { gpu = "h100_sxm" }, model = { size = "7b-l1" },
  training = { micro_batch = 2, seq = 512, checkpointing = true, attention_mask = "block_diagonal" } }
