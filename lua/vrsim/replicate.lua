-- replicate.lua: a stack of alike decoder layers built once in Lua, the others carried over in C.
--
-- Building the graph runs every layer's forward in Lua, and for a model of 32 or 80 layers that is
-- most of a run's time. The layers of a stack are alike: layer l's forward makes the tensors and
-- ops layer l - 1's made, with layer l's parameters, its input, its name ("layers.l") and its
-- layer number. So the stack runs a template layer T and layer T + 1 in Lua, and checks (in C,
-- sim/graph.c graph_is_replica) that every tensor and op of T + 1 is T's carried over to T + 1,
-- field by field, and that the two left the rest of the build's state alike. Where they did, each
-- later layer (but the last, which a model may treat apart) whose modules are declared as T's is
-- T's tensors and ops carried over to it (graph_replicate), and what T's forward left in the
-- build's state is done again for it here; any other layer runs its Lua forward.
--
-- Carried over: a tensor or op T made -> its copy; one of T's parameters (any tensor id its table
-- holds: the parameter's own, a shard's) -> the same of layer l; T's input -> layer l's; any
-- other tensor (the rotary tables, a mask) stays. What a forward leaves besides the graph, and
-- the replay redoes: counters of cx that move alike per layer (cx.use_seq, ...), the
-- parameters' first_use and the fields the forward sets on them (FSDP2's shard_grad.flat),
-- tensors appended to cx.held, autocast copies added to cx.cast_cache (in the order they came),
-- entries the strategies' tables take under the layer's number (ZeRO's accumulation buffer); a
-- checkpointed layer's region number moves by one per layer. Any other change it sees stops the
-- replay for the whole stack. What it cannot see (a value changed in place deeper than cx.dp's
-- tables, a module's own field) the tests compare: tests/scenario_tests.sh runs strategies,
-- checkpointing, LoRA and families with training.build_layers_once true and false (every layer
-- in Lua), which must give one answer.
local R = {}

local mod = require "vrsim.module"

-- ---- the state a layer leaves ---------------------------------------------------------------

-- cx's fields (scalars by value, tables by their key count and their entry for layer l), and the
-- same one level down in the strategies' tables (cx.dp, cx.dm).
local SKIP = { G = true, gpu = true, last_op = true, layer = true, held = true, cast_cache = true }
local function census(cx, l)
  local c = { scalars = {}, tables = {} }
  local function count(t) local n = 0 for _ in next, t do n = n + 1 end return n end
  local function add(path, t) c.tables[path] = { t = t, n = count(t), at = rawget(t, l) } end
  for k, v in pairs(cx) do
    if not SKIP[k] then
      if type(v) == "table" then
        add(k, v)
        if k == "dp" or k == "dm" then
          for k2, v2 in pairs(v) do
            if type(v2) == "table" then add(k .. "." .. tostring(k2), v2)
            else c.scalars[k .. "." .. tostring(k2)] = v2 end
          end
        end
      else
        c.scalars[k] = v
      end
    end
  end
  return c
end

-- What changed between census a and b of layer l: { counters = {name = delta}, entries = {path =
-- the tensor id the table took under l} }, or nil when anything else did.
local function effects(a, b)
  local counters, entries = {}, {}
  for k, v in pairs(b.scalars) do
    local u = a.scalars[k]
    if u ~= v then
      if math.type(v) ~= "integer" or (u ~= nil and math.type(u) ~= "integer") or k:find(".", 1, true) then
        return nil
      end
      counters[k] = v - (u or 0)
    end
  end
  for k in pairs(a.scalars) do if b.scalars[k] == nil then return nil end end
  for path, tb in pairs(b.tables) do
    local ta = a.tables[path]
    if not ta or ta.t ~= tb.t then return nil end
    if tb.n ~= ta.n then
      if tb.n == ta.n + 1 and ta.at == nil and math.type(tb.at) == "integer" then entries[path] = tb.at
      else return nil end
    elseif tb.at ~= ta.at then return nil end
  end
  for path in pairs(a.tables) do if not b.tables[path] then return nil end end
  return { counters = counters, entries = entries }
end

-- ---- which layers are alike ----------------------------------------------------------------

-- s with "layers.from" and "layer from" written for layer `to`: the names graph_replicate gives
-- the copies (sim/graph.c graph_rename_layer, the one rule)
local function rename(s, from, to)
  if type(s) ~= "string" then return s end
  return require("vrsim.core").rename_layer(s, from, to)
end

-- Whether module trees a (of layer la) and b (of lb) were declared alike: the same classes,
-- children, hooks (as many on each module), parameter declarations (key, dtype, trainable, shape)
-- and settings (every other field: a name with the layer's number written for the other's, a
-- layer-number field holding la and lb, a table holding the same scalars, a function counted as
-- alike; the parent, the parameters, forwards and hooks themselves left out). In C:
-- sim/bind/alike.c modules_alike, told each field's role by ROLES.
local ROLES = {
  -- left out: links, the forward function, the lists compared apart (hooks, order, decls)
  p = "skip", parent = "skip", children = "skip", forward = "skip", hooks = "skip", order = "skip",
  decls = "skip", saved_region = "skip",
  -- names with the layer's number in them (a module's key: or the bare layer numbers)
  path = "name", lpre = "name", name = "name", opname = "name", key = "key",
  -- layer numbers
  layer = "layer", dm_key = "layer", dm_unit = "layer", layer_of = "layer" }
local modules_alike = require("vrsim.core").modules_alike
local function alike(a, b, la, lb) return modules_alike(a, b, la, lb, ROLES) end

-- A parameter's fields to two levels (p.k and p.k.k2), scalars only, as "k" / "k.k2" -> value;
-- first_use apart (its own rule).
local function param_fields(p)
  local r = {}
  for k, v in pairs(p) do
    if k ~= "first_use" then
      if type(v) == "table" then
        if k ~= "shape" and k ~= "orig" and k ~= "module" then
          for k2, v2 in pairs(v) do
            if type(v2) ~= "table" then r[tostring(k) .. "." .. tostring(k2)] = v2 end
          end
        end
      else
        r[tostring(k)] = v
      end
    end
  end
  return r
end

-- ---- the stack -------------------------------------------------------------------------------

local function params_of(m)
  local r = {}
  for _, e in ipairs(mod.parameters(m)) do r[#r + 1] = e.param end
  return r
end

-- The tensor ids a layer's parameters hold (the parameter's own, a shard's, ...), by place:
-- list of { path, id }. (Tables made alike visit their keys in one order; layer_map compares the
-- paths, so two layers whose tables differ are simply not carried over.)
local function param_ids(params)
  local r = {}
  local function walk(t, path, depth)
    if depth > 3 then return end
    for k, v in pairs(t) do
      if k == "id" and math.type(v) == "integer" then r[#r + 1] = { path = path, id = v }
      elseif type(v) == "table" and k ~= "orig" and k ~= "module" and k ~= "shape" then
        walk(v, path .. "." .. tostring(k), depth + 1)
      end
    end
  end
  for i, p in ipairs(params) do walk(p, i, 0) end
  return r
end

-- The stack of decoder layers `layers` (their modules, in order) whose layer l runs as call(l, x).
-- Returns run(l, x): layer l's output, each layer run in order.
function R.stack(cx, layers, call)
  local n, T = #layers, 1
  local tpl, ok

  -- one layer run in Lua, with where its tensors and ops lie and what it left
  local function run_measured(l, x)
    local G = cx.G
    local c0 = census(cx, l)
    local held0 = #cx.held
    local ps = params_of(layers[l + 1])
    local fu0, pf0 = {}, {}
    for i, p in ipairs(ps) do fu0[i] = p.first_use; pf0[i] = param_fields(p) end
    local nt0, no0 = G:num_tensors(), G:num_ops()
    local cache, keys = cx.cast_cache, {}
    cx.cast_cache = setmetatable({}, {
      __index = cache,
      __newindex = function(_, k, v) keys[#keys + 1] = k; cache[k] = v end,
      __pairs = function() return next, cache, nil end,
    })
    local okc, out = pcall(call, l, x)
    cx.cast_cache = cache
    if not okc then error(out, 0) end
    local r = { x = x, out = out, params = ps, keys = keys, t_first = nt0 + 1, t_count = G:num_tensors() - nt0,
                op_first = no0, op_count = G:num_ops() - no0, last_op = cx.last_op, held = {}, fu = {} }
    r.moves = effects(c0, census(cx, l))
    for i = held0 + 1, #cx.held do r.held[#r.held + 1] = cx.held[i].id end
    for i, p in ipairs(ps) do
      if p.first_use ~= fu0[i] then
        if fu0[i] ~= nil then r.moves = nil end
        r.fu[i] = p.first_use - (c0.scalars.use_seq or 0)
      end
    end
    -- fields the forward set on the layer's parameters (a shard's gradient buffer)
    r.pset = {}
    for i, p in ipairs(ps) do
      local now = param_fields(p)
      for k, v in pairs(now) do
        if pf0[i][k] ~= v then
          if pf0[i][k] ~= nil or math.type(v) ~= "integer" then r.moves = nil end
          r.pset[#r.pset + 1] = { i = i, k = k, v = v }
        end
      end
      for k in pairs(pf0[i]) do if now[k] == nil then r.moves = nil end end
    end
    return out, r
  end

  -- the LayerMap of the template to layer `to`, whose parameters are ps and input x
  local function layer_map(to, ps, x, region_delta)
    tpl.ids = tpl.ids or param_ids(tpl.params)
    local from_ids, to_ids = tpl.ids, param_ids(ps)
    if #from_ids ~= #to_ids then return nil end
    local ef, et = { tpl.x.id }, { x.id }
    for i, e in ipairs(from_ids) do
      if e.path ~= to_ids[i].path then return nil end
      ef[#ef + 1], et[#et + 1] = e.id, to_ids[i].id
    end
    return { t_first = tpl.t_first, t_count = tpl.t_count, op_first = tpl.op_first, op_count = tpl.op_count,
             from_layer = T, to_layer = to, region_delta = region_delta, ext_from = ef, ext_to = et }
  end

  -- the template's ids carried to a copy whose tensors start at t0 and ops at op0
  local function carriers(map, t0, op0)
    local ext = {}
    for i, id in ipairs(map.ext_from) do ext[id] = map.ext_to[i] end
    local function tid(id)
      if id >= tpl.t_first and id < tpl.t_first + tpl.t_count then return t0 + (id - tpl.t_first) end
      return ext[id] or id
    end
    local function opid(i)
      if i and i >= tpl.op_first and i < tpl.op_first + tpl.op_count then return op0 + (i - tpl.op_first) end
      return i
    end
    return tid, opid
  end

  local function same_counts(a, b)
    for k, v in pairs(a) do if b[k] ~= v then return false end end
    for k in pairs(b) do if a[k] == nil then return false end end
    return true
  end

  -- whether layer T + 1 (its measure nxt) is the template carried over, in the graph and beyond
  local function check(nxt)
    if not (tpl.moves and nxt.moves and tpl.t_count == nxt.t_count and tpl.op_count == nxt.op_count
            and nxt.op_first == tpl.op_first + tpl.op_count and tpl.op_count > 0
            and alike(layers[T + 1], layers[T + 2], T, T + 1)) then
      return false
    end
    for _, d in ipairs { 0, 1 } do
      local map = layer_map(T + 1, nxt.params, nxt.x, d)
      if map and cx.G:is_replica(map, nxt.t_first, nxt.op_first) then
        tpl.region_delta = d
        local tid, opid = carriers(map, nxt.t_first, nxt.op_first)
        local good = same_counts(tpl.moves.counters, nxt.moves.counters) and #tpl.held == #nxt.held
                     and #tpl.keys == #nxt.keys and opid(tpl.last_op) == nxt.last_op
        for i, off in pairs(tpl.fu) do good = good and nxt.fu[i] == off end
        for i in pairs(nxt.fu) do good = good and tpl.fu[i] ~= nil end
        for path, v in pairs(tpl.moves.entries) do good = good and nxt.moves.entries[path] == tid(v) end
        for path in pairs(nxt.moves.entries) do good = good and tpl.moves.entries[path] ~= nil end
        for i, id in ipairs(tpl.held) do good = good and tid(id) == nxt.held[i] end
        good = good and #tpl.pset == #nxt.pset
        for j, e in ipairs(tpl.pset) do
          local f = nxt.pset[j]
          good = good and f and f.i == e.i and f.k == e.k and f.v == tid(e.v)
        end
        for i, k in ipairs(tpl.keys) do
          local a, b = cx.cast_cache[k], cx.cast_cache[nxt.keys[i]]
          good = good and tid(k) == nxt.keys[i] and a and b and tid(a.id) == b.id
        end
        local o1, o2 = tpl.out, nxt.out
        good = good and type(o1) == "table" and type(o2) == "table" and tid(o1.id) == o2.id
        if good then
          for k, v in pairs(o1) do
            local w = o2[k]
            if k == "name" then good = good and rename(v, T, T + 1) == w
            elseif k == "id" then -- checked above
            elseif k == "shape" then
              good = good and type(w) == "table" and #v == #w
              for j = 1, #v do good = good and v[j] == w[j] end
            else good = good and v == w end
          end
          for k in pairs(o2) do good = good and o1[k] ~= nil end
        end
        return good
      end
    end
    return false
  end

  -- layer l as the template carried over
  local function replay(l, x)
    local ps = params_of(layers[l + 1])
    local map = layer_map(l, ps, x, tpl.region_delta * (l - T))
    if not map then return nil end
    local use_seq = cx.use_seq or 0
    local t0, op0 = cx.G:replicate(map)
    local tid, opid = carriers(map, t0, op0)
    for i, off in pairs(tpl.fu) do ps[i].first_use = use_seq + off end
    for _, e in ipairs(tpl.pset) do
      local k, k2 = e.k:match("^([^.]+)%.(.+)$")
      if k then ps[e.i][k][k2] = tid(e.v) else ps[e.i][e.k] = tid(e.v) end
    end
    for k, d in pairs(tpl.moves.counters) do cx[k] = (cx[k] or 0) + d end
    for path, v in pairs(tpl.moves.entries) do
      local k, k2 = path:match("^([^.]+)%.?(.*)$")
      local t = cx[k]
      if k2 ~= "" then t = t[k2] or t[tonumber(k2)] end
      t[l] = tid(v)
    end
    for _, id in ipairs(tpl.held) do cx.held[#cx.held + 1] = { id = tid(id) } end
    for _, k in ipairs(tpl.keys) do cx.cast_cache[tid(k)] = { id = tid(cx.cast_cache[k].id) } end
    cx.last_op = opid(tpl.last_op)
    local out = {}
    for k, v in pairs(tpl.out) do out[k] = v end
    out.id, out.name = tid(tpl.out.id), rename(tpl.out.name, T, l)
    return out
  end

  return function(l, x)
    -- (a device map places each layer on a GPU of its own: its layers are not alike)
    if l == T and n >= 5 and cx.layers_once ~= false and not cx.dm then
      local out
      out, tpl = run_measured(l, x)
      return out
    end
    if l == T + 1 and tpl then
      local out, nxt = run_measured(l, x)
      ok = check(nxt)
      return out
    end
    if ok and l > T + 1 and l < n - 1 and alike(layers[T + 1], layers[l + 1], T, l) then
      local out = replay(l, x)
      if out then return out end
    end
    return call(l, x)
  end
end

return R
