-- optim.lua: the optimizer step and zero_grad as torch.optim runs them, tensor by tensor.
--
-- AdamW (torch/optim/adamw.py, adam.py in 2.11):
--   state init (first step): per parameter, in order: [step on device if fused] exp_avg,
--     exp_avg_sq (zeros_like, the parameter's dtype)
--   foreach:  in-place _foreach_* updates, then exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs)
--             (one new tensor per parameter, all alive until the step returns; the Python list
--             frees them last-first)
--   for-loop: per parameter denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps): the sqrt and the
--             quotient, the sqrt freed at once, denom kept until the next parameter's replaces it
--   fused:    one kernel, no temporaries
-- SGD(momentum=0.9) (torch/optim/sgd.py): _multi_tensor_sgd (foreach) groups the tensors by
--   device and dtype; at the first step every momentum_buffer is None, so each is made by
--   torch.clone(grad).detach() in parameter order, then _foreach_add_(params, bufs, alpha=-lr);
--   from the second step _foreach_mul_(bufs, momentum), _foreach_add_(bufs, grads), then the
--   same _foreach_add_ into the parameters. No temporaries. _single_tensor_sgd (for-loop) does
--   the same per parameter; _fused_sgd makes the buffers with empty_like at its first step.
-- torch.amp.GradScaler (torch/amp/grad_scaler.py), precision amp_fp16: scale(loss) makes _scale
--   (torch.full((), 2**16), fp32) and _growth_tracker (int32) on its first call and returns
--   loss * _scale; step() runs unscale_: inv_scale = _scale.double().reciprocal().float(),
--   found_inf = torch.full((), 0.0), and _unscale_grads_ copies both to the device
--   (_MultiDeviceReplicator.get: .to(device, copy=True)) for
--   torch._amp_foreach_non_finite_check_and_unscale_ over each device/dtype group of gradients
--   (in place); the found_inf copy stays in the optimizer state until update() has run
--   _amp_update_scale_ on _scale and _growth_tracker, the other temporaries go as unscale_
--   returns.
-- zero_grad(set_to_none=True) drops every .grad in parameter order.
local nn = require "vrsim.nn"

local M = {}

local function state_tensor(cx, p, what)
  -- (G:tensorv: name, bytes, numel, dtype, cat, requires_grad, trainable, param, persistent)
  local id = cx.G:tensorv(p.name .. "." .. what, nn.bytes(p.shape, p.dtype), nn.numel(p.shape), p.dtype,
                          "optstate", false, false, false, true)
  return { id = id, shape = p.shape, dtype = p.dtype, name = p.name .. "." .. what }
end

-- Kernel launches of one _foreach_ op over tensors of `numels` elements with `depth` tensor
-- lists (ATen/native/cuda/MultiTensorApply.cuh, multi_tensor_apply): 65536-element chunks, one
-- block each; a launch when 320 blocks are queued or the depth's tensor limit is reached at the
-- end of a tensor, and one for the rest.
local MAX_TENSORS = { 110, 64, 48, 36, 30 }
local function foreach_launches(numels, depth)
  local launches, tensors, blocks = 0, 0, 0
  for _, n in ipairs(numels) do
    if n > 0 then
      tensors = tensors + 1
      local chunks = (n + 65535) // 65536
      -- whole rounds of 320 blocks within this tensor, then the remainder
      local c = 0
      while c < chunks do
        local take = math.min(chunks - c, 320 - blocks)
        blocks, c = blocks + take, c + take
        local last = c == chunks
        if blocks == 320 or (tensors == MAX_TENSORS[depth] and last) then
          launches, blocks = launches + 1, 0
          tensors = last and 0 or 1
        end
      end
    end
  end
  return launches + (blocks > 0 and 1 or 0)
end
M.foreach_launches = foreach_launches

