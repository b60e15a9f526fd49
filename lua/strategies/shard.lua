-- shard.lua: the sharding strategies' module hooks, as FSDP2's fully_shard and DeepSpeed ZeRO-3's
-- parameter coordinator register them: before a unit's forward its parameters are all-gathered
-- (strategies/fsdp.lua gather), after it they are released and the backward gather and gradient
-- reduce-scatter are declared (fsdp.release).
--
-- Units: every module of a class the model never splits (root.no_split: a decoder layer, a UNet
-- block), and the root, which owns every parameter outside them. FSDP2 (fully_shard per unit,
-- then fully_shard(model)) gathers the root's group once as forward starts and keeps it through
-- backward. ZeRO-3 fetches the root's parameters as the modules that own them run: the first
-- module's alone, the ones after the last unit coalesced into one fetch (its prefetch of the
-- modules that follow).
local mod = require "vrsim.module"

local M = {}

-- The parameters of module m's subtree in construction order, as module.parameters() lists them
-- (the order of FSDP2's parameter group and of ZeRO-3's fetch).
local function params_of(m, acc, seen)
  local order = m.order
  for _, d in ipairs(m.decls) do
    local p = m.p[d.key]
    if p and not seen[p] then seen[p] = true; acc[#acc + 1] = p end
  end
  for _, e in ipairs(m.extra_params or {}) do
    if not seen[e.param] then seen[e.param] = true; acc[#acc + 1] = e.param end
  end
  for _, k in ipairs(order) do params_of(m.children[k], acc, seen) end
  return acc
end

-- Gathers `params` for unit id `unit` and binds the gathered copies for the forward.
local function gather(cx, dp, params, unit)
  local holder, keys = {}, {}
  for i, p in ipairs(params) do holder[i] = p; keys[i] = i end
  dp.gather(cx, holder, keys, unit)
  for i, p in ipairs(params) do
    if holder[i] ~= p then mod.bind(cx, p, holder[i]) end
  end
end

local function unbind(cx, params)
  for _, p in ipairs(params) do mod.bind(cx, p, nil) end
end

-- Returns { module, hook } pairs for a sharding strategy over the tree.
function M.hooks(cx, root, kind)
  local dp = require "strategies.dp"
  if not root.no_split then error("this model declares no units to shard", 0) end
  local units = mod.find(root, root.no_split)
  if #units == 0 then error("sharding: no module of the model's unit classes to wrap", 0) end
  local out = {}
  local in_unit = {}
  for _, u in ipairs(units) do
    local ps = params_of(u, {}, {})
    for _, p in ipairs(ps) do in_unit[p] = true end
    local id = u.layer
    out[#out + 1] = { module = u, hook = {
      pre = function(c) gather(c, dp, ps, id) end,
      post = function(c) dp.release(c, id); unbind(c, ps) end,
    } }
  end
  -- the root's own group: every parameter outside the units, module by module
  local groups = {}
  mod.walk(root, function(m)
    local own = {}
    for _, d in ipairs(m.decls) do
      local p = m.p[d.key]
      if p and not in_unit[p] then own[#own + 1] = p end
    end
    for _, e in ipairs(m.extra_params or {}) do
      if not in_unit[e.param] then own[#own + 1] = e.param end
    end
    for k in pairs(m.tied or {}) do
      local p = m.p[k]
      if p and not in_unit[p] then own[#own + 1] = p end
    end
    if #own > 0 then groups[#groups + 1] = { module = m, params = own } end
  end)
  local all = {}
  local seen = {}
  for _, g in ipairs(groups) do
    for _, p in ipairs(g.params) do if not seen[p] then seen[p] = true; all[#all + 1] = p end end
  end
  if kind == "fsdp2" then
    -- fully_shard(model, reshard_after_forward=True) reshards the root after forward too and
    -- gathers it again as backward starts: only the default (None) keeps the root's parameters
    -- (torch/distributed/fsdp/_fully_shard/_fsdp_state.py _lazy_init, _auto_reshard_after_forward)
    out[#out + 1] = { module = root, hook = {
      pre = function(c) gather(c, dp, all, -1) end,
      post = function(c) dp.release(c, -1); unbind(c, all) end,
    } }
  else
    -- ZeRO-3: the first group on its own, the rest in one fetch before the first of them
    local first = groups[1]
    if first then
      local ps1, rest, rest_module, taken = first.params, {}, nil, {}
      for _, p in ipairs(ps1) do taken[p] = true end
      for i = 2, #groups do
        for _, p in ipairs(groups[i].params) do
          if not taken[p] then taken[p] = true; rest[#rest + 1] = p end
        end
        rest_module = rest_module or groups[i].module
      end
      out[#out + 1] = { module = first.module, hook = { pre = function(c) gather(c, dp, ps1, -1) end } }
      if rest_module and #rest > 0 then
        out[#out + 1] = { module = rest_module, hook = { pre = function(c) gather(c, dp, rest, -1) end } }
      end
    end
    out[#out + 1] = { module = root, hook = {
      post = function(c) dp.release(c, -1, true); unbind(c, all) end,
    } }
  end
  return out
end

return M
