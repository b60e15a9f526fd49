-- a config.json whose intermediate_size (2^52) times the hidden size wraps every MLP byte count
-- to zero (it said FITS); vrsim must name the field, its value and the range
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", config = "huge_intermediate.json" },
  training = { seq = 8, steps = 1 },
}
