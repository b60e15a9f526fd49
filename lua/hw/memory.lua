-- lua/hw/memory.lua: the two rules for a card's memory that are not tensors, one place each for
-- every GPU (tests/ops/test_memory.lua checks them):
--   capacity            what PyTorch's caching allocator may reserve on a card
--   cuBLAS workspace    what each cuBLAS handle takes through the allocator at its first GEMM
local M = {}

-- PyTorch's default cuBLAS workspace (aten/src/ATen/cuda/CublasHandlePool.cpp,
-- getChosenWorkspaceSize with no CUBLAS_WORKSPACE_CONFIG): ":4096:8" (4096 KiB x 8) on compute
-- capability 9.0 and later (major 9, 10, 11 and 12: Hopper and Blackwell, "32MiB for Hopper and
-- Blackwell"), ":4096:2:16:8" (4096 KiB x 2 + 16 KiB x 8) before; docs/allocator.md
-- 10.1 (two such workspaces per process on an H200, measured).
M.CUBLAS_WORKSPACE_HOPPER = 4096 * 1024 * 8            -- 33554432
M.CUBLAS_WORKSPACE_PRE_HOPPER = 4096 * 1024 * 2 + 16 * 1024 * 8 -- 8519680

-- PyTorch on ROCm (the same file): GEMMs on AMD Instinct gfx90a/gfx942 go to hipBLASLt
-- (ATen/Context.cpp blasPreferredBackend), whose workspace, allocated through the caching
-- allocator per handle and stream, defaults to 76 MiB (HIPBLASLT_WORKSPACE_SIZE; unlike cuBLASLt it
-- is not the cuBLAS handle's). The hipBLAS handle's own (128 MiB on gfx94x) comes only with GEMMs
-- hipBLASLt does not take: not modelled (a named note of the MI300X's catalog entry).
M.HIPBLASLT_WORKSPACE = 76 * 1024 * 1024               -- 79691776

-- Bytes of one BLAS workspace on GPU g (a lua/hw/gpus.lua entry): by its compute capability on
-- NVIDIA cards, hipBLASLt's on AMD ones.
function M.cublas_workspace_bytes(g)
  if g.vendor == "amd" then return M.HIPBLASLT_WORKSPACE end
  local cc = g.compute_capability
  if type(cc) ~= "number" or cc <= 0 then
    error(("GPU '%s' has no compute_capability: the cuBLAS workspace depends on it"):format(
      tostring(g.name)), 0)
  end
  return cc >= 9 and M.CUBLAS_WORKSPACE_HOPPER or M.CUBLAS_WORKSPACE_PRE_HOPPER
end

-- The card's total memory as torch.cuda.mem_get_info reports it: total_bytes, or what
-- hw.capacity_gib / capacity_mib pretend.
function M.total(total_bytes, hw)
  local total = total_bytes
  if hw.capacity_gib then total = math.floor(hw.capacity_gib * 2^30) end
  if hw.capacity_mib then total = math.floor(hw.capacity_mib * 2^20) end
  return total
end

-- The bytes the allocator may reserve (AllocConfig.capacity) and whether a memory fraction set
-- it (set_per_process_memory_fraction; PyTorch's OOM message then says so).
--   total_bytes    what torch reports as the card's total (usable_bytes)
--   context_bytes  device memory held outside the allocator (CUDA context, handles)
--   hw             the scenario's hardware table: capacity_gib or capacity_mib pretend the card
--                  has that much (then the context still comes off it); memory_fraction in (0, 1]
--                  caps reserved at that fraction of the real total (PyTorch takes the fraction
--                  of total_memory, c10/cuda/CUDACachingAllocator.cpp setMemoryFraction)
-- cudaMalloc fails beyond total - context, so the capacity is that, or the fraction's cap where
-- it is lower. A capacity of no byte is an error (never "no limit").
function M.capacity(total_bytes, context_bytes, hw)
  local total = M.total(total_bytes, hw)
  local cap = total - context_bytes
  if cap < 1 then
    error(("a card of %.2f GiB leaves nothing for PyTorch after the CUDA context (%.2f GiB): "
           .. "hardware.capacity_gib/capacity_mib must be larger"):format(total / 2^30, context_bytes / 2^30), 0)
  end
  local fraction_set = false
  if hw.memory_fraction then
    if hw.memory_fraction > 1 or hw.memory_fraction <= 0 then
      error("hardware.memory_fraction must be in (0, 1]", 0)
    end
    cap = math.min(cap, math.floor(hw.memory_fraction * total_bytes))
    fraction_set = true
    if cap < 1 then
      error(("hardware.memory_fraction = %.15g leaves no byte of %.2f GiB for PyTorch"):format(
            hw.memory_fraction, total_bytes / 2^30), 0)
    end
  end
  return cap, fraction_set
end

return M
