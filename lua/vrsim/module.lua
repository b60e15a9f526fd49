-- module.lua: models as trees of modules, the way transformers and diffusers write them.
--
-- A module has a class name (`LlamaDecoderLayer`), a key under its parent (`3`), a dotted path
-- from the root (`model.layers.3`), children in construction order, declared parameters and a
-- forward function `forward(cx, self, ...)` that calls its children with `module.call`.
--
-- The life of a model:
--   1. the family file declares the tree from its config (shapes only, nothing allocated);
--   2. passes transform it from outside, as peft's inject_adapter, bitsandbytes' replace_with_bnb
--      and FSDP2's fully_shard do: a pass replaces a module's forward or its parameter
--      declarations, or registers hooks on module boundaries (module.hook);
--   3. `module.materialize` makes every parameter in construction order (depth first, children
--      in the order __init__ created them), which is the order the real constructor allocates;
--   4. forward runs `module.call(cx, root, ...)`. Each call runs the pre-forward hooks
--      registered for that module (in registration order), then its forward, then its
--      post-forward hooks (in reverse order), as nn.Module.__call__ runs forward hooks.
--
-- A forward reads its parameters through `module.weight(cx, p)`: a hook that gathers a sharded
-- parameter or streams an offloaded one in binds the copy for the duration of the call
-- (cx.bound[p]), so model code never names a strategy.
local nn = require "vrsim.nn"

local M = {}

local Module = {}
Module.__index = Module

-- A new module of class `cls` whose forward is `forward(cx, self, ...)`. `attrs` are copied in
-- (config-derived sizes the forward reads).
function M.new(cls, forward, attrs)
  local m = setmetatable({ cls = cls, forward = forward, children = {}, order = {}, decls = {},
                           p = {}, hooks = {} }, Module)
  for k, v in pairs(attrs or {}) do m[k] = v end
  return m
end

-- Adds `child` under `key` (construction order is the order of add calls). Returns the child.
function Module:add(key, child)
  key = tostring(key)
  if self.children[key] then error(("module %s already has a child '%s'"):format(self.cls, key), 2) end
  self.children[key] = child
  self.order[#self.order + 1] = key
  child.parent, child.key = self, key
  return child
end

-- Declares a parameter `key` of `shape`; made by M.materialize. opts: dtype (default: the
-- model's parameter dtype), trainable (default: the model's), load (how a checkpoint holds it
-- where that differs: strategies/expert_load.lua).
function Module:declare(key, shape, opts)
  self.decls[#self.decls + 1] = { key = key, shape = shape, dtype = opts and opts.dtype,
                                  trainable = opts and opts.trainable, load = opts and opts.load }
end

-- The dotted path of every module, from the root (whose path is "").
function M.finalize(root, prefix)
  local function walk(m, path)
    m.path = path
    for _, k in ipairs(m.order) do
      walk(m.children[k], path == "" and k or (path .. "." .. k))
    end
  end
  walk(root, prefix or "")
  return root
end

-- Calls fn(module) for every module, depth first in construction order.
function M.walk(root, fn)
  local function walk(m)
    fn(m)
    -- (m.order is a sequence, only ever appended to: a numeric for visits what ipairs would)
    local order = m.order
    for i = 1, #order do walk(m.children[order[i]]) end
  end
  walk(root)
end

-- The modules whose class is one of `classes` (a set), in construction order.
function M.find(root, classes)
  local r = {}
  M.walk(root, function(m) if classes[m.cls] then r[#r + 1] = m end end)
  return r
end

-- The module at a dotted path, or nil.
function M.get(root, path)
  local m = root
  for part in path:gmatch("[^.]+") do
    m = m.children[part]
    if not m then return nil end
  end
  return m
end

-- Registers a hook on module m: { pre = function(cx, m, args) ... end, post = function(cx, m,
-- args, outs) ... end }. A pre hook may replace arguments (args[i]) or return false to skip the
-- module (device_map: the module runs on another device); the call then returns
-- args.skip_result[1] if the hook set it, else its first argument.
function M.hook(m, h)
  m.hooks[#m.hooks + 1] = h
end

-- Registers a pass's { module = m, hook = h } pairs (or each pair's `field` hook, for a pass
-- that hooks twice: before and after the others).
function M.register(list, field)
  for _, e in ipairs(list) do
    local h = field and e[field] or e.hook
    if h then M.hook(e.module, h) end
  end
end

-- Runs module m's forward with its hooks. Sets cx.layer to the module's layer index while it
-- runs (reports group ops by decoder layer).
function M.call(cx, m, ...)
  local args = table.pack(...)
  local saved_layer = cx.layer
  if m.layer then cx.layer = m.layer end
  local skip = false
  for _, h in ipairs(m.hooks) do
    if h.pre and h.pre(cx, m, args) == false then skip = true end
  end
  local outs
  if skip then
    -- a hook that skips the module says what the call returns (args.skip_result), else x
    outs = args.skip_result and table.pack(table.unpack(args.skip_result, 1, 1)) or table.pack(args[1])
  else
    outs = table.pack(m.forward(cx, m, table.unpack(args, 1, args.n)))
  end
  for i = #m.hooks, 1, -1 do
    local h = m.hooks[i]
    if h.post then h.post(cx, m, args, outs) end
  end
  cx.layer = saved_layer
  return table.unpack(outs, 1, outs.n)
end

-- The tensor a forward uses for parameter p: a gathered or streamed-in copy while a hook has
-- bound one, else p itself.
function M.weight(cx, p)
  return cx.bound and cx.bound[p] or p
end

-- Binds (or, with nil, unbinds) the copy a forward sees for parameter p.
function M.bind(cx, p, copy)
  cx.bound = cx.bound or {}
  cx.bound[p] = copy
end

-- Every parameter of the subtree, in construction order, with its module.
function M.parameters(root)
  local r = {}
  M.walk(root, function(m)
    for _, d in ipairs(m.decls) do
      if m.p[d.key] then r[#r + 1] = { module = m, key = d.key, param = m.p[d.key] } end
    end
    for _, e in ipairs(m.extra_params or {}) do r[#r + 1] = { module = m, key = e.key, param = e.param } end
  end)
  return r
end

-- Parameter bytes the subtree declares, in dtype `dtype` (device_map sizes modules before
-- anything is made, as Accelerate does from the meta model).
function M.declared_bytes(root, dtype)
  local n = 0
  M.walk(root, function(m)
    for _, d in ipairs(m.decls) do n = n + nn.bytes(d.shape, d.dtype or dtype) end
  end)
  return n
end

-- Makes every declared parameter in construction order: `make(m, decl, fullname)` returns the
-- parameter table (nn.param, or a quantized one). Parameters of a module whose `tied` maps a
-- key to another module's parameter are not made again (tie_word_embeddings).
function M.materialize(root, make)
  M.walk(root, function(m)
    for _, d in ipairs(m.decls) do
      local full = m.path == "" and d.key or (m.path .. "." .. d.key)
      m.p[d.key] = make(m, d, full)
    end
    for k, src in pairs(m.tied or {}) do m.p[k] = src.module.p[src.key] end
  end)
end

return M
