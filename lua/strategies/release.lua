-- release.lua: release numbers of the libraries whose version a run names (training.bitsandbytes,
-- strategies/bnb_version.lua; training.transformers, strategies/tf_version.lua), read and
-- ordered the one way both need.
local M = {}

-- { MAJOR, MINOR, PATCH } of a string "MAJOR.MINOR.PATCH", or nil for anything else (a prefix, a
-- missing part, a part of more than four digits).
function M.parse(v)
  if type(v) ~= "string" then return nil end
  local a, b, c = v:match("^(%d+)%.(%d+)%.(%d+)$")
  if not a or #a > 4 or #b > 4 or #c > 4 then return nil end
  return { tonumber(a), tonumber(b), tonumber(c) }
end

-- -1, 0 or 1 as release x is before, the same as or after y (each as M.parse returns)
function M.cmp(x, y)
  for i = 1, 3 do
    if x[i] ~= y[i] then return x[i] < y[i] and -1 or 1 end
  end
  return 0
end

return M
