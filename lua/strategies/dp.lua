-- dp.lua: data parallelism as the frameworks run it, for the rank the simulator plays (rank 0;
-- the ranks of a symmetric plan do the same work). Collectives are ops on the communication
-- stream (stream 1) that overlap compute and hold their buffers while they run.
--
--   ddp    torch DistributedDataParallel: gradient buckets (first 1 MiB, then bucket_cap_mb 25)
--          allocated at construction in reverse parameter order; each gradient is copied into
--          its bucket when ready and a bucket is all-reduced once complete; .grad stays.
--   zero1  DDP + torch ZeroRedundancyOptimizer: optimizer state only for the parameters this
--          rank owns (greedy by size, largest first); updated parameters are broadcast.
--   zero2  DeepSpeed ZeRO stage 2: fp32 master weights and Adam state partitioned (1/N), the
--          gradients copied into reduce_bucket_size buffers (two with overlap_comm) and
--          reduce-scattered; this rank keeps its partition of the gradients only.
--   zero3  DeepSpeed ZeRO stage 3: parameters partitioned too; each layer's parameters are
--          all-gathered before its forward and again before its backward, released after;
--          parameters under stage3_param_persistence_threshold stay whole.
--   fsdp2  torch FSDP2 fully_shard per decoder layer: the same shape as zero3 with
--          reshard_after_forward (raf) deciding whether backward gathers again.
-- Offload (zero2/zero3 offload_optimizer = "cpu"): master weights and Adam state in pinned host
-- memory, the update on the CPU (lua/hw/hosts.lua cpu_adam), gradients down and parameters up
-- over PCIe on the copy streams.
local S = require("vrsim.core").streams  -- Op.stream ids (sim/graph.h StreamId)
local nn = require "vrsim.nn"

local M = {}

M.DEFAULTS = {
  bucket_cap_mb = 25, first_bucket_mb = 1,
  -- DeepSpeed's defaults (deepspeed/runtime/zero/config.py DeepSpeedZeroConfig): overlap_comm
  -- "auto" is its dynamic default, stage == 3 (validator overlap_comm_valid)
  reduce_bucket_size = 5e8, allgather_bucket_size = 5e8, overlap_comm = "auto",
  contiguous_gradients = true, stage3_param_persistence_threshold = 1e5,
  stage3_prefetch_bucket_size = 5e7, stage3_max_live_parameters = 1e9,
  offload_optimizer = "none", offload_param = "none", raf = true,
  -- auto: zero3 partitions at construction (zero.Init); fsdp2 builds on the meta device and
  -- loads each rank's shards (accelerate's fsdp_cpu_ram_efficient_loading, torchtitan's meta
  -- init), so the whole model is never on a GPU; "whole" builds it on every GPU first
  init = "auto",
  -- FSDP2 hybrid sharding: fully_shard(mesh=init_device_mesh("cuda", (replicate, shard_group)))
  -- shards over shard_group consecutive ranks and all-reduces gradient shards over the replicate
  -- group (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce:
  -- all_reduce(reduce_output, group=all_reduce_group)); 0 = shard over every rank
  shard_group = 0,
  -- FSDP2 MixedPrecisionPolicy.reduce_dtype: "auto" reduces in the gradients' dtype (fp32
  -- under mp_fp32), "fp32" or "bf16" force it
  reduce_dtype = "auto",
  -- FSDP2 gradient accumulation: false = model.set_requires_gradient_sync(False) before every
  -- micro-batch but the last (unsharded gradients accumulate; one reduce-scatter at the end);
  -- true (the default, as FSDP2 runs without the call) = reduce-scatter every micro-batch
  sync_every_micro_batch = true,
}

-- What each knob takes: "count" a finite number >= 0 (elements or MiB), "bool", or a list of
-- strings. Checked in setup whichever way the knob came (scenario, --set, DeepSpeed JSON).
local KNOB_TYPES = {
  bucket_cap_mb = "count", first_bucket_mb = "count", reduce_bucket_size = "count",
  allgather_bucket_size = "count", stage3_param_persistence_threshold = "count",
  stage3_prefetch_bucket_size = "count", stage3_max_live_parameters = "count",
  overlap_comm = "bool", contiguous_gradients = "bool", raf = "bool", sync_every_micro_batch = "bool",
  offload_optimizer = { "none", "cpu", "nvme" }, offload_param = { "none", "cpu", "nvme" },
  init = { "auto", "whole", "partitioned", "meta" },
  shard_group = "count", reduce_dtype = { "auto", "fp32", "bf16" },
}
-- Knobs that only some strategies read; any other strategy given one is an error, not ignored.
local KNOB_STRATEGIES = {
  bucket_cap_mb = { ddp = 1, zero1 = 1 }, first_bucket_mb = { ddp = 1, zero1 = 1 },
  raf = { fsdp2 = 1, zero3 = 1 }, sync_every_micro_batch = { fsdp2 = 1 },
  stage3_param_persistence_threshold = { zero3 = 1 }, stage3_prefetch_bucket_size = { zero3 = 1 },
  stage3_max_live_parameters = { zero3 = 1 }, offload_param = { zero3 = 1, fsdp2 = 1 },
  offload_optimizer = { zero2 = 1, zero3 = 1, fsdp2 = 1 }, init = { zero3 = 1, fsdp2 = 1 },
  reduce_bucket_size = { zero2 = 1, zero3 = 1 }, allgather_bucket_size = { zero2 = 1, zero3 = 1 },
  overlap_comm = { zero2 = 1, zero3 = 1 }, contiguous_gradients = { zero2 = 1, zero3 = 1 },
}
M.KNOB_STRATEGIES = KNOB_STRATEGIES
M.KNOB_TYPES = KNOB_TYPES

