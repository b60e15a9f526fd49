-- a scenario that frees a graph through its __gc and hands it to vrsim as the plan's (issue 18:
-- a segfault): the planner builds its own graph, and a graph cannot leave the scenario's state
local core = require "vrsim.core"
local G = core.new_graph()
getmetatable(G).__gc(G)
require("vrsim.plan").build = function()
  return { graph = G, device = { key = "h200" }, allocator = { capacity_bytes = 1 } }
end
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
