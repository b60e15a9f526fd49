-- bnb_gemm4bit.lua: which kernel bitsandbytes 0.50.2's bitsandbytes::gemm_4bit runs on an NVIDIA
-- GPU, the fused 4-bit GEMM (nothing allocated but the output) or the dequantize-then-F.linear
-- fallback (a whole dequantized weight, and for a double-quantized weight two fp32 absmax
-- tensors, live until F.linear returns). A port of backends/cuda/ops.py: the registered
-- "bitsandbytes::gemm_4bit" CUDA kernel (M above _gemm_4bit_custom_max_m = 1536, or K not a
-- multiple of the block size, falls back) and _gemm_4bit_use_custom_cuda, the per-architecture
-- table calibrated by bitsandbytes (its thresholds are copied, not fitted here). M is the
-- input's rows (A.numel() // K), N the weight's out_features, K its in_features.

local M = {}

M.CUSTOM_MAX_M = 1536    -- _gemm_4bit_custom_max_m on CUDA
M.CUSTOM_FLOOR_M = 4     -- _GEMM_4BIT_CUSTOM_FLOOR_M: at or below it the fused kernel always

-- _gemm_4bit_use_custom_cuda(device_index, dtype, M, N, K) for a GPU of `sms` SMs and compute
-- capability major.minor; dtype is vrsim's ("bf16", "fp16", "fp32").
local function use_custom_cuda(sms, major, minor, dtype, m, n, k)
  if m <= M.CUSTOM_FLOOR_M then return true end
  local n_blocks = (n + 63) // 64
  -- fp32 has no MMA kernel; pre-sm75 none; sm75 fp16 MMA only
  if dtype == "fp32" or major < 7 then return m < 8 end
  if major == 7 and (minor < 5 or dtype ~= "fp16") then return m < 8 end
  -- sm87 and sm110: no calibration data
  if (major == 8 and minor == 7) or major == 11 then return false end
  if major == 10 then
    if n_blocks >= sms * 3 then return m <= 32 end
    if n_blocks >= sms then return k < n and m <= 8 end
    return false
  end
  local sm75, sm80 = major == 7 and minor == 5, major == 8 and minor == 0
  local sm86, sm90 = major == 8 and minor == 6, major == 9
  local sm120, sm121 = major == 12 and minor == 0, major == 12 and minor == 1
  local hbm = sm80 or sm90
  local tall_k_2xn = k > n * 2

  -- small weight (N*K < 4 Mi elements): the dequantization's overhead dominates
  if n * k < 4 * 1024 * 1024 then
    if k * 2 < n then
      if hbm then
        local low_wave = n_blocks * 3 < sms
        if sm80 then return m <= (low_wave and 1536 or 512) end
        return m <= (low_wave and 512 or 320)
      end
      if sm75 then
        if n_blocks >= sms * 3 then return m <= 320 end
        if k >= 1024 then return m <= 64 end
        if k >= 704 then return m <= 96 end
        return m <= 320
      end
      if n_blocks >= sms then return m <= 320 end
      if n_blocks * k > sms * 320 then return m <= 192 end
      return m <= 320
    end
    local quarter_wave = n_blocks * 4 <= sms
    if sm80 and quarter_wave then
      if k >= n then return m <= (n_blocks * 8 <= sms and 32 or 128) end
      return m <= 384
    end
    if sm75 and n_blocks < sms and m > 8 then return m <= 64 end
    if quarter_wave then return m <= ((k < n or hbm) and 32 or 23) end
    if n_blocks * 2 <= sms then return m <= 16 end
    return false
  end

  -- larger weights: the fused kernel wins up to M = 512 at most
  if m > 512 then return false end
  if m < 8 then
    local thresh = sm90 and 36 or 48
    if hbm and m >= 6 and n_blocks >= thresh then
      local lt_75 = n_blocks * 4 < sms * 3
      local lt_60 = n_blocks * 5 < sms * 3
      if k > n and lt_75 then return false end
      if k == n then
        if sm80 and lt_60 then return false end
        if sm90 and lt_75 and not lt_60 then return false end
      end
    end
    return true
  end
  if sm75 then
    if n_blocks >= sms * 3 then return m <= (k < n and 128 or 64) end
    if n_blocks >= sms // 2 then return m <= 64 end
    return m <= 32
  end
  if sm80 then
    if n_blocks >= sms * 3 then return m <= 128 end
    if n_blocks >= sms then return m <= (k < n and 64 or 32) end
    if k >= n * 3 and n_blocks * 4 > sms then return false end
    if k == n and n_blocks >= 48 and n_blocks * 5 < sms * 3 then return false end
    if n_blocks * 2 < sms then
      if k <= n then return m <= 128 end
      if n_blocks * 3 >= sms then return false end
    end
    if n_blocks >= sms // 2 and k < n then return m <= 128 end
    return m <= 16
  end
  if sm86 then
    if n_blocks >= sms then return m <= 128 end
    if n_blocks >= sms // 2 then return m <= 64 end
    return m <= 16
  end
  if sm90 then
    if n_blocks >= sms * 3 then return m <= 64 end
    if n_blocks >= sms * 2 then return m <= 48 end
    if n_blocks >= sms then return m <= 32 end
    if n_blocks >= sms // 2 then
      if k >= n and n_blocks * 4 < sms * 3 then return false end
      return m <= 16
    end
    return false
  end
  if sm121 and n_blocks >= sms then return m <= 256 end
  if sm120 then
    if n_blocks >= sms * 3 then return m <= 256 end
    if n_blocks >= sms * 2 then return m <= 128 end
    if n_blocks * 5 >= sms * 4 then return m <= (k >= n and 96 or 64) end
    if n_blocks >= sms then return m <= 64 end
    if n_blocks >= sms // 2 then return m <= ((k * 2 >= n and n_blocks >= 128) and 64 or 8) end
    if tall_k_2xn and n_blocks > 64 then return m <= 16 end
    return m <= 8
  end
  -- sm89 and the rest (sm121 below one wave)
  if n_blocks >= sms * 3 then return m <= 256 end
  if n_blocks >= sms * 2 then return m <= 128 end
  if n_blocks * 5 >= sms * 4 then
    if tall_k_2xn or n_blocks >= 200 then return m <= 128 end
    if k >= n then return m <= (sms >= 60 and 128 or 32) end
    return m <= 64
  end
  if n_blocks >= sms // 2 then
    if tall_k_2xn then return m <= 64 end
    if n_blocks >= 64 then return m <= 8 end
    return m <= 32
  end
  if k > n and n_blocks <= 48 then return m <= (k >= n * 3 and 12 or 10) end
  return m <= ((tall_k_2xn or n_blocks < 48) and 16 or 8)
end

-- Whether gemm_4bit runs its fused kernel for an m x k input against an n x k weight of 64-weight
-- blocks on `gpu` (the catalog entry). Returns true or false, and a reason where the answer
-- is not bitsandbytes' own for this GPU (nil otherwise).
function M.fused(gpu, dtype, m, n, k)
  if m > M.CUSTOM_MAX_M then return false end
  if k % 64 ~= 0 then return false end
  if not gpu or gpu.vendor ~= "nvidia" or not gpu.compute_capability or not gpu.sm_count then
    return false, "bitsandbytes' gemm_4bit kernel choice is ported for NVIDIA GPUs only: the "
                  .. "dequantize-then-F.linear path (a whole dequantized weight a matmul) is assumed"
  end
  local cc = gpu.compute_capability
  local major = math.floor(cc)
  local minor = math.floor((cc - major) * 10 + 0.5)
  return use_custom_cuda(gpu.sm_count, major, minor, dtype, m, n, k)
end

return M
