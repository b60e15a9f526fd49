-- a small model read from the config.json beside it: a sweep's answers depend on that file too
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", config = "cfg.json" },
  training = { seq = 8, steps = 1 },
}
