-- names.lua: the names in messages: "did you mean" (the closest valid name to a misspelling),
-- the sorted keys a message lists, and numbers as a message shows them.

local M = {}

-- Edit distance with adjacent transpositions counted as one edit (optimal string alignment), for
-- "did you mean": "bf61" is one slip from "bf16".
local function distance(a, b)
  local d = {}
  for i = 0, #a do d[i] = { [0] = i } end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[#a][#b]
end

-- Whether cand is close enough to word to be what was meant: a suggestion that names another
-- thing is worse than none ("loss" is not "lora", "tp" not "ddp", "fp8" not "fp16"). The word
-- has at least three characters, the two differ by at most one edit in four (one for names up to
-- seven characters), and their digits differ by no more than a swap or one digit typed twice or
-- dropped: a changed digit is another product or format (rtx4080 is not rtx4090, fp8 not fp16).
local function close_enough(word, cand, d)
  if #word < 3 then return false end
  if d > math.max(1, math.max(#word, #cand) // 4) then return false end
  local da, db = word:gsub("%D", ""), cand:gsub("%D", "")
  if da == db then return true end
  if #da == #db then
    local sa, sb = {}, {}
    for c in da:gmatch(".") do sa[#sa + 1] = c end
    for c in db:gmatch(".") do sb[#sb + 1] = c end
    table.sort(sa); table.sort(sb)
    return table.concat(sa) == table.concat(sb) and distance(da, db) == 1
  end
  return math.abs(#da - #db) == 1 and distance(da, db) == 1
end

-- The name of `names` that `word` most likely misspells, or nil when none is close enough.
local function closest(word, names)
  if type(word) ~= "string" then return nil end
  local w = word:lower()
  local best, bd = nil, math.huge
  for _, n in ipairs(names) do
    local d = distance(w, n:lower())
    if d < bd then best, bd = n, d end
  end
  if best and close_enough(w, best:lower(), bd) then return best end
  return nil
end
M.closest = closest

-- The keys of t, sorted (for messages that list the valid names).
local function keys(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end
M.keys = keys

-- The keys of t in a fixed order (strings sorted, then any other key by its text), so that a
-- scenario with several bad fields always reports the same one first
local function ordered_keys(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r, function(a, b)
    local sa, sb = type(a) == "string", type(b) == "string"
    if sa ~= sb then return sa end
    if sa then return a < b end
    return tostring(a) < tostring(b)
  end)
  return r
end
M.ordered_keys = ordered_keys

-- A number as a message shows it (integers without a fraction, nan and inf by name).
local function shown(v)
  if type(v) ~= "number" then return tostring(v) end
  if v ~= v then return "nan" end
  if math.type(v) == "integer" then return tostring(v) end
  local t = ("%.15g"):format(v)
  return tonumber(t) == v and t or ("%.17g"):format(v)
end
M.shown = shown

return M
