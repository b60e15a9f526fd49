-- requires leak.lua, which test_hostile.sh links to a Lua file outside this folder
local m = require "leak"
return {
  title = tostring(m),
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
