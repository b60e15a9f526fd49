-- recipes/cmdline.lua: a training script's launch command saved in a text file (`accelerate
-- launch [OPTIONS] train_x.py --flag value ...`, `python train_x.py ...`, `torchrun ...`), split
-- into words as a POSIX shell splits them (quotes, backslash escapes, a backslash-newline joining
-- lines, `#` comments) and read into the table a config reader reads: each `--flag value` or
-- `--flag=value` of the script a key (its value a string; a flag with no value true), the
-- launcher's options in a table of their own, every key with the line it stands on.
--
-- Refused with the line: more than one command (`;`, `&&`, `|`, a second script), variables and
-- command substitution (`$`, backquotes: the file holds the command as it runs, not a script that
-- builds it), a word the script's argparse would not take (a value with no flag), an unclosed
-- quote.
local C = {}

-- The words of text, each { text, line }; raises "LINE: what" on what is refused.
local function words(text)
  local out, i, n, line = {}, 1, #text, 1
  local cur, cur_line = nil, nil
  local function push()
    if cur then out[#out + 1] = { cur, cur_line } end
    cur, cur_line = nil, nil
  end
  local function add(s)
    if not cur then cur, cur_line = "", line end
    cur = cur .. s
  end
  while i <= n do
    local c = text:sub(i, i)
    if c == "\n" then
      push(); line = line + 1; i = i + 1
    elseif c == " " or c == "\t" or c == "\r" then
      push(); i = i + 1
    elseif c == "#" and not cur then
      while i <= n and text:sub(i, i) ~= "\n" do i = i + 1 end
    elseif c == "\\" then
      local nx = text:sub(i + 1, i + 1)
      if nx == "\n" then line = line + 1; i = i + 2
      elseif nx == "" then error(line .. ": a backslash at the end of the file", 0)
      else add(nx); i = i + 2 end
    elseif c == "'" then
      local j = text:find("'", i + 1, true)
      if not j then error(line .. ": a quote (') that is not closed", 0) end
      local s = text:sub(i + 1, j - 1)
      add(s)
      for _ in s:gmatch("\n") do line = line + 1 end
      i = j + 1
    elseif c == '"' then
      local j, s, opened = i + 1, "", line
      while true do
        local d = text:sub(j, j)
        if d == "" then error(opened .. ': a quote (") that is not closed', 0) end
        if d == '"' then break end
        if d == "$" or d == "`" then error(line .. ": " .. d .. " inside quotes: variables and command substitution are not read", 0) end
        if d == "\\" and text:sub(j + 1, j + 1):match('[\\"$`\n]') then
          if text:sub(j + 1, j + 1) ~= "\n" then s = s .. text:sub(j + 1, j + 1) else line = line + 1 end
          j = j + 2
        else
          if d == "\n" then line = line + 1 end
          s = s .. d
          j = j + 1
        end
      end
      add(s)
      i = j + 1
    elseif c:match("[;&|<>()]") then
      error(("%d: '%s': one command per file (no lists, pipes or redirections)"):format(line, c), 0)
    elseif c == "$" or c == "`" then
      error(("%d: '%s': variables and command substitution are not read (write the values out)"):format(line, c), 0)
    else
      local j = i
      while j <= n and not text:sub(j, j):match("[%s\\'\"#;&|<>()$`]") do j = j + 1 end
      add(text:sub(i, j - 1))
      i = j
    end
  end
  push()
  return out
end

-- The launchers read and how many of their words lead up to the script: `accelerate launch`,
-- `torchrun`, `python` / `python3` (with -u), or none (the script first).
local LAUNCHERS = { accelerate = "accelerate launch", torchrun = "torchrun", python = "python", python3 = "python" }

-- Flags of a launcher's options into t (its lines into l), up to the script (a word ending in
-- .py). Returns the index of the script's word.
local function read_flags(ws, i, t, l, stop_at_script)
  while i <= #ws do
    local w, ln = ws[i][1], ws[i][2]
    if stop_at_script and not w:match("^%-") then return i end
    if not w:match("^%-%-?[%w]") then
      error(("%d: '%s': a word with no flag before it (argparse takes no positional argument here)"):format(ln, w), 0)
    end
    local k, v = w:match("^%-%-?([^=]+)=(.*)$")
    if not k then
      k = w:match("^%-%-?(.+)$")
      local nx = ws[i + 1]
      if nx and not nx[1]:match("^%-") and not (stop_at_script and nx[1]:match("%.py$")) then
        v = nx[1]
        i = i + 1
      else
        v = true
      end
    end
    k = k:gsub("%-", "_")
    if l[k] then error(("%d: --%s given twice (first on line %d)"):format(ln, k, l[k]), 0) end
    t[k], l[k] = v, ln
    i = i + 1
  end
  return i
end

-- The command in text (the file at path) as { doc, lines }: doc holds the script's flags, with
-- ["(script)"] its file name and ["(launcher)"] the launcher's options (a table).
function C.read(text, path)
  local ok, ws = pcall(words, text)
  if not ok then error(path .. ":" .. tostring(ws), 0) end
  if #ws == 0 then error(path .. ":1: no command in the file", 0) end
  local doc, lines = {}, {}
  local dl = { [0] = ws[1][2] }
  lines[doc] = dl
  local i, launcher = 1, nil
  local first = ws[1][1]:match("[^/]*$")
  if LAUNCHERS[first] then
    launcher = LAUNCHERS[first]
    i = 2
    if first == "accelerate" then
      if not ws[2] or ws[2][1] ~= "launch" then error(("%s:%d: 'accelerate' without 'launch'"):format(path, ws[1][2]), 0) end
      i = 3
    end
  end
  local lt = {}
  local ll = { [0] = ws[1][2] }
  if launcher then
    local ok2, j = pcall(read_flags, ws, i, lt, ll, true)
    if not ok2 then error(path .. ":" .. tostring(j), 0) end
    i = j
    if launcher == "python" and lt.m then
      error(("%s:%d: python -m: a module, not a training script"):format(path, ll.m), 0)
    end
  end
  local sw = ws[i]
  if not sw or not sw[1]:match("%.py$") then
    error(("%s:%d: no training script (a .py file) in the command"):format(path, sw and sw[2] or ws[#ws][2]), 0)
  end
  doc["(script)"], dl["(script)"] = sw[1]:match("[^/]*$"), sw[2]
  if launcher then
    doc["(launcher)"], dl["(launcher)"] = lt, ll[0]
    lt["(name)"], ll["(name)"] = launcher, ll[0]
    lines[lt] = ll
  end
  local ok3, err = pcall(read_flags, ws, i + 1, doc, dl, false)
  if not ok3 then error(path .. ":" .. tostring(err), 0) end
  return doc, lines
end

return C
