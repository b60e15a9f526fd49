-- reuse.lua: what lets a sweep's next point reuse the last point's graph: a canonical string of
-- a value (equal exactly when the values are equal as data), the key of what a graph depends on
-- beyond the hardware, and a stand-in table that notes each field the build reads.
local nn = require "vrsim.nn"

local M = {}

-- A value as a string that two values share exactly when they are equal as data (tables by
-- content, keys in order, numbers exact), or nil for what is not data (a function, a table
-- nested deeper than 32 or holding itself).
local function canonical(v)
  local out, seen = {}, {}
  local function key_less(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "boolean" then return (not a) and b end
    return a < b
  end
  local function put(x, depth)
    local t = type(x)
    if t == "table" then
      if depth > 32 or seen[x] then return false end
      seen[x] = true
      -- (keys of one type, strings or numbers, sort as key_less sorts them with Lua's own
      -- comparison, without a call into Lua for each)
      local ks, kt, mixed = {}, nil, false
      for k in next, x do
        ks[#ks + 1] = k
        local t1 = type(k)
        if kt == nil then kt = t1 elseif t1 ~= kt then mixed = true end
      end
      if mixed or (kt ~= "string" and kt ~= "number") then table.sort(ks, key_less) else table.sort(ks) end
      out[#out + 1] = "{"
      for _, k in ipairs(ks) do
        if not (put(k, depth + 1) and put(rawget(x, k), depth + 1)) then return false end
        out[#out + 1] = ";"
      end
      out[#out + 1] = "}"
      seen[x] = nil
    elseif t == "string" then out[#out + 1] = ("%q"):format(x)
    elseif t == "number" then out[#out + 1] = math.type(x) == "integer" and ("%d"):format(x) or ("%a"):format(x)
    elseif t == "boolean" or t == "nil" then out[#out + 1] = tostring(x)
    else return false end
    return true
  end
  return put(v, 0) and table.concat(out) or nil
end

-- graph_key's canonical strings of the profile's host costs by op class, by table
local HOST_CANON = setmetatable({}, { __mode = "k" })

-- What a graph may depend on beyond the hardware section and the GPU's catalog entry (whose
-- fields the build reads are noted one by one): the rest of the normalized scenario (the
-- allocator section and the notes apart: compared where the build read them, and not an input),
-- the GPU's architecture as the op library tells them apart (nn.arch_class: the fused attention
-- kernel) and the host costs its ops carry. nil when some of it is not data.
function M.graph_key(st)
  local rest = {}
  for k, v in pairs(st.cfg) do
    if k ~= "hardware" and k ~= "allocator" and k ~= "notes" then rest[k] = v end
  end
  local prof = st.dev.profile or {}
  -- (the profile's table of host costs by op class is a loaded module's, which nothing changes:
  -- its canonical string is made once, HOST_CANON)
  local hc = prof.host_classes
  if type(hc) == "table" then
    if HOST_CANON[hc] == nil then HOST_CANON[hc] = canonical(hc) or false end
    hc = HOST_CANON[hc]
    if not hc then return nil end
  end
  -- (where the attention rows of an unaligned mask and of flex attention come from: their ops
  -- note it, so two GPUs of one architecture that differ there build their own graphs)
  local carry = require "hw.carry"
  return canonical { cfg = rest, arch = nn.arch_class(st.g.arch, st.g.compute_capability), host_classes = hc,
                     optim_host = prof.optim_host, fsdp2_hook_us = prof.fsdp2_hook_us,
                     bnb_optim = st.dev.bnb_optim and st.dev.bnb_optim.source,
                     sdpa_from = { unaligned = carry.sdpa_rows_from(st.dev, "unaligned"),
                                   flex = carry.sdpa_rows_from(st.dev, "flex") } }
end

-- A stand-in for table t that notes in reads[prefix .. key] the canonical value of every field
-- read through it ("*" for the whole table, when iterated; "!" once anything is written, which
-- no reuse can follow).
function M.noting_reads(t, prefix, reads)
  return setmetatable({}, {
    __index = function(_, k)
      local v = t[k]
      reads[prefix .. tostring(k)] = canonical(v) or "?"
      return v
    end,
    __newindex = function(_, k, v) reads[prefix .. "!"] = "!"; t[k] = v end,
    __pairs = function() reads[prefix .. "*"] = canonical(t) or "?"; return next, t, nil end,
    __len = function() reads[prefix .. "*"] = canonical(t) or "?"; return #t end,
  })
end

M.canonical = canonical

return M
