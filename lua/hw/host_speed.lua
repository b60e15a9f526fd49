-- lua/hw/host_speed.lua: a calibrated profile's host (CPU) costs carried to a host of another speed.
--
-- Every host figure of a profile was measured on the calibration host (lua/hw/calibrated/<gpu>.lua
-- launch_us, <gpu>_torch.lua: the per-op and per-class dispatch, checkpointing's region cost, the
-- optimizer's and zero_grad's per-tensor work, FSDP2's hooks). hardware.host_dispatch_scale says
-- how long the run's host takes for the same Python and dispatcher work, as a multiple of the
-- calibration host's time: 1 is that host, 1.5 a host that takes 1.5 times as long per op, 0.5
-- one twice as fast. Its value for a host comes from timing the same tiny-op loop on both
-- (validation/harness/measure_sdxl_steps.py records it beside each run as host_bench, its
-- eager_linear_us against the profile's). The GPU's own figures (kernels, the stream's gap per
-- kernel, launch_device_us) do not move with it. The calibration records show why an input is
-- needed: one H200 host ran the same module-heavy blocks at 41.5 and 26.8 us per kernel in two
-- runs (h200_torch.lua).
local M = {}

-- the profile's fields that are host time in us, and the tables of them (any depth)
local SCALAR = { "launch_us", "host_op_us", "host_ckpt_op_us", "host_ckpt_region_us" }
local TABLES = { "host_classes", "fsdp2_hook_us", "optim_host" }

local function scaled_table(t, k)
  local out = {}
  for key, v in pairs(t) do
    if type(v) == "table" then out[key] = scaled_table(v, k)
    elseif type(v) == "number" then out[key] = v * k
    else out[key] = v end
  end
  return out
end

-- Checks the input: nil (the calibration host) or a positive finite number; else an error naming it.
function M.check(k)
  if k == nil then return 1 end
  if type(k) ~= "number" or not (k > 0) or k == math.huge then
    error(("hardware.host_dispatch_scale = %s: must be a positive number (1 = the calibration host)")
      :format(tostring(k)), 0)
  end
  return k
end

-- A copy of profile `prof` with its host costs times k (prof itself, a loaded module's table, is
-- left as it is: other runs of the process read it).
function M.scaled(prof, k)
  k = M.check(k)
  if not prof or k == 1 then return prof end
  local out = {}
  for key, v in pairs(prof) do out[key] = v end
  for _, f in ipairs(SCALAR) do
    if type(prof[f]) == "number" then out[f] = prof[f] * k end
  end
  for _, f in ipairs(TABLES) do
    if type(prof[f]) == "table" then out[f] = scaled_table(prof[f], k) end
  end
  return out
end

return M
