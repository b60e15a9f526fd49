-- megatron_tp.lua: tensor parallelism with sequence parallelism as Megatron-LM runs it
-- (training.parallel.tp_impl = "megatron"): megatron-core 0.16.1's GPTModel with the local layer
-- spec (megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_local_spec: no
-- TransformerEngine), Llama-shaped (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases),
-- in bf16 (Float16Module), one rank of a tp group with sequence_parallel = True. The tree is
-- Megatron's, built at each rank's shapes (its constructors make only the rank's partition):
--
--   module: GPTModel
--     embedding.word_embeddings   VocabParallelEmbedding: rows vocab/tp
--     decoder.layers.N: TransformerLayer
--       input_layernorm           the norm, whole, on the rank's sequence shard
--       self_attention.linear_proj    RowParallelLinear (h, heads*hd/tp), input_is_parallel
--       self_attention.linear_qkv     ColumnParallelLinear: q, k and v of the rank's query groups
--                                     stacked ((heads + 2 kv_heads)/tp * hd, h), one GEMM
--       self_attention.core_attention DotProductAttention: heads/tp heads, unfused
--       pre_mlp_layernorm
--       mlp.linear_fc1            ColumnParallelLinear: gate and up stacked (2 ffn/tp, h), one GEMM
--       mlp.linear_fc2            RowParallelLinear (h, ffn/tp)
--     decoder.final_layernorm
--     output_layer                ColumnParallelLinear (vocab/tp, h), gather_output False
--
-- Activations are [s, b, h] (sequence first); between the column- and row-parallel pairs the
-- hidden states are sequence-sharded, [s/tp, b, h]. What differs from DTensor's tensor
-- parallelism (strategies/tp.lua), each from megatron-core's source:
-- * A column-parallel linear with sequence parallelism (tensor_parallel/layers.py
--   LinearWithGradAccumulationAndAsyncCommunication.forward) all-gathers its input into
--   get_global_memory_buffer().get_tensor(shape, dtype, "mpu") and saves the LOCAL input
--   (ctx.save_for_backward(input, weight)): the gathered [s, b, h] is no activation of the step.
--   Backward all-gathers the local input into the same buffer again before the weight gradient,
--   and reduce-scatters the input gradient into a new [s/tp, b, h] (torch.empty(dim_size)), made
--   before the weight-gradient GEMM, while the [s, b, h] input gradient is still live.
-- * GlobalMemoryBuffer (megatron/core/utils.py): one buffer per (name, dtype), made by
--   torch.empty on the first request and made again, larger, when a request exceeds it (the old
--   one freed as the dict entry is replaced); it lives for the run. DotProductAttention asks the
--   same "mpu" buffer for its (b * heads/tp, s, s) baddbmm input (beta 0: read for its shape
--   only), so the buffer ends as the larger of the gathered input and the attention scores.
-- * A row-parallel linear's output is reduce-scattered along dim 0 (mappings.py
--   _reduce_scatter_along_first_dim: torch.empty of [s/tp, b, h], then reduce_scatter_tensor):
--   no chunk cat (the sequence is dim 0); its backward all-gathers the gradient into a new
--   [s, b, h] (_gather_along_first_dim).
-- * The embedding (VocabParallelEmbedding, reduce_scatter_embeddings): the rank's rows looked up,
--   the others masked, the partial sums reduce-scattered along the sequence, then cloned
--   (LanguageModelEmbedding's clone_scatter_output_in_embedding).
-- * The loss is vocab_parallel_cross_entropy (tensor_parallel/cross_entropy.py) on
--   logits.float(): the fp32 logits become the softmax in place (sub_ the all-reduced max,
--   exp(out=), div_) and are saved; its backward writes the gradient into that saved tensor.
-- The collectives block the compute stream over the tp group (forward's dist_all_gather_func and
-- reduce-scatter wait before their result is read). Backward's re-gather is issued async before
-- the input-gradient GEMM and waited for before the weight-gradient one (CUDA_DEVICE_MAX_
-- CONNECTIONS=1); a backward node is one op here, so it runs before the node, blocking (the
-- overlap with the input-gradient GEMM is not modelled: a note says so).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local TP = require "strategies.tp"

local M = {}

-- The families whose config is Llama-shaped as Megatron's GPT local spec runs it.
local FAMILIES = { llama = true, mistral = true, qwen2 = true }

local FIELD = "training.parallel.tp_impl = \"megatron\""

-- Why Megatron's tensor parallelism over tp ranks cannot be simulated for this run (the message,
-- naming the field), or nil. fam/mc: the family and its normalized config; t: cfg.training;
-- mesh: the run's mesh; attention: the implementation asked for; seq: the sequence length.
function M.refusal(fam, mc, t, mesh, attention)
  local tp = mesh.degrees.tp
  local function no(why) return FIELD .. ": " .. why end
  if tp < 2 then
    return no("Megatron's tensor parallelism needs training.parallel.tp > 1")
  end
  local mt = fam.model_type or ""
  if not FAMILIES[mt] then
    return no(("modelled for the Llama-shaped families (llama, mistral, qwen2: RMSNorm, SwiGLU, RoPE, "
               .. "megatron-core's GPT local spec), not for %s"):format(mt))
  end
  -- (Megatron's pipeline: strategies/megatron_pp.lua)
  if mesh.degrees.pp > 1 then
    local why = require("strategies.megatron_pp").refusal(t, mesh, mc.layers)
    if why then return no(why) end
  end
  for _, d in ipairs { "cp", "ep" } do
    if mesh.degrees[d] > 1 then
      return no(("training.parallel.%s = %d: Megatron's %s beside its tensor parallelism is not modelled")
                :format(d, mesh.degrees[d], d == "cp" and "context parallelism" or "expert parallelism"))
    end
  end
  if t.strategy ~= "none" then
    -- (Megatron's DistributedDataParallel: strategies/megatron_dp.lua)
    local why = require("strategies.megatron_dp").refusal(t, mesh)
    if why then return why end
  end
  if attention ~= "eager" then
    return no(("training.attention = \"%s\": the local spec's core attention is DotProductAttention, "
               .. "unfused (baddbmm, softmax, bmm): set training.attention = \"eager\"; Megatron's fused "
               .. "attention (TEDotProductAttention) needs TransformerEngine, which is not modelled")
              :format(tostring(attention)))
  end
  if t.precision ~= "bf16" then
    return no(("training.precision = \"%s\": modelled in bf16 (Float16Module over a model in "
               .. "params_dtype bf16) only"):format(t.precision))
  end
  if mc.experts then return no("a mixture of experts (Megatron's MoE layers) is not modelled") end
  if mc.qkv_bias or mc.o_bias or mc.mlp_bias then
    return no("linear biases (add_qkv_bias, add_bias_linear) are not modelled")
  end
  if mc.qk_norm then return no("a q/k norm is not modelled") end
  if mc.tie then
    return no("tied embeddings (share_embeddings_and_output_weights: the output layer reads the "
              .. "embedding's weight, its gradient all-reduced over the first and last stages) are not modelled")
  end
  if mc.sliding_window and t.seq > mc.sliding_window then
    return no(("a sliding window of %d tokens shorter than training.seq = %d: DotProductAttention has "
               .. "no window"):format(mc.sliding_window, t.seq))
  end
  if mc.head_dim * mc.heads ~= mc.hidden then
    return no(("a head dim of %d with %d heads and hidden size %d: kv_channels other than "
               .. "hidden/heads is not modelled"):format(mc.head_dim, mc.heads, mc.hidden))
  end
  for _, e in ipairs { { "num_attention_heads", mc.heads }, { "num_key_value_heads (num_query_groups)", mc.kv_heads },
                       { "intermediate_size (ffn_hidden_size)", mc.intermediate },
                       { "vocab_size (Megatron pads it to a multiple of tp; the padding is not modelled)", mc.vocab },
                       { "training.seq (sequence parallelism shards it)", t.seq } } do
    if e[2] % tp ~= 0 then
      return no(("%s = %d is not a multiple of tp = %d (megatron-core's divide() asserts it)"):format(e[1], e[2], tp))
    end
  end
  local unsupported = {
    { t.precision:match("^lora") or t.lora ~= nil, "LoRA adapters" },
    { t.quant ~= "none", "quantization" },
    { t.loss ~= "full", "training.loss = \"" .. t.loss .. "\" (Megatron's loss is vocab_parallel_cross_entropy)" },
    { t.compile, "training.compile" },
    { t.compile_loss, "training.compile_loss" },
    { t.checkpointing, "training.checkpointing (torch.utils.checkpoint; Megatron recomputes through its own "
      .. "recompute_granularity: set training.parallel.megatron_recompute_granularity = \"selective\" or \"full\")" },
    { t.activation_offload, "activation offloading" },
    { t.optimizer_in_backward, "the optimizer step in backward" },
    { t.device_map ~= "none", "device_map" },
    { t.float8, "float8" },
    { t.inference, "inference" },
    { t.dpo, "DPO" },
    { t.generate, "generation" },
    { t.data_batch, "training.data (Megatron's own data pipeline)" },
    { t.framework ~= "transformers", "training.framework = \"" .. tostring(t.framework) .. "\"" },
    { mesh.async_tp, "training.parallel.async_tp (torchtitan's)" },
  }
  for _, u in ipairs(unsupported) do
    if u[1] then return no(u[2] .. ": not modelled with it") end
  end
  -- (a pipeline stage checkpoints its own layers: the split is even, refused otherwise above)
  local pp = mesh.degrees.pp
  local vp = pp > 1 and require("strategies.megatron_pp").virtual(mesh) or 1
  return require("strategies.megatron_recompute").refusal(mesh.megatron_recompute, mc.layers // (pp * vp), pp)
end

-- The persistent "mpu" buffer of GlobalMemoryBuffer for dtype dt, at least numel elements
-- (get_tensor): made on the first request, made again larger when a request exceeds it.
-- Returns a view of it in shape (rg: the view stands for an op's output that requires grad).
local function mpu_buffer(cx, shape, dt, who, rg)
  local need = nn.numel(shape)
  local st = cx.mg_buffers
  local cur = st[dt]
  if not cur or cur.numel < need then
    local id = cx.G:tensorv("GlobalMemoryBuffer (mpu, " .. dt .. ")", nn.bytes({ need }, dt), need, dt,
                            "temp", false, nil, nil, true)
    cx.G:op { name = who .. ": get_tensor makes the mpu buffer (" .. need .. " elements)", kind = "none",
              phase = cx.phase, inputs = {}, outputs = { id }, frees = cur and { cur.id } or {},
              drop_persistent = cur and true or nil, once = true, layer = cx.layer }
    cur = { id = id, numel = need, dtype = dt, name = "GlobalMemoryBuffer", shape = { need } }
    st[dt] = cur
    cx.mg_buffer_sizes[#cx.mg_buffer_sizes + 1] = nn.bytes({ need }, dt)
  end
  -- (a tensor's requires_grad is fixed when it is made)
  cur.rg = rg
  local v = nn.view(cx, cur, shape, who .. ": the mpu buffer")
  cur.rg = nil
  return v
end

-- The [s, b, h] of a local [s/tp, b, h] (dim 0 times tp).
local function gathered_shape(x, tp)
  local s = nn.copy_shape(x.shape)
  s[1] = s[1] * tp
  return s
end

-- matmul(x, weight.t()) of an input of shape `shape`: the output's shape and the forward FLOPs
local function matmul_out(shape, w)
  local oshape = nn.copy_shape(shape)
  oshape[#oshape] = w.shape[1]
  return oshape, 2 * (nn.numel(shape) // shape[#shape]) * w.shape[1] * w.shape[2]
end

-- ColumnParallelLinear.forward with sequence parallelism, no bias, gather_output False
-- (LinearWithGradAccumulationAndAsyncCommunication): the local input x [s/tp, b, h] all-gathered
-- into the "mpu" buffer, then matmul(total_input, weight.t()). Saved: x and the weight. In
-- backward, before the node: the all-gather of x again (into the buffer); the node, in the
-- order LinearWithGradAccumulationAndAsyncCommunication.backward allocates: the input gradient
-- grad_input = grad_output.matmul(weight), [s, b, h] (a local, gone as backward returns: the
-- node's workspace, made first), the reduce-scatter's output sub_grad_input = torch.empty of
-- x's [s/tp, b, h] (made before the weight-gradient GEMM, the gradient the function returns),
-- then the weight gradient; the reduce-scatter itself is the all-gather's backward (its
-- traffic; the gradient passes through it).
local function column_forward(cx, m, x)
  local tp = cx.mg_tp
  local w = mod.weight(cx, m.p.weight)
  local name = m.opname
  local gshape = gathered_shape(x, tp)
  local full = nn.bytes(gshape, x.dtype)
  local rg = x.rg and not cx.no_grad
  local buf = mpu_buffer(cx, gshape, x.dtype, name, rg)
  -- dist_all_gather_func(all_gather_buffer, input): no allocation; its conjugate in backward is
  -- the reduce-scatter of the input gradient, whose output the GEMM's node has made already
  -- (sub_grad_input, before the weight-gradient GEMM): the gradient passes through
  cx.G:op { name = name .. ": all_gather into the mpu buffer", kind = "all_gather", phase = cx.phase,
            inputs = { x.id }, outputs = { buf.id }, frees = {},
            grads = rg and { { pass = 1 } } or nil,
            bwd_kind = "reduce_scatter", bytes = full, bwd_bytes = full, dtype = x.dtype, world = tp,
            layer = cx.layer, no_grad = cx.no_grad, region = cx.region }
  local oshape, flops = matmul_out(gshape, w)
  -- backward: grad_input [s, b, h] first (a workspace of the node: backward's local), then
  -- sub_grad_input [s/tp, b, h] (the gradient of the gathered input, of x's size), then the
  -- weight gradient, as layers.py allocates them
  local out = nn.op(cx, { name = name, kind = "mm", inputs = { buf, w }, frees = {},
                          outs = { { name, oshape, x.dtype } }, saves = { x, w },
                          grads = { { bytes = nn.bytes(x.shape, x.dtype), dtype = x.dtype }, { dtype = w.dtype } },
                          grad_order = { 1, 2 }, bwd_workspace = { full }, bwd_workspace_first = true,
                          flops = flops, bwd_flops = 2 * flops, dtype = x.dtype, host = "linear", host_views = 2 })
  local fwd_op = cx.last_op
  if rg then
    -- the backward's all-gather of the saved local input, just before the node
    cx.G:op { name = name .. ": backward all_gather of the saved input into the mpu buffer",
              kind = "all_gather", phase = "bwd", hook = 4, before_op = fwd_op, inputs = {}, outputs = {},
              frees = {}, bytes = full, dtype = x.dtype, world = tp, layer = cx.layer }
    cx.mg_regathered[name] = true
  end
  -- (the local input's reference is the caller's: TransformerLayer's norm output)
  nn.release(cx, { x }, name .. " returns: its input")
  return out
end

-- RowParallelLinear.forward, input_is_parallel, sequence parallelism, no bias: matmul of the
-- rank's slice, then reduce_scatter_to_sequence_parallel_region (a new [s/tp, b, h]; the
-- partial [s, b, h] freed when the function returns).
local function row_forward(cx, m, x)
  local tp = cx.mg_tp
  local w = mod.weight(cx, m.p.weight)
  local name = m.opname
  local oshape, flops = matmul_out(x.shape, w)
  local part = nn.op(cx, { name = name, kind = "mm", inputs = { x, w }, outs = { { name .. ".partial", oshape, x.dtype } },
                           saves = { x, w }, flops = flops, bwd_flops = 2 * flops, dtype = x.dtype,
                           host = "linear", host_views = 2 })
  local sshape = nn.copy_shape(oshape)
  sshape[1] = sshape[1] // tp
  return TP.collective(cx, name .. ": reduce_scatter", "reduce_scatter", "all_gather", part, sshape, tp)
end

local function linear(cls, forward, opname, cin, cout)
  local m = mod.new(cls, forward, { opname = opname, in_features = cin, out_features = cout })
  m:declare("weight", { cout, cin })
  return m
end

-- torch.nn.RMSNorm (WrappedTorchNorm): F.rms_norm, one fused kernel on CUDA
-- (models/blocks/dit.lua fused_rms_norm)
local function norm_forward(cx, m, x)
  return require("models.blocks.dit").fused_rms_norm(cx, m.opname, x, mod.weight(cx, m.p.weight))
end

-- (WrappedTorchNorm builds it without a device or dtype: fp32, on the host until model.cuda()
-- copies it over, then Float16Module's .bfloat16() replaces it: M.build_extras)
local function norm(opname, dim)
  local m = mod.new("RMSNorm", norm_forward, { opname = opname })
  m:declare("weight", { dim }, { dtype = "fp32" })
  return m
end

-- apply_rotary_pos_emb (rope_utils.py _apply_rotary_pos_emb_bshd) on t [s, b, n, hd]: cos_ and
-- sin_ made from the fp32 table on each call ((cos(freqs) * mscale).to(t.dtype)), then
-- t * cos_ + rotate_half(t) * sin_ (models/llama.lua's rotary, the same ops), then
-- torch.cat((t, t_pass)) with an empty t_pass: a copy.
local function apply_rope(cx, name, t, freqs)
  local function table_of(fn)
    local f = nn.ew(cx, name .. "." .. fn, { freqs }, "fp32")
    local scaled = nn.ew(cx, name .. "." .. fn .. "_mscale", { f }, "fp32")
    return nn.to(cx, scaled, t.dtype, name .. "." .. fn .. "_cast")
  end
  local cos = table_of("cos")
  local sin = table_of("sin")
  local e = require("models.llama").rotary(cx, name, t, cos, sin)
  return nn.op(cx, { name = name .. ".cat_pass", kind = "copy", inputs = { e },
                     outs = { { name .. ".out", t.shape, t.dtype } }, grads = { { pass = 1 } } })
end

-- SelfAttention.forward: linear_qkv, the split into the rank's query groups, RoPE on q and k,
-- core attention, linear_proj.
local function attention_forward(cx, m, hn, freqs)
  local a = m.attn
  local C = m.children
  local pre = m.opname
  local s, b = cx.run.seq, cx.run.batch
  local hd, np, ng = a.head_dim, a.heads, a.kv_heads
  local mixed = mod.call(cx, C.linear_qkv, hn)
  -- get_query_key_value_tensors: mixed [s, b, ng, (np/ng + 2) hd], torch.split into query, key,
  -- value (views; SplitWithSizesBackward cats their gradients into one of mixed's size)
  local full = nn.bytes(mixed.shape, mixed.dtype)
  local qv = nn.view(cx, mixed, { s, b, ng, np // ng * hd }, pre .. ".query_split")
  local kv = nn.view(cx, mixed, { s, b, ng, hd }, pre .. ".key_split")
  local vv = nn.view(cx, mixed, { s, b, ng, hd }, pre .. ".value_split")
  for _, v in ipairs { qv, kv, vv } do v.rg = mixed.rg end
  nn.op(cx, { name = pre .. ".split_qkv", kind = "none", inputs = { mixed }, out_tensors = { qv, kv, vv },
              grads = { { bytes = full, dtype = mixed.dtype } }, bwd_kind = "cat", bytes = 0, bwd_bytes = 2 * full,
              frees = {} })
  -- query.reshape(s, b, -1, hd): a copy (the split is strided)
  local q = nn.op(cx, { name = pre .. ".query_reshape", kind = "copy", inputs = { qv },
                        outs = { { pre .. ".query", { s, b, np, hd }, qv.dtype } }, grads = { { pass = 1 } } })
  local qr = apply_rope(cx, pre .. ".q_rope", q, freqs)
  local kr = apply_rope(cx, pre .. ".k_rope", kv, freqs)
  -- (selective recompute: the core attention one checkpoint, strategies/megatron_recompute.lua)
  local ctx = require("strategies.megatron_recompute").core_attention(cx, cx.mesh.megatron_recompute, m.layer_index,
    qr, kr, vv, function(q) return mod.call(cx, C.core_attention, q, kr, vv) end)
  local out = mod.call(cx, C.linear_proj, ctx)
  -- Attention.forward returns: its locals (mixed and the query copy) go
  nn.release(cx, { mixed, q }, pre .. ": forward returns")
  return out
end

-- DotProductAttention.forward (transformer/dot_product_attention.py), the local spec's, at
-- heads/tp heads: repeat_interleave of key and value to every query head (copies), scores =
-- baddbmm(mpu buffer, q, k^T, beta=0, alpha=1/sqrt(hd)) into a new tensor, FusedScaleMaskSoftmax
-- unfused (masked_softmax_fusion False): scores.float(), the causal mask made (ones, triu, bool),
-- masked_fill_, softmax, .to(bf16); context = bmm(probs, v^T), permuted and made contiguous.
local function core_attention_forward(cx, m, q, k, v)
  local a = m.attn
  local pre = m.opname
  local s, b = cx.run.seq, cx.run.batch
  local hd, np, ng = a.head_dim, a.heads, a.kv_heads
  local dt = q.dtype
  local function repeat_kv(x, what)
    if np == ng then return x end
    return nn.op(cx, { name = pre .. "." .. what .. "_repeat_interleave", kind = "copy", inputs = { x },
                       outs = { { pre .. "." .. what .. "_repeated", { s, b, np, hd }, dt } },
                       grads = { { bytes = nn.bytes(x.shape, dt), dtype = dt } } })
  end
  -- (value first: the capture's order of the two clones)
  local vr = repeat_kv(v, "value")
  local kr = repeat_kv(k, "key")
  local sshape = { b * np, s, s }
  local buf = mpu_buffer(cx, sshape, dt, pre)
  local flops = 2 * b * np * s * s * hd
  local scores = nn.op(cx, { name = pre .. ".baddbmm", kind = "mm", inputs = { q, kr, buf },
                             outs = { { pre .. ".scores", sshape, dt } }, saves = { q, kr }, frees = { q, kr },
                             grads = { "new", { bytes = nn.bytes(kr.shape, dt), dtype = dt }, "none" },
                             grad_order = { 2, 1 },
                             -- (BaddbmmBackward0: each gradient a bmm, then times alpha: the
                             -- bmm's result a temporary of each)
                             bwd_workspace = { nn.bytes(q.shape, dt), nn.bytes(kr.shape, dt) },
                             flops = flops, dtype = dt })
  -- (matmul_result is forward's local until it returns)
  local s32 = nn.cast(cx, scores, "fp32", pre .. ".scores_float", nil, true)
  -- get_default_causal_mask: torch.triu(torch.ones(s, s), diagonal=1).bool()
  local ones = nn.op(cx, { name = pre .. ".mask_ones", inputs = {}, outs = { { pre .. ".mask_ones", { s, s }, "fp32", no_grad = true } } })
  local tri = nn.op(cx, { name = pre .. ".mask_triu", inputs = { ones }, outs = { { pre .. ".mask_triu", { s, s }, "fp32", no_grad = true } } })
  local mask = nn.op(cx, { name = pre .. ".mask_bool", inputs = { tri }, outs = { { pre .. ".causal_mask", { s, s }, "bool", no_grad = true } } })
  -- masked_fill_(mask, -10000.0): in place; MaskedFillBackward0 keeps the mask and makes a new
  -- gradient
  local sshape4 = { b, np, s, s }
  local mf = nn.view(cx, s32, sshape4, pre .. ".masked")
  mf.rg = s32.rg
  -- (in place: the scores read and written, the mask read; its backward reads the gradient and
  -- writes a new one)
  local sb, mb = nn.bytes(sshape4, "fp32"), nn.bytes({ s, s }, "bool")
  nn.op(cx, { name = pre .. ".masked_fill_", kind = "broadcast", inputs = { s32, mask }, out_tensors = { mf },
              saves = { mask }, grads = { { dtype = "fp32" }, "none" }, frees = {},
              bytes = 2 * sb + mb, bwd_bytes = 2 * sb + mb })
  local p32 = nn.op(cx, { name = pre .. ".softmax", kind = "softmax", inputs = { mf },
                          outs = { { pre .. ".probs_fp32", sshape4, "fp32" } }, save_outs = { 1 }, frees = {},
                          bwd_workspace = { nn.bytes(sshape4, "fp32") }, flops = 5 * nn.numel(sshape4), dtype = "fp32" })
  local pr = nn.to(cx, p32, dt, pre .. ".probs")
  -- forward_torch_softmax returns: the fp32 scores go
  nn.release(cx, { s32, mf, mask }, pre .. ": scale_mask_softmax returns")
  local ctx = nn.op(cx, { name = pre .. ".bmm", kind = "mm", inputs = { pr, vr },
                          outs = { { pre .. ".context", { b * np, s, hd }, dt } }, saves = { pr, vr },
                          grad_order = { 2, 1 }, flops = flops, dtype = dt })
  local out = nn.op(cx, { name = pre .. ".context_contiguous", kind = "copy", inputs = { ctx },
                          outs = { { pre .. ".context_sbh", { s, b, np * hd }, dt } }, grads = { { pass = 1 } } })
  -- forward returns: matmul_result (the scores) goes
  nn.release(cx, { scores }, pre .. ": forward returns")
  return out
end

-- MLP.forward: linear_fc1 (gate and up in one GEMM), torch.chunk (views), silu(x_glu) *
-- (x_linear + glu_linear_offset) (the add a copy), linear_fc2.
local function mlp_forward(cx, m, x)
  local pre = m.opname
  local C = m.children
  local h = mod.call(cx, C.linear_fc1, x)
  local half = nn.copy_shape(h.shape)
  half[#half] = half[#half] // 2
  local full = nn.bytes(h.shape, h.dtype)
  local g = nn.view(cx, h, half, pre .. ".x_glu")
  local l = nn.view(cx, h, half, pre .. ".x_linear")
  g.rg, l.rg = h.rg, h.rg
  nn.op(cx, { name = pre .. ".chunk", kind = "none", inputs = { h }, out_tensors = { g, l },
              grads = { { bytes = full, dtype = h.dtype } }, bwd_kind = "cat", bytes = 0, bwd_bytes = 2 * full })
  local act = nn.ew(cx, pre .. ".silu", { g }, g.dtype, { g })
  local lin = nn.op(cx, { name = pre .. ".add_offset", inputs = { l }, outs = { { pre .. ".x_linear_offset", half, l.dtype } },
                          grads = { { pass = 1 } } })
  local prod = nn.mul(cx, pre .. ".mul", act, lin, act.dtype)
  return mod.call(cx, C.linear_fc2, prod)
end

-- TransformerLayer.forward: norm, attention, bias_dropout_add (x + residual), norm, MLP,
-- bias_dropout_add.
local function layer_forward(cx, m, x, freqs)
  local pre = m.opname
  local C = m.children
  local hn = mod.call(cx, C.input_layernorm, x)
  local o = mod.call(cx, C.self_attention, hn, freqs)
  local h1 = nn.op(cx, { name = pre .. ".self_attn_bda", inputs = { o, x }, frees = { o },
                         outs = { { pre .. ".h1", x.shape, x.dtype } }, grads = { { pass = 1 }, { pass = 1 } } })
  local hn2 = mod.call(cx, C.pre_mlp_layernorm, h1)
  -- (selective "mlp" recompute: the MLP one checkpoint, strategies/megatron_recompute.lua)
  local d = require("strategies.megatron_recompute").mlp(cx, cx.mesh.megatron_recompute, m.layer_index, hn2,
    function() return mod.call(cx, C.mlp, hn2) end)
  local out = nn.op(cx, { name = pre .. ".mlp_bda", inputs = { d, h1 }, outs = { { pre .. ".out", x.shape, x.dtype } },
                          grads = { { pass = 1 }, { pass = 1 } } })
  nn.release(cx, { x }, pre .. ": returns")
  return out
end

-- VocabParallelEmbedding.forward (reduce_scatter_embeddings) and LanguageModelEmbedding's
-- transpose and clone: [b, s] ids -> [s/tp, b, h].
local function embedding_forward(cx, m, ids)
  local tp = cx.mg_tp
  local w = mod.weight(cx, m.p.weight)
  local b, s = ids.shape[1], ids.shape[2]
  local h = w.shape[2]
  local n = b * s
  local function small(name, dt, inputs)
    return nn.op(cx, { name = "embedding." .. name, inputs = inputs or { ids }, frees = {},
                       outs = { { "embedding." .. name, { b, s }, dt, no_grad = true } } })
  end
  -- input_mask = (input_ < vocab_start) | (input_ >= vocab_end); masked_input = input_.clone() -
  -- vocab_start; masked_input[input_mask] = 0
  local lt, ge = small("lt", "bool"), small("ge", "bool")
  local imask = small("input_mask", "bool", { lt, ge })
  nn.release(cx, { lt, ge }, "embedding: the comparisons go")
  local clone = small("input_clone", "int64")
  local masked = nn.op(cx, { name = "embedding.masked_input", inputs = { clone, imask }, frees = { clone },
                             outs = { { "embedding.masked_input", { b, s }, "int64", no_grad = true } } })
  -- embedding_dense_backward_cuda's partial sums above 3072 indices (models/llama.lua's embedding)
  local ws = {}
  if n > 3072 then ws[1] = (n // 10 + math.min(n, w.shape[1])) * h * 4 end
  local y = nn.op(cx, { name = "embedding.word_embeddings", kind = "gather", inputs = { masked, w },
                        outs = { { "embedding.output_parallel", { b, s, h }, w.dtype } },
                        saves = { masked }, grads = { "none", { dtype = w.dtype } }, bwd_workspace = ws })
  -- output_parallel[input_mask, :] = 0.0: in place, IndexPutBackward0 keeps the mask and makes a
  -- new gradient
  local yz = nn.view(cx, y, { b, s, h }, "embedding.output_masked")
  yz.rg = y.rg
  nn.op(cx, { name = "embedding.mask_rows", kind = "elementwise", inputs = { y, imask }, out_tensors = { yz },
              saves = { imask }, grads = { { dtype = y.dtype }, "none" } })
  -- output_parallel.transpose(0, 1).contiguous(): [b, s, h] -> [s, b, h], a copy unless b is 1
  local t
  if b > 1 then
    t = nn.op(cx, { name = "embedding.transpose_contiguous", kind = "transpose", inputs = { yz },
                    outs = { { "embedding.transposed", { s, b, h }, yz.dtype } }, grads = { { pass = 1 } } })
  else
    t = nn.view(cx, yz, { s, b, h }, "embedding.transposed")
  end
  local rs = TP.collective(cx, "embedding: reduce_scatter", "reduce_scatter", "all_gather", t, { s // tp, b, h }, tp)
  return nn.op(cx, { name = "embedding.clone", kind = "copy", inputs = { rs },
                     outs = { { "decoder_input", rs.shape, rs.dtype } }, grads = { { pass = 1 } } })
end

-- RotaryEmbedding.forward(seq) (rotary_pos_embedding.py, under @lru_cache(maxsize=32)): arange +
-- offset, outer with inv_freq, cat: the fp32 table [s, 1, 1, hd] each layer's
-- apply_rotary_pos_emb reads. The cache holds it for the run: made in the first forward only, of
-- each RotaryEmbedding (a model chunk's own: lru_cache keys on self).
local function rotary_forward(cx, m, s)
  cx.mg_rotary = cx.mg_rotary or {}
  if cx.mg_rotary[m] then return cx.mg_rotary[m] end
  local hd = m.head_dim
  local function op(name, inputs, shape, out)
    local o = out or nn.new_tensor(cx, "rotary_pos_emb." .. name, shape, "fp32", false)
    cx.G:op { name = "rotary_pos_emb." .. name, kind = "elementwise", phase = cx.phase, inputs = inputs,
              outputs = { o.id }, bytes = nn.bytes(shape, "fp32"), once = true, layer = cx.layer }
    return o
  end
  local ar = op("arange", {}, { s })
  local seq = op("offset", { ar.id }, { s })
  local fr = op("outer", { seq.id }, { s, hd // 2 })
  local shape = { s, 1, 1, hd }
  local id = cx.G:tensorv("rotary_pos_emb (lru_cache)", nn.bytes(shape, "fp32"), nn.numel(shape), "fp32", "temp",
                          false, nil, nil, true)
  cx.mg_rotary[m] = op("cat", { fr.id }, shape, { id = id, shape = shape, dtype = "fp32", rg = false,
                                                  name = "rotary_pos_emb" })
  return cx.mg_rotary[m]
end

-- vocab_parallel_cross_entropy(logits.float(), labels) (tensor_parallel/cross_entropy.py) on
-- the [s, b, vocab/tp] logits; returns the [s, b] losses.
local function vocab_parallel_ce(cx, logits, tp)
  local s, b, v = logits.shape[1], logits.shape[2], logits.shape[3]
  local n = s * b
  -- compute_language_model_loss: labels.transpose(0, 1).contiguous(), a copy unless b is 1
  local labels = b > 1 and nn.op(cx, { name = "labels.transpose_contiguous", inputs = {},
                                       outs = { { "labels", { s, b }, "int64", no_grad = true } } })
  -- (GPTModel.forward keeps the bf16 logits until it returns)
  local lf = nn.cast(cx, logits, "fp32", "output_layer: logits.float()", nil, true)
  local function small(name, dt, shape, inputs)
    return nn.op(cx, { name = "cross_entropy." .. name, inputs = inputs or {}, frees = {},
                       outs = { { "cross_entropy." .. name, shape or { s, b }, dt, no_grad = true } } })
  end
  local function all_reduce(name, bytes)
    cx.G:op { name = "cross_entropy: all_reduce " .. name, kind = "all_reduce", phase = cx.phase,
              inputs = { lf.id }, outputs = {}, frees = {}, bytes = bytes, dtype = "fp32", world = tp,
              layer = cx.layer }
  end
  -- logits_max = max(dim=-1) (values and indices; the indices dropped at once), all-reduced (MAX),
  -- subtracted in place
  local mx = small("logits_max", "fp32", nil, { lf })
  local idx = small("max_indices", "int64", nil, { lf })
  nn.release(cx, { idx }, "cross_entropy: the max's indices go")
  all_reduce("max", n * 4)
  -- target_mask, masked_target (clone - start, masked in place), masked_target_1d
  local lt, ge = small("lt", "bool"), small("ge", "bool")
  local tmask = small("target_mask", "bool", nil, { lt, ge })
  nn.release(cx, { lt, ge }, "cross_entropy: the comparisons go")
  local clone = small("target_clone", "int64")
  local mt = nn.op(cx, { name = "cross_entropy.masked_target", inputs = { clone, tmask }, frees = { clone },
                         outs = { { "cross_entropy.masked_target_1d", { n }, "int64", no_grad = true } } })
  -- predicted_logits: logits_2d[arange, masked_target_1d] (arange and the index freed), cloned,
  -- masked; exp(out=) in place; sum_exp_logits; both all-reduced (SUM); loss = log(sum) - predicted
  local ar = small("arange", "int64", { n })
  local pick = small("predicted_1d", "fp32", { n }, { lf, ar, mt })
  local pred = small("predicted_logits", "fp32", nil, { pick })
  nn.release(cx, { pick }, "cross_entropy: the gathered logits go")
  local sum = small("sum_exp_logits", "fp32", nil, { lf })
  nn.release(cx, { ar }, "cross_entropy: the arange goes")
  all_reduce("predicted_logits", n * 4)
  all_reduce("sum_exp_logits", n * 4)
  local lg = small("log_sum", "fp32", nil, { sum })
  -- the autograd function's output; exp_logits /= sum in place: the fp32 logits are the softmax,
  -- saved with target_mask and masked_target_1d; backward writes the gradient into them
  local loss = nn.op(cx, { name = "cross_entropy", kind = "softmax", inputs = { lf, lg, pred, tmask, mt },
                           outs = { { "losses", { s, b }, "fp32" } }, saves = { lf, tmask, mt }, frees = { lf, lg, tmask, mt },
                           grads = { { saved = 1 }, "none", "none", "none", "none" },
                           bwd_workspace = { n * 8, n * 4, n * 4 }, flops = 5 * s * b * v,
                           bytes = 4 * nn.bytes(lf.shape, "fp32"), bwd_bytes = 2 * nn.bytes(lf.shape, "fp32") })
  nn.release(cx, { mx, pred, sum }, "cross_entropy: forward returns")
  if labels then nn.release(cx, { labels }, "compute_language_model_loss: labels go") end
  -- loss.transpose(0, 1).contiguous(): [b, s], a copy unless b is 1
  if b > 1 then
    loss = nn.op(cx, { name = "losses.transpose_contiguous", kind = "transpose", inputs = { loss },
                       outs = { { "losses_bs", { b, s }, "fp32" } }, grads = { { pass = 1 } } })
  end
  return loss
end

-- GPTModel.forward(input_ids, position_ids, None, labels=input_ids) under Float16Module, then
-- pretrain_gpt's loss_func: sum(losses * loss_mask) / tokens.
-- A pipeline stage (cx.run.stage, strategies/megatron_pp.lua) runs its own part: the embedding
-- on the first (pre_process), else the received activation (set_input_tensor); the final norm,
-- the output layer and the loss on the last (post_process), else it returns the last layer's
-- output, which the schedule sends.
local function gpt_forward(cx, m, ids)
  local C = m.children
  local r = cx.run
  local tp = cx.mg_tp
  local stage = r.stage
  local x = C.embedding and mod.call(cx, C.embedding, ids) or stage.input
  local decoder_input = C.embedding and x
  local freqs = rotary_forward(cx, C.rotary_pos_emb, r.seq)
  local layers = C.decoder.children.layers
  -- (full recompute: chunks of layers each one checkpoint, strategies/megatron_recompute.lua)
  x = require("strategies.megatron_recompute").layers(cx, cx.mesh.megatron_recompute, m.cfg.layers, x,
    function(l, h) return mod.call(cx, layers.children[tostring(l)], h, freqs) end)
  if not C.output_layer then return x end
  local hf = mod.call(cx, C.decoder.children.final_layernorm, x)
  local logits = mod.call(cx, C.output_layer, hf)
  local losses = vocab_parallel_ce(cx, logits, tp)
  -- GPTModel.forward returns: its locals (the decoder input, the bf16 logits) go
  nn.release(cx, { decoder_input or nil, logits }, "GPTModel.forward returns")
  local n = r.batch * r.seq
  local masked = nn.op(cx, { name = "loss_func: losses * loss_mask", inputs = { losses, cx.mg_loss_mask }, frees = { losses },
                             outs = { { "loss_func.masked", { n }, "fp32" } }, saves = { cx.mg_loss_mask },
                             grads = { "new", "none" } })
  local total = nn.op(cx, { name = "loss_func: sum", kind = "reduce_rows", inputs = { masked },
                            outs = { { "loss_func.sum", {}, "fp32" } } })
  local loss = nn.op(cx, { name = "loss_func: / tokens", inputs = { total }, outs = { { "loss", {}, "fp32" } } })
  if stage then loss = require("strategies.megatron_pp").scale_loss(cx, loss) end
  return loss
end

-- The tree of one rank (its partitions' shapes), in megatron-core's construction order. stage
-- (a pipeline rank's, strategies/megatron_pp.lua; nil: the whole model): its layers, numbered
-- from 0 as TransformerBlock numbers the layers it builds, the embedding on the first stage
-- only (pre_process), the final norm and the output layer on the last (post_process). A stage
-- of model chunks (the interleaved schedule: { chunks = ... }) is a list of GPTModels, one a
-- chunk (training.py get_model), whose forward runs the chunk cx.run.stage names.
function M.tree(mc, tp, stage)
  if stage and stage.chunks then
    local root = mod.new("ModelChunks", function(cx, self, ids)
      return mod.call(cx, self.children[tostring(cx.run.stage.chunk)], ids)
    end, { cfg = { layers = 0, hidden = mc.hidden }, layer = -1 })
    for i, st in ipairs(stage.chunks) do
      local chunk = M.tree(mc, tp, st)
      root:add(i - 1, chunk)
      root.cfg.layers = root.cfg.layers + chunk.cfg.layers
    end
    mod.finalize(root, "")
    for _, k in ipairs(root.order) do mod.finalize(root.children[k], k .. ".module") end
    root.no_split = { TransformerLayer = true }
    root.checkpoint_layer = "TransformerLayer"
    return root
  end
  local h, hd = mc.hidden, mc.head_dim
  local np, ng = mc.heads // tp, mc.kv_heads // tp
  local ffn = mc.intermediate // tp
  local n_layers = stage and stage.last - stage.first + 1 or mc.layers
  local pre_process, post_process = not stage or stage.embed, not stage or stage.head
  local cfg = { layers = n_layers, hidden = h }
  local root = mod.new("GPTModel", gpt_forward, { cfg = cfg, layer = -1 })
  if pre_process then
    local emb = root:add("embedding", mod.new("LanguageModelEmbedding", nil))
    local we = emb:add("word_embeddings", mod.new("VocabParallelEmbedding", embedding_forward))
    we:declare("weight", { mc.vocab // tp, h })
    emb.forward = function(cx, _, ids) return mod.call(cx, we, ids) end
  end
  root:add("rotary_pos_emb", mod.new("RotaryEmbedding", nil, { head_dim = hd }))
  local dec = root:add("decoder", mod.new("TransformerBlock", nil))
  local layers = dec:add("layers", mod.new("ModuleList", nil))
  for l = 0, n_layers - 1 do
    local pre = "decoder.layers." .. l
    local lm = layers:add(l, mod.new("TransformerLayer", layer_forward, { opname = pre, layer = l, layer_index = l }))
    lm:add("input_layernorm", norm(pre .. ".input_layernorm", h))
    local sa = lm:add("self_attention", mod.new("SelfAttention", attention_forward,
                                                { opname = pre .. ".self_attention", layer_index = l,
                                                  attn = { heads = np, kv_heads = ng, head_dim = hd } }))
    -- Attention.__init__: core_attention, linear_proj; SelfAttention's: linear_qkv
    sa:add("core_attention", mod.new("DotProductAttention", core_attention_forward,
                                     { opname = pre .. ".self_attention.core_attention",
                                       attn = { heads = np, kv_heads = ng, head_dim = hd } }))
    sa:add("linear_proj", linear("RowParallelLinear", row_forward, pre .. ".self_attention.linear_proj", np * hd, h))
    sa:add("linear_qkv", linear("ColumnParallelLinear", column_forward, pre .. ".self_attention.linear_qkv",
                                h, (np + 2 * ng) * hd))
    lm:add("pre_mlp_layernorm", norm(pre .. ".pre_mlp_layernorm", h))
    local mlp = lm:add("mlp", mod.new("MLP", mlp_forward, { opname = pre .. ".mlp" }))
    mlp:add("linear_fc1", linear("ColumnParallelLinear", column_forward, pre .. ".mlp.linear_fc1", h, 2 * ffn))
    mlp:add("linear_fc2", linear("RowParallelLinear", row_forward, pre .. ".mlp.linear_fc2", ffn, h))
  end
  if post_process then
    dec:add("final_layernorm", norm("decoder.final_layernorm", h))
    root:add("output_layer", linear("ColumnParallelLinear", column_forward, "output_layer", h, mc.vocab // tp))
  end
  -- (Float16Module wraps it as `module`)
  mod.finalize(root, "module")
  root.no_split = { TransformerLayer = true }
  root.checkpoint_layer = "TransformerLayer"
  return root
end

-- What the run makes beside the parameters, before the step: RotaryEmbedding's inv_freq (fp32,
-- hd/2), and the batch's position_ids and loss_mask (pretrain_gpt's get_batch).
function M.build_extras(cx, mc, b, s, tp)
  -- Float16Module(config, module): module.bfloat16() converts the norms' fp32 weights (the only
  -- fp32 parameters of a bf16 build), each a new bf16 tensor, the fp32 one freed
  for _, p in ipairs(cx.params) do
    if p.dtype == "fp32" then
      local np = nn.param(cx, p.name, p.shape, "bf16", p.trainable, nil)
      cx.params[#cx.params] = nil
      cx.G:op { name = "Float16Module: .bfloat16() " .. p.name, kind = "elementwise", phase = "build",
                inputs = { p.id }, outputs = { np.id }, frees = { p.id },
                bytes = nn.bytes(p.shape, "fp32") + nn.bytes(p.shape, "bf16") }
      p.id, p.dtype = np.id, "bf16"
    end
  end
  local function persistent(name, shape, dt)
    local id = cx.G:tensor { name = name, bytes = nn.bytes(shape, dt), numel = nn.numel(shape), dtype = dt,
                             cat = "temp", persistent = true }
    cx.G:op { name = name, kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
    return { id = id, shape = shape, dtype = dt, rg = false, name = name }
  end
  -- RotaryEmbedding.__init__: inv_freq = 1.0 / (rotary_base ** (torch.arange(0, dim, 2) / dim)),
  -- each step a new tensor, the last kept; one a model chunk (each GPTModel has its own)
  local half = { mc.head_dim // 2 }
  for _ = 1, cx.pp and cx.pp.virtual or 1 do
    local prev
    for _, step in ipairs { "arange", "div", "pow", "reciprocal" } do
      local o = nn.new_tensor(cx, "rotary_pos_emb.inv_freq." .. step, half, "fp32", false)
      cx.G:op { name = "rotary_pos_emb.inv_freq." .. step, kind = "elementwise", phase = "build",
                inputs = { prev and prev.id }, outputs = { o.id }, bytes = nn.bytes(half, "fp32") }
      prev = o
    end
    persistent("rotary_pos_emb.inv_freq", half, "fp32")
    cx.G:op { name = "rotary_pos_emb.inv_freq.mul", kind = "none", phase = "build", inputs = { prev.id },
              outputs = {}, frees = { prev.id } }
  end

  -- DistributedDataParallel and the optimizer's main parameters (strategies/megatron_dp.lua)
  if cx.mg_dp then require("strategies.megatron_dp").wrap(cx) end
  persistent("position_ids", { s }, "int64")
  cx.mg_loss_mask = persistent("loss_mask", { b, s }, "fp32")
  cx.mg_tp = tp
  cx.mg_buffers = {}
  cx.mg_buffer_sizes = {}
  cx.mg_regathered = {}
end

-- The run's notes: what is modelled and what is left out. ddp: Megatron's
-- DistributedDataParallel wraps the model (strategies/megatron_dp.lua says what it keeps).
function M.notes(tp, ddp)
  local optimizer = ddp and "the gradients, main parameters and optimizer as Megatron's DistributedDataParallel "
    .. "and get_megatron_optimizer keep them (the next notes)"
    or "the optimizer torch's over the rank's parameters (Megatron's DistributedDataParallel, its optimizer wrapper "
    .. "and finalize_model_grads' all-reduce of the norms' gradients over tp are modelled with data parallelism only)"
  return {
    ("tensor parallelism over %d ranks as Megatron-LM runs it (megatron-core 0.16.1's GPTModel, local spec, "
     .. "sequence parallel): fused qkv and fc1 GEMMs, the column-parallel linears keep their local input and "
     .. "all-gather it again in backward, the gathered inputs and the attention scores' baddbmm input in "
     .. "the persistent \"mpu\" GlobalMemoryBuffer; vocab_parallel_cross_entropy; %s"):format(tp, optimizer),
    "Megatron tensor parallelism: backward's all-gather of a column-parallel linear's input runs before its "
      .. "backward node and the reduce-scatter of its input gradient after it, each blocking; Megatron issues both "
      .. "async, the gather beside the input-gradient GEMM and the reduce-scatter beside the weight-gradient one "
      .. "(not modelled)",
    "Megatron tensor parallelism: the norms are torch.nn.RMSNorm (one fused kernel); the local spec refuses "
      .. "them under sequence parallelism (megatron/core/transformer/torch_norm.py:32), which Megatron runs with "
      .. "TransformerEngine's TENorm, whose kernel is not modelled",
  }
end

-- The note of the "mpu" buffer once the forward has run: its size, made once and kept.
function M.buffer_note(cx)
  local sizes = cx.mg_buffer_sizes
  if not sizes or #sizes == 0 then return nil end
  local n = 0
  for _ in pairs(cx.mg_regathered) do n = n + 1 end
  return ("Megatron's GlobalMemoryBuffer (\"mpu\"): %d allocation%s, ending at %.1f MiB (%d bytes), kept for "
          .. "the run; %d column-parallel linears all-gather their input into it again in backward")
         :format(#sizes, #sizes == 1 and "" or "s", sizes[#sizes] / 2^20, sizes[#sizes], n)
end

return M
