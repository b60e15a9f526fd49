-- the Hugging Face config.json of the hf_* cases without their fault: it fits
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", config = "hf_tiny.json" },
  training = { seq = 8, steps = 1 },
}
