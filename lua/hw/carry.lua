-- lua/hw/carry.lua: how the H200's measured profile is carried to a GPU that has none of its own.
--
-- Each op class keeps the fraction of peak it reached on the H200, and takes it of the target's
-- own peak (sim/cost.h cost_carry, docs/step-time.md):
--   GEMM and fused attention  x (target dense peak at its step clock) / (H200's at 1980 MHz),
--                             at the same work per SM (sizes scale by the SM-count ratio);
--   memory-bound kernels      x (target DRAM bandwidth) / (H200's 4.8 TB/s), at the same time per
--                             byte (sizes scale by the bandwidth ratio);
--   the stream's gap per kernel, the empty-kernel floor and every host cost stay as measured on the
--   H200 host (the host's CPU and software are assumed the same).
-- A peak is the datasheet's dense (no 2:4 sparsity) figure at peak_clock_mhz, scaled to
-- step_clock_mhz where a GPU's entry gives one (lua/hw/gpus.lua says where each came from).
local M = {}

M.REFERENCE = "h200"

-- The dense peak of dtype d at the clock the GPU's GEMMs hold inside a step (FLOP/s).
function M.step_peak(g, d)
  local p = g.peak_flops and g.peak_flops[d] or 0
  local pc = g.peak_clock_mhz
  local sc = g.step_clock_mhz or pc
  if pc and sc then p = p * sc / pc end
  return p
end

-- The carry table device.carry hands to the C core, and the one-line basis the step time prints.
function M.carry(g, ref)
  local compute = {}
  for _, d in ipairs { "fp32", "fp16", "bf16", "fp8", "int8" } do
    local r = M.step_peak(ref, d)
    compute[d] = r > 0 and M.step_peak(g, d) / r or 0
  end
  local t = { compute = compute, sm = g.sm_count / ref.sm_count, bw = g.mem_bw_bytes_per_s / ref.mem_bw_bytes_per_s }
  local basis = ("carried from the H200's measured profile: x%.3f bf16 peak%s, x%.3f DRAM bandwidth"):format(
    compute.bf16, g.step_clock_mhz and (" at " .. g.step_clock_mhz .. " MHz") or
      (g.peak_clock_mhz and (" at " .. g.peak_clock_mhz .. " MHz (assumed step clock)") or " (datasheet clock)"),
    t.bw)
  return t, basis
end

return M
