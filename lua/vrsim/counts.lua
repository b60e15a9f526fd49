-- counts.lua: what the report counts of a graph's parameters, and DeepSpeed's own estimate of
-- the model states from those counts, shown beside the simulated figure.
local nn = require "vrsim.nn"

local M = {}

-- What the report counts of a graph's parameters, worked out once per graph (P.rebuild's plans
-- share it): the base model's parameter count as model.parameters() sees it before peft (a tied
-- weight once; adapters not counted) and the parameters that train (adapters included), as the
-- measured records define n_params and n_trainable; for DeepSpeed's estimator, every
-- parameter's elements and the largest layer's.
function M.param_counts(cx)
  if cx.param_counts then return cx.param_counts end
  local n_params, n_trainable, counted = 0, 0, {}
  local total, largest_layer, per_layer = 0, 0, {}
  for _, p in ipairs(cx.params) do
    local n = nn.numel(p.shape)
    if not counted[p] then
      counted[p] = true
      -- (an adapter by its flag, or by peft's parameter names where a model sets no flag; the
      -- plain find first: an unanchored pattern tries every position of every name)
      local name = tostring(p.name)
      local adapter = p.adapter or (name:find("lora_", 1, true) and name:match("%.lora_[AB]%."))
      if not adapter then n_params = n_params + n end
      if p.trainable then n_trainable = n_trainable + n end
    end
    -- (the estimator's sums take every entry of the list; counted is for the report's counts)
    total = total + n
    local l = p.layer or -1
    per_layer[l] = (per_layer[l] or 0) + n
  end
  for _, n in pairs(per_layer) do if n > largest_layer then largest_layer = n end end
  cx.param_counts = { n_params = n_params, n_trainable = n_trainable, total = total,
                      largest_layer = largest_layer }
  return cx.param_counts
end


-- DeepSpeed's estimator for the model states (strategies/dp.lua deepspeed_estimate) of a ZeRO-2 or
-- -3 run from its parameter counts (param_counts); 0 for any other strategy.
function M.deepspeed_estimate(cfg, cx, dp, counts)
  local t = cfg.training
  local ds_est = 0
  if t.strategy == "zero2" or t.strategy == "zero3" then
    local total, largest_layer = counts.total, counts.largest_layer
    local off = cx.dp.opts.offload_optimizer == "cpu"
    ds_est = dp.deepspeed_estimate(t.strategy == "zero2" and 2 or 3, total, largest_layer,
                                   math.min(cfg.hardware.count, cfg.hardware.gpus_per_node),
                                   math.max(1, math.ceil(cfg.hardware.count / cfg.hardware.gpus_per_node)),
                                   off, cx.dp.opts.offload_param == "cpu") or 0
  end
  return ds_est
end

return M
