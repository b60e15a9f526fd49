-- mesh.lua: the run's device mesh (training.parallel), checked and turned into process groups.
--
-- The layout is torchtitan's (torchtitan/distributed/parallel_dims.py): the world's ranks form a
-- mesh of named dimensions, outermost first,
--
--   ORDER = pp, dp_replicate, dp_shard, cp, tp          (tp innermost: its ranks are adjacent)
--
-- and pp * dp_replicate * dp_shard * cp * tp == hardware.count. A rank r has the coordinate
-- (r // stride(d)) % size(d) on dimension d, where stride(d) is the product of the sizes of the
-- dimensions inside d; the process group of d that holds r is the size(d) ranks that differ from
-- r on d alone. ep is no factor of the world: as in torchtitan, expert parallelism borrows its
-- ranks from dp_shard * cp (times tp).
--
-- dp_shard = -1 is "the rest": hardware.count over the product of the other degrees.
-- Without training.parallel, training.strategy and hardware.count are shorthands for one
-- data-parallel dimension: fsdp2, zero1, zero2 and zero3 over N GPUs are dp_shard = N (FSDP2 with
-- training.zero.shard_group = S: dp_shard = S, dp_replicate = N / S, hybrid sharding), ddp is
-- dp_replicate = N.
--
-- Each group is placed on the machines: how many of its ranks share a node of
-- hardware.gpus_per_node GPUs, how many nodes it spans, and so which link its collectives use (the
-- node's NVLink or PCIe inside one node; the network between nodes).
local M = {}

-- The mesh dimensions, outermost first (torchtitan's ParallelDims mesh order).
M.ORDER = { "pp", "dp_replicate", "dp_shard", "cp", "tp" }

-- torchtitan's pipeline schedules (torch.distributed.pipelining's schedule classes by the names
-- torchtitan's parallelism.pipeline_parallel_schedule takes).
local SCHEDULES = { "1F1B", "GPipe", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble",
                    "LoopedBFS", "DualPipeV" }

-- training.parallel's keys: { type, default, help } as the plan's schema writes a field.
M.FIELDS = {
  dp_replicate = { "integer", 1, "data-parallel replicas (DDP; with dp_shard > 1, FSDP2 hybrid sharding's replicate dimension)" },
  dp_shard = { "integer", -1, "FSDP2 shards of each replica; -1: the rest of hardware.count (torchtitan's data_parallel_shard_degree)" },
  tp = { "integer", 1, "tensor parallelism (DTensor ColwiseParallel/RowwiseParallel, sequence parallel on the norms): ranks of one layer's shards, innermost" },
  cp = { "integer", 1, "context parallelism (ring attention): ranks that split each sequence" },
  pp = { "integer", 1, "pipeline parallelism: stages, outermost" },
  ep = { "integer", 1, "expert parallelism: ranks the experts are split over, borrowed from dp_shard * cp (no factor of the world)" },
  pp_schedule = { "string", "1F1B", "pipeline schedule (torch.distributed.pipelining; with tp_impl = \"megatron\", 1F1B and Interleaved1F1B are megatron-core's own)" },
  ep_imbalance = { "number", 1, "expert parallelism's routing: the busiest rank's share of the token-expert pairs over the mean (1: balanced; the simulated rank is the busiest)" },
  cp_rotate_method = { "string", "allgather", "how ring attention brings the other ranks' keys and values (torch's set_rotate_method): allgather (once, torch's default, kept by torchtitan) or alltoall (passed on each step)" },
  async_tp = { "boolean", false, "torchtitan's async tensor parallelism (Inductor's micro_pipeline_tp pass): each compiled layer's sequence all-gather fused with the GEMMs it feeds and each reduce-scatter with the GEMM it follows, the transfers beside the GEMMs over symmetric memory; needs tp > 1 and training.compile" },
  tp_impl = { "string", "dtensor", "whose tensor parallelism: dtensor (torch.distributed.tensor.parallel with torchtitan's plan, lua/strategies/tp.lua) or megatron (megatron-core 0.16.1's GPTModel, local spec, sequence parallel: fused qkv and fc1, column-parallel linears that keep their local input and all-gather it again in backward into the persistent GlobalMemoryBuffer, vocab_parallel_cross_entropy; lua/strategies/megatron_tp.lua); megatron needs tp > 1, a Llama-shaped model, attention eager, bf16; its data parallelism is Megatron's DistributedDataParallel over dp_replicate (lua/strategies/megatron_dp.lua), its pipeline (pp > 1) megatron-core's non-interleaved 1F1B schedule (lua/strategies/megatron_pp.lua), with its recompute and data parallelism beside it, or its interleaved one over model chunks (pp_schedule = \"Interleaved1F1B\", lua/strategies/megatron_vpp.lua), with both beside it too" },
  megatron_distributed_optimizer = { "boolean", false, "with tp_impl = \"megatron\" and dp_replicate > 1: Megatron's distributed optimizer (--use-distributed-optimizer, off by default in megatron/training/arguments.py): the fp32 main params and Adam states of 1/dp of the contiguous buffer per rank, the gradients reduce-scattered, the bf16 params all-gathered after the step (lua/strategies/megatron_dp.lua)" },
  megatron_grad_reduce_in_fp32 = { "boolean", true, "with tp_impl = \"megatron\" and dp_replicate > 1: DistributedDataParallelConfig.grad_reduce_in_fp32, the dtype of the contiguous main_grad buffer and its reduction (arguments.py turns it on for bf16 unless --grad-reduce-in-bf16)" },
  pp_microbatches = { "integer", nil, "micro-batches per step through the pipeline [pp: one per stage]" },
  pp_layers_per_stage = { "integer", nil, "decoder layers per (virtual) stage, the embeddings and the head counting one each (torchtitan's pipeline_parallel_layers_per_stage)" },
  pp_virtual_stages = { "integer", nil, "with tp_impl = \"megatron\" and pp_schedule = \"Interleaved1F1B\": model chunks per pipeline rank, Megatron's virtual pipeline size (--num-virtual-stages-per-pipeline-rank, or layers / pp / --num-layers-per-virtual-pipeline-stage) [2, the interleaved schedules' stages per rank as torchtitan takes them]; torchtitan's come from pp_schedule and pp_layers_per_stage" },
  pp_microbatch_group = { "integer", nil, "with tp_impl = \"megatron\" and pp_schedule = \"Interleaved1F1B\": micro-batches a model chunk runs in a row before the next chunk, Megatron's microbatch_group_size_per_vp_stage (--microbatch-group-size-per-virtual-pipeline-stage): the warm-up's length, the schedule's order and the first and last ranks' receive rings (group - pp + 1 slots) follow it; Megatron requires pp <= group <= pp_microbatches and pp_microbatches % group 0 or >= pp [pp]" },
  pp_overlap_p2p_comm = { "boolean", true, "with tp_impl = \"megatron\" and pp_schedule = \"Interleaved1F1B\": Megatron's overlap_p2p_comm, its default; false is --no-overlap-p2p-communication (batch_p2p_comm on: each steady forward-and-backward pair's activation and gradient received together after it, into the schedule's input_tensor and output_tensor_grad locals, and no receive rings); Megatron asserts pp > 2 for it" },
  pp_overlap_p2p_warmup_flush = { "boolean", false, "with tp_impl = \"megatron\", pp_schedule = \"Interleaved1F1B\" and pp_overlap_p2p_comm: Megatron's overlap_p2p_comm_warmup_flush (--overlap-p2p-communication-warmup-flush): the warm-up's activation receives (ranks after the first) and the cool-down's gradient receives (ranks before the last) made before the forward or backward ahead of the one that reads them, into the receive rings, and the first rank's warm-up and the last rank's cool-down receives into those rings too, in place of the schedule's input_tensor and output_tensor_grad locals; ModelParallelConfig raises ValueError without overlap_p2p_comm" },
  pp_variable_seq_lengths = { "boolean", false, "with tp_impl = \"megatron\" and pp > 1: Megatron's variable_seq_lengths (--variable-seq-lengths): before each transfer the stages exchange its shape (P2PCommunicator._communicate_shapes: an int64 tensor of 3 per receive and per send, batch_isend_irecv, torch.cuda.synchronize(), each received shape read back by .tolist()), a handshake on the pipeline link and a host wait each; every micro-batch is simulated at training.seq: give the longest a step meets (training.data, Megatron's data pipeline, is not modelled); megatron-core 0.16.1's TransformerConfig refuses it beside the default --moe-token-dispatcher-type allgather, a dense model's too, so such a run passes alltoall" },
  pp_batch_p2p_sync = { "boolean", true, "with tp_impl = \"megatron\" and pp > 1, where the schedule batches its transfers (1F1B; Interleaved1F1B with pp_overlap_p2p_comm = false): ModelParallelConfig.batch_p2p_sync, its default: torch.cuda.synchronize() after each batched transfer (P2PCommunicator._communicate), the host waiting for the GPU there; false: the host runs ahead through the transfers" },
  pp_stage_layers = { "list", nil, "a given split: decoder layers on each stage, in order (torchtitan's module_fqns_per_model_part, by counts)" },
  pp_keep_outputs = { "boolean", false, "PipelineStage as torch.distributed.pipelining ran it before 2.8 (pytorch PR 153383): every stage keeps each micro-batch's output in output_chunks until the next step's clear_runtime_states, and the last stage's step() concatenates its outputs, the logits (_merge_outputs); false: a stage's output is freed after its backward and no logits outlive the loss" },
}
M.CHOICES = { pp_schedule = SCHEDULES, cp_rotate_method = { "allgather", "alltoall" }, tp_impl = { "dtensor", "megatron" } }
-- Megatron's activation recompute (megatron_recompute_*: lua/strategies/megatron_recompute.lua)
local RC = require "strategies.megatron_recompute"
for k, f in pairs(RC.FIELDS) do M.FIELDS[k] = f end
for k, c in pairs(RC.CHOICES) do M.CHOICES[k] = c end

local function sorted_keys(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end

-- The error for a key of training.parallel that is not one (nil when it is).
function M.unknown_key(k)
  if type(k) == "string" and M.FIELDS[k] then return nil end
  return ("training.parallel.%s is not a key vrsim knows (one of: %s)"):format(tostring(k),
    table.concat(sorted_keys(M.FIELDS), ", "))
end

-- training.parallel.k = v checked: the value, or nil and the message.
local function check_key(k, v)
  local where = "training.parallel." .. k
  if RC.FIELDS[k] then return RC.check_key(k, v) end
  if k == "pp_schedule" then
    if type(v) ~= "string" then return nil, where .. " must be a string" end
    for _, s in ipairs(SCHEDULES) do if s == v then return v end end
    return nil, ("%s: unknown schedule '%s' (one of: %s)"):format(where, v, table.concat(SCHEDULES, ", "))
  end
  if k == "ep_imbalance" then
    if type(v) ~= "number" or v ~= v or v < 1 or v == math.huge then
      return nil, ("%s must be a number >= 1 (the busiest rank's share over the mean), not %s"):format(where, tostring(v))
    end
    return v
  end
  if k == "cp_rotate_method" then
    if v ~= "allgather" and v ~= "alltoall" then
      return nil, ("%s: unknown rotate method '%s' (one of: allgather, alltoall)"):format(where, tostring(v))
    end
    return v
  end
  if k == "tp_impl" then
    if v ~= "dtensor" and v ~= "megatron" then
      return nil, ("%s: unknown implementation '%s' (one of: dtensor, megatron)"):format(where, tostring(v))
    end
    return v
  end
  if k == "async_tp" or k == "pp_keep_outputs" or k == "pp_overlap_p2p_comm" or k == "pp_overlap_p2p_warmup_flush" or k == "pp_variable_seq_lengths" or k == "pp_batch_p2p_sync" or k == "megatron_distributed_optimizer" or k == "megatron_grad_reduce_in_fp32" then
    if type(v) ~= "boolean" then return nil, ("%s must be true or false, not %s"):format(where, tostring(v)) end
    return v
  end
  if k == "pp_stage_layers" then
    if type(v) ~= "table" or #v == 0 then return nil, where .. " must be a list of decoder-layer counts, one per stage" end
    for i, c in ipairs(v) do
      if math.type(c) ~= "integer" or c < 0 then
        return nil, ("%s[%d] must be an integer >= 0"):format(where, i)
      end
    end
    return v
  end
  local i = math.type(v) == "integer" and v or (type(v) == "number" and math.tointeger(v))
  if not i then return nil, ("%s must be an integer, not %s"):format(where, tostring(v)) end
  if k == "dp_shard" then
    if i ~= -1 and (i < 1 or i > 65536) then
      return nil, ("%s = %d is out of range: must be -1 (the rest) or an integer in [1, 65536]"):format(where, i)
    end
  elseif i < 1 or i > 65536 then
    return nil, ("%s = %d is out of range: must be an integer in [1, 65536]"):format(where, i)
  end
  return i
end

-- The degrees the shorthands training.strategy / hardware.count stand for.
local function shorthand(t, n)
  local d = { pp = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, ep = 1 }
  if t.strategy == "ddp" then
    d.dp_replicate = n
  elseif t.strategy ~= "none" then
    local s = t.strategy == "fsdp2" and t.zero and t.zero.shard_group
    if s and s > 0 and s < n and n % s == 0 then d.dp_shard, d.dp_replicate = s, n // s
    else d.dp_shard = n end
  end
  return d
end

-- The data-parallel strategy a layout implies, as torchtitan applies it: FSDP2 where dp_shard > 1
-- (hybrid sharding with dp_replicate > 1 too), DDP where only dp_replicate is, none otherwise.
-- Context parallelism folds into FSDP's mesh (parallel_dims.py: fsdp = dp_shard * cp, "we always
-- assume that when cp is used, FSDP is also applied"), so cp > 1 is FSDP2 over dp_shard * cp.
-- Beside a pipeline torchtitan fully_shards each stage over its ["dp_replicate", "fsdp"] mesh
-- whatever the degrees (llama3/parallelize.py, apply_fsdp_to_decoder), so dp_replicate alone is
-- FSDP2 with a shard group of one rank: the replicate all-reduce after the schedule. Megatron's
-- pipeline (tp_impl "megatron") keeps its DistributedDataParallel over dp_replicate beside it
-- (strategies/megatron_pp.lua).
local function implied_strategy(d, tp_impl)
  if d.dp_shard * d.cp > 1 then return "fsdp2" end
  if d.dp_replicate > 1 then return d.pp > 1 and tp_impl ~= "megatron" and "fsdp2" or "ddp" end
  return "none"
end

-- The mesh of a normalized scenario: { degrees = { pp, dp_replicate, dp_shard, cp, tp, ep },
-- world, dp (the data-parallel ranks a data-parallel strategy reduces over), given (training.parallel was written), pp_schedule, pp_microbatches, notes (what the
-- layout was given that this run does not read) }. With
-- training.parallel given, training.strategy (unless the scenario gave one, which must agree) and
-- training.zero.shard_group are set from it, so the data-parallel strategies read the layout.
-- Raises a message (no file:line; the caller adds it) when the layout is not one.
function M.resolve(cfg, given)
  local t, n = cfg.training, cfg.hardware.count
  local p = t.parallel
  if p == nil then
    local d = shorthand(t, n)
    return { degrees = d, world = n, dp = d.dp_replicate * d.dp_shard, given = false,
             pp_schedule = M.FIELDS.pp_schedule[2], cp_rotate_method = M.FIELDS.cp_rotate_method[2],
             ep_imbalance = M.FIELDS.ep_imbalance[2], async_tp = false, tp_impl = M.FIELDS.tp_impl[2],
             megatron_distributed_optimizer = M.FIELDS.megatron_distributed_optimizer[2],
             megatron_grad_reduce_in_fp32 = M.FIELDS.megatron_grad_reduce_in_fp32[2], notes = {} }
  end
  local d = { pp = 1, dp_replicate = 1, dp_shard = -1, cp = 1, tp = 1, ep = 1 }
  local sched, micro, split, rotate = M.FIELDS.pp_schedule[2], nil, {}, M.FIELDS.cp_rotate_method[2]
  local imbalance = M.FIELDS.ep_imbalance[2]
  local async_tp = M.FIELDS.async_tp[2]
  local keep_outputs = M.FIELDS.pp_keep_outputs[2]
  local tp_impl = M.FIELDS.tp_impl[2]
  local virtual, group, overlap, flush, varlen, p2p_sync
  local mg = { megatron_distributed_optimizer = M.FIELDS.megatron_distributed_optimizer[2],
               megatron_grad_reduce_in_fp32 = M.FIELDS.megatron_grad_reduce_in_fp32[2] }
  local rc = {}
  for _, k in ipairs(sorted_keys(p)) do
    local msg = M.unknown_key(k)
    if msg then error(msg, 0) end
    local v, bad = check_key(k, p[k])
    if bad then error(bad, 0) end
    if k == "pp_schedule" then sched = v elseif k == "pp_microbatches" then micro = v
    elseif k == "cp_rotate_method" then rotate = v
    elseif k == "ep_imbalance" then imbalance = v
    elseif k == "async_tp" then async_tp = v
    elseif k == "pp_keep_outputs" then keep_outputs = v
    elseif k == "tp_impl" then tp_impl = v
    elseif k == "pp_virtual_stages" then virtual = v
    elseif k == "pp_microbatch_group" then group = v
    elseif k == "pp_overlap_p2p_comm" then overlap = v
    elseif k == "pp_overlap_p2p_warmup_flush" then flush = v
    elseif k == "pp_variable_seq_lengths" then varlen = v
    elseif k == "pp_batch_p2p_sync" then p2p_sync = v
    elseif mg[k] ~= nil then mg[k] = v
    elseif RC.FIELDS[k] then rc[k] = v
    elseif k == "pp_layers_per_stage" or k == "pp_stage_layers" then split[k] = v else d[k] = v end
  end
  local others = d.pp * d.dp_replicate * d.cp * d.tp
  if d.dp_shard == -1 then
    if n % others ~= 0 then
      error(("training.parallel: pp * dp_replicate * cp * tp = %d does not divide hardware.count = %d, "
             .. "so dp_shard = -1 (the rest) is no integer"):format(others, n), 0)
    end
    d.dp_shard = n // others
  end
  local prod = others * d.dp_shard
  if prod ~= n then
    error(("training.parallel: pp * dp_replicate * dp_shard * cp * tp = %d * %d * %d * %d * %d = %d, "
           .. "and hardware.count = %d: the mesh must hold every GPU"):format(d.pp, d.dp_replicate,
           d.dp_shard, d.cp, d.tp, prod, n), 0)
  end
  local want = implied_strategy(d, p.tp_impl)
  if given["training.strategy"] then
    local s = t.strategy
    local fits = s == want or ((s == "zero1" or s == "zero2" or s == "zero3") and d.dp_replicate == 1)
    if not fits then
      error(("training.strategy = \"%s\" does not match training.parallel (dp_replicate = %d, dp_shard = %d, cp = %d), "
             .. "which is %s: leave training.strategy out, or make them agree"):format(s, d.dp_replicate,
             d.dp_shard, d.cp, want == "none" and "no data parallelism" or want), 0)
    end
  else
    t.strategy = want
  end
  if t.strategy == "fsdp2" and d.dp_replicate > 1 then
    local sg = t.zero and t.zero.shard_group
    if sg and sg ~= 0 and sg ~= d.dp_shard * d.cp then
      error(("training.zero.shard_group = %d and training.parallel.dp_shard * cp = %d: hybrid sharding's shard "
             .. "group is dp_shard (times cp; leave shard_group out)"):format(sg, d.dp_shard * d.cp), 0)
    end
    t.zero = t.zero or {}
    t.zero.shard_group = d.dp_shard * d.cp
  end
  -- (a pipeline knob without a pipeline asks for nothing: said so, as the plan's inert fields are)
  local notes = {}
  if d.pp == 1 then
    for _, k in ipairs { "pp_schedule", "pp_microbatches", "pp_layers_per_stage", "pp_stage_layers", "pp_keep_outputs",
                         "pp_virtual_stages" } do
      if p[k] ~= nil then
        notes[#notes + 1] = ("training.parallel.%s = %s has no effect on this run: pp = 1 (no pipeline)"):format(k, type(p[k]) == "table" and ("{ " .. table.concat(p[k], ", ") .. " }") or tostring(p[k]))
      end
    end
  end
  if d.ep == 1 and p.ep_imbalance ~= nil then
    notes[#notes + 1] = ("training.parallel.ep_imbalance = %s has no effect on this run: ep = 1 (no expert parallelism)"):format(tostring(p.ep_imbalance))
  end
  if d.cp == 1 and p.cp_rotate_method ~= nil then
    notes[#notes + 1] = ("training.parallel.cp_rotate_method = %s has no effect on this run: cp = 1 (no context parallelism)"):format(p.cp_rotate_method)
  end
  -- (torchtitan enables it inside apply_tp, which runs only with tp > 1: a flag with nothing to
  -- fuse is refused, as an inert knob)
  if async_tp and d.tp == 1 then
    error("training.parallel.async_tp = true needs tensor parallelism (training.parallel.tp > 1): "
          .. "it fuses the tp group's all-gathers and reduce-scatters with their GEMMs", 0)
  end
  -- (whose tensor parallelism, without any: refused, as an inert knob)
  if tp_impl ~= "dtensor" and d.tp == 1 then
    error(("training.parallel.tp_impl = \"%s\" needs tensor parallelism (training.parallel.tp > 1)"):format(tp_impl), 0)
  end
  -- (Megatron's data-parallel knobs without Megatron's data parallelism: refused, as inert knobs)
  for _, k in ipairs { "megatron_distributed_optimizer", "megatron_grad_reduce_in_fp32" } do
    if p[k] ~= nil and (tp_impl ~= "megatron" or d.dp_replicate * d.dp_shard == 1) then
      error(("training.parallel.%s needs Megatron's data parallelism (tp_impl = \"megatron\" and "
             .. "dp_replicate > 1): it has no effect on this run"):format(k), 0)
    end
  end
  -- (Megatron's micro-batch group orders only its interleaved schedule: elsewhere refused, as an
  -- inert knob)
  if group and not (tp_impl == "megatron" and d.pp > 1 and sched == "Interleaved1F1B") then
    error(("training.parallel.pp_microbatch_group = %d needs Megatron's interleaved pipeline (tp_impl = \"megatron\", "
           .. "pp > 1, pp_schedule = \"Interleaved1F1B\"): it has no effect on this run"):format(group), 0)
  end
  if overlap ~= nil and not (tp_impl == "megatron" and d.pp > 1 and sched == "Interleaved1F1B") then
    error(("training.parallel.pp_overlap_p2p_comm = %s needs Megatron's interleaved pipeline (tp_impl = \"megatron\", "
           .. "pp > 1, pp_schedule = \"Interleaved1F1B\"; arguments.py turns it off for any other schedule): it has no "
           .. "effect on this run"):format(tostring(overlap)), 0)
  end
  if flush ~= nil and not (tp_impl == "megatron" and d.pp > 1 and sched == "Interleaved1F1B") then
    error(("training.parallel.pp_overlap_p2p_warmup_flush = %s needs Megatron's interleaved pipeline (tp_impl = "
           .. "\"megatron\", pp > 1, pp_schedule = \"Interleaved1F1B\"; only forward_backward_pipelining_with_interleaving "
           .. "reads overlap_p2p_comm_warmup_flush): it has no effect on this run"):format(tostring(flush)), 0)
  end
  if flush and overlap == false then
    error("training.parallel.pp_overlap_p2p_warmup_flush = true with pp_overlap_p2p_comm = false: Megatron's "
          .. "ModelParallelConfig raises ValueError (overlapping the warm-up's and flush's communication is only "
          .. "compatible with overlap_p2p_comm, not batch_p2p_comm)", 0)
  end
  -- (Megatron's shape exchange and its batched transfers' synchronize: strategies/megatron_pp.lua)
  for _, kv in ipairs { { "pp_variable_seq_lengths", varlen }, { "pp_batch_p2p_sync", p2p_sync } } do
    local k, v = kv[1], kv[2]
    if v ~= nil and not (tp_impl == "megatron" and d.pp > 1) then
      error(("training.parallel.%s = %s needs Megatron's pipeline (tp_impl = \"megatron\", pp > 1): it has no effect "
             .. "on this run"):format(k, tostring(v)), 0)
    end
  end
  if p2p_sync ~= nil and sched == "Interleaved1F1B" and overlap ~= false then
    error(("training.parallel.pp_batch_p2p_sync = %s under the interleaved schedule with pp_overlap_p2p_comm (its "
           .. "default): those transfers are not batched (batch_p2p_comm is off), so batch_p2p_sync has no effect "
           .. "on this run"):format(tostring(p2p_sync)), 0)
  end
  local recompute = RC.resolve(rc, tp_impl)
  -- (the ranks FSDP shards over and reduces gradients across: dp_shard * cp, times dp_replicate)
  return { megatron_recompute = recompute, degrees = d, world = n, dp = d.dp_replicate * d.dp_shard * d.cp, given = true, pp_schedule = sched, pp_microbatches = micro,
           cp_rotate_method = rotate, ep_imbalance = imbalance, async_tp = async_tp, tp_impl = tp_impl,
           megatron_distributed_optimizer = mg.megatron_distributed_optimizer,
           megatron_grad_reduce_in_fp32 = mg.megatron_grad_reduce_in_fp32,
           pp_layers_per_stage = split.pp_layers_per_stage, pp_stage_layers = split.pp_stage_layers,
           pp_keep_outputs = keep_outputs, pp_virtual_stages = virtual, pp_microbatch_group = group,
           pp_overlap_p2p_comm = overlap, pp_overlap_p2p_warmup_flush = flush, pp_variable_seq_lengths = varlen,
           pp_batch_p2p_sync = p2p_sync, notes = notes }
end

-- What the mesh asks for that vrsim does not model yet: the message (naming the knob), or nil.
-- Every such refusal is here, in one place, so that modelling a dimension is removing its line.
function M.not_modelled(mesh)
  local d = mesh.degrees
  -- (pp > 1: vrsim/pipeline.lua's layout refuses what it does not compose with; tp > 1:
  -- strategies/tp.lua, cp > 1: strategies/cp.lua, ep > 1: strategies/ep.lua refuse what they do
  -- not compose with)
  return nil
end

-- The process groups of the mesh, one per dimension in ORDER: { dim, size, stride (ranks between
-- neighbours of the group), ranks_per_node (the most of its ranks one node holds), nodes (how
-- many nodes it spans), link ("intra" inside one node, else "network"), ranks (rank `rank`'s
-- group, in order) }, and coords (rank's coordinate on each dimension). gpus_per_node places
-- ranks on nodes: rank r is on node r // gpus_per_node.
function M.groups(mesh, rank, gpus_per_node)
  local d = mesh.degrees
  local out, coords = {}, {}
  local stride = 1
  local strides = {}
  for i = #M.ORDER, 1, -1 do
    strides[M.ORDER[i]] = stride
    stride = stride * d[M.ORDER[i]]
  end
  for _, dim in ipairs(M.ORDER) do
    local size, s = d[dim], strides[dim]
    local c = (rank // s) % size
    coords[dim] = c
    local base = rank - c * s
    local ranks, per_node, most = {}, {}, 0
    for i = 0, size - 1 do
      local r = base + i * s
      ranks[#ranks + 1] = r
      local node = r // gpus_per_node
      per_node[node] = (per_node[node] or 0) + 1
      if per_node[node] > most then most = per_node[node] end
    end
    local nodes = 0
    for _ in pairs(per_node) do nodes = nodes + 1 end
    out[#out + 1] = { dim = dim, size = size, stride = s, ranks_per_node = most, nodes = nodes,
                      link = nodes > 1 and "network" or "intra", ranks = ranks }
  end
  return out, coords
end

-- Where the group of the flattened dimensions `dims` (e.g. { "dp_shard", "cp" }: FSDP's) that
-- holds `rank` sits: { size, ranks_per_node, nodes }.
function M.placement(mesh, dims, rank, gpus_per_node)
  local d = mesh.degrees
  local strides, stride = {}, 1
  for i = #M.ORDER, 1, -1 do
    strides[M.ORDER[i]] = stride
    stride = stride * d[M.ORDER[i]]
  end
  local base = rank
  for _, dim in ipairs(dims) do base = base - ((rank // strides[dim]) % d[dim]) * strides[dim] end
  local ranks = { base }
  for _, dim in ipairs(dims) do
    local more = {}
    for _, r in ipairs(ranks) do
      for c = 0, d[dim] - 1 do more[#more + 1] = r + c * strides[dim] end
    end
    ranks = more
  end
  local per_node, most, nodes = {}, 0, 0
  for _, r in ipairs(ranks) do
    local node = r // gpus_per_node
    if not per_node[node] then nodes = nodes + 1 end
    per_node[node] = (per_node[node] or 0) + 1
    if per_node[node] > most then most = per_node[node] end
  end
  return { size = #ranks, ranks_per_node = most, nodes = nodes }
end

-- One line that states the mesh and its groups of more than one rank, for the run's notes:
-- intra is the link inside a node ("nvlink", "pcie"), network the one between nodes.
function M.describe(mesh, rank, gpus_per_node, intra, network)
  local d = mesh.degrees
  local sizes = {}
  for _, dim in ipairs(M.ORDER) do sizes[#sizes + 1] = dim .. " " .. d[dim] end
  local groups = M.groups(mesh, rank, gpus_per_node)
  local parts = {}
  for _, g in ipairs(groups) do
    if g.size > 1 then
      parts[#parts + 1] = ("%s: %d ranks, stride %d, %d per node over %d node%s (%s)"):format(g.dim, g.size,
        g.stride, g.ranks_per_node, g.nodes, g.nodes == 1 and "" or "s",
        g.link == "intra" and intra or network)
    end
  end
  return ("device mesh [%s]%s%s"):format(table.concat(sizes, ", "), #parts > 0 and "; " or "",
                                        table.concat(parts, "; "))
end

return M
