-- expert_load.lua: a MoE block's 3-D expert weights as from_pretrained loads them onto the GPU
-- (a device_map load: strategies/warmup.lua). Checkpoints hold one tensor per expert
-- (experts.N.gate_proj / up_proj / down_proj; Mixtral's w1 / w3 / w2); transformers 5.25's weight
-- conversion (conversion_mapping.py, "mixtral" and "qwen2_moe", which qwen3_moe, deepseek_v2/v3
-- and others alias) collects them on the device and builds the stacks there:
--   down_proj     MergeModulelist(dim=0): the experts' tensors stacked (a new tensor), then
--                 dropped
--   gate_up_proj  MergeModulelist(dim=0) of the gate tensors and of the up tensors, each list
--                 dropped once stacked, then Concatenate(dim=1) of the two stacks, then dropped
-- The order is the measured trace's (validation/traces/fulltrace_gen4-tt-qlora-qwen3moe.csv.gz:
-- per layer 128 down_proj tensors, their stack; 256 gate and up tensors, the gate stack, the up
-- stack, their concatenation). These temporaries split the warmup's segment: where the model's
-- bytes fill it, the last layers' stacks need segments of their own.
local nn = require "vrsim.nn"

local M = {}

-- op: one build op (no cost: the host's copy from the checkpoint is not timed here)
local function op(cx, name, inputs, outputs, frees)
  cx.G:op { name = name, kind = "none", phase = "build", inputs = inputs, outputs = outputs,
            frees = frees or {} }
end

-- The experts' tensors of a stack of `shape` (E, ...) as the checkpoint holds them, each loaded.
local function pieces(cx, name, shape, dtype)
  local one = { table.unpack(shape, 2) }
  local out = {}
  for e = 1, shape[1] do
    local id = cx.G:tensor { name = ("%s.%d (checkpoint)"):format(name, e - 1), bytes = nn.bytes(one, dtype),
                             numel = nn.numel(one), dtype = dtype, cat = "temp" }
    op(cx, "load " .. name .. " expert " .. (e - 1), {}, { id })
    out[e] = id
  end
  return out
end

-- A stack made from its pieces, which are then dropped. `into`: the tensor to make, or nil for
-- a new temporary of `shape`. Returns its id.
local function stack(cx, name, ps, shape, dtype, into)
  local id = into or cx.G:tensor { name = name, bytes = nn.bytes(shape, dtype), numel = nn.numel(shape),
                                   dtype = dtype, cat = "temp" }
  op(cx, "MergeModulelist " .. name, ps, { id }, ps)
  return id
end

-- The build ops that make the parameters `list` ({ p = parameter, load = "stack" | "gate_up",
-- dtype =, module = the module's place in construction order }) in a load's order: module by
-- module, the stacked down_proj before the gate_up_proj.
function M.emit(cx, list)
  local order = { table.unpack(list) }
  local rank = { stack = 0, gate_up = 1 }
  table.sort(order, function(a, b)
    if a.module ~= b.module then return a.module < b.module end
    return (rank[a.load] or 2) < (rank[b.load] or 2)
  end)
  for _, x in ipairs(order) do
    local p, dtype, shape = x.p, x.dtype, x.p.shape
    if x.load == "stack" then
      stack(cx, p.name, pieces(cx, p.name, shape, dtype), shape, dtype, p.id)
    elseif x.load == "gate_up" then
      local half = { shape[1], shape[2] // 2, table.unpack(shape, 3) }
      local gate_name = p.name:gsub("gate_up_proj$", "gate_proj")
      local up_name = p.name:gsub("gate_up_proj$", "up_proj")
      local g = pieces(cx, gate_name, half, dtype)
      local u = pieces(cx, up_name, half, dtype)
      local gs = stack(cx, gate_name, g, half, dtype)
      local us = stack(cx, up_name, u, half, dtype)
      op(cx, "Concatenate " .. p.name, { gs, us }, { p.id }, { gs, us })
    else
      error("unknown checkpoint layout '" .. tostring(x.load) .. "'", 0)
    end
  end
end

return M
