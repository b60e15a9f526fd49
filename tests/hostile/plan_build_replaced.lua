-- a scenario that replaces the planner's build: the planner runs in its own state,
-- so the replacement never runs and the scenario is planned and checked as usual
require("vrsim.plan").build = function() error("HIJ" .. "ACKED") end
package = nil
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1", hidden = 64, intermediate = 128, heads = 1, kv_heads = 1, vocab = 128 },
  training = { seq = 8, steps = 1 },
}
