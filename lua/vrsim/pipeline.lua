-- pipeline.lua: pipeline parallelism as torchtitan sets it up (torchtitan/distributed/
-- pipeline_parallel.py) and torch.distributed.pipelining runs it (schedules.py, stage.py).
--
-- The decoder is cut into stages (split): torchtitan's default counts the embeddings and the
-- final norm + head as one layer each (pipeline_parallel_first/last_stage_less_layers = 1) and
-- deals the layers out evenly, the first stages taking one more where they do not divide; or the
-- scenario gives each stage's layer count. Stage s sits on pipeline rank s % pp (torch's loop
-- placement), so a rank holds `virtual` stages under the interleaved schedules.
--
-- One rank is simulated per plan (the pipeline rank of hardware.rank: pp is the outermost
-- dimension of torchtitan's mesh, ["pp", "dp_replicate", "dp_shard", "cp", "tp"]). Its graph holds
-- its stages' parameters only (the module tree pruned as _split_module prunes a deep copy), and
-- declares its schedule's actions in order (vrsim/pp_schedules.lua): a forward runs the stage's
-- part of the model on the micro-batch; a backward derives that micro-batch's backward then
-- (graph_derive_backward_of), after whatever forwards the schedule ran since. So what the rank
-- holds at each moment, and its peak, come from replaying the schedule. What PipelineStage
-- allocates besides the model: a receive buffer per micro-batch for the activations coming in
-- (not on the first stage) and one for the gradients coming back (not on the last), made once
-- and kept (_prepare_forward_infra, _create_grad_recv_info); the stage's outputs are held until
-- their backward (fwd_cache), the input gradients until sent.
local S = require "vrsim.pp_schedules"

local P = {}

local function fail(msg) error("training.parallel: " .. msg, 0) end

-- torchtitan's _generate_llm_fqn_per_model_part by counts: per stage { first, last } decoder layers
-- (last < first: none) and whether it holds the embeddings / the norm and head.
function P.even_split(n_stages, n_layers, input_weight, output_weight)
  input_weight, output_weight = input_weight or 1, output_weight or 1
  local eff = n_layers + input_weight + output_weight
  if n_stages > eff then
    fail(("Number of stages (%d) cannot be greater than effective layers (%d) (torchtitan)"):format(n_stages, eff))
  end
  local per, extra = eff // n_stages, eff % n_stages
  if input_weight > per or output_weight > per then
    fail(("%s_weight (%d) exceeds minimum layers per stage (%d) (torchtitan): fewer stages"):format(
      input_weight > per and "input" or "output", input_weight > per and input_weight or output_weight, per))
  end
  local stages, cur = {}, 0
  for s = 0, n_stages - 1 do
    local n = per + (s < extra and 1 or 0)
    if s == 0 then n = n - input_weight elseif s == n_stages - 1 then n = n - output_weight end
    if n_stages == 1 then n = n_layers end
    local take = math.max(0, math.min(n, n_layers - cur))
    stages[s + 1] = { first = cur, last = cur + take - 1, embed = s == 0, head = s == n_stages - 1 }
    cur = cur + take
  end
  return stages
end

-- A given split: counts[s] decoder layers on stage s, in order, all of them.
function P.given_split(counts, n_stages, n_layers)
  if #counts ~= n_stages then
    fail(("pp_stage_layers names %d stages; the pipeline has %d (pp x stages per rank)"):format(#counts, n_stages))
  end
  local stages, cur = {}, 0
  for s = 1, n_stages do
    local n = counts[s]
    if math.type(n) ~= "integer" or n < 0 then fail(("pp_stage_layers[%d] must be an integer >= 0"):format(s)) end
    stages[s] = { first = cur, last = cur + n - 1, embed = s == 1, head = s == n_stages }
    cur = cur + n
  end
  if cur ~= n_layers then
    fail(("pp_stage_layers adds up to %d layers; the model has %d"):format(cur, n_layers))
  end
  return stages
end

-- Stages per rank as torchtitan's _get_pipeline_metadata decides them: 1 for GPipe and 1F1B, 2
-- for the interleaved ones, or from pp_layers_per_stage.
local function virtual_stages(par, n_layers)
  local single = S.NAMES[par.pp_schedule] and S.NAMES[par.pp_schedule].single
  if par.pp_layers_per_stage then
    local n = -(-(n_layers + 2) // par.pp_layers_per_stage) -- ceil((layers + in + out) / per)
    if n % par.pp ~= 0 then
      fail(("Number of virtual stages (%d) must be divisible by pipeline parallel size (%d) (torchtitan)"):format(n, par.pp))
    end
    return n // par.pp
  end
  if par.pp_stage_layers then return math.max(1, #par.pp_stage_layers // par.pp) end
  return single and 1 or 2
end

-- The pipeline of a scenario (nil without one: pp = 1): its settings, stages, this plan's rank,
-- and the rank's schedule order. Refuses what is not modelled, naming it.
function P.layout(cfg, n_layers, mesh)
  local t, hw = cfg.training, cfg.hardware
  -- the degrees as the device mesh read and resolved them (vrsim/mesh.lua: dp_shard = -1 made
  -- the rest; pp_microbatches one per stage unless given)
  local par = { pp_schedule = mesh.pp_schedule, pp_microbatches = mesh.pp_microbatches or mesh.degrees.pp,
                pp_layers_per_stage = mesh.pp_layers_per_stage, pp_stage_layers = mesh.pp_stage_layers,
                pp_keep_outputs = mesh.pp_keep_outputs, pp_microbatch_group = mesh.pp_microbatch_group,
                pp_overlap_p2p_comm = mesh.pp_overlap_p2p_comm,
                pp_overlap_p2p_warmup_flush = mesh.pp_overlap_p2p_warmup_flush,
                pp_variable_seq_lengths = mesh.pp_variable_seq_lengths, pp_batch_p2p_sync = mesh.pp_batch_p2p_sync }
  for k, v in pairs(mesh.degrees) do par[k] = v end
  -- (without a pipeline the device mesh's other dimensions are vrsim/mesh.lua's: it refuses
  -- what is not modelled)
  if par.pp == 1 then return nil end
  -- Megatron-LM's pipeline (tp_impl = "megatron"): its own split and schedule loop
  -- (strategies/megatron_pp.lua), what it does not model refused first
  local MGP = mesh.tp_impl == "megatron" and require("strategies.megatron_pp")
  if MGP then
    local why = MGP.refusal(t, mesh, n_layers)
    if why then error("training.parallel.tp_impl = \"megatron\": " .. why, 0) end
  elseif mesh.pp_virtual_stages then
    fail(("pp_virtual_stages = %d: Megatron's model chunks (tp_impl = \"megatron\"); torchtitan's stages per rank "
          .. "come from pp_schedule and pp_layers_per_stage"):format(mesh.pp_virtual_stages))
  end
  local function no(what, why) fail(("%s with pipeline parallelism is not modelled%s"):format(what, why or "")) end
  -- Context parallelism inside each stage, as torchtitan 9dec370's train.py runs it: the step's
  -- pp_schedule.step runs inside the context_parallel context over world_mesh["cp"], which shards
  -- the batch's input_ids and labels along the sequence before the schedule cuts them into
  -- micro-batches, so every stage runs its layers on the rank's s/cp tokens, each SDPA call the
  -- ring over the cp group (strategies/cp.lua, which refuses what the ring does not take), and
  -- PipelineStage's runtime shape inference sizes what the stages pass (and their receive
  -- buffers) at s/cp (s/(cp tp) with sequence parallelism). Checked for the single-stage
  -- schedules (Table 6 of torchtitan's 2024-12 benchmark ran 1F1B); the multi-stage ones'
  -- lockstep time steps around the ring are not.
  if par.cp > 1 and not (S.NAMES[par.pp_schedule] and S.NAMES[par.pp_schedule].single) then
    no(("cp > 1 beside pp_schedule \"%s\""):format(par.pp_schedule),
       ": context parallelism is modelled inside the single-stage schedules (1F1B, GPipe), not checked in the multi-stage ones")
  end
  if par.ep > 1 then no("ep > 1", ": expert parallelism is not built") end
  -- FSDP2 over dp_shard (and dp_replicate: HSDP, or a shard group of one) as torchtitan applies
  -- it to each stage's model part (strategies/fsdp.lua M.pp_keep); the mesh set training.strategy =
  -- "fsdp2" from the degrees, and zero.shard_group = dp_shard x cp where dp_replicate > 1
  -- (torchtitan applies FSDP where dp_shard or cp is enabled, over dp_shard x cp: with dp_shard 1
  -- and cp > 1 each stage is still fully_shard'ed over its cp ranks)
  -- (Megatron's pipeline takes its DistributedDataParallel, strategy "ddp": strategies/megatron_dp.lua)
  if t.strategy ~= "none" and not (t.strategy == "fsdp2" and par.dp_shard * par.cp * par.dp_replicate > 1)
     and not (MGP and t.strategy == "ddp") then
    no("training.strategy = \"" .. t.strategy .. "\"", " yet (set parallel's degrees instead: dp_shard and dp_replicate are FSDP2)")
  end
  -- (nor reduce_dtype, MixedPrecisionPolicy's, which torchtitan sets: the accumulated gradients
  -- and their one reduce-scatter are in it, strategies/fsdp.lua M.pp_release)
  local zero_given = {}
  for k in pairs(t.zero or {}) do
    if not (k == "shard_group" and par.dp_replicate > 1 and t.zero.shard_group == par.dp_shard * par.cp)
       and k ~= "reduce_dtype" then zero_given[#zero_given + 1] = k end
  end
  if #zero_given > 0 then
    table.sort(zero_given)
    no("training.zero", " (" .. table.concat(zero_given, ", ") .. "): FSDP2 runs as torchtitan's default for a pipeline (reshard_after_forward=False, gradients reduced once a step)")
  end
  if t.inference then no("inference") end
  if t.grad_accum ~= 1 then no("grad_accum", ": the schedule's pp_microbatches are the micro-batches") end
  if t.device_map ~= "none" then no("device_map") end
  if t.optimizer_in_backward then no("optimizer_in_backward") end
  if t.activation_offload then no("activation_offload") end
  if t.quant ~= "none" or require("strategies.lora").wanted(t) then no("quantization or LoRA") end
  if t.loss ~= "full" then no("training.loss = \"" .. t.loss .. "\"") end
  local world = par.pp * par.tp * par.cp * par.dp_replicate * par.dp_shard
  if hw.count ~= world then
    fail(("the mesh has %d ranks (pp %d x dp_replicate %d x dp_shard %d x cp %d x tp %d); hardware.count is %d")
         :format(world, par.pp, par.dp_replicate, par.dp_shard, par.cp, par.tp, hw.count))
  end
  local v = MGP and MGP.virtual(mesh) or virtual_stages(par, n_layers)
  -- (torch's schedules' checks; Megatron's loop takes fewer micro-batches than stages, its
  -- warm-up clamped to them, and runs its own order: strategies/megatron_pp.lua)
  local msg = not MGP and S.check(par.pp_schedule, par.pp, par.pp_microbatches, v)
  if msg then fail(msg) end
  local n_stages = par.pp * v
  local stages = MGP and MGP.split(par.pp, n_layers, v)
                 or par.pp_stage_layers and P.given_split(par.pp_stage_layers, n_stages, n_layers)
                 or P.even_split(n_stages, n_layers)
  local rank = hw.rank // (hw.count // par.pp)
  return { par = par, virtual = v, n_stages = n_stages, stages = stages, rank = rank,
           order = not MGP and S.order(par.pp_schedule, par.pp, par.pp_microbatches, v, rank) or nil }
end

-- Removes from the module tree what this rank's stages do not hold: the other decoder layers,
-- the embeddings but on stage 0, the final norm and the head but on the last (torchtitan's
-- _split_module). A tied head cannot be cut from its embeddings.
function P.prune(pl, root, mc)
  if mc.tie then fail("tie_word_embeddings: the head shares the embeddings' weight, which pipeline stages cannot split") end
  local keep, embed, head = {}, false, false
  for s = pl.rank, pl.n_stages - 1, pl.par.pp do
    local st = pl.stages[s + 1]
    for l = st.first, st.last do keep[l] = true end
    embed, head = embed or st.embed, head or st.head
  end
  local function drop(parent, key)
    parent.children[key] = nil
    for i, k in ipairs(parent.order) do if k == key then table.remove(parent.order, i); break end end
  end
  local model = root.children.model
  local layers = model and model.children.layers
  if not (model and model.pipeline_stages and layers) then
    fail(("%s: its forward does not run as pipeline stages in vrsim (the Llama tree's families do)"):format(root.cls))
  end
  for l = 0, mc.layers - 1 do if not keep[l] then drop(layers, tostring(l)) end end
  if not embed then drop(model, "embed_tokens") end
  if not head then drop(model, "norm"); drop(root, "lm_head") end
end

-- Runs this rank's schedule on the graph: each action declared in turn (see the top of this
-- file). forward() runs the model's forward for cx.run.stage. Returns the plan's `pp` table.
function P.run(cx, pl, mc, forward)
  if cx.mesh and cx.mesh.tp_impl == "megatron" then return require("strategies.megatron_pp").run(cx, pl, mc, forward) end
  local G, b, s, hidden = cx.G, cx.run.batch, cx.run.seq, mc.hidden
  local dtype = cx.run.hidden_dtype
  local m = pl.par.pp_microbatches
  -- With tensor parallelism inside the stage (torchtitan parallelizes each stage's module before
  -- the schedule is built), the stage's output is the last block's: with sequence parallelism a
  -- local Shard(1) tensor, 1/tp of the sequence, and that is what the stage sends and its
  -- neighbour's buffer receives (the norms and the head's input all-gather it on the last stage).
  local tp = pl.par.tp
  if s % tp ~= 0 then fail(("training.seq = %d is not a multiple of tp = %d (sequence parallelism shards it)"):format(s, tp)) end
  local s_local = s // tp
  local act_bytes = b * s_local * hidden * require("vrsim.nn").bytes({ 1 }, dtype)
  local function buffers(stage, what, rg, cat)
    local list = {}
    for k = 0, m - 1 do
      local name = ("stage %d %s buffer, micro-batch %d"):format(stage, what, k)
      local id = G:tensor { name = name, bytes = act_bytes, numel = b * s_local * hidden, dtype = dtype, cat = cat,
                            persistent = true, requires_grad = rg }
      G:op { name = name, kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
      list[k] = { id = id, shape = { b, s_local, hidden }, dtype = dtype, rg = rg, name = name }
    end
    return list
  end
  local recv_act, recv_grad = {}, {}
  for st = pl.rank, pl.n_stages - 1, pl.par.pp do
    if st > 0 then recv_act[st] = buffers(st, "activation receive", true, "activation") end
    if st < pl.n_stages - 1 then recv_grad[st] = buffers(st, "gradient receive", false, "temp") end
  end
  local fwd, actions = {}, {}
  local KIND = { F = 0, B = 1, I = 2, W = 3 }
  -- pp_keep_outputs: PipelineStage before torch 2.8 appended every forward's output to
  -- output_chunks (forward_one_chunk), which only the next step's clear_runtime_states empties.
  -- The step is built once and replayed, so the outputs kept past it are persistent tensors of
  -- their sizes, made at the step's end and dropped at the next step's start (nothing to drop
  -- before the first): a stage's is what it sends, the last stage's the logits of its vocabulary
  -- shard (b x s x vocab / tp in the layers' dtype; checked against the forward's)
  local keep, carried, drop = nil, {}, {}
  if pl.par.pp_keep_outputs then
    keep = {}
    local nn = require "vrsim.nn"
    local head_bytes = b * s * (mc.vocab // tp) * nn.bytes({ 1 }, dtype)
    for _, a in ipairs(pl.order) do
      if a.kind == "F" then
        local head = pl.stages[a.stage + 1].head
        local nb = head and head_bytes or act_bytes
        local id = G:tensor { name = ("output_chunks: stage %d micro-batch %d, kept into the next step"):format(a.stage, a.mb),
                              bytes = nb, numel = nb // nn.bytes({ 1 }, dtype), dtype = dtype, cat = "activation",
                              persistent = true }
        carried[#carried + 1] = { id = id, bytes = nb }
        drop[#drop + 1] = id
      end
    end
    G:op { name = "step(): clear_runtime_states drops the last step's output_chunks", kind = "none", phase = "fwd",
           inputs = {}, outputs = {}, frees = drop, drop_persistent = true }
  end
  for _, a in ipairs(pl.order) do
    local st, k = pl.stages[a.stage + 1], a.mb
    local op0 = G:num_ops()
    if a.kind == "F" then
      local input = recv_act[a.stage] and recv_act[a.stage][k]
      if input then
        G:op { name = ("recv activation: stage %d micro-batch %d"):format(a.stage, k), kind = "none",
               phase = "fwd", inputs = { input.id }, outputs = {}, frees = {} }
      end
      local run_stage = { first = st.first, last = st.last, embed = st.embed, head = st.head, input = input }
      cx.run.stage = run_stage
      local f0 = G:num_ops()
      local out = forward()
      cx.run.stage = nil
      if keep then
        -- the stage's output: what it sends, or on the last stage the model's output, the logits
        local o = st.head and run_stage.logits or (not st.head and out) or nil
        if not o then fail("pp_keep_outputs: the last stage's forward made no whole logits (a fused or chunked loss) to keep") end
        local nb = o.nb or require("vrsim.nn").bytes(o.shape, o.dtype)
        local c = carried[#keep + 1]
        if nb ~= c.bytes then
          fail(("pp_keep_outputs: stage %d's output is %d bytes, not the %d kept for it (logits in another dtype than the layers' is not modelled)")
               :format(a.stage, nb, c.bytes))
        end
        keep[#keep + 1] = { id = o.id, bytes = nb, dtype = o.dtype, head = st.head }
      end
      fwd[a.stage * m + k] = { first = f0, last = G:num_ops(), out = out, input = input }
      if not st.head then
        G:op { name = ("send activation: stage %d micro-batch %d"):format(a.stage, k), kind = "none",
               phase = "fwd", inputs = { out.id }, outputs = {}, frees = {} }
      end
    elseif a.kind == "B" then
      local f = fwd[a.stage * m + k]
      local grad = recv_grad[a.stage] and recv_grad[a.stage][k]
      if grad then
        G:op { name = ("recv gradient: stage %d micro-batch %d"):format(a.stage, k), kind = "none",
               phase = "bwd", inputs = { grad.id }, outputs = {}, frees = {} }
      end
      local dx = G:derive_backward_of(f.first, f.last, f.out.id, grad and grad.id, f.input and f.input.id)
      if dx then
        G:op { name = ("send gradient: stage %d micro-batch %d"):format(a.stage, k), kind = "none",
               phase = "bwd", inputs = { dx }, outputs = {}, frees = { dx } }
      end
    else
      fail(("pp_schedule %s: the backward split into input and weight gradients (%s actions) is not "
            .. "built in the graph yet; its order is (vrsim/pp_schedules.lua)"):format(pl.par.pp_schedule, a.kind))
    end
    actions[#actions + 1] = { stage = a.stage, kind = KIND[a.kind], mb = k, slot = a.slot, op_first = op0,
                              op_end = G:num_ops() }
  end
  if keep then
    -- the last stage's step() returns _merge_outputs(output_chunks): torch.cat of the micro-batches'
    -- logits into one new tensor, which torchtitan's train.py does not keep
    local heads, bytes = {}, 0
    for _, o in ipairs(keep) do if o.head then heads[#heads + 1] = o.id; bytes = bytes + o.bytes end end
    if #heads > 0 then
      local merged = G:tensor { name = "step(): _merge_outputs, the last stage's outputs concatenated", bytes = bytes,
                                numel = bytes // require("vrsim.nn").bytes({ 1 }, keep[#keep].dtype), dtype = keep[#keep].dtype,
                                cat = "temp" }
      G:op { name = "step(): _merge_outputs (torch.cat of output_chunks)", kind = "copy", phase = "bwd",
             inputs = heads, outputs = { merged }, frees = {}, bytes = 2 * bytes }
      G:op { name = "train.py drops step()'s return", kind = "none", phase = "bwd", inputs = { merged },
             outputs = {}, frees = { merged } }
    end
    -- output_chunks outlives the step: its tensors pass to the persistent ones (made as they are
    -- freed: the allocator reuses the blocks)
    local ids = {}
    for i, o in ipairs(keep) do ids[i] = o.id end
    G:op { name = "output_chunks after the schedule", kind = "none", phase = "bwd", inputs = ids, outputs = {}, frees = ids }
    G:op { name = "output_chunks kept into the next step", kind = "none", phase = "bwd", inputs = {},
           outputs = drop, frees = {} }
  end
  local stage_layers = {}
  for i, st in ipairs(pl.stages) do stage_layers[i] = st.last - st.first + 1 end
  return { ranks = pl.par.pp, stages = pl.n_stages, virtual = pl.virtual, microbatches = m,
           schedule = pl.par.pp_schedule, rank = pl.rank, actions = actions, send_bytes = act_bytes,
           stage_layers = stage_layers,
           -- the multi-stage schedules run their pipeline_order time step by time step, each
           -- step's sends and receives waited for together (sim/pipeline.h); GPipe's and 1F1B's
           -- _step_microbatches post each transfer when its data needs it
           lockstep = not S.NAMES[pl.par.pp_schedule].single }
end

-- The parts of the tree a stage runs (llama.lua's model_forward reads cx.run.stage): whether
-- decoder layer l is the stage's.
function P.runs_layer(stage, l) return stage == nil or (l >= stage.first and l <= stage.last) end

return P
