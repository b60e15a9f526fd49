-- recipes/load.lua: `vrsim CONFIG.yaml`: a trainer's config file as a vrsim scenario. The format
-- is --from's, or found from the file's keys; recipes/<format>.lua reads it (recipes/reader.lua
-- accounts for every key). The hardware is not in these files: --gpu names it, and the ranks
-- come from the file (accelerate's num_processes) or --gpus.
local L = {}

local FORMATS = { "axolotl", "accelerate", "trl", "hf_trainer", "llamafactory", "torchtune", "torchtitan", "diffusers", "litgpt" }

local function detect(path, doc)
  local found = {}
  -- a launch command (a .sh file, recipes/cmdline.lua) is a command format's, a file of keys another's
  local command = doc["(script)"] ~= nil
  for _, f in ipairs(FORMATS) do
    local m = require("recipes." .. f)
    if (m.command or false) == command and m.detect(doc) then found[#found + 1] = f end
  end
  if #found == 1 then return found[1] end
  if #found == 0 then
    error(("%s: not a config vrsim reads (formats: %s); if it is one, name it with --from FORMAT")
          :format(path, table.concat(FORMATS, ", ")), 0)
  end
  error(("%s: the keys fit more than one format (%s): name it with --from FORMAT")
        :format(path, table.concat(found, ", ")), 0)
end

-- The scenario table of the config at path. opts: from (a format name or nil), gpu, count
-- (nil: from the file, else 1), model_config (a --set model.config path), accelerate (the path
-- of the accelerate config that launches a TRL or TrainingArguments one).
function L.scenario(path, opts)
  local r = require("recipes.reader").open(path)
  local from = opts.from
  if from then
    local known = false
    for _, f in ipairs(FORMATS) do known = known or f == from end
    if not known then error(("--from %s: not a format vrsim reads (%s)"):format(from, table.concat(FORMATS, ", ")), 0) end
  else
    from = detect(path, r.doc)
  end
  if not opts.gpu then
    error(("%s: an %s config does not name the GPU: give --gpu NAME (vrsim gpus lists them)"):format(path, from), 0)
  end
  local ok, msg = require("vrsim.plan").resolve_gpu(opts.gpu)
  if not ok then error("--gpu: " .. msg, 0) end
  local scn, notes, ar
  if opts.accelerate then
    -- a TRL / TrainingArguments config under accelerate launch --config_file (recipes/launch.lua)
    scn, notes, ar = require("recipes.launch").scenario(r, from, opts)
  else
    scn, notes = require("recipes." .. from).scenario(r, opts)
  end
  if opts.model_config then scn.model.config = opts.model_config end
  scn.title = ("%s (%s config) on %s"):format(path:match("[^/]*$"), from, opts.gpu)
  if ar then
    scn.title = ("%s (%s config) launched by %s on %s"):format(path:match("[^/]*$"), from,
                                                              ar.file:match("[^/]*$"), opts.gpu)
  end
  local sk = r:skipped_note(from)
  if sk then notes[#notes + 1] = sk end
  sk = ar and ar:skipped_note("accelerate")
  if sk then notes[#notes + 1] = sk end
  if #notes > 0 then scn.notes = notes end
  return scn
end

-- ---- the scenario as Lua source (--print-scenario) ---------------------------------------------

local ORDER = { title = 1, notes = 2, hardware = 3, model = 4, training = 5, allocator = 6 }

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b)
    local oa, ob = ORDER[a] or 99, ORDER[b] or 99
    if oa ~= ob then return oa < ob end
    return tostring(a) < tostring(b)
  end)
  return ks
end

local function is_list(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local function value(v, indent)
  local ty = type(v)
  if ty == "string" then return ("%q"):format(v) end
  if ty == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    if v ~= v or v == math.huge or v == -math.huge then error("a number that is not finite: " .. tostring(v), 0) end
    local s = ("%.17g"):format(v)
    if tonumber(("%.15g"):format(v)) == v then s = ("%.15g"):format(v) end
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s
  end
  if ty == "boolean" then return tostring(v) end
  if ty ~= "table" then error("cannot write a " .. ty, 0) end
  local pad = ("  "):rep(indent + 1)
  local parts = {}
  if next(v) == nil then return "{}" end
  if is_list(v) then
    local n = 0
    for _, x in ipairs(v) do parts[#parts + 1] = value(x, indent + 1); n = n + #parts[#parts] end
    if n <= 80 then return "{ " .. table.concat(parts, ", ") .. " }" end
    return "{\n" .. pad .. table.concat(parts, ",\n" .. pad) .. ",\n" .. ("  "):rep(indent) .. "}"
  end
  for _, k in ipairs(sorted_keys(v)) do
    local key = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k or ("[" .. value(k, 0) .. "]")
    parts[#parts + 1] = pad .. key .. " = " .. value(v[k], indent + 1) .. ","
  end
  return "{\n" .. table.concat(parts, "\n") .. "\n" .. ("  "):rep(indent) .. "}"
end

-- The scenario of the config at path as the text of a scenario file a user can keep and edit.
function L.source(path, opts)
  local scn = L.scenario(path, opts)
  local cmd = opts.accelerate and (path .. " --accelerate " .. opts.accelerate) or path
  local head = {
    ("-- %s as a vrsim scenario (vrsim %s --print-scenario): keep it and edit it."):format(cmd, cmd),
    "-- Its paths are the config's, read from the folder vrsim ran in; a scenario reads them from its",
    "-- own folder: move it there or correct them. --set overrides are not in it: add them.",
  }
  return table.concat(head, "\n") .. "\nreturn " .. value(scn, 0) .. "\n"
end

return L
