-- fsdp.lua: the parameter-sharding strategies, DeepSpeed ZeRO-3 and torch FSDP2 (fully_shard), the
-- passes lua/strategies/dp.lua runs for them: parameters made as shards, each layer's gathered
-- before its forward and again before its backward, released after, its gradients
-- reduce-scattered into the shards the optimizer steps; FSDP2 beside a pipeline keeps them whole.
local S = require("vrsim.core").streams  -- Op.stream ids (sim/graph.h StreamId)
local nn = require "vrsim.nn"
local ops = require "strategies.dp_ops"
local tensor, op = ops.tensor, ops.op
local pbytes = ops.pbytes

local M = {}

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

-- How ops and tensors name a unit: "layer N" (a decoder layer; -1 the root), or a module of
-- training.zero.units by its path (and call, for one that runs more than once per forward).
local function L(s, layer)
  local u = s.unit_tags and s.unit_tags[layer]
  return u and u.label or ("layer " .. layer)
end

-- The hook kind of a unit's post-backward ops: 2, as its backward ends; 6 (at the end of
-- backward, after the root's) for a unit of training.zero.units whose module's inputs need no
-- gradient (the embedding's token ids): FSDP2 registers its RegisterPostBackwardFunction on those
-- inputs, so none runs, and the root's final callback (_fsdp_state.py
-- _root_post_backward_final_callback, over all_states in module order: the root first) runs its
-- post_backward.
local function PH(s, layer)
  local u = s.unit_tags and s.unit_tags[layer]
  return (u and not u.grad_input) and 6 or 2
