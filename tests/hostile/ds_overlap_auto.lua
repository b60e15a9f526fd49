-- DeepSpeed overlap_comm "auto" at stage 3: the Trainer fills no such "auto"
return {
  hardware = { gpu = "h200", count = 2 },
  model = { arch = "llama2", config = "hf_tiny.json" },
  training = { seq = 8, steps = 1, deepspeed = "ds_overlap_auto.json" },
}
