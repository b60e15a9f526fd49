-- reads creds.json, which test_hostile.sh links to a file outside this folder (the
-- title printed it); vrsim must refuse the file
return {
  title = require("vrsim.core").read_config("creds.json").secret,
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
