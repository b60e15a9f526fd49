-- allocator.conf longer than 511 characters: the whole string is read, so the
-- expandable_segments option at its end is in force (the old 512-byte buffer cut it off)
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l2" },
  training = { micro_batch = 1, seq = 512, steps = 2 },
  allocator = { conf = "max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:128,max_split_size_mb:12800000,expandable_segments:True" },
}
