-- ddp.lua: torch DistributedDataParallel and ZeRO-1 (DDP + torch ZeroRedundancyOptimizer), the
-- passes lua/strategies/dp.lua runs for them: gradient buckets all-reduced as they fill, the
-- optimizer over the rank's partition (ZeRO-1) and the updated parameters broadcast after it.
local S = require("vrsim.core").streams  -- Op.stream ids (sim/graph.h StreamId)
local nn = require "vrsim.nn"
local ops = require "strategies.dp_ops"
local tensor, filled_event, op = ops.tensor, ops.filled_event, ops.op
local pbytes = ops.pbytes

local M = {}

-- ZeroRedundancyOptimizer._partition_parameters: largest first, to the least loaded rank.
-- Returns, for every rank r (0-based), the list of its parameters in the order of its local
-- optimizer (the partition's order: largest first, a stable sort): lists[r + 1]. The partition
-- is the same for every rank, so it is made once.
local function partition_by_rank(params, n)
  local order = {}
  for i, p in ipairs(params) do order[i] = { p = p, i = i, numel = nn.numel(p.shape) } end
  table.sort(order, function(a, b)
    local x, y = a.numel, b.numel
    if x ~= y then return x > y end
    return a.i < b.i
  end)
  local load, lists = {}, {}
  for r = 1, n do load[r], lists[r] = 0, {} end
  for _, e in ipairs(order) do
    local best = 1
    for r = 2, n do if load[r] < load[best] then best = r end end
    load[best] = load[best] + e.numel
    local list = lists[best]
    list[#list + 1] = e.p
  end
  return lists
end

-- DDP's gradient buckets after the first iteration (Reducer::rebuild_buckets): parameters in
-- the order their gradients became ready, the reverse of their first use in forward (one never
-- used goes last), capped at first_bucket_mb for the first bucket and bucket_cap_mb after
-- (fulltrace_dev-x2-zero1-trace: 262144000 bytes for the head, then 90185728 for the final
-- norm with the last down_proj, ...).
-- c10d's compute_bucket_assignment_by_size over params in order: a bucket closes once it
-- reaches its cap (first_cap for the first bucket, cap after), so the tensor that crosses the
-- cap is in it. Returns { bytes, params } buckets.
local function buckets_by_size(params, first_cap, cap)
  local buckets, cur, limit = {}, nil, first_cap
  for _, p in ipairs(params) do
    cur = cur or { bytes = 0, params = {} }
    cur.bytes = cur.bytes + pbytes(p)
    table.insert(cur.params, p)
    if cur.bytes >= limit then
      buckets[#buckets + 1] = cur
      cur, limit = nil, cap
    end
  end
  if cur then buckets[#buckets + 1] = cur end
  return buckets
end

local function ddp_buckets(s, trainable)
  local order = {}
  for i = #trainable, 1, -1 do order[#order + 1] = { p = trainable[i], k = #order } end
  table.sort(order, function(a, b)
    local ua, ub = a.p.first_use or -1, b.p.first_use or -1
    if ua ~= ub then return ua > ub end
    return a.k < b.k
  end)
  local ready = {}
  for i, it in ipairs(order) do ready[i] = it.p end
  return buckets_by_size(ready, s.opts.first_bucket_mb * 2^20, s.opts.bucket_cap_mb * 2^20)
end

-- When the first iteration's bucket is freed (training.zero.first_iteration_bucket). The
-- reducer drops it at step 1's rebuild; its last reference is then ProcessGroupNCCL's stash of
-- step 0's all-reduce (WorkNCCL::stashed_for_allocator_safety_: the reducer waits on the work's
-- future, never on Work::wait(), which would unstash it). The watchdog thread wakes every
-- kWatchdogThreadSleepMillis (100 ms) and moves a completed work's stash to the group's
-- shelvesToUnstash_, which the next collective called on the main thread empties
-- (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, Watchdog::runLoop and workEnqueue). So:
--   "rebuild"     the watchdog saw the all-reduce done before the last collective ahead of step
--                 1's forward (ZeRO-1's broadcasts, the caller's barrier): the bucket goes at the
--                 rebuild, just before the new buckets are made (fulltrace_dev-x2-zero1-trace);
--   "all_reduce"  it had not: the stash holds the bucket until step 1's first all-reduce, just
--                 after the head's backward (fulltrace_dev-x2-ddp-trace), which vrsim places
--                 after the last layer's backward (its head bucket is reduced where backward ends).
-- Which comes first is a race between the watchdog's wake-up and the host's calls, so the same
-- configuration does both: the two ranks of dev-x2-zero1-rerun3 did one each. "auto" is what the
-- measured ranks mostly did (docs/validation.md): "all_reduce" under DDP (4 of 4), "rebuild"
-- under ZeRO-1 (8 of 10); the run's notes name the other.
local function first_bucket_release(s)
  local v = s.opts.first_iteration_bucket
  if v == "auto" then return s.kind == "zero1" and "rebuild" or "all_reduce" end
  return v
end

-- DDP's buckets (torch/nn/parallel/distributed.py, _ddp_init_helper): with
-- find_unused_parameters=False (the default) the first iteration has one bucket of every
-- gradient, since the parameters' order need not be the order gradients become ready; DDP then
-- rebuilds them (above) from DistributedDataParallel._pre_forward of the second iteration, so
-- they are allocated before that forward's activations (step_start: the op runs as the step
-- begins, though it is declared once forward has shown the order).
local function ddp_rebuild(cx, s)
  if first_bucket_release(s) == "rebuild" then
    op(cx, { name = "DDP first-iteration bucket freed", phase = "fwd", at_step = 1, step_start = true,
             layer = -1, frees = { s.first_bucket }, drop_persistent = true })
  end
  local rebuilt = {}
  for bi, b in ipairs(s.ddp_buckets) do
    rebuilt[bi] = tensor(cx, ("ddp bucket %d (rebuilt)"):format(bi - 1), b.bytes, b.params[1].dtype,
                         "grad", true)
    b.id = rebuilt[bi]
  end
  op(cx, { name = "DDP rebuild_buckets", phase = "fwd", at_step = 1, step_start = true,
           outputs = rebuilt, layer = -1 })
end

-- Before each micro-batch's backward is derived (micro-batch mb of nmb): DDP runs under no_sync()
-- for every micro-batch but the last (and DeepSpeed ZeRO-1 reduces at the accumulation boundary):
-- the full gradients accumulate in .grad and the buckets are all-reduced in the last one only.
function M.before_backward(cx, s, params, trainable, mb, nmb)
  local n = s.n
  if mb < nmb then return end

  -- DDP's constructor first broadcasts the module's state from rank 0 (_sync_module_states ->
  -- c10d broadcast_coalesced, torch/csrc/distributed/c10d/comm.cpp): buckets of 250 MiB by
  -- compute_bucket_assignment_by_size (a bucket closes once it reaches the limit, so the
  -- tensor that crosses it is in it), each flattened into one buffer (a lone tensor is its own
  -- view, no buffer), at most two in flight: a third waits for the first, whose buffer goes
  -- then (fulltrace_dev-x2-zero1-trace: 314572800, 314589184, free, 281034752, ...)
  local groups = buckets_by_size(params, 250 * 2^20, 250 * 2^20)
  local in_flight = {}
  local function finish_front()
    local f = table.remove(in_flight, 1)
    if f then op(cx, { name = "DDP broadcast buffer freed", phase = "build", frees = { f } }) end
  end
  for _, grp in ipairs(groups) do
    if #in_flight >= 2 then finish_front() end
    local flat = false
    if #grp.params > 1 then
      flat = tensor(cx, "DDP broadcast buffer", grp.bytes, "uint8", "temp", false)
      op(cx, { name = "DDP _broadcast_coalesced", kind = "broadcast", phase = "build",
               outputs = { flat }, frees = {} })
    end
    in_flight[#in_flight + 1] = flat
  end
  while #in_flight > 0 do finish_front() end
  s.ddp_buckets = ddp_buckets(s, trainable)
  local buckets = s.ddp_buckets
  local total_bytes = 0
  for _, b in ipairs(buckets) do total_bytes = total_bytes + b.bytes end
  s.first_bucket = tensor(cx, "ddp bucket (first iteration: every gradient)", total_bytes,
                          trainable[1] and trainable[1].dtype or "bf16", "grad", true)
  ddp_rebuild(cx, s)
  if (s.steps or 2) >= 2 then
    local other = first_bucket_release(s) == "rebuild" and "all_reduce" or "rebuild"
    cx.notes = cx.notes or {}
    cx.notes[#cx.notes + 1] = ("DDP first-iteration bucket (%.0f MiB) freed %s: whether ProcessGroupNCCL's "
      .. "watchdog (a 100 ms poll) has released step 0's all-reduce by step 1's rebuild is a race, and a run may "
      .. "go the other way (--set training.zero.first_iteration_bucket=%s simulates it)"):format(
      total_bytes / 2^20, first_bucket_release(s) == "rebuild" and "at step 1's bucket rebuild"
      or "at step 1's first all-reduce", other)
  end
  -- step 0: the one bucket of every gradient, complete (and all-reduced) once the first
  -- parameter's gradient, the last to be ready, is
  op(cx, { name = "DDP bucket (first iteration)", phase = "build", outputs = { s.first_bucket } })
  local all_ids, last_layer = {}, -1
  for i = #trainable, 1, -1 do all_ids[#all_ids + 1] = trainable[i].id end
  for _, p in ipairs(trainable) do if (p.layer or -1) > last_layer then last_layer = p.layer end end
  local first_layer = trainable[1] and trainable[1].layer or -1
  local filled0 = filled_event(cx, "first-iteration bucket")
  op(cx, { name = "copy grads into the first-iteration bucket", kind = "elementwise", phase = "bwd",
           hook = 2, layer = first_layer, once = true, grads_of = all_ids,
           inputs = { s.first_bucket }, outputs = { filled0 }, bytes = 2 * total_bytes })
  op(cx, { name = "all_reduce the first-iteration bucket", kind = "allreduce", stream = S.collective,
           phase = "bwd", hook = 2, layer = first_layer, once = true,
           inputs = { s.first_bucket, filled0 }, bytes = total_bytes, world = n })
  if first_bucket_release(s) == "all_reduce" then
    op(cx, { name = "DDP first-iteration bucket freed", phase = "bwd", hook = 2, layer = last_layer,
             at_step = 1, frees = { s.first_bucket }, drop_persistent = true })
  end
  -- from step 1: the rebuilt buckets, each all-reduced as its last parameter's gradient is ready
  for bi, b in ipairs(buckets) do
    local last = b.params[#b.params]
    local gids = {}
    for _, p in ipairs(b.params) do gids[#gids + 1] = p.id end
    local filled = filled_event(cx, ("bucket %d"):format(bi - 1))
    op(cx, { name = ("copy grads into bucket %d"):format(bi - 1), kind = "elementwise",
             phase = "bwd", hook = 2, layer = last.layer or -1, from_step = 1, grads_of = gids,
             inputs = { b.id }, outputs = { filled }, bytes = 2 * b.bytes })
    op(cx, { name = ("all_reduce bucket %d"):format(bi - 1), kind = "allreduce", stream = S.collective,
             phase = "bwd", hook = 2, layer = last.layer or -1, from_step = 1,
             inputs = { b.id, filled }, bytes = b.bytes, world = n })
  end
  s.buckets = buckets
end

-- After backward: every trainable parameter and its gradient the optimizer updates on this rank
-- (ZeRO-1: its partition's), and all of them for zero_grad.
function M.after_backward(cx, cfg, s, trainable)
  local G, n = cx.G, s.n
  local upd = {}
  -- zero_grad runs over every parameter (ZeroRedundancyOptimizer keeps all param_groups)
  upd.all_grads = {}
  for _, p in ipairs(trainable) do upd.all_grads[#upd.all_grads + 1] = G:param_grad(p.id) end
  if s.kind == "zero1" then
    -- the rank's local AdamW steps its partition, largest parameters first
    for _, p in ipairs(partition_by_rank(trainable, n)[cfg.hardware.rank + 1]) do upd[#upd + 1] = { param = p, grad = G:param_grad(p.id) } end
  else
    for _, p in ipairs(trainable) do upd[#upd + 1] = { param = p, grad = G:param_grad(p.id) } end
  end
  return upd
end

-- After the optimizer: what the strategy sends. ZeRO-1 broadcasts the updated parameters.
-- ZeroRedundancyOptimizer.step: the local optimizer's step, then _sync_params
-- (parameters_as_bucket_view=False, the default) broadcasts each parameter from the rank that
-- owns it, one NCCL call a parameter, rank by rank, once the step has updated them.
function M.after_step(cx)
  local s = cx.dp
  if s.kind == "zero1" then
    local updated = filled_event(cx, "the local optimizer step")
    op(cx, { name = "optimizer step done", phase = "optim", outputs = { updated } })
    local trainable = {}
    for _, p in ipairs(cx.params) do if p.trainable then trainable[#trainable + 1] = p end end
    local lists = partition_by_rank(trainable, s.n)
    for r = 0, s.n - 1 do
      for _, p in ipairs(lists[r + 1]) do
        op(cx, { name = ("broadcast %s from rank %d"):format(p.name, r), kind = "broadcast",
                 stream = S.collective, phase = "optim", inputs = { updated }, frees = {}, bytes = pbytes(p),
                 world = s.n })
      end
    end
    op(cx, { name = "optimizer step done (event dropped)", phase = "optim", frees = { updated } })
  end
end

M.buckets_by_size, M.ddp_buckets = buckets_by_size, ddp_buckets

return M
