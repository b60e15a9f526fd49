-- optim_in_bwd.lua: the optimizer step in backward, as torchtune's optimizer_in_bwd runs it
-- (torchtune 0.6.1, training/memory.py register_optim_in_bwd_hooks, and the recipes'
-- _setup_optimizer): one optimizer per parameter (config.instantiate(cfg_optimizer, [p])), and a
-- post-accumulate-grad hook on every trainable parameter that calls that optimizer's step() and
-- zero_grad() (set_to_none) as soon as the parameter's gradient is complete. Each parameter's
-- step is then torch.optim's over a list of one tensor (its state made at the first step, its
-- temporaries one parameter's size), and its gradient is freed at once: no more than the
-- gradients of the parameters whose backward is running are ever alive together. bitsandbytes'
-- optimizers (AdamW8bit, the paged ones) the same way: one Optimizer8bit per parameter, its
-- states (and its own pair of quantization maps) made at its first step.
--
-- The hooks are ops declared before backward with hook = 3 (sim/graph.h): the derivation copies
-- each one in just after its parameter's last gradient of the pass is accumulated.
local M = {}

-- Declares every trainable parameter's step and zero_grad as its post-accumulate-grad hook.
-- After this, optim.build (called once backward is derived) has nothing left to do.
function M.register(cx, cfg)
  local optim = require "strategies.optim"
  for _, p in ipairs(cx.params) do
    if p.trainable then
      cx.optim_hook = { grads_of = { p.id }, layer = p.layer or -1 }
      optim.build(cx, cfg, cx.params, { { param = p } })
    end
  end
  cx.optim_hook = nil
  cx.optim_in_backward = true
  -- bitsandbytes' optimizers (adamw8bit, paged_*) step parameter by parameter in any case: each
  -- one-parameter optimizer's step is that parameter's measured step (strategies/bnb_optim.lua)
  local t = cfg.training
  if not (t.optimizer == "adamw8bit" or require("strategies.quant").PAGED[t.optimizer]) then
    cx.notes = cx.notes or {}
    cx.notes[#cx.notes + 1] = "optimizer_in_backward: each parameter's optimizer.step() is timed as torch.optim's "
      .. "over a one-tensor list (the host cost of a separate step() call per parameter is not measured)"
  end
end

return M
