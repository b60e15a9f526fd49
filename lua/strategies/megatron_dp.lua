-- megatron_dp.lua: data parallelism as Megatron-LM runs it over its tensor parallelism
-- (training.parallel.tp_impl = "megatron" with dp_replicate > 1): megatron-core 0.16.1's
-- DistributedDataParallel (megatron/core/distributed/distributed_data_parallel.py,
-- param_and_grad_buffer.py) and the optimizer get_megatron_optimizer makes over it
-- (megatron/core/optimizer/optimizer.py Float16OptimizerWithFloat16Params, distrib_optimizer.py
-- DistributedOptimizer), for the rank hardware.rank names (its dp coordinate picks its shard).
-- The passes lua/strategies/dp.lua runs
-- for strategy "ddp" when the tensor parallelism is Megatron's (lua/strategies/megatron_tp.lua).
--
-- What a rank keeps, from the source:
-- * one contiguous gradient buffer for all the parameters (_ParamAndGradBuffer: torch.zeros of
--   numel elements in grad_dtype, fp32 with grad_reduce_in_fp32), laid out in reverse parameter
--   order; each param.main_grad is a view of it. It is whole on every rank and lives for the run.
--   Under Megatron's interleaved pipeline (strategies/megatron_vpp.lua) get_model wraps each model
--   chunk in its own DistributedDataParallel: a buffer (and a parameter buffer) a chunk, made
--   chunk by chunk, each laid out, padded and sharded on its own; one optimizer over them all.
-- * under the distributed optimizer, a contiguous bf16 parameter buffer laid out the same way:
--   each param.data is moved into its view (param.data.detach().copy_(old); the old storage
--   freed). Each parameter then starts at a multiple of 64 elements and the buffer's end is a
--   multiple of lcm(dp, 128) (_pad_start_of_param_if_needed, _pad_end_of_bucket_if_needed), so
--   that it splits into dp equal shards; dp rank r owns shard r.
-- * the fp32 main (master) parameters: shard_model_param.clone().float() of the rank's shard of
--   each parameter under the distributed optimizer (the parameters that intersect shard r, each
--   cut to the intersection), param.detach().clone().float() of every parameter otherwise; the
--   bf16 clone freed once cast. Made at construction, parameter group by parameter group
--   (weight decay on the matrices, none on the 1-D norms: _get_param_groups), in the buffer's
--   order under the distributed optimizer, in the model's otherwise.
-- * torch.optim.AdamW's exp_avg and exp_avg_sq of each main parameter (the first step), and
--   MixedPrecisionOptimizer's _scale_one (torch.tensor([1.0]) on the device: bf16 has no grad
--   scaler).
-- The step (megatron/training/training.py train_step):
-- * zero_grad_buffer: grad_data.zero_() in place.
-- * backward: each weight's bf16 gradient is made by autograd, then the hook DDP puts on its
--   AccumulateGrad node (_make_backward_post_hook) runs main_grad.add_(param.grad) and
--   param.grad = None: no .grad outlives its hook.
-- * with a pipeline (strategies/megatron_pp.lua) the hooks run in every micro-batch's backward,
--   each into the same main_grad (the .grad each drops leaves the parameter without one for the
--   next micro-batch), and the schedule runs finalize_model_grads before it returns.
-- * finalize_model_grads: finish_grad_sync (overlap_grad_reduce False, Megatron's default: one
--   bucket, reduced after backward): grad_data *= 1/dp in place, then reduce_scatter_tensor of the
--   buffer into this rank's shard of itself (distributed optimizer) or all_reduce of the whole
--   buffer, over the dp group, in place; then the norms' main_grads, partial on each tp rank under
--   sequence parallelism, _flatten_dense_tensors'd into one new tensor, all-reduced over tp and
--   copied back (_allreduce_non_tensor_model_parallel_grads).
-- * optimizer.step: main_param.grad = main_grad.float() (a view where the buffer is fp32, a new
--   fp32 tensor per main parameter where it is bf16, kept until the next zero_grad); the
--   gradient norm over the main gradients (get_grad_norm_fp32: without Apex one 0-dim norm per
--   tensor, all alive together, then a 1-element tensor, its square all-reduced over the
--   grad-stats group); the clip when the norm exceeds clip_grad (not modelled: see M.notes);
--   AdamW foreach over each group; the main parameters copied into the bf16 parameters
--   (in place); under the distributed optimizer, the all-gather of the parameter buffer over dp
--   (each rank's shard into the whole buffer, in place).
local nn = require "vrsim.nn"
local ops = require "strategies.dp_ops"
local op = ops.op

local M = {}

local FIELD = "training.parallel.tp_impl = \"megatron\""

local function gcd(a, b) while b ~= 0 do a, b = b, a % b end return a end
local function lcm(a, b) return a // gcd(a, b) * b end
local function pad(n, d) return (n + d - 1) // d * d end

-- Why Megatron's data parallelism cannot be simulated for this run (the message naming the
-- field), or nil. t: cfg.training; mesh: the run's mesh.
function M.refusal(t, mesh)
  local d = mesh.degrees
  local function no(why) return FIELD .. " with data parallelism: " .. why end
  if t.strategy ~= "ddp" or d.dp_shard > 1 then
    return no(("training.strategy = \"%s\" (training.parallel.dp_shard = %d): Megatron's data parallelism is "
               .. "its DistributedDataParallel over training.parallel.dp_replicate ranks (with "
               .. "training.parallel.megatron_distributed_optimizer for its ZeRO-1-like sharding); Megatron-FSDP "
               .. "(data_parallel_sharding_strategy) and torch FSDP2 under it are not modelled"):format(t.strategy, d.dp_shard))
  end
  if t.zero then
    for k in pairs(t.zero) do
      return no(("training.zero.%s: Megatron's DistributedDataParallel keeps one bucket (overlap_grad_reduce "
                 .. "False, its default) and reads no torch DDP or DeepSpeed knob"):format(tostring(k)))
    end
  end
  if t.optimizer ~= "adamw" and t.optimizer ~= "adam" then
    return no(("training.optimizer = \"%s\": Megatron's optimizer is modelled as --optimizer adam "
               .. "(torch.optim.AdamW without Apex or TransformerEngine)"):format(t.optimizer))
  end
  if t.optimizer_impl ~= "foreach" then
    return no(("training.optimizer_impl = \"%s\": Megatron leaves torch.optim.AdamW's foreach unset, which "
               .. "picks foreach on a GPU"):format(tostring(t.optimizer_impl)))
  end
  if t.optimizer_in_backward then return no("training.optimizer_in_backward: not Megatron's step") end
  -- (without a pipeline Megatron's micro-batches are forward_backward_no_pipelining's loop, its
  -- no_sync and its loss scaling, not vrsim's grad_accum loop: not built; with a pipeline the
  -- schedule's micro-batches are pp_microbatches, strategies/megatron_pp.lua)
  if (t.grad_accum or 1) > 1 then
    return no(("training.grad_accum = %d: Megatron's micro-batches accumulating into main_grad (each "
               .. "micro-batch's hooks dropping its .grad, the reduction after the last) are not modelled")
              :format(t.grad_accum))
  end
  return nil
end

-- The contiguous buffer's layout over `params` (model order): { entries (buffer order:
-- reverse model order, { p, start, stop } in elements), numel (padded), shard (elements per dp
-- rank under the distributed optimizer) }.
function M.layout(params, dp, distopt)
  local entries, at = {}, 0
  for i = #params, 1, -1 do
    local p = params[i]
    if distopt then at = pad(at, 64) end
    local n = nn.numel(p.shape)
    entries[#entries + 1] = { p = p, start = at, stop = at + n }
    at = at + n
  end
  local numel = distopt and pad(at, lcm(dp, 128)) or at
  return { entries = entries, numel = numel, shard = numel // dp }
end

-- Megatron's parameter groups (_get_param_groups with the default no_weight_decay_cond): the
-- 1-D parameters (norms, biases) without weight decay, the rest with it; groups in the order
-- their first parameter comes in the model.
local function group_of(p) return #p.shape == 1 and "no_wd" or "wd" end

-- The main parameters of this rank: { groups = { { masters } ... } }, each master
-- { p (its model parameter), numel, start (in the buffer) }.
local function main_params(s, trainable)
  local order, groups = {}, {}
  for _, p in ipairs(trainable) do
    local g = group_of(p)
    if not groups[g] then groups[g] = {}; order[#order + 1] = g end
  end
  if s.distopt then
    -- (dp rank r's shard: [r * shard, (r + 1) * shard) of each buffer, buffer by buffer in the
    -- buffer's order)
    for _, buf in ipairs(s.bufs) do
      local lo = s.dp_rank * buf.layout.shard
      for _, e in ipairs(buf.layout.entries) do
        local a, b = math.max(e.start, lo), math.min(e.stop, lo + buf.layout.shard)
        if b > a then table.insert(groups[group_of(e.p)], { p = e.p, numel = b - a, start = a }) end
      end
    end
  else
    for _, p in ipairs(trainable) do
      table.insert(groups[group_of(p)], { p = p, numel = nn.numel(p.shape) })
    end
  end
  local r = {}
  for _, g in ipairs(order) do if #groups[g] > 0 then r[#r + 1] = groups[g] end end
  return r
end

-- Called by dp.setup for strategy ddp under Megatron's tensor parallelism: the settings.
function M.setup(cx, cfg, s)
  local mesh = cx.mesh
  s.kind = "megatron"
  s.distopt = mesh.megatron_distributed_optimizer
  s.grad_dtype = mesh.megatron_grad_reduce_in_fp32 and "fp32" or "bf16"
  s.tp = mesh.degrees.tp
  s.pp = mesh.degrees.pp
  -- the rank's place in its dp group decides which shard of the buffer it owns (hardware.rank)
  local _, coords = require("vrsim.mesh").groups(mesh, cfg.hardware.rank or 0, cfg.hardware.gpus_per_node)
  s.dp_rank = coords.dp_replicate or 0
  cx.mg_dp = s
end

-- The trainable parameters of each DistributedDataParallel: all of them, or under the
-- interleaved pipeline each model chunk's (megatron_tp.lua names them "<chunk>.module.*").
local function ddp_groups(cx, trainable)
  if not (cx.pp and cx.pp.virtual > 1) then return { trainable } end
  local groups = {}
  for c = 1, cx.pp.virtual do groups[c] = {} end
  for _, p in ipairs(trainable) do
    local c = tonumber(p.name:match("^(%d+)%.module%."))
    table.insert(groups[c + 1], p)
  end
  return groups
end

-- DistributedDataParallel(config, ddp_config, Float16Module(GPTModel)) (one a model chunk) and
-- the optimizer's construction, once the model is built and cast (megatron_tp.lua build_extras
-- calls it).
function M.wrap(cx)
  local s = cx.mg_dp
  local G = cx.G
  local trainable = {}
  for _, p in ipairs(cx.params) do if p.trainable then trainable[#trainable + 1] = p end end
  s.trainable = trainable
  local function persistent(name, n, dt, cat)
    return G:tensor { name = name, bytes = n * nn.DT_SIZE[dt], numel = n, dtype = dt, cat = cat, persistent = true }
  end
  s.bufs = {}
  local groups = ddp_groups(cx, trainable)
  for c, group in ipairs(groups) do
    local b = { trainable = group, layout = M.layout(group, s.n, s.distopt) }
    s.bufs[c] = b
    local of = #groups > 1 and (" of model chunk %d"):format(c - 1) or ""
    local numel = b.layout.numel
    local outs = {}
    if s.distopt then
      b.param_buf = persistent("DDP param buffer (bf16, contiguous)" .. of, numel, "bf16", "param")
      outs[#outs + 1] = b.param_buf
    end
    b.grad_buf = persistent(("DDP grad buffer (%s, main_grad)"):format(s.grad_dtype) .. of, numel, s.grad_dtype, "grad")
    outs[#outs + 1] = b.grad_buf
    op(cx, { name = "_ParamAndGradBuffer: torch.zeros (param_data, grad_data)" .. of, kind = "elementwise",
             phase = "build", outputs = outs, bytes = numel * (nn.DT_SIZE[s.grad_dtype] + (s.distopt and 2 or 0)) })
    for _, p in ipairs(group) do p.mg_buf = b end
    if s.distopt then
      -- param.data = the buffer's view; .copy_(old); the old storage freed (buffer order)
      for _, e in ipairs(b.layout.entries) do
        local p = e.p
        local v = G:tensorv(p.name, 0, nn.numel(p.shape), p.dtype, "param", p.trainable, p.trainable, true, true,
                            nil, b.param_buf)
        op(cx, { name = p.name .. ": param.data = the param buffer's view, copy_(old)", kind = "copy", phase = "build",
                 inputs = { p.id }, outputs = { v }, frees = { p.id }, bytes = 2 * nn.bytes(p.shape, p.dtype) })
        p.id = v
      end
    end
  end
  cx.notes = cx.notes or {}
  for _, n in ipairs(M.notes(s)) do cx.notes[#cx.notes + 1] = n end
  -- MixedPrecisionOptimizer.__init__: _scale_one (no grad scaler under bf16)
  s.scale_one = persistent("MixedPrecisionOptimizer._scale_one", 1, "fp32", "optstate")
  op(cx, { name = "optimizer: _scale_one = torch.tensor([1.0])", kind = "h2d", phase = "build",
           outputs = { s.scale_one }, bytes = 4 })
  -- the main parameters: clone (bf16) then .float(), the clone freed
  s.groups = main_params(s, trainable)
  for _, g in ipairs(s.groups) do
    for _, m in ipairs(g) do
      local p = m.p
      local what = s.distopt and " (the rank's shard)" or ""
      local clone = G:tensor { name = p.name .. ".clone()" .. what, bytes = m.numel * 2, numel = m.numel,
                               dtype = "bf16", cat = "temp" }
      op(cx, { name = p.name .. ": main param clone()" .. what, kind = "copy", phase = "build", inputs = { p.id },
               outputs = { clone }, bytes = 4 * m.numel })
      m.id = persistent(p.name .. ": fp32 main param" .. what, m.numel, "fp32", "optstate")
      op(cx, { name = p.name .. ": main param .float()" .. what, kind = "elementwise", phase = "build",
               inputs = { clone }, outputs = { m.id }, frees = { clone }, bytes = 6 * m.numel })
      m.name, m.shape, m.dtype = p.name .. ".main", { m.numel }, "fp32"
    end
  end
end

-- Before each micro-batch's backward: each weight's post-accumulate hook adds its bf16
-- gradient into its main_grad and drops it (hook 3: just after the parameter's gradient is
-- accumulated).
function M.before_backward(cx, s, params, trainable)
  for _, p in ipairs(trainable) do
    local n = nn.numel(p.shape)
    op(cx, { name = p.name .. ": main_grad.add_(grad); grad = None", kind = "elementwise", phase = "bwd",
             hook = 3, grads_of = { p.id }, free_grads = true, drop_persistent = true, layer = p.layer or -1,
             inputs = { p.mg_buf.grad_buf }, bytes = n * (2 * nn.DT_SIZE[s.grad_dtype] + 2) })
  end
end

-- finalize_model_grads: finish_grad_sync, then the norms' main_grads over tp. Without a
-- pipeline train_step runs it after backward (M.after_backward); with one the schedule runs it
-- as it returns (strategies/megatron_pp.lua), which marks s.finalized.
function M.finalize(cx, s, trainable)
  local G = cx.G
  -- (each model chunk's finish_grad_sync in turn)
  local all = {}
  for _, b in ipairs(s.bufs) do
    all[#all + 1] = b.grad_buf
    local gb = b.layout.numel * nn.DT_SIZE[s.grad_dtype]
    op(cx, { name = "finish_grad_sync: grad_data *= 1/dp", kind = "elementwise", phase = "bwd",
             inputs = { b.grad_buf }, bytes = 2 * gb })
    op(cx, { name = s.distopt and "finish_grad_sync: reduce_scatter of the grad buffer (dp)"
                    or "finish_grad_sync: all_reduce of the grad buffer (dp)",
             kind = s.distopt and "reduce_scatter" or "all_reduce", phase = "bwd", inputs = { b.grad_buf },
             bytes = gb, dtype = s.grad_dtype, world = s.n })
  end
  -- the norms' main_grads over tp (sequence parallelism): flattened, all-reduced, copied back
  local norms = 0
  for _, p in ipairs(trainable) do if #p.shape == 1 then norms = norms + nn.numel(p.shape) end end
  if norms > 0 and s.tp > 1 then
    local flat = G:tensor { name = "_flatten_dense_tensors(norm main_grads)", bytes = norms * nn.DT_SIZE[s.grad_dtype],
                            numel = norms, dtype = s.grad_dtype, cat = "temp" }
    local nb = norms * nn.DT_SIZE[s.grad_dtype]
    op(cx, { name = "finalize_model_grads: cat the norms' main_grads", kind = "copy", phase = "bwd",
             inputs = all, outputs = { flat }, bytes = 2 * nb })
    cx.G:op { name = "finalize_model_grads: all_reduce the norms' main_grads (tp)", kind = "all_reduce", phase = "bwd",
              inputs = { flat }, outputs = {}, frees = {}, bytes = nb, dtype = s.grad_dtype, world = s.tp }
    local back = { flat }
    for _, g in ipairs(all) do back[#back + 1] = g end
    op(cx, { name = "finalize_model_grads: copy the norms' main_grads back", kind = "copy", phase = "bwd",
             inputs = back, frees = { flat }, bytes = 2 * nb })
  end
end

-- A pipeline schedule's config.finalize_model_grads_func, once the schedule's backwards have run
-- (strategies/megatron_pp.lua, megatron_vpp.lua): M.finalize over the rank's trainable weights.
function M.finalize_schedule(cx)
  local trainable = {}
  for _, p in ipairs(cx.params) do if p.trainable then trainable[#trainable + 1] = p end end
  M.finalize(cx, cx.mg_dp, trainable)
  cx.mg_dp.finalized = true
end

-- After backward: finalize_model_grads (unless the pipeline's schedule ran it), then what the
-- optimizer updates (the main parameters).
function M.after_backward(cx, cfg, s, trainable)
  local G = cx.G
  if not s.finalized then M.finalize(cx, s, trainable) end
  -- optimizer.step: main_param.grad = main_grad.float()
  local upd, all_grads, grads = {}, {}, {}
  for _, g in ipairs(s.groups) do
    local gu = {}
    for _, m in ipairs(g) do
      local gid = m.p.mg_buf.grad_buf
      if s.grad_dtype ~= "fp32" then
        gid = G:tensor { name = m.name .. ".grad = main_grad.float()", bytes = m.numel * 4, numel = m.numel,
                         dtype = "fp32", cat = "grad" }
        op(cx, { name = m.p.name .. ": main_grad.float()", kind = "elementwise", phase = "optim",
                 inputs = { m.p.mg_buf.grad_buf }, outputs = { gid }, bytes = 6 * m.numel })
        all_grads[#all_grads + 1] = gid
      end
      gu[#gu + 1] = { param = m, grad = gid }
      grads[#grads + 1] = m
    end
    upd[#upd + 1] = gu
  end
  -- get_grad_norm_fp32 (no Apex): dummy_overflow_buf, one 0-dim norm per main gradient (all
  -- alive), the 1-element norm, its square all-reduced over the grad-stats group (the whole
  -- world under the distributed optimizer, the model-parallel group, tp x pp, otherwise)
  local function scalar(name, dt)
    return G:tensor { name = name, bytes = nn.DT_SIZE[dt], numel = 1, dtype = dt, cat = "temp" }
  end
  local dummy = scalar("get_grad_norm_fp32: dummy_overflow_buf", "int32")
  op(cx, { name = "get_grad_norm_fp32: dummy_overflow_buf = torch.zeros(1)", kind = "elementwise", phase = "optim",
           outputs = { dummy }, bytes = 4 })
  local norms_l = {}
  local total = 0
  for i, m in ipairs(grads) do
    norms_l[i] = scalar(m.name .. ": torch.norm(grad)", "fp32")
    total = total + m.numel
  end
  local gbufs = {}
  for _, b in ipairs(s.bufs) do gbufs[#gbufs + 1] = b.grad_buf end
  op(cx, { name = "local_multi_tensor_l2_norm: torch.norm of each main gradient", kind = "reduce_rows", phase = "optim",
           inputs = gbufs, outputs = norms_l, bytes = total * 4, kernels = #grads })
  local l2 = scalar("local_multi_tensor_l2_norm: l2_cuda", "fp32")
  local rev = {}
  for i = #norms_l, 1, -1 do rev[#rev + 1] = norms_l[i] end
  op(cx, { name = "local_multi_tensor_l2_norm: torch.tensor([norm]) on the device", kind = "h2d", phase = "optim",
           outputs = { l2 }, frees = rev, bytes = 4 })
  local sq = scalar("get_grad_norm_fp32: total_norm = grad_norm ** 2", "fp32")
  op(cx, { name = "get_grad_norm_fp32: grad_norm ** 2", kind = "elementwise", phase = "optim", inputs = { l2 },
           outputs = { sq }, bytes = 8 })
  cx.G:op { name = "get_grad_norm_fp32: all_reduce of the squared norm", kind = "all_reduce", phase = "optim",
            inputs = { sq }, outputs = {}, frees = { dummy, l2, sq }, bytes = 4, dtype = "fp32",
            world = (s.distopt and s.n or 1) * s.tp * s.pp }
  s.all_grads = all_grads
  return { megatron = upd }
end

-- The optimizer's step over each parameter group, then the main parameters copied into the
-- model's and, under the distributed optimizer, the parameter buffer all-gathered.
function M.step(cx, cfg, s, upd)
  local optim = require "strategies.optim"
  for i, gu in ipairs(upd) do
    -- (the gradients are views of the buffer, or freed at the last group's zero_grad)
    gu.all_grads = i == #upd and s.all_grads or {}
    optim.build(cx, cfg, nil, gu)
  end
  local total = 0
  for _, g in ipairs(s.groups) do for _, m in ipairs(g) do total = total + m.numel end end
  local pbufs = {}
  for _, b in ipairs(s.bufs) do pbufs[#pbufs + 1] = b.param_buf end
  op(cx, { name = "_copy_main_params_to_model_params (fp32 -> bf16, in place)", kind = "elementwise",
           phase = "optim", inputs = pbufs, bytes = 6 * total })
  if s.distopt then
    for _, b in ipairs(s.bufs) do
      op(cx, { name = "start_param_sync: all_gather of the param buffer (dp)", kind = "all_gather", phase = "optim",
               inputs = { b.param_buf }, bytes = b.layout.numel * 2, dtype = "bf16", world = s.n })
    end
  end
  -- zero_grad_buffer before the next step (each model chunk's)
  for _, b in ipairs(s.bufs) do
    op(cx, { name = "zero_grad_buffer: grad_data.zero_()", kind = "elementwise", phase = "zero_grad",
             inputs = { b.grad_buf }, bytes = b.layout.numel * nn.DT_SIZE[s.grad_dtype] })
  end
end

-- The run's notes and its header words.
function M.notes(s)
  local sizes = {}
  for i, b in ipairs(s.bufs) do sizes[i] = tostring(b.layout.numel) end
  local numels = table.concat(sizes, " and ")
  local distopt_default = "megatron/training/arguments.py: --use-distributed-optimizer is off unless given"
  return {
    ("Megatron's DistributedDataParallel over %d dp ranks: the gradients accumulate into %s contiguous %s grad "
     .. "buffer (main_grad, %s elements, whole on every rank), %s after backward in one bucket "
     .. "(overlap_grad_reduce off, Megatron's default), distributed optimizer %s (%s)%s"):format(
      s.n, #s.bufs > 1 and ("a model chunk's (" .. #s.bufs .. " chunks)") or "one", s.grad_dtype, numels,
      s.distopt and "reduce-scattered" or "all-reduced",
      s.distopt and "on" or "off", distopt_default,
      s.distopt and ": fp32 main params and Adam states of this rank's 1/dp shard of the buffer, the bf16 params in a "
        .. "contiguous buffer all-gathered after the step" or ": fp32 main params and Adam states of every parameter"),
    "Megatron's optimizer: the gradient clip's scale (clip_grad 1.0, when the norm exceeds it: a temporary per "
      .. "main gradient, one at a time) is not modelled, nor overlap_param_gather, overlap_grad_reduce or "
      .. "Megatron-FSDP",
  }
end

return M
