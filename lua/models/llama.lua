-- llama.lua: transformers' LlamaForCausalLM (5.17, models/llama/modeling_llama.py) as a module
-- tree, op by op as it runs in training: the allocations each aten op makes, what autograd
-- saves, and in which dtype. Checked against the allocator traces in
-- validation/traces/optrace_pub-*.csv.gz (modeling_llama.py line numbers there are 5.17's).
--
-- The tree is the one __init__ builds:
--   LlamaForCausalLM
--     model: LlamaModel
--       embed_tokens: Embedding
--       layers.N: LlamaDecoderLayer
--         self_attn: LlamaAttention (q_proj, k_proj, v_proj, o_proj: Linear)
--         mlp: LlamaMLP (gate_proj, up_proj, down_proj: Linear)
--         input_layernorm, post_attention_layernorm: LlamaRMSNorm
--       norm: LlamaRMSNorm
--     lm_head: Linear (its weight is embed_tokens.weight when tie_word_embeddings)
-- Other families (mistral.lua, qwen2.lua) are this tree with a config and a module or two
-- changed, as their modeling files are. Strategies are not named here: they are passes over the
-- tree (lua/strategies/), hooked on module boundaries.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local TT = require "models.blocks.torchtune"

local L = {}

local promote = nn.promote

local W = mod.weight

-- Linear.forward: F.linear(x, weight, bias), under autocast with the (cached) weight, then the
-- input cast to the low-precision dtype first (nn.linear: ops/autocast.lua's rule). Passes (LoRA, bitsandbytes) replace this
-- forward on the modules they target.
function L.linear_forward(cx, m, x)
  local w = W(cx, m.p.weight)
  local b = m.p.bias and W(cx, m.p.bias)
  local name = m.opname
  if b then
    -- addmm with the bias (the bias-side reduction, cuBLASLt's workspace)
    return nn.linear(cx, name, x, w, b)
  end
  return nn.linear(cx, name, x, w, nil, { weight_cast = name .. ".weight_cast" })
end

-- A Linear module (in_features -> out_features). opname: the name its ops carry in reports.
function L.Linear(opname, cin, cout, bias)
  local m = mod.new("Linear", L.linear_forward, { opname = opname, in_features = cin,
                                                  out_features = cout })
  m:declare("weight", { cout, cin })
  if bias then m:declare("bias", { cout }) end
  return m
end

-- LlamaRMSNorm.forward: hidden.to(fp32); variance = pow(2).mean(-1); hidden * rsqrt(var + eps);
-- weight * hidden.to(input_dtype).
local function rmsnorm_forward(cx, m, x)
  local w = W(cx, m.p.weight)
  local name = m.opname
  -- (kernelized to the hub's LigerRMSNorm: vrsim/hub_kernels.lua)
  local hk = cx.run and cx.run.hub_kernels
  if hk and hk.rmsnorm then return require("vrsim.hub_kernels").rmsnorm(cx, name, x, w) end
  local x32 = nn.to(cx, x, "fp32", name .. ".to_fp32")
  -- PowBackward0 (grad * 2 * x) makes its two temporaries before the result
  -- (optrace_pub-c04: the third of its three allocations is the gradient kept)
  local sq = nn.op(cx, { name = name .. ".pow", inputs = { x32 },
                         outs = { { name .. ".squared", x.shape, "fp32" } }, saves = { x32 },
                         bwd_workspace = { nn.bytes(x.shape, "fp32"), nn.bytes(x.shape, "fp32") },
                         bwd_workspace_first = true })
  local rshape = {}
  for i = 1, #x.shape - 1 do rshape[i] = x.shape[i] end
  rshape[#rshape + 1] = 1
  local var = nn.op(cx, { name = name .. ".mean", kind = "reduce_rows", inputs = { sq },
                          outs = { { name .. ".variance", rshape, "fp32" } } })
  -- variance + eps: AddBackward1 (a scalar add) passes the gradient on
  local ve = nn.ew(cx, name .. ".add_eps", { var }, "fp32", nil, { { pass = 1 } })
  -- RsqrtBackward0 is `-0.5 * grad * result.pow(3)` (derivatives.yaml): result.pow(3) and
  -- -0.5 * grad are temporaries made before their product, the gradient: three kernels
  local rs = nn.op(cx, { name = name .. ".rsqrt", inputs = { ve },
                         outs = { { name .. ".rsqrt", rshape, "fp32" } }, save_outs = { 1 },
                         bwd_workspace = { nn.bytes(rshape, "fp32"), nn.bytes(rshape, "fp32") },
                         bwd_workspace_first = true, bwd_kernels = 3 })
  -- x32 * rs: the gradient of rs (computed first, as `other`'s) is the full product, reduced
  -- to rs's shape by the engine as the node returns; then x32's gradient
  local y = nn.op(cx, { name = name .. ".mul", kind = "broadcast_rows", inputs = { x32, rs },
                        outs = { { name .. ".normed", x.shape, "fp32" } }, saves = { x32, rs },
                        bwd_workspace = { nn.bytes(x.shape, "fp32") }, bwd_workspace_first = true })
  local yb = nn.to(cx, y, x.dtype, name .. ".to_input_dtype")
  local odt = promote(w.dtype, yb.dtype)
  -- `hidden_states` keeps y until the function returns, after the weight multiply (torchtune
  -- 0.4's norm casts the product inside its expression: y dies with the cast)
  local drops = { w, yb }
  if yb ~= y and not m.tt_python then drops[3] = y end
  -- weight * hidden broadcasts the weight. MulBackward0 makes hidden's gradient (grad * weight)
  -- and the full product grad * hidden, and returns; the engine then drops the incoming
  -- gradient and reduces the product to the weight's shape (InputMetadata::reduce_grad: a row
  -- sum with ATen's staging buffers) before the node's saved hidden is released
  -- (fulltrace_pub-c05: 64, 64 MiB in, 64 out, the 132 MiB staging in and out, then 64, 64 out).
  -- So the reduction is an op of its own, on the weight's side, created first (its backward runs
  -- after the product's), and it is the one that keeps hidden.
  local wv, saves = w, {}
  if w.rg and not cx.no_grad then
    local c = x.shape[#x.shape]
    wv = nn.view(cx, w, w.shape, name .. ".weight_side")
    wv.rg = true
    nn.op(cx, { name = name .. ".weight_grad", kind = "none", inputs = { w }, out_tensors = { wv },
                saves = { yb }, grads = { { dtype = w.dtype } }, bytes = 0, bwd_kind = "reduce_rows",
                bwd_rowsum = { nn.numel(x.shape) // c, c },
                bwd_bytes = nn.bytes(x.shape, odt) + nn.bytes(w.shape, w.dtype), frees = {} })
  end
  if yb.rg then saves[1] = w end
  if m.tt_python then
    -- `x_normed * self.scale`: MulBackward0 makes `other`'s gradient (the scale's full product)
    -- first, then the normalized input's
    return nn.op(cx, { name = name, kind = "broadcast", inputs = { yb, wv },
                       outs = { { name, x.shape, odt } }, saves = saves,
                       grads = { { dtype = yb.dtype }, { bytes = nn.bytes(x.shape, odt), dtype = odt } },
                       grad_order = { 2, 1 }, frees = drops, flops = nn.numel(x.shape), dtype = odt })
  end
  return nn.op(cx, { name = name, kind = "broadcast", inputs = { wv, yb },
                     outs = { { name, x.shape, odt } }, saves = saves,
                     grads = { { bytes = nn.bytes(x.shape, odt), dtype = odt }, { dtype = yb.dtype } },
                     grad_order = { 2, 1 }, frees = drops, flops = nn.numel(x.shape), dtype = odt })
end

-- (torchtune 0.4's RMSNorm runs it with tt_python: models/blocks/torchtune.lua)
L.rmsnorm_forward = rmsnorm_forward

function L.RMSNorm(opname, dim, cls)
  local m = mod.new(cls or "LlamaRMSNorm", rmsnorm_forward, { opname = opname })
  m:declare("weight", { dim })
  return m
end

-- nn.Embedding.forward: a gather of rows.
local function embedding_forward(cx, m, ids)
  local w = W(cx, m.p.weight)
  local b, s = ids.shape[1], ids.shape[2]
  -- embedding_dense_backward_cuda (aten/src/ATen/native/cuda/Embedding.cu): up to 3072 indices
  -- (without scale_grad_by_freq) one kernel adds the rows into the zeroed gradient directly, no
  -- sort and no partial sums (fulltrace_gen4-dsv2lite-l4-b1-eager, 2048 tokens: none)
  local ws = {}
  if b * s > 3072 then ws[1] = (b * s // 10 + math.min(b * s, m.num)) * m.dim * 4 end
  ws[#ws + 1] = m.tp_full_grad_bytes
  return nn.op(cx, { name = "embed_tokens", kind = "gather", inputs = { ids, w },
                     outs = { { "inputs_embeds", { b, s, m.dim }, w.dtype } },
                     -- (under tensor parallelism, lua/strategies/tp.lua, the gradient is the
                     -- whole table's, Replicate: m.tp_whole_grad_bytes)
                     saves = { ids }, grads = { "none", { dtype = w.dtype, bytes = m.tp_whole_grad_bytes } },
                     -- embedding_backward_cuda_kernel's fp32 partial sums, sized for the most
                     -- partial segments there can be without a device sync: numel /
                     -- NROWS_PER_THREAD (10) + min(numel, vocab) rows of h (fulltrace_pub-c04:
                     -- 147636224 bytes at 8192 tokens)
                     -- (under tensor parallelism with FSDP2 beside a pipeline, lua/strategies/
                     -- tp.lua, the whole table's gradient too: m.tp_full_grad_bytes)
                     bwd_workspace = ws })
end

function L.Embedding(num, dim)
  local m = mod.new("Embedding", embedding_forward, { num = num, dim = dim })
  m:declare("weight", { num, dim })
  return m
end

-- A product x * table where the table's dtype outranks x's (under autocast q and k are bf16,
-- the tables fp32): MulBackward0 computes `grad * table` in the promoted dtype, then the engine
-- casts it to x's dtype (validate_outputs, torch/csrc/autograd/engine.cpp): the promoted product
-- is a temporary made before the cast and freed after it (fulltrace_gen-stk-g07-amp-bf16-b4: a
-- 128 MiB fp32 product then its 64 MiB bf16 cast, four of each a layer).
local function mixed_mul_grad(spec, x, out_dtype)
  if out_dtype ~= x.dtype then
    spec.bwd_workspace = { nn.bytes(x.shape, out_dtype) }
    spec.bwd_workspace_first = true
  end
  return spec
end

-- rotate_half(x) * sin + x * cos, as apply_rotary_pos_emb runs it.
local function rotary(cx, name, x, cos, sin)
  local xc = nn.op(cx, mixed_mul_grad({ name = name .. ".mul_cos", kind = "strided", inputs = { x, cos },
                         outs = { { name .. ".x_cos", x.shape, promote(x.dtype, cos.dtype) } },
                         saves = { cos }, grads = { "new", "none" } }, x, promote(x.dtype, cos.dtype)))
  local half = {}
  for i = 1, #x.shape do half[i] = x.shape[i] end
  half[#half] = half[#half] // 2
  -- x1 = x[..., :d/2], x2 = x[..., d/2:] are views; backward of each slice is a full-size buffer
  local x1 = nn.view_op(cx, name .. ".x1", x, half, nil, "strided")
  local x2 = nn.view_op(cx, name .. ".x2", x, half, nil, "strided")
  local neg = nn.op(cx, { name = name .. ".neg", kind = "strided", inputs = { x2 },
                          outs = { { name .. ".neg", half, x.dtype } } })
  local rot = nn.op(cx, { name = name .. ".cat", kind = "cat_strided", inputs = { neg, x1 },
                          outs = { { name .. ".rotated", x.shape, x.dtype } },
                          grads = { { pass = 1 }, { pass = 1 } } })
  local rs = nn.op(cx, mixed_mul_grad({ name = name .. ".mul_sin", kind = "broadcast", inputs = { rot, sin },
                         outs = { { name .. ".rot_sin", x.shape, promote(x.dtype, sin.dtype) } },
                         saves = { sin }, grads = { "new", "none" } }, rot, promote(x.dtype, sin.dtype)))
  return nn.op(cx, { name = name .. ".add", inputs = { xc, rs },
                     outs = { { name .. ".embed", x.shape, xc.dtype } },
                     grads = { { pass = 1 }, { pass = 1 } } })
end

-- The attention interface (sdpa_attention_forward or eager_attention_forward): a fused SDPA
-- kernel, or eager matmul-softmax-matmul. q (b, heads, s, hd); k, v already repeated to every
-- query head for eager. mask: an additive mask for eager, or for SDPA a (b, 1, s, s) boolean
-- mask when the causal shortcut cannot be taken (a sliding window shorter than the sequence).
local function attention(cx, name, q, k, v, a, b, s, impl, mask, kv_contiguous)
  local hd, heads = a.head_dim, a.heads
  local shape = { b, heads, s, hd }
  local dt = q.dtype
  local dd = cx.run.data
  if impl == "flash" and dd and (dd.padded or dd.packed) then
    -- a padded or packed batch under flash: transformers' flash_attention_2 and its varlen kernel
    -- (strategies/data.lua)
    return require("strategies.data").flash_varlen(cx, name, q, k, v, dd, cx.run.use_cache)
  end
  if impl == "flex" then
    -- transformers' flex_attention_forward on the model's BlockMask (mask: its tensors); a
    -- torchtune packed batch's document BlockMask: torchtune's compiled flex_attention, which
    -- returns the output alone, over the blocks the documents leave (strategies/data.lua)
    cx.run.flex_taken = true
    local tt = dd and dd.torchtune
    -- (under torch.compile, torchtune's call is a graph break: strategies/compile.lua
    -- M.torchtune_split)
    local resume = tt and cx.compile_break and cx.compile_break(cx, { q, k, v })
    -- (torchtitan's FlexAttentionWrapper returns the output alone too)
    local out = nn.flex_attention(cx, name, q, k, v, { block_mask = mask, output_only = tt or (dd and dd.torchtitan),
                                                       blocks = dd and dd.flex_blocks })
    if resume then resume() end
    return out
  end
  if impl ~= "eager" then
    -- under context parallelism the call is ring attention's (strategies/cp.lua)
    if cx.cp then
      return require("strategies.cp").ring_attention(cx, name, q, k, v, cx.cp, nn.sdpa_backend(cx.arch, q.dtype, impl))
    end
    -- F.scaled_dot_product_attention (the op library's nn.sdpa: the kernel PyTorch picks, a
    -- boolean mask's additive copy, what each backend keeps), is_causal unless a mask is given
    -- (a decode step's one query: sdpa_attention_forward's is_causal is off for a query of length 1)
    local out = nn.sdpa(cx, name, q, k, v, { impl = impl, causal = not cx.run.decode, mask = mask })
    return out
  end
  -- eager_attention_forward: scores = q @ k^T * scaling (+ mask); softmax in fp32, cast back;
  -- probs @ v; transpose(1, 2).contiguous()
  local sshape = { b, heads, s, s }
  -- torch.matmul folds (batch, heads) into bmm's one batch dim. q, k and v are laid out as the
  -- (b, s, heads * d) projections they came from, so with b > 1 no single batch stride exists
  -- and reshape copies each (_unsafe_view of a clone: the gradient passes straight through);
  -- bmm then saves the copies. With b = 1 the fold is a view. (fulltrace_held-eager-ckpt-b2:
  -- two 32 MiB copies before each q @ k^T, one before each probs @ v.) Keys and values that
  -- come out of DynamicCache's torch.cat (or repeat_kv's reshape) are contiguous in (b, heads,
  -- s, d), and so is an autocast copy of them: the fold is a view, and only q is copied
  -- (oracle heldout_llama2_7b_l4_amp_bf16_eager_b2_s4096: one clone before q @ k^T, none before
  -- probs @ v).
  local function bmm_operand(x, what, contiguous)
    if b == 1 or contiguous then return x end
    return nn.op(cx, { name = name .. "." .. what .. "_bmm_copy", kind = "transpose", inputs = { x },
                       outs = { { name .. "." .. what .. "_bmm", x.shape, x.dtype } },
                       grads = { { pass = 1 } } })
  end
  q, k = bmm_operand(q, "q"), bmm_operand(k, "k", kv_contiguous)
  -- BmmBackward0 computes mat2's gradient before self's, as MmBackward0 does
  local scores = nn.op(cx, { name = name .. ".qk", kind = "mm", inputs = { q, k },
                             outs = { { name .. ".scores", sshape, dt } }, saves = { q, k }, grad_order = { 2, 1 },
                             flops = 2 * b * heads * s * s * hd, dtype = dt })
  -- scores * scaling: its backward is the gradient times the same constant, as many bytes
  local scaled = nn.op(cx, { name = name .. ".scale", inputs = { scores }, outs = { { name .. ".scale", sshape, dt } },
                             flops = nn.numel(sshape), bwd_bytes = 2 * nn.bytes(sshape, dt) })
  if a.softcap then
    -- attention logit soft-capping (Gemma 2's eager_attention_forward): attn_weights / softcap,
    -- tanh, * softcap, each a new (b, heads, s, s) tensor in the scores' dtype; TanhBackward0
    -- keeps its output, the two scalar ops nothing
    local d = nn.op(cx, { name = name .. ".softcap_div", inputs = { scaled },
                          outs = { { name .. ".softcap_div", sshape, dt } }, flops = nn.numel(sshape) })
    local t = nn.op(cx, { name = name .. ".softcap_tanh", inputs = { d },
                          outs = { { name .. ".softcap_tanh", sshape, dt } }, save_outs = { 1 },
                          flops = nn.numel(sshape) })
    scaled = nn.op(cx, { name = name .. ".softcap_mul", inputs = { t },
                         outs = { { name .. ".softcapped", sshape, dt } }, flops = nn.numel(sshape) })
  end
  -- `attn_weights + causal_mask`: under autocast the scores are bf16 and the mask fp32, so the sum
  -- is already fp32 and AddBackward0 casts the gradient back for the scores (nn.add_grads)
  local masked_dt = mask and nn.promote(dt, mask.dtype) or dt
  local mgrads, moved = nn.add_grads(masked_dt, scaled, mask)
  -- graph_const: inside the whole model's graph (compile scope "model") the mask is made there,
  -- from iota, where the partitioner recomputes it for free (strategies/compile.lua M.partition)
  local masked = nn.op(cx, { name = name .. ".add_mask", inputs = { scaled, mask },
                             outs = { { name .. ".masked", sshape, masked_dt } },
                             grads = { mgrads[1], "none" }, bwd_bytes = moved,
                             graph_const = mask and { mask } or nil })
  -- softmax(x, dtype=float32) on a bf16 input is input.to(float32) then _softmax (only fp16 has a
  -- fused half-to-float kernel): the cast is an autograd node of its own, so backward makes the
  -- gradient in fp32 first and casts it back; an fp32 input (the masked sum under autocast) is
  -- not copied
  local m32 = nn.to(cx, masked, "fp32", name .. ".scores_fp32")
  -- its CUDA backward (softmax_backward_cuda_out, aten/src/ATen/native/cuda/SoftMax.cu) first
  -- computes `Tensor tmp = grad * output;`: a temporary the size of the gradient, in its dtype
  local p32
  if cx.compiling then
    -- compiled, Inductor's decomposition of _softmax: the row max and the row sum of exp(x - max),
    -- reductions the partitioner saves (a value a row), then exp(x - max) / sum, pointwise, which
    -- backward recomputes from the scores and the two (compile_model_families_l2.json, gemma2:
    -- amax and sum saved, not the probabilities)
    local rs = { b, heads, s, 1 }
    local mx = nn.op(cx, { name = name .. ".softmax_amax", kind = "reduce_rows", inputs = { m32 },
                           outs = { { name .. ".softmax_amax", rs, "fp32", no_grad = true } },
                           grads = { "none" }, flops = nn.numel(sshape) })
    local sm = nn.op(cx, { name = name .. ".softmax_sum", kind = "reduce_rows", inputs = { m32, mx },
                           outs = { { name .. ".softmax_sum", rs, "fp32", no_grad = true } },
                           grads = { "none", "none" }, flops = 2 * nn.numel(sshape) })
    p32 = nn.op(cx, { name = name .. ".softmax", kind = "softmax", inputs = { m32, mx, sm },
                      outs = { { name .. ".probs_fp32", sshape, "fp32" } }, save_outs = { 1 },
                      grads = { { dtype = "fp32" }, "none", "none" },
                      bwd_workspace = { nn.bytes(sshape, "fp32") },
                      -- (the eager kernel's 5 flops an element, split over the three)
                      flops = 2 * nn.numel(sshape), dtype = "fp32" })
  else
    p32 = nn.op(cx, { name = name .. ".softmax", kind = "softmax", inputs = { m32 },
                      outs = { { name .. ".probs_fp32", sshape, "fp32" } }, save_outs = { 1 },
                      bwd_workspace = { nn.bytes(sshape, "fp32") },
                      flops = 5 * nn.numel(sshape), dtype = "fp32" })
  end
  local pr = nn.to(cx, p32, dt, name .. ".probs_cast")
  -- `attn_weights = softmax(attn_weights, ...).to(...)`: the old value dies on reassignment
  nn.release(cx, { masked }, name .. ": attn_weights reassigned")
  v = bmm_operand(v, "v", kv_contiguous)
  -- the attention weights are also LlamaAttention's second return value, which the decoder
  -- layer binds to `_` until it returns (the caller releases them): pv drops only v
  local o = nn.op(cx, { name = name .. ".pv", kind = "mm", inputs = { pr, v },
                        outs = { { name .. ".attn_out", shape, dt } }, saves = { pr, v }, frees = { v },
                        grad_order = { 2, 1 },
                        flops = 2 * b * heads * s * s * hd, dtype = dt })
  return o, pr
end

-- Phi-3's fused projection (Phi3Attention): qkv = qkv_proj(h), then q, k and v the slices
-- qkv[..., :q_end], [q_end:k_end], [k_end:] along the last dimension: views, so the whole qkv lives
-- while any of them does (v, which the attention keeps, holds q's and k's bytes too), and each
-- slice's backward (SliceBackward0) writes its gradient into zeros of qkv's full shape.
local function split_qkv(cx, m, hn, b, s)
  local a, pre = m.attn, m.lpre
  local qkv = mod.call(cx, m.children.qkv_proj, hn)
  local full = nn.bytes(qkv.shape, qkv.dtype)
  local qd, kvd = a.heads * a.head_dim, a.kv_heads * a.head_dim
  local q = nn.view_op(cx, pre .. ".q_slice", qkv, { b, s, qd }, full, "strided")
  local k = nn.view_op(cx, pre .. ".k_slice", qkv, { b, s, kvd }, full, "strided")
  local v = nn.view_op(cx, pre .. ".v_slice", qkv, { b, s, kvd }, full, "strided")
  return q, k, v, qkv
end

-- Phi-3's apply_rotary_pos_emb (partial_rotary_factor 1.0): `q_rot, q_pass = q[..., :rotary_dim],
-- q[..., rotary_dim:]` and the same for k, then `torch.cat([rotated q_rot, q_pass], dim=-1)`: a
-- copy of each rotated tensor. `q[..., :rotary_dim]` spans the whole last dimension, and Python
-- indexing returns q itself for such a slice (ATen/TensorIndexing.h applySlice: start 0, stop
-- the length, step 1 returns self; no SliceBackward0): only the empty q_pass is a slice, whose
-- backward makes a gradient the size of the whole q from zeros, summed with the rotary's.
local function rotary_sliced(cx, pre, qv, kv, cos, sin)
  local function slices(x, which)
    local none = nn.copy_shape(x.shape)
    none[#none] = 0
    return x, nn.view_op(cx, pre .. "." .. which .. "_pass", x, none, nil, "strided")
  end
  local q_rot, q_pass = slices(qv, "q")
  local k_rot, k_pass = slices(kv, "k")
  local function embed(x_rot, x_pass, which)
    local e = rotary(cx, pre .. "." .. which .. "_rotary", x_rot, cos, sin)
    return nn.op(cx, { name = pre .. "." .. which .. "_rotary.cat_pass", kind = "copy", inputs = { e, x_pass },
                       outs = { { pre .. "." .. which .. "_embed", x_rot.shape, e.dtype } },
                       grads = { { pass = 1 }, { pass = 1 } } })
  end
  local qe = embed(q_rot, q_pass, "q")
  local ke = embed(k_rot, k_pass, "k")
  -- apply_rotary_pos_emb returns: its slices go
  nn.release(cx, { q_pass, k_pass }, pre .. ": apply_rotary_pos_emb returns")
  return qe, ke
end

-- A projection split into heads, (b, s, n * d) -> (b, n, s, d): `x_proj(h).view(hidden_shape)
-- .transpose(1, 2)`, whose backward copies the non-contiguous gradient back. With a per-head norm
-- (Qwen3's and Gemma 3's q_norm / k_norm, `norm(x_proj(h).view(hidden_shape)).transpose(1, 2)`)
-- the norm runs on the (b, s, n, d) view and the transpose is a view of its output: the gradient
-- reaching the norm's backward is the transposed one, every elementwise kernel of that backward
-- keeps its layout, and the view back to (b, s, n * d) is where it is copied.
local function heads_of(cx, m, which, x, n, b, s, hd)
  local pre = m.lpre
  local norm = m.children[which .. "_norm"]
  if not norm then return nn.view_op(cx, pre .. "." .. which .. "_heads", x, { b, n, s, hd }) end
  if m.attn.norm_on_proj then
    -- OLMo-2: `norm(x_proj(h))` over the whole projection, then `.view(hidden_shape).transpose(1,
    -- 2)` of its output, whose backward copies as the plain projection's does
    return nn.view_op(cx, pre .. "." .. which .. "_heads", mod.call(cx, norm, x), { b, n, s, hd })
  end
  if m.attn.norm_after_transpose then
    -- Gemma 3: `norm(x_proj(h).view(hidden_shape).transpose(1, 2))`, the norm on the transposed
    -- view; its backward hands back a gradient the view back to (b, s, n * d) is taken to copy, as
    -- the plain projection's is
    return mod.call(cx, norm, nn.view_op(cx, pre .. "." .. which .. "_heads", x, { b, n, s, hd }))
  end
  local x4 = nn.view_op(cx, pre .. "." .. which .. "_heads", x, { b, s, n, hd })
  local xn = mod.call(cx, norm, x4)
  return nn.view(cx, xn, { b, n, s, hd }, pre .. "." .. which .. "_transpose")
end

-- Whether the plain F.scaled_dot_product_attention call (attention above, neither ring attention
-- nor the varlen path) returns its output in q's layout: cuDNN and flash do, the memory-efficient
-- kernel (taken for fp32, before Ampere, or for a mask where flash would run) writes BMHK.
local function sdpa_out_like_q(cx, q, impl, mask)
  if cx.cp then return false end
  if impl == "flex" then return true end -- (its Triton template writes the output in q's layout)
  local backend = nn.sdpa_backend(cx.arch, q.dtype, impl)
  local dd = cx.run.data
  if backend == "flash" and (mask or (dd and (dd.padded or dd.packed))) then return false end
  return backend ~= "mem_efficient"
end

-- LlamaAttention.forward(hidden_states, position_embeddings, attention_mask). The run's
-- settings (cx.run: batch, seq, attention implementation, KV cache on or off) come from the
-- caller, as transformers' kwargs do.
local function attention_forward(cx, m, hn, cos, sin, mask)
  local r = cx.run
  local b, s = r.batch, r.seq
  local a = m.attn
  local pre = m.lpre -- the layer's prefix: the names these ops have always had in reports
  local hd = a.head_dim
  -- `x_proj(hidden_states).view(hidden_shape).transpose(1, 2)` for q, then k, then v (the
  -- autograd nodes in that order); backward copies the non-contiguous gradient
  local q, k, v, qkv
  if m.children.qkv_proj then q, k, v, qkv = split_qkv(cx, m, hn, b, s) end
  -- torchtune's MultiHeadAttention (model.code = "torchtune"): `q = self.pos_embeddings(q)` on
  -- the heads' view right away, before k_proj, from the RoPE cache (blocks/torchtune.lua). The
  -- rotation's backward hands the heads' view a contiguous gradient (SelectBackward's new
  -- tensors, cast back): the view back copies nothing, for q as for k. Qwen2's rotation
  -- (rotate_half's elementwise ops) keeps the layout of the gradient it is given: q's, from the
  -- attention's dq, is the view's own; k's, summed over the expanded heads, is (b, h, s, d)
  -- contiguous, which the view back copies (the oracle's qwen25_05b_l2_bf16_torchtune)
  local tt = r.rope_cache
  local function heads(which, x, n)
    if tt and (tt.style ~= "halves" or which == "q") then
      return nn.view(cx, x, { b, n, s, hd }, pre .. "." .. which .. "_heads")
    end
    return heads_of(cx, m, which, x, n, b, s, hd)
  end
  q = q or mod.call(cx, m.children.q_proj, hn)
  local qv = heads("q", q, a.heads)
  local tt_packed = tt and r.data_inputs ~= nil and r.data_inputs.position_ids ~= nil
  local qe, ke
  local function tt_rope(x, which)
    if tt.style ~= "halves" then return TT.rope(cx, pre .. "." .. which .. "_rope", x, tt, tt_packed) end
    -- Qwen2RotaryPositionalEmbeddings: its tables, then transformers' rotate_half ops
    local tcos, tsin, gathered = TT.halves_tables(cx, pre .. "." .. which .. "_rope", x, tt_packed)
    local e = rotary(cx, pre .. "." .. which .. "_rotary", x, tcos, tsin)
    nn.release(cx, { tcos, tsin, gathered }, pre .. "." .. which .. "_rope: returns")
    return e
  end
  if tt then
    qe = tt_rope(qv, "q")
    nn.release(cx, { qv }, pre .. ": q rebound to its rotated copy")
  end
  k = k or mod.call(cx, m.children.k_proj, hn)
  local kv = heads("k", k, a.kv_heads)
  v = v or mod.call(cx, m.children.v_proj, hn)
  -- v's gradient: cuDNN attention's backward makes dv with v's strides, so when v reaches
  -- it directly (no cache copy, no repeat_kv) dv transposed back is already contiguous and
  -- the view's backward copies nothing (fulltrace_pub-c05: no 64 MiB copy after each
  -- attention backward). A cache copy, repeat_kv or eager bmm hands back a contiguous
  -- (b, heads, s, d) gradient, which the view back copies. An attention mask changes nothing
  -- here (the oracle's llama2_7b_l2_bf16_packed_ckpt: a block-causal mask, no copy).
  local attn_impl = r.attention == "sdpa" and nn.sdpa_backend(cx.arch, cx.autocast or v.dtype) or r.attention
  local sdpa_mask = mask and r.attention ~= "eager" and r.attention ~= "flex"
  -- sdpa_attention_forward (integrations/sdpa_attention.py) hands grouped keys and values to
  -- SDPA as they are (enable_gqa=True) when use_gqa_in_sdpa holds: torch >= 2.5 and no mask;
  -- otherwise, and always for eager, repeat_kv copies them to every query head. cuDNN and flash
  -- attention take GQA (sdp_utils.cpp: check_batch_size_and_num_heads_dense<true>); the
  -- memory-efficient kernel does not, and PyTorch then falls back to its math path.
  -- model.repeat_kv: torchtitan's Llama (models/llama/model.py, repeat_kv before
  -- F.scaled_dot_product_attention) repeats them always, so SDPA, and ring attention under
  -- context parallelism, takes keys and values of every query head.
  local grouped = a.kv_heads ~= a.heads
  -- axolotl's sdpa_varlen wrapper takes the keys and values as the module hands them and repeats
  -- them itself (strategies/data.lua M.sdpa_varlen)
  local sdpa_varlen = r.data ~= nil and r.data.real_batches and r.attention == "sdpa"
  local enable_gqa = grouped and r.attention ~= "eager" and not sdpa_mask and not r.repeat_kv and not sdpa_varlen
  -- flex_attention_forward: enable_gqa unless the query heads (this rank's) are not a power of
  -- two, where repeat_kv copies the keys and values first
  if r.attention == "flex" and a.heads & (a.heads - 1) ~= 0 then enable_gqa = false end
  if enable_gqa and attn_impl == "mem_efficient" then
    error(("%s: grouped-query attention with SDPA's memory-efficient kernel (fp32, forced, or a GPU "
           .. "before Ampere) runs "
           .. "PyTorch's math fallback, which is not modelled: use bf16/fp16 or attention = \"eager\"")
          :format(pre), 0)
  end
  -- The values' heads view (view(b, s, h, d).transpose(1, 2)): its gradient comes back in the
  -- values' own layout, a view, where the kernel's dv has the strides of the values it read:
  -- cuDNN keeps its input's (v itself without a cache; with one, the cache's (b, h, s, d) copy,
  -- whose transposed gradient the reshape must copy), and the memory-efficient kernel makes dv
  -- contiguous in its BMHK order (attention_backward.cu _efficient_attention_backward:
  -- at::empty(value.sizes()) on the transposed values), which is v's own layout either way.
  local vv
  -- (flash_attention_2's varlen path likewise takes v as its (b, L, heads, d) layout)
  local varlen = (attn_impl == "flash" and r.data and (r.data.padded or r.data.packed)) or sdpa_varlen
  -- (flex attention's backward makes dv with v's strides too: empty_like)
  if (((attn_impl == "cudnn" or varlen or attn_impl == "flex") and not r.use_cache) or attn_impl == "mem_efficient")
     and (not grouped or enable_gqa or varlen) then
    vv = nn.view(cx, v, { b, a.kv_heads, s, hd }, pre .. ".v_heads")
  else
    vv = nn.view_op(cx, pre .. ".v_heads", v, { b, a.kv_heads, s, hd })
  end
  if tt then
    ke = tt_rope(kv, "k")
    nn.release(cx, { kv }, pre .. ": k rebound to its rotated copy")
  elseif a.rotary_slices then
    qe, ke = rotary_sliced(cx, pre, qv, kv, cos, sin)
  elseif r.hub_kernels and r.hub_kernels.rotary then
    -- kernelized to the hub's apply_rotary_transformers (vrsim/hub_kernels.lua)
    qe, ke = require("vrsim.hub_kernels").apply_rotary(cx, pre, qv, kv, cos, sin)
  else
    qe = rotary(cx, pre .. ".q_rotary", qv, cos, sin)
    ke = rotary(cx, pre .. ".k_rotary", kv, cos, sin)
    if a.rotary_fp32 then
      -- Olmo2's apply_rotary_pos_emb takes fp32 tables (rotary_fp32): q * cos promotes, and it
      -- returns `q_embed.to(q_type), k_embed.to(k_type)`, the fp32 embeds dying as it returns
      local q32, k32 = qe, ke
      qe = nn.to(cx, q32, qv.dtype, pre .. ".q_rotary.to")
      ke = nn.to(cx, k32, kv.dtype, pre .. ".k_rotary.to")
    end
  end
  -- `query_states, key_states = apply_rotary_pos_emb(...)`: the projections die together
  if not tt then nn.release(cx, { qv, kv }, pre .. ": query/key states reassigned") end
  -- DynamicCache.update (use_cache defaults to True): torch.cat onto an empty cache copies
  -- the keys and values; the copies are what attention sees and saves
  -- (with checkpointing transformers turns use_cache off: no copies)
  local kc, vc = ke, vv
  if cx.gen then
    -- model.generate's DynamicCache: the layer's cache grows by torch.cat (strategies/generate.lua)
    kc, vc = require("strategies.generate").update(cx, pre, ke, vv, promote(ke.dtype, vv.dtype))
    nn.release(cx, { ke, vv }, pre .. ": key/value states rebound to the cache's")
  elseif r.use_cache then
    -- `key_states, value_states = past_key_values.update(...)`: both copies are made before
    -- the names are rebound and the originals go (fulltrace_dev-x2-zero1-trace)
    -- DynamicLayer.lazy_initialization makes both empty tensors in the keys' dtype, so
    -- torch.cat promotes the values to it (under autocast the rotated keys are fp32 and the
    -- values bf16: the cached values are fp32). The cache is the model output's
    -- past_key_values: it holds both until the caller drops the output, after the forward
    -- (fulltrace_gen-stk-g07-amp-bf16-b4: two 128 MiB copies a layer, freed after the loss).
    kc = nn.op(cx, { name = pre .. ".cache_keys", kind = "copy", inputs = { ke },
                     outs = { { pre .. ".cache.keys", ke.shape, ke.dtype } },
                     grads = { { pass = 1 } }, frees = {} })
    local vdt = promote(ke.dtype, vv.dtype)
    vc = nn.op(cx, { name = pre .. ".cache_values", kind = vdt == vv.dtype and "transpose" or "cast_up",
                     inputs = { vv }, outs = { { pre .. ".cache.values", vv.shape, vdt } },
                     grads = { vdt == vv.dtype and { pass = 1 } or { dtype = vv.dtype } }, frees = {},
                     bytes = nn.bytes(vv.shape, vv.dtype) + nn.bytes(vv.shape, vdt) })
    nn.hold(cx, kc)
    nn.hold(cx, vc)
    nn.release(cx, { ke, vv }, pre .. ": key/value states rebound to the cache's")
  end
  if grouped and not enable_gqa and not sdpa_varlen then
    -- repeat_kv: expand + reshape copies the keys and values to every query head
    local rep = { b, a.heads, s, hd }
    kc = nn.op(cx, { name = pre .. ".repeat_k", inputs = { kc }, outs = { { pre .. ".k_rep", rep, kc.dtype } },
                     grads = { { dtype = kc.dtype } } })
    vc = nn.op(cx, { name = pre .. ".repeat_v", inputs = { vc }, outs = { { pre .. ".v_rep", rep, vc.dtype } },
                     grads = { { dtype = vc.dtype } } })
  end
  local qa = qe
  local uncast = {}
  if cx.autocast and qe.dtype ~= cx.autocast then
    -- autocast's SDPA casts (ops/autocast.lua: value, key, query); the fp32 originals are the
    -- attention interface's arguments, held until the attention returns
    -- (fulltrace_gen-stk-g07-amp-bf16-b4: three 64 MiB copies, then the frees)
    local args = nn.autocast(cx, "sdpa", { qe, kc, vc }, 3,
                             { names = { pre .. ".q_cast", pre .. ".k_cast", pre .. ".v_cast" }, keep = true })
    for i, x in ipairs { vc, kc, qe } do
      if args[4 - i] ~= x then uncast[#uncast + 1] = x end
    end
    qa, kc, vc = args[1], args[2], args[3]
  end
  local ao, attn_weights
  if sdpa_varlen then
    if cx.cp then error(pre .. ": axolotl's sdpa_varlen under context parallelism is not modelled", 0) end
    -- the rotated query is (b, s, heads, d) in memory (the rotation keeps its input's strides),
    -- as are the keys and values the module made, but not a cache's copies (or Phi-3's rotated
    -- slices, or its fused projection's values)
    ao = require("strategies.data").sdpa_varlen(cx, m.opname, qa, kc, vc, r.data,
      { q = a.rotary_slices, k = r.use_cache or a.rotary_slices, v = r.use_cache or qkv ~= nil })
  else
    ao, attn_weights = attention(cx, m.opname, qa, kc, vc, a, b, s, r.attention, mask,
                                 r.use_cache or (grouped and not enable_gqa))
  end
  local ao2
  if r.attention == "eager" then
    -- transpose(1, 2).contiguous(); its gradient reaches the P x V matmul's backward as a
    -- transposed view, which matmul folds into bmm's batch with a copy unless there is one row
    -- (b = 1: the (b x heads) fold is a view; the oracle's llama2_7b_l2_bf16_packed_ckpt_eager)
    ao2 = nn.op(cx, { name = pre .. ".attn_transpose", inputs = { ao },
                      outs = { { pre .. ".attn_out_t", { b, s, a.heads * hd }, ao.dtype } },
                      grads = b == 1 and { { pass = 1 } } or nil })
  elseif a.rotary_slices and not cx.compiling and sdpa_out_like_q(cx, qa, r.attention, mask) then
    -- sdpa_attention_forward's transpose(1, 2).contiguous(): cuDNN (alloc_with_matching_layout)
    -- and flash (empty_like of the query) give the output the query's layout, and Phi-3's
    -- rotary cat makes the query contiguous in (b, heads, s, d): the transpose is a copy, which
    -- o_proj keeps for its weight gradient while the kernel keeps its own output
    -- (fulltrace_gen4-phi3-mini-l4-b4: a 48 MiB copy after each attention, live to the backward)
    -- Compiled, Inductor's cat decomposition drops the empty q_pass and clones the rotated
    -- query, a clone that keeps its (b, s, heads, d) layout: the output, the query's layout, is
    -- transposed by a view (validation/oracle/captures/compile_model_families_l2.json, phi3: o_proj
    -- keeps a view of the flash output)
    ao2 = nn.op(cx, { name = pre .. ".attn_transpose", inputs = { ao },
                      outs = { { pre .. ".attn_out_t", { b, s, a.heads * hd }, ao.dtype } },
                      grads = { { pass = 1 } } })
  elseif cx.cp and r.attention ~= "eager" and cx.cp.rank < cx.cp.size - 1 then
    -- ring attention's output (strategies/cp.lua): on every rank but the last some step updates
    -- only q's second half, and _SDPAMerger's _partial_update cats the halves back, so the merged
    -- output is contiguous in (b, heads, s, d) and the transpose(1, 2).contiguous() copies it, a
    -- copy o_proj keeps (oracle capture llama2_7b_l2_bf16_cp2, rank 0: a clone after each ring)
    ao2 = nn.op(cx, { name = pre .. ".attn_transpose", inputs = { ao },
                      outs = { { pre .. ".attn_out_t", { b, s, a.heads * hd }, ao.dtype } },
                      grads = { { pass = 1 } } })
  else
    ao2 = nn.view(cx, ao, { b, s, a.heads * hd })
  end
  local o = mod.call(cx, m.children.o_proj, ao2)
  -- LlamaAttention.forward returns: its locals die (Phi-3's `qkv` among them: with the cache's
  -- copies in use it outlives the slices, fulltrace_gen4-phi3-mini-l4-b4: freed after o_proj)
  local locals = { qa, kc, vc, qkv }
  for _, x in ipairs(uncast) do locals[#locals + 1] = x end
  nn.release(cx, locals, pre .. ": self_attn returns")
  return o, attn_weights
end

function L.Attention(cfg, l, pre)
  local a = { heads = cfg.heads, kv_heads = cfg.kv_heads, head_dim = cfg.head_dim, softcap = cfg.attn_softcap,
              norm_after_transpose = cfg.qk_norm == "head_transposed", norm_on_proj = cfg.qk_norm == "proj",
              rotary_slices = cfg.rotary_slices, rotary_fp32 = cfg.rotary_fp32 }
  local m = mod.new("LlamaAttention", attention_forward, { attn = a, opname = pre .. ".self_attn", lpre = pre })
  local h, qd, kvd = cfg.hidden, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
  local p = pre .. ".self_attn."
  if cfg.fused_qkv then
    -- Phi3Attention.__init__: o_proj, then qkv_proj (h -> q, k and v stacked)
    m:add("o_proj", L.Linear(p .. "o_proj", qd, h, false))
    m:add("qkv_proj", L.Linear(p .. "qkv_proj", h, qd + 2 * kvd, false))
    return m
  end
  m:add("q_proj", L.Linear(p .. "q_proj", h, qd, cfg.qkv_bias))
  m:add("k_proj", L.Linear(p .. "k_proj", h, kvd, cfg.qkv_bias))
  m:add("v_proj", L.Linear(p .. "v_proj", h, kvd, cfg.qkv_bias))
  m:add("o_proj", L.Linear(p .. "o_proj", qd, h, cfg.o_bias))
  if cfg.qk_norm == "head" or cfg.qk_norm == "head_transposed" then
    -- Qwen3Attention: an RMSNorm over each head's head_dim for q and for k, made after o_proj
    m:add("q_norm", L.RMSNorm(p .. "q_norm", cfg.head_dim, cfg.norm_cls))
    m:add("k_norm", L.RMSNorm(p .. "k_norm", cfg.head_dim, cfg.norm_cls))
  elseif cfg.qk_norm == "proj" then
    -- Olmo2Attention: over the whole q projection (heads * head_dim) and the whole k projection
    m:add("q_norm", L.RMSNorm(p .. "q_norm", qd, cfg.norm_cls))
    m:add("k_norm", L.RMSNorm(p .. "k_norm", kvd, cfg.norm_cls))
  end
  return m
end

-- LlamaMLP.forward: down_proj(act_fn(gate_proj(x)) * up_proj(x)).
local function mlp_forward(cx, m, x)
  local pre = m.opname
  local g = mod.call(cx, m.children.gate_proj, x)
  -- act_fn: SiLU, or GELU with the tanh approximation (Gemma's gelu_pytorch_tanh): one kernel
  -- either way, whose backward keeps its input
  local act = nn.ew(cx, pre .. "." .. (m.act or "silu"), { g }, g.dtype, { g })
  local u = mod.call(cx, m.children.up_proj, x)
  local mm = nn.mul(cx, pre .. ".mul", act, u, act.dtype)
  return mod.call(cx, m.children.down_proj, mm)
end

function L.MLP(cfg, pre)
  local m = mod.new("LlamaMLP", mlp_forward, { opname = pre .. ".mlp" })
  local p = pre .. ".mlp."
  m:add("gate_proj", L.Linear(p .. "gate_proj", cfg.hidden, cfg.intermediate, cfg.mlp_bias))
  m:add("up_proj", L.Linear(p .. "up_proj", cfg.hidden, cfg.intermediate, cfg.mlp_bias))
  m:add("down_proj", L.Linear(p .. "down_proj", cfg.intermediate, cfg.hidden, cfg.mlp_bias))
  return m
end

-- `residual + hidden_states` in a decoder layer: a new tensor named out_name in the promoted
-- dtype (under autocast an input of another dtype gets its gradient cast: nn.add_grads). frees:
-- the references the add drops (nil: its inputs').
function L.residual_add(cx, name, out_name, residual, h, frees)
  local dt = promote(residual.dtype, h.dtype)
  local g, moved = nn.add_grads(dt, residual, h)
  return nn.op(cx, { name = name, inputs = { residual, h }, outs = { { out_name, h.shape, dt } },
                     grads = g, bwd_bytes = moved, frees = frees })
end

-- A decoder layer returns: the model's `hidden_states` has kept the layer's input until now (the
-- first layer's is also `inputs_embeds`, alive until the model returns: fulltrace_dev-x2-zero1-trace,
-- no 64 MiB free after layer 0), and eager attention's weights, bound to `_`, die here too
-- (fulltrace_held-eager-ckpt-b2: a 512 MiB free after the MLP).
function L.layer_returns(cx, pre, residual, attn_weights)
  local dropped = {}
  if residual ~= cx.run.inputs_embeds then dropped[#dropped + 1] = residual end
  if attn_weights then dropped[#dropped + 1] = attn_weights end
  nn.release(cx, dropped, pre .. ": returns")
end

-- LlamaDecoderLayer.forward(hidden_states, attention_mask, position_embeddings).
local function decoder_layer_forward(cx, m, x, mask, cos, sin)
  local pre = m.opname
  local residual = x
  local C = m.children
  local hn = mod.call(cx, C.input_layernorm, x)
  -- `hidden_states, _ = self.self_attn(...)`
  local o, attn_weights = mod.call(cx, C.self_attn, hn, cos, sin, mask)
  nn.release(cx, { hn }, pre .. ": hidden_states reassigned")
  local h1 = L.residual_add(cx, pre .. ".residual_add1", pre .. ".h1", residual, o)
  local hn2 = mod.call(cx, C.post_attention_layernorm, h1)
  local d = mod.call(cx, C.mlp, hn2)
  nn.release(cx, { hn2 }, pre .. ": hidden_states reassigned")
  -- `hidden_states = residual + hidden_states`: the MLP output goes with the rebinding,
  -- the residual when the layer returns
  local out = L.residual_add(cx, pre .. ".residual_add2", pre .. ".out", h1, d, { d, h1 })
  L.layer_returns(cx, pre, residual, attn_weights)
  return out
end

function L.DecoderLayer(cfg, l)
  local pre = "layers." .. l
  local m = mod.new("LlamaDecoderLayer", decoder_layer_forward, { opname = pre, layer = l, dm_key = l })
  -- __init__ order: self_attn, mlp, input_layernorm, post_attention_layernorm
  m:add("self_attn", L.Attention(cfg, l, pre))
  -- a mixture-of-experts family (cfg.experts) has its sparse block where the MLP is, except in
  -- the layers it keeps dense (cfg.dense_layers)
  local sparse = cfg.experts and not (cfg.dense_layers and cfg.dense_layers[l])
  m:add("mlp", sparse and require("models.moe").SparseMoeBlock(cfg, pre, cfg.moe_classes) or L.MLP(cfg, pre))
  m:add("input_layernorm", L.RMSNorm(pre .. ".input_layernorm", cfg.hidden))
  m:add("post_attention_layernorm", L.RMSNorm(pre .. ".post_attention_layernorm", cfg.hidden))
  return m
end

-- sdpa_mask (transformers masking_utils.py) past the sliding window: the index tensors
-- (arange(b), arange(1), arange(s) + q_offset, arange(s) + kv_offset), then the mask function
-- and_masks(sliding_window_overlay, causal_mask_function) broadcast over (1, 1, s, s):
-- `result = q_idx.new_ones(())`, `result & (kv_idx > q_idx - sliding_window)`, then
-- `result & (kv_idx <= q_idx)`, each condition and each `&` a new s x s boolean, the condition
-- dropped after its `&` and the older result with the rebinding; `.expand(b, -1, s, s)` is a
-- view, so the mask is s x s whatever the batch (fulltrace_gen-mistral-l4-s8192-b1: four 64 MiB
-- allocations a step, three of them freed before the rotary tables).
local function sliding_window_mask(cx, b, s)
  local P = "sliding_window_mask"
  local function new(name, shape, dtype, inputs, frees)
    return nn.op(cx, { name = P .. "." .. name, inputs = inputs or {}, frees = frees,
                       outs = { { P .. "." .. name, shape, dtype, no_grad = true } } })
  end
  local batch_idx = new("batch_arange", { b }, "int64")
  local head_idx = new("head_arange", { 1 }, "int64")
  local q_ar = new("q_arange", { s }, "int64")
  local q_idx = new("q_idx", { s }, "int64", { q_ar }, { q_ar })
  local kv_ar = new("kv_arange", { s }, "int64")
  local kv_idx = new("kv_idx", { s }, "int64", { kv_ar }, { kv_ar })
  local ss = { 1, 1, s, s }
  local ones = new("new_ones", {}, "bool", { q_idx })
  local lower = new("q_minus_window", { s }, "int64", { q_idx })
  local in_window = new("in_window", ss, "bool", { kv_idx, lower }, { lower })
  local r1 = new("and_window", ss, "bool", { ones, in_window }, { in_window, ones })
  local causal = new("causal", ss, "bool", { kv_idx, q_idx })
  local mask = new("and_causal", ss, "bool", { r1, causal }, { causal, r1 })
  -- sdpa_mask returns: its index tensors go
  nn.release(cx, { batch_idx, head_idx, q_idx, kv_idx }, P .. ": sdpa_mask returns")
  if b == 1 then return mask end
  return nn.view(cx, mask, { b, 1, s, s }, P .. ".expand")
end

-- The masks create_causal_mask / create_sliding_window_causal_mask make for one forward.
-- eager: a boolean (s, s) mask, then the additive (b, 1, s, s) one in the model's dtype, the
-- boolean one dropped (fulltrace_held-eager-ckpt-b2: 4 MiB in, 16 MiB in, 4 MiB out, then the
-- rotary tables). SDPA: none (is_causal) unless a sliding window makes the causal shortcut
-- impossible; then a boolean (1, 1, s, s) mask expanded to (b, 1, s, s). masking_utils'
-- _ignore_causal_mask_sdpa keeps the shortcut only while `kv_length < local_attention_size`: at a
-- sequence as long as the window the mask is made, though it allows what causal does.
-- masking_utils' flex_attention_mask for a causal batch: create_block_mask (compiled, so no
-- dense mask is made) of 128 x 128 blocks gives a BlockMask of eight int32 tensors, the partial
-- and full blocks' counts (b, 1, n) and indices (b, 1, n, n) for the keys, and the same
-- transposed for the queries' backward (measure_flex_attention.py: 67,584 bytes at 8192 tokens,
-- eight blocks of the allocator's rounding). Alive until the model returns; each layer's
-- compiled flex_attention keeps them for its backward.
local function flex_block_mask(cx, b, s)
  return nn.block_mask(cx, b, s, {})
end

local function make_mask(cx, r, window, mask_dtype, position_ids)
  local b, s = r.batch, r.seq
  -- a 4-D mask the batch carries (training.attention_mask): taken as given, for every layer
  -- (masking_utils' _preprocess_mask_arguments returns a 4-D mask early), window or not
  if r.mask_4d then
    r.mask_4d_taken = true
    return r.mask_4d
  end
  if r.attention == "flex" then
    r.flex_mask_made = true
    -- (a torchtune packed batch's BlockMask came with the batch: causal_lm.lua)
    if r.block_mask then return r.block_mask end
    -- a padded or flattened batch: its padding or sequences in the BlockMask (strategies/data.lua)
    if r.data and (r.data.padded or r.data.packed) then
      r.data_mask_made = true
      return require("strategies.data").flex_mask(cx, r, r.data_inputs)
    end
    return flex_block_mask(cx, b, s)
  end
  if r.ckpt_model and r.attention ~= "eager" then
    -- torch.compile(model) under transformers' checkpointing (strategies/compile.lua
    -- M.ckpt_model): create_causal_mask is a compiled graph of its own, traced without a cache,
    -- where the packed-sequence check on position_ids is a tensor and the causal shortcut is not
    -- taken; Inductor fuses its aranges, comparisons and ANDs into the one (b, 1, s, s) boolean
    -- output, which the eager layers' SDPA takes (check_compile_model_ckpt.py: attn_mask
    -- (batch, 1, seq, seq) bool at every layer)
    return nn.op(cx, { name = "causal_mask.compiled", inputs = { position_ids },
                       outs = { { "causal_mask.compiled", { b, 1, s, s }, "bool", no_grad = true } },
                       grads = { "none" } })
  end
  if r.attention == "eager" and r.data and (r.data.padded or r.data.packed) then
    -- a padded or packed batch: its boolean mask as SDPA's, then eager_mask's additive one
    -- (strategies/data.lua); a packed row under a KV cache gets the causal mask alone
    r.data_mask_made = true
    local m = require("strategies.data").mask(cx, r, r.data_inputs)
    if m then return m end
  end
  if r.attention == "eager" then
    local allowed = nn.op(cx, { name = "causal_mask.bool", inputs = {},
                                outs = { { "causal_mask.bool", { 1, 1, s, s }, "bool" } } })
    return nn.op(cx, { name = "causal_mask", inputs = { allowed },
                       outs = { { "causal_mask", { b, 1, s, s }, mask_dtype } } })
  end
  if window and window <= s then return sliding_window_mask(cx, b, s) end
  -- a padded or packed batch of variable-length data (strategies/data.lua)
  if r.data then
    r.data_mask_made = true
    return require("strategies.data").mask(cx, r, r.data_inputs)
  end
  return nil
end

-- LlamaRotaryEmbedding.forward: cos/sin computed in fp32 then cast to the hidden dtype.
-- position_ids (the model's, a (1, s) int64) and buf_dtype (the inv_freq buffer's: the
-- parameters' once model.to() has cast them) where the caller models them. How freqs is made
-- depends on the release (training.transformers, strategies/tf_version.lua rotary_matmul),
-- the same in every family's modeling file:
--   before 5.19  `inv_freq[None, :, None].expand(...).to(float)` (a copy of a buffer that is
--                not fp32) and `position_ids[:, None, :].float()` (a (1, 1, s) fp32 copy), both
--                locals alive until the function returns, then `inv_freq_expanded @
--                position_ids_expanded`: a matmul, the step's first cuBLAS call, which makes the
--                stream's cuBLAS workspace;
--   5.19 on      `position_ids[..., None].float() * inv_freq.to(float)`: the (1, s, 1) fp32
--                copy, then the buffer's, both temporaries of the expression, freed by the
--                product; no cuBLAS call, so the workspace is made by the first layer's GEMM
--                (the allocator trace of gen4-tm-l3-8b-l4-b2-s4096-liger, transformers 5.25:
--                its 32 MiB after q_proj's output).
local function rotary_tables(cx, s, hd, dtype, prefix, position_ids, buf_dtype)
  local P = prefix or "rotary"
  -- (generate passes a (B, s) position_ids: the tables are then per row, (B, s, hd))
  local pb = position_ids and position_ids.shape[1] or 1
  local rshape = { pb, s, hd }
  local temps = {}
  -- (cx.tf is nil only for litgpt's own program, strategies/litgpt.lua, which reads no
  -- transformers release: its tables keep the form tests/test_litgpt.sh was written against)
  local matmul = cx.tf == nil or cx.tf.rotary_matmul
  local function inv_freq_float(shape)
    if buf_dtype ~= "fp32" then
      temps[#temps + 1] = nn.op(cx, { name = P .. ".inv_freq_float", kind = "copy", inputs = {},
                                      outs = { { P .. ".inv_freq_float", shape, "fp32", no_grad = true } } })
    end
  end
  local function position_ids_float(shape)
    temps[#temps + 1] = nn.op(cx, { name = P .. ".position_ids_float", kind = "copy", inputs = { position_ids },
                                    frees = {}, outs = { { P .. ".position_ids_float", shape, "fp32", no_grad = true } } })
  end
  if position_ids and matmul then
    inv_freq_float({ 1, hd // 2, 1 })
    position_ids_float({ pb, 1, s })
  elseif position_ids then
    position_ids_float({ pb, s, 1 })
    inv_freq_float({ hd // 2 })
  end
  local freqs = nn.op(cx, { name = P .. ".freqs", kind = matmul and "mm" or nil, inputs = temps,
                            frees = matmul and {} or temps,
                            outs = { { P .. ".freqs", { pb, s, hd // 2 }, "fp32" } } })
  if not matmul then temps = {} end
  local emb = nn.op(cx, { name = P .. ".cat", inputs = { freqs },
                          outs = { { P .. ".emb", rshape, "fp32" } } })
  -- cos = emb.cos() * attention_scaling (a second tensor; the first dies at once)
  local cos32 = nn.ew(cx, P .. ".cos_scaled", { nn.ew(cx, P .. ".cos", { emb }, "fp32") }, "fp32")
  local sin32 = nn.ew(cx, P .. ".sin_scaled", { nn.ew(cx, P .. ".sin", { emb }, "fp32") }, "fp32")
  -- (Olmo2RotaryEmbedding.forward returns cos and sin as computed, in fp32: dtype fp32)
  local cos = nn.to(cx, cos32, dtype, P .. ".cos_cast")
  local sin = nn.to(cx, sin32, dtype, P .. ".sin_cast")
  nn.release(cx, temps, P .. ": LlamaRotaryEmbedding.forward returns")
  return cos, sin
end

-- LlamaModel.forward(input_ids): embeddings, masks, rotary tables, the layers, the final norm.
local function model_forward(cx, m, ids)
  local r = cx.run
  local C = m.children
  -- (a pipeline stage, cx.run.stage, runs its own layers on what the previous stage sent:
  -- vrsim/pipeline.lua)
  local stage = r.stage
  local x
  if C.embed_tokens then x = mod.call(cx, C.embed_tokens, ids) else x = stage.input end
  r.inputs_embeds = x
  local dt = x and x.dtype or r.hidden_dtype
  -- position_ids = torch.arange(seq) + past_seen_tokens, unsqueezed: int64, alive until the
  -- model returns (LlamaModel.forward)
  -- (a flattened batch's come from its collator, an input: strategies/data.lua; generate's
  -- (B, s) from its position_ids in model_kwargs: strategies/generate.lua)
  local given = r.position_ids or (r.data_inputs and r.data_inputs.position_ids)
  -- torchtune's TransformerDecoder (model.code = "torchtune"): no position ids, mask or rotary
  -- tables of its own; each attention rotates from the RoPE cache (a packed batch's input_pos
  -- indexing it)
  local position_ids = given
  r.position_ids_taken = r.position_ids ~= nil
  if not position_ids and not r.rope_cache then
    local ar = nn.op(cx, { name = "position_ids.arange", inputs = {},
                           outs = { { "position_ids.arange", { r.seq }, "int64", no_grad = true } } })
    position_ids = nn.op(cx, { name = "position_ids", inputs = { ar },
                               outs = { { "position_ids", { 1, r.seq }, "int64", no_grad = true } } })
  end
  -- create_causal_mask builds the eager mask in inputs_embeds' dtype (masking_utils.py:
  -- `dtype=inputs_embeds.dtype`): the parameters' dtype, fp32 under autocast too (the embedding
  -- is not autocast)
  -- (torchtune's decoders have no sliding window: Mistral's and Qwen2's attend causally)
  local mask = make_mask(cx, r, not r.rope_cache and m.cfg.sliding_window or nil, r.param_dtype, position_ids)
  local cos, sin
  if not r.rope_cache then
    cos, sin = rotary_tables(cx, r.seq, m.cfg.head_dim, m.cfg.rotary_fp32 and "fp32" or dt, nil,
                             position_ids, r.param_dtype)
  end
  -- the decoder layers: alike, so built once in Lua and replayed where the check allows
  -- (lua/vrsim/replicate.lua)
  local layers = {}
  for l = 0, m.cfg.layers - 1 do layers[l + 1] = C.layers.children[tostring(l)] end
  local run = require("vrsim.replicate").stack(cx, layers, function(l, h)
    return mod.call(cx, layers[l + 1], h, mask, cos, sin)
  end)
  for l = 0, m.cfg.layers - 1 do
    if not stage or (l >= stage.first and l <= stage.last) then x = run(l, x) end
  end
  -- causal_mask_mapping keeps a sliding-window mask (or the compiled graph's) until the model returns
  if mask and r.attention ~= "eager" then nn.release(cx, { mask }, "sliding_window_mask: LlamaModel.forward returns") end
  if stage and not stage.head then
    nn.release(cx, { position_ids }, "position_ids: the stage's forward returns")
    if r.inputs_embeds ~= x then nn.release(cx, { r.inputs_embeds }, "the stage's forward returns: inputs_embeds") end
    return x
  end
  local hf = mod.call(cx, C.norm, x)
  if position_ids ~= given then
    nn.release(cx, { position_ids }, "position_ids: LlamaModel.forward returns")
  end
  if hf ~= x then
    nn.release(cx, { x }, "model.norm: hidden_states reassigned")
    if r.inputs_embeds and r.inputs_embeds ~= x then
      nn.release(cx, { r.inputs_embeds }, "LlamaModel.forward returns: inputs_embeds")
    end
  end
  return hf
end

-- torchtitan's loss_fn under torch.compile (compile.components "loss": training.compile_loss):
-- cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)) is one graph of its own. The
-- labels come from the dataloader already shifted (b, s): no pad or shift. The flattens are views,
-- and the graph is the op library's nn.cross_entropy_compiled: it saves the logits as they came
-- and two fp32 values a row, and Inductor fuses the upcast into its reductions (no fp32 copy of
-- the logits, no fp32 log-probabilities). Checked on the CPU (torch 2.13, saved_tensors_hooks
-- around the compiled call, bf16 (2, 64, 1000) logits): saved are the bf16 logits, the (2, 64)
-- labels and two (128, 1) fp32 tensors; the mean reduction of torchtitan's older loss_fn also
-- saves one fp32 scalar (the count), not modelled (one 512-byte block).
local function compiled_lm_loss(cx, logits, b, s)
  local labels = nn.op(cx, { name = "labels", inputs = {}, outs = { { "labels", { b, s }, "int64" } } })
  return nn.cross_entropy_compiled(cx, "", logits, labels)
end

-- The logits CausalLMOutputWithPast returns, held until the caller drops the output object.
-- Before transformers 4.46 (training.transformers, strategies/tf_version.lua) the model's forward
-- upcasts them itself (`logits = logits.float()`): the head's logits are dropped at once and the
-- output holds the fp32 copy. Returns the logits the loss is given.
local function output_logits(cx, logits)
  if cx.tf and cx.tf.model_upcast and not cx.run.inference then
    logits = nn.to(cx, logits, "fp32", "logits.float")
  end
  nn.hold(cx, logits)
  return logits
end

-- The older releases' shift (before transformers 4.49): `shift_logits = logits[..., :-1,
-- :].contiguous()` on the fp32 logits lf, `shift_labels = labels[..., 1:].contiguous()`, then
-- the cross-entropy on them. The slice is a view whose backward (SliceBackward0) writes its
-- gradient into zeros of lf's whole shape (nn.view_op); .contiguous() copies it into a second
-- fp32 tensor one position shorter, its gradient passed through. The labels are the input ids
-- (labels = input_ids); at micro_batch 1 their slice is contiguous already and .contiguous()
-- returns it. keep_lf: lf is the loss's local (ForCausalLMLoss), dropped when it returns; else
-- the output object holds it.
local function shifted_lm_loss(cx, lf, ids, b, s, keep_lf)
  local v = lf.shape[#lf.shape]
  local sl = nn.view_op(cx, "logits[..., :-1, :]", lf, { b, s - 1, v }, nil, "copy")
  local shift = nn.op(cx, { name = "shift_logits.contiguous", kind = "copy", inputs = { sl },
                            outs = { { "shift_logits", { b, s - 1, v }, "fp32" } }, grads = { { pass = 1 } } })
  if not ids or ids.dtype ~= "int64" or #ids.shape ~= 2 then
    -- a pipeline stage that receives hidden states: its labels arrive on their own
    ids = nn.op(cx, { name = "labels", inputs = {}, outs = { { "labels", { b, s }, "int64" } } })
  end
  local tail = nn.view(cx, ids, { b, s - 1 }, "labels[..., 1:]")
  local labels = tail
  if b > 1 then
    labels = nn.op(cx, { name = "labels.shift", inputs = { tail },
                         outs = { { "shift_labels", { b, s - 1 }, "int64" } } })
  end
  -- shift_logits (and ForCausalLMLoss's `logits`) are the function's locals until it returns
  local loss = nn.cross_entropy(cx, "", shift, labels, { keep_input = true })
  nn.release(cx, keep_lf and { shift, lf } or { shift }, "the loss returns: shift_logits, logits")
  return loss
end

-- ForCausalLMLoss: logits.float(); labels padded and shifted; F.cross_entropy (the op library's
-- nn.cross_entropy: log_softmax, which saves its fp32 output, then nll_loss). compiled:
-- training.compile_loss, torchtitan's compiled loss instead (compiled_lm_loss). Releases before
-- transformers 4.49 shift the logits instead (shifted_lm_loss); before 4.46 the logits come
-- upcast already (output_logits). ids: the input ids, which are the labels.
local function causal_lm_loss(cx, logits, b, s, compiled, ids)
  if compiled then return compiled_lm_loss(cx, logits, b, s) end
  if cx.run.compile_model then
    -- torch.compile(model) (training.compile.scope = "model"): ForCausalLMLoss is traced into
    -- the model's graph, and the partitioner saves of it what it saves of the loss compiled alone
    -- (validation/oracle/check_compile_model.py): lm_head's logits as they came (the fp32 upcast
    -- fused into the reductions), two fp32 values a row (the row max and log-sum-exp), and the
    -- labels padded by one position (F.pad(labels, (0, 1), value=-100), then labels[..., 1:]:
    -- the pad's storage is saved), plus one fp32 scalar, the reduction's count (4 bytes, not
    -- modelled, as the compiled loss's is not)
    local padded = nn.op(cx, { name = "labels.pad", inputs = {}, outs = { { "labels_padded", { b, s + 1 }, "int64" } } })
    -- labels[..., 1:].contiguous() inside the graph makes no tensor the step keeps: at batch 1 the
    -- partitioner saves the pad's storage; at batch 2 (dynamo on the CPU, a tiny Llama) it saves
    -- instead the (b * s, 1) int64 labels with the ignored positions replaced, 8 bytes a row less
    local shifted = nn.view(cx, padded, { b, s }, "shift_labels")
    -- what the note of the model graph lists (strategies/compile.lua M.model_head_hooks): the
    -- tensors the compiled loss saves, as it makes them
    local rows = b * s
    cx.run.compiled_loss_saved = { logits, padded, { name = "loss.amax", shape = { rows, 1 }, dtype = "fp32" },
                                   { name = "loss.logsumexp", shape = { rows, 1 }, dtype = "fp32" } }
    return nn.cross_entropy_compiled(cx, "", logits, shifted)
  end
  local tf = cx.tf
  if tf and tf.shift_copy then
    -- before 4.46 (Mistral: 4.48) the model's own loss: `logits` is the output's fp32 copy, held
    -- by it (output_logits); from then to 4.48 ForCausalLMLoss, whose `logits = logits.float()`
    -- is its local until it returns
    if tf.model_upcast then return shifted_lm_loss(cx, logits, ids, b, s, false) end
    return shifted_lm_loss(cx, nn.to(cx, logits, "fp32", "logits.float"), ids, b, s, true)
  end
  local lf = nn.to(cx, logits, "fp32", "logits.float")
  local labels = nn.op(cx, { name = "labels.pad", inputs = {}, outs = { { "labels_padded", { b, s + 1 }, "int64" } } })
  -- labels[..., 1:].contiguous() (loss_utils.py ForCausalLMLoss): at micro_batch 1 the slice is
  -- already contiguous (a size-1 dimension's stride does not count) and .contiguous() returns it
  local shifted
  if b == 1 then
    shifted = nn.view(cx, labels, { b, s }, "shift_labels")
  else
    shifted = nn.op(cx, { name = "labels.shift", inputs = { labels }, outs = { { "shift_labels", { b, s }, "int64" } } })
  end
  -- under torchtitan's tensor parallelism the logits are vocabulary-sharded DTensors and the loss
  -- runs inside loss_parallel() (strategies/tp.lua)
  return nn.cross_entropy(cx, "", lf, shifted, { loss_parallel = cx.loss_parallel })
end

-- LlamaForCausalLM.forward(input_ids, labels=input_ids): the model, the head, the loss (none
-- for inference). Returns the loss (or the logits, or nil where this GPU does not end the
-- forward under device_map).
local function causal_lm_forward(cx, m, ids)
  local r = cx.run
  local hf = mod.call(cx, m.children.model, ids)
  if not hf then return nil end
  if r.stage and not r.stage.head then return hf end -- a pipeline stage's output, sent on
  if r.dpo then
    -- DPOTrainer's model(..., fused_lm_head=True): TRL's fused head on the completion positions
    -- (strategies/dpo.lua); the reference (no_grad) asks for the log-probs alone
    local out = require("strategies.dpo").head(cx, hf, mod.weight(cx, m.children.lm_head.p.weight), r.dpo,
      cx.no_grad and { "log_probs" } or { "log_probs", "entropy", "mean_logits", "is_top1" },
      m.path == "" and "" or (m.path .. "."))
    nn.release(cx, { hf }, "fused forward returns: hidden_states")
    r.dpo_head = true
    return out
  end
  if not r.inference and r.loss ~= "full" then
    -- the cross-entropy variants that never make the whole batch's logits (vrsim/lm_loss.lua):
    -- Liger's and Cut Cross-Entropy read the head's weight themselves, torchtune's runs the head
    -- on chunks
    local LL = require "vrsim.lm_loss"
    local head = m.children.lm_head
    if r.loss == "liger_fused" then
      local loss = LL.liger_fused(cx, hf, mod.weight(cx, head.p.weight), r.batch, r.seq)
      nn.release(cx, { hf }, "LlamaForCausalLM.forward returns: hidden_states")
      return loss
    elseif r.loss == "cce" then
      -- cce_patch's forward: linear_cross_entropy(hidden_states, self.lm_head.weight, labels)
      local loss = LL.cce(cx, hf, mod.weight(cx, head.p.weight), ids, r.batch, r.seq)
      nn.release(cx, { hf }, "LlamaForCausalLM.forward returns: hidden_states")
      return loss
    end
    if r.loss == "litgpt_chunked" then
      -- litgpt's fit(): the head on 128-token chunks, an fp32 cross-entropy per chunk on
      -- convert_output's copies
      return LL.litgpt_chunked(cx, head, hf, r.batch, r.seq)
    end
    -- (compiled with the layers unless training.compile.loss = false)
    return LL.chunked(cx, head, hf, r.batch, r.seq, r.compile_chunked_loss) -- releases hf once the head has run
  end
  local hl = hf
  if r.logits_to_keep then
    -- logits_to_keep (generate passes 1): the head on hidden_states[:, -1:, :], a view
    hl = nn.view(cx, hf, { hf.shape[1], 1, hf.shape[3] }, "hidden_states[:, -1:, :]")
  end
  local logits = mod.call(cx, m.children.lm_head, hl)
  if not logits or logits == hl then return nil end
  logits = output_logits(cx, logits)
  if r.inference then return logits end
  -- (the last pipeline stage's output is the logits, which PipelineStage may keep: vrsim/pipeline.lua)
  if r.stage then r.stage.logits = logits end
  local loss = causal_lm_loss(cx, logits, r.batch, r.seq, r.compile_loss, ids)
  -- `hidden_states = outputs.last_hidden_state` is forward's local until it returns
  -- (fulltrace_gen-llama32-1b-lora-all-r16-b4-ckpt-trace: with a frozen head nothing saves it,
  -- and it is freed after the loss)
  nn.release(cx, { hf }, "LlamaForCausalLM.forward returns: hidden_states")
  return loss
end

-- The whole tree from a normalized config (hf.lua): hidden, intermediate, heads, kv_heads,
-- head_dim, layers, vocab, tie, qkv_bias, o_bias, mlp_bias, sliding_window. `classes` names the
-- family's classes for reports (Mistral*, Qwen2*).
function L.CausalLM(cfg, classes)
  classes = classes or {}
  local root = mod.new(classes.lm or "LlamaForCausalLM", causal_lm_forward, { cfg = cfg, layer = -1 })
  -- (pipeline_stages: model_forward runs a pipeline stage's part, cx.run.stage)
  local model = root:add("model", mod.new(classes.model or "LlamaModel", model_forward,
                                          { cfg = cfg, pipeline_stages = true }))
  local embed = model:add("embed_tokens", L.Embedding(cfg.vocab, cfg.hidden))
  embed.dm_key = "embed"
  local layers = model:add("layers", mod.new("ModuleList", nil))
  for l = 0, cfg.layers - 1 do
    local dl = layers:add(l, L.DecoderLayer(cfg, l))
    if classes.layer then dl.cls = classes.layer end
  end
  local norm = model:add("norm", L.RMSNorm("model.norm", cfg.hidden))
  norm.dm_key = "norm"
  local head = root:add("lm_head", mod.new("Linear", L.linear_forward,
                                           { opname = "lm_head", in_features = cfg.hidden,
                                             out_features = cfg.vocab, dm_key = "lm_head" }))
  if cfg.tie then
    -- __init__ still makes lm_head's own weight; post_init's tie_weights then points it at
    -- embed_tokens.weight and the constructed one is freed (fulltrace_gen-stk-llama32-1b-lora-
    -- all-r16-b4-ckpt: a 1002 MiB segment from lm_head's nn.Linear.__init__ at build)
    head.tied = { weight = { module = embed, key = "weight" } }
    head.untied_at_init = { weight = { cfg.vocab, cfg.hidden } }
  else
    head:declare("weight", { cfg.vocab, cfg.hidden })
  end
  mod.finalize(root)
  -- the classes accelerate and FSDP never split (_no_split_modules) and the checkpointed ones
  -- (GradientCheckpointingLayer)
  root.no_split = { [classes.layer or "LlamaDecoderLayer"] = true }
  root.checkpoint_layer = classes.layer or "LlamaDecoderLayer"
  return root
end

-- The family as hf.lua finds it.
L.architectures = { "LlamaForCausalLM" }
L.model_type = "llama"

-- LlamaConfig's fields and defaults (configuration_llama.py, transformers 5.17) to the tree's
-- config. `defaults` overrides LlamaConfig's defaults (a family of the same tree).
function L.config(hf, where, defaults)
  local H = require "models.hf"
  defaults = defaults or {}
  local function d(k, v) if defaults[k] ~= nil then return defaults[k] end return v end
  local unknown = H.check_keys(hf, where, defaults.extra_keys)
  local c = {
    hidden = H.int(hf, "hidden_size", d("hidden_size", 4096), where),
    intermediate = H.int(hf, "intermediate_size", d("intermediate_size", 11008), where),
    layers = H.int(hf, "num_hidden_layers", d("num_hidden_layers", 32), where),
    heads = H.int(hf, "num_attention_heads", d("num_attention_heads", 32), where),
    vocab = H.int(hf, "vocab_size", d("vocab_size", 32000), where),
    tie = H.bool(hf, "tie_word_embeddings", d("tie_word_embeddings", false), where),
    unknown_keys = unknown,
  }
  -- num_key_value_heads None means multi-head attention; head_dim None means hidden // heads
  c.kv_heads = hf.num_key_value_heads ~= nil and H.int(hf, "num_key_value_heads", nil, where)
               or d("num_key_value_heads", c.heads)
  -- (a family whose config class has a head_dim default of its own, Qwen3's 128, gives it)
  c.head_dim = hf.head_dim ~= nil and H.int(hf, "head_dim", nil, where) or d("head_dim", c.hidden // c.heads)
  if c.heads % c.kv_heads ~= 0 then
    error(("%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)")
          :format(where, c.heads, c.kv_heads), 0)
  end
  if hf.head_dim == nil and defaults.head_dim == nil and c.hidden % c.heads ~= 0 then
    error(("%s: hidden_size (%d) must be a multiple of num_attention_heads (%d), or give head_dim")
          :format(where, c.hidden, c.heads), 0)
  end
  if c.head_dim % 2 ~= 0 then error(("%s: head_dim must be even (rotary halves)"):format(where), 0) end
  -- attention_bias puts a bias on q, k, v and o (LlamaAttention); mlp_bias on the MLP's three
  local ab = H.bool(hf, "attention_bias", d("attention_bias", false), where)
  c.qkv_bias, c.o_bias = d("qkv_bias", ab), ab
  c.mlp_bias = H.bool(hf, "mlp_bias", false, where)
  return c
end

-- The pieces a family that changes the model's or the head's forward calls (gemma2.lua).
L.embedding_forward = embedding_forward
L.rotary_tables = rotary_tables
L.rotary = rotary
L.causal_lm_loss = causal_lm_loss
L.output_logits = output_logits

L.classes = {}
L.tree = function(cfg) return L.CausalLM(cfg) end

return L
