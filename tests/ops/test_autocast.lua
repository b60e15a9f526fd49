-- tests/ops/test_autocast.lua: autocast's rule (lua/vrsim/ops/autocast.lua): every function of the
-- op library states a policy, nn.autocast applies it (the low dtype, fp32, or nothing), in
-- torch's order (right to left: a Linear's weight before its input, SDPA's v, k, q), and the
-- weight cast cache makes one copy of a parameter per forward.
--
--   VRSIM=./vrsim sh tests/test_ops.sh
local nn = require "vrsim.nn"
local recorder = require "recorder" -- tests/ops/recorder.lua

local checks, failures = 0, {}
local function check(ok, what)
  checks = checks + 1
  if not ok then failures[#failures + 1] = what end
end

-- every function of the op library has a policy, and it is one of the five
local POLICIES = { lower_precision_fp = true, fp32 = true, promote = true, none = true, helper = true }
for k, v in pairs(nn) do
  if type(v) == "function" then
    check(POLICIES[nn.AUTOCAST[k]] ~= nil, "nn." .. k .. " states an autocast policy (ops/autocast.lua)")
  end
end

-- the names of the ops recorded from index i on
local function names_from(G, i)
  local r = {}
  for j = i, #G.ops do r[#r + 1] = G.ops[j].name end
  return table.concat(r, ",")
end

-- lower_precision_fp: F.linear of a transformers Linear casts the weight, then the input
do
  local G = recorder()
  local cx = nn.context(G, { autocast = "bf16" })
  local x = nn.new_tensor(cx, "x", { 4, 8 }, "fp32", true)
  local w = nn.param(cx, "w", { 8, 8 }, "fp32", true)
  local n0 = #G.ops + 1
  local y = nn.linear(cx, "fc", x, w, nil, { weight_cast = "fc.weight_cast" })
  check(names_from(G, n0) == "fc.weight_cast,fc.input_cast,fc",
        "linear: weight cast, input cast, product (got " .. names_from(G, n0) .. ")")
  check(y.dtype == "bf16", "linear under autocast: a bf16 output")
  -- the second use of the weight in this forward takes the cached copy: one cast, the input's
  n0 = #G.ops + 1
  nn.linear(cx, "fc2", x, w, nil, { weight_cast = "fc2.weight_cast", keep_input = true })
  check(names_from(G, n0) == "fc2.input_cast,fc2", "linear: the weight's copy is cached (got " .. names_from(G, n0) .. ")")
  -- the diffusers models' F.linear (left_to_right): input, then weight and bias
  local w3, b3 = nn.param(cx, "w3", { 8, 8 }, "fp32", true), nn.param(cx, "b3", { 8 }, "fp32", true)
  n0 = #G.ops + 1
  nn.linear(cx, "fc3", x, w3, b3, { keep_input = true })
  local got = names_from(G, n0)
  check(got:sub(1, #"fc3.input_cast,w3.autocast,b3.autocast") == "fc3.input_cast,w3.autocast,b3.autocast",
        "linear, left to right: input, weight, bias (got " .. got .. ")")
  -- the forward's end drops the cache: the next forward casts again
  nn.end_forward(cx)
  check(next(cx.cast_cache) == nil, "end_forward: the weight cast cache is empty")
end

-- lower_precision_fp: SDPA casts value, key, query
do
  local G = recorder()
  local cx = nn.context(G, { autocast = "bf16", arch = "sm_90" })
  local function t(n) return nn.new_tensor(cx, n, { 1, 2, 16, 8 }, "fp32", true) end
  local q, k, v = t("q"), t("k"), t("v")
  local n0 = #G.ops + 1
  nn.sdpa(cx, "attn", q, k, v, { impl = "flash", causal = true, cast_v_first = true })
  local got = names_from(G, n0)
  check(got:sub(1, #"attn.v_cast,attn.k_cast,attn.q_cast") == "attn.v_cast,attn.k_cast,attn.q_cast",
        "sdpa: v, k, q cast in that order (got " .. got .. ")")
  -- the diffusers models' order (left_to_right, ops/autocast.lua): q, k, v
  local q2, k2, v2 = t("q2"), t("k2"), t("v2")
  n0 = #G.ops + 1
  nn.sdpa(cx, "attn2", q2, k2, v2, { impl = "flash", causal = true })
  got = names_from(G, n0)
  check(got:sub(1, #"attn2.q_cast,attn2.k_cast,attn2.v_cast") == "attn2.q_cast,attn2.k_cast,attn2.v_cast",
        "sdpa, left to right: q, k, v (got " .. got .. ")")
end

-- fp32, promote, none, and no autocast at all
do
  local G = recorder()
  local cx = nn.context(G, { autocast = "bf16" })
  local x = nn.new_tensor(cx, "x", { 4, 8 }, "bf16", true)
  local a = nn.autocast(cx, "layer_norm", { x }, 1, { names = { "ln.input_cast" } })
  check(a[1].dtype == "fp32" and G.ops[#G.ops].name == "ln.input_cast", "fp32 op: a bf16 input cast up")
  local n = #G.ops
  check(nn.autocast(cx, "cat", { x, a[1] }, 2)[1] == x and #G.ops == n, "promote op: no cast (the op promotes)")
  check(nn.autocast(cx, "add", { a[1] }, 1)[1] == a[1] and #G.ops == n, "none: no cast")
  local ok, err = pcall(nn.autocast, cx, "no_such_op", { x }, 1)
  check(not ok and tostring(err):find("no autocast policy", 1, true) ~= nil, "an op with no policy is an error")
  local plain = nn.context(recorder())
  local y = nn.new_tensor(plain, "y", { 4, 8 }, "fp32", true)
  check(nn.autocast(plain, "linear", { y }, 1)[1] == y, "no autocast: nothing cast")
end

if #failures > 0 then
  error(("autocast: %d of %d checks failed:\n  %s"):format(#failures, checks, table.concat(failures, "\n  ")), 0)
end
print(("autocast: %d checks passed"):format(checks))

return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
