-- tests/ops/test_host_speed.lua: unit tests of the host costs carried to the run's host
-- (lua/hw/host_speed.lua): hardware.host_dispatch_scale on every host figure, and
-- hardware.host_classes, the run's host's own figures for named op classes, whose checkpoint
-- columns follow each class's own measured ratio while every other figure keeps the scale; and
-- hardware.host_optim, the run's host's own per-tensor optimizer step and zero_grad.
--
--   VRSIM=./vrsim sh tests/test_ops.sh     (runs every tests/ops/test_*.lua as a scenario: the
--                                           checks run as it loads; a failure is an error, exit 2)
local hs = require "hw.host_speed"

local checks, failures = 0, {}
local function check(ok, what)
  checks = checks + 1
  if not ok then failures[#failures + 1] = what end
end
local function near(a, b) return type(a) == "number" and math.abs(a - b) <= 1e-9 * math.max(1, math.abs(b)) end

-- a profile of the calibration host's shape: two classes, a per-op figure, the optimizer's work
local function profile()
  return {
    host_op_us = 34.0, launch_us = 4.0, host_ckpt_region_us = 112.5,
    host_classes = { conv = { fwd = 62.8, bwd = 113.8, ckpt_fwd = 41.5, ckpt_bwd = 52.6 },
                     add = { fwd = 12.8, bwd = 5.6, ckpt_fwd = 12.2, ckpt_bwd = 0 } },
    optim_host = { step_tensor_us = { foreach = { bf16 = 9.5, fp32 = 9.4 }, fused = { bf16 = 2.9 } },
                   zero_grad_tensor_us = 0.25 },
    kernel_gap_us = 1.67,
  }
end

-- the scale alone: every host figure times it, the GPU's (the stream's gap) as it was
local p = hs.scaled(profile(), 2)
check(near(p.host_op_us, 68) and near(p.launch_us, 8) and near(p.host_ckpt_region_us, 225),
      "scale 2: the per-op, launch and region figures doubled")
check(near(p.host_classes.conv.fwd, 125.6) and near(p.host_classes.conv.ckpt_bwd, 105.2),
      "scale 2: every class column doubled")
check(near(p.kernel_gap_us, 1.67), "scale 2: the stream's gap is the GPU's, unscaled")

-- a class measured on the run's host: its forward and backward node as measured, its checkpoint
-- columns by its own ratios (forward x0.5, backward x2 here), the other class and every other
-- figure at the scale
local base = profile()
p = hs.scaled(base, 2, { conv = { fwd_us = 31.4, bwd_us = 227.6 } })
local c = p.host_classes.conv
check(near(c.fwd, 31.4) and near(c.bwd, 227.6), "conv measured: forward and backward node as given")
check(near(c.ckpt_fwd, 41.5 * 0.5) and near(c.ckpt_bwd, 52.6 * 2),
      ("conv measured: checkpoint columns by its own ratios (got %s, %s)"):format(c.ckpt_fwd, c.ckpt_bwd))
check(near(p.host_classes.add.fwd, 25.6) and near(p.host_classes.add.ckpt_fwd, 24.4),
      "add not named: at the scale")
check(near(p.host_op_us, 68) and near(p.optim_host.step_tensor_us.foreach.bf16, 19),
      "per-op and optimizer figures: at the scale")
check(near(base.host_classes.conv.fwd, 62.8), "the profile handed in is left as it was")
-- at scale 1 a named class still replaces the calibration host's
p = hs.scaled(profile(), 1, { add = { fwd_us = 6.4, bwd_us = 0 } })
check(near(p.host_classes.add.fwd, 6.4) and p.host_classes.add.ckpt_bwd == 0 and near(p.host_classes.add.ckpt_fwd, 6.1),
      "scale 1: a named class replaced, a zero backward node allowed")

-- the ratio validate takes for the figures outside the classes: summed measured over summed
-- calibration figures of the same classes (h200_torch.lua: conv 62.8 + 113.8, activation 12.8 + 18.8)
local cal = hs.calibration_classes()
check(cal.conv.fwd == 62.8 and cal.activation.bwd == 18.8, "calibration classes are h200_torch.lua's")
check(near(hs.class_ratio({ conv = { fwd_us = 50, bwd_us = 100 }, activation = { fwd_us = 10, bwd_us = 20 } }),
           180 / 208.2), "class_ratio: summed measured over summed calibration figures")

-- refused, each naming what is wrong
local function refused(t, want)
  local msg = hs.bad_classes(t)
  check(msg and msg:find(want, 1, true), ("bad_classes: want '%s', got %s"):format(want, tostring(msg)))
  local ok, err = pcall(hs.scaled, profile(), 1, t)
  check(not ok and tostring(err):find(want, 1, true), "scaled refuses it too: " .. want)