-- Host time per parameter tensor of a torch.optim step with this implementation and zero_grad,
-- from the profile of the GPU's machine (validation/harness/measure_optim_host.py: AdamW over
-- 64..2048 tiny tensors, the slope of a least-squares line): grouping by device and dtype, the
-- CPU step counters, the bias-correction lists and each _foreach_ op's per-tensor checks. A
-- model of many tensors pays it every step (SDXL's UNet: 1,680 tensors, ~16 ms with foreach).
local function host_per_tensor_us(cx, impl, dtype)
  local h = cx.optim_host
  if not h then return 0, 0 end
  local by_impl = h.step_tensor_us and h.step_tensor_us[impl]
  local step = by_impl and (by_impl[dtype] or by_impl.bf16) or 0
  return step, h.zero_grad_tensor_us or 0
end
M.host_per_tensor_us = host_per_tensor_us

local function scalar(cx, name, dtype, persistent, cat)
  local sz = nn.DT_SIZE[dtype]
  return cx.G:tensor { name = name, bytes = sz, numel = 1, dtype = dtype, cat = cat or "temp",
                       persistent = persistent }
end

-- Whether the precision runs under torch.amp.GradScaler.
function M.uses_grad_scaler(cfg)
  return cfg.training.precision == "amp_fp16" and not cfg.training.inference
end

-- scaler.scale(loss) (and DeepSpeed's fp16 loss scaler, whose scale is a Python float): the
-- loss multiplied by the scale, the tensor backward starts from. GradScaler makes its _scale and
-- _growth_tracker at the first call.
function M.scale_loss(cx, loss, deepspeed)
  if deepspeed then
    return nn.op(cx, { name = "loss.float() * loss_scale (DeepSpeed fp16)", inputs = { loss },
                       outs = { { "scaled loss", {}, "fp32" } }, grads = { { dtype = "fp32" } },
                       flops = 1, bytes = 8 })
  end
  local sc = cx.grad_scaler
  if not sc then
    sc = { scale = scalar(cx, "GradScaler._scale", "fp32", true, "optstate"),
           growth = scalar(cx, "GradScaler._growth_tracker", "int32", true, "optstate") }
    cx.grad_scaler = sc
    cx.G:op { name = "GradScaler._lazy_init_scale_growth_tracker", kind = "elementwise", phase = "fwd",
              inputs = {}, outputs = { sc.scale, sc.growth }, frees = {}, once = true, bytes = 8 }
  end
  local st = { id = sc.scale, shape = {}, dtype = "fp32", rg = false, name = "GradScaler._scale" }
  return nn.op(cx, { name = "scaler.scale(loss)", inputs = { loss, st },
                     outs = { { "scaled loss", {}, "fp32" } }, saves = { st },
                     grads = { { dtype = "fp32" }, "none" }, flops = 1, bytes = 12 })
end

-- scaler.step's unscale_ before the optimizer step, over `grads` (ids) of `total` bytes.
-- Returns the found_inf copy the optimizer state keeps until update().
local function grad_scaler_unscale(cx, grads, total, n)
  local G, sc = cx.G, cx.grad_scaler
  local d = scalar(cx, "_scale.double()", "int64") -- 8 bytes (the core has no fp64 dtype)
  local r = scalar(cx, "reciprocal()", "int64")
  local inv = scalar(cx, "inv_scale", "fp32")
  local fi = scalar(cx, "found_inf", "fp32")
  local inv_c = scalar(cx, "inv_scale (per-device copy)", "fp32")
  local fi_c = scalar(cx, "found_inf (per-device copy)", "fp32")
  local function o(spec)
    spec.phase, spec.kind = "optim", spec.kind or "elementwise"
    spec.inputs, spec.outputs, spec.frees = spec.inputs or {}, spec.outputs or {}, spec.frees or {}
    G:op(spec)
  end
  o { name = "GradScaler.unscale_: _scale.double()", inputs = { sc.scale }, outputs = { d }, bytes = 12 }
  o { name = "GradScaler.unscale_: .reciprocal()", inputs = { d }, outputs = { r }, frees = { d }, bytes = 16 }
  o { name = "GradScaler.unscale_: .float()", inputs = { r }, outputs = { inv }, frees = { r }, bytes = 12 }
  o { name = "GradScaler.unscale_: found_inf = torch.full((), 0.0)", outputs = { fi }, bytes = 4 }
  o { name = "_MultiDeviceReplicator.get (inv_scale, found_inf)", kind = "copy", inputs = { inv, fi },
      outputs = { inv_c, fi_c }, bytes = 16 }
  o { name = "torch._amp_foreach_non_finite_check_and_unscale_", kind = "foreach_scalar",
      inputs = { inv_c, fi_c }, bytes = 2 * total, kernels = foreach_launches(n, 1) }
  o { name = "GradScaler.unscale_ returns", kind = "none", frees = { inv_c, inv, fi } }
  o { name = "scaler.step: found_inf.item()", kind = "none", inputs = { fi_c } }
  return fi_c
end

local function grad_scaler_update(cx, fi_c)
  local sc = cx.grad_scaler
  cx.G:op { name = "scaler.update: torch._amp_update_scale_", kind = "elementwise", phase = "optim",
            inputs = { sc.scale, sc.growth, fi_c }, outputs = {}, frees = { fi_c }, bytes = 16 }
end

local function op(cx, spec)
  spec.phase = spec.phase or "optim"
  spec.kind = spec.kind or "foreach"
  spec.inputs = spec.inputs or {}
  spec.outputs = spec.outputs or {}
  local h = cx.optim_hook
  if h then
    -- the step in backward (strategies/optim_in_bwd.lua): a post-accumulate-grad hook of one
    -- parameter, which reads its .grad; zero_grad(set_to_none=True) drops it
    spec.hook, spec.grads_of, spec.layer = 3, h.grads_of, h.layer
    if spec.phase == "zero_grad" then spec.free_grads, spec.drop_persistent = true, true end
    spec.phase = "bwd"
  end
  cx.G:op(spec)
end
M.step_op = op

-- Builds the optimizer step for `updates` (a list of { param = p, grad = id }; by default every
-- trainable parameter with its .grad) and zero_grad for those gradients.
function M.build(cx, cfg, params, updates)
  -- with the step in backward every parameter has stepped by now (strategies/optim_in_bwd.lua)
  if cx.optim_in_backward then return 0 end
  local t = cfg.training
  local G = cx.G
  local trainable, grads = {}, {}
  if updates then
    for i, u in ipairs(updates) do trainable[i] = u.param; grads[i] = u.grad end
  else
    local missing = {}
    for _, p in ipairs(params) do
      -- (a parameter no optimizer holds, litgpt's StableEmbedding: its .grad stays)
      if p.trainable and not p.outside_optimizer then
        trainable[#trainable + 1] = p
        grads[#grads + 1] = G:param_grad(p.id)
        if not grads[#grads] then missing[#missing + 1] = p.name end
      end
    end
    if #missing > 0 then
      error(("%d parameters got no gradient (first: %s)"):format(#missing,
            table.concat(missing, ", ", 1, math.min(#missing, 12))), 0)
    end
  end
  local kind, impl = t.optimizer, t.optimizer_impl
  local quant = require "strategies.quant"
  if kind == "adamw8bit" or quant.PAGED[kind] then
    -- bitsandbytes' own kernels; the paged ones keep their large states in unified memory
    local upd = {}
    for i, p in ipairs(trainable) do upd[i] = { param = p, grad = grads[i] } end
    local total, zero_us
    if kind == "adamw8bit" then
      total, zero_us = quant.adamw8bit(cx, upd)
    else
      total, zero_us = quant.paged(cx, upd, kind)
    end
    op(cx, { name = "zero_grad(set_to_none=True)", kind = "none", phase = "zero_grad", frees = grads,
             host_us = zero_us })
    return total
  end
  local total = 0
  for _, p in ipairs(trainable) do total = total + nn.bytes(p.shape, p.dtype) end

  local step_us, zero_us = host_per_tensor_us(cx, impl, trainable[1] and trainable[1].dtype)
  local n_tensors = #trainable
  -- each tensor's elements (the kernels' launches over the lists), and the lists' dtype: fp32
  -- lists (amp, fp32 training) have kernel classes of their own, 13-50 % faster per byte than
  -- bf16 ones (measure_torch_ops.py --only foreach)
  local numels = {}
  for i, p in ipairs(trainable) do numels[i] = nn.numel(p.shape) end
  local fp32 = trainable[1] and trainable[1].dtype == "fp32"
  local function fk(base) return fp32 and base .. "_fp32" or base end
  -- a gradient whole where its parameter is sharded (tensor parallelism's embedding,
  -- strategies/tp.lua): DTensor's dispatch clones the rank's rows of it for each grads argument
  -- of an op that reads it, a temporary of that op (lerp_ reads grads once, addcmul_ twice)
  local redist = {}
  for _, p in ipairs(trainable) do
    if p.tp_replicated_grad then redist[#redist + 1] = p.tp_replicated_grad end
  end
  local function redist_ws(times)
    local ws = {}
    for _ = 1, times do for _, b in ipairs(redist) do ws[#ws + 1] = b end end
    return #ws > 0 and ws or nil
  end
  local found_inf = nil
  if cx.grad_scaler then found_inf = grad_scaler_unscale(cx, grads, total, numels) end
  if kind == "adamw" or kind == "adam" then
    -- state creation, first step only
    for _, p in ipairs(trainable) do
      local outs = {}
      if impl == "fused" then
        outs[#outs + 1] = G:tensorv(p.name .. ".step", 4, 1, "fp32", "optstate", false, false, false, true)
      end
      p.exp_avg = state_tensor(cx, p, "exp_avg")
      p.exp_avg_sq = state_tensor(cx, p, "exp_avg_sq")
      outs[#outs + 1] = p.exp_avg.id
      outs[#outs + 1] = p.exp_avg_sq.id
      op(cx, { name = "adamw.init " .. p.name, outputs = outs, once = true, frees = {},
               bytes = 2 * nn.bytes(p.shape, p.dtype) })
    end
    local n = nn.numel
    if impl == "foreach" then
      -- (one count per list depth: the eight calls share three)
      local launches = {}
      local function k(depth)
        launches[depth] = launches[depth] or foreach_launches(numels, depth)
        return launches[depth]
      end
      -- the step's per-tensor host work, spread over its eight _foreach_ calls
      local per_op = step_us * n_tensors / 8
      -- kinds by access pattern, each with its measured bandwidth (measure_torch_ops.py):
      -- foreach (tensor lists with tensor lists), foreach_scalar (one list and a scalar, in
      -- place), foreach_out (one list into new tensors); fp32 lists (amp, fp32 training) have
      -- classes of their own (fk)
      -- the in-place _foreach_ calls before the sqrt, bytes read + written: mul_(params) 2P,
      -- lerp_(exp_avgs, grads) 3P, mul_(exp_avg_sqs) 2P, addcmul_(exp_avg_sqs, grads, grads) 3P
      op(cx, { name = "adamw._foreach_mul_(params)", kind = fk("foreach_scalar"), frees = {}, bytes = 2 * total, kernels = k(1), host_us = per_op })
      op(cx, { name = "adamw._foreach_lerp_(exp_avgs)", kind = fk("foreach"), frees = {}, bytes = 3 * total, kernels = k(2), host_us = per_op,
               workspace = redist_ws(1) })
      op(cx, { name = "adamw._foreach_mul_(exp_avg_sqs)", kind = fk("foreach_scalar"), frees = {}, bytes = 2 * total, kernels = k(1), host_us = per_op })
      op(cx, { name = "adamw._foreach_addcmul_(exp_avg_sqs)", kind = fk("foreach"), frees = {}, bytes = 3 * total, kernels = k(3), host_us = per_op,
               workspace = redist_ws(2) })
      local sq = {}
      for i, p in ipairs(trainable) do
        sq[i] = G:tensorv(p.name .. ".exp_avg_sq_sqrt", nn.bytes(p.shape, p.dtype), n(p.shape), p.dtype, "temp")
      end
      op(cx, { name = "adamw._foreach_sqrt", kind = fk("foreach_out"), outputs = sq, frees = {}, bytes = 2 * total, kernels = k(2), host_us = per_op })
      op(cx, { name = "adamw._foreach_div_(bias_correction2_sqrt)", kind = fk("foreach_scalar"), frees = {}, bytes = 2 * total,
               kernels = k(1), host_us = per_op })
      op(cx, { name = "adamw._foreach_add_(eps)", kind = fk("foreach_scalar"), frees = {}, bytes = 2 * total, kernels = k(1), host_us = per_op })
      local rev = {}
      for i = #sq, 1, -1 do rev[#rev + 1] = sq[i] end
      op(cx, { name = "adamw._foreach_addcdiv_", kind = fk("foreach"), inputs = sq, frees = rev, bytes = 4 * total,
               kernels = k(3), host_us = per_op })
    elseif impl == "forloop" then
      local prev = nil
      for _, p in ipairs(trainable) do
        local b = nn.bytes(p.shape, p.dtype)
        -- mul_ 2P, lerp_ 3P, mul_ 2P, addcmul_ 3P; then sqrt 2P, div 2P, add_ 2P, addcdiv_ 4P
        op(cx, { name = "adamw.update " .. p.name, kind = "elementwise", frees = {}, bytes = 10 * b,
                 kernels = 4, host_us = step_us,
                 workspace = p.tp_replicated_grad and { p.tp_replicated_grad, p.tp_replicated_grad } or nil })
        local s = G:tensorv(p.name .. ".sqrt", b, n(p.shape), p.dtype, "temp")
        local d = G:tensorv(p.name .. ".denom", b, n(p.shape), p.dtype, "temp")
        op(cx, { name = "adamw.sqrt " .. p.name, kind = "elementwise", outputs = { s }, frees = {}, bytes = 2 * b })
        op(cx, { name = "adamw.div " .. p.name, kind = "elementwise", inputs = { s }, outputs = { d },
                 frees = prev and { s, prev } or { s }, bytes = 2 * b })
        op(cx, { name = "adamw.add_(eps) " .. p.name, kind = "elementwise", inputs = { d }, frees = {}, bytes = 2 * b })
        op(cx, { name = "adamw.addcdiv_ " .. p.name, kind = "elementwise", inputs = { d }, frees = {}, bytes = 4 * b })
        prev = d
      end
      if prev then op(cx, { name = "adamw.step returns", kind = "none", frees = { prev } }) end
    elseif impl == "fused" then
      -- one pass: read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq
      -- its own class: all of Adam's arithmetic in one kernel per tensor-list chunk of the four
      -- lists (validation/results/fused_adamw_h200.lua: 2.72 TB/s in bf16, 3.5 in fp32)
      op(cx, { name = "adamw._fused_adamw_", kind = fk("fused_adamw"), frees = {},
               bytes = 7 * total, kernels = foreach_launches(numels, 4), host_us = step_us * n_tensors,
               workspace = redist_ws(1) })
    else
      error("optimizer_impl must be foreach, forloop or fused", 0)
    end
  elseif kind == "sgd" then
    -- the first step clones each gradient into its momentum buffer (fused: empty_like)
    for _, p in ipairs(trainable) do
      p.momentum = state_tensor(cx, p, "momentum_buffer")
      op(cx, { name = (impl == "fused" and "sgd empty_like " or "sgd momentum_buffer = clone(grad) ") .. p.name,
               kind = "copy", outputs = { p.momentum.id }, once = true, frees = {},
               bytes = impl == "fused" and 0 or 2 * nn.bytes(p.shape, p.dtype) })
    end
    if impl == "foreach" then
      local per_op = step_us * n_tensors / 3
      op(cx, { name = "sgd._foreach_mul_(momentum_buffers)", kind = fk("foreach_scalar"), frees = {},
               bytes = 2 * total, kernels = foreach_launches(numels, 1), from_step = 1, host_us = per_op })
      op(cx, { name = "sgd._foreach_add_(momentum_buffers, grads)", kind = fk("foreach"), frees = {},
               bytes = 3 * total, kernels = foreach_launches(numels, 2), from_step = 1, host_us = per_op })
      op(cx, { name = "sgd._foreach_add_(params, momentum_buffers)", kind = fk("foreach"), frees = {},
               bytes = 3 * total, kernels = foreach_launches(numels, 2), host_us = per_op })
    elseif impl == "forloop" then
      op(cx, { name = "sgd buf.mul_(momentum).add_(grad)", kind = "elementwise", frees = {},
               bytes = 5 * total, kernels = 2 * n_tensors, from_step = 1, host_us = step_us * n_tensors })
      op(cx, { name = "sgd param.add_(buf, alpha=-lr)", kind = "elementwise", frees = {},
               bytes = 3 * total, kernels = n_tensors })
    elseif impl == "fused" then
      op(cx, { name = "sgd._fused_sgd_", frees = {}, bytes = 5 * total, host_us = step_us * n_tensors })
    else
      error("optimizer_impl must be foreach, forloop or fused", 0)
    end
  elseif kind == "adafactor" then
    require("strategies.adafactor").step(cx, trainable, grads, op)
  elseif kind == "lion" or kind == "lion_32bit" then
    require("strategies.lion").step(cx, trainable, grads, op, kind)
  else
    error("optimizer must be adamw, sgd, adafactor, lion or lion_32bit", 0)
  end
  if found_inf then grad_scaler_update(cx, found_inf) end
  -- zero_grad(set_to_none=True)
  op(cx, { name = "zero_grad(set_to_none=True)", kind = "none", phase = "zero_grad",
           frees = updates and updates.all_grads or grads, host_us = zero_us * n_tensors })
  return total
end

return M
