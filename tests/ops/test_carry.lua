-- tests/ops/test_carry.lua: unit tests of the carry of the H200's measured profile to another GPU
-- (lua/hw/carry.lua): FlashAttention-2's fraction of peak by architecture (GeForce Ada's own, at
-- half-rate FP32 accumulate), the GEMM ratio raised to the larger of a published sustained and
-- in-model matmul, and the DRAM ratio raised to a published elementwise bandwidth, each only where
-- it gives more than the datasheet ratio, and a published figure above the card's peak refused;
-- the memory-bound classes split into DRAM and SM parts by the H100 SXM's own measurement.
--
--   VRSIM=./vrsim sh tests/test_ops.sh     (runs every tests/ops/test_*.lua as a scenario: the
--                                           checks run as it loads; a failure is an error, exit 2)
local carry = require "hw.carry"
local gpus = require "hw.gpus"
local ops = require "hw.calibrated.h200_torch_ops"

local checks, failures = 0, {}
local function check(ok, what)
  checks = checks + 1
  if not ok then failures[#failures + 1] = what end
end
local function near(a, b) return type(a) == "number" and math.abs(a - b) <= 1e-9 * math.max(1, math.abs(b)) end
local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

local ref = gpus.h200
local BEST = 826.33e12 -- the H200's best measured bf16 GEMM (lua/hw/calibrated/h200_gemm.lua)

-- FlashAttention-2's fraction: GeForce Ada (bf16 peak twice its FP32, the RTX 4080's rounded
-- 97.5 / 48.7 included) its own, data-center Ada Ampere's, Hopper the reference's
check(carry.flash_key(gpus.rtx4090) == "ada_half_rate", "RTX 4090: " .. tostring(carry.flash_key(gpus.rtx4090)))
check(carry.flash_key(gpus.rtx4080) == "ada_half_rate", "RTX 4080: " .. tostring(carry.flash_key(gpus.rtx4080)))
check(carry.flash_key(gpus.l40s) == "ada", "L40S: " .. tostring(carry.flash_key(gpus.l40s)))
check(carry.flash_key(gpus.rtx3090) == "ampere", "RTX 3090 (no ampere_half_rate entry): " .. tostring(carry.flash_key(gpus.rtx3090)))
check(near(carry.flash_ratio(gpus.rtx4090, ref), 0.988 / 0.35), "RTX 4090 flash ratio 0.988 / 0.35")
check(near(carry.flash_ratio(gpus.l40s, ref), 0.73 / 0.35), "L40S flash ratio 0.73 / 0.35")
check(carry.flash_ratio(gpus.h100_sxm, ref) == 1, "H100: the H200's fraction")

-- the reference's DRAM-bound elementwise rate: its best contiguous op over twice its L2 (the
-- 33.5 MB clone at 4608 GB/s, inside its L2, is not one)
check(near(carry.best_contiguous(ops, ref), 4177.0e9), "best contiguous " .. tostring(carry.best_contiguous(ops, ref)))

-- the RTX 4090: in-model matmul 165.0 over sustained 160.1; DRAM 920.7 / 4177.0 over 1008 / 4800;
-- flash at its step clock's peak (2615 MHz) x 0.988 / 0.35
local t, basis, raised = carry.carry(gpus.rtx4090, ref, BEST, 4177.0e9)
check(raised and near(t.compute.bf16, 165.0e12 / BEST) and near(t.compute.fp16, t.compute.bf16),
      "RTX 4090 bf16/fp16 ratio " .. tostring(t.compute.bf16))
check(near(t.bw, 920.7 / 4177.0), "RTX 4090 DRAM ratio " .. tostring(t.bw))
check(near(t.attention.flash, (165.2e12 * 2615 / 2520) / (989.4e12 * 1980 / 1830) * 0.988 / 0.35),
      "RTX 4090 flash " .. tostring(t.attention.flash))
check(basis:find("in-model matmul 165.0", 1, true) and basis:find("measured 920.7 GB/s", 1, true), basis)
-- without the reference's rate given, the carry reads it from the reference's torch_ops file
local t2 = carry.carry(gpus.rtx4090, ref, BEST)
check(near(t2.bw, t.bw), "the reference's contiguous rate read from its file")

-- the larger of the two matmul figures wins; a figure below the carried curve changes nothing
local g = copy(gpus.rtx4090)
g.step_matmul_bf16 = 150e12
t = carry.carry(g, ref, BEST, 4177.0e9)
check(near(t.compute.bf16, 160.11e12 / BEST), "sustained above in-model: " .. tostring(t.compute.bf16))
g = copy(gpus.rtx4090)
g.measured_elementwise_bw = 800e9 -- below 4177.0 x 1008 / 4800 = 877 GB/s
t = carry.carry(g, ref, BEST, 4177.0e9)
check(near(t.bw, 1008 / 4800), "an elementwise figure below the carried one: the datasheet ratio, " .. tostring(t.bw))
g.measured_elementwise_bw = nil
t, basis = carry.carry(g, ref, BEST, 4177.0e9)
check(near(t.bw, 1008 / 4800) and basis:find("x0.210 DRAM bandwidth", 1, true), "no elementwise figure: " .. basis)
-- a card with neither figure (A100): its sustained matmul only, the datasheet DRAM ratio
t = carry.carry(gpus.a100_80g, ref, BEST, 4177.0e9)
check(near(t.compute.bf16, 271.2e12 / BEST) and near(t.bw, gpus.a100_80g.mem_bw_bytes_per_s / 4.8e12),
      "A100: " .. tostring(t.compute.bf16) .. ", " .. tostring(t.bw))

