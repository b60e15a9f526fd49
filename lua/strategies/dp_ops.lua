-- dp_ops.lua: the pieces the data-parallel strategies share (lua/strategies/dp.lua): tensors and
-- ops declared on the graph, the event a filled bucket carries, a parameter's bytes, and the
-- optimizer step on the host (ZeRO-Offload, FSDP2's CPUOffloadPolicy).
local S = require("vrsim.core").streams  -- Op.stream ids (sim/graph.h StreamId)
local nn = require "vrsim.nn"

local M = {}

local function tensor(cx, name, bytes, dtype, cat, persistent, extra)
  if not extra then
    -- (G:tensorv: name, bytes, numel, dtype, cat, requires_grad, trainable, param, persistent)
    return cx.G:tensorv(name, bytes, bytes // nn.DT_SIZE[dtype], dtype, cat, nil, nil, nil, persistent)
  end
  local spec = { name = name, bytes = bytes, numel = bytes // nn.DT_SIZE[dtype], dtype = dtype,
                 cat = cat, persistent = persistent }
  for k, v in pairs(extra) do spec[k] = v end
  return cx.G:tensor(spec)
end

-- A bucket is written in place on the compute stream and then reduced on the communication
-- stream, which waits for the copy (the CUDA event DDP and DeepSpeed record). The buffer itself
-- was produced once, at build, so the wait is carried by a zero-byte token the copy outputs and
-- the collective reads; zero-byte tensors never reach the allocator.
local function filled_event(cx, what)
  return tensor(cx, what .. " filled (event)", 0, "bf16", "temp", false)
end

local function op(cx, spec)
  spec.kind = spec.kind or "none"
  -- a collective over the data-parallel group is priced where the mesh places that group's ranks
  -- (the replicate all-reduce names its own group's placement)
  if spec.per_node == nil and (spec.world or 1) > 1 and cx.dp then spec.per_node = cx.dp.per_node end
  spec.inputs = spec.inputs or {}
  spec.outputs = spec.outputs or {}
  spec.frees = spec.frees or {}
  cx.G:op(spec)
end

-- A parameter's bytes: a packed 4-bit weight's are its storage's (strategies/quant.lua p.nb)
local function pbytes(p) return p.nb or nn.bytes(p.shape, p.dtype) end

-- The optimizer step on the host (ZeRO-Offload): CPU Adam on this rank's partition, the
-- updated 16-bit partition copied up. The gradients came down during backward.
function M.offload_step(cx, z)
  if cx.dp.kind == "fsdp2" then
    -- CPUOffloadPolicy: torch.optim.AdamW steps the CPU shards (lua/hw/hosts.lua torch_cpu_adamw)
    op(cx, { name = "torch AdamW step on CPU shards", kind = "cpu_adamw_torch", phase = "optim",
             flops = z.part })
  else
    op(cx, { name = "DeepSpeedCPUAdam step (host)", kind = "cpu_adam", phase = "optim", flops = z.part })
  end
  op(cx, { name = "copy updated partition to device", kind = "h2d", stream = S.h2d, phase = "optim",
           bytes = z.part * nn.DT_SIZE[z.dtype] })
end

M.tensor, M.filled_event, M.op = tensor, filled_event, op
M.pbytes = pbytes

return M
