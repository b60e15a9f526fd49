-- gpus_report.lua: the text of `vrsim gpus`: the hardware catalog (lua/hw/gpus.lua), the price
-- table (lua/hw/prices.lua) and which GPUs have a calibrated profile, with where each figure
-- comes from. Returns one string.
local gpus = require "hw.gpus"
local prices = require "hw.prices"
local carry = require "hw.carry"

local M = {}

local function gib(b) return b / 2^30 end

-- The figures each entry says the kind of (lua/hw/gpus.lua header), in the order --sources lists them
M.FIGURES = { "memory_bytes", "usable_bytes", "cuda_context_bytes", "mem_bw_bytes_per_s", "peak_flops",
              "sm_count", "l2_bytes", "nvlink", "tdp_w" }

-- The kinds of a figure in the table's short form: measured, carried, datasheet, published
local SHORT = { measured = "meas", carried = "carr", datasheet = "data", published = "publ" }
local function short(g, f) return SHORT[(g.kind or {})[f]] or "?" end

function M.text(detail)
  local names = {}
  for k in pairs(gpus) do names[#names + 1] = k end
  table.sort(names, function(a, b) return gpus[a].memory_bytes < gpus[b].memory_bytes or
    (gpus[a].memory_bytes == gpus[b].memory_bytes and a < b) end)
  local okg, ref_gemm = pcall(require, "hw.calibrated." .. carry.REFERENCE .. "_gemm")
  local ref_best = okg and carry.best_bf16(ref_gemm) or nil
  local out = {}
  local function add(fmt, ...) out[#out + 1] = fmt:format(...) end
  add("%-15s %-32s %8s %8s %8s %-9s %9s %9s %9s %8s  %s", "gpu", "name", "memory", "usable", "context",
      "usbl/ctx", "HBM TB/s", "bf16 TF/s", "step TF/s", "$/hour", "step-time figures")
  for _, k in ipairs(names) do
    local g = gpus[k]
    local okc = pcall(require, "hw.calibrated." .. k)
    local p = prices[k]
    local okr = pcall(require, "hw.calibrated." .. carry.REFERENCE)
    local raised = okr and not okc and select(3, carry.carry(g, gpus[carry.REFERENCE], ref_best))
    local basis = okc and ("measured: lua/hw/calibrated/" .. k .. "*.lua")
      or okr and ("carried from " .. carry.REFERENCE .. (g.step_clock_mhz and "; step clock: evidence" or
                  (g.peak_clock_mhz and "; step clock: assumed" or "; datasheet clock"))
                  .. (raised and "; GEMM: its sustained matmul" or ""))
      or "datasheet roofline"
    add("%-15s %-32s %6.1f G %6.1f G %6.0f M %-9s %9.2f %9.0f %9.0f %8s  %s", k, g.name, gib(g.memory_bytes),
        gib(g.usable_bytes or g.memory_bytes), (g.cuda_context_bytes or 0) / 2^20,
        short(g, "usable_bytes") .. "/" .. short(g, "cuda_context_bytes"),
        (g.mem_bw_bytes_per_s or 0) / 1e12, (g.peak_flops and g.peak_flops.bf16 or 0) / 1e12,
        carry.step_peak(g, "bf16") / 1e12,
        p and ("%.2f"):format(p.usd_per_gpu_hour) or "-", basis)
  end
  add("")
  add("memory: datasheet GiB; usable: what torch reports as total; context: CUDA context and")
  add("library handles outside the caching allocator. usbl/ctx: how usable and context were obtained:")
  add("meas(ured) on the card, carr(ied) from another card or a stated rule, data(sheet), publ(ished)")
  add("by the board's operator where no datasheet is public. Every")
  add("figure's kind and source: vrsim gpus --sources, lua/hw/gpus.lua, docs/gpus.md. Prices")
  add("(lua/hw/prices.lua) carry their date and provider; they go stale; a GPU without one shows -.")
  add("bf16 TF/s: the datasheet's dense peak; step TF/s: the same at the clock GEMMs hold inside a")
  add("training step (step_clock_mhz where there is evidence, else the datasheet's clock). Step-time")
  add("figures: measured on that GPU, or the H200's measured fractions of peak carried to it through")
  add("these peaks, its SM count and DRAM bandwidth (docs/step-time.md); never sparse or boost figures.")
  add("GEMM: its sustained matmul: the carried GEMM rate is raised to the best matmul measured on that")
  add("GPU held busy (sustained_matmul_bf16) or inside a model's forward (step_matmul_bf16), a lower")
  add("bound on its in-step plateau.")
  if detail then
    for _, k in ipairs(names) do
      add("")
      add("%s (%s)", k, gpus[k].name)
      local kinds = {}
      for _, f in ipairs(M.FIGURES) do kinds[#kinds + 1] = f .. " " .. ((gpus[k].kind or {})[f] or "?") end
      add("  %-22s %s", "kind", table.concat(kinds, ", "))
      for _, n in ipairs(gpus[k].not_modelled or {}) do add("  %-22s %s", "not modelled", n) end
      local src = gpus[k].source or {}
      local keys = {}
      for sk in pairs(src) do keys[#keys + 1] = sk end
      table.sort(keys)
      for _, sk in ipairs(keys) do add("  %-22s %s", sk, tostring(src[sk])) end
      local p = prices[k]
      if p then add("  %-22s %s, %s (%s)", "price", p.provider or "?", p.date or "?", p.source or "")
      else add("  %-22s %s", "price", "none in lua/hw/prices.lua (no dated source found)") end
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- The catalog's GPUs as lines of "key usable_bytes" (what torch reports as total), fewest bytes
-- first: the larger cards vrsim's out-of-memory suggestions try (sim/variants.c); a fleet-only
-- board (fleet_only) is none that a user can rent or buy, so it is not offered.
function M.usable(_)
  local out = {}
  for k, g in pairs(gpus) do
    if not g.fleet_only then out[#out + 1] = { k, g.usable_bytes or g.memory_bytes } end
  end
  table.sort(out, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
  for i, e in ipairs(out) do out[i] = ("%s %.0f"):format(e[1], e[2]) end
  return table.concat(out, "\n") .. "\n"
end

return M
