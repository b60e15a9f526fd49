-- lion.lua: the Lion optimizer (Chen et al. 2023, "Symbolic Discovery of Optimization
-- Algorithms") in its two common implementations, parameter by parameter:
--
--   lion        lion-pytorch (0.2.5, lion_pytorch.py update_fn, use_triton False): state
--               exp_avg = zeros_like(p) at the first step (the parameter's dtype); then
--               p.mul_(1 - lr * wd); update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1)
--               .sgn_() (the clone, then the sum, a second tensor of the parameter's size, the
--               clone dropped with the expression); p.add_(update, alpha=-lr);
--               exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2); update dropped as update_fn
--               returns.
--   lion_32bit  bitsandbytes' Lion with optim_bits 32 (bitsandbytes/optim/lion.py, Optimizer1State;
--               transformers' optim="lion_32bit"): state1 an fp32 buffer of the parameter's size,
--               and one fused kernel per parameter (F.optimizer_update_32bit), no temporaries.
local nn = require "vrsim.nn"

local M = {}

-- The step over `params` (grads: their .grad ids, or nil where not known yet); kind "lion" or
-- "lion_32bit"; op: strategies/optim.lua's op maker.
function M.step(cx, params, grads, op, kind)
  for i, p in ipairs(params) do
    local n, b = nn.numel(p.shape), nn.bytes(p.shape, p.dtype)
    local nm = p.name
    local sdt = kind == "lion_32bit" and "fp32" or p.dtype
    local sb = nn.bytes(p.shape, sdt)
    local s = cx.G:tensorv(nm .. (kind == "lion_32bit" and ".state1" or ".exp_avg"), sb, n, sdt, "optstate",
                           false, false, false, true)
    op(cx, { name = "lion.init " .. nm, kind = "elementwise", outputs = { s }, once = true, frees = {}, bytes = sb })
    if kind == "lion_32bit" then
      -- reads the parameter, its gradient and state1; writes the parameter and state1
      op(cx, { name = "lion optimizer_update_32bit " .. nm, kind = "elementwise", inputs = { grads[i] }, frees = {},
               bytes = 3 * b + 2 * sb })
    else
      op(cx, { name = "lion p.mul_(1 - lr*wd) " .. nm, kind = "elementwise", frees = {}, bytes = 2 * b })
      local c = cx.G:tensorv(nm .. ".exp_avg.clone()", b, n, p.dtype, "temp")
      op(cx, { name = "lion exp_avg.clone().mul_(beta1) " .. nm, kind = "copy", outputs = { c }, frees = {}, bytes = 4 * b })
      local u = cx.G:tensorv(nm .. ".update", b, n, p.dtype, "temp")
      op(cx, { name = "lion .add(grad).sgn_() " .. nm, kind = "elementwise", inputs = { c, grads[i] }, outputs = { u },
               frees = { c }, bytes = 5 * b })
      op(cx, { name = "lion p.add_(update) " .. nm, kind = "elementwise", inputs = { u }, frees = {}, bytes = 3 * b })
      op(cx, { name = "lion exp_avg.mul_(beta2).add_(grad) " .. nm, kind = "elementwise", inputs = { grads[i] },
               frees = { u }, bytes = 5 * b })
    end
  end
end

return M