end

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
    cast = tensor(cx, ("all-gather input (%s%s)"):format(L(s, layer), names_suffix), cast_bytes,
                  list[1].dtype, "temp", false)
    op(cx, { name = ("all-gather input cast %s%s"):format(L(s, layer), names_suffix), kind = "copy",
             stream = S.collective, phase = phase, hook = hook, layer = layer, inputs = inputs,
             outputs = { cast }, bytes = cast_bytes * 3 })
  end
  local flat = tensor(cx, ("all-gather output (%s%s)"):format(L(s, layer), names_suffix), flat_bytes,
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
  op(cx, { name = ("all_gather %s%s"):format(L(s, layer), names_suffix), kind = "allgather", stream = S.collective,
           phase = phase, hook = hook, layer = layer, inputs = inputs, outputs = { flat },
           frees = host_inputs, bytes = flat_bytes, world = s.n,
           slot = deferred and SLOT_ALL_GATHER or nil, slot_free_after = deferred or nil })
  local outs = {}
  for i, it in ipairs(list) do outs[i] = it.full end
  -- (FSDP2's backward copy-out runs in the layer's own pre-backward, wait_for_unshard, where a
  -- prefetch issued only the all-gather: hook 5)
  op(cx, { name = ("all-gather copy-out %s%s"):format(L(s, layer), names_suffix), kind = "copy",
           phase = phase, hook = (s.kind == "fsdp2" and hook == 1) and 5 or hook, layer = layer, inputs = { flat }, outputs = outs,
           frees = deferred and {} or { flat }, bytes = 2 * flat_bytes, remap_of = remaps,
           host_us = s.kind == "fsdp2" and phase == "fwd" and fsdp2_hook_us(cx, s, layer, "fwd") or nil })
end

-- A micro-batch's gradients of `layer` (grads: their ids, rs_bytes in all, in dtype) added into
-- the layer's unsharded accumulated ones (s.acc_unsharded[layer]), FSDP2's
-- accumulate_unsharded_grad_if_needed: the first micro-batch's become them
-- (to_accumulated_grad_if_needed: a move when dtype is the parameters', one buffer of the layer's
-- gradients), each later one is added in place; the gradients freed either way.
local function accumulate_unsharded(cx, s, layer, grads, rs_bytes, dtype)
  local acc = s.acc_unsharded[layer]
  if not acc then
    acc = tensor(cx, ("unsharded accumulated gradients (%s)"):format(L(s, layer)), rs_bytes,
                 dtype, "grad", true)
    s.acc_unsharded[layer] = acc
    op(cx, { name = ("to_accumulated_grad %s"):format(L(s, layer)), kind = "copy", phase = "bwd",
             hook = PH(s, layer), layer = layer, grads_of = grads, free_grads = true, drop_persistent = true,
             outputs = { acc }, bytes = 2 * rs_bytes })
  else
    op(cx, { name = ("accumulate unsharded grads %s"):format(L(s, layer)), kind = "elementwise",
             phase = "bwd", hook = PH(s, layer), layer = layer, grads_of = grads, free_grads = true,
             drop_persistent = true, inputs = { acc }, bytes = 3 * rs_bytes })
  end
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
                   nb = full_bytes, quant = p.quant, blocks = p.blocks, storage = p.storage,
                   double_quant = p.double_quant, qdtype = p.qdtype }
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
  -- a unit of training.zero.units (shard.lua extra_units): which module and call of this forward
  local u = s.unit_tags and s.unit_tags[layer]
  if u and s.pp_keep then
    error(("training.zero.units ('%s') beside a pipeline is not modelled"):format(u.path), 0)
  end
  if s.pp_keep then return M.pp_release(cx, s, layer, list) end
  local raf = s.opts.raf and not keep
  local frees = {}
  for _, g in ipairs(list) do
    g.holder[g.key] = g.p
    if raf then frees[#frees + 1] = g.full.id end
  end
  if #frees > 0 then
    op(cx, { name = "reshard " .. L(s, layer), phase = "fwd", frees = frees, layer = layer })
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
    -- (a module run more than once per forward: each call's pre_backward gathers it, none
    -- prefetched, shard.lua extra_units: hook 5)
    gather_module(cx, s, again, layer, "bwd", (u and u.calls > 1) and 5 or 1, ", backward", remaps)
  else
    for i, g in ipairs(list) do used[i] = g.full.id end
  end
  -- reduce-scatter: the layer's unsharded gradients copied into one flat input (reduce dtype)
  -- (the reduce dtype, else the gradients': a float8-gathered weight's is the parameter dtype)
  local rdt = s.reduce_dtype or list[1].grad_dtype
  local mb, nmb = cx.micro or 1, cx.micro_total or 1
  local no_sync = s.kind == "fsdp2" and not s.opts.sync_every_micro_batch
  local reduces = not (no_sync and mb < nmb)
  local grads, rs_bytes, outs, tp_moves = {}, 0, {}, {}
  for _, g in ipairs(list) do
    if g.p.trainable then
      if g.p.tp_grad and reduces then tp_moves[#tp_moves + 1] = g else grads[#grads + 1] = g.full.id end
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
  local free_gathered = { name = "free gathered " .. L(s, layer), phase = "bwd", hook = PH(s, layer), layer = layer,
                          frees = used }
  -- beside tensor parallelism (lua/strategies/tp.lua, p.tp_grad) the post-backward first
  -- redistributes each gradient to its parameter's tp placement (_fsdp_param.py
  -- _get_grad_inner_tensor, before FSDPParamGroup.post_backward reshards): a SequenceParallel
  -- norm's Partial gradient all-reduced over tp into a new tensor (the functional all_reduce
  -- clones its input), the embedding's whole-table Replicate one cloned to the rank's rows
  -- (Shard._replicate_to_shard); the source dropped at once, the result read and freed by the
  -- copy-in
  local moved = {}
  for _, g in ipairs(tp_moves) do
    local gb = nn.bytes(g.p.shape, g.grad_dtype or g.dtype)
    local out = tensor(cx, ("%s gradient (%s)"):format(g.p.name, g.p.tp_grad.to), gb,
                       g.grad_dtype or g.dtype, "grad", false)
    op(cx, { name = ("redistribute %s gradient to %s"):format(g.p.name, g.p.tp_grad.to),
             kind = g.p.tp_grad.kind, phase = "bwd", hook = PH(s, layer), layer = layer, grads_of = { g.full.id },
             free_grads = true, drop_persistent = true, outputs = { out }, bytes = gb,
             world = g.p.tp_grad.kind == "allreduce" and g.p.tp_grad.world or nil })
    moved[#moved + 1] = out
  end
  -- the post-backward's reduce-scatter of `grads` (the gradients' ids, rs_bytes in all, in rdt)
  -- into the shards of `outs`, as unit `layer`
  local function reduce(layer, grads, moved, rs_bytes, rdt, outs, list)
    local offload = s.opts.offload_optimizer == "cpu" or s.opts.offload_param == "cpu"
    s.acc_unsharded = s.acc_unsharded or {}
    s.acc_shard = s.acc_shard or {}
    if #grads > 0 and no_sync and mb < nmb then
      accumulate_unsharded(cx, s, layer, grads, rs_bytes, rdt or list[1].dtype)
    elseif #grads + #moved > 0 then
      local rin = tensor(cx, ("reduce-scatter input (%s)"):format(L(s, layer)), rs_bytes,
                         rdt or list[1].dtype, "temp", false)
      -- FSDP2 (foreach_reduce) makes and fills the input on the current stream and keeps it until
      -- the next reduce-scatter (ReduceScatterState); ZeRO-3's lives on the reduce stream
      local fsdp2 = s.kind == "fsdp2"
      local acc_in = s.acc_unsharded[layer]
      s.acc_unsharded[layer] = nil
      local read = {}
      if acc_in then read[1] = acc_in end
      for _, t in ipairs(moved) do read[#read + 1] = t end
      op(cx, { name = ("reduce-scatter copy-in %s"):format(L(s, layer)), kind = "copy", stream = fsdp2 and S.compute or S.reduce_scatter,
               host_us = fsdp2 and fsdp2_hook_us(cx, s, layer, "bwd") or nil,
               phase = "bwd", hook = PH(s, layer), layer = layer, grads_of = grads, free_grads = true,
               drop_persistent = true, outputs = { rin }, bytes = 2 * rs_bytes,
               inputs = read, frees = read,
               slot = fsdp2 and SLOT_REDUCE_SCATTER or nil })
      -- (a unit of training.zero.units keys its sharded gradient by module: its reduce-scatter
      -- is its first call's, shard.lua extra_units)
      local akey = u and u.key or layer
      local first = s.acc_shard[akey] == nil or offload
      local rout = tensor(cx, ("reduce-scatter output (%s%s)"):format(L(s, layer), first and "" or ", micro-batch " .. mb),
                          (rs_bytes + s.n - 1) // s.n, rdt or list[1].dtype, first and "grad" or "temp", first)
      if first then
        for _, sg in ipairs(outs) do sg.flat = rout end
        s.acc_shard[akey] = rout
      end
      op(cx, { name = ("reduce_scatter %s"):format(L(s, layer)), kind = "reduce_scatter", stream = S.reduce_scatter,
               phase = "bwd", hook = PH(s, layer), layer = layer, inputs = { rin }, outputs = { rout },
               frees = fsdp2 and {} or { rin }, bytes = rs_bytes, world = s.n })
      if s.replicate then
        -- HSDP: the shard's gradient is then all-reduced across the replicas, in place
        op(cx, { name = ("all_reduce (replicate) %s"):format(L(s, layer)), kind = "allreduce", stream = S.reduce_scatter,
                 phase = "bwd", hook = PH(s, layer), layer = layer, inputs = { rout }, outputs = {},
                 bytes = (rs_bytes + s.n - 1) // s.n, world = s.replicate, per_node = s.replicate_per_node })
      end
      if offload then
        op(cx, { name = ("copy gradient shards of %s to host"):format(L(s, layer)), kind = "d2h", stream = S.d2h,
                 phase = "bwd", hook = PH(s, layer), layer = layer, inputs = { rout }, frees = { rout },
                 drop_persistent = true, bytes = (rs_bytes + s.n - 1) // s.n })
      elseif not first then
        op(cx, { name = ("accumulate gradient shard %s"):format(L(s, layer)), kind = "elementwise", stream = S.reduce_scatter,
                 phase = "bwd", hook = PH(s, layer), layer = layer, inputs = { s.acc_shard[akey], rout },
                 frees = { rout }, bytes = 3 * ((rs_bytes + s.n - 1) // s.n) })
      end
    end
  end
  -- a module run n times per forward (training.zero.units; shard.lua extra_units): autograd's
  -- AccumulateGrad of its one unsharded parameter waits for all n calls' gradients, summed in
  -- its input buffer as they come (the first kept, each later added in place and dropped), so
  -- the post_backward of calls n..2 finds no .grad: it only reshards; call 1's, last in
  -- backward, reduce-scatters the sum once (the capture llama2_7b_l2_fsdp2_w2_bf16_chunked_units:
  -- 8 all-gathers in backward, one reduce-scatter). The last call's gradients are that buffer.
  if u and u.calls > 1 then
    if #tp_moves > 0 then
      error(("training.zero.units ('%s') beside tensor parallelism is not modelled"):format(u.path), 0)
    end
    s.unit_buffer = s.unit_buffer or {}
    if u.call < u.calls then
      op(cx, { name = ("add %s gradients into the input buffer"):format(L(s, layer)), kind = "elementwise",
               phase = "bwd", hook = PH(s, layer), layer = layer, grads_of = grads, free_grads = true,
               drop_persistent = true, bytes = 3 * rs_bytes })
    end
    op(cx, free_gathered)
    if u.call == 1 then
      -- reduced as call 1's backward ends, from the buffer the last call's gradients begin
      s.unit_buffer[u.key] = { layer = layer, rs_bytes = rs_bytes, rdt = rdt, outs = outs, list = list }
    elseif u.call == u.calls then
      local b = s.unit_buffer[u.key]
      s.unit_buffer[u.key] = nil
      reduce(b.layer, grads, {}, b.rs_bytes, b.rdt, b.outs, b.list)
    end
    s.gathered[layer] = nil
    return
  end
  if s.kind == "fsdp2" then op(cx, free_gathered) end
  reduce(layer, grads, moved, rs_bytes, rdt, outs, list)
  if s.kind ~= "fsdp2" then op(cx, free_gathered) end
  if layer == -1 and s.kind == "fsdp2" then
    -- the root's hooks end backward: its final callback waits for the last reduce-scatter and
    -- drops the input it kept (hook 6: after any unit's post-backward that callback runs, PH)
    op(cx, { name = "reduce-scatter state freed (backward ends)", kind = "none", phase = "bwd",
             hook = 6, layer = layer, slot = SLOT_REDUCE_SCATTER })
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
      -- (a float8-gathered weight's gradient is in the param dtype, as in M.release)
      rs_bytes = rs_bytes + nn.bytes(g.p.shape, rdt or g.grad_dtype or g.dtype)
    end
  end
  s.gathered[layer] = nil
  if #grads == 0 then return end
  s.acc_unsharded = s.acc_unsharded or {}
  accumulate_unsharded(cx, s, layer, grads, rs_bytes, rdt or list[1].grad_dtype or list[1].dtype)
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
      local rdt = s.reduce_dtype or list[1].grad_dtype or list[1].dtype
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

-- After backward: the shards (and the parameters kept whole) the optimizer updates, or the host
-- step's partition under offload_optimizer = "cpu".
function M.after_backward(cx, cfg, s, trainable)
  local G = cx.G
  local upd = {}
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

return M
