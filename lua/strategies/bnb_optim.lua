-- bnb_optim.lua: what bitsandbytes' optimizer step costs per parameter, from the table measured on
-- the run's GPU (lua/hw/calibrated/<gpu>_bnb_optim.lua, validation/harness/measure_bnb_optim.py).
--
-- bitsandbytes 0.50.2's Optimizer8bit.step (optim/optimizer.py) runs, for each parameter with a
-- .grad: prefetch_state (paged states only: cudaMemPrefetchAsync of state1 and state2), then
-- update_step (p.data.contiguous(), get_config, one kernel launched through ctypes:
-- kOptimizer8bit2StateBlockwise for 8-bit states, kOptimizer32bit2State for 32-bit ones), then
-- sync_gpu(p): torch.cuda.synchronize(). The GPU idles while the host does the next parameter's
-- work, and the host waits for every kernel: the step costs the sum over parameters of the host's
-- work and the kernel's time, whatever the kernels' bytes. The blockwise kernel dequantizes both
-- states through their 256-entry maps and quantizes them again by a binary search of the map
-- (dQuantize), far from its bytes' time.
--
-- A parameter's state decides the path, not the optimizer's name (Optimizer2State.init_state,
-- get_state_buffer): fewer than min_8bit_size (4096) elements keep 32-bit states, and a paged
-- optimizer pages only states of 1e5 elements or more. The table's rows are keyed by that path:
-- adamw8bit, paged_adamw_8bit, adamw32bit, paged_adamw_32bit.
--
-- The table (bnb_optim = { kernel = {...}, param = {...} }):
--   kernel rows  {optim, dtype, numel, kernel_us, step_us}: the update kernel's own time on one
--                parameter of numel elements, and a whole step() on it
--   param rows   {optim, dtype, numel, step_param_us, kernel_us, zero_grad_param_us}: the slope
--                per parameter of step() and zero_grad() over many small parameters, and the
--                kernels' part of step_param_us
-- A parameter's host time is its path's param row's (step_param_us less its kernels' part), and
-- for a paged state what the prefetch adds as the state grows (prefetch_us); its device time the
-- kernel's at its elements (kernel_us).
local M = {}

-- The table's row key of a parameter's path: the optimizer's family (adamw; lion, whose
-- one-state kernels the table does not hold), its states' bits and whether they are paged.
function M.path(family, bits, paged)
  if bits == 8 then return (paged and "paged_%s_8bit" or "%s8bit"):format(family) end
  return (paged and "paged_%s_32bit" or "%s32bit"):format(family)
end

-- The kernel's measured points for a path and dtype, by numel: the kernel rows, and the param
-- rows' kernel time at their size (a few thousand elements, below the kernel rows).
local POINTS = setmetatable({}, { __mode = "k" })
local function points(tab, path, dtype)
  local memo = POINTS[tab]
  if not memo then memo = {}; POINTS[tab] = memo end
  local key = path .. "/" .. dtype
  if memo[key] ~= nil then return memo[key] end
  local pts, seen = {}, {}
  local function add(n, us)
    if type(n) == "number" and type(us) == "number" and us > 0 and not seen[n] then
      seen[n] = true
      pts[#pts + 1] = { n = n, us = us }
    end
  end
  for _, r in ipairs(tab.kernel or {}) do
    if r.optim == path and r.dtype == dtype then add(r.numel, r.kernel_us) end
  end
  for _, r in ipairs(tab.param or {}) do
    if r.optim == path and r.dtype == dtype then add(r.numel, r.kernel_us) end
  end
  table.sort(pts, function(a, b) return a.n < b.n end)
  memo[key] = #pts > 0 and pts or false
  return memo[key]
end

-- The kernel's microseconds on numel elements: linear between the measured sizes; below the
-- smallest, the smallest's (a launch's floor); above the largest, in proportion to the elements
-- (the kernel streams its blocks at a steady rate there). nil where the path and dtype have no
-- row.
function M.kernel_us(tab, path, dtype, numel)
  local pts = tab and points(tab, path, dtype)
  if not pts then return nil end
  if numel <= pts[1].n then return pts[1].us end
  for i = 2, #pts do
    local a, b = pts[i - 1], pts[i]
    if numel <= b.n then return a.us + (b.us - a.us) * (numel - a.n) / (b.n - a.n) end
  end
  local last = pts[#pts]
  return last.us * numel / last.n
end

-- The host's microseconds per parameter of a path: step() (the Python of step and update_step,
-- the ctypes launch, the prefetch, the synchronize's return; its kernel's time taken out) and
-- zero_grad(set_to_none=True). nil where the table has no param row for the path.
function M.host_us(tab, path)
  for _, r in ipairs(tab and tab.param or {}) do
    if r.optim == path and type(r.step_param_us) == "number" then
      return math.max(0, r.step_param_us - (r.kernel_us or 0)), math.max(0, r.zero_grad_param_us or 0)
    end
  end
  return nil
end

-- A step's wall time on one parameter of numel elements (the kernel rows' step_us): linear
-- between the measured sizes, nil outside them.
local function step_us(tab, path, dtype, numel)
  local lo, hi
  for _, r in ipairs(tab.kernel or {}) do
    if r.optim == path and r.dtype == dtype and type(r.step_us) == "number" then
      if r.numel <= numel and (not lo or r.numel > lo.numel) then lo = r end
      if r.numel >= numel and (not hi or r.numel < hi.numel) then hi = r end
    end
  end
  if not (lo and hi) then return nil end
  if hi.numel == lo.numel then return lo.step_us end
  return lo.step_us + (hi.step_us - lo.step_us) * (numel - lo.numel) / (hi.numel - lo.numel)
end

-- What a paged state's prefetch (cudaMemPrefetchAsync over state1 and state2, resident on the
-- card) adds to the host's work as the parameter grows: the paged path's one-parameter step
-- less the unpaged path's at the same size (the same kernel), above that difference at the
-- smallest measured size (the param row's host time already holds a small prefetch); beyond
-- the largest size, in proportion to the elements (the driver walks the range page by page).
-- 0 for an unpaged path or where the table lacks the rows.
function M.prefetch_us(tab, family, bits, dtype, numel)
  local paged, unpaged = M.path(family, bits, true), M.path(family, bits, false)
  local sizes = {}
  for _, r in ipairs(tab.kernel or {}) do
    if r.optim == paged and r.dtype == dtype then sizes[#sizes + 1] = r.numel end
  end
  if #sizes < 2 then return 0 end
  table.sort(sizes)
  local function diff(n)
    local a, b = step_us(tab, paged, dtype, n), step_us(tab, unpaged, dtype, n)
    return a and b and a - b or nil
  end
  local base = diff(sizes[1])
  if not base or numel <= sizes[1] then return 0 end
  local top = sizes[#sizes]
  local d = diff(math.min(numel, top))
  if not d then return 0 end
  local grow = math.max(0, d - base)
  return numel > top and grow * numel / top or grow
end

-- The measured costs of one parameter's step: { device_us, host_us, zero_grad_us }, or nil and
-- what is missing (the path and dtype without a row).
function M.param_cost(tab, family, bits, paged, dtype, numel)
  local path = M.path(family, bits, paged)
  local k = M.kernel_us(tab, path, dtype, numel)
  local h, z = M.host_us(tab, path)
  if not (k and h) then
    return nil, ("%s %s"):format(path, dtype)
  end
  if paged then h = h + M.prefetch_us(tab, family, bits, dtype, numel) end
  return { device_us = k, host_us = h, zero_grad_us = z }
end

return M
