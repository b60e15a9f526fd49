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
--
-- Each strategy's passes are in its own file: ddp.lua (ddp, zero1), zero2.lua, fsdp.lua (zero3,
-- fsdp2), with the pieces they share in dp_ops.lua; this file holds the knobs, the setup and the
-- entry points the planner and the models call, which hand each step to the strategy's pass.
local ddp = require "strategies.ddp"
local zero2 = require "strategies.zero2"
local fsdp = require "strategies.fsdp"
local ops = require "strategies.dp_ops"
local megatron = require "strategies.megatron_dp"

local M = {}

-- strategy -> its passes (before_backward, after_backward, after_step; nil where it has none)
local PASSES = { ddp = ddp, zero1 = ddp, zero2 = zero2, zero3 = fsdp, fsdp2 = fsdp, megatron = megatron }

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
  -- DDP: when the first iteration's bucket of every gradient is freed (lua/strategies/ddp.lua
  -- first_bucket_release): at step 1's bucket rebuild, at step 1's first all-reduce, or "auto"
  first_iteration_bucket = "auto",
  -- FSDP2: modules outside the decoder layers given a fully_shard of their own before the root's
  -- (torchtune's custom_sharded_layers): dotted module paths, e.g. { "model.embed_tokens", "lm_head" }
  units = {},
}

