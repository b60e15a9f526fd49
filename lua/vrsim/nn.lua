-- nn.lua: the op library: building blocks for forward graphs, one aten-level op each, with what
-- the kernel really allocates and saves for backward (so the core can derive backward and free
-- saved tensors at the right moment), its dtype, FLOPs and bytes. Every model family calls the
-- same functions; this file holds the core (tensors, views, casts, the generic op, products),
-- lua/vrsim/ops/*.lua the rest by kind, installed into this table at the end.
--
-- A tensor here is a table { id = <graph id>, shape = {...}, dtype = "bf16", rg = <requires grad> }.
-- Every constructor takes a context `cx` made by nn.context(G, opts):
--   cx.G        the Graph userdata
--   cx.phase    "fwd" (default) or "build"/"optim"
--   cx.layer    current layer index for reports
--   cx.no_grad  ops record no autograd history
--   cx.held     tensors the framework holds until the end of forward (model outputs)
local nn = {}

local DT_SIZE = { fp32 = 4, fp16 = 2, bf16 = 2, fp8 = 1, int8 = 1, uint8 = 1, int32 = 4, int64 = 8,
                  bool = 1, nf4 = 1 }
nn.DT_SIZE = DT_SIZE

-- (shapes are sequences: a numeric for visits what ipairs would, in the same order, without
-- the iterator's calls; the build calls these for every tensor and op)
local function numel(shape)
  local k = #shape
  -- the usual ranks spelled out: the same products in the same order as the loop's
  if k == 2 then return 1 * shape[1] * shape[2] end
  if k == 3 then return 1 * shape[1] * shape[2] * shape[3] end
  if k == 1 then return 1 * shape[1] end
  local n = 1
  for i = 1, k do n = n * shape[i] end
  return n
end
nn.numel = numel

function nn.bytes(shape, dtype)
  local s = DT_SIZE[dtype] or error("unknown dtype " .. tostring(dtype), 2)
  return numel(shape) * s
end

function nn.context(G, opts)
  local cx = { G = G, phase = "fwd", layer = -1, no_grad = false, held = {}, params = {},
               autocast = opts and opts.autocast or nil, cast_cache = {} }
  return cx
end

-- A new activation tensor (not yet produced by any op).
local function new_tensor(cx, name, shape, dtype, rg, cat)
  local n = numel(shape)
  -- G:tensorv takes the fields of G:tensor{...} as arguments: name, bytes, numel, dtype, cat,
  -- requires_grad, trainable, param, persistent, module, base (sim/bind/graph_ud.c TENSOR_FIELDS)
  local nb = n * (DT_SIZE[dtype] or nn.bytes(shape, dtype))
  local id = cx.G:tensorv(name, nb, n, dtype, cat or "activation", rg)
  -- nb: its bytes (nn.bytes of its shape and dtype), kept so that nn.op need not recompute
  -- them; set only where a tensor's shape and dtype never change after it is made (here,
  -- nn.view, strategies/fsdp.lua's gathered copies), never on a parameter (a model's cast
  -- changes their dtype)
  return { id = id, shape = shape, dtype = dtype, rg = rg, name = name, nb = nb }
end
nn.new_tensor = new_tensor

-- A view of t with another shape: shares t's storage, allocates nothing.
function nn.view(cx, t, shape, name)
  local n = numel(shape)
  local id = cx.G:tensorv(name or (t.name .. ".view"), 0, n, t.dtype, nil, t.rg, nil,
                          nil, nil, nil, t.id)
  local s = DT_SIZE[t.dtype]
  return { id = id, shape = shape, dtype = t.dtype, rg = t.rg, name = name or t.name, base = t,
           nb = s and n * s }
end

-- A view op whose backward allocates a full-size gradient buffer: slicing (SliceBackward
-- writes into zeros of the base's shape) or view+transpose (ViewBackward copies a
-- non-contiguous gradient). Forward allocates nothing.
function nn.view_op(cx, name, x, shape, grad_bytes, bwd_kind)
  local v = nn.view(cx, x, shape, name)
  local gb = grad_bytes or nn.bytes(x.shape, x.dtype)
  nn.op(cx, { name = name, kind = "none", inputs = { x }, out_tensors = { v },
              grads = { { bytes = gb, dtype = x.dtype } }, bwd_kind = bwd_kind or "transpose",
              bytes = 0, bwd_bytes = 2 * gb })
  return v
end

-- A parameter (allocated when the model is built). Under a sharding strategy (cx.shard_param)
-- the rank holds only a shard; the model's ops then use a gathered copy (strategies/fsdp.lua).
function nn.param(cx, name, shape, dtype, trainable, module)
  local p = { shape = shape, dtype = dtype, rg = trainable, name = name, param = true,
              trainable = trainable, layer = cx.layer }
  -- the whole parameter is made first, as the model's constructor does; a sharding strategy
  -- replaces it by its shard once the model is built (strategies/fsdp.lua)
  if cx.shard_param and cx.shard_param(cx, p) then p.sharded = true end
  -- a parameter partitioned at construction (DeepSpeed zero.Init, meta-device init) is never
  -- materialized whole: its whole tensor has no bytes
  local whole = not (p.sharded and cx.dp and cx.dp.init_partitioned)
  -- device_map: a module placed on another device (or the CPU) has no bytes on this GPU
  if cx.dm and cx.module ~= nil and not cx.dm.resident(cx.module) then whole = false end
  -- (G:tensorv: name, bytes, numel, dtype, cat, requires_grad, trainable, param, persistent, module)
  p.id = cx.G:tensorv(name, whole and nn.bytes(shape, dtype) or 0, nn.numel(shape), dtype, "param",
                      trainable, trainable, true, true, module)
  cx.params[#cx.params + 1] = p
  return p
end

-- The op fields (vrsim.core.op_fields: G:op's keys) a spec gives as they are: all but those
-- nn.op works out itself (below), which a spec's own value would contradict. Made at the first op.
local OWN = { name = true, kind = true, phase = true, inputs = true, outputs = true, saves = true,
              grads = true, flops = true, bytes = true, dtype = true, dispatch_us = true,
              bwd_dispatch_us = true, dispatch_ckpt_us = true, bwd_dispatch_ckpt_us = true,
              layer = true, no_grad = true, region = true }
local PASSED
local function passed_fields()
  PASSED = {}
  for _, k in ipairs(require("vrsim.core").op_fields) do
    if not OWN[k] then PASSED[k] = true end
  end
  return PASSED
end

-- Generic op. spec fields:
--   name, kind, inputs (tensors), outs ({ {name, shape, dtype} ...}) or out_tensors (made already),
--   saves (tensors), grads (per input: "new" | "none" | {pass = k} | {bytes=, dtype=, view=}),
--   grad_order (input indices), workspace, bwd_workspace (bytes), bwd_rowsum ({ m, c }: its
--     backward sums an m x c tensor over its rows, nn.row_sum_buffers), flops, bytes, dtype,
--   host: the op's host-cost class (a key of the profile's host_class_us: "linear", "conv",
--     "cast", ...), whose measured dispatch, forward and backward node, the op then costs
--     instead of the one per-op figure; "inside" for an op whose host work is part of another
--     op's class figure (a Linear's bias reduction, a convolution's weight side),
--   host_views: with host, how many view ops (view, transpose, unsqueeze, ...) the op's call
--     runs beside it that the model keeps as views (nn.view): each adds the "view" class,
--   and any other field of G:op{...} (sim/op_fields.h: kernels, bwd_kind, once, stream, world, ...)
-- Returns the output tensors (unpacked).
local INSIDE = { fwd = 0, bwd = 0 }  -- host class "inside": costed by the op it is part of

function nn.op(cx, spec)
  local inputs = spec.inputs
  -- the order parameters are first used in forward: their gradients are complete in the
  -- reverse of it (DDP rebuilds its buckets in that order); and whether the op records
  -- autograd history (an input that requires grad and whose gradient is not "none")
  local fwd, grads, rg = cx.phase == "fwd", spec.grads, false
  if fwd or not cx.no_grad then
    local any = not cx.no_grad
    for i, x in ipairs(inputs) do
      if fwd and x.param and not x.first_use then
        cx.use_seq = (cx.use_seq or 0) + 1
        x.first_use = cx.use_seq
      end
      if any and x.rg and not (grads and grads[i] == "none") then rg = true end
    end
  end
  local outs = spec.out_tensors or {}
  if not spec.out_tensors then
    for i, o in ipairs(spec.outs or {}) do
      outs[i] = new_tensor(cx, o[1], o[2], o[3], rg and not o.no_grad)
    end
  end
  if rg and spec.save_outs then
    spec.saves = spec.saves or {}
    for _, k in ipairs(spec.save_outs) do spec.saves[#spec.saves + 1] = outs[k] end
  end
  local bytes = spec.bytes
  if not bytes then
    bytes = 0
    for _, x in ipairs(inputs) do bytes = bytes + (x.nb or nn.bytes(x.shape, x.dtype)) end
    for _, o in ipairs(outs) do bytes = bytes + (o.nb or nn.bytes(o.shape, o.dtype)) end
  end
  -- cx.host_inside: the op is made inside a call whose whole host time one class figure holds
  -- (a Float8Linear's casts: strategies/float8.lua), unless it names its own class
  local host = spec.host or (cx.host_inside and "inside")
  local c = host and cx.host_classes
  if c then
    c = host == "inside" and INSIDE or cx.host_classes[host]
    if not c then error(("op '%s': host class '%s' is not in the profile's host_class_us"):format(spec.name, host), 0) end
    -- the view ops its call runs that vrsim keeps as views of a tensor (nn.view makes no op):
    -- each costs the host a view op and the backward its node (host class "view")
    local nv = spec.host_views
    if nv and nv > 0 and c ~= INSIDE then
      local v = cx.host_classes.view
      if not v then error(("op '%s': host_views without the profile's host class 'view'"):format(spec.name), 0) end
      c = { fwd = c.fwd + nv * v.fwd, bwd = c.bwd + nv * v.bwd, ckpt_fwd = c.ckpt_fwd, ckpt_bwd = c.ckpt_bwd }
    end
  end
  -- the op as G:op{...} takes it (its fields are sim/op_fields.h's): the tensor lists go as they
  -- are (G:op reads each tensor's id), and so do spec.grads when the op records autograd history
  -- (G:op resolves them per input: nil, false or "new" a new gradient in the input's dtype, a
  -- table {pass=, saved=, bytes=, dtype=, view=} with the input's dtype by default, "none" none;
  -- true: every input "new"); any other op field the spec gives goes as it is (passed_fields).
  -- cx.last_op: its index, for ops that set more on it (G:op_layout)
  local op = { name = spec.name, kind = spec.kind or "elementwise", phase = spec.phase or cx.phase,
    inputs = inputs, outputs = outs, saves = rg and spec.saves or nil,
    grads = rg and (spec.grads or true) or nil, flops = spec.flops or 0, bytes = bytes,
    dtype = spec.dtype or (outs[1] and outs[1].dtype) or "fp32",
    dispatch_us = c and c.fwd, bwd_dispatch_us = c and c.bwd, dispatch_ckpt_us = c and c.ckpt_fwd,
    bwd_dispatch_ckpt_us = c and c.ckpt_bwd, layer = cx.layer, no_grad = cx.no_grad, region = cx.region }
  local passed = PASSED or passed_fields()
  for k, v in next, spec do
    if passed[k] then op[k] = v end
  end
  cx.last_op = cx.G:op(op)
  -- op-level selective checkpointing's policy sees each op of its region (strategies/sac.lua),
  -- and torch.compile's partitioner each op of its compiled layer (strategies/compile.lua)
  if cx.sac and cx.region then cx.sac(cx, spec, cx.last_op, outs, rg) end
  -- activation offloading's pack hook sees what autograd saves outside checkpointed regions
  -- (strategies/offload_act.lua)
  local off = cx.offload
  if off and off.active and rg and spec.saves and not cx.region then
    require("strategies.offload_act").saved(cx, spec.saves, cx.last_op)
  end
  return table.unpack(outs)
end

-- Elementwise op producing one tensor shaped like `like` (or `shape`) in `dtype`.
function nn.ew(cx, name, inputs, dtype, saves, grads, shape)
  local s = shape or inputs[1].shape
  return nn.op(cx, { name = name, inputs = inputs, outs = { { name, s, dtype } }, saves = saves,
                     grads = grads, flops = nn.numel(s), dtype = dtype })
end

-- a * b: MulBackward keeps b for a's gradient and a for b's, only where that one is needed.
function nn.mul(cx, name, a, b, dtype, extra)
  -- MulBackward0 saves `other` before `self` (their order of use in derivatives.yaml) and
  -- releases them in that order
  local saves = {}
  if a.rg then saves[#saves + 1] = b end
  if b.rg then saves[#saves + 1] = a end
  local big, small = a, b
  if nn.numel(b.shape) > nn.numel(a.shape) then big, small = b, a end
  local shape = big.shape
  -- the memory-access class that decides its speed (lua/hw/calibrated/*_torch_ops.lua)
  local kind = "elementwise"
  if nn.numel(small.shape) ~= nn.numel(big.shape) then
    kind = nn.numel(small.shape) == big.shape[#big.shape] and "broadcast" or "broadcast_rows"
  end
  -- its gradients are made `other`'s first (MulBackward0::apply in PyTorch's generated
  -- torch/csrc/autograd/generated/Functions.cpp computes other_ix before self_ix;
  -- optrace_pub-c04: the MLP's up_proj gradient is the first of the pair)
  local spec = { name = name, kind = kind, inputs = { a, b }, outs = { { name, shape, dtype } },
                 saves = saves, flops = nn.numel(shape), dtype = dtype, grad_order = { 2, 1 },
                 bwd_kernels = a.rg and b.rg and nn.launches(cx, "mul_bwd_both") or nil }
  for k, v in pairs(extra or {}) do spec[k] = v end
  return nn.op(cx, spec)
end

-- GPUs before Ampere (compute capability below 8.0): neither flash nor cuDNN attention runs on
-- them (sdp_utils.cpp: check_flash_attention_hardware_support takes sm80 to sm121,
-- check_cudnn_hardware_support sm80 and above); the memory-efficient kernel does (sm50 and above).
local PRE_AMPERE = { volta = true, turing = true, pascal = true }

-- Which fused kernel F.scaled_dot_product_attention picks (PyTorch 2.11): memory-efficient
-- attention for fp32 (flash and cuDNN take 16-bit only) and before Ampere, cuDNN attention on
-- Hopper (the H200 traces show _cudnn_attention_forward), flash attention elsewhere. forced
-- ("flash", "cudnn", "mem_efficient": training.attention) overrides the choice, where the GPU
-- can run it (PyTorch raises "No available kernel" otherwise).
-- dims, where the queries' and keys' head dim differs from the values' (multi-head latent
-- attention: { qk = 192, v = 128 }): sdp_utils.cpp check_head_dim_size_flash wants one head dim
-- for q, k and v, so flash never runs; check_cudnn_tensor_shapes takes each up to 256 on sm90
-- (cuDNN 9.10 and above) and 192 / 128 exactly on sm100 and sm103 (cuDNN 9.11 and above), 128
-- elsewhere; check_head_dim_size_mem_efficient wants q's equal to k's, each a multiple of 8 in
-- 16 bits (4 in fp32). So the Hopper class runs cuDNN (its cuDNN order tries it first), every
-- other GPU the memory-efficient kernel (flash, first in its order, is refused).
function nn.sdpa_backend(arch, dtype, forced, dims)
  local pre_ampere = PRE_AMPERE[arch] or arch == "pre-ampere"
  if (forced == "flash" or forced == "cudnn") and pre_ampere then
    error(("training.attention = \"%s\": %s attention needs a GPU of compute capability 8.0 or above "
           .. "(Ampere), and this one is older (use \"sdpa\" or \"mem_efficient\")"):format(forced, forced), 0)
  end
  if dims and dims.qk ~= dims.v then
    local align = dtype == "fp32" and 4 or 8
    if dims.qk % align ~= 0 or dims.v % align ~= 0 then
      error(("SDPA with a query/key head dim of %d and a value head dim of %d: no fused kernel takes head dims "
             .. "that are not multiples of %d (PyTorch runs its math fallback, which is not modelled)")
            :format(dims.qk, dims.v, align), 0)
    end
    local cudnn_ok = dtype ~= "fp32" and not pre_ampere
      and ((dims.qk <= 128 and dims.v <= 128) or (arch == "hopper" and dims.qk == 192 and dims.v == 128))
    if forced == "flash" then
      error(("training.attention = \"flash\": flash attention needs one head dim for q, k and v, and this "
             .. "attention's queries and keys have %d, its values %d (use \"sdpa\")"):format(dims.qk, dims.v), 0)
    end
    if forced == "cudnn" and not cudnn_ok then
      error(("training.attention = \"cudnn\": cuDNN attention with a query/key head dim of %d and a value "
             .. "head dim of %d: sdp_utils.cpp check_cudnn_tensor_shapes takes head dims above 128 on sm90 "
             .. "(up to 256) and sm100 (192 / 128 only) alone, and no other modelled case (use \"sdpa\")")
            :format(dims.qk, dims.v), 0)
    end
    if forced == "cudnn" or forced == "mem_efficient" then return forced end
    if arch == "hopper" and dtype ~= "fp32" and not cudnn_ok then
      error(("SDPA with a query/key head dim of %d and a value head dim of %d on the Hopper class: cuDNN "
             .. "takes them on sm90 but not on sm100, which vrsim does not tell apart; not modelled")
            :format(dims.qk, dims.v), 0)
    end
    return arch == "hopper" and cudnn_ok and "cudnn" or "mem_efficient"
  end
  if forced == "flash" or forced == "cudnn" or forced == "mem_efficient" then return forced end
  if dtype == "fp32" or pre_ampere then return "mem_efficient" end
  if arch == "hopper" then return "cudnn" end
  return "flash"
end

-- The GPU architecture as the op library tells architectures apart (cx.arch): "hopper", whose
-- fused attention is cuDNN's, "pre-ampere" (the memory-efficient kernel), or "other". A
-- graph is the same on two GPUs of one class (as far as the architecture goes; lua/vrsim/reuse.lua
-- graph_key), so an op that needs to tell more apart adds its class here. cc, the compute
-- capability: SDPA puts cuDNN attention first on sm90 and on data-center Blackwell, sm100 and
-- sm103 (sdp_utils.cpp check_prefer_cudnn_attention: major 9 or 10, minor 0 or 3, with the cuDNN
-- above 9.15 that PyTorch's CUDA 13 wheels ship), so the B200 is of the "hopper" class; GeForce
-- Blackwell (sm120) is not.
function nn.arch_class(arch, cc)
  if arch == "hopper" or (arch == "blackwell" and (cc == 10.0 or cc == 10.3)) then return "hopper" end
  return PRE_AMPERE[arch] and "pre-ampere" or "other"
end

-- A cast of x to dtype: a new tensor (out_name, default name) that one kernel writes; its
-- backward (ToCopyBackward0) casts the gradient back, the same bytes the other way. keep: the
-- caller still holds x, so the cast does not drop it.
function nn.cast(cx, x, dtype, name, out_name, keep)
  local up = DT_SIZE[dtype] > DT_SIZE[x.dtype]
  local moved = nn.bytes(x.shape, x.dtype) + nn.bytes(x.shape, dtype)
  return nn.op(cx, { name = name, kind = up and "cast_up" or "cast_down",
                     bwd_kind = up and "cast_down" or "cast_up", inputs = { x },
                     outs = { { out_name or name, x.shape, dtype } },
                     grads = { { dtype = x.dtype } }, frees = keep and {} or nil,
                     bytes = moved, bwd_bytes = moved, host = "cast" })
end

-- x.to(dtype): no-op (same tensor) when the dtype matches.
function nn.to(cx, x, dtype, name)
  if x.dtype == dtype then return x end
  return nn.cast(cx, x, dtype, name or "to_" .. dtype, name or (x.name .. "." .. dtype))
end

-- The staging buffer and semaphores of a CUDA sum over the rows of a contiguous (m, c) tensor
-- (a bias or norm-weight gradient): ATen's setReduceConfig (Reduce.cuh) splits a long reduction
-- across thread blocks ("global reduce") and allocates acc_size * c * ctas * block.x *
-- output_vec_size bytes plus an int per output block through the caching allocator; nil when it
-- does not split. How many blocks it takes follows the GPU's SM count, so an op declares the sum
-- as bwd_rowsum = { m, c } and the engine works the buffers out for the GPU it simulates
-- (sim/device.c device_row_sum_buffers, the one rule): the graph is then the same on every GPU.
-- This gives them for cx.gpu (the catalog entry), for the op library's tests.
function nn.row_sum_buffers(cx, m, c)
  local g = cx.gpu or {}
  return require("vrsim.core").row_sum_buffers(m, c, g.sm_count, g.compute_capability)
end

-- The accumulation buffer of a CUDA reduction too large for 32-bit indexing (Reduce.cuh
-- gpu_reduce_kernel): over 2^31 - 1 input elements the iterator is split into parts, and where
-- the output cannot hold the accumulator (a bf16 or fp16 sum, whose accumulator is fp32; a max
-- with its index, whose accumulator is the (value, index) pair) the parts accumulate in a buffer
-- of one accumulator per output element, allocated after the outputs and freed as the kernel
-- returns. in_shape: the input's; out_shape: the (contiguous) output's; acc_bytes: the
-- accumulator's size (4 for fp32, 16 for a pair with its int64 index). Returns { bytes } for an
-- op's workspace, or nil.
function nn.split_reduce_buffer(in_shape, out_shape, acc_bytes, cannot_accumulate)
  if not cannot_accumulate or nn.numel(in_shape) <= 2147483647 then return nil end
  return { nn.numel(out_shape) * acc_bytes }
end

-- Drops one reference of each tensor in `list` at this point: models a Python variable that
-- keeps a tensor alive after its last use, until it is reassigned or its function returns
-- (pair it with one more use than the ops make, i.e. call it only for tensors still referenced).
function nn.release(cx, list, name)
  local ids = {}
  for _, t in ipairs(list) do if t then ids[#ids + 1] = t.id end end
  if #ids == 0 then return end
  cx.G:op { name = name or "release", kind = "none", phase = cx.phase, inputs = {}, outputs = {},
            frees = ids, layer = cx.layer, region = cx.region }
end

-- The arguments of the checkpointed function whose region (cx.region) starts here: the
-- checkpoint's frame holds them until the region's backward is done. full: the region's
-- recomputation runs its whole function, not stopping at its last saved tensor (a checkpoint
-- that re-runs the function and then backward through it, as Megatron's CheckpointFunction does).
function nn.checkpoint_args(cx, list, full)
  local ids = {}
  for _, t in pairs(list) do if t then ids[#ids + 1] = t.id end end
  if #ids == 0 or not cx.region then return end
  cx.G:op { name = "checkpoint args", kind = "none", phase = cx.phase, inputs = ids, outputs = {},
            frees = {}, layer = cx.layer, region = cx.region, ckpt_args = true, full_recompute = full or nil }
end

-- Hold t until the end of forward (a model output the caller keeps until it drops the
-- output object). Adds one reference released by nn.end_forward.
function nn.hold(cx, t)
  cx.held[#cx.held + 1] = t
end

-- Ends the forward pass: drops the outputs held by the caller and the autocast weight cache.
function nn.end_forward(cx)
  cx.region = nil
  local frees = {}
  for _, t in ipairs(cx.held) do frees[#frees + 1] = t end
  for _, t in pairs(cx.cast_cache) do frees[#frees + 1] = t end
  if #frees == 0 then return end
  local ids = {}
  for i, t in ipairs(frees) do ids[i] = t.id end
  cx.region = nil
  cx.cast_cache = {}
  cx.G:op { name = "end of forward", kind = "none", phase = "fwd", inputs = {}, outputs = {},
            frees = ids }
  cx.held = {}
end

-- The rest of the op library, by kind (lua/vrsim/ops/): autocast's rule per op, elementwise and
-- layout ops, F.linear, convolution, group and layer norm, scaled dot-product attention, losses.
for _, kind in ipairs { "autocast", "pointwise", "linear", "conv", "norm", "attention", "loss" } do
  require("vrsim.ops." .. kind)(nn)
end

return nn
