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
--
-- hardware.host_classes gives the run's host's own figures for named op classes, as
-- validation/harness/measure_host_classes.py times them there ({ conv = { fwd_us = 50.1,
-- bwd_us = 91.3 }, ... }): a tight loop of F.linear on 64x64 tensors times the dispatcher and the
-- launch, not the module call and the autograd recording a model's ops carry, and two hosts need
-- not differ by the same factor in both (on one H100 host the loop said 0.556 of the calibration
-- host where the SDXL UNet's own issue time said 0.776, docs/step-time.md). A named class takes
-- the measured forward and backward node; what checkpointing adds to it (ckpt_fwd, ckpt_bwd) is
-- carried by the same class's own ratio, forward and backward apart (the saved-tensor hooks run
-- in the op's and its node's Python; they were not timed on that host). Every class not named
-- and every other host figure takes host_dispatch_scale.
--
-- hardware.host_optim gives the run's host's own host time per parameter tensor of the optimizer
-- step and of zero_grad(set_to_none=True), as validation/harness/measure_optim_host.py times them
-- there ({ step_tensor_us = 15.97, zero_grad_tensor_us = 0.38 }). The step's per-tensor loop is
-- Python (grouping by device and dtype, the step counters, the bias corrections, each _foreach_
-- op's checks) that neither the tiny-op loop nor the class chains carry: on one H100 host the
-- chains said 0.62-0.72 of the calibration host where this loop took 15.97 us a tensor against
-- its 9.554 (1.67x; validation/results/optim_host_h100.jsonl, optim_host_h200.jsonl). The figure
-- is the run's own optimizer's on its own parameter dtype, so a given step_tensor_us replaces
-- every implementation and dtype of the profile's table; a key not given keeps the scaled figure.
local M = {}

-- the profile's fields that are host time in us, and the tables of them (any depth)
local SCALAR = { "launch_us", "host_op_us", "host_ckpt_op_us", "host_ckpt_region_us", "host_ckpt_saved_us",
                 "host_compiled_kernel_fwd_us", "host_compiled_kernel_bwd_us",
                 "host_compiled_call_fwd_us", "host_compiled_call_bwd_us" }
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

-- The calibration host's op classes (lua/hw/calibrated/<reference>_torch.lua host_class_us): every
-- profile's host figures are that host's, carried or not (lua/hw/carry.lua).
function M.calibration_classes()
  return require("hw.calibrated." .. require("hw.carry").REFERENCE .. "_torch").host_class_us
end

-- A host op class's figure beyond any host (a second an op): a typo, not a measurement.
local MAX_CLASS_US = 1000000

-- The error message for a hardware.host_classes value that is not class -> { fwd_us = us,
-- bwd_us = us } over the calibration host's classes (fwd_us > 0, bwd_us >= 0: a backward node
-- that launches nothing, AddBackward0, can cost next to nothing), or nil when it is good.
function M.bad_classes(t)
  local known = M.calibration_classes()
  local names = {}
  for c in pairs(known) do names[#names + 1] = c end
  table.sort(names)
  if type(t) ~= "table" then return "hardware.host_classes must be a table of op classes" end
  for c, v in pairs(t) do
    local where = "hardware.host_classes." .. tostring(c)
    if not known[c] then
      return ("%s: not a host op class of the profile (one of: %s)"):format(where, table.concat(names, ", "))
    end
    if type(v) ~= "table" then return ("%s must be { fwd_us = us, bwd_us = us }"):format(where) end
    for k in pairs(v) do
      if k ~= "fwd_us" and k ~= "bwd_us" then
        return ("%s.%s is not a key of a host class (fwd_us, bwd_us)"):format(where, tostring(k))
      end
    end
    for _, k in ipairs { "fwd_us", "bwd_us" } do
      local x = v[k]
      local lo = k == "fwd_us" and "> 0" or ">= 0"
      if type(x) ~= "number" or x ~= x or x > MAX_CLASS_US or (k == "fwd_us" and not (x > 0)) or x < 0 then
        return ("%s.%s = %s: must be a number %s and at most %d (us on the run's host)")
          :format(where, k, tostring(x), lo, MAX_CLASS_US)
      end
    end
  end
  return nil
end

-- A per-tensor optimizer figure beyond any host (a second a tensor): a typo, not a measurement.
local MAX_OPTIM_US = 1000000
local OPTIM_KEYS = { step_tensor_us = "> 0", zero_grad_tensor_us = ">= 0" }

-- The error message for a hardware.host_optim value that is not { step_tensor_us = us,
-- zero_grad_tensor_us = us } (either or both; step_tensor_us > 0, zero_grad_tensor_us >= 0:
-- setting grads to None can cost next to nothing a tensor), or nil when it is good.
function M.bad_optim(t)
  if type(t) ~= "table" then
    return "hardware.host_optim must be a table { step_tensor_us = us, zero_grad_tensor_us = us }"
  end
  for k in pairs(t) do
    if not OPTIM_KEYS[k] then
      return ("hardware.host_optim.%s is not a key of host_optim (step_tensor_us, zero_grad_tensor_us)")
        :format(tostring(k))
    end
  end
  if next(t) == nil then
    return "hardware.host_optim: give step_tensor_us, zero_grad_tensor_us or both"
  end
  for _, k in ipairs { "step_tensor_us", "zero_grad_tensor_us" } do
    local x = t[k]
    if x ~= nil and (type(x) ~= "number" or x ~= x or x > MAX_OPTIM_US or x < 0
                     or (k == "step_tensor_us" and not (x > 0))) then
      return ("hardware.host_optim.%s = %s: must be a number %s and at most %d (us a parameter tensor on the run's host)")
        :format(k, tostring(x), OPTIM_KEYS[k], MAX_OPTIM_US)
    end
  end
  return nil
end

-- The ratio of the summed forward and backward figures of the classes of `t` (as
-- hardware.host_classes) to the calibration host's same classes: one factor for the host figures
-- outside them, measured on the model's own kinds of ops.
function M.class_ratio(t)
  local known, got, ref = M.calibration_classes(), 0, 0
  for c, v in pairs(t) do
    got = got + v.fwd_us + v.bwd_us
    ref = ref + known[c].fwd + known[c].bwd
  end
  return ref > 0 and got / ref or nil
end

-- One class of the profile, `c` (the calibration host's figures), with the run's host's measured
-- forward and backward node `m`; its checkpoint columns by the same ratios.
local function measured_class(c, m)
  local out = {}
  for key, v in pairs(c) do out[key] = v end
  out.fwd, out.bwd = m.fwd_us, m.bwd_us
  out.ckpt_fwd = c.ckpt_fwd and c.fwd > 0 and c.ckpt_fwd * m.fwd_us / c.fwd or c.ckpt_fwd
  out.ckpt_bwd = c.ckpt_bwd and c.bwd > 0 and c.ckpt_bwd * m.bwd_us / c.bwd or c.ckpt_bwd
  return out
end

-- A copy of profile `prof` with its host costs times k, the classes of `classes`
-- (hardware.host_classes, nil for none) and the optimizer's per-tensor figures of `optim`
-- (hardware.host_optim, nil for none) the run's host's own (prof itself, a loaded module's
-- table, is left as it is: other runs of the process read it).
function M.scaled(prof, k, classes, optim)
  k = M.check(k)
  if classes ~= nil then
    local bad = M.bad_classes(classes)
    if bad then error(bad, 0) end
    if next(classes) == nil then classes = nil end
  end
  if classes and not (prof and prof.host_classes) then
    error("hardware.host_classes: this GPU's profile prices no op by class (no host_class_us)", 0)
  end
  if optim ~= nil then
    local bad = M.bad_optim(optim)
    if bad then error(bad, 0) end
    if not (prof and prof.optim_host and prof.optim_host.step_tensor_us) then
      error("hardware.host_optim: this GPU's profile prices no optimizer host work (no optim_step_tensor_us)", 0)
    end
  end
  if not prof or (k == 1 and not classes and not optim) then return prof end
  local out = {}
  for key, v in pairs(prof) do out[key] = v end
  for _, f in ipairs(SCALAR) do
    if type(prof[f]) == "number" then out[f] = prof[f] * k end
  end
  for _, f in ipairs(TABLES) do
    if type(prof[f]) == "table" then out[f] = scaled_table(prof[f], k) end
  end
  for c, m in pairs(classes or {}) do
    out.host_classes[c] = measured_class(prof.host_classes[c], m)
  end
  if optim then
    -- the table keeps its shape, step_tensor_us[impl][dtype] (strategies/optim.lua
    -- host_per_tensor_us), every entry the run's own figure
    local oh = out.optim_host
    if optim.step_tensor_us then
      for _, by_dtype in pairs(oh.step_tensor_us or {}) do
        for dt in pairs(by_dtype) do by_dtype[dt] = optim.step_tensor_us end
      end
    end
    if optim.zero_grad_tensor_us then oh.zero_grad_tensor_us = optim.zero_grad_tensor_us end
  end
  return out
end

return M
