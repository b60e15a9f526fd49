-- tests/ops/test_catalog.lua: unit tests of the GPU catalog (lua/hw/gpus.lua, gpu_aliases.lua,
-- links.lua, prices.lua): the cards people rent are there, every entry has every field, each
-- figure says how it was obtained (measured, carried or datasheet) and where from, the names
-- people type resolve, and what the catalog says about bf16 and links holds.
--
--   VRSIM=./vrsim sh tests/test_ops.sh
local gpus = require "hw.gpus"
local aliases = require "hw.gpu_aliases"
local links = require "hw.links"
local prices = require "hw.prices"
local report = require "vrsim.gpus_report"
local plan = require "vrsim.plan"

local checks, failures = 0, {}
local function check(ok, what)
  checks = checks + 1
  if not ok then failures[#failures + 1] = what end
end

-- the cards people rent, each under one catalog name
local WANTED = { "l4", "t4", "a10", "a10g", "rtx4060ti_16g", "rtx4070ti_super", "rtx4080", "rtx4090", "rtx5080",
                 "rtx5090", "rtx6000_ada", "rtx_a5000", "rtx_a6000", "l40s", "v100_16g", "v100_32g", "a100_40g",
                 "a100_80g", "h100_pcie", "h100_sxm", "h200", "b200", "mi300x", "rtx3090" }
for _, k in ipairs(WANTED) do check(gpus[k] ~= nil, "catalog has " .. k) end

-- every entry: the fields the simulator reads, in their units, and a kind and a source per figure
local KINDS = { measured = true, carried = true, datasheet = true, published = true }
-- words that name a vendor document
local function names_datasheet(text)
  local t = text:lower()
  return t:find("datasheet", 1, true) or t:find("data sheet", 1, true) or t:find("whitepaper", 1, true)
    or t:find("product page", 1, true)
end
-- figures whose source may sit under the entry's shared `memory` key
local SHARED = { memory_bytes = "memory", mem_bw_bytes_per_s = "memory", sm_count = "memory", l2_bytes = "memory",
                 nvlink = "memory", tdp_w = "memory" }
for k, g in pairs(gpus) do
  local function has(ok, what) check(ok, k .. ": " .. what) end
  has(g.vendor == "nvidia" or g.vendor == "amd", "vendor is nvidia or amd")
  has(type(g.name) == "string" and type(g.arch) == "string", "name and arch")
  has(type(g.compute_capability) == "number" and g.compute_capability >= 7, "compute_capability")
  has(math.type(g.memory_bytes) == "integer" and math.type(g.usable_bytes) == "integer"
      and math.type(g.cuda_context_bytes) == "integer", "byte counts are integers")
  has(g.usable_bytes <= g.memory_bytes and g.usable_bytes > 0.9 * g.memory_bytes * 15 / 16,
      "usable_bytes within the board (at most memory_bytes, at least what ECC leaves less 10 %)")
  has(g.cuda_context_bytes > 256 * 2^20 and g.cuda_context_bytes < 2^31, "context between 256 MiB and 2 GiB")
  local pf = g.peak_flops or {}
  for _, d in ipairs { "fp32", "tf32", "bf16", "fp16", "fp8", "int8" } do
    has(type(pf[d]) == "number" and pf[d] >= 0, "peak_flops." .. d)
  end
  -- every card runs bf16 work: on tensor cores, or (before Ampere) emulated at the fp32 rate
  has(pf.bf16 > 0, "bf16 rate above 0")
  if g.vendor == "nvidia" and g.compute_capability < 8 then
    has(pf.bf16 == pf.fp32, "no bf16 tensor cores: bf16 at the fp32 rate")
  end
  if g.vendor == "nvidia" and g.compute_capability < 8.9 then has(pf.fp8 == 0, "no fp8 before sm89") end
  has(g.sm_count > 0 and g.l2_bytes > 0 and g.mem_bw_bytes_per_s > 0 and g.tdp_w > 0, "SMs, L2, bandwidth, power")
  has(links.pcie[("gen%d_x%d"):format(g.pcie.gen, g.pcie.lanes)] ~= nil, "its PCIe link is in links.lua")
  if g.nvlink then
    local gen = g.nvlink.gen
    has(links.nvlink[type(gen) == "string" and gen or ("gen" .. gen)] ~= nil
        or (g.nvlink.bridge and links.nvlink.bridge_ampere ~= nil), "its NVLink is in links.lua")
  end
  local src = g.source or {}
  for _, f in ipairs(report.FIGURES) do
    local kind = (g.kind or {})[f]
    has(KINDS[kind], f .. " has a kind (measured, carried, datasheet or published), not " .. tostring(kind))
    local text = src[f] or (SHARED[f] and src[SHARED[f]]) or src.spec
    has(type(text) == "string" and #text > 10, f .. " has a source")
    if kind == "datasheet" then
      has(names_datasheet((text or "") .. " " .. (src.spec or "")), f .. ": a datasheet figure names its datasheet")
    elseif kind == "published" then
      has(not names_datasheet(src.spec or "") or (src.spec or ""):find("no NVIDIA datasheet", 1, true),
          f .. ": a published figure is for a board without a public datasheet, and its source says so")
      has(type(src[f] or src[SHARED[f] or ""]) == "string", f .. ": a published figure names its publication")
    elseif kind == "carried" then
      has(type(src[f] or src[SHARED[f] or ""]) == "string", f .. ": a carried figure says from what in its own source")
    end
  end
  for _, n in ipairs(g.not_modelled or {}) do has(type(n) == "string" and #n > 20, "not_modelled notes are text") end
  local p = prices[k]
  if p then has(type(p.usd_per_gpu_hour) == "number" and p.source and p.date, "a price has its source and date") end
end
-- V100: bf16 is not 0 (emulated at its fp32 rate)
check(gpus.v100_32g.peak_flops.bf16 == 15.7e12 and gpus.v100_16g.peak_flops.bf16 == 15.7e12, "V100 bf16 = 15.7 TFLOP/s")
-- cards sold without NVLink that take a bridge say so
for _, k in ipairs { "rtx3090", "rtx_a5000", "rtx_a6000", "h100_pcie" } do
  check(gpus[k].nvlink and gpus[k].nvlink.bridge == true, k .. ": NVLink only through an optional bridge")
end
for _, k in ipairs { "rtx4090", "rtx4080", "rtx5090", "l4", "l40s", "a10", "t4", "rtx6000_ada" } do
  check(gpus[k].nvlink == false, k .. ": no NVLink")
end
-- the HBM2e H100 of torchtitan's published runs: its operator's figures, its clock the SXM's
-- (no step clock: none is published at its 500 W limit), and never offered as a card to rent
do
  local g = gpus.h100_hbm2e_96g
  check(g.mem_bw_bytes_per_s == 2.4e12 and g.tdp_w == 500 and g.memory_bytes == 96 * 2^30,
        "h100_hbm2e_96g: 96 GiB HBM2e at 2.4 TB/s, 500 W (torchtitan's hardware statement)")
  check(g.step_clock_mhz == nil and g.peak_flops.bf16 == gpus.h100_sxm.peak_flops.bf16,
        "h100_hbm2e_96g: the SXM's dense peak at its datasheet clock (no step clock at 500 W)")
  check(type(g.fleet_only) == "string" and not report.usable():find("h100_hbm2e_96g", 1, true)
        and report.usable():find("h100_sxm", 1, true) ~= nil,
        "a fleet-only board is not among the larger cards to rent (vrsim.gpus_report usable)")
end
-- prices exist only with a source: the new cards without one have none
for _, k in ipairs { "t4", "a10", "rtx4080", "rtx5080", "mi300x" } do check(prices[k] == nil, k .. ": no price without a source") end

-- aliases: every value is a catalog name (or a list of them), and the spellings people type resolve
for a, v in pairs(aliases) do
  if type(v) == "table" then
    for _, x in ipairs(v) do check(gpus[x] ~= nil, "alias " .. a .. " -> " .. x .. " is in the catalog") end
  else
    check(gpus[v] ~= nil, "alias " .. a .. " -> " .. tostring(v) .. " is in the catalog")
  end
end
local SPELLINGS = {
  ["4090"] = "rtx4090", ["rtx-4090"] = "rtx4090", ["RTX 4090"] = "rtx4090", ["NVIDIA GeForce RTX 4090"] = "rtx4090",
  rtx4080 = "rtx4080", ["RTX 4080"] = "rtx4080", ["4080"] = "rtx4080", ["rtx-5090"] = "rtx5090", ["5080"] = "rtx5080",
  ["a100-80gb"] = "a100_80g", ["A100 80GB"] = "a100_80g", ["a100-40gb"] = "a100_40g", h100 = "h100_sxm",
  ["h100-pcie"] = "h100_pcie", l4 = "l4", L4 = "l4", t4 = "t4", ["Tesla T4"] = "t4", a10 = "a10", A10G = "a10g",
  ["rtx 4060 ti"] = "rtx4060ti_16g", ["4070 Ti Super"] = "rtx4070ti_super", ["RTX 6000 Ada"] = "rtx6000_ada",
  ["NVIDIA RTX 6000 Ada Generation"] = "rtx6000_ada", ["RTX A5000"] = "rtx_a5000", a6000 = "rtx_a6000",
  ["v100-16gb"] = "v100_16g", ["Tesla V100-SXM2-32GB"] = "v100_32g", b200 = "b200", ["NVIDIA B200"] = "b200",
  ["MI300X"] = "mi300x", ["H100 96GB"] = "h100_hbm2e_96g", ["H100 SXM5 96GB"] = "h100_hbm2e_96g", ["AMD Instinct MI300X"] = "mi300x", ["NVIDIA L40S"] = "l40s",
}
for typed, want in pairs(SPELLINGS) do
  local got, msg = plan.resolve_gpu(typed)
  check(got == want, ("'%s' resolves to %s (got %s: %s)"):format(typed, want, tostring(got), tostring(msg)))
end
do
  local got, msg = plan.resolve_gpu("v100")
  check(got == nil and msg:find("ambiguous", 1, true), "'v100' is ambiguous (16 or 32 GB)")
  -- a card one digit away is another product: no guess ("rtx4070" is not the 4080)
  got, msg = plan.resolve_gpu("rtx4070")
  check(got == nil and msg:find("unknown GPU", 1, true) and not msg:find("did you mean", 1, true),
        "'rtx4070' (not in the catalog) is unknown, with no guess at another card (got " .. tostring(msg) .. ")")
  -- a slip in the letters is corrected, and the suggestion shows the card's memory
  got, msg = plan.resolve_gpu("rtx4080s")
  check(got == nil and msg:find("(NVIDIA GeForce RTX 4080, 16 GB)", 1, true),
        "'rtx4080s' suggests the 4080 with its memory (got " .. tostring(msg) .. ")")
  -- two swapped digits are one edit: a swapped 4090 is not taken for the 4080
  got, msg = plan.resolve_gpu("rtx4900")
  check(got == nil and msg:find("did you mean 'rtx4090' (NVIDIA GeForce RTX 4090, 24 GB)?", 1, true),
        "'rtx4900' suggests rtx4090 (got " .. tostring(msg) .. ")")
end

-- the fused attention SDPA picks by card (nn.sdpa_backend through the architecture class): cuDNN
-- on Hopper and the B200 (sm100), flash on GeForce Blackwell (sm120), Ada and the MI300X, the
-- memory-efficient kernel before Ampere (T4, V100)
do
  local nn = require "vrsim.nn"
  local function picks(k) local g = gpus[k]; return nn.sdpa_backend(nn.arch_class(g.arch, g.compute_capability), "bf16") end
  for k, want in pairs { h100_sxm = "cudnn", h200 = "cudnn", b200 = "cudnn", rtx5090 = "flash", rtx5080 = "flash",
                         rtx4090 = "flash", l4 = "flash", a100_80g = "flash", mi300x = "flash",
                         t4 = "mem_efficient", v100_16g = "mem_efficient" } do
    check(picks(k) == want, ("SDPA on %s picks %s (got %s)"):format(k, want, picks(k)))
  end
end

if #failures > 0 then
  error(("catalog: %d of %d checks failed:\n  %s"):format(#failures, checks, table.concat(failures, "\n  ")), 0)
end
print(("catalog: %d checks passed"):format(checks))

return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
