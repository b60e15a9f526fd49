-- adafactor.lua: transformers' Adafactor (transformers 5.25, optimization.py Adafactor.step, the
-- Trainer's optim="adafactor"), parameter by parameter as its Python loop runs:
--
--   grad = p.grad, then grad.float() for a bf16/fp16 gradient (a new fp32 tensor);
--   state at the first step: for a matrix, the factored second moments exp_avg_sq_row
--     (shape[:-1]) and exp_avg_sq_col (shape[:-2] + shape[-1:]), made on the CPU and copied over
--     (torch.zeros(...).to(grad)), fp32; for a vector, exp_avg_sq = zeros_like(grad); no first
--     moment (beta1 None, the default); RMS, a 0-dim fp32 tensor made anew every step;
--   p_data_fp32 = p.float() for a bf16/fp16 parameter; RMS = its norm over sqrt(numel);
--   update = grad**2 + eps (two fp32 tensors, the first dropped); the row and column means fold
--     into the factored moments; update = rsqrt(row / row.mean()) * rsqrt(col) (a new fp32
--     tensor; the last one dropped), or exp_avg_sq.rsqrt() for a vector; then in place: * grad,
--     / max(1, RMS(update) / clip_threshold), * lr;
--   p_data_fp32.add_(-update) (-update a new fp32 tensor), and p.copy_(p_data_fp32).
--
-- `grad`, `p_data_fp32` and `update` are the loop's locals: each is dropped only as the next
-- parameter rebinds it, and the last ones as step() returns. So the largest parameter's step holds
-- four fp32 tensors of its size beside its state.
local nn = require "vrsim.nn"

local M = {}

local function temp(cx, name, numel)
  return cx.G:tensorv(name, 4 * numel, numel, "fp32", "temp")
end

