-- a scenario that rewrites the string library and the string metatable: the
-- planner's strings are not the scenario's, so planning goes on unchanged
local mt = getmetatable("")
mt.__index.format = function() error("HIJ" .. "ACKED") end
mt.__index.match = function() error("HIJ" .. "ACKED") end
mt.__index = function() error("HIJ" .. "ACKED") end
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