-- What each knob takes: "count" a finite number >= 0 (elements or MiB), "bool", "paths" a list
-- of strings (module paths), or a list of strings (its choices). Checked in setup whichever way
-- the knob came (scenario, --set, DeepSpeed JSON).
local KNOB_TYPES = {
  bucket_cap_mb = "count", first_bucket_mb = "count", reduce_bucket_size = "count",
  allgather_bucket_size = "count", stage3_param_persistence_threshold = "count",
  stage3_prefetch_bucket_size = "count", stage3_max_live_parameters = "count",
  overlap_comm = "bool", contiguous_gradients = "bool", raf = "bool", sync_every_micro_batch = "bool",
  offload_optimizer = { "none", "cpu", "nvme" }, offload_param = { "none", "cpu", "nvme" },
  init = { "auto", "whole", "partitioned", "meta" },
  shard_group = "count", reduce_dtype = { "auto", "fp32", "bf16" },
  first_iteration_bucket = { "auto", "rebuild", "all_reduce" },
  units = "paths",
}
-- Knobs that only some strategies read; any other strategy given one is an error, not ignored.
local KNOB_STRATEGIES = {
  bucket_cap_mb = { ddp = 1, zero1 = 1 }, first_bucket_mb = { ddp = 1, zero1 = 1 },
  first_iteration_bucket = { ddp = 1, zero1 = 1 },
  raf = { fsdp2 = 1, zero3 = 1 }, sync_every_micro_batch = { fsdp2 = 1 },
  stage3_param_persistence_threshold = { zero3 = 1 }, stage3_prefetch_bucket_size = { zero3 = 1 },
  stage3_max_live_parameters = { zero3 = 1 }, offload_param = { zero3 = 1, fsdp2 = 1 },
  offload_optimizer = { zero2 = 1, zero3 = 1, fsdp2 = 1 }, init = { zero3 = 1, fsdp2 = 1 },
  reduce_bucket_size = { zero2 = 1, zero3 = 1 }, allgather_bucket_size = { zero2 = 1, zero3 = 1 },
  overlap_comm = { zero2 = 1, zero3 = 1 }, contiguous_gradients = { zero2 = 1, zero3 = 1 },
  units = { fsdp2 = 1 },
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
    -- "auto" as one of a knob's own choices (init, first_iteration_bucket ...) is that choice
    if v == "auto" and k ~= "overlap_comm" and type(KNOB_TYPES[k]) ~= "table" then
      if auto[k] == nil then
        error(("training.zero.%s = \"auto\": only reduce_bucket_size, stage3_prefetch_bucket_size and "
               .. "stage3_param_persistence_threshold have an automatic value (the HF Trainer's)"):format(k), 0)
      end
      v = auto[k]
    end
    if KNOB_TYPES[k] == "paths" and type(v) == "string" then
      -- (--set zero.units=model.embed_tokens,lm_head: the list comma-separated)
      local l = {}
      for part in v:gmatch("[^,]+") do l[#l + 1] = part:match("^%s*(.-)%s*$") end
      v = l
    end
    local only = KNOB_STRATEGIES[k]
    if k == "units" and type(v) == "table" and #v > 0 and not only[kind] then
      -- FSDP2's fully_shard units: ZeRO-3 and the others have no module of their own to give them
      error(("training.zero.units (%s) is FSDP2's fully_shard per module: not modelled under strategy %s"):format(
            table.concat(v, ", "), tostring(kind)), 0)
    end
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
    elseif ty == "paths" then
      local ok = type(v) == "table"
      if ok then for i = 1, #v do ok = ok and type(v[i]) == "string" and v[i] ~= "" end end
      if ok then for kk in pairs(v) do ok = ok and math.type(kk) == "integer" and kk >= 1 and kk <= #v end end
      if not ok then
        error(("training.zero.%s must be a list of module paths (strings), e.g. { \"lm_head\" }"):format(k), 0)
      end
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

-- Called by the planner before the model is built: installs the hooks the model calls.
function M.setup(cx, cfg)
  local t = cfg.training
  -- under Megatron's tensor parallelism, data parallelism is Megatron's own
  -- (strategies/megatron_dp.lua), whatever the strategy asked for is checked there
  local mg = cx.mesh and cx.mesh.tp_impl == "megatron"
  if mg then
    local why = megatron.refusal(t, cx.mesh)
    if why then error(why, 0) end
  end
  -- (plan.lua has rejected keys that are not in M.DEFAULTS, with the scenario's line)
  local o, notes = M.check_knobs(cfg, t.zero)
  cfg.notes = cfg.notes or {}
  for _, n in ipairs(notes) do cfg.notes[#cfg.notes + 1] = n end
  -- over the mesh's data-parallel ranks (hardware.count but for tensor parallelism's groups:
  -- each rank's FSDP shard is of its tensor-parallel parameters, lua/vrsim/mesh.lua)
  local s = { kind = t.strategy, n = cx.mesh and cx.mesh.given and cx.mesh.dp or cfg.hardware.count, opts = o,
              gathered = {}, steps = t.steps }
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
  if mg then megatron.setup(cx, cfg, s) end
  if s.kind == "zero3" or s.kind == "fsdp2" then
    -- parameters are made as shards; the model asks for whole ones per layer
    cx.shard_params = true
    cx.shard_param = fsdp.shard
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

-- Sharded strategies (fsdp.lua): the gathers and releases the models call around each layer, the
-- shards made as the model is built, and FSDP2's whole parameters beside a pipeline.
M.gather, M.release, M.after_build, M.shard = fsdp.gather, fsdp.release, fsdp.after_build, fsdp.shard
M.pp_keep, M.pp_release, M.pp_reduce_grads = fsdp.pp_keep, fsdp.pp_release, fsdp.pp_reduce_grads
-- for tests/ops/test_rules.lua
M.buckets_by_size, M.ddp_buckets = ddp.buckets_by_size, ddp.ddp_buckets
-- the optimizer steps of ZeRO-2 and of a CPU-offloaded one, which the planner runs in their place
M.zero2_step, M.zero2_step_gather, M.offload_step = zero2.zero2_step, zero2.zero2_step_gather, ops.offload_step

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
  mb, nmb = mb or 1, nmb or 1
  local trainable = {}
  for _, p in ipairs(params) do if p.trainable then trainable[#trainable + 1] = p end end
  local pass = PASSES[s.kind].before_backward
  if pass then pass(cx, s, params, trainable, mb, nmb) end
end

-- After backward has been derived: the list of { param = , grad = } the optimizer updates on
-- this rank (or { zero2 = ... } for DeepSpeed's own partitioned step).
function M.after_backward(cx, cfg, params)
  local s = cx.dp
  local trainable = {}
  for _, p in ipairs(params) do if p.trainable then trainable[#trainable + 1] = p end end
  return PASSES[s.kind].after_backward(cx, cfg, s, trainable)
end

-- Megatron's optimizer step over the main parameters (upd.megatron of after_backward).
function M.megatron_step(cx, cfg, upd) megatron.step(cx, cfg, cx.dp, upd) end

-- After the optimizer: what the strategy sends (ZeRO-1: the updated parameters, ddp.lua).
function M.after_step(cx)
  local pass = PASSES[cx.dp.kind].after_step
  if pass then pass(cx) end
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
