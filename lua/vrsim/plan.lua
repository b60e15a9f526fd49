-- plan.lua: turns a scenario table into a plan the C core runs.
--
-- 1. checks every field against the schema and applies --set overrides (lua/vrsim/schema.lua);
-- 2. joins the GPU, its links and host from the catalogs (lua/vrsim/hardware.lua);
-- 3. notes the fields given that the run does not read (lua/vrsim/unread.lua);
-- 4. builds the forward graph with the model builder, the strategy's passes, derives backward (C),
--    adds the optimizer; a sweep's next point reuses the graph where it may (lua/vrsim/reuse.lua);
-- 5. finishes the plan with what the report shows (counts: lua/vrsim/counts.lua).
local nn = require "vrsim.nn"
local gpus = require "hw.gpus"
local memory = require "hw.memory"
local names = require "vrsim.names"
local schema = require "vrsim.schema"
local hardware = require "vrsim.hardware"
local reuse = require "vrsim.reuse"
local unread = require "vrsim.unread"
local counts_mod = require "vrsim.counts"
local ordered_keys = names.ordered_keys
local fail, fail_given = schema.fail, schema.fail_given
local unknown_zero_knob, unknown_lora_key = schema.unknown_zero_knob, schema.unknown_lora_key
local bad_zero_value = schema.bad_zero_value
local device_of = hardware.device_of
local canonical, graph_key, noting_reads = reuse.canonical, reuse.graph_key, reuse.noting_reads
local check_size_read, inert_given, build_read = unread.check_size_read, unread.inert_given, unread.build_read
local param_counts = counts_mod.param_counts

local P = {}

-- (what other modules and the C side reach through vrsim.plan)
P.closest, P.keys, P.shown = names.closest, names.keys, names.shown
P.normalize, P.check_field, P.check_hf_config = schema.normalize, schema.check_field, schema.check_hf_config
P.bad_zero_value, P.field_type, P.diffusion = schema.bad_zero_value, schema.field_type, schema.diffusion
P.resolve_gpu = hardware.resolve_gpu

-- Building a plan, in three parts: prepare (the scenario normalized, its GPU and links found, the
-- inputs checked), build_graph (the model, the strategy and the optimizer as ops) and finish (what
-- the report needs). P.build runs all three. A graph that did not read what distinguishes two
-- scenarios is the same for both, so P.rebuild prepares a new one and, where the graph P.build
-- made last read nothing that differs, finishes it with that graph (vrsim sweep and shop, whose
-- points often differ only in the GPU: sim/points.c).

