-- megatron_vpp.lua: Megatron-LM's interleaved pipeline schedule (training.parallel.tp_impl =
-- "megatron", pp_schedule = "Interleaved1F1B"): megatron-core 0.16.1's
-- forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/schedules.py)
-- over vp model chunks a rank (pp_virtual_stages, Megatron's virtual_pipeline_model_parallel_size).
--
-- What comes from the source, beside what strategies/megatron_pp.lua says of the 1F1B schedule
-- (the receives, the deallocated outputs, the loss's scaling, GPTModel's decoder.input_tensor):
-- * The chunks (training.py get_model): one GPTModel a virtual stage, vp on each rank; virtual
--   stage s = c pp + r is chunk c of pipeline rank r and holds layers / (pp vp) layers, numbered
--   from 0 in each (get_num_layers_to_build; get_transformer_layer_offset places them); the
--   embedding is chunk 0's of rank 0 (pre_process), the final norm, output layer and loss chunk
--   vp - 1's of the last rank (post_process).
-- * The order (get_schedule_table): the virtual micro-batches run groups of
--   microbatch_group_size_per_vp_stage (training.parallel.pp_microbatch_group, ModelParallelConfig's
--   default pp; the last group runs to m) micro-batches through chunk 0, then chunk 1, ...; a
--   backward runs the chunks in reverse. get_pp_rank_microbatches: num_warmup_microbatches =
--   (pp - rank - 1) * 2 + (vp - 1) * group forwards (at most m vp), then a forward and a backward
--   in turn, then the remaining backwards.
-- * overlap_p2p_comm: arguments.py keeps it True for an interleaved run (and batch_p2p_comm
--   False) unless --no-overlap-p2p-communication (training.parallel.pp_overlap_p2p_comm = false,
--   below). Every forward's output is sent and the next forward's activation received at once
--   (send_forward_recv_forward: the receive a new torch.empty, appended to input_tensors of the
--   chunk recv_tensor_from_previous_stage names), every backward's input gradient sent and the
--   next output gradient received (send_backward_recv_backward). The schedule's own references
--   hold what Python holds: the warm-up's input_tensor local (its last receive, kept until the
--   function returns), the steady state's output_tensor and input_tensor_grad (rebound when the
--   forward-and-backward pair returns, after both ran; the output deallocated in the next
--   pair's pp_pre_forward, and again after the loop), the cool-down's output_tensor_grad local,
--   and the steady state's receive rings: fwd_recv_buffer on the first rank and bwd_recv_buffer on
--   the last have group - pp + 1 slots (one elsewhere); iteration k receives into slot k % size
--   (None where it receives nothing, dropping what the slot held) and, where it received, clears
--   slot (k + 1) % size. With one slot a receive is let go at once; with more a received tensor
--   stays until its slot is cleared or rewritten, past its backward where that comes first, and
--   what the last iterations leave there lives until the function returns. The warm-up's last
--   receive of an output gradient goes to bwd_recv_buffer[-1].
-- * Without overlap_p2p_comm (batch_p2p_comm True; arguments.py asserts pp > 2): the warm-up's
--   last transfer and each steady forward-and-backward pair's are
--   send_forward_backward_recv_forward_backward, the activation then the output gradient received
--   together after the pair (no pp_pre_forward, no rings): into the schedule's input_tensor and
--   output_tensor_grad locals (rebound each time), then appended; the sent output is deallocated
--   after the transfer.
-- * With overlap_p2p_comm_warmup_flush (training.parallel.pp_overlap_p2p_warmup_flush; Megatron's
--   --overlap-p2p-communication-warmup-flush, only with overlap_p2p_comm) the warm-up and the
--   cool-down receive through the rings as the steady state does. Warm-up iteration k on a rank
--   after the first: before forward k, send_forward_recv_forward(output_tensor=None, recv_prev)
--   receives the activation of a later forward into fwd_recv_buffer[k % size] (a new torch.empty
--   live through forward k), then forward k's output is only sent (recv_prev=False); on the first
--   rank forward k's send receives into that slot. Either way, where it received, the slot's tensor
--   is appended to input_tensors and slot (k + 1) % size cleared, and the schedule's input_tensor
--   local is never bound. Cool-down iteration k likewise: on a rank before the last, before
--   backward k, send_backward_recv_backward(None, recv_next) receives a later backward's gradient
--   into bwd_recv_buffer[k % size], and the backward's input gradient is only sent after; on the
--   last rank the send receives into the slot; the output_tensor_grad local is never bound. The
--   wait handles it keeps (recv_prev_wait_handles, recv_next_wait_handles) hold no tensor.
-- * The last stage's loss is not sent, so not deallocated: custom_backward seeds ones_like of the
--   0-dim loss. A sent output's storage is replaced after the forward's ops (in the steady state
--   after another chunk's backward), so the graph's backward of it starts at a storage-less
--   handle declared with the forward, and the deallocations are plain ops on its storage.
-- * Each chunk's decoder.input_tensor (set_input_tensor) keeps its last input, and the input its
--   .grad, until the chunk's next forward: the last micro-batch's pair of each receiving chunk
--   outlives the step (persistent tensors here, as megatron_pp.lua carries the one of 1F1B).
-- * Megatron's data parallelism (dp_replicate > 1, strategies/megatron_dp.lua): get_model wraps
--   each chunk in its own DistributedDataParallel (a buffer a chunk); a chunk's weights' hooks run
--   in that chunk's backwards; config.finalize_model_grads_func runs over the chunks before the
--   schedule returns; config.grad_scale_func scales the last stage's loss in each of its
--   backward_steps (no_sync_func and grad_sync_func stay None: overlap_grad_reduce is off).
-- The requirements Megatron checks are refused by name (megatron_pp.lua M.refusal).
local nn = require "vrsim.nn"

local M = {}

-- get_pp_rank_microbatches (forward_only False, overlap_moe_expert_parallel_comm False).
function M.warmup(pp, rank, vp, m, group)
  return math.min((pp - rank - 1) * 2 + (vp - 1) * group, m * vp)
end

-- get_schedule_table: { mb, chunk } of each virtual micro-batch, 0-based pairs in a 1-based list.
function M.table(m, vp, group)
  local t = {}
  for lo = 0, m - 1, group do
    local hi = lo + group >= m and m or lo + group -- (the last group runs to m)
    for c = 0, vp - 1 do
      for mb = lo, hi - 1 do t[#t + 1] = { mb = mb, chunk = c } end
    end
  end
  return t
end

-- Runs this rank's interleaved schedule (see the top of this file). forward() runs the model's
-- forward for cx.run.stage (its chunk). Returns the plan's `pp` table (vrsim/pipeline.lua).
function M.run(cx, pl, mc, forward)
  local G = cx.G
  local b, s, h = cx.run.batch, cx.run.seq, mc.hidden
  local pp, rank, m, vp = pl.par.pp, pl.rank, pl.par.pp_microbatches, pl.virtual
  -- microbatch_group_size_per_vp_stage (training.parallel.pp_microbatch_group; ModelParallelConfig
  -- makes it pp where not given)
  local group = pl.par.pp_microbatch_group or pp
  -- overlap_p2p_comm (training.parallel.pp_overlap_p2p_comm): arguments.py's default for an
  -- interleaved run; false is --no-overlap-p2p-communication, batch_p2p_comm True
  local overlap = pl.par.pp_overlap_p2p_comm ~= false
  -- overlap_p2p_comm_warmup_flush (training.parallel.pp_overlap_p2p_warmup_flush; mesh.lua refuses it
  -- without overlap_p2p_comm, as ModelParallelConfig does)
  local flush = pl.par.pp_overlap_p2p_warmup_flush == true
  local tp = pl.par.tp
  local first_rank, last_rank = rank == 0, rank == pp - 1
  local total = m * vp
  local warm = M.warmup(pp, rank, vp, m, group)
  local all_warm = warm == total
  local remaining = total - warm
  local tbl = M.table(m, vp, group)
  local shape = { s // tp, b, h }
  local dtype = cx.run.hidden_dtype
  local function chunk_of(k, fwd)
    local c = tbl[k % total + 1].chunk
    return fwd and c or vp - 1 - c
  end
  local function is_first(c) return first_rank and c == 0 end
  local function is_last(c) return last_rank and c == vp - 1 end
  local phase = "fwd"
  local function op(spec)
    spec.kind = spec.kind or "none"
    spec.phase = spec.phase or phase
    spec.inputs, spec.outputs, spec.frees = spec.inputs or {}, spec.outputs or {}, spec.frees or {}
    return G:op(spec)
  end

  -- Python's references, counted: a tensor's storage goes when the last one does; a received
  -- activation that goes drops its .grad's reference
  local refs = {}
  local function hold(t)
    if t then refs[t] = (refs[t] or 0) + 1 end
    return t
  end
  local function drop(t, why)
    if not t then return end
    refs[t] = refs[t] - 1
    if refs[t] > 0 then return end
    refs[t] = nil
    op { name = ("%s: %s goes"):format(why, t.name), frees = { t.id } }
    if t.grad then drop(t.grad, why) end
  end
  -- rebinds one of the schedule's references: the new one held first, then the old one dropped
  local function rebind(slot, t, why)
    local old = slot.t
    slot.t = hold(t)
    drop(old, why)
  end

  -- P2PCommunicator._communicate: torch.empty(tensor_shape, requires_grad=True, pipeline_dtype)
  local function receive(what, c, mb)
    local name = ("%s of chunk %d micro-batch %d (P2PCommunicator._communicate: torch.empty)"):format(what, c, mb)
    local act = what == "activation"
    local id = G:tensorv(name, nn.bytes(shape, dtype), nn.numel(shape), dtype, act and "activation" or "temp", act)
    op { name = "recv " .. name, outputs = { id } }
    return { id = id, shape = shape, dtype = dtype, rg = act, name = name }
  end

  -- what each P2PCommunicator._communicate call does around its receive buffers: under
  -- variable_seq_lengths its shape exchange before them (comm.shapes), and without overlap_p2p_comm,
  -- whose transfers are batched, its synchronize after them (comm.synced; megatron_pp.lua). Every
  -- call of the interleaved functions reaches _communicate, one that moves nothing too.
  local comm = require("strategies.megatron_pp").communicator(cx, pl.par, not overlap, op, function(name, ph, ts)
    local ids = {}
    for _, t in ipairs(ts) do ids[#ids + 1] = t.id end
    op { name = name, phase = ph, frees = ids }
  end)

  -- recv_tensor_from_previous_stage: whether this transfer receives, and for which chunk
  local function recv_from_previous(k, fwd)
    local leading = fwd and first_rank or (not fwd and last_rank)
    local last_chunk = fwd and vp - 1 or 0
    local recv, nxt = true, nil
    if leading then
      if k < pp - 1 then
        recv = false
        nxt = chunk_of(k + 1, fwd)
      else
        nxt = chunk_of(k - (pp - 1), fwd)
      end
      if nxt == last_chunk then recv = false end
      nxt = fwd and nxt + 1 or nxt - 1
    else
      nxt = chunk_of(k + 1, fwd)
    end
    return recv, nxt
  end

  cx.mg_pp_microbatches = m
  local ntok = G:tensorv("total_num_tokens", 4, 1, "int32", "temp", false)
  op { name = "total_num_tokens = torch.zeros([]) (int32)", kind = "elementwise", outputs = { ntok }, bytes = 4 }

  -- per chunk: input_tensors, output_tensors, output_tensor_grads (FIFO lists of references) and
  -- decoder.input_tensor
  local inputs, outputs, ograds, decoder = {}, {}, {}, {}
  for c = 0, vp - 1 do inputs[c], outputs[c], ograds[c], decoder[c] = {}, {}, {}, { t = nil } end
  local seen = {} -- the chunks that ran a forward this step
  -- the last step's decoder.input_tensor pair of each receiving chunk (megatron_pp.lua's carried)
  local carried = {}
  for c = 0, vp - 1 do
    if not is_first(c) then
      carried[c] = {}
      for i, what in ipairs { "activation", "activation's .grad" } do
        local name = ("chunk %d's decoder.input_tensor: the last micro-batch's %s, kept into the next step"):format(c, what)
        carried[c][i] = G:tensor { name = name, bytes = nn.bytes(shape, dtype), numel = nn.numel(shape), dtype = dtype,
                                   cat = i == 1 and "activation" or "temp", persistent = true }
      end
    end
  end
  local actions = {}
  -- the schedule's locals
  local L = { input_tensor = {}, output_tensor = {}, input_tensor_grad = {}, output_tensor_grad = {} }
  -- fwd_recv_buffer and bwd_recv_buffer: rings of group - pp + 1 slots on the first rank (forward)
  -- and the last rank (backward), of one elsewhere; a slot keeps its received tensor until the
  -- slot is cleared ((k + 1) % size, after the next receive) or overwritten, so with group > pp a
  -- received tensor can outlive its backward, up to the function's return
  local fsize = first_rank and group - pp + 1 or 1
  local bsize = last_rank and group - pp + 1 or 1
  local fring, bring = {}, {}
  for i = 0, fsize - 1 do fring[i] = {} end
  for i = 0, bsize - 1 do bring[i] = {} end

  -- deallocate_output_tensor: the output object's .data = torch.empty((1,)), a new [1] tensor; the
  -- storage it had goes (the output's own, or an earlier placeholder: pp_pre_forward deallocates
  -- what the warm-up or the loop deallocated already)
  local function deallocate(o)
    if not o then return end
    o.deallocs = o.deallocs + 1
    local name = ("chunk %d micro-batch %d's output after deallocate_output_tensor%s"):format(o.chunk, o.mb,
      o.deallocs > 1 and (" (" .. o.deallocs .. ")") or "")
    local id = G:tensorv(name, nn.bytes({ 1 }, o.out.dtype), 1, o.out.dtype, "temp", false)
    op { name = ("deallocate_output_tensor%s: chunk %d micro-batch %d's output .data = a new [1] tensor"):format(
           o.deallocs > 1 and " again" or "", o.chunk, o.mb),
         kind = "elementwise", inputs = { o.storage }, outputs = { id }, frees = { o.storage },
         bytes = nn.bytes({ 1 }, o.out.dtype) }
    o.storage = id
  end
  -- a reference to the output object goes; the last one takes its storage with it
  local function output_goes(o, why)
    if not o then return end
    o.holders = o.holders - 1
    if o.holders > 0 then return end
    op { name = ("%s: chunk %d micro-batch %d's output goes"):format(why, o.chunk, o.mb), frees = { o.storage } }
  end
  local function set_output_local(o)
    local old = L.output_tensor.t
    if o then o.holders = o.holders + 1 end
    L.output_tensor.t = o
    output_goes(old, "output_tensor rebound")
  end
  local recvd = {}
  for c = 0, vp - 1 do recvd[c] = { act = 0, grad = 0 } end
  local function receive_for(what, c)
    local key = what == "activation" and "act" or "grad"
    local mb = recvd[c][key]
    recvd[c][key] = mb + 1
    return receive(what, c, mb)
  end

  -- forward_step_helper(k): returns the output object and the action's first op
  local function forward_step(k)
    local a0 = G:num_ops()
    local c, mb = chunk_of(k, true), tbl[k % total + 1].mb
    phase = "fwd"
    -- forward_step_helper_preprocess: the chunk's input (None on the first stage's chunk 0), which
    -- input_tensors keeps until the backward pops it
    local input = (not is_first(c)) and table.remove(inputs[c], 1) or nil
    -- set_input_tensor: decoder.input_tensor now holds this input (the previous one, or the last
    -- step's carried pair, dropped)
    if carried[c] and not seen[c] then
      op { name = ("forward_step: set_input_tensor drops chunk %d's input of the last step"):format(c),
           frees = carried[c], drop_persistent = true }
    end
    seen[c] = true
    if not is_first(c) then rebind(decoder[c], input, "set_input_tensor") end
    local st = pl.stages[c * pp + rank + 1]
    local f0 = G:num_ops()
    cx.run.stage = { first = st.first, last = st.last, embed = st.embed, head = st.head, input = input, chunk = c }
    local out = forward()
    cx.run.stage = nil
    -- Megatron's DistributedDataParallel of the chunk: each weight's post-accumulate hook
    -- (main_grad.add_, .grad dropped) runs in this micro-batch's backward
    if cx.mg_dp then
      local prefix, mine = c .. ".module.", {}
      for _, p in ipairs(cx.params) do
        if p.trainable and p.name:sub(1, #prefix) == prefix then mine[#mine + 1] = p end
      end
      require("strategies.megatron_dp").before_backward(cx, cx.mg_dp, cx.params, mine)
    end
    -- the graph's backward of a sent output starts at a handle of it (no storage): the
    -- deallocation that replaces its storage comes later, outside the forward's ops
    local start = out.id
    if not is_last(c) then
      local hd = G:tensorv(("chunk %d micro-batch %d's output (custom_backward's start)"):format(c, mb), 0, 0,
                           out.dtype, "temp", true)
      op { name = ("output_tensors[%d].append: micro-batch %d's output"):format(c, mb), inputs = { out.id },
           outputs = { hd }, grads = { { pass = 1 } } }
      start = hd
    end
    local o = { chunk = c, mb = mb, out = out, storage = out.id, deallocs = 0, holders = 1, input = input,
                first = f0, last = G:num_ops(), start = start, a0 = a0 }
    outputs[c][#outputs[c] + 1] = o
    return o, c
  end
  local function close(kind, c, mb, a0)
    actions[#actions + 1] = { stage = c * pp + rank, kind = kind, mb = mb, op_first = a0, op_end = G:num_ops() }
  end

  -- backward_step_helper(k): returns the input's gradient (held once more for the caller)
  local function backward_step(k)
    local a0 = G:num_ops()
    local c = chunk_of(k, false)
    phase = "bwd"
    local o = table.remove(outputs[c], 1)
    local grad = (not is_last(c)) and table.remove(ograds[c], 1) or nil
    local input = o.input
    -- custom_backward: the last stage's loss seeded with ones_like (0-dim); a sent output with
    -- the received gradient, the popped output_tensor_grad a local through the backward
    local seed = grad
    local scaled
    -- custom_backward's grad_output local: the ones_like it makes is held until run_backward
    -- returns, through the whole backward (not dropped by the engine once used)
    local ones_held
    if is_last(c) and cx.mg_dp then
      -- backward_step: output_tensor[0] = config.grad_scale_func(output_tensor[0]), the optimizer's
      -- scale_loss (_scale_one * loss: a new [1] fp32 tensor, held by backward_step's list until it
      -- returns); custom_backward seeds ones_like of it (its local until it returns), MulBackward0
      -- multiplies by _scale_one (a new [1]), which autograd sums to the loss's 0-dim shape (a new
      -- tensor)
      local one = cx.mg_dp.scale_one
      scaled = nn.new_tensor(cx, ("chunk %d micro-batch %d's loss * _scale_one (grad_scale_func)"):format(c, o.mb),
                             { 1 }, "fp32", false, "temp")
      op { name = ("backward_step: output_tensor = grad_scale_func(output_tensor) of micro-batch %d"):format(o.mb),
           kind = "elementwise", inputs = { o.out.id, one }, outputs = { scaled.id }, bytes = 12 }
      local ones = nn.new_tensor(cx, "custom_backward: ones_like(output)", { 1 }, "fp32", false, "temp")
      op { name = "custom_backward: grad_output = ones_like(output)", kind = "elementwise", outputs = { ones.id },
           bytes = 4 }
      local g = nn.new_tensor(cx, "MulBackward0: grad * _scale_one", { 1 }, "fp32", false, "temp")
      op { name = "MulBackward0: grad * _scale_one", kind = "elementwise", inputs = { ones.id, one },
           outputs = { g.id }, bytes = 12 }
      ones_held = ones
      seed = nn.new_tensor(cx, "MulBackward0's gradient summed to the loss's shape", {}, "fp32", false, "temp")
      op { name = "autograd: sum_to_size of MulBackward0's gradient (the loss is 0-dim)", kind = "reduce_rows",
           inputs = { g.id }, outputs = { seed.id }, frees = { g.id }, bytes = 8 }
    elseif is_last(c) then
      -- custom_backward(output, None): grad_output = torch.ones_like(output), the 0-dim loss's
      -- shape, custom_backward's local (held past the engine's use)
      seed = nn.new_tensor(cx, "custom_backward: ones_like(output)", {}, o.out.dtype, false, "temp")
      op { name = "custom_backward: grad_output = ones_like(output)", kind = "elementwise", outputs = { seed.id },
           bytes = nn.bytes({}, o.out.dtype) }
      ones_held = seed
    end
    local dx = G:derive_backward_of(o.first, o.last, o.start, seed and seed.id, input and input.id,
                                    grad ~= nil or (ones_held ~= nil and seed == ones_held))
    if ones_held then
      op { name = "custom_backward returns: its ones_like grad_output goes", frees = { ones_held.id } }
    end
    local igrad
    if dx and input then
      -- input_tensor.grad: held by the input, and returned (input_tensor_grad)
      igrad = { id = dx, name = ("chunk %d micro-batch %d's activation .grad"):format(c, o.mb) }
      hold(igrad)
      input.grad = igrad
      hold(igrad)
    end
    if scaled then op { name = "backward_step returns: the scaled loss goes", frees = { scaled.id } } end
    -- backward_step_helper returns: the popped input, output and gradient go with its locals
    drop(grad, "backward_step_helper returns")
    output_goes(o, "backward_step_helper returns")
    drop(input, "backward_step_helper returns")
    return igrad, c, o.mb, a0
  end

  -- the first receive: input_tensors[0].append(recv_forward(...)), none on the first stage
  if not first_rank then
    comm.shapes(phase, { recv_prev = true })
    inputs[0][1] = hold(receive_for("activation", 0))
    comm.synced("recv_forward", phase)
  end

  -- warm-up
  for k = 0, warm - 1 do
    local recv, nxt = recv_from_previous(k, true)
    if k == total - 1 then recv = false end
    local a_pre = G:num_ops()
    -- fwd_recv_buffer[k % size] = what forward k's transfer receives (None where nothing is
    -- received, dropping what the slot held)
    local function receive_into_slot()
      local t = recv and receive_for("activation", nxt) or nil
      rebind(fring[k % fsize], t, ("fwd_recv_buffer[%d] rebound"):format(k % fsize))
    end
    if flush and not first_rank then
      -- the prefetch: send_forward_recv_forward(None, recv_prev), made before forward k
      phase = "fwd"
      comm.shapes(phase, { recv_prev = recv })
      receive_into_slot()
    end
    local o, c = forward_step(k)
    o.a0 = a_pre -- (the prefetch is forward k's action's)
    set_output_local(not is_last(c) and o or nil)
    if flush then
      -- forward k's output sent (send_forward_recv_forward(output_tensor, recv_prev=False) after
      -- the prefetch); on the first rank its send receives into fwd_recv_buffer[k % size]
      comm.shapes(phase, { send_next = not is_last(c), recv_prev = first_rank and recv })
      if first_rank then receive_into_slot() end
      deallocate(L.output_tensor.t)
      if recv then
        inputs[nxt][#inputs[nxt] + 1] = hold(fring[k % fsize].t)
        rebind(fring[(k + 1) % fsize], nil, ("fwd_recv_buffer[%d] cleared"):format((k + 1) % fsize))
      end
    elseif not overlap and k == warm - 1 and not all_warm then
      -- (input_tensor, output_tensor_grad) = send_forward_backward_recv_forward_backward(
      -- output_tensor, None, recv_prev, recv_next): the activation, then the first backward's
      -- gradient for the last chunk (none on the last rank), both batched
      rebind(L.input_tensor_grad, nil, "input_tensor_grad rebound")
      phase = "bwd"
      comm.shapes(phase, { send_next = not is_last(c), recv_prev = recv, recv_next = not last_rank })
      local t = recv and receive_for("activation", nxt) or nil
      local g = (not last_rank) and receive_for("output gradient", vp - 1) or nil
      comm.synced("send_forward_backward_recv_forward_backward", phase)
      rebind(L.input_tensor, t, "input_tensor rebound")
      rebind(L.output_tensor_grad, g, "output_tensor_grad rebound")
      if g then ograds[vp - 1][#ograds[vp - 1] + 1] = hold(g) end
      if recv then inputs[nxt][#inputs[nxt] + 1] = hold(t) end
    else
      -- input_tensor = send_forward_recv_forward(output_tensor, recv_prev)
      comm.shapes(phase, { send_next = not is_last(c), recv_prev = recv })
      local t = recv and receive_for("activation", nxt) or nil
      comm.synced("send_forward_recv_forward", phase)
      rebind(L.input_tensor, t, "input_tensor rebound")
      if recv then inputs[nxt][#inputs[nxt] + 1] = hold(t) end
    end
    if not flush then deallocate(L.output_tensor.t) end
    close(0, c, o.mb, o.a0)
    if overlap and k == warm - 1 and not all_warm then
      -- input_tensor_grad = None; bwd_recv_buffer[-1] = send_backward_recv_backward(None,
      -- recv_next): the first backward's gradient, for the last chunk
      rebind(L.input_tensor_grad, nil, "input_tensor_grad rebound")
      phase = "bwd"
      comm.shapes(phase, { recv_next = not last_rank })
      local g = (not last_rank) and receive_for("output gradient", vp - 1) or nil
      rebind(bring[bsize - 1], g, "bwd_recv_buffer[-1] rebound")
      if g then ograds[vp - 1][#ograds[vp - 1] + 1] = hold(g) end
    end
  end

  -- steady state: forward_k = k + warm-up, backward_k = k
  for k = 0, remaining - 1 do
    local fk = k + warm
    if overlap then
      -- pp_pre_forward: the previous forward's output deallocated (again, if it was)
      deallocate(L.output_tensor.t)
      local o, c = forward_step(fk)
      -- pp_post_forward: sent, and the next activation received into fwd_recv_buffer[fk % size]
      -- (None where nothing is received), passed to input_tensors; then slot (fk + 1) % size cleared
      local recv, nxt = recv_from_previous(fk, true)
      if k == remaining - 1 then recv = false end
      comm.shapes(phase, { send_next = not is_last(c), recv_prev = recv })
      local t = recv and receive_for("activation", nxt) or nil
      rebind(fring[fk % fsize], t, ("fwd_recv_buffer[%d] rebound"):format(fk % fsize))
      if recv then
        inputs[nxt][#inputs[nxt] + 1] = hold(t)
        rebind(fring[(fk + 1) % fsize], nil, ("fwd_recv_buffer[%d] cleared"):format((fk + 1) % fsize))
      end
      close(0, c, o.mb, o.a0)
      local igrad, cb, mbb, a0 = backward_step(k)
      -- pp_post_backward: the input gradient sent (none from the first stage's chunk 0), the next
      -- output gradient received into bwd_recv_buffer[k % size] (what the slot held goes), passed to
      -- output_tensor_grads; then slot (k + 1) % size cleared
      local recv_next, nb = recv_from_previous(k, false)
      comm.shapes(phase, { send_prev = not is_first(cb), recv_next = recv_next })
      local g = recv_next and receive_for("output gradient", nb) or nil
      rebind(bring[k % bsize], g, ("bwd_recv_buffer[%d] rebound"):format(k % bsize))
      if g then
        ograds[nb][#ograds[nb] + 1] = hold(g)
        rebind(bring[(k + 1) % bsize], nil, ("bwd_recv_buffer[%d] cleared"):format((k + 1) % bsize))
      end
      close(1, cb, mbb, a0)
      -- output_tensor, input_tensor_grad = the pair's results
      set_output_local(not is_last(c) and o or nil)
      rebind(L.input_tensor_grad, igrad, "input_tensor_grad rebound")
      drop(igrad, "backward_step returns")
    else
      -- without overlap_p2p_comm: the pair runs (no pp_pre_forward), output_tensor and
      -- input_tensor_grad rebound as it returns, then (input_tensor, output_tensor_grad) =
      -- send_forward_backward_recv_forward_backward(...): the next activation and the next
      -- output gradient received together, batched, the sent output deallocated after
      local o, c = forward_step(fk)
      close(0, c, o.mb, o.a0)
      local igrad, cb, mbb, a0 = backward_step(k)
      set_output_local(not is_last(c) and o or nil)
      rebind(L.input_tensor_grad, igrad, "input_tensor_grad rebound")
      drop(igrad, "backward_step returns")
      local recv, nxt = recv_from_previous(fk, true)
      if k == remaining - 1 then recv = false end
      local recv_next, nb = recv_from_previous(k, false)
      comm.shapes(phase, { send_next = not is_last(c), send_prev = not is_first(cb), recv_prev = recv,
                           recv_next = recv_next })
      local t = recv and receive_for("activation", nxt) or nil
      local g = recv_next and receive_for("output gradient", nb) or nil
      comm.synced("send_forward_backward_recv_forward_backward", phase)
      rebind(L.input_tensor, t, "input_tensor rebound")
      rebind(L.output_tensor_grad, g, "output_tensor_grad rebound")
      deallocate(L.output_tensor.t)
      if recv then inputs[nxt][#inputs[nxt] + 1] = hold(t) end
      if g then ograds[nb][#ograds[nb] + 1] = hold(g) end
      close(1, cb, mbb, a0)
    end
  end
  -- after the loop: deallocate_output_tensor(output_tensor)
  deallocate(L.output_tensor.t)

  -- cool-down
  phase = "bwd"
  if all_warm and not last_rank then
    -- recv_backward
    comm.shapes(phase, { recv_next = true })
    local g = receive_for("output gradient", vp - 1)
    comm.synced("recv_backward", phase)
    ograds[vp - 1][#ograds[vp - 1] + 1] = hold(g)
  end
  for k = remaining, total - 1 do
    local recv_next, nb = recv_from_previous(k, false)
    if k == total - 1 then recv_next = false end
    local a_pre = G:num_ops()
    -- bwd_recv_buffer[k % size] = what backward k's transfer receives
    local function receive_into_slot()
      local g = recv_next and receive_for("output gradient", nb) or nil
      rebind(bring[k % bsize], g, ("bwd_recv_buffer[%d] rebound"):format(k % bsize))
    end
    if flush and not last_rank then
      -- the prefetch: send_backward_recv_backward(None, recv_next), made before backward k
      comm.shapes(phase, { recv_next = recv_next })
      receive_into_slot()
    end
    local igrad, cb, mbb, a0 = backward_step(k)
    rebind(L.input_tensor_grad, igrad, "input_tensor_grad rebound")
    drop(igrad, "backward_step returns")
    if flush then
      -- backward k's input gradient sent; on the last rank its send receives into
      -- bwd_recv_buffer[k % size]; where received, the slot's tensor goes to output_tensor_grads
      -- and slot (k + 1) % size is cleared (send_backward_recv_backward(input_tensor_grad,
      -- recv_next=False) on the other ranks)
      comm.shapes(phase, { send_prev = not is_first(cb), recv_next = last_rank and recv_next })
      if last_rank then receive_into_slot() end
      if recv_next then
        ograds[nb][#ograds[nb] + 1] = hold(bring[k % bsize].t)
        rebind(bring[(k + 1) % bsize], nil, ("bwd_recv_buffer[%d] cleared"):format((k + 1) % bsize))
      end
      a0 = a_pre
    else
      -- output_tensor_grad = send_backward_recv_backward(input_tensor_grad, recv_next)
      comm.shapes(phase, { send_prev = not is_first(cb), recv_next = recv_next })
      local g = recv_next and receive_for("output gradient", nb) or nil
      comm.synced("send_backward_recv_backward", phase)
      rebind(L.output_tensor_grad, g, "output_tensor_grad rebound")
      if g then ograds[nb][#ograds[nb] + 1] = hold(g) end
    end
    close(1, cb, mbb, a0)
  end

  -- config.finalize_model_grads_func (training.py sets finalize_model_grads): each chunk's
  -- grad buffer reduced over dp, the norms' over tp, before the schedule returns
  if cx.mg_dp then require("strategies.megatron_dp").finalize_schedule(cx) end
  -- the function returns: its locals go
  local why = "forward_backward_pipelining_with_interleaving returns"
  for _, slot in ipairs { L.input_tensor, L.input_tensor_grad, L.output_tensor_grad } do
    rebind(slot, nil, why)
  end
  for i = 0, fsize - 1 do rebind(fring[i], nil, why .. " (fwd_recv_buffer)") end
  for i = 0, bsize - 1 do rebind(bring[i], nil, why .. " (bwd_recv_buffer)") end
  set_output_local(nil)
  op { name = why .. ": total_num_tokens goes", frees = { ntok } }
  -- each receiving chunk's decoder.input_tensor: its last input and that input's .grad outlive the
  -- step, as persistent tensors of their sizes (made as the real ones go)
  for c = 0, vp - 1 do
    if carried[c] then
      rebind(decoder[c], nil, ("chunk %d's last input and its .grad, held by GPTModel"):format(c))
      op { name = ("chunk %d's decoder.input_tensor kept into the next step"):format(c), outputs = carried[c] }
    end
  end
  -- (every reference the schedule took is gone once it returns: one left is a tensor never freed)
  local left = next(refs)
  if left then error(("megatron_vpp: %s is still referenced as the schedule returns"):format(left.name), 0) end
  cx.notes[#cx.notes + 1] = M.note(pl)
  cx.notes[#cx.notes + 1] = require("strategies.megatron_tp").buffer_note(cx)
  local stage_layers = {}
  for i, x in ipairs(pl.stages) do stage_layers[i] = x.last - x.first + 1 end
  return { ranks = pp, stages = pl.n_stages, virtual = vp, microbatches = m, schedule = "Interleaved1F1B", rank = rank,
           actions = actions, send_bytes = nn.bytes(shape, dtype), stage_layers = stage_layers, lockstep = false,
           -- (variable_seq_lengths: each transfer's shape, 3 int64, exchanged first)
           shape_bytes = pl.par.pp_variable_seq_lengths and 24 or nil }
end

-- What overlap_p2p_comm_warmup_flush prefetches on this rank: the warm-up's activations on every
-- rank but the first, the cool-down's gradients on every rank but the last.
local function prefetch_note(pp, rank)
  local what = {}
  if rank > 0 then what[#what + 1] = "each warm-up activation received before the forward ahead of the one that reads it" end
  if rank < pp - 1 then what[#what + 1] = "each cool-down gradient before the backward ahead of the one that reads it" end
  return ", " .. table.concat(what, ", ")
end

-- The run's note on the pipeline.
function M.note(pl)
  local pp, vp, rank, m = pl.par.pp, pl.virtual, pl.rank, pl.par.pp_microbatches
  local group = pl.par.pp_microbatch_group or pp
  local parts = {}
  for c = 0, vp - 1 do
    local st = pl.stages[c * pp + rank + 1]
    parts[#parts + 1] = ("chunk %d layers %d-%d%s%s"):format(c, st.first, st.last, st.embed and " and the embedding" or "",
      st.head and " and the final norm, output layer and loss" or "")
  end
  -- (the rings of more than one slot: the first rank's forward one, the last rank's backward one)
  local ring = ""
  if group > pp and (rank == 0 or rank == pp - 1) and pl.par.pp_overlap_p2p_comm ~= false then
    ring = ("; its %s_recv_buffer a ring of %d slots (group - pp + 1), each keeping its received %s until cleared"):format(
      rank == 0 and "fwd" or "bwd", group - pp + 1, rank == 0 and "activation" or "gradient")
  end
  return ("Megatron-LM's interleaved pipeline (megatron-core 0.16.1, forward_backward_pipelining_with_interleaving, "
          .. (pl.par.pp_overlap_p2p_comm == false and ("without overlap_p2p_comm: batch_p2p_comm"
                .. (pl.par.pp_batch_p2p_sync == false and ", no torch.cuda.synchronize() after a batch (batch_p2p_sync off)"
                    or ", torch.cuda.synchronize() after each batch (batch_p2p_sync, its default)"))
              or pl.par.pp_overlap_p2p_warmup_flush and ("overlap_p2p_comm and overlap_p2p_comm_warmup_flush: the "
                .. "warm-up's and cool-down's receives into the receive rings too" .. prefetch_note(pp, rank))
              or "overlap_p2p_comm")
          .. "): rank %d of %d holds %d model chunks (%s); %d warm-up forwards of %d virtual "
          .. "micro-batches (%d micro-batches x %d chunks, groups of %d: microbatch_group_size_per_vp_stage%s)%s; "
          .. "each received activation and gradient a new tensor, each sent output deallocated "
          .. "(deallocate_pipeline_outputs)%s"):format(rank, pp, vp,
          table.concat(parts, "; "), M.warmup(pp, rank, vp, m, group), m * vp, m, vp, group,
          pl.par.pp_microbatch_group and "" or ", its default pp", ring,
          pl.par.pp_variable_seq_lengths and require("strategies.megatron_pp").VARLEN_NOTE or "")
end

return M