-- published figures above what the card can do are refused, naming the field
g = copy(gpus.rtx4090)
g.measured_elementwise_bw = 1100e9
local ok, err = pcall(carry.carry, g, ref, BEST, 4177.0e9)
check(not ok and tostring(err):find("measured_elementwise_bw", 1, true), "elementwise above DRAM: " .. tostring(err))
g = copy(gpus.rtx4090)
g.step_matmul_bf16 = 180e12 -- above 128 x 512 x 2615 MHz = 171.4
ok, err = pcall(carry.carry, g, ref, BEST, 4177.0e9)
check(not ok and tostring(err):find("step_matmul_bf16", 1, true), "in-model matmul above peak: " .. tostring(err))

-- memory-bound classes split into a DRAM part and an SM part by the H100 SXM's measurement
-- (t = dram / k_bw + sm / k_sm per byte; the H100: k_bw 3.35 / 4.8, k_sm 1, the H200's die and clock)
local KB2 = gpus.h100_sxm.mem_bw_bytes_per_s / ref.mem_bw_bytes_per_s
check(near(carry.sm_clock(gpus.h100_sxm), carry.sm_clock(ref)), "the H100 SXM issues at the H200's SMs x clock")
local T = 1 / 2000e9 -- the H200's time per byte at some size
local function ratio(dram, sm, k_bw, k_sm) return (dram + sm) / (dram / k_bw + sm / k_sm) end
-- measured equally on both cards: all SM part, carried by the SMs x clock ratio alone
local dram, sm = carry.split(T, T, KB2, 1)
check(near(dram, 0) and near(sm, T), "equal on both: all SM part, " .. tostring(dram))
check(near(ratio(dram, sm, 0.3, 0.5), 0.5), "equal on both carries by the SM ratio")
-- slower on the H100 by exactly its DRAM ratio: all DRAM part, carried by the DRAM ratio alone
dram, sm = carry.split(T, T / KB2, KB2, 1)
check(near(dram, T) and near(sm, 0), "DRAM-bound: all DRAM part, " .. tostring(sm))
check(near(ratio(dram, sm, 0.3, 0.5), 0.3), "DRAM-bound carries by the DRAM ratio")
-- half and half: the two parts, carried by each's ratio
dram, sm = carry.split(T, T * (0.5 / KB2 + 0.5), KB2, 1)
check(near(dram, T / 2) and near(sm, T / 2), "half and half: " .. tostring(dram / T))
check(near(ratio(dram, sm, 0.3, 0.5), 1 / (0.5 / 0.3 + 0.5 / 0.5)), "half and half carries in between")
-- faster on the H100 than on the H200: the SM part takes it all; slower than its DRAM ratio
-- allows: the DRAM part takes it all (neither part below 0)
dram, sm = carry.split(T, 0.9 * T, KB2, 1)
check(near(dram, 0) and near(sm, T), "faster on the H100: all SM part")
dram, sm = carry.split(T, 1.2 * T / KB2, KB2, 1)
check(near(dram, T) and near(sm, 0), "slower than DRAM: all DRAM part")
check(carry.split(T, T, 0.5, 0.5) == nil, "equal ratios cannot separate the parts")
-- classes from rows: the second GPU's curve interpolated (in log bytes) at the reference's sizes,
-- rows of one size averaged; a class only the reference measured is left to the DRAM ratio
local refrows = { { class = "x", bytes = 1e6, gbps = 2000 }, { class = "x", bytes = 4e6, gbps = 1000 },
                  { class = "x", bytes = 4e6, gbps = 3000 }, { class = "only_ref", bytes = 1e6, gbps = 1000 } }
local secrows = { { class = "x", bytes = 1e6, gbps = 2000 * KB2 }, { class = "x", bytes = 16e6, gbps = 2000 } }
local split = carry.split_classes(refrows, secrows, ref, gpus.h100_sxm)
check(split and split.only_ref == nil and #split.x == 2, "split classes: only those both measured")
check(split and near(split.x[1][2], 1 / 2000e9) and near(split.x[1][3], 0), "size 1e6: all DRAM part")
-- 4e6 is halfway (in log) from 1e6 to 16e6 on the second GPU: 1396 + (2000 - 1396) / 2 GB/s;
-- the reference's two rows of 4e6 average to 2000 GB/s
local t2 = 1 / ((2000 * KB2 + (2000 - 2000 * KB2) / 2) * 1e9)
local d4, s4 = carry.split(1 / 2000e9, t2, KB2, 1)
check(split and near(split.x[2][1], 4e6) and near(split.x[2][2], d4) and near(split.x[2][3], s4),
      "size 4e6 interpolated: " .. tostring(split and split.x[2][2]))
-- carried rows: each size's rate ratio, at a size shifted by it (the same time per kernel)
local rows = carry.carried_rows(split, 0.3, 0.5)
check(#rows == 2 and rows[1].class == "x" and near(rows[1].gbps, 2000 * 0.3) and near(rows[1].bytes, 1e6 * 0.3)
      and near(rows[1].ms, 1e6 / 2000e9 * 1e3), "carried row 1: " .. tostring(rows[1] and rows[1].gbps))
local r2 = ratio(d4, s4, 0.3, 0.5)
check(#rows == 2 and near(rows[2].gbps, 2000 * r2) and near(rows[2].bytes, 4e6 * r2), "carried row 2")
-- none above the cap (the target's DRAM-bound streaming rate): many fast SMs on a narrow DRAM
rows = carry.carried_rows({ y = { { 1e6, 0, 1 / 2000e9 } } }, 0.2, 1.3, 1000e9)
check(#rows == 1 and near(rows[1].gbps, 1000) and near(rows[1].bytes, 1e6 / 2), "capped: " .. tostring(rows[1].gbps))
-- an op the reference ran above that rate (inside its L2) keeps the DRAM ratio's rate
rows = carry.carried_rows({ y = { { 1e6, 1 / 6000e9, 0 } } }, 0.2, 1.3, 1000e9)
check(#rows == 1 and near(rows[1].gbps, 1200), "DRAM-ratio floor of the cap: " .. tostring(rows[1].gbps))
-- the carry hands them to the C core where g has an SM clock, and says so; without one, every
-- class keeps the DRAM ratio, said too
t, basis = carry.carry(gpus.a100_80g, ref, BEST, 4177.0e9, split)
local k_sm = 108 * 1410 / (132 * 1980)
check(t.torch_ops and #t.torch_ops == 2 and near(t.torch_ops[1].gbps, 2000 * t.bw)
      and basis:find(("1 class split with the H100 SXM's: SM part x%.3f SMs x clock"):format(k_sm), 1, true),
      "A100 split: " .. basis)
t, basis = carry.carry(gpus.l40s, ref, BEST, 4177.0e9, split)
check(t.torch_ops == nil and basis:find("no SM clock in lua/hw/gpus.lua: every class by it", 1, true), "L40S: " .. basis)
-- the measured classes of the two GPUs: each carried to the A100 between its DRAM and its SM ratio,
-- a DRAM-bound class (copy) near the DRAM ratio, a strided one (transpose) nearer the SM ratio
local function joined(gname)
  local out = {}
  for _, f in ipairs { "_torch_ops", "_norm", "_group_norm", "_geglu_mul", "_conv_layout", "_sinks_attention", "_baddbmm" } do
    for _, r in ipairs(require("hw.calibrated." .. gname .. f).torch_ops) do out[#out + 1] = r end
  end
  return out
end
split = carry.split_classes(joined("h200"), joined("h100_sxm"), ref, gpus.h100_sxm)
local kb = gpus.a100_80g.mem_bw_bytes_per_s / ref.mem_bw_bytes_per_s
local n, between = 0, true
for cls, pts in pairs(split or {}) do
  n = n + 1
  for _, p in ipairs(pts) do
    local r = ratio(p[2], p[3], kb, k_sm)
    between = between and r >= math.min(kb, k_sm) - 1e-12 and r <= math.max(kb, k_sm) + 1e-12
    if not between then failures[#failures + 1] = cls .. " outside its ratios"; break end
  end
end
check(n == 35 and between, "35 classes measured on both, each carried between its ratios: " .. n)
local function mean_ratio(cls)
  local s = 0
  for _, p in ipairs(split[cls]) do s = s + ratio(p[2], p[3], kb, k_sm) end
  return s / #split[cls]
end
check(split and mean_ratio("copy") < kb * 1.1, "copy near the DRAM ratio: " .. tostring(split and mean_ratio("copy")))
-- the RTX 4090 (128 SMs at 2615 MHz, x1.281 the H200's, on 1008 GB/s): its norms, nearly all SM
-- part on the H200 and the H100, would carry above its DRAM; none passes its published 920.7 GB/s
t = carry.carry(gpus.rtx4090, ref, BEST, 4177.0e9, split)
local top = 0
for _, r in ipairs(t.torch_ops or {}) do
  if r.class == "norm" or r.class == "norm_bwd" or r.class == "rowwise" then top = math.max(top, r.gbps) end
end
check(#(t.torch_ops or {}) > 100 and top > 900 and top <= 920.7 + 1e-6, "RTX 4090 norms at most 920.7 GB/s: " .. top)
check(split and mean_ratio("transpose") > (kb + k_sm) / 2, "transpose nearer the SM ratio: " .. tostring(split and mean_ratio("transpose")))

if #failures > 0 then
  error(("carry: %d of %d checks failed:\n  %s"):format(#failures, checks, table.concat(failures, "\n  ")), 0)
end
print(("carry: %d checks passed"):format(checks))

return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
