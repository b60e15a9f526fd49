-- a Hugging Face config.json that is ambiguous JSON (trailing): refused
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", config = "hf_trailing.json" },
  training = { seq = 8, steps = 1 },
}
