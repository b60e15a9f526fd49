-- A scenario that computes for a long time (1e8 loop steps, under the instruction limit) before
-- it returns: tests/test_sweep.sh stops its points with --point-timeout.
local x = 0
for i = 1, 1e8 do x = i end
return {
  title = "busy " .. x,
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
