-- lua/hw/carry.lua: how the H200's measured profile is carried to a GPU that has none of its own.
--
-- Each op class keeps the fraction of peak it reached on the H200, and takes it of the target's
-- own peak (sim/cost.h cost_carry, docs/step-time.md):
--   GEMM and fused attention  x (target dense peak at its step clock) / (H200's at 1980 MHz),
--                             at the same work per SM (sizes scale by the SM-count ratio);
--   memory-bound kernels      x (target DRAM bandwidth) / (H200's 4.8 TB/s), at the same time per
--                             byte (sizes scale by the bandwidth ratio); a class the H100 SXM
--                             measured too, size by size: its time per byte split into a part
--                             that waits on DRAM (by that ratio) and a part bound by the SMs'
--                             issue and loads in flight (by the SMs x clock ratio), solved from
--                             the two GPUs' rates (M.split_classes below);
--   FlashAttention-2 curves  also x its fraction of peak on the target's architecture / on Hopper's
--                             (FLASH2_PEAK_FRACTION below);
--   the stream's gap per kernel, the empty-kernel floor and every host cost stay as measured on the
--   H200 host (the host's CPU and software are assumed the same).
-- A peak is the datasheet's dense (no 2:4 sparsity) figure at peak_clock_mhz, scaled to
-- step_clock_mhz where a GPU's entry gives one (lua/hw/gpus.lua says where each came from).
-- Where a GPU has a sustained best-matmul measurement (sustained_matmul_bf16), or a GEMM rate
-- measured inside a model's forward (step_matmul_bf16), above the plateau the carried bf16 curve
-- reaches (the reference's best measured bf16 GEMM x the ratio above), the bf16 ratio (and fp16's,
-- where its peak is bf16's) is raised to the larger: a card held busy back to back runs at or
-- below the clock of its in-step GEMMs, so that measurement is a lower bound on their plateau (the
-- H200: 777.6 sustained, 826.3 in step). The A100's cuBLAS reaches 86.9 % of its peak that way,
-- more than the 77.2 % the H200's kernels reach of theirs, which a carried fraction of peak cannot
-- know. Likewise a published DRAM-bound elementwise rate (measured_elementwise_bw) above what the
-- H200's best contiguous op carries to raises the DRAM ratio of every memory-bound class.
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
--   ada_half_rate  0.988  GeForce Ada (FP16/BF16 tensor math with FP32 accumulate at half rate:
--                 dense bf16 peak = 2 x FP32's): the RTX 4090's published FlashAttention-2 forward,
--                 169.28 TFLOP/s (fp16 in, fp32 accumulate, seq 2048, head dim 128, not causal;
--                 CUDA 12.2; apache/tvm, tl_doc/flash_perf.md at commit bd6f957), over its dense
--                 peak at its step clock (lua/hw/gpus.lua: 128 SMs x 512 FLOP/clk x 2615 MHz =
--                 171.4 TFLOP/s). The same table's causal head-dim-128 rows, 151.19 forward and
--                 99.23 backward, are the LoRA rows' shape (docs/step-time.md)
--   ada     0.73  data-center and workstation Ada (full-rate FP32 accumulate: L40S, L4, RTX 6000
--                 Ada): carried from Ampere, since sm_89 runs FlashAttention-2's sm80 kernels (the
--                 same mma.sync / cp.async path, Ada has no wgmma); no published figure was found,
--                 and the GeForce one does not carry: where the tensor math runs at half rate, the
--                 kernel's softmax and memory work hide under it, a larger fraction of a lower peak
-- Each is a best forward figure, so their ratio (2.09; GeForce Ada 2.82) is what is used, not
-- either value. Architectures absent here (Volta/Turing have no flash kernel; Blackwell and CDNA3
-- have no published FlashAttention-2 fraction) carry the H200's fraction unchanged.
M.FLASH2_PEAK_FRACTION = { ampere = 0.73, ada = 0.73, ada_half_rate = 0.988, hopper = 0.35 }

-- The FLASH2_PEAK_FRACTION key of g: its architecture, "_half_rate" added where the table has
-- that variant and g's dense bf16 peak is twice its FP32 (GeForce's half-rate FP32 accumulate; within
-- 1 %, the datasheets round: the RTX 4080's 97.5 / 48.7).
function M.flash_key(g)
  local pf = g.peak_flops or {}
  local half = pf.bf16 and pf.fp32 and pf.fp32 > 0 and math.abs(pf.bf16 / pf.fp32 - 2) < 0.02
  local k = (g.arch or "?") .. "_half_rate"
  return half and M.FLASH2_PEAK_FRACTION[k] and k or g.arch
end

-- The ratio of FlashAttention-2's fraction of peak on g's architecture to the reference's, or 1.
function M.flash_ratio(g, ref)
  local t, r = M.FLASH2_PEAK_FRACTION[M.flash_key(g)], M.FLASH2_PEAK_FRACTION[M.flash_key(ref)]
  return (t and r) and t / r or 1
end

-- The reference profile's DRAM-bound elementwise rate (bytes/s): its best "contiguous" torch op
-- (add, pow, silu, ...) over at least twice its L2 (lua/hw/calibrated/h200_torch_ops.lua), or nil.
function M.best_contiguous(prof, ref)
  local best
  local floor = 2 * (ref.l2_bytes or 0)
  for _, r in ipairs(prof.torch_ops or {}) do
    if r.class == "contiguous" and r.gbps and (r.bytes or 0) >= floor and (not best or r.gbps * 1e9 > best) then
      best = r.gbps * 1e9
    end
  end
  return best
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
-- profile's best measured bf16 GEMM (FLOP/s), or nil; ref_contiguous: its DRAM-bound elementwise
-- rate (M.best_contiguous), or nil; split: the classes the reference and the second GPU both
-- measured (M.split_classes), or nil: the table's torch_ops then holds them carried.
function M.carry(g, ref, ref_best_bf16, ref_contiguous, split)
  local compute = {}
  for _, d in ipairs { "fp32", "fp16", "bf16", "fp8", "int8" } do
    local r = M.step_peak(ref, d)
    compute[d] = r > 0 and M.step_peak(g, d) / r or 0
  end
  local gemm = ("x%.3f bf16 peak%s"):format(compute.bf16, g.step_clock_mhz and (" at " .. g.step_clock_mhz .. " MHz") or
    (g.peak_clock_mhz and (" at " .. g.peak_clock_mhz .. " MHz (assumed step clock)") or " (datasheet clock)"))
  -- the larger of the GPU's published sustained and in-model matmul, each a lower bound on its
  -- in-step plateau (lua/hw/gpus.lua)
  local s, what
  for _, f in ipairs { { "sustained_matmul_bf16", "sustained" }, { "step_matmul_bf16", "in-model" } } do
    local v = g[f[1]]
    if v and not (v > 0 and v <= M.step_peak(g, "bf16")) then
      error(("lua/hw/gpus.lua: %s's %s (%s) must be above 0 and at most its dense bf16 peak "
        .. "at its step clock (%.1f TFLOP/s)"):format(g.name, f[1], tostring(v), M.step_peak(g, "bf16") / 1e12), 0)
    end
    if v and (not s or v > s) then s, what = v, f[2] end
  end
  local raised = s and ref_best_bf16 and ref_best_bf16 > 0 and s / ref_best_bf16 > compute.bf16
  if raised then
    local r = s / ref_best_bf16
    gemm = ("x%.3f bf16 (%s matmul %.1f TFLOP/s / the H200's %.1f in step)"):format(
      r, what, s / 1e12, ref_best_bf16 / 1e12)
    if g.peak_flops and g.peak_flops.fp16 == g.peak_flops.bf16 then compute.fp16 = r end
    compute.bf16 = r
  end
  -- flash attention: the dense peak ratio (never the sustained-matmul raise, a cuBLAS figure)
  -- times FlashAttention-2's fraction of peak on g's architecture / on the reference's
  local peak_bf16 = M.step_peak(ref, "bf16") > 0 and M.step_peak(g, "bf16") / M.step_peak(ref, "bf16") or 0
  local t = { compute = compute, sm = g.sm_count / ref.sm_count, bw = g.mem_bw_bytes_per_s / ref.mem_bw_bytes_per_s,
              attention = { flash = peak_bf16 * M.flash_ratio(g, ref) } }
  local dram = ("x%.3f DRAM bandwidth"):format(t.bw)
  -- a published DRAM-bound elementwise rate of g above the carried one raises the ratio of every
  -- memory-bound class to it, as sustained_matmul_bf16 does for GEMMs (lua/hw/gpus.lua)
  local e = g.measured_elementwise_bw
  if (e or split) and not ref_contiguous then
    local ok, ops = pcall(require, "hw.calibrated." .. M.REFERENCE .. "_torch_ops")
    ref_contiguous = ok and type(ops) == "table" and M.best_contiguous(ops, ref) or nil
  end
  if e and not (e > 0 and e <= g.mem_bw_bytes_per_s) then
    error(("lua/hw/gpus.lua: %s's measured_elementwise_bw (%s) must be above 0 and at most its DRAM bandwidth (%.1f GB/s)")
      :format(g.name, tostring(e), g.mem_bw_bytes_per_s / 1e9), 0)
  end
  if e and ref_contiguous and ref_contiguous > 0 and e / ref_contiguous > t.bw then
    t.bw = e / ref_contiguous
    dram = ("x%.3f DRAM (measured %.1f GB/s / the H200's %.1f)"):format(t.bw, e / 1e9, ref_contiguous / 1e9)
  end
  -- the classes the second GPU measured too: each size's DRAM part by the DRAM ratio (raised
  -- as above), its SM part by the SMs x clock ratio (M.split_classes)
  if split and next(split) then
    local sg, sr = M.sm_clock(g), M.sm_clock(ref)
    if sg and sr then
      local n = 0
      for _ in pairs(split) do n = n + 1 end
      -- none faster than the reference's DRAM-bound streaming rate carried by the DRAM ratio
      t.torch_ops = M.carried_rows(split, t.bw, sg / sr, ref_contiguous and ref_contiguous * t.bw)
      dram = dram .. (" (%d %s split with the H100 SXM's: SM part x%.3f SMs x clock)")
        :format(n, n == 1 and "class" or "classes", sg / sr)
    else
      dram = dram .. " (no SM clock in lua/hw/gpus.lua: every class by it)"
    end
  end
  local basis = ("carried from the H200's measured profile: %s, %s"):format(gemm, dram)
  if M.flash_ratio(g, ref) ~= 1 then
    basis = basis .. (", flash attention x%.3f (FlashAttention-2 on %s / on %s x%.2f)"):format(
      t.attention.flash, (M.flash_key(g):gsub("_", " ")), ref.arch, M.flash_ratio(g, ref))
  end
  return t, basis, raised and true or false
end

-- ---- memory-bound classes split into a DRAM part and an SM part ------------------------------
-- A second GPU measured with the reference's own harness (validation/harness/run_gpu_classes.sh)
-- on the reference's die but not its DRAM: the H100 SXM, 132 SMs at the H200's clock under load,
-- 3.35 of its 4.8 TB/s. Class by class and size by size the pair separates the time per byte a
-- kernel spends waiting on DRAM from the time its SMs need to issue the loads and keep enough of
-- them in flight (a strided or transposed access, a cast that widens, a reduction's tail), which
-- a faster DRAM does not shorten.
M.SECOND = "h100_sxm"

-- The SMs x clock (SM-MHz) g's kernels issue at: its SM count at its step clock (its datasheet
-- clock where it has none), or nil where the catalog gives no clock.
function M.sm_clock(g)
  local mhz = g.step_clock_mhz or g.peak_clock_mhz
  return g.sm_count and mhz and g.sm_count * mhz or nil
end

-- A class's curve as the C core builds it (sim/cost.c curve_init): rows of one size averaged,
-- sorted by size. rows: { {bytes=, gbps=}, ... }; returns { {bytes, rate (bytes/s)}, ... }.
local function mean_curve(rows)
  local by, sizes = {}, {}
  for _, r in ipairs(rows) do
    local e = by[r.bytes]
    if not e then e = { r.bytes, 0, 0 }; by[r.bytes] = e; sizes[#sizes + 1] = e end
    e[2], e[3] = e[2] + r.gbps * 1e9, e[3] + 1
  end
  table.sort(sizes, function(a, b) return a[1] < b[1] end)
  local out = {}
  for i, e in ipairs(sizes) do out[i] = { e[1], e[2] / e[3] } end
  return out
end

-- The rate of a mean curve at `bytes`: linear in log(bytes), clamped to its measured range (as
-- sim/cost.c curve_eval).
local function curve_at(c, bytes)
  if bytes <= c[1][1] then return c[1][2] end
  for i = 2, #c do
    if bytes <= c[i][1] then
      local f = math.log(bytes / c[i - 1][1]) / math.log(c[i][1] / c[i - 1][1])
      return c[i - 1][2] + f * (c[i][2] - c[i - 1][2])
    end
  end
  return c[#c][2]
end

-- The time per byte (s) of one size split in two, from the reference's t_ref and the second
-- GPU's t_2 at that size: t = dram / k_bw + sm / k_sm, where k_bw and k_sm are a GPU's DRAM
-- bandwidth and SMs x clock over the reference's (1 and 1 on the reference; k_bw2, k_sm2 on the
-- second). Both parts are kept >= 0: where the second GPU is faster than its DRAM ratio allows
-- and its SMs (no slower than the reference's) cannot account for it (t_2 below t_ref), the SM
-- part takes all the time; where it is slower than its DRAM ratio, the DRAM part takes it all.
-- Returns dram, sm (s/byte at the reference), or nil where the two GPUs' ratios cannot separate
-- the parts (k_bw2 = k_sm2).
function M.split(t_ref, t_2, k_bw2, k_sm2)
  local d = 1 / k_bw2 - 1 / k_sm2
  if math.abs(d) < 1e-9 then return nil end
  local dram = (t_2 - t_ref / k_sm2) / d
  if dram < 0 then dram = 0 elseif dram > t_ref then dram = t_ref end
  return dram, t_ref - dram
end

-- The memory-bound classes the reference and the second GPU both measured, split size by size
-- (M.split): { [class] = { {bytes, dram, sm}, ... } } at the reference's sizes, the second
-- GPU's curve interpolated to them; classes only the reference measured are absent. ref_rows,
-- second_rows: torch_ops rows ({class=, bytes=, gbps=}) of the two (their supplements joined).
-- nil where the two GPUs' ratios do not separate the parts.
function M.split_classes(ref_rows, second_rows, ref, second)
  local k_bw2 = second.mem_bw_bytes_per_s / ref.mem_bw_bytes_per_s
  local sr, s2 = M.sm_clock(ref), M.sm_clock(second)
  if not (sr and s2) then return nil end
  local k_sm2 = s2 / sr
  local function by_class(rows)
    local t = {}
    for _, r in ipairs(rows or {}) do
      if r.class and r.bytes and r.gbps then
        t[r.class] = t[r.class] or {}
        table.insert(t[r.class], r)
      end
    end
    return t
  end
  local a, b = by_class(ref_rows), by_class(second_rows)
  local out = {}
  for cls, rows in pairs(a) do
    if b[cls] then
      local c2, pts = mean_curve(b[cls]), {}
      for _, p in ipairs(mean_curve(rows)) do
        local dram, sm = M.split(1 / p[2], 1 / curve_at(c2, p[1]), k_bw2, k_sm2)
        if not dram then return nil end
        pts[#pts + 1] = { p[1], dram, sm }
      end
      out[cls] = pts
    end
  end
  return out
end

-- The torch_ops rows of every split class carried to a GPU whose DRAM bandwidth and SMs x clock
-- are k_bw and k_sm times the reference's: at each reference size the time per byte
-- dram / k_bw + sm / k_sm, at a size shifted by the rate's ratio (the same time per kernel at
-- the point, as the DRAM ratio shifts sizes by the bandwidth's: cost.h CostCarry). No rate above
-- cap (bytes/s), where given: the target's DRAM-bound streaming rate, which a kernel whose SM part
-- its SMs would shorten still cannot pass (a GPU of many fast SMs on a narrow DRAM: the RTX 4090's
-- norms would otherwise carry above its 1008 GB/s), or the DRAM ratio's rate where that is more.
-- Sorted by class, then size.
function M.carried_rows(split, k_bw, k_sm, cap)
  local classes, rows = {}, {}
  for cls in pairs(split) do classes[#classes + 1] = cls end
  table.sort(classes)
  for _, cls in ipairs(classes) do
    for _, p in ipairs(split[cls]) do
      local t_ref, t = p[2] + p[3], p[2] / k_bw + p[3] / k_sm
      -- (an op the reference ran above that rate, inside its L2, keeps at least the DRAM ratio)
      local top = cap and math.max(cap, k_bw / t_ref)
      if top and top > 0 and t < 1 / top then t = 1 / top end
      local r = t_ref / t
      local bytes = p[1] * r
      rows[#rows + 1] = { class = cls, op = "carried", bytes = bytes, gbps = 1 / t / 1e9, ms = bytes * t * 1e3 }
    end
  end
  return rows
end

-- ---- fused attention measured on an H100 ----------------------------------------------------
-- Fused attention's kernels (measure_sdpa_kernels.py) are measured on the H100 SXM as well as on
-- the reference (lua/hw/calibrated/h100_sxm_sdpa_kernels.lua), with the context-parallel ring's
-- shapes (16384-32768 tokens) the reference's table lacks. Which GPU's rows a GPU without a
-- profile of its own prices attention from (hardware.lua device.sdpa_measured):
--   the GPU's own table, as measured (the H100 SXM);
--   else, for a board of the second GPU's architecture (h100_hbm2e_96g, h100_pcie), the second
--   GPU's, carried as attention is carried from the reference (sizes by the SM-count ratio, rates
--   by the dense bf16 peak ratio at each one's step clock; the same architecture runs the same
--   kernels, so no FlashAttention-2 ratio): those boards' curves carried from the H200 already
--   rest on this same die (GH100) and ratio, and on the shapes both measured the H100 SXM's times
--   are the H200's (a median -0.1 % over 266 figures; flash, 8192 causal, forward and backward:
--   6.40 ms and 6.42), so what the SXM's rows add is the 16384-32768-token rows the H200 never
--   measured, past which its curve is held flat;
--   else nothing: the reference's rows carried (cost_carry).
-- Returns { sdpa = rows, sm = , rate = , source = , from = the GPU measured } or nil.
-- load(suffix, gname): the calibrated module of that GPU, or nil (hardware.lua calibrated).
-- The second GPU's attention table carried to g, a GPU of its architecture (sizes by the SM-count
-- ratio, rates by the dense bf16 peak ratio at each one's step clock), or nil.
local function second_sdpa(g, gpus, load)
  local sg = gpus[M.SECOND]
  if not sg or g.arch ~= sg.arch then return nil end
  local t = load("_sdpa_kernels", M.SECOND)
  local ps = M.step_peak(sg, "bf16")
  if not (t and t.sdpa and ps > 0 and g.sm_count and sg.sm_count) then return nil end
  return { sdpa = t.sdpa, sm = g.sm_count / sg.sm_count, rate = M.step_peak(g, "bf16") / ps, from = M.SECOND,
           source = "lua/hw/calibrated/" .. M.SECOND .. "_sdpa_kernels.lua" }
end

function M.sdpa_rows(name, g, gpus, load)
  local own = load("_sdpa_kernels", name)
  if own and own.sdpa then
    return { sdpa = own.sdpa, sm = 1, rate = 1, from = name,
             source = "lua/hw/calibrated/" .. name .. "_sdpa_kernels.lua" }
  end
  if name == M.REFERENCE then return nil end
  return second_sdpa(g, gpus, load)
end

-- ---- attention rows the reference lacks, measured on an H100 -----------------------------------
-- Two kinds of attention row are measured on the H100 SXM only: masks whose rows are not a
-- multiple of 16 bytes (sim/cost.h, "_masked_unaligned"; measure_sdpa_kernels.py --masked-more)
-- and FlexAttention's compiled kernels (backend "flex"; measure_flex_attention.py). A GPU with a
-- profile of its own whose table has no row of a kind (the H200's) takes the H100 SXM's rows of
-- it where it is of its architecture, carried as sdpa_rows carries: on the H200 by 1 and 1 (the
-- same GH100 die, 132 SMs and step clock), whose masked rows are the SXM's within 1.6 % on the
-- shapes both timed (masked_h32_d128 at 4096 and 8192 keys, cuDNN forward: 0.754 and 2.940 ms
-- against 0.742 and 2.900). Only those rows: the cost model replaces a curve of a backend and
-- kind only where rows of it are given (cost_measured_sdpa), so the GPU's own rows keep theirs.
-- Returns sdpa_rows' table with borrowed = { kind = true, ... }, or nil.
M.SDPA_KINDS = {
  unaligned = function(r) return r.masked and r.seq_k % 8 ~= 0 end,
  flex = function(r) return type(r.backends) == "table" and r.backends.flex ~= nil end,
}
function M.sdpa_borrowed_rows(name, g, gpus, load, own)
  local second = name ~= M.SECOND and second_sdpa(g, gpus, load)
  if not second then return nil end
  local rows, borrowed = {}, {}
  for kind, is in pairs(M.SDPA_KINDS) do
    local has = false
    for _, r in ipairs(own or {}) do has = has or is(r) end
    if not has then
      for _, r in ipairs(second.sdpa) do
        if is(r) then rows[#rows + 1] = r; borrowed[kind] = true end
      end
    end
  end
  if #rows == 0 then return nil end
  second.sdpa, second.borrowed = rows, borrowed
  return second
end

-- Where a device's (hardware.lua device_of) attention rows of a kind of M.SDPA_KINDS come from:
-- "own" (rows of its own table, or a whole table carried to it), another GPU's name (its rows
-- borrowed: sdpa_borrowed_rows), or nil (none).
function M.sdpa_rows_from(dev, kind)
  local m = dev.sdpa_measured
  if m and m.borrowed then
    if m.borrowed[kind] then return m.from end
    m = nil -- borrowed rows of other kinds: this kind is the profile's own, or none
  end
  local rows = m and m.sdpa or dev.profile and dev.profile.sdpa or {}
  for _, r in ipairs(rows) do
    if M.SDPA_KINDS[kind](r) then return "own" end
  end
  return nil
end

-- ---- float8 GEMMs measured on an H100 -------------------------------------------------------
-- torch._scaled_mm (torchao Float8Linear's GEMMs, tensorwise scales) is measured on the H100 SXM
-- (lua/hw/calibrated/h100_sxm_gemm_fp8.lua, measure_fp8_gemm.py); the reference's profile has no
-- fp8 rows, so without these an fp8 GEMM runs at the roofline (peak x eff_compute). Which GPU's
-- rows a GPU prices its fp8 GEMMs from (hardware.lua device.gemm_measured):
--   the GPU's own table, as measured (the H100 SXM);
--   else, for a GPU of the second GPU's architecture, the second GPU's, carried as GEMMs are
--   carried from the reference: sizes by the SM-count ratio, rates by the dense fp8 peak ratio at
--   each one's step clock. On the other H100 boards that is their peak ratio to the SXM's, as
--   sdpa_rows. On the H200 (the reference itself) the ratio is 1: the same GH100 die, 132 SMs,
--   1980 MHz step clock and 700 W limit, and these GEMMs are compute-bound (the smallest read
--   runs 0.1 ms over 24-96 MiB of operands, several times their time at 3.35 TB/s), so the
--   H200's faster HBM does not shorten them. The two GPUs' bf16 grids differ (the H200's nt rows
--   1/0.951 of the H100's torch.mm on the shapes both have) and their attention kernels do not
--   (-0.1 %); which of the two an fp8 GEMM follows is not measured, so no such factor is applied;
--   else nothing: the roofline as before (hardware.lua names it in a note).
-- Returns { gemm = rows, sm = , rate = , source = , from = the GPU measured } or nil.
M.FP8_GEMM_SUFFIX = "_gemm_fp8"
function M.gemm_rows(name, g, gpus, load)
  local own = load(M.FP8_GEMM_SUFFIX, name)
  if own and own.gemm then
    return { gemm = own.gemm, sm = 1, rate = 1, from = name,
             source = "lua/hw/calibrated/" .. name .. M.FP8_GEMM_SUFFIX .. ".lua" }
  end
  local sg = gpus[M.SECOND]
  if not sg or g.arch ~= sg.arch then return nil end
  local t = load(M.FP8_GEMM_SUFFIX, M.SECOND)
  local ps = M.step_peak(sg, "fp8")
  if not (t and t.gemm and ps > 0 and M.step_peak(g, "fp8") > 0 and g.sm_count and sg.sm_count) then return nil end
  return { gemm = t.gemm, sm = g.sm_count / sg.sm_count, rate = M.step_peak(g, "fp8") / ps, from = M.SECOND,
           source = "lua/hw/calibrated/" .. M.SECOND .. M.FP8_GEMM_SUFFIX .. ".lua" }
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
