-- model.config through creds.json, a symlink out of this folder
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", config = "creds.json" },
  training = { seq = 8, steps = 1 },
}