-- Checks and completes the knobs: "auto" values resolved as the HF Trainer resolves them
-- (strategies/deepspeed.lua), every value of its type, a knob the strategy does not read an
-- warning. Returns the knob table and a list of warnings.
function M.check_knobs(cfg, given)
  local kind = cfg.training.strategy
  local o = {}
  for k, v in pairs(M.DEFAULTS) do o[k] = v end
  local auto = require("strategies.deepspeed").auto_values(cfg)
  local notes = {}
  local names = {}
  for k in pairs(given or {}) do names[#names + 1] = k end
  table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(names) do
    local v = given[k]
    if v == "auto" and k ~= "init" and k ~= "overlap_comm" then
      if auto[k] == nil then
        error(("training.zero.%s = \"auto\": only reduce_bucket_size, stage3_prefetch_bucket_size and "
               .. "stage3_param_persistence_threshold have an automatic value (the HF Trainer's)"):format(k), 0)
      end
      v = auto[k]
    end
    local only = KNOB_STRATEGIES[k]
    if only and not only[kind] then
      local names = {}
      for n in pairs(only) do names[#names + 1] = n end
      table.sort(names)
      notes[#notes + 1] = ("training.zero.%s has no effect under strategy %s (read by %s)"):format(k,
        kind, table.concat(names, ", "))
    end
    o[k] = v
  end
  if o.overlap_comm == "auto" then o.overlap_comm = kind == "zero3" end
  for k, ty in pairs(KNOB_TYPES) do
    local v = o[k]
    if ty == "count" then
      if math.type(v) == nil or v ~= v or v < 0 or v == math.huge or v >= 2^53 then
        error(("training.zero.%s must be a number >= 0 (elements%s), not %s"):format(k,
              k:match("_mb$") and ", here MiB" or "", tostring(v)), 0)
      end
    elseif ty == "bool" then
      if type(v) ~= "boolean" then error(("training.zero.%s must be true or false, not %s"):format(k, tostring(v)), 0) end
    else
      local okv = false
      for _, c in ipairs(ty) do if v == c then okv = true end end
      if not okv then
        local s = require("vrsim.plan").closest(tostring(v), ty)
        error(("training.zero.%s: unknown value '%s' (one of: %s)%s"):format(k, tostring(v),
              table.concat(ty, ", "), s and ("; did you mean '" .. s .. "'?") or ""), 0)
      end
      if v == "nvme" then
        error(("training.zero.%s = \"nvme\" (ZeRO-Infinity's NVMe offload) is not modelled: vrsim "
               .. "models CPU offload (\"cpu\") only"):format(k), 0)
      end
    end
  end
  return o, notes
end

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

-- Called by the planner before the model is built: installs the hooks the model calls.
function M.setup(cx, cfg)
  local t = cfg.training
  -- (plan.lua has rejected keys that are not in M.DEFAULTS, with the scenario's line)
  local o, notes = M.check_knobs(cfg, t.zero)
  cfg.notes = cfg.notes or {}
  for _, n in ipairs(notes) do cfg.notes[#cfg.notes + 1] = n end
  -- over the mesh's data-parallel ranks (hardware.count but for tensor parallelism's groups:
  -- each rank's FSDP shard is of its tensor-parallel parameters, lua/vrsim/mesh.lua)
  local s = { kind = t.strategy, n = cx.mesh and cx.mesh.given and cx.mesh.dp or cfg.hardware.count, opts = o,
              gathered = {} }
  -- FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32 shards
  if t.precision == "mp_fp32" then
    if t.strategy ~= "fsdp2" then error("precision mp_fp32 is FSDP2's mixed precision: use strategy fsdp2", 0) end
    s.param_dtype, s.reduce_dtype = "bf16", "fp32"
  end
  if o.reduce_dtype ~= "auto" then
    if t.strategy ~= "fsdp2" then error("training.zero.reduce_dtype is FSDP2's MixedPrecisionPolicy: use strategy fsdp2", 0) end
    if o.reduce_dtype ~= "fp32" and o.reduce_dtype ~= "bf16" then
      error("training.zero.reduce_dtype must be auto, fp32 or bf16", 0)
    end
    s.reduce_dtype = o.reduce_dtype
  end
  local shard = math.tointeger(o.shard_group)
  if not shard or shard < 0 then error("training.zero.shard_group must be a whole number >= 0", 0) end
  if shard > 0 and shard < s.n then
    if t.strategy ~= "fsdp2" then error("training.zero.shard_group (HSDP) is modelled for FSDP2 only", 0) end
    if s.n % shard ~= 0 then
      error(("training.zero.shard_group %d does not divide hardware.count %d"):format(shard, s.n), 0)
    end
    s.replicate, s.n = s.n // shard, shard
  end
  -- where the groups' ranks sit (lua/vrsim/mesh.lua M.placement): how many of them one node
  -- holds, which decides the link their collectives take. The data-parallel group is FSDP's
  -- dp_shard * cp (FSDP2, ZeRO) or, without sharding, dp_replicate (DDP); HSDP's all-reduce runs
  -- over dp_replicate.
  if cx.mesh then
    local mesh, d = require "vrsim.mesh", cx.mesh.degrees
    local function per_node(dims)
      return mesh.placement(cx.mesh, dims, cfg.hardware.rank or 0, cfg.hardware.gpus_per_node).ranks_per_node
    end
    s.per_node = per_node(d.dp_shard * d.cp > 1 and { "dp_shard", "cp" } or { "dp_replicate" })
    s.replicate_per_node = per_node { "dp_replicate" }
  end
  -- ZeRO-2's step (DeepSpeed's FusedAdam over its fp32 partition) and a CPU-offloaded one
  -- (DeepSpeedCPUAdam, or torch AdamW on FSDP2's CPU shards) are modelled for Adam only: two
  -- fp32 states per element, Adam's arithmetic
  local adam_step = s.kind == "zero2" and "ZeRO-2's partitioned step is modelled as DeepSpeed's FusedAdam"
                    or o.offload_optimizer == "cpu" and "the CPU-offloaded step is modelled as AdamW's"
  if adam_step and t.optimizer ~= "adamw" and t.optimizer ~= "adam" and not t.inference then
    error(("training.optimizer = \"%s\" under strategy %s%s is not modelled: %s (use adamw)"):format(
          t.optimizer, s.kind, o.offload_optimizer == "cpu" and " with offload_optimizer = \"cpu\"" or "",
          adam_step), 0)
  end
  cx.dp = s
  if s.kind == "zero3" or s.kind == "fsdp2" then
    -- parameters are made as shards; the model asks for whole ones per layer
    cx.shard_params = true
    cx.shard_param = M.shard
    -- "auto": FSDP2 builds on the meta device; ZeRO-3 under zero.Init, except that transformers
    -- builds a quantized model without it (modeling_utils: needs_zero3_init =
    -- is_deepspeed_zero3_enabled() and not _is_quantized): whole, then partitioned by
    -- deepspeed.initialize
    local partitioned_by_default = s.kind == "fsdp2" or t.quant == "none"
    if o.init == "partitioned" or o.init == "meta" or (o.init == "auto" and partitioned_by_default) then
      s.init_partitioned = true
    elseif o.init ~= "auto" and o.init ~= "whole" then
      error("training.zero.init must be auto, whole, partitioned or meta", 0)
    end
  end
  return s
end

-- Sharded strategies: replace each parameter table of `keys` by a whole copy gathered over the
-- ranks, for the ops that follow (forward), and plan the gather again before the layer's
-- backward (hook 1) and the gradient reduce-scatter after it (hook 2).
--
-- As FSDP2 runs it (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): one flat
-- all-gather output per module on the all-gather stream (the rank's input is a view into it; a
-- CPU-offloaded shard is copied up first), copied out into each parameter's unsharded tensor on
-- the compute stream, then the flat buffer freed (in forward only once the next module's
-- all-gather is issued); in backward the unsharded gradients are copied into one flat
-- reduce-scatter input (in the reduce dtype) on the compute stream, kept until the next
-- reduce-scatter, and the sharded gradients are views of one flat output made on the
-- reduce-scatter stream. ZeRO-3 is modelled the same way, except that its buffers are freed as
-- soon as they are used and its reduce-scatter input lives on the reduce stream.
-- Engine hold slots (Op.slot) of FSDP2: a collective's buffer kept until the next of its kind.
local SLOT_REDUCE_SCATTER, SLOT_ALL_GATHER = 1, 2

-- FSDP2's own host time per fully_shard module and step, forward (pre/post-forward hooks: the
-- all-gather's issue, copy-out and views, resharding) and backward (pre-backward unshard,
-- post-backward reduce-scatter and its copy-in), measured on the profile's host
-- (h200_torch.lua fsdp2_hook_us); a module kept through backward (the root, or
-- reshard_after_forward=False) takes the "keep" figures. nil without a measurement.
local function fsdp2_hook_us(cx, s, layer, side)
  local h = cx.fsdp2_hook_us
  if not h then return nil end
  local keep = not s.opts.raf or layer == -1
  return h[keep and "keep" or "reshard"][side]
end

local function gather_module(cx, s, list, layer, phase, hook, names_suffix, remaps)
  local flat_bytes = 0
  for _, it in ipairs(list) do flat_bytes = flat_bytes + it.bytes * s.n end
  local inputs = {}
  for _, it in ipairs(list) do
    if it.p.shard.host then
      -- CPUOffloadPolicy: the shard comes up from pinned host memory first
      local up = tensor(cx, it.p.name .. " (shard on device)", it.bytes, it.dtype, "temp", false)
      op(cx, { name = "h2d shard " .. it.p.name, kind = "h2d", stream = S.h2d, phase = phase, hook = hook,
               layer = layer, outputs = { up }, bytes = it.bytes })
      inputs[#inputs + 1] = up
    else
      inputs[#inputs + 1] = it.p.shard.id
    end
  end
  -- FSDP2 mixed precision: the shards cast to the parameter dtype into one flat input first
  -- (_fsdp_collectives.py _get_param_all_gather_inputs, the foreach-copy path of every parameter
  -- with a param_dtype and no CPU offload), freed once the all-gather is issued
  local cast_bytes = 0
  -- (and a float8-gathered weight's shard, cast by fsdp_pre_all_gather whatever the precision)
  if s.kind == "fsdp2" and s.opts.offload_param ~= "cpu" then
    for _, it in ipairs(list) do
      if not it.p.storage and it.p.dtype ~= it.dtype and (s.param_dtype or it.p.float8_gather) then
        cast_bytes = cast_bytes + it.bytes
      end
    end
  end
  local cast
  if cast_bytes > 0 then
    cast = tensor(cx, ("all-gather input (layer %d%s)"):format(layer, names_suffix), cast_bytes,
                  list[1].dtype, "temp", false)
    op(cx, { name = ("all-gather input cast layer %d%s"):format(layer, names_suffix), kind = "copy",
             stream = S.collective, phase = phase, hook = hook, layer = layer, inputs = inputs,
             outputs = { cast }, bytes = cast_bytes * 3 })
  end
  local flat = tensor(cx, ("all-gather output (layer %d%s)"):format(layer, names_suffix), flat_bytes,
                      list[1].dtype, "temp", false)
  local host_inputs = {}
  for i, it in ipairs(list) do if it.p.shard.host then host_inputs[#host_inputs + 1] = inputs[i] end end
  if cast then
    inputs[#inputs + 1] = cast
    host_inputs[#host_inputs + 1] = cast
  end
  -- in forward FSDP2 keeps the output until the next module's all-gather has been issued
  -- (AllGatherState, freed in the next wait_for_unshard; no record_stream); in backward, and in
  -- ZeRO-3, it is freed once copied out
  local deferred = s.kind == "fsdp2" and phase == "fwd"
  op(cx, { name = ("all_gather layer %d%s"):format(layer, names_suffix), kind = "allgather", stream = S.collective,
           phase = phase, hook = hook, layer = layer, inputs = inputs, outputs = { flat },
           frees = host_inputs, bytes = flat_bytes, world = s.n,
           slot = deferred and SLOT_ALL_GATHER or nil, slot_free_after = deferred or nil })
  local outs = {}
  for i, it in ipairs(list) do outs[i] = it.full end
  -- (FSDP2's backward copy-out runs in the layer's own pre-backward, wait_for_unshard, where a
  -- prefetch issued only the all-gather: hook 5)
  op(cx, { name = ("all-gather copy-out layer %d%s"):format(layer, names_suffix), kind = "copy",
           phase = phase, hook = (s.kind == "fsdp2" and hook == 1) and 5 or hook, layer = layer, inputs = { flat }, outputs = outs,
           frees = deferred and {} or { flat }, bytes = 2 * flat_bytes, remap_of = remaps,
           host_us = s.kind == "fsdp2" and phase == "fwd" and fsdp2_hook_us(cx, s, layer, "fwd") or nil })
end

function M.gather(cx, holder, keys, layer)
  local s = cx.dp
  if not s or not cx.shard_params then return end
  s.gathered[layer] = s.gathered[layer] or {}
  local list = {}
  for _, k in ipairs(keys) do
    local p = holder[k]
    local kept = p and s.pp_keep and s.pp_keep[p]
    if kept then
      -- a pipeline stage's later micro-batches: the parameters stay unsharded (see M.pp_keep)
      holder[k] = kept.full
      table.insert(s.gathered[layer], { holder = holder, key = k, full = kept.full, p = p, dtype = kept.dtype,
                                        bytes = kept.bytes })
    elseif p and p.shard then
      -- a packed 4-bit weight is gathered in its storage dtype (no mixed-precision cast)
      -- (a Float8Linear's weight under enable_fsdp_float8_all_gather: its shard cast to float8
      -- before the all-gather, strategies/float8.lua)
      local gdt = p.storage or (p.float8_gather and "fp8") or s.param_dtype or p.dtype
      local full_bytes = p.nb or nn.bytes(p.shape, gdt)
      local full = tensor(cx, p.name .. " (gathered)", full_bytes, gdt, "param", false,
                          { requires_grad = p.trainable, trainable = p.trainable })
      local ft = { id = full, shape = p.shape, dtype = gdt, rg = p.trainable,
                   trainable = p.trainable, name = p.name, param = true, orig = p,
                   nb = full_bytes, quant = p.quant, blocks = p.blocks, storage = p.storage }
      holder[k] = ft
      local it = { holder = holder, key = k, full = ft, p = p, dtype = gdt,
                   grad_dtype = p.float8_gather and (s.param_dtype or p.dtype) or nil,
                   bytes = (full_bytes + s.n - 1) // s.n }
      table.insert(s.gathered[layer], it)
      list[#list + 1] = { p = p, full = full, dtype = gdt, bytes = it.bytes }
      if s.pp_keep then
        s.pp_keep[p] = it
        s.pp_kept[#s.pp_kept + 1] = { layer = layer, it = it }
      end
    end
  end
  if #list > 0 then gather_module(cx, s, list, layer, "fwd", 0, "", nil) end
end

-- After the layer's forward: release the gathered parameters (reshard) and declare the backward
-- hooks: gather again (unless raf is false), reduce-scatter the gradients into the shards.
function M.release(cx, layer, keep)
  local s = cx.dp
  if not s or not cx.shard_params then return end
  if layer == -1 and s.kind == "fsdp2" then
    -- forward ends (the root's release): the last all-gather output kept is dropped before
    -- backward's first all-gather
    op(cx, { name = "all-gather state freed (forward ends)", kind = "none", phase = "fwd",
             slot = SLOT_ALL_GATHER })
  end
  local list = s.gathered[layer] or {}
  if #list == 0 then return end
  if s.pp_keep then return M.pp_release(cx, s, layer, list) end
  local raf = s.opts.raf and not keep
  local frees = {}
  for _, g in ipairs(list) do
    g.holder[g.key] = g.p
    if raf then frees[#frees + 1] = g.full.id end
  end
  if #frees > 0 then
    op(cx, { name = "reshard layer " .. layer, phase = "fwd", frees = frees, layer = layer })
  end
  local used = {}
  if raf then
    local again, remaps = {}, {}
    for i, g in ipairs(list) do
      again[i] = { p = g.p, dtype = g.dtype, bytes = g.bytes,
                   full = tensor(cx, g.p.name .. " (gathered for backward)", g.bytes * s.n, g.dtype,
                                 "param", false) }
      remaps[i] = g.full.id
      used[i] = again[i].full
    end
    gather_module(cx, s, again, layer, "bwd", 1, ", backward", remaps)
  else
    for i, g in ipairs(list) do used[i] = g.full.id end
  end
  -- reduce-scatter: the layer's unsharded gradients copied into one flat input (reduce dtype)
  -- (the reduce dtype, else the gradients': a float8-gathered weight's is the parameter dtype)
  local rdt = s.reduce_dtype or list[1].grad_dtype
  local grads, rs_bytes, outs = {}, 0, {}
  for _, g in ipairs(list) do
    if g.p.trainable then
      grads[#grads + 1] = g.full.id
      rs_bytes = rs_bytes + nn.bytes(g.p.shape, rdt or g.grad_dtype or g.dtype)
      outs[#outs + 1] = g.p.shard_grad
    end
  end
  -- gradient accumulation (micro-batch `mb` of `nmb`): every micro-batch reduce-scatters and
  -- adds its shard into the first one's (FSDP2 foreach_reduce: sharded_param.grad is None ->
  -- assign, else `sharded_param.grad._local_tensor += new_sharded_grad` on the reduce stream;
  -- DeepSpeed ZeRO-3 partition_grads: copy_ on the first micro-step, add_ after). Under FSDP2's
  -- set_requires_gradient_sync(False) (sync_every_micro_batch = false) the micro-batches before
  -- the last keep the unsharded gradients instead (FSDPParam.to_accumulated_grad_if_needed /
  -- accumulate_unsharded_grad_if_needed: unsharded_accumulated_grad += grad, grad = None), and
  -- the last reduce-scatters their sum.
  -- FSDP2's post-backward reshards before it reduces (FSDPParamGroup.post_backward: reshard(),
  -- then foreach_reduce): the unsharded parameters go before the reduce-scatter input comes
  local free_gathered = { name = "free gathered layer " .. layer, phase = "bwd", hook = 2, layer = layer,
                          frees = used }
  if s.kind == "fsdp2" then op(cx, free_gathered) end
  local mb, nmb = cx.micro or 1, cx.micro_total or 1
  local offload = s.opts.offload_optimizer == "cpu" or s.opts.offload_param == "cpu"
  local no_sync = s.kind == "fsdp2" and not s.opts.sync_every_micro_batch
  s.acc_unsharded = s.acc_unsharded or {}
  s.acc_shard = s.acc_shard or {}
  if #grads > 0 and no_sync and mb < nmb then
    local acc = s.acc_unsharded[layer]
    if not acc then
      -- the first micro-batch's gradients become the accumulated ones (a move when the reduce
      -- dtype is the parameters': one buffer of the layer's gradients)
      acc = tensor(cx, ("unsharded accumulated gradients (layer %d)"):format(layer), rs_bytes,
                   rdt or list[1].dtype, "grad", true)
      s.acc_unsharded[layer] = acc
      op(cx, { name = ("to_accumulated_grad layer %d"):format(layer), kind = "copy", phase = "bwd",
               hook = 2, layer = layer, grads_of = grads, free_grads = true, drop_persistent = true,
               outputs = { acc }, bytes = 2 * rs_bytes })
    else
      op(cx, { name = ("accumulate unsharded grads layer %d"):format(layer), kind = "elementwise",
               phase = "bwd", hook = 2, layer = layer, grads_of = grads, free_grads = true,
               drop_persistent = true, inputs = { acc }, bytes = 3 * rs_bytes })
    end
  elseif #grads > 0 then
    local rin = tensor(cx, ("reduce-scatter input (layer %d)"):format(layer), rs_bytes,
                       rdt or list[1].dtype, "temp", false)
    -- FSDP2 (foreach_reduce) makes and fills the input on the current stream and keeps it until
    -- the next reduce-scatter (ReduceScatterState); ZeRO-3's lives on the reduce stream
    local fsdp2 = s.kind == "fsdp2"
    local acc_in = s.acc_unsharded[layer]
    s.acc_unsharded[layer] = nil
    op(cx, { name = ("reduce-scatter copy-in layer %d"):format(layer), kind = "copy", stream = fsdp2 and S.compute or S.reduce_scatter,
             host_us = fsdp2 and fsdp2_hook_us(cx, s, layer, "bwd") or nil,
             phase = "bwd", hook = 2, layer = layer, grads_of = grads, free_grads = true,
             drop_persistent = true, outputs = { rin }, bytes = 2 * rs_bytes,
             inputs = { acc_in }, frees = { acc_in },
             slot = fsdp2 and SLOT_REDUCE_SCATTER or nil })
    local first = s.acc_shard[layer] == nil or offload
    local rout = tensor(cx, ("reduce-scatter output (layer %d%s)"):format(layer, first and "" or ", micro-batch " .. mb),
                        (rs_bytes + s.n - 1) // s.n, rdt or list[1].dtype, first and "grad" or "temp", first)
    if first then
      for _, sg in ipairs(outs) do sg.flat = rout end
      s.acc_shard[layer] = rout
    end
    op(cx, { name = ("reduce_scatter layer %d"):format(layer), kind = "reduce_scatter", stream = S.reduce_scatter,
             phase = "bwd", hook = 2, layer = layer, inputs = { rin }, outputs = { rout },
             frees = fsdp2 and {} or { rin }, bytes = rs_bytes, world = s.n })
    if s.replicate then
      -- HSDP: the shard's gradient is then all-reduced across the replicas, in place
      op(cx, { name = ("all_reduce (replicate) layer %d"):format(layer), kind = "allreduce", stream = S.reduce_scatter,
               phase = "bwd", hook = 2, layer = layer, inputs = { rout }, outputs = {},
               bytes = (rs_bytes + s.n - 1) // s.n, world = s.replicate, per_node = s.replicate_per_node })
    end
    if offload then
      op(cx, { name = ("copy gradient shards of layer %d to host"):format(layer), kind = "d2h", stream = S.d2h,
               phase = "bwd", hook = 2, layer = layer, inputs = { rout }, frees = { rout },
               drop_persistent = true, bytes = (rs_bytes + s.n - 1) // s.n })
    elseif not first then
      op(cx, { name = ("accumulate gradient shard layer %d"):format(layer), kind = "elementwise", stream = S.reduce_scatter,
               phase = "bwd", hook = 2, layer = layer, inputs = { s.acc_shard[layer], rout },
               frees = { rout }, bytes = 3 * ((rs_bytes + s.n - 1) // s.n) })
    end
  end
  if s.kind ~= "fsdp2" then op(cx, free_gathered) end
  if layer == -1 and s.kind == "fsdp2" then
    -- the root's hooks end backward: its final callback waits for the last reduce-scatter and
    -- drops the input it kept
    op(cx, { name = "reduce-scatter state freed (backward ends)", kind = "none", phase = "bwd",
             hook = 2, layer = layer, slot = SLOT_REDUCE_SCATTER })
  end
  s.gathered[layer] = nil
end

-- FSDP2 beside a pipeline, as torchtitan and torch.distributed.pipelining run it: torchtitan's
-- apply_fsdp sets reshard_after_forward = not pp_enabled (its "default" policy: no per-micro-batch
-- all-gathers), and PipelineStage.backward_maybe_with_nosync runs every micro-batch's backward
-- with set_reshard_after_backward(False) and set_requires_gradient_sync(False); only
-- perform_reduce_grad, after the schedule's last backward, runs each group's post_backward
-- (reshard, then reduce-scatter). So a stage's parameters are all-gathered once, at its first
-- forward, and stay unsharded through the step; its unsharded gradients accumulate over the
-- micro-batches (as under set_requires_gradient_sync(False) in M.release) and are
-- reduce-scattered once (M.pp_reduce_grads). Called with cx.dp set up, before the model is built.
function M.pp_keep(cx)
  local s = cx.dp
  s.pp_keep, s.pp_kept = {}, {}
end

-- A micro-batch's release under M.pp_keep: no reshard, no gather again; its gradients added
-- into the unsharded accumulated ones.
function M.pp_release(cx, s, layer, list)
  local grads, rs_bytes = {}, 0
  local rdt = s.reduce_dtype
  for _, g in ipairs(list) do
    g.holder[g.key] = g.p
    if g.p.trainable then
      grads[#grads + 1] = g.full.id
      rs_bytes = rs_bytes + nn.bytes(g.p.shape, rdt or g.dtype)
    end
  end
  s.gathered[layer] = nil
  if #grads == 0 then return end
  s.acc_unsharded = s.acc_unsharded or {}
  local acc = s.acc_unsharded[layer]
  if not acc then
    acc = tensor(cx, ("unsharded accumulated gradients (layer %d)"):format(layer), rs_bytes,
                 rdt or list[1].dtype, "grad", true)
    s.acc_unsharded[layer] = acc
    op(cx, { name = ("to_accumulated_grad layer %d"):format(layer), kind = "copy", phase = "bwd",
             hook = 2, layer = layer, grads_of = grads, free_grads = true, drop_persistent = true,
             outputs = { acc }, bytes = 2 * rs_bytes })
  else
    op(cx, { name = ("accumulate unsharded grads layer %d"):format(layer), kind = "elementwise",
             phase = "bwd", hook = 2, layer = layer, grads_of = grads, free_grads = true,
             drop_persistent = true, inputs = { acc }, bytes = 3 * rs_bytes })
  end
end

-- perform_reduce_grad after the schedule's last backward: each group's post_backward reshards its
-- parameters, then reduce-scatters its accumulated gradients into the shards the optimizer steps.
function M.pp_reduce_grads(cx)
  local s = cx.dp
  local layers, by_layer = {}, {}
  for _, e in ipairs(s.pp_kept) do
    if not by_layer[e.layer] then by_layer[e.layer] = {}; layers[#layers + 1] = e.layer end
    table.insert(by_layer[e.layer], e.it)
  end
  for _, layer in ipairs(layers) do
    local list, used, outs = by_layer[layer], {}, {}
    for i, it in ipairs(list) do
      used[i] = it.full.id
      if it.p.trainable then outs[#outs + 1] = it.p.shard_grad end
    end
    op(cx, { name = "post_backward: reshard layer " .. layer, phase = "bwd", layer = layer, frees = used })
    local acc = s.acc_unsharded and s.acc_unsharded[layer]
    if acc then
      s.acc_unsharded[layer] = nil
      local rdt = s.reduce_dtype or list[1].dtype
      local rs_bytes = 0
      for _, it in ipairs(list) do if it.p.trainable then rs_bytes = rs_bytes + nn.bytes(it.p.shape, rdt) end end
      local rin = tensor(cx, ("reduce-scatter input (layer %d)"):format(layer), rs_bytes, rdt, "temp", false)
      op(cx, { name = ("reduce-scatter copy-in layer %d"):format(layer), kind = "copy", phase = "bwd", layer = layer,
               inputs = { acc }, outputs = { rin }, frees = { acc }, drop_persistent = true, bytes = 2 * rs_bytes,
               slot = SLOT_REDUCE_SCATTER })
      local rout = tensor(cx, ("reduce-scatter output (layer %d)"):format(layer), (rs_bytes + s.n - 1) // s.n, rdt,
                          "grad", true)
      for _, sg in ipairs(outs) do sg.flat = rout end
      op(cx, { name = ("reduce_scatter layer %d"):format(layer), kind = "reduce_scatter", stream = S.reduce_scatter,
               phase = "bwd", layer = layer, inputs = { rin }, outputs = { rout }, bytes = rs_bytes, world = s.n })
      if s.replicate then
        -- HSDP (dp_replicate > 1; a shard group of one where dp_shard is 1): foreach_reduce then
        -- all-reduces the shard's gradient over the replicas, in place, after the schedule
        op(cx, { name = ("all_reduce (replicate) layer %d"):format(layer), kind = "allreduce", stream = S.reduce_scatter,
                 phase = "bwd", layer = layer, inputs = { rout }, outputs = {},
                 bytes = (rs_bytes + s.n - 1) // s.n, world = s.replicate, per_node = s.replicate_per_node })
      end
    end
  end
  op(cx, { name = "reduce-scatter state freed (backward ends)", kind = "none", phase = "bwd",
           slot = SLOT_REDUCE_SCATTER })
  s.pp_keep, s.pp_kept = {}, {}
end

-- After the model is built (and cast): fully_shard replaces each whole parameter by its shard,
-- decoder layers first, then the root module's own parameters (embeddings, final norm, head).
function M.after_build(cx)
  local s = cx.dp
  if not s or not s.sharded then return end
  local by_layer, order = {}, {}
  for _, p in ipairs(s.sharded) do
    local l = p.layer or -1
    if not by_layer[l] then by_layer[l] = {}; order[#order + 1] = l end
    table.insert(by_layer[l], p)
  end
  table.sort(order, function(a, b)
    if a < 0 then return false end
    if b < 0 then return true end
    return a < b
  end)
  for _, l in ipairs(order) do
    local outs, frees = {}, {}
    for _, p in ipairs(by_layer[l]) do
      -- the shard keeps the parameter's dtype after the model's cast (a packed weight its storage's)
      local sb = (pbytes(p) + s.n - 1) // s.n
      local sid = tensor(cx, p.name .. " (shard)", p.shard.host and 0 or sb, p.storage or p.dtype, "param", true,
                         { param = true })
      p.shard.id, p.shard.bytes = sid, sb
      if p.shard_grad then
        local gdt = s.reduce_dtype or p.dtype
        p.shard_grad.bytes = (nn.bytes(p.shape, gdt) + s.n - 1) // s.n
        p.shard_grad.dtype = gdt
      end
      outs[#outs + 1] = sid
      frees[#frees + 1] = p.id
    end
    op(cx, { name = "fully_shard " .. (l >= 0 and ("layer " .. l) or "root"), kind = "copy",
             phase = "build", outputs = outs, frees = frees })
  end
end

-- Makes the shard of a parameter (called by the model's param constructor when sharding).
function M.shard(cx, p)
  local s = cx.dp
  local o = s.opts
  local full = pbytes(p)
  local numel = p.storage and p.nb // nn.DT_SIZE[p.storage] or nn.numel(p.shape)
  if s.kind == "zero3" and numel < o.stage3_param_persistence_threshold then
    return false -- small parameters stay whole on every rank
  end
  -- expert parallelism over every data-parallel rank: each rank's experts are its own (torchtitan's
  -- efsdp mesh of one rank; strategies/ep.lua)
  if cx.ep and require("strategies.ep").is_expert_param(p) then return false end
  local bytes = (full + s.n - 1) // s.n
  -- under CPU offload the shard lives in host memory (no device bytes)
  local host = o.offload_param == "cpu"
  -- the shard's tensors are made by after_build, once the model has its final dtype
  p.shard = { bytes = bytes, host = host }
  if p.trainable then p.shard_grad = {} end
  s.sharded = s.sharded or {}
  table.insert(s.sharded, p)
  return true
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
-- for tests/ops/test_rules.lua
M.buckets_by_size, M.ddp_buckets = buckets_by_size, ddp_buckets

-- DDP's buckets (torch/nn/parallel/distributed.py, _ddp_init_helper): with
-- find_unused_parameters=False (the default) the first iteration has one bucket of every
-- gradient, since the parameters' order need not be the order gradients become ready; DDP then
-- rebuilds them (above) from DistributedDataParallel._pre_forward of the second iteration, so
-- they are allocated before that forward's activations (step_start: the op runs as the step
-- begins, though it is declared once forward has shown the order). The old bucket goes when its
-- last reference does: ProcessGroupNCCL stashes the step-0 all-reduce's tensors until the main
-- thread next calls into the process group after the work completed (pytorch#150079). Under
-- ZeRO-1 the optimizer's broadcasts made that call, so the bucket is freed at the rebuild (3 of
-- the 4 measured ranks); under plain DDP the next call is step 1's first all-reduce, just after
-- the head's backward, which vrsim places after the last layer's backward (its head bucket is
-- reduced where backward ends).
local function ddp_rebuild(cx, s)
  if s.kind == "zero1" then
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

-- Before each micro-batch's backward is derived (micro-batch mb of nmb): declares the gradient
-- hooks (buckets, reductions) around each layer's backward, as each framework accumulates:
--   ddp, zero1  DDP under no_sync() for every micro-batch but the last (and DeepSpeed ZeRO-1,
--               which reduces at the accumulation boundary): the full gradients accumulate in
--               .grad and the buckets are all-reduced in the last micro-batch only;
--   zero2       DeepSpeed ZeRO-2 reduces every micro-batch into the gradient partition (its
--               hooks run on every backward; stage_1_and_2.py reduce_partition_and_remove_grads);
--   zero3/fsdp2 the reduce-scatter hooks come from the forward (M.release), every micro-batch.
function M.before_backward(cx, cfg, params, mb, nmb)
  local s = cx.dp
  local n, o = s.n, s.opts
  mb, nmb = mb or 1, nmb or 1
  local trainable = {}
  for _, p in ipairs(params) do if p.trainable then trainable[#trainable + 1] = p end end
  if (s.kind == "ddp" or s.kind == "zero1") and mb < nmb then return end

  if s.kind == "ddp" or s.kind == "zero1" then
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
    if s.kind == "ddp" then
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
    return
  end

  if s.kind == "zero2" then
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
end

-- After backward has been derived: the list of { param = , grad = } the optimizer updates on
-- this rank (or { zero2 = ... } for DeepSpeed's own partitioned step).
function M.after_backward(cx, cfg, params)
  local s = cx.dp
  local G, n = cx.G, s.n
  local trainable = {}
  for _, p in ipairs(params) do if p.trainable then trainable[#trainable + 1] = p end end
  local upd = {}
  if s.kind == "ddp" or s.kind == "zero1" then
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
  if s.kind == "zero2" then
    upd.zero2 = s.zero2
    return upd
  end
  -- zero3 / fsdp2: the shards are what the optimizer updates
  if s.opts.offload_optimizer == "cpu" then
    local part = 0
    for _, p in ipairs(trainable) do part = part + (p.shard and p.shard.bytes // nn.DT_SIZE[p.dtype] or nn.numel(p.shape)) end
    s.host_bytes = part * (4 + 8 + 4)
    upd.offload = { part = part, dtype = trainable[1] and trainable[1].dtype or "bf16" }
    return upd
  end
  for _, p in ipairs(trainable) do
    if p.shard then
      upd[#upd + 1] = { param = { id = p.shard.id, shape = { p.shard.bytes // nn.DT_SIZE[p.dtype] },
                                  dtype = p.dtype, name = p.name .. " (shard)", trainable = true },
                        grad = p.shard_grad.flat }
    else
      upd[#upd + 1] = { param = p, grad = G:param_grad(p.id) }
    end
  end
  -- zero_grad frees each layer's flat gradient shard once (the sharded grads are its views)
  upd.all_grads = {}
  local seen = {}
  for _, u in ipairs(upd) do
    if u.grad and not seen[u.grad] then seen[u.grad] = true; upd.all_grads[#upd.all_grads + 1] = u.grad end
  end
  return upd
end

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

-- DeepSpeed's own model-state estimators (deepspeed.runtime.zero.stage_1_and_2 /
-- stage3 estimate_zero*_model_states_mem_needs), for comparison in the report.
function M.deepspeed_estimate(stage, total_params, largest_layer_params, gpus_per_node, nodes,
                              cpu_offload, cpu_offload_params)
  local total_gpus = gpus_per_node * nodes
  if stage == 2 then
    if cpu_offload then return 2 * total_params end
    return 4 * total_params + math.floor(16 * total_params / total_gpus)
  elseif stage == 3 then
    local largest = 4 * largest_layer_params
    if cpu_offload then
      if cpu_offload_params then return largest end
      return largest + math.floor(2 * total_params / total_gpus)
    end
    return largest + math.floor(18 * total_params / total_gpus)
  end
  return nil
end

return M
