-- lua/hw/carry.lua: how the H200's measured profile is carried to a GPU that has none of its own.
--
-- Each op class keeps the fraction of peak it reached on the H200, and takes it of the target's
-- own peak (sim/cost.h cost_carry, docs/step-time.md):
--   GEMM and fused attention  x (target dense peak at its step clock) / (H200's at 1980 MHz),
--                             at the same work per SM (sizes scale by the SM-count ratio);
--   memory-bound kernels      x (target DRAM bandwidth) / (H200's 4.8 TB/s), at the same time per
--                             byte (sizes scale by the bandwidth ratio);
--   FlashAttention-2 curves  also x its fraction of peak on the target's architecture / on Hopper's
--                             (FLASH2_PEAK_FRACTION below);
--   the stream's gap per kernel, the empty-kernel floor and every host cost stay as measured on the
--   H200 host (the host's CPU and software are assumed the same).
-- A peak is the datasheet's dense (no 2:4 sparsity) figure at peak_clock_mhz, scaled to
-- step_clock_mhz where a GPU's entry gives one (lua/hw/gpus.lua says where each came from).
-- Where a GPU has a sustained best-matmul measurement (sustained_matmul_bf16) above the plateau
-- the carried bf16 curve reaches (the reference's best measured bf16 GEMM x the ratio above), the
-- bf16 ratio (and fp16's, where its peak is bf16's) is raised to it: a card held busy back to back
-- runs at or below the clock of its in-step GEMMs, so that measurement is a lower bound on their
-- plateau (the H200: 777.6 sustained, 826.3 in step). The A100's cuBLAS reaches 86.9 % of its
-- peak that way, more than the 77.2 % the H200's kernels reach of theirs, which a carried fraction
-- of peak cannot know.
local M = {}

M.REFERENCE = "h200"

-- FlashAttention-2 (PyTorch's SDPA flash backend) is written for Ampere's warp-level mma.sync and
-- cp.async; on Hopper it runs that same code and leaves the warpgroup MMA (wgmma) and TMA unused,
-- so it reaches a far smaller fraction of the dense peak there than on Ampere. A fraction of
-- peak measured on the H200 therefore does not carry to an Ampere or Ada card by the GEMM ratio
-- alone: the flash curves carry, beyond it, the ratio of the published fractions below.
--   ampere  0.73  Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
--                 Partitioning" (arXiv 2307.08691, 2023), abstract: "reaching 50-73% of the
--                 theoretical maximum FLOPs/s on A100"
--   hopper  0.35  Shah et al., "FlashAttention-3: Fast and Accurate Attention with Asynchrony and
--                 Low-precision" (arXiv 2407.08608, 2024), abstract: "FlashAttention-2 achieving
--                 only 35% utilization on the H100 GPU"
--   ada     0.73  carried from Ampere: sm_89 runs FlashAttention-2's sm80 kernels (the same
--                 mma.sync / cp.async path, Ada has no wgmma); no published Ada figure was found
-- Both are each paper's best forward figure, so their ratio (2.09) is what is used, not either
-- value. Architectures absent here (Volta/Turing have no flash kernel; Blackwell and CDNA3 have
-- no published FlashAttention-2 fraction) carry the H200's fraction unchanged.
M.FLASH2_PEAK_FRACTION = { ampere = 0.73, ada = 0.73, hopper = 0.35 }

-- The ratio of FlashAttention-2's fraction of peak on g's architecture to the reference's, or 1.
function M.flash_ratio(g, ref)
  local t, r = M.FLASH2_PEAK_FRACTION[g.arch], M.FLASH2_PEAK_FRACTION[ref.arch]
  return (t and r) and t / r or 1
end

-- The dense peak of dtype d at the clock the GPU's GEMMs hold inside a step (FLOP/s).
function M.step_peak(g, d)
  local p = g.peak_flops and g.peak_flops[d] or 0
  local pc = g.peak_clock_mhz
  local sc = g.step_clock_mhz or pc
  if pc and sc then p = p * sc / pc end
  return p
end

-- The carry table device.carry hands to the C core, the one-line basis the step time prints, and
-- whether the bf16 ratio was raised to g's sustained matmul. ref_best_bf16: the reference
-- profile's best measured bf16 GEMM (FLOP/s), or nil.
function M.carry(g, ref, ref_best_bf16)
  local compute = {}
  for _, d in ipairs { "fp32", "fp16", "bf16", "fp8", "int8" } do
    local r = M.step_peak(ref, d)
    compute[d] = r > 0 and M.step_peak(g, d) / r or 0
  end
  local gemm = ("x%.3f bf16 peak%s"):format(compute.bf16, g.step_clock_mhz and (" at " .. g.step_clock_mhz .. " MHz") or
    (g.peak_clock_mhz and (" at " .. g.peak_clock_mhz .. " MHz (assumed step clock)") or " (datasheet clock)"))
  local s = g.sustained_matmul_bf16
  if s and not (s > 0 and s <= M.step_peak(g, "bf16")) then
    error(("lua/hw/gpus.lua: %s's sustained_matmul_bf16 (%s) must be above 0 and at most its dense bf16 peak "
      .. "at its step clock (%.1f TFLOP/s)"):format(g.name, tostring(s), M.step_peak(g, "bf16") / 1e12), 0)
  end
  local raised = s and ref_best_bf16 and ref_best_bf16 > 0 and s / ref_best_bf16 > compute.bf16
  if raised then
    local r = s / ref_best_bf16
    gemm = ("x%.3f bf16 (sustained matmul %.1f TFLOP/s / the H200's %.1f in step)"):format(
      r, s / 1e12, ref_best_bf16 / 1e12)
    if g.peak_flops and g.peak_flops.fp16 == g.peak_flops.bf16 then compute.fp16 = r end
    compute.bf16 = r
  end
  -- flash attention: the dense peak ratio (never the sustained-matmul raise, a cuBLAS figure)
  -- times FlashAttention-2's fraction of peak on g's architecture / on the reference's
  local peak_bf16 = M.step_peak(ref, "bf16") > 0 and M.step_peak(g, "bf16") / M.step_peak(ref, "bf16") or 0
  local t = { compute = compute, sm = g.sm_count / ref.sm_count, bw = g.mem_bw_bytes_per_s / ref.mem_bw_bytes_per_s,
              attention = { flash = peak_bf16 * M.flash_ratio(g, ref) } }
  local basis = ("carried from the H200's measured profile: %s, x%.3f DRAM bandwidth"):format(gemm, t.bw)
  if M.flash_ratio(g, ref) ~= 1 then
    basis = basis .. (", flash attention x%.3f (FlashAttention-2 on %s / on %s x%.2f)"):format(
      t.attention.flash, g.arch, ref.arch, M.flash_ratio(g, ref))
  end
  return t, basis, raised and true or false
end

-- The best bf16 rate (FLOP/s) among a profile's measured GEMM rows, or nil.
function M.best_bf16(prof)
  local best
  for _, r in ipairs(prof.gemm or {}) do
    if r.dtype == "bf16" and r.tflops and (not best or r.tflops * 1e12 > best) then best = r.tflops * 1e12 end
  end
  return best
end

return M
