return { hardware = { gpu = "h100_sxm" }, model = { size = "7b-l1" },
  training = { micro_batch = 1, seq = 1024, attention = "flex", checkpointing = true } }
