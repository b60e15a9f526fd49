-- zero2.lua: DeepSpeed ZeRO stage 2, the passes lua/strategies/dp.lua runs for it: the fp32 master
-- weights, the Adam state and the gradients partitioned over the ranks, each micro-batch's
-- gradients reduce-scattered into the partition through the ipg buckets, and DeepSpeed's own step
-- on the partition (or on the host, offload_optimizer = "cpu").
local S = require("vrsim.core").streams  -- Op.stream ids (sim/graph.h StreamId)
local nn = require "vrsim.nn"
local ops = require "strategies.dp_ops"
local tensor, filled_event, op = ops.tensor, ops.filled_event, ops.op
local pbytes = ops.pbytes

local M = {}

-- Before each micro-batch's backward: DeepSpeed ZeRO-2 reduces every micro-batch into the gradient
-- partition (its hooks run on every backward; stage_1_and_2.py reduce_partition_and_remove_grads).
function M.before_backward(cx, s, params, trainable, mb, nmb)
  local n, o = s.n, s.opts
  -- DeepSpeed stage 2 (bf16/fp16 with fp32 master partition)
  if mb == 1 then
    local total = 0
    for _, p in ipairs(trainable) do total = total + nn.numel(p.shape) end
    local part = (total + n - 1) // n
    local dt = trainable[1] and trainable[1].dtype or "bf16"
    local esz = nn.DT_SIZE[dt]
    local offload = o.offload_optimizer == "cpu"
    s.partition_numel = part
    -- made at initialize(): the fp32 master partition (on the host under offload)
    if not offload then
      s.master = tensor(cx, "zero2 fp32 master partition", part * 4, "fp32", "optstate", true)
      op(cx, { name = "fp32 master partition", phase = "build", outputs = { s.master } })
    end
    s.host_bytes = offload and part * (4 + 8 + 4) or 0
    -- first backward: with contiguous_gradients the ipg buffers (reduce_bucket_size elements,
    -- a second one with overlap_comm: DeepSpeedZeroOptimizer.backward), and the gradient
    -- partition; each later backward() replaces the ipg list by one of the same sizes, which
    -- the allocator serves from the blocks just freed
    local ipg = {}
    if o.contiguous_gradients then
      local bucket_elems = math.floor(o.reduce_bucket_size)
      for i = 1, o.overlap_comm and 2 or 1 do
        ipg[i] = tensor(cx, "zero2 ipg buffer " .. (i - 1), bucket_elems * esz, dt, "temp", true)
      end
    end
    local gpart = tensor(cx, "zero2 gradient partition", part * esz, dt, "grad", true)
    local outs = {}
    for _, b in ipairs(ipg) do outs[#outs + 1] = b end
    outs[#outs + 1] = gpart
    op(cx, { name = (#ipg > 0 and "ipg buffers + " or "") .. "gradient partition", phase = "bwd", hook = 1,
             layer = cx.last_layer, outputs = outs, once = true })
    s.ipg, s.gpart, s.offload = ipg, gpart, offload
    s.zero2 = { part = part, dtype = dt, master = s.master, gpart = gpart, offload = offload }
  end
  -- per layer, every micro-batch: copy the layer's gradients into the bucket (dropping .grad),
  -- reduce-scatter into the partition. Without contiguous_gradients the bucket's gradients are
  -- flattened into a new tensor for the collective (buffered_reduce_fallback ->
  -- allreduce_bucket: self.flatten(bucket)) and freed after it.
  local by_layer, order = {}, {}
  for _, p in ipairs(trainable) do
    local l = p.layer or -1
    if not by_layer[l] then by_layer[l] = {}; order[#order + 1] = l end
    table.insert(by_layer[l], p)
  end
  for _, l in ipairs(order) do
    local ps = by_layer[l]
    local gids, bytes = {}, 0
    for _, p in ipairs(ps) do gids[#gids + 1] = p.id; bytes = bytes + pbytes(p) end
    local buf = s.ipg[1]
    local flat, filled = nil, nil
    if buf then filled = filled_event(cx, ("ipg bucket, layer %d"):format(l))
    else flat = tensor(cx, ("flattened gradients of layer %d"):format(l), bytes, s.zero2.dtype, "temp", false) end
    op(cx, { name = ("copy grads of layer %d into the ipg bucket"):format(l), kind = "elementwise",
             phase = "bwd", hook = 2, layer = l, grads_of = gids, free_grads = true,
             drop_persistent = true, inputs = { buf }, outputs = { flat or filled }, bytes = 2 * bytes })
    op(cx, { name = ("reduce_scatter layer %d gradients"):format(l), kind = "reduce_scatter",
             stream = S.collective, phase = "bwd", hook = 2, layer = l, inputs = { buf or flat, buf and filled or nil },
             frees = flat and { flat } or nil, bytes = bytes, world = n })
    if s.offload then
      op(cx, { name = ("copy gradient partition of layer %d to host"):format(l), kind = "d2h",
               stream = S.d2h, phase = "bwd", hook = 2, layer = l, inputs = { s.gpart },
               bytes = bytes // n })
    end
  end
end

-- After backward: DeepSpeed's own partitioned step, not torch's optimizer over parameters.
function M.after_backward(cx, cfg, s, trainable)
  return { zero2 = s.zero2 }
end

-- The optimizer step of DeepSpeed ZeRO-2 on this rank's partition.
function M.zero2_step(cx, z)
  local G = cx.G
  local part = z.part
  do
    local g32 = G:tensor { name = "fp32 gradient partition", bytes = part * 4, numel = part,
                           dtype = "fp32", cat = "temp" }
    op(cx, { name = "gradient partition .float()", kind = "elementwise", phase = "optim",
             inputs = { z.gpart }, outputs = { g32 }, bytes = part * 6, frees = {} })
    local m = G:tensor { name = "exp_avg (partition)", bytes = part * 4, numel = part, dtype = "fp32",
                         cat = "optstate", persistent = true }
    local v = G:tensor { name = "exp_avg_sq (partition)", bytes = part * 4, numel = part, dtype = "fp32",
                         cat = "optstate", persistent = true }
    op(cx, { name = "Adam state (partition)", phase = "optim", outputs = { m, v }, once = true })
    op(cx, { name = "FusedAdam step (partition)", kind = "elementwise", phase = "optim",
             inputs = { g32, z.master, m, v }, frees = { g32 }, bytes = part * 4 * 7 })
    op(cx, { name = "fp32 master -> bf16 partition", kind = "elementwise", phase = "optim",
             inputs = { z.master }, bytes = part * 6 })
  end
  M.zero2_step_gather(cx, z)
end

-- Every rank gathers the updated 16-bit parameters from the partitions' owners.
function M.zero2_step_gather(cx, z)
  op(cx, { name = "all_gather updated parameters", kind = "allgather", stream = S.collective, phase = "optim",
           bytes = z.part * nn.DT_SIZE[z.dtype] * cx.dp.n, world = cx.dp.n })
end

return M