-- st: the prepared scenario (prepare's table).
local function prepare(scn, sets, file, src)
  local cfg, ctx = P.normalize(scn, sets, file, src)
  for _, s in ipairs(sets) do if s:match("^gpu=") or s:match("^hardware%.gpu=") then ctx.from_set = true end end
  -- the device mesh (training.parallel, or the strategy and count it shortens), before the links:
  -- a layout sets the data-parallel strategy it implies (lua/vrsim/mesh.lua)
  local mesh_mod = require "vrsim.mesh"
  local mesh_sets = { "count", "hardware.count", "strategy", "training.strategy" }
  for k in pairs(mesh_mod.FIELDS) do
    mesh_sets[#mesh_sets + 1] = "parallel." .. k
    mesh_sets[#mesh_sets + 1] = "training.parallel." .. k
  end
  local okm, mesh = pcall(mesh_mod.resolve, cfg, ctx.given)
  if not okm then fail_given(ctx, sets, mesh_sets, "parallel", "training", tostring(mesh)) end
  local nm = mesh_mod.not_modelled(mesh)
  if nm then fail_given(ctx, sets, mesh_sets, "parallel", "training", nm) end
  ctx.mesh, ctx.mesh_sets = mesh, mesh_sets
  local dev, g = device_of(cfg, ctx)
  -- Whether building the graph reads the allocator settings: the build sees cfg.allocator through
  -- a table that notes every read (and write); when nothing touched it, the graph is the same
  -- whatever the allocator settings, and a run that only changes them reuses it (cmd_run's "what
  -- would help" row for expandable segments)
  local alloc_real, alloc_read = cfg.allocator, false
  cfg.allocator = setmetatable({}, {
    __index = function(_, k) alloc_read = true; return alloc_real[k] end,
    __newindex = function(_, k, v) alloc_read = true; alloc_real[k] = v end,
    __pairs = function() alloc_read = true; return next, alloc_real, nil end,
    __len = function() alloc_read = true; return #alloc_real end,
  })
  -- the rank simulated is one of the run's (ZeRO-1's partition and a device map pick by it)
  if cfg.hardware.rank >= cfg.hardware.count then
    fail_given(ctx, sets, { "rank", "hardware.rank", "count", "hardware.count" }, "rank", "hardware",
               ("hardware.rank = %d: the ranks of %d GPUs are 0 to %d"):format(
               cfg.hardware.rank, cfg.hardware.count, cfg.hardware.count - 1))
  end
  check_size_read(cfg, ctx, sets)
  local t0 = cfg.training
  if t0.data then
    require("strategies.data").apply(cfg, ctx, function(m) fail_given(ctx, sets, { "training.seq", "seq" }, "data", "training", m) end)
  end
  if t0.attention == "flex" and P.diffusion(cfg.model.arch) then
    fail(ctx, "attention", "training", ("training.attention = flex: transformers' flex_attention_forward; arch %s's "
         .. "attention is diffusers'"):format(cfg.model.arch))
  end
  if t0.attention_mask == "block_diagonal" and P.diffusion(cfg.model.arch) then
    fail(ctx, "attention_mask", "training", ("training.attention_mask = block_diagonal: a language model's packed "
         .. "rows; arch %s's batches are images"):format(cfg.model.arch))
  end
  if t0.float8 then
    local why = require("strategies.float8").refusal(t0, g)
    if why then fail(ctx, "float8", "training", why) end
  end
  if t0.dpo then
    local why = require("strategies.dpo").refusal(t0)
    if why then fail(ctx, "dpo", "training", why) end
    -- the rows' length is the collator's (prompt + completion, cut to max_length)
    if ctx.given["training.seq"] then
      fail_given(ctx, sets, { "training.seq", "seq" }, "seq", "training", "training.seq is set by training.dpo "
                 .. "(prompt_length + completion_length, cut to max_length): leave it out")
    end
    t0.seq = require("strategies.dpo").settings(t0.dpo).len
  end
  if t0.generate then
    local why = require("strategies.generate").refusal(t0)
    if why then fail(ctx, "generate", "training", why) end
    for _, k in ipairs { "seq", "micro_batch" } do
      if ctx.given["training." .. k] then
        fail_given(ctx, sets, { "training." .. k, k }, k, "training", ("training.%s is set by training.generate "
                   .. "(prompt, batch): leave it out"):format(k))
      end
    end
    local gs = require("strategies.generate").settings(t0.generate)
    t0.seq, t0.micro_batch = gs.prompt, gs.batch
  end
  local st = { cfg = cfg, ctx = ctx, dev = dev, g = g, t0 = t0, sets = sets, alloc_real = alloc_real,
               alloc_read = function() return alloc_read end }
  -- (a DeepSpeed config sets the strategy itself, over hardware.count: not beside a mesh)
  if t0.deepspeed and mesh.given then
    fail(ctx, "deepspeed", "training", "training.deepspeed and training.parallel: a DeepSpeed config's data "
         .. "parallelism runs over hardware.count, a layout names its own: give one of them")
  end
  if t0.deepspeed then require("strategies.deepspeed").apply(cfg, ctx, function(m) fail(ctx, "deepspeed", "training", m) end) end
  -- training.zero's knobs are checked whether or not a strategy uses them: a typo is an error
  for k, v in pairs(t0.zero or {}) do
    local msg = unknown_zero_knob(k) or bad_zero_value(k, v)
    if msg then fail(ctx, "zero", "training", msg) end
  end
  -- training.lora's keys likewise: one peft's LoraConfig as modelled does not take is an error,
  -- never a default silently in its place
  for _, k in ipairs(ordered_keys(t0.lora or {})) do
    local msg = unknown_lora_key(k)
    if msg then fail_given(ctx, sets, { "lora." .. tostring(k), "training.lora." .. tostring(k) }, "lora", "training", msg) end
  end
  -- a Hugging Face config's sizes are checked before a model is built from them
  if cfg.model.config ~= nil then
    local c = cfg.model.config
    local okc, msg = pcall(function()
      if type(c) == "string" then c = require("vrsim.core").read_config(c) end
      P.check_hf_config(c, type(cfg.model.config) == "string" and cfg.model.config or "model.config")
    end)
    if not okc then fail(ctx, "config", "model", (tostring(msg):gsub("^[^:]*plan%.lua:%d+: ", ""))) end
  end
  cfg.notes = cfg.notes or {}
  for _, n in ipairs(inert_given(cfg, ctx)) do cfg.notes[#cfg.notes + 1] = n end
  for _, n in ipairs(mesh.notes) do cfg.notes[#cfg.notes + 1] = n end
  if cfg.training.checkpointing and cfg.training.checkpoint_reentrant and not cfg.training.inference then
    cfg.notes[#cfg.notes + 1] = "training.checkpoint_reentrant: use_reentrant=True changes only what an "
      .. "autograd Function keeps outside save_for_backward (bitsandbytes' MatMul4Bit before 0.43.2); "
      .. "its other differences from the non-reentrant checkpoint (one backward node a region, the "
      .. "region recomputed whole) are not modelled"
  end
  if mesh.given then
    cfg.notes[#cfg.notes + 1] = mesh_mod.describe(mesh, cfg.hardware.rank, cfg.hardware.gpus_per_node,
      dev.interconnect:match("^[^+]*"), cfg.hardware.network)
  end
  st.mesh = mesh
  st.key = graph_key(st)
  st.notes_before = #cfg.notes
  return st
end

-- The graph of a prepared scenario, what it read of the hardware section and of the GPU's catalog
-- entry (name -> canonical value; P.rebuild compares them) and the notes it added.
local function build_graph(st)
  local cfg, ctx, dev, g, t0 = st.cfg, st.ctx, st.dev, st.g, st.t0
  local reads = {}
  local G = require("vrsim.core").new_graph()
  local cx = nn.context(G)
  cx.mesh = st.mesh
  cx.no_grad = t0.inference
  cx.layers_once = t0.build_layers_once
  cx.arch = nn.arch_class(g.arch, g.compute_capability)
  cx.gpu = noting_reads(g, "gpu.", reads)
  cx.optim_host = dev.profile and dev.profile.optim_host
  cx.bnb_optim = dev.bnb_optim
  cx.bnb = require("strategies.bnb_version").era(t0.bitsandbytes)
  cx.ckpt_reentrant = t0.checkpointing and t0.checkpoint_reentrant
  cx.host_classes = dev.profile and dev.profile.host_classes
  cx.fsdp2_hook_us = dev.profile and dev.profile.fsdp2_hook_us
  -- where the attention rows of a mask of unaligned rows and of flex attention come from (their
  -- ops' notes say so)
  cx.sdpa_unaligned_from = require("hw.carry").sdpa_rows_from(dev, "unaligned")
  cx.sdpa_flex_from = require("hw.carry").sdpa_rows_from(dev, "flex")
  local hw = cfg.hardware
  cx.card_bytes = memory.total(dev.total_bytes, hw) -- from_pretrained's warmup caps at it
  cfg.hardware = noting_reads(hw, "hardware.", reads)
  local dp = nil
  if t0.strategy ~= "none" then
    -- (on one GPU the strategy still shapes memory: ZeRO-Offload on one card is common)
    dp = require "strategies.dp"
    dp.setup(cx, cfg)
  end
  -- (a config the arch does not read is an error at the scenario's model.arch or model.config)
  local okb, builder = pcall(P.builder, cfg)
  if not okb then
    local m = tostring(builder)
    -- (the line of the model key the message names: arch, use_cache, repeat_kv; else config's)
    fail(ctx, m:match("^model%.([%w_]+)") or "config", "model", m)
  end
  local model = require(builder)
  cx.micro, cx.micro_total = 1, t0.inference and 1 or t0.grad_accum
  -- pipeline parallelism: this plan is one pipeline rank, its schedule declared in order
  -- (vrsim/pipeline.lua)
  if st.mesh and st.mesh.degrees.pp > 1 then
    local okp, pl = pcall(function()
      if builder ~= "vrsim.causal_lm" then error("training.parallel: only decoder language models are modelled", 0) end
      local _, mc = require("vrsim.causal_lm").resolve(cfg.model)
      return require("vrsim.pipeline").layout(cfg, mc.layers, st.mesh)
    end)
    if not okp then fail(ctx, "parallel", "training", tostring(pl)) end
    cx.pp = pl
    if pl then cx.layers_once = false end -- (replicate.lua numbers a stack's layers from 0)
    -- FSDP2 over dp_shard beside the pipeline keeps each stage's parameters unsharded (strategies/fsdp.lua)
    -- (Megatron's DistributedDataParallel accumulates into its grad buffer and finalizes inside
    -- the schedule: strategies/megatron_pp.lua)
    if pl and dp and cx.dp.kind ~= "megatron" then dp.pp_keep(cx) end
  end
  local ok, loss, _, mc, forward = pcall(model.build, cx, cfg)
  if not ok then
    local msg = tostring(loss)
    -- (what the layout asks of this model that is not modelled names training.parallel)
    if msg:match("^training%.parallel") then fail_given(ctx, st.sets, ctx.mesh_sets, "parallel", "training", msg) end
    if not msg:match("^[^:]+:%d+:") then
      fail(ctx, msg:match("^config '") and "config" or "model", msg:match("^config '") and "model" or nil, msg)
    end
    error(msg, 0)
  end
  -- a layout's tensor parallelism is applied by the model's builder or refused: never ignored
  if st.mesh.degrees.tp > 1 and not cx.tp_applied then
    fail_given(ctx, st.sets, ctx.mesh_sets, "parallel", "training",
      ("training.parallel.tp = %d: tensor parallelism is not modelled for model.arch %s"):format(
        st.mesh.degrees.tp, tostring(cfg.model.arch)))
  end
  for _, k in ipairs { { "cp", "context", cx.cp }, { "ep", "expert", cx.ep } } do
    if st.mesh.degrees[k[1]] > 1 and not k[3] then
      fail_given(ctx, st.sets, ctx.mesh_sets, "parallel", "training",
        ("training.parallel.%s = %d: %s parallelism is not modelled for model.arch %s"):format(
          k[1], st.mesh.degrees[k[1]], k[2], tostring(cfg.model.arch)))
    end
  end
  -- gradient accumulation: forward + backward per micro-batch, gradients accumulate into .grad;
  -- the strategy declares its reduction hooks for each micro-batch as its framework runs them
  -- (dp.before_backward: DDP/ZeRO-1 on the last only, ZeRO-2/3 and FSDP2 on every one)
  local k = t0.inference and 0 or t0.grad_accum
  if cx.pp then
    local okr, pp = pcall(require("vrsim.pipeline").run, cx, cx.pp, mc, forward)
    if not okr then fail(ctx, "parallel", "training", tostring(pp)) end
    cx.pp_plan, k = pp, 0
    if dp and cx.dp.kind ~= "megatron" then dp.pp_reduce_grads(cx) end
  end
  for i = 1, k do
    cx.micro = i
    if i > 1 then
      if not forward then error(cfg.model.arch .. " does not support gradient accumulation", 0) end
      loss = forward()
    end
    if dp then dp.before_backward(cx, cfg, cx.params, i, k) end
    -- loss scaling: scaler.scale(loss).backward() under amp_fp16, DeepSpeed's fp16 loss scaler
    local scaled = loss
    if require("strategies.optim").uses_grad_scaler(cfg) then scaled = require("strategies.optim").scale_loss(cx, loss)
    elseif t0.loss_scaling then scaled = require("strategies.optim").scale_loss(cx, loss, true) end
    G:derive_backward(scaled.id)
  end
  -- what the training loop keeps past its last backward (cx.after_backward: litgpt's fit()
  -- holding its logits list into the next step, strategies/litgpt.lua)
  for _, f in ipairs(cx.after_backward or {}) do f(cx) end
  if t0.empty_cache_after_build then
    G:op { name = "torch.cuda.empty_cache()", kind = "empty_cache", phase = "build", inputs = {},
           outputs = {}, frees = {} }
  end
  cx.phase = "optim"
  local optim = require "strategies.optim"
  if t0.inference then
    -- nothing to update
  elseif dp then
    local upd = dp.after_backward(cx, cfg, cx.params)
    if upd.zero2 and upd.zero2.offload then
      dp.offload_step(cx, upd.zero2)
      dp.zero2_step_gather(cx, upd.zero2)
    elseif upd.zero2 then
      dp.zero2_step(cx, upd.zero2)
    elseif upd.offload then
      dp.offload_step(cx, upd.offload)
    elseif upd.megatron then
      dp.megatron_step(cx, cfg, upd.megatron)
    else
      optim.build(cx, cfg, cx.params, upd)
    end
    dp.after_step(cx)
  else
    optim.build(cx, cfg, cx.params)
  end

  cfg.hardware = hw
  -- notes the build added (the plan's own come again from prepare)
  local notes = {}
  for i = st.notes_before + 1, #(cfg.notes or {}) do notes[#notes + 1] = cfg.notes[i] end
  return G, cx, reads, notes
end

-- How the model came onto the GPU, for the header: the defaults (from_pretrained's dtype, FSDP2's
-- meta-device init) are stated, since they decide the build's peak.
local function how_built(t, cx)
  if t.inference then return "" end
  local dtype = cx.run and cx.run.param_dtype
  local s = ""
  if cx.mesh and cx.mesh.tp_impl == "megatron" then
    -- (megatron-core's GPTModel: each rank's partitions made on the GPU, Float16Module's cast)
    s = "; Megatron's GPTModel, the rank's partitions made on the GPU in bf16"
    if cx.dp and cx.dp.kind == "megatron" then
      -- (the defaults are megatron/training/arguments.py's: said, since they decide the optimizer's bytes)
      s = s .. ("; Megatron's DistributedDataParallel, main_grad in %s, distributed optimizer %s"):format(
        cx.dp.grad_dtype, cx.dp.distopt and "on" or "off (--use-distributed-optimizer's default)")
    end
  elseif build_read(t) then
    s = t.build == "cast" and "; built in fp32, then .to(" .. tostring(dtype) .. ")"
        or "; weights made in their dtype (from_pretrained)"
  end
  if cx.dp and (t.strategy == "fsdp2" or t.strategy == "zero3") then
    s = s .. (cx.dp.init_partitioned and (t.strategy == "fsdp2" and ", sharded from meta-device init" or ", partitioned by zero.Init")
              or ", whole on every GPU, then sharded")
  end
  return s
end

-- The plan table C reads (sim/bind/bind.c load_protected), of a prepared scenario and its graph.
local function finish(st, G, cx, alloc_read)
  local cfg, dev, sets = st.cfg, st.dev, st.sets
  local dp = st.t0.strategy ~= "none" and require("strategies.dp") or nil
  cfg.allocator = st.alloc_real

  -- capacity the allocator may reserve: the card minus the CUDA context, or the fraction cap
  -- (lua/hw/memory.lua, the one rule)
  local cap, fraction_set = memory.capacity(dev.total_bytes, dev.context_bytes, cfg.hardware)
  local t = cfg.training
  local model_mod = require(P.builder(cfg))
  local settings_line = model_mod.settings and model_mod.settings(cfg)
  local d = t.data_batch
  local shape = d and d.multipack and d.rows > 1
      and ("micro-batch %d packed bins (%d sequences and paddings%s), %d x seq %d")
        :format(d.rows, d.n, t.attention == "sdpa" and ", axolotl's sdpa_varlen" or "", d.rows, d.len)
    or d and d.multipack and ("micro-batch one packed bin of %d sequences, 1 x seq %d"):format(d.n, d.len)
    or d and d.batching == "padding_free" and ("micro-batch %d flattened to 1 x seq %d"):format(d.n, d.len)
    or ("micro-batch %d x seq %d"):format(d and d.rows or t.micro_batch, t.seq)
  local settings = settings_line or ("%s %s, %s, %s, %s %s, attention %s%s%s%s"):format(
    cfg.model.arch, cfg.model.config ~= nil and cx.model_name or cfg.model.size, shape, t.precision, t.optimizer,
    t.optimizer_impl, t.attention, (t.checkpointing and ", checkpointing" or "") ..
    (t.strategy ~= "none" and (", " .. t.strategy .. " over " .. (st.mesh and st.mesh.given and st.mesh.dp or cfg.hardware.count) .. " GPUs") or "")
      .. (st.mesh and st.mesh.degrees.tp > 1 and (", tensor parallel over " .. st.mesh.degrees.tp .. " GPUs"
          .. (st.mesh.tp_impl == "megatron" and (" (Megatron-LM's"
              .. require("strategies.megatron_recompute").describe(st.mesh.megatron_recompute) .. ")") or "")) or ""),
    cfg.allocator.conf ~= "" and (", " .. cfg.allocator.conf) or "", how_built(t, cx))
  local counts = param_counts(cx)
  local n_params, n_trainable = counts.n_params, counts.n_trainable
  local notes = {}
  for _, n in ipairs(cfg.notes or {}) do notes[#notes + 1] = n end
  for _, n in ipairs(cx.notes or {}) do notes[#notes + 1] = n end
  -- a mixture of experts' grouped GEMMs the GPU's own measured table does not price
  notes[#notes + 1] = require("models.moe").unpriced(cx, dev)
  -- bf16 math on a GPU without bf16 tensor cores (Volta, Turing: compute capability below 8.0):
  -- PyTorch emulates it, and the catalog gives those GEMMs the GPU's fp32 rate as their bf16 peak
  -- (lua/hw/gpus.lua), which nobody measured. Then what vrsim does not model on the card.
  local bf16_math = t.precision:match("bf16") or t.precision == "mp_fp32"
  local gpu = gpus[dev.key] or {}
  if bf16_math and gpu.vendor ~= "amd" and (dev.compute_capability or 0) < 8 then
    notes[#notes + 1] = ("the %s has no bf16 tensor cores (compute capability %.1f): PyTorch emulates bf16, "
                         .. "and vrsim prices its bf16 GEMMs at the GPU's fp32 rate, an assumption no "
                         .. "measurement checks"):format(dev.name, dev.compute_capability or 0)
  end
  for _, n in ipairs(gpu.not_modelled or {}) do
    notes[#notes + 1] = ("not modelled on the %s: %s"):format(dev.name, n)
  end
  if gpu.nvlink and not gpu.nvlink.bridge and type(gpu.nvlink.gen) == "string" and dev.interconnect:match("^nvlink") then
    notes[#notes + 1] = ("the %s's collectives run on its own links (lua/hw/links.lua nvlink.%s), shown as nvlink")
      :format(dev.name, gpu.nvlink.gen)
  end
  -- DeepSpeed's estimator for the model states, beside the simulation (ZeRO-2 and -3 only)
  local ds_est = dp and counts_mod.deepspeed_estimate(cfg, cx, dp, counts) or 0
  return {
    strategy = t.strategy, interconnect = dev.interconnect, ds_estimate_bytes = ds_est,
    host_bytes = cx.dp and cx.dp.host_bytes or 0,
    host_capacity = dev.host and dev.host.host_ram_bytes or 0,
    managed_bytes = cx.paged_bytes or 0, -- paged optimizer state (strategies/quant.lua bnb_state)
    notes = table.concat(notes, "; "),
    overrides = table.concat(sets, ", "),
    deepspeed_read = cfg.deepspeed_read, deepspeed_unknown = table.concat(cfg.deepspeed_unknown or {}, ", "),
    graph = G, title = cfg.title or "", pp = cx.pp_plan,
    model = cx.model_name or (cfg.model.arch .. "-" .. (cfg.model.variant or cfg.model.size)),
    n_params = n_params, n_trainable = n_trainable,
    settings = settings, steps = t.steps, gpus = cfg.hardware.count,
    tokens_per_step = cx.tokens or 0, samples_per_step = t.data_batch and t.data_batch.n or t.micro_batch,
    device = dev,
    allocator = { conf = cfg.allocator.conf, kind = cfg.allocator.kind, capacity_bytes = cap,
                  fraction_set = fraction_set },
    graph_reads_allocator = alloc_read,
    -- the settings in effect that the "what would help" changes (sim/variants.c) start from, as
    -- key=value words: a change whose every setting is already here is the run itself
    knobs = ("training.checkpointing=%s training.precision=%s training.optimizer_impl=%s training.strategy=%s"
             .. " training.optimizer=%s training.checkpoint_scope=%s training.grad_accum=%s training.quant=%s"
             .. " hardware.count=%s hardware.gpu=%s training.zero.offload_optimizer=%s training.build=%s"):format(
      tostring(t.checkpointing), tostring(t.precision), tostring(t.optimizer_impl), tostring(t.strategy),
      tostring(t.optimizer), tostring(t.checkpoint_scope), tostring(t.grad_accum), tostring(t.quant),
      tostring(cfg.hardware.count), tostring(cfg.hardware.gpu),
      tostring(cx.dp and cx.dp.opts.offload_optimizer or "none"), tostring(t.build)),
  }
end

function P.build(scn, sets, file, src)
  -- a state that builds again (sim/points.c, a child sent a job anew) holds nothing of the last
  -- build while it makes this one, as a fresh state would not
  P.last_build = nil
  local st = prepare(scn, sets, file, src)
  local G, cx, reads, notes = build_graph(st)
  local alloc_read = st.alloc_read()
  P.last_build = { key = st.key, alloc = canonical(st.alloc_real), alloc_read = alloc_read, reads = reads,
                   notes = notes, G = G, cx = cx }
  return finish(st, G, cx, alloc_read)
end

-- The plan of scenario scn with sets, as P.build would make it, made with the graph of the last
-- P.build in this state where that graph read nothing that differs between the two: the same
-- normalized scenario outside its hardware section (the allocator section too, where the graph
-- read it), the same GPU architecture and host costs, and the same value of every hardware field
-- and catalog field of the GPU that the build read. Returns nil and why when it cannot. The plan
-- has graph_reused = true: its graph is the one the earlier plan took (sim/bind/bind.c load_protected).
function P.rebuild(scn, sets, file, src)
  local last = P.last_build
  if not last then return nil, "no graph was built in this state" end
  local st = prepare(scn, sets, file, src)
  if not st.key or st.key ~= last.key then return nil, "the scenario differs beyond its hardware" end
  if last.alloc_read and canonical(st.alloc_real) ~= last.alloc then return nil, "the allocator settings differ" end
  for name, v in pairs(last.reads) do
    local sec, k = name:match("^(%a+)%.(.*)$")
    local t = sec == "gpu" and st.g or st.cfg.hardware
    local now = (k == "*" or k == "!") and canonical(t) or canonical(t[k])
    if k == "!" or now ~= v then return nil, ("the graph read %s, which differs"):format(name) end
  end
  st.cfg.notes = st.cfg.notes or {}
  for _, n in ipairs(last.notes) do table.insert(st.cfg.notes, n) end
  local plan = finish(st, last.G, last.cx, last.alloc_read or st.alloc_read())
  plan.graph_reused = true
  return plan
end

-- The module that builds a normalized config's run: models.sdxl, models.sd, or vrsim.causal_lm for the decoder families (whose
-- family comes from model.config, or the named Llama-2 shapes for arch llama2).
function P.builder(cfg)
  local m = cfg.model
  if P.diffusion(m.arch) then
    -- the decoder fields (use_cache given either way, repeat_kv turned on): a diffusion model
    -- has no KV cache and no grouped keys to repeat
    local k = (m.use_cache ~= nil and "use_cache") or (m.repeat_kv and "repeat_kv")
    if k then
      error(("model.%s: a transformers decoder's field; arch %s has no keys and values to cache or repeat")
            :format(k, m.arch), 0)
    end
    return "models." .. m.arch
  end
  if m.resolved_arch then return "vrsim.causal_lm" end
  local given = m.arch
  if m.config ~= nil then
    local fam = require("models.hf").resolve(m.config)
    -- (llama2 names the Llama-2 shapes: beside a config of another family, as --set model.config
    -- on a Llama-2 scenario gives, the config's family is built, and the run says so)
    if given == "llama2" and fam ~= "llama" then
      cfg.notes = cfg.notes or {}
      local note = ("model.arch = llama2 read as %s, the family of model.config (%s)"):format(fam,
                    type(m.config) == "string" and m.config or "a table")
      -- (a plan finished with an earlier build's graph has that build's notes already)
      local seen = false
      for _, n in ipairs(cfg.notes) do seen = seen or n == note end
      if not seen then table.insert(cfg.notes, note) end
    elseif given ~= nil and given ~= fam and given ~= "llama2" then
      error(("model.arch = %s, but the config is a %s model (%s)"):format(given, fam,
            type(m.config) == "string" and m.config or "model.config"), 0)
    end
    m.arch = fam
  else
    if given ~= nil and given ~= "llama2" then
      error(("model.arch = %s needs model.config (a config.json path or its table)"):format(given), 0)
    end
    m.arch = "llama2"
  end
  m.resolved_arch = true
  return "vrsim.causal_lm"
end


return P
