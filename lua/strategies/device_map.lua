-- device_map.lua: Accelerate's device_map="auto" with max_memory, for inference across GPUs and
-- the host, as from_pretrained(..., device_map="auto", max_memory=...) places a model.
--
-- Placement (accelerate.utils.infer_auto_device_map): the top-level modules in order
-- (embeddings, each decoder layer, final norm, head) fill GPU 0 up to its max_memory, then GPU 1,
-- ..., then the CPU. When anything lands on the CPU, every GPU keeps room for the largest layer,
-- as Accelerate does, because offloaded layers run on GPU 0 (the main execution device): their
-- weights are copied in by the AlignDevicesHook when the layer runs and dropped after.
-- The simulator plays one GPU (hardware.rank): layers placed elsewhere cost it nothing; the
-- hidden state arrives from the previous device (a copy in) and leaves for the next.
local S = require("vrsim.core").streams  -- Op.stream ids (sim/graph.h StreamId)
local nn = require "vrsim.nn"

local M = {}

-- Returns placement: module name ("embed", 0..L-1 layers, "norm", "lm_head") -> gpu index or
-- "cpu", and the list of module sizes (bytes).
function M.place(cfg, sizes, order, gpus, max_bytes)
  local largest = 0
  for _, m in ipairs(order) do if sizes[m] > largest then largest = sizes[m] end end
  local total = 0
  for _, m in ipairs(order) do total = total + sizes[m] end
  local reserve = (total > max_bytes * gpus) and largest or 0
  local placement, g, used = {}, 0, 0
  for _, m in ipairs(order) do
    while g < gpus and used + sizes[m] > max_bytes - reserve do g, used = g + 1, 0 end
    if g < gpus then
      placement[m] = g
      used = used + sizes[m]
    else
      placement[m] = "cpu"
    end
  end
  return placement
end

-- Installs the placement on cx from the modules' sizes (computed from the shapes before the
-- parameters exist): cx.dm.resident(m) says whether module m's weights live on this GPU,
-- cx.dm.on_me(m) whether this GPU runs it.
function M.setup(cx, cfg, order, sizes)
  local hw = cfg.training and cfg.hardware
  local max_bytes = math.floor((hw.max_memory_gib or 1e9) * 2^30)
  local placement = M.place(cfg, sizes, order, hw.count, max_bytes)
  local rank = hw.rank
  local dm = { placement = placement, rank = rank, order = order, sizes = sizes, here = nil }
  function dm.on_me(m)
    local d = placement[m]
    return d == rank or (d == "cpu" and rank == 0)
  end
  function dm.resident(m) return placement[m] == rank end
  function dm.offloaded(m) return placement[m] == "cpu" end
  cx.dm = dm
  return dm
end

-- Called before a module runs: brings the hidden state x onto this GPU if it was elsewhere.
-- Returns the tensor to use (nil when this GPU does not run the module).
function M.enter(cx, m, x, shape, dtype)
  local dm = cx.dm
  if not dm.on_me(m) then
    if dm.here and x then
      -- the hidden state leaves for the next device
      cx.G:op { name = "send hidden state to " .. tostring(dm.placement[m]), kind = "d2h",
                stream = S.d2h, phase = "fwd", inputs = { x.id }, outputs = {}, frees = { x.id },
                bytes = nn.bytes(x.shape, x.dtype) }
    end
    dm.here = false
    return nil
  end
  if dm.here == false or (dm.here == nil and m ~= "embed") then
    -- the hidden state arrives from the previous device
    local nx = nn.new_tensor(cx, "hidden state (received)", shape, dtype, false)
    cx.G:op { name = "receive hidden state for " .. tostring(m), kind = "h2d", stream = S.h2d,
              phase = "fwd", inputs = {}, outputs = { nx.id }, frees = {},
              bytes = nn.bytes(shape, dtype) }
    x = nx
  end
  dm.here = true
  return x or true
end

-- Weights of an offloaded module, copied to the GPU for the duration of its forward.
function M.stream_in(cx, m, holder, keys)
  if not cx.dm.offloaded(m) then return holder, nil end
  local copy, ids, bytes = {}, {}, 0
  for k, v in pairs(holder) do copy[k] = v end
  for _, k in ipairs(keys) do
    local p = holder[k]
    if p then
      bytes = bytes + nn.bytes(p.shape, p.dtype)
      local id = cx.G:tensor { name = p.name .. " (streamed in)", bytes = nn.bytes(p.shape, p.dtype),
                               numel = nn.numel(p.shape), dtype = p.dtype, cat = "param" }
      copy[k] = { id = id, shape = p.shape, dtype = p.dtype, rg = false, name = p.name, param = true }
      ids[#ids + 1] = id
    end
  end
  cx.G:op { name = "AlignDevicesHook: weights of " .. tostring(m) .. " to the GPU", kind = "h2d",
            stream = S.h2d, phase = "fwd", inputs = {}, outputs = ids, frees = {},
            bytes = bytes }
  return copy, ids
end

function M.stream_out(cx, m, ids)
  if not ids or #ids == 0 then return end
  cx.G:op { name = "AlignDevicesHook: weights of " .. tostring(m) .. " back to the CPU", kind = "none",
            phase = "fwd", inputs = {}, outputs = {}, frees = ids }
end

-- The placement and hooks over a module tree: every module with a dm_key (the top-level modules
-- Accelerate places: embeddings, each decoder layer, final norm, head) runs only on the device
-- it was placed on; the hidden state (`hidden`: shape and dtype) travels between devices, and an
-- offloaded module's weights are streamed in for its forward (AlignDevicesHook). Returns
-- { module, hook } pairs.
function M.hooks(cx, cfg, root, hidden, pdtype)
  local mod = require "vrsim.module"
  local order, sizes, units = {}, {}, {}
  mod.walk(root, function(m)
    if m.dm_key ~= nil then
      order[#order + 1] = m.dm_key
      sizes[m.dm_key] = mod.declared_bytes(m, pdtype)
      units[#units + 1] = m
    end
  end)
  M.setup(cx, cfg, order, sizes)
  local out = {}
  for _, m in ipairs(units) do
    local key = m.dm_key
    local streamed, ps
    out[#out + 1] = { module = m, hook = {
      pre = function(c, _, args)
        local x = key ~= "embed" and args[1] or nil
        local xin = M.enter(c, key, x, hidden.shape, hidden.dtype)
        if not xin then
          args.skip_result = { key ~= "embed" and args[1] or nil }
          return false
        end
        if xin ~= true then args[1] = xin end
        ps = {}
        for _, e in ipairs(mod.parameters(m)) do ps[#ps + 1] = e.param end
        local holder, keys = {}, {}
        for i, p in ipairs(ps) do holder[i] = p; keys[i] = i end
        local copy
        copy, streamed = M.stream_in(c, key, holder, keys)
        for i, p in ipairs(ps) do if copy[i] ~= p then mod.bind(c, p, copy[i]) end end
      end,
      post = function(c)
        if not ps then return end
        M.stream_out(c, key, streamed)
        for _, p in ipairs(ps) do mod.bind(c, p, nil) end
        ps, streamed = nil, nil
      end,
    } }
  end
  return out
end

return M