-- The step over `params` (their .grad ids in grads; nil entries where they are not known yet, as
-- in backward hooks); op: strategies/optim.lua's op maker.
function M.step(cx, params, grads, op)
  local last = {}
  -- drops the tensors among a, b, c that exist (a Python local rebound or going out of scope)
  local function drop(name, a, b, c)
    local list = {}
    for _, t in ipairs { a or false, b or false, c or false } do if t then list[#list + 1] = t end end
    if #list > 0 then op(cx, { name = name, kind = "none", frees = list }) end
  end
  for i, p in ipairs(params) do
    local n = nn.numel(p.shape)
    local low = p.dtype ~= "fp32"
    local b4 = 4 * n
    local nm = p.name
    -- grad = p.grad: the last parameter's fp32 copy goes
    drop("adafactor: grad rebound", last.grad)
    local g32 = nil
    if low then
      g32 = temp(cx, nm .. ".grad.float()", n)
      op(cx, { name = "adafactor grad.float() " .. nm, kind = "cast_up", inputs = { grads[i] }, outputs = { g32 },
               frees = {}, bytes = nn.bytes(p.shape, p.dtype) + b4 })
    end
    -- state["RMS"]: a 0-dim fp32 tensor, replaced by a new one every step (one alive per parameter)
    local rms = cx.G:tensorv(nm .. ".RMS", 4, 1, "fp32", "optstate", false, false, false, true)
    local factored = #p.shape >= 2
    local rows, cols = n // p.shape[#p.shape], p.shape[#p.shape]
    if factored and #p.shape > 2 then cols = n // p.shape[#p.shape - 1] end
    if factored then
      local r = cx.G:tensorv(nm .. ".exp_avg_sq_row", 4 * rows, rows, "fp32", "optstate", false, false, false, true)
      local c = cx.G:tensorv(nm .. ".exp_avg_sq_col", 4 * cols, cols, "fp32", "optstate", false, false, false, true)
      op(cx, { name = "adafactor.init " .. nm, kind = "copy", outputs = { r, c, rms }, once = true, frees = {},
               bytes = 4 * (rows + cols) })
    else
      local s = cx.G:tensorv(nm .. ".exp_avg_sq", b4, n, "fp32", "optstate", false, false, false, true)
      op(cx, { name = "adafactor.init " .. nm, kind = "elementwise", outputs = { s, rms }, once = true, frees = {},
               bytes = b4 })
    end
    -- p_data_fp32 = p: the last parameter's fp32 copy goes; then p.float() and its RMS
    drop("adafactor: p_data_fp32 rebound", last.p32)
    local p32 = nil
    if low then
      p32 = temp(cx, nm .. ".float()", n)
      op(cx, { name = "adafactor p.float() " .. nm, kind = "cast_up", outputs = { p32 }, frees = {},
               bytes = nn.bytes(p.shape, p.dtype) + b4 })
    end
    op(cx, { name = "adafactor RMS(p) " .. nm, kind = "reduce_rows", frees = {}, bytes = b4 })
    -- update = grad**2 + eps; the last parameter's update goes as it is rebound
    local sq = temp(cx, nm .. ".grad**2", n)
    op(cx, { name = "adafactor grad**2 " .. nm, kind = "elementwise", outputs = { sq }, frees = {}, bytes = 2 * b4 })
    local u = temp(cx, nm .. ".update", n)
    op(cx, { name = "adafactor + eps " .. nm, kind = "elementwise", inputs = { sq }, outputs = { u }, frees = { sq },
             bytes = 2 * b4 })
    drop("adafactor: update rebound", last.update)
    local u2 = temp(cx, nm .. ".update (scaled)", n)
    if factored then
      -- the row and column means into the moments, then rsqrt(row / row.mean()) x rsqrt(col)
      local rm, cm = temp(cx, nm .. ".update.mean(-1)", rows), temp(cx, nm .. ".update.mean(-2)", cols)
      op(cx, { name = "adafactor update.mean(dim=-1) " .. nm, kind = "reduce_rows", inputs = { u }, outputs = { rm },
               frees = {}, bytes = b4 + 4 * rows })
      op(cx, { name = "adafactor exp_avg_sq_row update " .. nm, kind = "elementwise", inputs = { rm }, frees = { rm },
               bytes = 12 * rows })
      op(cx, { name = "adafactor update.mean(dim=-2) " .. nm, kind = "reduce_rows", inputs = { u }, outputs = { cm },
               frees = {}, bytes = b4 + 4 * cols })
      op(cx, { name = "adafactor exp_avg_sq_col update " .. nm, kind = "elementwise", inputs = { cm }, frees = { cm },
               bytes = 12 * cols })
      local rf, cf = temp(cx, nm .. ".r_factor", rows), temp(cx, nm .. ".c_factor", cols)
      op(cx, { name = "adafactor r_factor " .. nm, kind = "elementwise", outputs = { rf }, frees = {}, bytes = 8 * rows })
      op(cx, { name = "adafactor c_factor " .. nm, kind = "elementwise", outputs = { cf }, frees = {}, bytes = 8 * cols })
      op(cx, { name = "adafactor r_factor * c_factor " .. nm, kind = "broadcast", inputs = { rf, cf }, outputs = { u2 },
               frees = { rf, cf, u }, bytes = b4 + 4 * (rows + cols) })
      op(cx, { name = "adafactor update.mul_(grad) " .. nm, kind = "elementwise", inputs = { u2 }, frees = {}, bytes = 3 * b4 })
    else
      op(cx, { name = "adafactor exp_avg_sq update " .. nm, kind = "elementwise", inputs = { u }, frees = {}, bytes = 3 * b4 })
      op(cx, { name = "adafactor exp_avg_sq.rsqrt().mul_(grad) " .. nm, kind = "elementwise", outputs = { u2 },
               frees = { u }, bytes = 5 * b4 })
    end
    -- update /= max(1, RMS(update) / clip_threshold), *= lr: a norm and two in-place passes
    op(cx, { name = "adafactor clip and scale " .. nm, kind = "elementwise", inputs = { u2 }, frees = {}, bytes = 5 * b4 })
    -- p_data_fp32.add_(-update)
    local neg = temp(cx, nm .. ".-update", n)
    op(cx, { name = "adafactor -update " .. nm, kind = "elementwise", inputs = { u2 }, outputs = { neg }, frees = {},
             bytes = 2 * b4 })
    op(cx, { name = "adafactor p.add_(-update) " .. nm, kind = "elementwise", inputs = { neg }, frees = { neg }, bytes = 3 * b4 })
    if low then
      op(cx, { name = "adafactor p.copy_(p_data_fp32) " .. nm, kind = "cast_down", inputs = { p32 }, frees = {},
               bytes = b4 + nn.bytes(p.shape, p.dtype) })
    end
    last = { grad = g32, p32 = p32, update = u2 }
  end
  -- step() returns: its locals go
  drop("adafactor.step returns", last.grad, last.p32, last.update)
end

return M
