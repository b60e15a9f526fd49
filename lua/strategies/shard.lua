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

local function dp_mod() return require "strategies.dp" end

local function unbind(cx, params)
  for _, p in ipairs(params) do mod.bind(cx, p, nil) end
end

-- The op tag of a unit of training.zero.units: its index k (from 1) and the call c (from 1) of
-- this forward. Each call has a tag of its own, as each call has hooks of its own in FSDP2 (see
-- extra_units); far above any decoder layer's index (the tags of the layers' own units).
M.UNIT_TAG, M.UNIT_CALLS = 1 << 20, 1 << 10
local function unit_tag(k, c) return M.UNIT_TAG + k * M.UNIT_CALLS + c end

-- Whether module m is (or is inside) a module of one of the classes `classes`.
local function inside(m, classes)
  while m do
    if classes[m.cls] then return true end
    m = m.parent
  end
  return false
end

-- training.zero.units: fully_shard(module) on each named module before the root's, as torchtune's
-- shard_model does for custom_sharded_layers. FSDP2 runs a unit's hooks on every call of its
-- module (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py): pre_forward all-gathers
-- (unshard is a no-op only while the group is still unsharded) and registers a
-- RegisterPostBackwardFunction on that call's inputs; post_forward reshards
-- (reshard_after_forward) and _fsdp_state.py's _post_forward hooks _pre_backward on that call's
-- outputs. So a head called once per output chunk (torchtune's chunked_output) is all-gathered
-- once per chunk in forward; in backward each chunk's pre_backward gathers it again (the chunk
-- after it left the group resharded and POST_BACKWARD). Its one unsharded parameter's
-- AccumulateGrad waits for every chunk's gradient, summed in autograd's input buffer, so the
-- post_backward of every chunk but the first finds no .grad and only reshards; the first
-- chunk's, last in backward, reduce-scatters the sum (strategies/fsdp.lua release; the capture
-- llama2_7b_l2_fsdp2_w2_bf16_chunked_units). No chunk's backward all-gather is prefetched: the
-- chunk before it (in backward) prefetches its own group, still unsharded, a no-op. Each call is
-- a unit of the graph of its own (its tag); s.unit_tags[tag] says which module and call it is.
local function extra_units(cx, root, s, in_unit, out)
  -- (strategies/dp.lua check_knobs has refused units under any strategy but fsdp2)
  local paths = s.opts.units or {}
  if #paths == 0 then return end
  -- parameters a module shares with another (tie_word_embeddings): FSDP2 refuses a parameter in
  -- two groups (_validate_no_duplicate_params); fully_shard([a, b]) is not modelled
  local tied = {}
  mod.walk(root, function(m)
    for k, src in pairs(m.tied or {}) do tied[m] = true; tied[src.module] = true end
  end)
  s.unit_tags = s.unit_tags or {}
  local seen = {}
  for k, path in ipairs(paths) do
    local m = mod.get(root, path)
    if not m or m == root then
      error(("training.zero.units: '%s' is not a module of the model"):format(path), 0)
    end
    if seen[m] then error(("training.zero.units: '%s' is named twice"):format(path), 0) end
    seen[m] = true
    if inside(m, root.no_split) then
      error(("training.zero.units: '%s' is inside a decoder layer, a unit already (nested fully_shard "
             .. "is not modelled)"):format(path), 0)
    end
    if #mod.find(m, root.no_split) > 0 then
      error(("training.zero.units: '%s' holds decoder layers (a unit around units is not modelled)"):format(path), 0)
    end
    local tie
    mod.walk(m, function(x) tie = tie or tied[x] end)
    if tie then
      error(("training.zero.units: '%s' shares its weight with another module (tied embeddings): FSDP2 refuses "
             .. "a parameter in two units, and fully_shard over both is not modelled"):format(path), 0)
    end
    local ps = params_of(m, {}, {})
    if #ps == 0 then error(("training.zero.units: '%s' has no parameters"):format(path), 0) end
    for _, p in ipairs(ps) do
      if in_unit[p] then error(("training.zero.units: '%s' shares parameters with another unit"):format(path), 0) end
      in_unit[p] = true
    end
    local u = { path = path, module = m, calls = 0 }
    s.extra_units = s.extra_units or {}
    s.extra_units[#s.extra_units + 1] = u
    out[#out + 1] = { module = m, hook = {
      pre = function(c, _, args)
        -- (m.calls_per_forward: a module its caller runs more than once per forward, the head
        -- over torchtune's output chunks, vrsim/lm_loss.lua)
        local n = m.calls_per_forward or 1
        u.calls = u.calls + 1
        if u.calls > n then
          error(("training.zero.units: '%s' ran %d times in one forward, more than its caller declares (%d)"):format(
                path, u.calls, n), 0)
        end
        if n > 1 and not s.opts.raf then
          -- unsharded from the first call to the first backward's post_backward, then gathered
          -- again for every call after: not modelled
          error(("training.zero.units: '%s' runs %d times per forward; with raf = false its gathers are not "
                 .. "modelled"):format(path, n), 0)
        end
        local tag = unit_tag(k, u.calls)
        -- whether an input of the call needs a gradient: where none does (token ids), FSDP2 has no
        -- RegisterPostBackwardFunction to run the unit's post-backward (strategies/fsdp.lua PH)
        local grad_input = false
        for i = 1, args.n or #args do
          local a = args[i]
          if type(a) == "table" and a.rg then grad_input = true end
        end
        s.unit_tags[tag] = { key = "unit " .. path, path = path, call = u.calls, calls = n, grad_input = grad_input,
                             label = n > 1 and ("%s call %d"):format(path, u.calls) or path }
        c.layer = tag
        gather(c, dp_mod(), ps, tag)
      end,
      post = function(c) dp_mod().release(c, c.layer); unbind(c, ps) end,
    } }
  end
end

-- Returns { module, hook } pairs for a sharding strategy over the tree.
function M.hooks(cx, root, kind)
  local dp = require "strategies.dp"
  if not root.no_split then error("this model declares no units to shard", 0) end
  local units = mod.find(root, root.no_split)
  if #units == 0 then error("sharding: no module of the model's unit classes to wrap", 0) end
  local out = {}
  local in_unit = {}
  extra_units(cx, root, cx.dp, in_unit, out)
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
      pre = function(c)
        for _, u in ipairs(c.dp.extra_units or {}) do u.calls = 0 end
        gather(c, dp, all, -1)
      end,
      post = function(c)
        -- a unit whose module never ran: its weight read by another module directly (a fused
        -- loss reading lm_head.weight), which FSDP2 would not have gathered
        for _, u in ipairs(c.dp.extra_units or {}) do
          if u.calls == 0 then
            error(("training.zero.units: '%s' never runs its forward in this run (its weight is read by "
                   .. "another module: not gathered by its own unit), not modelled"):format(u.path), 0)
          end
        end
        dp.release(c, -1); unbind(c, all)
      end,
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
