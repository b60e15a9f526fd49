-- tests/ops/test_carry.lua: unit tests of the carry of the H200's measured profile to another GPU
-- (lua/hw/carry.lua): FlashAttention-2's fraction of peak by architecture (GeForce Ada's own, at
-- half-rate FP32 accumulate), the GEMM ratio raised to the larger of a published sustained and
-- in-model matmul, and the DRAM ratio raised to a published elementwise bandwidth, each only where
-- it gives more than the datasheet ratio, and a published figure above the card's peak refused.
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

if #failures > 0 then
  error(("carry: %d of %d checks failed:\n  %s"):format(#failures, checks, table.concat(failures, "\n  ")), 0)
end
print(("carry: %d checks passed"):format(checks))

return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
