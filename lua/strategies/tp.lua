-- tp.lua: tensor parallelism with sequence parallelism, as torch.distributed.tensor.parallel runs
-- torchtitan's plan (torchtitan/models/llama3/infra/parallelize.py apply_tp, at the parent of
-- torchtitan commit 9810191), on transformers' module names:
--
--   embed_tokens     RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
--   input_layernorm, post_attention_layernorm, norm: SequenceParallel()
--   self_attn        PrepareModuleInput(Shard(1) -> Replicate()): all-gather of the sequence
--   q_proj, k_proj, v_proj, gate_proj, up_proj: ColwiseParallel()
--   o_proj, down_proj: RowwiseParallel(output_layouts=Shard(1)): reduce-scatter of the output
--   mlp              PrepareModuleInput(Shard(1) -> Replicate())
--   lm_head          ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1)), loss parallel
--
-- Each rank holds: the Colwise weights' rows out/tp (their biases too), the Rowwise weights'
-- columns in/tp, the embedding's and the head's vocabulary rows vocab/tp, the norms whole. Between
-- the blocks the hidden states are sequence-sharded, (b, s/tp, h); the norms run on that shard.
-- Before attention and the MLP the shard is all-gathered to (b, s, h), which the projections keep
-- for backward; attention runs on heads/tp heads (kv_heads/tp) over the whole sequence; the
-- Rowwise projection's (b, s, h) partial sum is reduce-scattered back to (b, s/tp, h). Autograd
-- runs the conjugates: a reduce-scatter of the gradient where forward all-gathered, an all-gather
-- where it reduce-scattered. The collectives run on the compute stream (DTensor's functional
-- collectives are issued there and block the kernels that read their output), over the tp group
-- of adjacent ranks.
--
-- The pass changes the tree before its parameters are made (per-rank shapes: torchtitan builds the
-- model on the meta device, parallelizes it, then materializes each rank's shards) and hooks the
-- collectives on module boundaries after, as parallelize_module registers its input and output
-- functions.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local S = require("vrsim.core").streams  -- Op.stream ids (sim/graph.h StreamId)

local T = {}

-- The families whose decoder layer is llama.lua's (q/k/v/o, gate/up/down, two RMSNorms): the
-- plan names their modules.
local FAMILIES = { llama = true, mistral = true, qwen2 = true, qwen3 = true }

local COLWISE = { q_proj = true, k_proj = true, v_proj = true, gate_proj = true, up_proj = true }
local ROWWISE = { o_proj = true, down_proj = true }

-- What tensor parallelism over tp ranks cannot be applied to as modelled: the message naming it,
-- or nil. fam: the family module (models/*.lua), mc: its normalized config, t: cfg.training.
function T.refusal(fam, mc, t, tp)
  local where = ("training.parallel.tp = %d"):format(tp)
  if not FAMILIES[fam.model_type or ""] then
    return ("%s: tensor parallelism is modelled for the Llama, Mistral, Qwen2 and Qwen3 families "
            .. "(torchtitan's plan on their modules), not for %s"):format(where, tostring(fam.model_type))
  end
  if mc.experts then return where .. ": tensor parallelism of mixture-of-experts layers is not modelled" end
  if mc.fused_qkv then return where .. ": a fused qkv projection is not modelled under tensor parallelism" end
  if mc.qk_norm == "proj" then
    return where .. ": a q/k norm over the whole projection (OLMo-2) is not modelled under tensor parallelism"
  end
  for _, e in ipairs { { "num_attention_heads", mc.heads }, { "num_key_value_heads", mc.kv_heads },
                       { "intermediate_size", mc.intermediate }, { "vocab_size", mc.vocab },
                       { "training.seq (sequence parallelism shards it)", t.seq } } do
    if e[2] % tp ~= 0 then
      return ("%s: %s = %d is not a multiple of tp (uneven DTensor shards are not modelled)"):format(where, e[1], e[2])
    end
  end
  if t.strategy ~= "none" and t.strategy ~= "fsdp2" then
    return ("%s with training.strategy = \"%s\": torchtitan composes tensor parallelism with FSDP2 only "
            .. "(DDP and DeepSpeed over a 2-D mesh are not modelled)"):format(where, t.strategy)
  end
  local unsupported = {
    { t.precision:match("^lora") or t.lora ~= nil, "LoRA adapters" },
    { t.quant ~= "none", "bitsandbytes quantization" },
    { t.loss ~= "full", "training.loss = \"" .. t.loss .. "\" (torchtitan's loss parallel is the full cross-entropy)" },
    -- (loss parallel's DTensor cross-entropy under torch.compile: its partition is not checked)
    { t.compile_loss, "training.compile_loss (loss parallel's cross-entropy compiled)" },
    { t.device_map ~= "none", "device_map" },
    { t.activation_offload, "activation offloading" },
    { t.optimizer_in_backward, "the optimizer step in backward" },
    { t.build == "cast", "training.build = \"cast\" (each rank's shards are made in their dtype, as torchtitan materializes them)" },
    -- (mp_fp32 is modelled: FSDP2 casts each rank's fp32 shard of its tensor-parallel DTensor to
    -- bf16 before the all-gather, so the TP layers, their collectives and gradients are the bf16
    -- run's; only the shards, their reduce-scattered gradients and the optimizer are fp32)
    { t.precision:match("^amp"), "autocast" },
    -- (the embedding's whole gradient, cloned to the rank's rows inside each optimizer op that
    -- reads it, is modelled for torch's AdamW and Adam: T.hooks)
    { t.strategy == "none" and t.optimizer ~= "adamw" and t.optimizer ~= "adam",
      ("training.optimizer = \"%s\" (the embedding's whole gradient in its step)"):format(t.optimizer) },
  }
  for _, u in ipairs(unsupported) do
    if u[1] then return ("%s with %s: not modelled yet"):format(where, u[2]) end
  end
  return nil
end

-- A decl's shape with dimension d divided by tp.
local function shard_decl(m, key, d, tp)
  for _, decl in ipairs(m.decls) do
    if decl.key == key then
      local s = {}
      for i, v in ipairs(decl.shape) do s[i] = v end
      s[d] = s[d] // tp
      decl.shape = s
    end
  end
end

-- The tree's parameters as one rank of the tp group holds them (before they are made).
function T.shard_tree(root, tp)
  mod.walk(root, function(m)
    if COLWISE[m.key] then
      shard_decl(m, "weight", 1, tp)
      shard_decl(m, "bias", 1, tp)
      m.out_features = m.out_features // tp
    elseif ROWWISE[m.key] then
      shard_decl(m, "weight", 2, tp) -- the bias stays whole (Replicate)
      m.in_features = m.in_features // tp
    elseif m.key == "embed_tokens" then
      shard_decl(m, "weight", 1, tp)
    elseif m.key == "lm_head" then
      shard_decl(m, "weight", 1, tp)
      m.out_features = m.out_features // tp
      -- a tied head's constructed weight: torchtitan builds on the meta device, nothing is made
      m.untied_at_init = nil
    end
    if m.attn then
      m.attn.heads = m.attn.heads // tp
      m.attn.kv_heads = m.attn.kv_heads // tp
    end
  end)
end

-- A collective of the tp group on the compute stream: `kind` of x into a new tensor of `shape`,
-- whose backward is `bwd_kind` of the gradient (x's shape back). bytes: the larger buffer, as
-- nccl-tests counts it. bwd_temp: bytes its backward makes first and frees (the sequence
-- reduce-scatter's chunk cat, the sequence all-gather's gathered buffer).
-- A float8 x (torchao's float8 tensor-parallel styles, hp_dtype set) moves 1 byte an element in
-- forward; its gradient is the high-precision one, and so is backward's collective.
local function collective(cx, name, kind, bwd_kind, x, shape, tp, bwd_temp)
  local rg = x.rg and not cx.no_grad
  local out = nn.new_tensor(cx, name, shape, x.dtype, rg)
  out.hp_dtype = x.hp_dtype
  local gdt = x.hp_dtype or x.dtype
  local full = math.max(nn.bytes(shape, x.dtype), nn.bytes(x.shape, x.dtype))
  local gfull = math.max(nn.bytes(shape, gdt), nn.bytes(x.shape, gdt))
  local index = cx.G:op {
    name = name, kind = kind, phase = cx.phase, inputs = { x.id }, outputs = { out.id },
    grads = rg and { { bytes = nn.bytes(x.shape, gdt), dtype = gdt } } or nil,
    bwd_kind = bwd_kind, bytes = full, bwd_bytes = gfull, dtype = x.dtype, world = tp,
    bwd_workspace = bwd_temp and { bwd_temp } or nil, bwd_workspace_first = bwd_temp and true or nil,
    layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
  -- inside a compiled layer (strategies/compile.lua) the collective is one of the traced graph's
  -- nodes (DTensor's functional collectives, _c10d_functional): the partitioner sees it as an op
  -- outside its recomputable allowlist (force_save_collectives: MUST_SAVE, unless the layer is
  -- checkpointed, whose ops all recompute), reading its input from a materialized buffer
  if cx.compiling and cx.sac and cx.region then
    cx.sac(cx, { name = name, kind = kind, inputs = { x } }, index, { out }, rg)
  end
  return out
end
T.collective = collective

-- The functional collectives gather and scatter along dim 0 (torch/distributed/
-- _functional_collectives.py, torch 2.13); along the sequence (dim 1) they reorder with a copy:
-- reduce_scatter_single cats the input's tp chunks along dim 0 first (_chunk_or_narrow_cat), and
-- all_gather_single cats the gathered (tp * b, s/tp, h) buffer's chunks along dim 1 after, unless
-- that is a view (_maybe_view_chunk_cat: b == 1). The copy's backward hands back views.
local function chunk_cat(cx, name, x)
  local y = nn.op(cx, { name = name, kind = "copy", inputs = { x },
                        outs = { { name, x.shape, x.dtype } }, grads = { { pass = 1 } } })
  y.hp_dtype = x.hp_dtype
  return y
end

-- (b, s/tp, h) -> (b, s, h)
local function gather_seq(cx, name, x, tp)
  local s = nn.copy_shape(x.shape)
  s[2] = s[2] * tp
  -- (its backward, a reduce-scatter along the sequence, cats the gradient's chunks first)
  local y = collective(cx, name, "all_gather", "reduce_scatter", x, s, tp, nn.bytes(s, x.hp_dtype or x.dtype))
  if s[1] > 1 then y = chunk_cat(cx, name .. " (chunk cat)", y) end
  return y
end

-- (b, s, h) partial sums -> (b, s/tp, h)
-- (its backward, an all-gather of the gradient along the sequence, gathers into a (tp * b, s/tp, h)
-- buffer and cats its chunks along dim 1 into the gradient, then frees the buffer, unless the cat
-- is a view (b == 1): the buffer is backward's temporary, made first)
local function scatter_seq(cx, name, x, tp)
  local s = nn.copy_shape(x.shape)
  s[2] = s[2] // tp
  local gathered = s[1] > 1 and nn.bytes(x.shape, x.hp_dtype or x.dtype) or nil
  return collective(cx, name, "reduce_scatter", "all_gather", chunk_cat(cx, name .. " (chunk cat)", x), s, tp,
                    gathered)
end

-- Async tensor parallelism (torchtitan's enable_async_tensor_parallel: apply_tp sets
-- torch._inductor.config._micro_pipeline_tp; torch 2.13's torch/_inductor/fx_passes/
-- micro_pipeline_tp.py rewrites each compiled graph after the partitioner, and
-- torch/distributed/_symmetric_memory/__init__.py runs the fused ops). Inside a compiled layer:
--
-- * all-gather -> GEMMs (fuse_all_gather_matmul): the sequence all-gather (gather_dim 1, the
--   all_gather_into_tensor + split + cat pattern) and the GEMMs that read the gathered tensor as
--   their left operand (q/k/v, gate/up; float8's _scaled_mm too: only a last-dim gather excludes
--   them) become one fused_all_gather_matmul. _fused_all_gather_matmul_impl allocates the
--   gathered A_flat (new_empty, the caching allocator) and each GEMM's output, and returns A
--   (unflatten: a view, no chunk cat) where the graph still uses it: the partitioner chose what
--   to save on the unfused graph, so the gathered input stays saved for the weight gradients.
--   _pipelined_all_gather_and_consume copies the rank's shard into the group's symmetric-memory
--   workspace on the compute stream (barrier after it), then each remote shard's peer copy and
--   its GEMM chunk alternate over the compute and the backend stream: the copies run beside
--   the GEMMs, and the compute stream waits for the backend stream and a barrier at the end.
-- * GEMM -> reduce-scatter (fuse_matmul_reduce_scatter): o_proj's and down_proj's output
--   reduce-scattered (scatter_dim 1, the chunk cat + reduce_scatter_tensor pattern) becomes one
--   fused_matmul_reduce_scatter: the GEMM writes the stacked partials (new_empty, the size of the
--   GEMM's output; no chunk cat), _pipelined_produce_and_all2all pulls each peer's chunk beside
--   the next chunk's GEMM, and a sum over the tp partials (reduce_fn) makes the (b, s/tp, h)
--   output once the backend stream is joined.
-- * Not fused: the head's all-gather (outside the compiled layers); in backward the
--   reduce-scatter of the gathered input's gradient (its producer is a sum of GEMMs, not one
--   GEMM: _find_producer_matmul) and, under float8, the all-gather of the output's gradient
--   (its GEMM reads the float8 cast, not the gathered tensor). The bf16 backward's all-gather of
--   the output's gradient fused with its input-gradient GEMM is not modelled (the note says so).
-- The symmetric-memory workspace (get_symm_mem_workspace: the larger of the shard, for an
-- all-gather, and two output chunks, for a reduce-scatter) comes from
-- _SymmetricMemory.empty_strided_p2p, outside the caching allocator: T.async_workspace.

-- The tp group's symmetric-memory workspace: get_symm_mem_workspace re-allocates it when a fused
-- op asks for more than it holds (max(size, min_size)), so it ends the size of the largest
-- request; it is outside the caching allocator, so no peak of vrsim's includes it: a note says
-- its size once it has grown (the first reduce-scatter's request is the layer's largest, two
-- (b, s/tp, h) chunks against the all-gathers' one shard)
local function workspace(cx, bytes)
  if bytes <= (cx.symm_mem_bytes or 0) then return end
  cx.symm_mem_bytes = bytes
  if cx.symm_mem_note then
    cx.notes[cx.symm_mem_note] = T.async_workspace_note(bytes)
  else
    cx.notes[#cx.notes + 1] = T.async_workspace_note(bytes)
    cx.symm_mem_note = #cx.notes
  end
end

-- Where the unfused collective's chunk cat copied, the fused op hands back a view (unflatten's,
-- or the partials themselves); backward is the unfused graph's (the pass rewrote forward only,
-- the backward graph has its own collectives), so its node is the chunk cat's: a copy of the
-- gradient's bytes as the compiled chunk cat's backward is priced (G:op_partition: twice what it
-- moved, its input and its output).
local function unfused_cat_backward(cx, name, x)
  local v = nn.view(cx, x, x.shape, name)
  v.hp_dtype = x.hp_dtype
  local b = nn.bytes(x.shape, x.dtype)
  local rg = x.rg and not cx.no_grad
  local index = cx.G:op { name = name, kind = "none", phase = cx.phase, inputs = { x.id }, outputs = { v.id },
            grads = rg and { { pass = 1 } } or nil, bwd_kind = "copy", bytes = 0, bwd_bytes = 2 * (2 * b),
            dtype = x.dtype, layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
  -- (the partitioner's op, so that what it saves of the view is its decision on the base; not
  -- one it fuses and prices itself: compile_extern keeps the backward above)
  if cx.sac and cx.region then
    cx.sac(cx, { name = name, kind = "none", inputs = { x }, compile_extern = true }, index, { v }, rg)
  end
  return v
end

-- (b, s/tp, h) -> (b, s, h) under async tp: the fused op's shard copy into symmetric memory,
-- which makes the gathered tensor (A_flat) and, as the unfused graph's collective did, carries
-- its backward (the reduce-scatter of the gradient); the peer copies on the backend stream. The
-- GEMMs that read it follow on the compute stream; async_join ends the fused op after them.
local function fused_gather(cx, name, x, tp)
  local s = nn.copy_shape(x.shape)
  s[2] = s[2] * tp
  local rg = x.rg and not cx.no_grad
  local gdt = x.hp_dtype or x.dtype
  local out = nn.new_tensor(cx, name, s, x.dtype, rg)
  out.hp_dtype = x.hp_dtype
  local shard = nn.bytes(x.shape, x.dtype)
  local full = nn.bytes(s, x.dtype)
  local gfull = nn.bytes(s, gdt)
  local index = cx.G:op {
    name = name .. ": shard into symmetric memory", kind = "copy", phase = cx.phase, inputs = { x.id },
    outputs = { out.id }, grads = rg and { { bytes = nn.bytes(x.shape, gdt), dtype = gdt } } or nil,
    bwd_kind = "reduce_scatter", bytes = 2 * shard, bwd_bytes = gfull, dtype = x.dtype, world = tp,
    bwd_workspace = { gfull }, bwd_workspace_first = true,
    layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
  -- (the partitioner saw the all-gather: strategies/compile.lua's must-save of collectives)
  if cx.sac and cx.region then cx.sac(cx, { name = name, kind = "all_gather", inputs = { x } }, index, { out }, rg) end
  local peer = cx.G:op {
    name = name .. ": peer copies", kind = "all_gather", phase = cx.phase, stream = S.symm_mem,
    inputs = { out.id }, outputs = {}, frees = {}, bytes = full, dtype = x.dtype, world = tp,
    layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
  -- (recomputed where the gathered tensor is: its node)
  if cx.sac and cx.region then cx.sac(cx, { name = name, kind = "all_gather", inputs = { x } }, peer, { out }, false) end
  workspace(cx, shard)
  if s[1] > 1 then return unfused_cat_backward(cx, name .. " (view)", out) end
  return out
end

-- The end of a fused all-gather's GEMMs: the compute stream waits for the backend stream, then
-- symm_mem.barrier(channel=0), a kernel.
local function async_join(cx, name)
  cx.G:op { name = name .. ": join the backend stream, barrier", kind = "elementwise", phase = cx.phase,
            inputs = {}, outputs = {}, frees = {}, bytes = 0, wait_stream = S.symm_mem,
            layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
end

-- (b, s, h) partial sums, the output of GEMM x_in @ W -> (b, s/tp, h) under async tp: the peer
-- pulls of the stacked partials' chunks on the backend stream from the GEMM's start (its input
-- ready), then the sum over the tp partials once joined, which carries the backward (the
-- all-gather of the gradient).
local function fused_scatter(cx, name, x_in, partials, tp)
  local s = nn.copy_shape(partials.shape)
  s[2] = s[2] // tp
  local full = nn.bytes(partials.shape, partials.dtype)
  local peer = cx.G:op {
    name = name .. ": peer copies", kind = "all_to_all", phase = cx.phase, stream = S.symm_mem,
    inputs = { x_in.id }, outputs = {}, frees = {}, bytes = full, dtype = partials.dtype, world = tp,
    layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
  -- (recomputed where the GEMM's output is: its node)
  if cx.sac and cx.region then
    cx.sac(cx, { name = name, kind = "reduce_scatter", inputs = { x_in } }, peer, { partials }, false)
  end
  partials = unfused_cat_backward(cx, name .. " (partials)", partials)
  local rg = partials.rg and not cx.no_grad
  local gdt = partials.hp_dtype or partials.dtype
  local out = nn.new_tensor(cx, name, s, partials.dtype, rg)
  local index = cx.G:op {
    name = name .. ": sum of the partials", kind = "reduce_rows", phase = cx.phase, inputs = { partials.id },
    outputs = { out.id }, grads = rg and { { bytes = full, dtype = gdt } } or nil,
    bwd_kind = "all_gather", bytes = full + nn.bytes(s, partials.dtype), bwd_bytes = nn.bytes(partials.shape, gdt),
    dtype = partials.dtype, world = tp, wait_stream = S.symm_mem,
    layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
  if cx.sac and cx.region then
    cx.sac(cx, { name = name, kind = "reduce_scatter", inputs = { partials } }, index, { out }, rg)
  end
  -- (_pipelined_produce_and_all2all: two local buffers of one output chunk each)
  workspace(cx, 2 * full // tp)
  return out
end

-- The hooks of the plan, { module, hook } pairs for module.register, in the order
-- parallelize_module registers them (before fully_shard's).
function T.hooks(cx, root, tp)
  local list = {}
  local function add(m, h) if m then list[#list + 1] = { module = m, hook = h } end end
  -- PrepareModuleInput(Shard(1) -> Replicate()): the module's input all-gathered; the gathered
  -- tensor is the forward's argument, alive until the module returns
  -- float8 (PrepareFloat8ModuleInput, where the module's Linears are Float8Linear): the shard is
  -- cast to float8 first, so the all-gather moves and makes 1 byte an element, and the
  -- Float8Linears that read it (Float8ColwiseParallel) cast it no more
  -- last: the module whose GEMM is the last to read the gathered input (under async tp the fused
  -- op ends after it)
  local function prepare_input(m, what, float8, last)
    local gathered, fused
    add(m, {
      pre = function(c, _, args)
        local x = args[1]
        if float8 then x = require("strategies.float8").cast_input(c, m.opname .. ": float8 input", x) end
        fused = c.async_tp and c.compiling and last ~= nil
        if fused then
          gathered = fused_gather(c, m.opname .. ": fused_all_gather_matmul " .. what, x, tp)
        else
          gathered = gather_seq(c, m.opname .. ": all_gather " .. what, x, tp)
        end
        args[1] = gathered
      end,
      post = function(c)
        nn.release(c, { gathered }, m.opname .. " returns: the gathered input")
      end })
    if last then
      add(last, { post = function(c)
        if fused then async_join(c, m.opname .. ": fused_all_gather_matmul " .. what); fused = false end
      end })
    end
  end
  -- RowwiseParallel(output_layouts=Shard(1)): the partial output reduce-scattered
  local function scatter_output(m)
    add(m, { post = function(c, _, args, outs)
      if c.async_tp and c.compiling then
        outs[1] = fused_scatter(c, m.opname .. ": fused_matmul_reduce_scatter", args[1], outs[1], tp)
      else
        outs[1] = scatter_seq(c, m.opname .. ": reduce_scatter", outs[1], tp)
      end
    end })
  end
  local embed = mod.get(root, "model.embed_tokens")
  -- RowwiseParallel on an Embedding: each rank looks up the ids of its vocabulary rows (the
  -- others masked to row 0: MaskPartial's mask and shifted ids, int64), zeroes the masked rows
  -- of its partial output, and the partials are reduce-scattered over the sequence. In backward
  -- the output's gradient is all-gathered to Replicate (Redistribute's backward turns a Partial
  -- source into Replicate), and DTensor has no vocabulary-sharded strategy for
  -- embedding_dense_backward (torch/distributed/tensor/_ops/_embedding_ops.py: column-wise,
  -- batch-dim, partial or replicate): with the ids and the gradient Replicate it makes the whole
  -- table's gradient, Replicate, on every rank. Alone, AccumulateGrad keeps that whole tensor as
  -- .grad (the parameter is Shard(0), its gradient Replicate), and the optimizer's DTensor
  -- dispatch redistributes it to Shard(0) for each grads argument of each foreach op that reads
  -- it (_dispatch.py redistribute_local_args; Shard._replicate_to_shard: a clone of the rank's
  -- rows, no collective): a temporary of that op, w.tp_replicated_grad, strategies/optim.lua.
  -- Under FSDP2 its post-backward redistributes the gradient to the tp placement before it
  -- reshards (_fsdp_param.py _get_grad_inner_tensor: grad.redistribute(placements=
  -- self._tp_spec.placements)): the clone of the rank's rows is made there and the whole table
  -- dropped (p.tp_grad, strategies/fsdp.lua); a SequenceParallel norm's Partial gradient is
  -- all-reduced over tp there, out of place (the functional all_reduce clones its input)
  -- (beside a pipeline FSDP2 reduces once after the schedule, strategies/fsdp.lua pp_release,
  -- which is not modelled with the redistribution: there the whole table stays a temporary of
  -- the embedding's backward, m.tp_full_grad_bytes, and the norms' all-reduce is not an op)
  local fsdp = cx.dp and cx.shard_params
  local pp = fsdp and cx.dp.pp_keep
  if fsdp and not pp then
    -- (a pipeline stage but the first holds no embeddings)
    if embed then embed.p.weight.tp_grad = { kind = "copy", to = "Shard(0)", world = tp } end
    mod.walk(root, function(m)
      if m.key == "input_layernorm" or m.key == "post_attention_layernorm" or m.path == "model.norm" then
        m.p.weight.tp_grad = { kind = "allreduce", to = "Replicate()", world = tp }
      end
    end)
  end
  local mask
  add(embed, {
    pre = function(c, m, args)
      local w = m.p.weight
      -- (the gradient is of the weight the lookup ran with: under FSDP2's mixed precision the
      -- gathered bf16 one, not the fp32 shard)
      local gdt = fsdp and cx.dp.param_dtype or w.dtype
      local whole = nn.bytes({ w.shape[1] * tp, w.shape[2] }, gdt)
      if pp then
        m.tp_full_grad_bytes = whole
      else
        m.tp_whole_grad_bytes = whole
        if not fsdp then w.tp_replicated_grad = nn.bytes(w.shape, w.dtype) end
      end
      local ids = args[1]
      local n = nn.numel(ids.shape)
      mask = nn.op(c, { name = "embed_tokens: vocabulary mask", inputs = { ids },
                        outs = { { "embed_tokens.mask", ids.shape, "bool", no_grad = true } }, bytes = n * 9 })
      args[1] = nn.op(c, { name = "embed_tokens: local ids", inputs = { ids, mask }, frees = {},
                           outs = { { "embed_tokens.local_ids", ids.shape, "int64", no_grad = true } },
                           bytes = n * 17 })
    end,
    post = function(c, _, args, outs)
      local y = scatter_seq(c, "embed_tokens: reduce_scatter", outs[1], tp)
      nn.release(c, { mask, args[1] }, "embed_tokens returns: the mask and local ids")
      outs[1] = y
    end })
  -- torchtitan's apply_tp with enable_float8: Float8ColwiseParallel, Float8RowwiseParallel and
  -- PrepareFloat8ModuleInput where the projections are Float8Linear (strategies/float8.lua)
  mod.walk(root, function(m)
    if (COLWISE[m.key] or ROWWISE[m.key]) and m.cls == "Float8Linear" then m.float8_tp = true end
  end)
  local function float8(m, key) return m.children[key] and m.children[key].cls == "Float8Linear" end
  mod.walk(root, function(m)
    if m.cls and m.children.self_attn and m.children.mlp then
      local attn, mlp = m.children.self_attn, m.children.mlp
      prepare_input(attn, "input", float8(attn, "q_proj") and float8(attn, "k_proj") and float8(attn, "v_proj"),
                    attn.children.v_proj)
      scatter_output(attn.children.o_proj)
      prepare_input(mlp, "input", float8(mlp, "gate_proj") and float8(mlp, "up_proj"), mlp.children.up_proj)
      scatter_output(mlp.children.down_proj)
    end
  end)
  -- the head: ColwiseParallel(input_layouts=Shard(1)): the normed states all-gathered; its
  -- output stays vocabulary-sharded (loss parallel)
  -- (a pipeline stage but the last holds no head, and one but the first no embeddings)
  local head = root.children.lm_head
  if head then
    head.opname = head.opname or "lm_head"
    prepare_input(head, "hidden states")
  end
  return list
end

-- The notes of async tensor parallelism: what it changes and leaves out, and the workspace.
function T.async_note(tp)
  return ("async tensor parallelism over %d ranks (Inductor's micro_pipeline_tp): in each compiled layer the "
          .. "sequence all-gathers fused with the GEMMs they feed and the reduce-scatters with the GEMM before "
          .. "them, the peer copies on symmetric memory's backend stream beside the GEMMs (priced as the "
          .. "collective of the same bytes; each GEMM as one, not tp chunks); in backward the collectives run "
          .. "unfused, the bf16 all-gather of each output gradient with its input-gradient GEMM included "
          .. "(Inductor fuses that one: not modelled)"):format(tp)
end

function T.async_workspace_note(bytes)
  return ("async tensor parallelism: the tp group's symmetric-memory workspace, %.1f MiB (%d bytes), is allocated "
          .. "outside PyTorch's caching allocator (_SymmetricMemory.empty_strided_p2p): not in the peaks "
          .. "allocated or reserved, beside them on the device (nvidia-smi)"):format(bytes / 2^20, bytes)
end

-- The note a run with tensor parallelism carries: what it leaves out.
-- (fsdp: FSDP2 beside it and no pipeline, whose post-backward all-reduces the norms' gradients
-- as an op, T.hooks)
function T.notes(tp, fsdp)
  return {
    ("tensor parallelism over %d ranks (torchtitan's plan with sequence parallelism); loss parallel: "
     .. "DTensor's cross-entropy handlers on each rank's vocabulary shard (their fp32 buffers of the shard's "
     .. "size; their per-row tensors and the all-reduces of max and sum, b x s floats, not ops)%s"):format(
       tp, fsdp and "" or "; the norms' weight-gradient all-reduce over tp not an op"),
  }
end

return T
