-- megatron_pp.lua: pipeline parallelism as Megatron-LM runs it (training.parallel.tp_impl =
-- "megatron" with training.parallel.pp > 1): megatron-core 0.16.1's non-interleaved 1F1B
-- schedule (megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_
-- interleaving) over pipeline stages of its GPTModel (strategies/megatron_tp.lua builds a stage:
-- the embedding on the first, the final norm, output layer and loss on the last).
--
-- The layout, the stage this rank runs and the timeline's actions are vrsim/pipeline.lua's (pp is
-- the outermost dimension, as Megatron's rank order "tp-cp-ep-dp-pp" makes it); what differs
-- from torch.distributed.pipelining's PipelineStage, which pipeline.lua's P.run follows, is what
-- the schedule allocates and how long it keeps it, each from megatron-core's source:
-- * The split: num_layers / pp decoder layers a stage (get_num_layers_to_build; the embedding
--   and the output layer count for nothing), numbered from 0 on every stage.
-- * The order: num_warmup_microbatches = min(pp - rank - 1, m) forwards, then m - warm-up times a
--   forward and the backward of the oldest micro-batch in flight, then the warm-up's backwards.
-- * Receives (p2p_communication.py P2PCommunicator._communicate): each a new torch.empty of
--   tensor_shape ([s/tp, b, h] under sequence parallelism, cp 1), pipeline_dtype,
--   requires_grad=True, made before the transfer, not a buffer kept for the run. The activation
--   of a micro-batch is received just before its forward (recv_forward in the warm-up; in the
--   steady state send_backward_recv_forward, after the previous backward), the output's gradient
--   just after the forward that sends (send_forward_recv_backward) or, in the cool-down, before
--   its backward (recv_backward). The first stage receives no activation, the last no gradient.
-- * What a micro-batch in flight holds: input_tensors keeps the received activation and
--   output_tensors the output, whose storage deallocate_output_tensor replaces by torch.empty((1,))
--   once sent (config.deallocate_pipeline_outputs, which megatron/training/arguments.py's
--   core_transformer_config_from_args sets True; the dataclass default is False); backward_step
--   then runs custom_backward, the autograd engine seeded with the received gradient. The last
--   stage's output is the loss, deallocated alike; custom_backward seeds it with ones_like (its
--   grad_output local, live until run_backward returns) and autograd sums that [1] gradient to
--   the loss's 0-dim shape.
-- * The schedule's locals hold what the Python code holds: input_tensor (a received activation)
--   until the next receive or pop rebinds it, output_tensor_grad (a received gradient) until the
--   next one is received, input_tensor_grad (the activation's .grad, sent back) until the next
--   backward_step returns, output_tensor (a micro-batch's output object, its [1] placeholder once
--   deallocated: bound by forward_step's return and by output_tensors.pop(0)) until rebound, so
--   a popped output's placeholder outlives its backward to the next forward, or in the cool-down
--   to the next pop; what is left goes when the function returns. total_num_tokens, an int32
--   0-dim tensor, lives for the schedule.
-- * forward_step_calc_loss scales the last stage's loss in place (*= cp size, /= m): no
--   allocation in forward, a 0-dim gradient each in backward.
-- * Activation recompute (training.parallel.megatron_recompute_*, strategies/megatron_recompute.lua)
--   runs in every micro-batch's forward as without a pipeline, over the stage's own layers
--   (_checkpointed_forward walks num_layers_per_pipeline_rank; the full chunks restart at each
--   stage's layer 0): the schedule passes checkpoint_activations_microbatch = None unless
--   ModelParallelConfig.num_microbatches_with_partial_activation_checkpoints (default None;
--   schedules.py forward_backward_pipelining_without_interleaving) is set, which has no field here. A micro-batch in flight holds what its recompute
--   keeps (the chunks' inputs, or the core attention's arguments), and its backward recomputes
--   inside the node, as without a pipeline.
-- * Megatron's data parallelism (dp_replicate > 1, strategies/megatron_dp.lua) wraps the stage:
--   each micro-batch's forward declares the main_grad hooks its backward runs; the schedule runs
--   config.finalize_model_grads_func before it returns (training.py sets it; the untied model has
--   no embedding gradient to all-reduce between the first and the last stage); and on the last
--   stage backward_step scales the loss by config.grad_scale_func (the optimizer's scale_loss).
-- * Around each transfer call (P2PCommunicator._communicate; M.communicator): 1F1B batches its
--   transfers and ends each batch with torch.cuda.synchronize() (ModelParallelConfig.batch_p2p_sync,
--   training.parallel.pp_batch_p2p_sync), a host wait; under variable_seq_lengths
--   (training.parallel.pp_variable_seq_lengths) the call first exchanges its shapes
--   (_communicate_shapes: int64 tensors of 3, a synchronize, .tolist() of each received one).
-- The transfers are the timeline's sends on the pipeline link (sim/pipeline.c), each the size of
-- a receive buffer (and under variable_seq_lengths a shape exchange before each). The interleaved schedule (pp_schedule = "Interleaved1F1B", model chunks a rank)
-- is strategies/megatron_vpp.lua's; the requirements and the split are here.
local nn = require "vrsim.nn"

local M = {}

-- Megatron's model chunks a pipeline rank (virtual_pipeline_model_parallel_size): 1 under 1F1B;
-- under Interleaved1F1B pp_virtual_stages, by default 2 (the interleaved schedules' stages per rank
-- as vrsim/pipeline.lua takes them for torchtitan).
function M.virtual(mesh)
  if mesh.pp_schedule ~= "Interleaved1F1B" then return 1 end
  return mesh.pp_virtual_stages or 2
end

-- Megatron's microbatch_group_size_per_vp_stage (training.parallel.pp_microbatch_group): the
-- micro-batches each model chunk runs in a row under the interleaved schedule; ModelParallelConfig's
-- __post_init__ makes it pp where it is not given.
function M.group(mesh)
  return mesh.pp_microbatch_group or mesh.degrees.pp
end

-- Why Megatron's pipeline is not modelled for this run (the message after the field's prefix,
-- which strategies/megatron_tp.lua's refusal adds), or nil. n_layers: the model's decoder layers.
function M.refusal(t, mesh, n_layers)
  local pp = mesh.degrees.pp
  local sched = mesh.pp_schedule
  if sched == "InterleavedZeroBubble" then
    return "training.parallel.pp_schedule = \"InterleavedZeroBubble\": torch.distributed.pipelining's schedule; "
      .. "megatron-core 0.16.1 has no zero-bubble schedule of its own (its interleaved one is pp_schedule = "
      .. "\"Interleaved1F1B\")"
  end
  if sched ~= "1F1B" and sched ~= "Interleaved1F1B" then
    return ("training.parallel.pp_schedule = \"%s\": Megatron runs 1F1B (forward_backward_pipelining_without_"
            .. "interleaving) or its interleaved form (Interleaved1F1B), no other schedule; set pp_schedule = \"1F1B\""):format(sched)
  end
  local vp = M.virtual(mesh)
  if sched == "1F1B" and mesh.pp_virtual_stages then
    return ("training.parallel.pp_virtual_stages = %d: Megatron's model chunks run its interleaved schedule; set "
            .. "pp_schedule = \"Interleaved1F1B\""):format(mesh.pp_virtual_stages)
  end
  if sched == "Interleaved1F1B" then
    local m = mesh.pp_microbatches or pp
    if vp < 2 then
      return "training.parallel.pp_virtual_stages = 1 with pp_schedule = \"Interleaved1F1B\": one model chunk a rank is "
        .. "Megatron's non-interleaved schedule (arguments.py sets virtual_pipeline_model_parallel_size None): set "
        .. "pp_schedule = \"1F1B\""
    end
    if n_layers and n_layers % (pp * vp) ~= 0 then
      return ("%d layers over pp = %d stages of %d model chunks: Megatron splits them evenly (get_num_layers_to_build "
              .. "asserts num_layers_per_pipeline_rank divisible by vp_size; the uneven split is not modelled)")
             :format(n_layers, pp, vp)
    end
    -- arguments.py: without overlap_p2p_comm the interleaved schedule asserts pp > 2
    if mesh.pp_overlap_p2p_comm == false and pp < 3 then
      return ("training.parallel.pp_overlap_p2p_comm = false with pp = %d: Megatron's arguments.py asserts pp > 2 "
              .. "for the interleaved schedule without p2p overlap (no two batched sends and receives between the "
              .. "same two ranks)"):format(pp)
    end
    -- forward_backward_pipelining_with_interleaving's checks of microbatch_group_size_per_vp_stage
    -- (pp_microbatch_group; ModelParallelConfig's default: pp)
    local g = M.group(mesh)
    local lead = mesh.pp_microbatch_group
      and ("training.parallel.pp_microbatch_group = %d with pp_microbatches = %d"):format(g, m)
      or ("training.parallel.pp_microbatches = %d"):format(m)
    if g < pp or g > m then
      return ("%s under pp_schedule = \"Interleaved1F1B\": Megatron's interleaved schedule raises ValueError "
              .. "(microbatch_group_size_per_vp_stage = %d%s must range in [pp = %d, num_microbatches = %d])")
             :format(lead, g, mesh.pp_microbatch_group and "" or ", pp_microbatch_group's default pp", pp, m)
    end
    if m % g ~= 0 and m % g < pp then
      return ("%s under pp_schedule = \"Interleaved1F1B\": Megatron's interleaved schedule raises RuntimeError "
              .. "(its last group of micro-batches, num_microbatches %% microbatch_group_size_per_vp_stage = %d %% %d "
              .. "= %d, is under pp = %d): pp_microbatches a multiple of the group, or a remainder of at least pp")
             :format(lead, m, g, m % g, pp)
    end
  end
  if mesh.pp_layers_per_stage or mesh.pp_stage_layers then
    return "training.parallel.pp_layers_per_stage / pp_stage_layers: torchtitan's splits; Megatron's uneven split "
      .. "(--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers) is not modelled"
  end
  if mesh.pp_keep_outputs then
    return "training.parallel.pp_keep_outputs: torch.distributed.pipelining's PipelineStage, not Megatron's schedule"
  end
  if n_layers and n_layers % pp ~= 0 then
    return ("%d layers over pp = %d stages: Megatron splits the layers evenly (num_layers must be a multiple of "
            .. "pp; the uneven split is not modelled)"):format(n_layers, pp)
  end
  return nil
end

-- The stages: n_layers / (pp vp) decoder layers each, in order; the embedding on the first, the
-- final norm and the output layer on the last (vrsim/pipeline.lua's stage records). vp (default 1):
-- model chunks a rank, virtual stage s being chunk s // pp of pipeline rank s % pp
-- (get_transformer_layer_offset).
function M.split(pp, n_layers, vp)
  local n = pp * (vp or 1)
  local per, stages = n_layers // n, {}
  for s = 0, n - 1 do
    stages[s + 1] = { first = s * per, last = s * per + per - 1, embed = s == 0, head = s == n - 1 }
  end
  return stages
end

-- What this rank builds (strategies/megatron_tp.lua M.tree): its stage, or with model chunks
-- { chunks = each chunk's stage, in chunk order }.
function M.rank_stage(pl)
  if pl.virtual == 1 then return pl.stages[pl.rank + 1] end
  local chunks = {}
  for c = 0, pl.virtual - 1 do chunks[c + 1] = pl.stages[c * pl.par.pp + pl.rank + 1] end
  return { chunks = chunks }
end

-- forward_step_calc_loss on the last stage: output_tensor *= cp_group_size, then /=
-- num_microbatches, both in place (views of the loss here), each backward a new 0-dim gradient.
function M.scale_loss(cx, loss)
  local m = cx.mg_pp_microbatches
  for _, step in ipairs { "*= cp_group_size", "/= num_microbatches (" .. m .. ")" } do
    local v = nn.view(cx, loss, {}, "loss")
    nn.op(cx, { name = "forward_step_calc_loss: output_tensor " .. step, inputs = { loss }, out_tensors = { v },
                grads = { "new" }, bytes = 8 })
    loss = v
  end
  return loss
end

-- What P2PCommunicator._communicate (megatron-core 0.16.1 p2p_communication.py) does around a
-- call's receive buffers, for a schedule's ops: shapes(phase, d) before them, synced(what, phase)
-- after. d: which of recv_prev, recv_next, send_prev, send_next the call does. batched: the
-- schedule batches its transfers (batch_p2p_comm: 1F1B, and the interleaved schedule without
-- overlap_p2p_comm). op(spec) declares an op, free(name, phase, tensors) frees tensors.
function M.communicator(cx, par, batched, op, free)
  local varlen = par.pp_variable_seq_lengths == true
  local c = {}
  -- variable_seq_lengths (training.parallel.pp_variable_seq_lengths): _communicate_shapes. It makes
  -- torch.empty((3,), int64) for each receive and torch.tensor(size, int64) (a host-to-device copy)
  -- for each send, in that order; exchanges them by batch_isend_irecv (none where the call moves
  -- nothing), waits, then torch.cuda.synchronize() whatever it exchanged; each received shape read
  -- back by .tolist() (a device-to-host copy). They go as the function returns, as its P2POp
  -- locals do (send_prev_op, recv_prev_op, send_next_op, recv_next_op: the order CPython clears
  -- them in, each op the last holder of its tensor)
  function c.shapes(phase, d)
    if not varlen then return end
    local made = {}
    for _, dir in ipairs { "recv_prev", "recv_next", "send_prev", "send_next" } do
      if d[dir] then
        local send = dir:sub(1, 4) == "send"
        local t = nn.new_tensor(cx, ("_communicate_shapes: %s_shape_tensor"):format(dir), { 3 }, "int64", false, "temp")
        op { name = ("_communicate_shapes: %s_shape_tensor = %s"):format(dir, send and "torch.tensor(size)" or "torch.empty(3)"),
             kind = send and "h2d" or "none", phase = phase, outputs = { t.id }, bytes = send and 24 or nil }
        made[dir] = t
      end
    end
    op { name = "_communicate_shapes: batch_isend_irecv of the shapes then req.wait() then torch.cuda.synchronize()",
         phase = phase, sync = true }
    for _, dir in ipairs { "recv_prev", "recv_next" } do
      local t = made[dir]
      if t then
        op { name = "_communicate_shapes: " .. t.name .. ".tolist()", kind = "d2h", phase = phase, inputs = { t.id },
             bytes = 24, sync = true }
      end
    end
    local gone = {}
    for _, dir in ipairs { "send_prev", "recv_prev", "send_next", "recv_next" } do gone[#gone + 1] = made[dir] end
    if #gone > 0 then free("_communicate_shapes returns: its shape tensors go", phase, gone) end
  end
  -- ModelParallelConfig.batch_p2p_sync (training.parallel.pp_batch_p2p_sync, its default true): a
  -- batched call ends with torch.cuda.synchronize(), so the host waits there for every kernel it
  -- has issued and the next forward or backward starts on an idle GPU
  function c.synced(what, phase)
    if batched and par.pp_batch_p2p_sync ~= false then
      op { name = what .. ": torch.cuda.synchronize() (batch_p2p_sync)", phase = phase, sync = true }
    end
  end
  return c
end

-- Runs this rank's schedule as megatron-core's loop runs it (see the top of this file). forward()
-- runs the model's forward for cx.run.stage. Returns the plan's `pp` table (vrsim/pipeline.lua).
function M.run(cx, pl, mc, forward)
  if pl.virtual > 1 then return require("strategies.megatron_vpp").run(cx, pl, mc, forward) end
  local G = cx.G
  local b, s, h = cx.run.batch, cx.run.seq, mc.hidden
  local pp, rank, m = pl.par.pp, pl.rank, pl.par.pp_microbatches
  local tp = pl.par.tp
  local st = pl.stages[rank + 1]
  local first, last = st.embed, st.head
  -- get_tensor_shapes: (seq / cp / tp under sequence parallelism, micro_batch, hidden), in
  -- config.pipeline_dtype (params_dtype, bf16)
  local shape = { s // tp, b, h }
  local dtype = cx.run.hidden_dtype
  local function op(spec)
    spec.kind = spec.kind or "none"
    spec.inputs, spec.outputs, spec.frees = spec.inputs or {}, spec.outputs or {}, spec.frees or {}
    return G:op(spec)
  end
  -- the last micro-batch's activation and its gradient, which GPTModel keeps past the step (below)
  local kept = {}
  local function free(name, phase, ts)
    local ids = {}
    for _, x in ipairs(ts) do if x and not kept[x.id] then ids[#ids + 1] = x.id end end
    if #ids > 0 then op { name = name, phase = phase, frees = ids } end
  end
  -- torch.empty(tensor_shape, requires_grad=True, dtype=pipeline_dtype)
  local function receive(what, k, phase, rg)
    local name = ("%s of micro-batch %d (P2PCommunicator._communicate: torch.empty)"):format(what, k)
    local id = G:tensorv(name, nn.bytes(shape, dtype), nn.numel(shape), dtype, rg and "activation" or "temp", rg)
    op { name = "recv " .. name, phase = phase, outputs = { id } }
    return { id = id, shape = shape, dtype = dtype, rg = rg, name = name }
  end
  -- Each P2PCommunicator._communicate that moves something (on the first stage recv_forward and
  -- send_backward move nothing and make no call, on the last send_forward and recv_backward):
  -- under variable_seq_lengths its shape exchange first, then the receive buffer (receive above),
  -- the batched transfer, and its synchronize (M.communicator)
  local varlen = pl.par.pp_variable_seq_lengths == true
  local comm = M.communicator(cx, pl.par, true, op, free)
  local shapes, synced = comm.shapes, comm.synced
  -- send_backward (the steady state's last iteration, the cool-down): the activation's gradient
  -- sent back, nothing received
  local function send_backward()
    if first then return end
    shapes("bwd", { send_prev = true })
    synced("send_backward", "bwd")
  end

  cx.mg_pp_microbatches = m
  -- total_num_tokens = torch.zeros([], dtype=torch.int): the schedule's, until it returns
  local ntok = G:tensorv("total_num_tokens", 4, 1, "int32", "temp", false)
  op { name = "total_num_tokens = torch.zeros([]) (int32)", kind = "elementwise", phase = "fwd", outputs = { ntok },
       bytes = 4 }

  -- GPTModel.set_input_tensor keeps each received activation in decoder.input_tensor until the
  -- next forward_step replaces it, and the activation keeps its .grad: the last micro-batch's
  -- pair outlives the step, into the next step's first forward. The step is built once and
  -- replayed, so that pair is a persistent pair of tensors of its sizes, made as the schedule
  -- returns and dropped by the next step's first forward (nothing to drop before the first).
  local carried
  if not first then
    carried = {}
    for i, what in ipairs { "activation", "activation's .grad" } do
      local name = ("GPTModel decoder.input_tensor: the last micro-batch's %s, kept into the next step"):format(what)
      carried[i] = G:tensor { name = name, bytes = nn.bytes(shape, dtype), numel = nn.numel(shape), dtype = dtype,
                              cat = i == 1 and "activation" or "temp", persistent = true }
    end
  end

  local warm = math.min(pp - rank - 1, m)
  local flight = {} -- micro-batch -> its forward: ops, output placeholder, input
  local actions = {}
  local input_tensor, output_tensor_grad, input_tensor_grad -- the schedule's locals
  -- Megatron's optimizer scales the last stage's loss (config.grad_scale_func, which training.py
  -- sets to optimizer.scale_loss) where it runs (Megatron's data parallelism here); the scaled
  -- loss is the schedule's output_tensor local
  local scale_one = last and cx.mg_dp and cx.mg_dp.scale_one
  local scaled_output
  -- the output_tensor local: the micro-batch whose output object it holds (forward_step's return,
  -- then output_tensors.pop(0)); a deallocated output's [1] placeholder goes once neither
  -- output_tensors nor the local holds it
  local output_local
  local function rebind_output(k, why, phase)
    local old = output_local
    output_local = k
    local f = old and flight[old]
    if old ~= nil and old ~= k and f and f.popped and not f.placeholder_gone then
      f.placeholder_gone = true
      free(("%s: micro-batch %d's output placeholder goes"):format(why, old), phase, { f.out })
    end
  end
  local function fwd(k, steady)
    local a0 = G:num_ops()
    -- the input: received (recv_forward, or the previous iteration's send_backward_recv_forward)
    local input
    if not first then
      local old = input_tensor
      -- (recv_forward in the warm-up and before the steady state; after, the previous iteration's
      -- send_backward_recv_forward, which sends that backward's activation gradient too)
      shapes("fwd", { recv_prev = true, send_prev = k > warm })
      input = receive("activation", k, "fwd", true)
      synced(k > warm and "send_backward_recv_forward" or "recv_forward", "fwd")
      input_tensor = { id = input.id }
      -- (rebinding input_tensor drops the previous one; the popped activation goes here)
      if old and old.popped then free("input_tensor rebound: micro-batch " .. old.mb .. "'s activation goes", "fwd", { old }) end
    end
    if carried and k == 0 then
      op { name = "forward_step: set_input_tensor drops the last step's activation", phase = "fwd", frees = carried,
           drop_persistent = true }
    end
    if input and k == m - 1 then kept[input.id] = true end
    local f0 = G:num_ops()
    cx.run.stage = { first = st.first, last = st.last, embed = first, head = last, input = input }
    local out = forward()
    cx.run.stage = nil
    -- (output_tensor rebound by forward_step's return: the previous micro-batch's scaled loss goes)
    if scaled_output then
      free("output_tensor rebound: the previous scaled loss goes", "fwd", { scaled_output })
      scaled_output = nil
    end
    -- (output_tensor = forward_step(...): the popped output the local held goes)
    rebind_output(k, "output_tensor rebound", "fwd")
    -- Megatron's DistributedDataParallel: each weight's post-accumulate hook (main_grad.add_,
    -- .grad dropped) runs in every micro-batch's backward (overlap_grad_reduce off: no_sync_func
    -- is None and nothing is reduced until finalize_model_grads)
    if cx.mg_dp then
      local trainable = {}
      for _, p in ipairs(cx.params) do if p.trainable then trainable[#trainable + 1] = p end end
      require("strategies.megatron_dp").before_backward(cx, cx.mg_dp, cx.params, trainable)
    end
    -- send_forward_recv_backward in the steady state: the gradient of the oldest micro-batch in
    -- flight received (not on the last stage), the previous one dropped as the local rebinds
    local old_grad
    if steady and not last then
      old_grad = output_tensor_grad
      shapes("fwd", { recv_next = true, send_next = true })
      output_tensor_grad = receive("output gradient", k - warm, "fwd", false)
      synced("send_forward_recv_backward", "fwd")
    elseif not last then
      -- send_forward in the warm-up
      shapes("fwd", { send_next = true })
      synced("send_forward", "fwd")
    end
    -- custom_backward runs from the output object, whose storage the deallocation below replaces:
    -- the graph's backward starts at a storage-less handle of it, declared with the forward (the
    -- loss's gradient summed from [1] to its 0-dim shape, a new tensor)
    local hd = G:tensorv(("micro-batch %d's output (custom_backward's start)"):format(k), 0, 0, out.dtype, "temp", true)
    op { name = ("output_tensors.append: micro-batch %d's output"):format(k), phase = "fwd", inputs = { out.id },
         outputs = { hd }, grads = { last and "new" or { pass = 1 } } }
    local f_last = G:num_ops()
    -- deallocate_output_tensor: out.data = torch.empty((1,)), the output object's storage until
    -- the object goes (rebind_output)
    local ph = nn.new_tensor(cx, ("micro-batch %d's output after deallocate_output_tensor"):format(k), { 1 },
                             out.dtype, false, "temp")
    op { name = ("deallocate_output_tensor: micro-batch %d's output .data = torch.empty((1,))"):format(k),
         kind = "elementwise", phase = "fwd", inputs = { out.id }, outputs = { ph.id }, frees = { out.id },
         bytes = nn.bytes({ 1 }, out.dtype) }
    flight[k] = { first = f0, last = f_last, out = ph, start = hd, input = input }
    if old_grad then free("output_tensor_grad rebound: the previous gradient goes", "fwd", { old_grad }) end
    actions[#actions + 1] = { stage = rank, kind = 0, mb = k, op_first = a0, op_end = G:num_ops() }
  end
  local function bwd(k, cooldown)
    local a0 = G:num_ops()
    local f = flight[k]
    -- output_tensor = output_tensors.pop(0): in the cool-down the popped output the local held goes
    f.popped = true
    rebind_output(k, "output_tensor = output_tensors.pop(0)", "bwd")
    if cooldown and not last then
      -- recv_backward: the gradient arrives just before its backward
      local old = output_tensor_grad
      shapes("bwd", { recv_next = true })
      output_tensor_grad = receive("output gradient", k, "bwd", false)
      synced("recv_backward", "bwd")
      free("output_tensor_grad rebound: the previous gradient goes", "bwd", { old })
    end
    -- input_tensor = input_tensors.pop(0): the local now holds this micro-batch's activation
    if f.input then
      local old = input_tensor
      input_tensor = { id = f.input.id, popped = true, mb = k }
      if old and old.popped and old.id ~= f.input.id then free("input_tensor rebound", "bwd", { old }) end
    end
    -- (output_tensor_grad, the schedule's local, holds the received gradient through the backward:
    -- autograd cannot add into it in place)
    local seed, held = (not last) and output_tensor_grad.id or nil, not last
    local scale_seed
    if last and scale_one then
      -- backward_step on the last stage: output_tensor[0] = config.grad_scale_func(output_tensor[0]),
      -- the optimizer's scale_loss (_scale_one * loss: a new [1] fp32 tensor; the deallocated
      -- output's placeholder goes as the list drops it); custom_backward seeds ones_like of it,
      -- MulBackward0 multiplies by _scale_one (a new [1], which autograd sums to the loss's
      -- 0-dim shape and drops). The seed goes when the engine returns; the scaled loss stays in
      -- the schedule's output_tensor until the next forward_step rebinds it.
      local scaled = nn.new_tensor(cx, ("micro-batch %d's loss * _scale_one (grad_scale_func)"):format(k), { 1 },
                                   "fp32", false, "temp")
      op { name = ("backward_step: output_tensor = grad_scale_func(output_tensor) of micro-batch %d"):format(k),
           kind = "elementwise", phase = "bwd", inputs = { f.out.id, scale_one }, outputs = { scaled.id },
           frees = { f.out.id }, bytes = 12 }
      f.placeholder_gone = true
      scale_seed = nn.new_tensor(cx, "custom_backward: ones_like(output)", { 1 }, "fp32", false, "temp")
      op { name = "custom_backward: grad_output = ones_like(output)", kind = "elementwise", phase = "bwd",
           outputs = { scale_seed.id }, bytes = 4 }
      local g = nn.new_tensor(cx, "MulBackward0: grad * _scale_one", { 1 }, "fp32", false, "temp")
      op { name = "MulBackward0: grad * _scale_one", kind = "elementwise", phase = "bwd",
           inputs = { scale_seed.id, scale_one }, outputs = { g.id }, bytes = 12 }
      seed, held = g.id, false
      scaled_output = { id = scaled.id }
    elseif last then
      -- custom_backward(output, None): grad_output = torch.ones_like(output) of the deallocated
      -- loss's [1] placeholder, custom_backward's local until run_backward returns, so held
      -- through the whole backward rather than dropped once the engine has used it
      scale_seed = nn.new_tensor(cx, "custom_backward: ones_like(output)", { 1 }, f.out.dtype, false, "temp")
      op { name = "custom_backward: grad_output = ones_like(output)", kind = "elementwise", phase = "bwd",
           outputs = { scale_seed.id }, bytes = nn.bytes({ 1 }, f.out.dtype) }
      seed, held = scale_seed.id, true
    end
    local dx = G:derive_backward_of(f.first, f.last, f.start, seed, f.input and f.input.id, held)
    if scale_seed then free("custom_backward returns: its ones_like seed goes", "bwd", { scale_seed }) end
    -- backward_step returns input_tensor.grad: the previous one the local held goes
    if dx and k == m - 1 then kept[dx] = true end
    local old = input_tensor_grad
    input_tensor_grad = dx and { id = dx } or nil
    free("input_tensor_grad rebound: the previous activation gradient goes", "bwd", { old })
    actions[#actions + 1] = { stage = rank, kind = 1, mb = k, op_first = a0, op_end = G:num_ops() }
  end
  for k = 0, warm - 1 do fwd(k, false) end
  local remaining = m - warm
  for i = 0, remaining - 1 do
    fwd(i + warm, true)
    bwd(i, false)
    -- the last iteration sets input_tensor = None (the popped activation goes)
    if i == remaining - 1 and input_tensor and input_tensor.popped then
      free("input_tensor = None: micro-batch " .. input_tensor.mb .. "'s activation goes", "bwd", { input_tensor })
      input_tensor = nil
    end
    if i == remaining - 1 then send_backward() end
  end
  for i = 0, warm - 1 do
    bwd(remaining + i, true)
    send_backward()
  end
  -- config.finalize_model_grads_func (training.py sets finalize_model_grads) runs before the
  -- schedule returns: the grad buffer's reduction over dp and the norms' over tp. The untied
  -- model has no word-embedding gradient to all-reduce between the first and the last stage
  -- (_get_shared_word_embedding_weight: None unless share_embeddings_and_output_weights), and
  -- rope no position embedding.
  if cx.mg_dp then require("strategies.megatron_dp").finalize_schedule(cx) end
  -- the schedule returns: its locals go
  -- (a list without holes: ipairs would stop at a nil local and leave the rest, total_num_tokens
  -- among them, to go after their last use instead)
  local locals = {}
  local last_out = output_local and flight[output_local]
  for _, x in ipairs { input_tensor and input_tensor.popped and input_tensor or false, output_tensor_grad or false,
                       input_tensor_grad or false, scaled_output or false,
                       last_out and not last_out.placeholder_gone and last_out.out or false, { id = ntok } } do
    if x then locals[#locals + 1] = x end
  end
  free("forward_backward_pipelining_without_interleaving returns: its locals go", "bwd", locals)
  if carried then
    local ids = {}
    for id in pairs(kept) do ids[#ids + 1] = id end
    table.sort(ids)
    op { name = "the last micro-batch's activation and its .grad, held by GPTModel", phase = "bwd", frees = ids }
    op { name = "GPTModel decoder.input_tensor kept into the next step", phase = "bwd", outputs = carried }
  end
  cx.notes[#cx.notes + 1] = M.note(pl)
  cx.notes[#cx.notes + 1] = require("strategies.megatron_tp").buffer_note(cx)
  local stage_layers = {}
  for i, x in ipairs(pl.stages) do stage_layers[i] = x.last - x.first + 1 end
  return { ranks = pp, stages = pl.n_stages, virtual = 1, microbatches = m, schedule = "1F1B", rank = rank,
           actions = actions, send_bytes = nn.bytes(shape, dtype), stage_layers = stage_layers, lockstep = false,
           -- (variable_seq_lengths: each transfer's shape, 3 int64, exchanged first)
           shape_bytes = varlen and 24 or nil }
end

-- The run's note on the pipeline.
function M.note(pl)
  local st = pl.stages[pl.rank + 1]
  return ("Megatron-LM's pipeline (megatron-core 0.16.1, non-interleaved 1F1B): stage %d of %d holds layers %d-%d%s%s; "
          .. "%d warm-up forwards of %d micro-batches; each received activation and gradient a new tensor, each "
          .. "output deallocated once sent (deallocate_pipeline_outputs)"):format(pl.rank, pl.par.pp, st.first, st.last,
          st.embed and ", the embedding" or "", st.head and ", the final norm, output layer and loss" or "",
          math.min(pl.par.pp - pl.rank - 1, pl.par.pp_microbatches), pl.par.pp_microbatches)
    .. (pl.par.pp_batch_p2p_sync == false and "; no torch.cuda.synchronize() after the batched transfers (batch_p2p_sync off)"
        or "; torch.cuda.synchronize() after each batched transfer (batch_p2p_sync, its default)")
    .. (pl.par.pp_variable_seq_lengths and M.VARLEN_NOTE or "")
end

-- The run's note under variable_seq_lengths (either schedule).
M.VARLEN_NOTE = "; variable_seq_lengths: each transfer's shape exchanged first (an int64 tensor of 3 a direction, a "
  .. "synchronize and a .tolist() a received shape), every micro-batch simulated at training.seq (the longest a "
  .. "step meets); megatron-core 0.16.1 refuses it beside the default --moe-token-dispatcher-type allgather, a dense "
  .. "model's too: the run passes alltoall"

return M
