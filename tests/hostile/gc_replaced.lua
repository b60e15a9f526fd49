-- a scenario that removes the graph's __gc and then makes graphs: their C memory, outside the
-- sandbox's memory limit, would never be freed. The metatable a scenario sees is read-only.
local core = require "vrsim.core"
getmetatable(core.new_graph()).__gc = nil
for _ = 1, 1000 do core.new_graph() end
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