end
refused({ convolution = { fwd_us = 1, bwd_us = 1 } }, "hardware.host_classes.convolution: not a host op class")
refused({ conv = { fwd_us = 0, bwd_us = 1 } }, "hardware.host_classes.conv.fwd_us = 0")
refused({ conv = { fwd_us = 1, bwd_us = -1 } }, "hardware.host_classes.conv.bwd_us = -1")
refused({ conv = { fwd_us = 1 } }, "hardware.host_classes.conv.bwd_us = nil")
refused({ conv = { fwd_us = 1e300, bwd_us = 1 } }, "hardware.host_classes.conv.fwd_us = 1e+300: must be a number > 0 and at most 1000000")
refused({ conv = { fwd_us = 1, bwd_us = 1, ckpt_us = 3 } }, "hardware.host_classes.conv.ckpt_us is not a key")
refused({ conv = 5 }, "hardware.host_classes.conv must be")
check(hs.bad_classes({ conv = { fwd_us = 1, bwd_us = 0 } }) == nil, "a good table passes")
-- a profile that prices no op by class cannot take the run's host's classes
local ok, err = pcall(hs.scaled, { host_op_us = 34.0 }, 1, { conv = { fwd_us = 1, bwd_us = 1 } })
check(not ok and tostring(err):find("prices no op by class", 1, true), "no host_class_us: refused, " .. tostring(err))
ok, err = pcall(hs.scaled, nil, 1, { conv = { fwd_us = 1, bwd_us = 1 } })
check(not ok, "no profile at all: refused")

-- the optimizer's per-tensor work measured on the run's host: the step figure for every
-- implementation and dtype (the input is the run's own optimizer's), zero_grad's as given, every
-- other figure at the scale
base = profile()
p = hs.scaled(base, 2, nil, { step_tensor_us = 15.97, zero_grad_tensor_us = 0.38 })
local st = p.optim_host.step_tensor_us
check(near(st.foreach.bf16, 15.97) and near(st.foreach.fp32, 15.97) and near(st.fused.bf16, 15.97),
      "host_optim: every impl/dtype step figure replaced")
check(near(p.optim_host.zero_grad_tensor_us, 0.38), "host_optim: zero_grad replaced")
check(near(p.host_op_us, 68) and near(p.host_classes.conv.fwd, 125.6), "host_optim: the other figures at the scale")
check(near(base.optim_host.step_tensor_us.foreach.bf16, 9.5) and near(base.optim_host.zero_grad_tensor_us, 0.25),
      "host_optim: the profile handed in is left as it was")
-- one key given: the other keeps the scaled profile figure; at scale 1 it still applies
p = hs.scaled(profile(), 2, nil, { zero_grad_tensor_us = 0 })
check(near(p.optim_host.step_tensor_us.foreach.bf16, 19) and p.optim_host.zero_grad_tensor_us == 0,
      "host_optim zero_grad only: the step at the scale, zero_grad 0 allowed")
p = hs.scaled(profile(), 1, nil, { step_tensor_us = 12 })
check(near(p.optim_host.step_tensor_us.fused.bf16, 12) and near(p.optim_host.zero_grad_tensor_us, 0.25),
      "host_optim at scale 1: step replaced, zero_grad the profile's")
-- without it: the table at the scale, and at scale 1 the profile itself
p = hs.scaled(profile(), 2)
check(near(p.optim_host.step_tensor_us.fused.bf16, 5.8) and near(p.optim_host.zero_grad_tensor_us, 0.5),
      "no host_optim: the optimizer figures at the scale")
base = profile()
check(hs.scaled(base, 1) == base, "no host_optim at scale 1: the profile unchanged")

local function refused_optim(t, want)
  local msg = hs.bad_optim(t)
  check(msg and msg:find(want, 1, true), ("bad_optim: want '%s', got %s"):format(want, tostring(msg)))
  local ok2, err2 = pcall(hs.scaled, profile(), 1, nil, t)
  check(not ok2 and tostring(err2):find(want, 1, true), "scaled refuses it too: " .. want)
end
refused_optim({ step_tensor_us = -1 }, "hardware.host_optim.step_tensor_us = -1: must be a number > 0")
refused_optim({ step_tensor_us = 0 }, "hardware.host_optim.step_tensor_us = 0: must be a number > 0")
refused_optim({ zero_grad_tensor_us = -0.1 }, "hardware.host_optim.zero_grad_tensor_us = -0.1: must be a number >= 0")
refused_optim({ step_tensor_us = 0 / 0 }, "hardware.host_optim.step_tensor_us = ")
refused_optim({ step_tensor_us = 2e6 }, "and at most 1000000")
refused_optim({ step_tensor_us = "fast" }, "hardware.host_optim.step_tensor_us = fast")
refused_optim({ step_us = 5 }, "hardware.host_optim.step_us is not a key of host_optim")
refused_optim({}, "hardware.host_optim: give step_tensor_us, zero_grad_tensor_us or both")
refused_optim(5, "hardware.host_optim must be a table")
check(hs.bad_optim({ step_tensor_us = 15.97, zero_grad_tensor_us = 0 }) == nil, "host_optim: a good table passes")
ok, err = pcall(hs.scaled, { host_op_us = 34.0 }, 1, nil, { step_tensor_us = 1 })
check(not ok and tostring(err):find("prices no optimizer host work", 1, true), "no optim_host: refused, " .. tostring(err))

if #failures > 0 then
  error(("host speed: %d of %d checks failed:\n  %s"):format(#failures, checks, table.concat(failures, "\n  ")), 0)
end
print(("host speed: %d checks passed"):format(checks))

return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
