-- recipes/reader.lua: a trainer config file (YAML, through vrsim.core.read_yaml) read key by key,
-- so that every key of the file is accounted for: read into the scenario, listed as not read
-- (no effect on memory or time: paths, logging, learning rates), or refused by name with the
-- file and line where it stands.
--
-- A format's module (recipes/axolotl.lua, ...) calls get/want for the keys it reads, not_read for
-- those that change neither memory nor time, and finish on each table when done: a key still
-- unaccounted for is refused unless its value is null or false (a feature left off: what the
-- tool does without the key).
local R = {}
R.__index = R

-- The lines of a JSON document doc (read_config's table) from the YAML reading of the same text
-- (JSON's syntax is YAML's flow style): ylines holds the YAML tree's lines by table, yt the YAML
-- tree. Every key of doc gets a line (0 where the YAML reading has none), so that finish sees
-- them all; a key whose value is null is only in the YAML tree. Whole numbers become integers.
local function json_lines(doc, yt, ylines, out)
  local yl = yt and ylines[yt] or {}
  local l = { [0] = yl[0] or 0 }
  out[doc] = l
  for k in pairs(yl) do if k ~= 0 then l[k] = yl[k] end end
  for k, v in pairs(doc) do
    l[k] = l[k] or 0
    -- read_config gives every JSON number as a float; a whole one is the int Python's json reads
    if math.type(v) == "float" and math.tointeger(v) then doc[k] = math.tointeger(v) end
    if type(v) == "table" then
      local yv = type(yt) == "table" and yt[k] or nil
      json_lines(v, type(yv) == "table" and yv or nil, ylines, out)
    end
  end
  return out
end

-- Opens the YAML file at path (as typed on the command line) as a reader; a path ending in .json
-- is read as JSON (Python's json.load, as the HF Trainer and TRL read a JSON of their arguments),
-- its lines found by reading it as YAML too; one ending in .toml as TOML (torchtitan's job
-- configs, through vrsim.core.read_toml: the same table and lines as a YAML file's); one ending
-- in .sh as a training script's launch command (recipes/cmdline.lua).
function R.open(path)
  local core = require "vrsim.core"
  local json = path:lower():match("%.json$") ~= nil
  local toml = path:lower():match("%.toml$") ~= nil
  -- a launch command saved in a shell file (recipes/cmdline.lua: the script's flags as keys)
  local function read_cmd(p)
    return require("recipes.cmdline").read(core.read_text(p), p)
  end
  local sh = path:lower():match("%.sh$") ~= nil
  -- called through pcall, its errors carry no position of this file: "FILE:LINE: what" alone
  local ok, doc, lines = pcall(json and core.read_config or toml and core.read_toml or sh and read_cmd
                               or core.read_yaml, path)
  if not ok then
    local msg = tostring(doc)
    if msg:find("': cannot read it", 1, true) then msg = ("config '%s': no such file"):format(path) end
    error(msg, 0)
  end
  if json then
    local yok, ydoc, ylines = pcall(core.read_yaml, path)
    lines = json_lines(doc, yok and ydoc or nil, yok and ylines or {}, {})
  end
  return setmetatable({ file = path, doc = doc, lines = lines, seen = {}, skipped = {} }, R)
end

-- The line of key k in table t (t's own line when k is nil; 0 when unknown).
function R:line(t, k)
  local l = self.lines[t]
  if not l then return 0 end
  if k == nil then return l[0] or 0 end
  return l[k] or l[0] or 0
end

-- Raises "FILE:LINE: KEY: msg" for key k of table t (prefix: the path of t, "fsdp_config.").
function R:fail(t, k, msg, prefix)
  local l = self:line(t, k)
  error(("%s%s: %s%s: %s"):format(self.file, l > 0 and (":" .. l) or "", prefix or "", tostring(k), msg), 0)
end

-- Whether key k appears in t (a null too).
function R:has(t, k)
  local l = self.lines[t]
  return (l and l[k] ~= nil) or t[k] ~= nil
end

local KIND_WORDS = { boolean = "true or false", integer = "an integer", number = "a number",
                     string = "a string", table = "a mapping or a list" }

-- The value of key k in t, marked read. kind: "boolean", "integer", "number", "string", "table",
-- or a list of them; a value of another kind is an error naming the key and its line. A null
-- or absent key gives default.
function R:get(t, k, kind, default, prefix)
  self.seen[t] = self.seen[t] or {}
  self.seen[t][k] = true
  local v = t[k]
  if v == nil then return default end
  local kinds = type(kind) == "table" and kind or { kind }
  for _, want in ipairs(kinds) do
    if want == "integer" and math.type(v) == "integer" then return v end
    if want == "number" and type(v) == "number" then return v end
    if type(v) == want then return v end
    if type(v) == "string" and v == want then return v end -- a literal such as "auto"
  end
  local words = {}
  for i, want in ipairs(kinds) do words[i] = KIND_WORDS[want] or ("'" .. want .. "'") end
  self:fail(t, k, ("must be %s, not %s"):format(table.concat(words, " or "),
            type(v) == "string" and ("'" .. v .. "'") or tostring(v)), prefix)
end

-- The value v that key k of t sets in scenario field section.field, held to that field's bounds
-- (lua/vrsim/schema.lua check_field): an error names the key and its line, not the field.
function R:field(t, k, section, field, v, prefix)
  if v == nil then return nil end
  local origin = ("%s:%d: %s%s"):format(self.file, self:line(t, k), prefix or "", tostring(k))
  return require("vrsim.plan").check_field(section, field, v, origin)
end

-- Marks the keys listed (those present) as not read: they change neither memory nor time.
function R:not_read(t, keys, prefix)
  for _, k in ipairs(keys) do
    if self:has(t, k) then
      self.seen[t] = self.seen[t] or {}
      if not self.seen[t][k] then
        self.seen[t][k] = true
        self.skipped[#self.skipped + 1] = (prefix or "") .. k
      end
    end
  end
end

-- The keys of t no get or not_read has accounted for, sorted.
local function left(self, t)
  local out, seen = {}, self.seen[t] or {}
  for k in pairs(self.lines[t] or {}) do
    if k ~= 0 and not seen[k] then out[#out + 1] = k end
  end
  table.sort(out, function(a, b) return tostring(a) < tostring(b) end)
  return out
end

-- Ends the reading of table t: a key left that is null or false is listed as not read (the tool
-- does the same without it); any other is refused, named with its line. tool names the format
-- in the message ("axolotl").
function R:finish(t, tool, prefix)
  for _, k in ipairs(left(self, t)) do
    local v = t[k]
    if v == nil or v == false then
      self.skipped[#self.skipped + 1] = (prefix or "") .. tostring(k)
    else
      self:fail(t, k, ("not modelled: vrsim's %s reader does not know what it does to memory or "
                .. "time, so it refuses it (remove it, or set it false, to simulate without it)")
                :format(tool), prefix)
    end
  end
end

-- The note listing the keys not read ("" when none).
function R:skipped_note(tool)
  if #self.skipped == 0 then return nil end
  table.sort(self.skipped)
  return ("%s keys not read (no effect on memory or time, or left off): %s"):format(tool,
          table.concat(self.skipped, ", "))
end

return R
