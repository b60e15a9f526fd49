-- a Hugging Face config.json that is ambiguous JSON (duplicate key): refused
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", config = "hf_duplicate_key.json" },
  training = { seq = 8, steps = 1 },
}
