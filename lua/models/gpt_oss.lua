-- gpt_oss.lua: transformers' GptOssForCausalLM (5.25, models/gpt_oss/modeling_gpt_oss.py and
-- modular_gpt_oss.py; the experts by integrations/moe.py grouped_mm_experts_forward). Llama's
-- tree (llama.lua) with:
--   - GptOssAttention: q, k, v and o projections with biases (attention_bias), per-head attention
--     sinks (a (heads,) parameter), the rotary embedding applied by halves
--     (`first * cos - second * sin`, `second * cos + first * sin`, then a cat), and layers of two
--     kinds (config.layer_types: sliding_attention, a 128-token window, and full_attention,
--     alternating by default), each with its mask;
--   - attention: GptOssPreTrainedModel sets `_supports_sdpa = False`, so from_pretrained's default
--     is eager_attention_forward: repeat_kv copies, q @ k^T * scaling + mask, the sinks expanded
--     to (b, heads, s, 1) and concatenated as one more key column, minus the row max, softmax in
--     the scores' dtype, the sink column sliced off (a view), @ v. Its flash kernels
--     (vllm-flash-attn3 with sinks) and flex attention are not modelled;
--   - GptOssRMSNorm: (weight * x_normed_fp32).to(input_dtype), OLMo-2's order (blocks/rmsnorm.lua);
--   - GptOssMLP: a router with a bias (F.linear(x, weight, bias), top-k of the logits, softmax over
--     the k in the logits' dtype: no fp32 copy, no renormalisation) and GptOssExperts, declared
--     @use_experts_implementation(is_transposed=True, has_bias=True): 3-D weights laid out
--     (experts, in, out), gate_up_proj's gate and up interleaved (columns ::2 and 1::2), a bias
--     per expert gathered per token-expert pair and added in place after each grouped GEMM, and
--     the clamped SwiGLU: gate.clamp(max=limit), up.clamp(-limit, limit),
--     (up + 1) * gate * sigmoid(gate * alpha).
-- Token routing: every tensor's size depends on tokens x top-k alone (models/moe.lua); the grouped
-- GEMMs' time is taken as balanced over the experts.
--
-- MXFP4: the released checkpoints store the experts' weights in MXFP4 (quantization_config
-- quant_method "mxfp4"). Mxfp4HfQuantizer keeps them packed (Mxfp4GptOssExperts, Triton kernels)
-- only for a model that is not trained: its is_trainable is False and the Trainer refuses it.
-- Training loads them dequantized to bf16 (`Mxfp4Config(dequantize=True)`, as OpenAI's
-- fine-tuning recipe passes), which is what vrsim models, with a note; a config that asks to keep
-- them (`"dequantize": false`) is refused by name.
--
-- Not modelled (an error naming it): fp16 (_keep_in_fp32_modules then keeps the norms in fp32)
-- and autocast (amp_*), the load-balancing loss, the eager per-expert loop. LoRA on the experts'
-- 3-D parameters (peft's target_parameters) is strategies/lora.lua's fold, on the (experts, in,
-- out) layout.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local llama = require "models.llama"
local moe = require "models.moe"
local rmsnorm = require "models.blocks.rmsnorm"
local rotary_halves = require "models.blocks.rotary_halves"

local F = {}
F.architectures = { "GptOssForCausalLM" }
F.model_type = "gpt_oss"
F.classes = { lm = "GptOssForCausalLM", model = "GptOssModel", layer = "GptOssDecoderLayer",
              attn = "GptOssAttention", norm = "GptOssRMSNorm", mlp = "GptOssMLP",
              router = "GptOssTopKRouter", experts = "GptOssExperts" }
-- peft's table of default target modules has no gpt_oss entry
F.peft_targets = false
F.lora_example = '"q_proj", "k_proj", "v_proj", "o_proj"'

local W = mod.weight

-- ---- attention --------------------------------------------------------------------------------

-- _apply_rotary_emb(x, cos, sin): `first_half, second_half = torch.chunk(x, 2, dim=-1)` (views;
-- SplitBackward0 joins their gradients into one buffer of x's size), then
-- `first_ = first_half * cos - second_half * sin` and `second_ = second_half * cos + first_half *
-- sin`, each product a new half-size tensor dropped once summed, and `torch.cat((first_,
-- second_), dim=-1)`: a contiguous (b, heads, s, head_dim) tensor. cos and sin are the bf16 tables
-- (1, 1, s, head_dim / 2), saved by each product.
local function rotary(cx, name, x, cos, sin)
  local half = nn.copy_shape(x.shape)
  half[#half] = half[#half] // 2
  local x1 = nn.view(cx, x, half, name .. ".first_half")
  local x2 = nn.view(cx, x, half, name .. ".second_half")
  nn.op(cx, { name = name .. ".chunk", kind = "none", inputs = { x }, out_tensors = { x1, x2 },
              grads = { { dtype = x.dtype } }, bwd_kind = "cat_strided", bytes = 0, frees = {} })
  return rotary_halves.rotate(cx, name, x, x1, x2, cos, sin, { "first", "second" })
end

-- eager_attention_forward with the sinks (modeling_gpt_oss.py). q (b, heads, s, d) contiguous (the
-- rotary cat's), k and v already repeated to every head (contiguous copies): torch.matmul folds
-- (b, heads) into bmm's batch as views, so nothing is copied for the batch. Returns the output
-- (b, heads, s, d) and the attention weights (a view of the probabilities without the sink column).
local function sink_attention(cx, m, q, k, v, mask)
  local a, name = m.attn, m.opname
  local b, heads, s, hd = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local dt = q.dtype
  local ss, s1, col = { b, heads, s, s }, { b, heads, s, s + 1 }, { b, heads, s, 1 }
  local scores = nn.op(cx, { name = name .. ".qk", kind = "mm", inputs = { q, k },
                             outs = { { name .. ".scores", ss, dt } }, saves = { q, k }, grad_order = { 2, 1 },
                             flops = 2 * b * heads * s * s * hd, dtype = dt })
  -- its gradient arrives as the cat's narrowed view of the logits' gradient (row stride s + 1), so
  -- backward's multiply runs TensorIterator's strided kernel, not the vectorized one
  -- (validation/results/sinks_attention_h100.json: the forward's 1.41 ms, the backward's 2.67 ms
  -- at 1 x 64 x 4096 x 4096)
  local scaled = nn.op(cx, { name = name .. ".scale", inputs = { scores }, outs = { { name .. ".scale", ss, dt } },
                             flops = nn.numel(ss), bwd_bytes = 2 * nn.bytes(ss, dt), bwd_kind = "strided" })
  -- `attn_weights = attn_weights + attention_mask`: bound to attn_weights until the softmax's
  -- output replaces it; the mask is causal_mask_mapping's, alive until the model returns. The
  -- (b, 1, s, s) mask broadcast over the heads is a stride-0 operand, so the add takes
  -- TensorIterator's broadcast path (sinks_attention_h100.json: 3.08 ms for 4.3 GB, the broadcast
  -- class's rate, not the contiguous add's)
  local masked = nn.op(cx, { name = name .. ".add_mask", kind = "broadcast", inputs = { scaled, mask },
                             outs = { { name .. ".masked", ss, dt } }, grads = { { pass = 1 }, "none" },
                             frees = { scaled } })
  -- `sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1)`: a view of the parameter; the cat's
  -- backward hands it a narrowed view, which ExpandBackward sums back to (heads,). CatBackward0
  -- itself only narrows (views), so the backward's one kernel is that sum over the strided
  -- column (class cat_sinks_bwd, measured: 73 us at 1 x 64 x 4096), never a pass over the scores
  local sinks = W(cx, m.p.sinks)
  -- cat_out_cuda runs its one batched kernel only where the output is 32-bit indexable; over
  -- 2^31 - 1 elements it copies each input into its narrowed slice of the output instead, at
  -- about twice the bytes a second (lua/hw/calibrated/*_sinks_attention.lua, classes cat_sinks
  -- and cat_sinks_copy: 6.22 ms at 1 x 64 x 4096 x 4097 on an H100, 5.35 ms at twice that).
  -- Under torch.compile Inductor writes the cat, and the generic class prices it
  local cat_kind = cx.compiling and "cat_strided" or nn.numel(s1) > 2^31 - 1 and "cat_sinks_copy" or "cat_sinks"
  local combined = nn.op(cx, { name = name .. ".cat_sinks", kind = cat_kind, inputs = { masked, sinks },
                               outs = { { name .. ".combined_logits", s1, dt } },
                               grads = { { pass = 1 }, { bytes = nn.bytes(sinks.shape, sinks.dtype), dtype = sinks.dtype } },
                               bwd_kind = not cx.compiling and "cat_sinks_bwd" or nil,
                               bwd_bytes = not cx.compiling and nn.bytes(col, dt) + nn.bytes(sinks.shape, sinks.dtype) or nil,
                               frees = {} })
  -- `combined_logits.max(dim=-1, keepdim=True).values`: MaxBackward0 keeps the indices and
  -- scatters the values' gradient into zeros of the logits' shape
  -- (over 2^31 elements the reduction is split into 32-bit-indexable parts, which accumulate
  -- their (value, index) pairs in a buffer beside the outputs: nn.split_reduce_buffer)
  local mx = nn.op(cx, { name = name .. ".row_max", kind = "reduce_rows", inputs = { combined },
                         outs = { { name .. ".row_max", col, dt }, { name .. ".row_max_indices", col, "int64", no_grad = true } },
                         save_outs = { 2 }, frees = {},
                         workspace = nn.split_reduce_buffer(s1, col, 16, true) })
  -- `combined_logits = combined_logits - max`: the max's values go as the expression ends, then
  -- the cat's output with the rebinding; the max's gradient is the incoming one negated (a
  -- full-size temporary), then summed to (b, heads, s, 1) in bf16, which over 2^31 elements
  -- accumulates in an fp32 buffer (the (b, heads, s, 1) max broadcast along the rows: the
  -- broadcast_rows class)
  local sum_buf = nn.split_reduce_buffer(s1, col, 4, dt ~= "fp32") or {}
  local shifted = nn.op(cx, { name = name .. ".sub_max", kind = "broadcast_rows", inputs = { combined, mx },
                              outs = { { name .. ".shifted_logits", s1, dt } }, grads = { { pass = 1 }, "new" },
                              bwd_workspace = { nn.bytes(s1, dt), sum_buf[1] }, bwd_workspace_first = true,
                              frees = { mx, combined } })
  -- under torch.compile, Inductor's decomposition of the softmax reduces each row twice in fp32
  -- (its max, then the sum of the exponentials): two (b, heads, s, 1) reductions the partitioner
  -- saves (ban_if_reduction), from which backward recomputes the probabilities out of the
  -- combined logits and their max, saved in their place (validation/oracle/captures/
  -- compile_moe_l1.json, gpt_oss_bf16: cat_2, getitem_4, amax, sum_1)
  local sm_in = { shifted }
  if cx.compiling then
    for _, stat in ipairs({ "amax", "sum_exp" }) do
      sm_in[#sm_in + 1] = nn.op(cx, { name = name .. ".softmax." .. stat, kind = "reduce_rows",
                                      inputs = { shifted }, grads = { "none" },
                                      outs = { { name .. ".softmax." .. stat, col, "fp32", no_grad = true } } })
    end
  end
  -- F.softmax(..., dtype=combined_logits.dtype): in the scores' dtype, its output kept; its CUDA
  -- backward first makes `grad * output` (SoftMax.cu softmax_backward_cuda_out), then reads that
  -- and the output and writes the gradient: six passes over the rows. In eager mode both run at
  -- their own measured rates over rows s + 1 wide (classes softmax_sinks, 1.02 TB/s at 4096
  -- tokens on both cards against the log-softmax class's 1.64, and softmax_sinks_bwd)
  local eager = not cx.compiling
  local probs = nn.op(cx, { name = name .. ".softmax", kind = eager and "softmax_sinks" or "softmax", inputs = sm_in,
                            outs = { { name .. ".probs", s1, dt } }, save_outs = { 1 },
                            grads = { "new", "none", "none" },
                            bwd_kind = eager and "softmax_sinks_bwd" or nil,
                            bwd_bytes = eager and 6 * nn.bytes(s1, dt) or nil,
                            bwd_workspace = { nn.bytes(s1, dt) }, flops = 5 * nn.numel(s1), frees = {} })
  nn.release(cx, { masked }, name .. ": attn_weights reassigned")
  -- `probs[..., :-1]`: a view; SliceBackward0 writes its gradient into zeros of probs' shape.
  -- Dropout at p = 0 and `.to(value_states.dtype)` return it as it is. Under torch.compile the
  -- dropout is aten.dropout's decomposition, `input.clone()` at p = 0: a contiguous copy that the
  -- second GEMM reads and backward keeps (the capture's clone_2)
  local weights = nn.view_op(cx, name .. ".drop_sink", probs, ss, nil, "strided")
  if cx.compiling then
    weights = nn.op(cx, { name = name .. ".dropout", kind = "copy", inputs = { weights },
                          outs = { { name .. ".attn_weights", ss, dt } }, grads = { { pass = 1 } } })
  end
  -- In eager mode the GEMM reads the slice in place, its rows s + 1 elements apart: an odd
  -- leading dimension, for which cuBLAS picks CUTLASS's sm75 align1 kernel (one-element loads),
  -- in the forward and for the values' gradient. Its time is that kernel's measured rate over
  -- the bytes it reads (class mm_align1, 1.70 ms at 1 x 64 x 4096 on an H100, against 0.76 for
  -- an aligned GEMM of its FLOPs; mm_align1_bwd: that kernel and the aligned GEMM of the
  -- probabilities' gradient). Under compile the clone above is contiguous, the GEMM aligned
  local o = nn.op(cx, { name = name .. ".pv", kind = cx.compiling and "mm" or "mm_align1", inputs = { weights, v },
                        bwd_kind = not cx.compiling and "mm_align1_bwd" or nil,
                        outs = { { name .. ".attn_out", { b, heads, s, hd }, dt } }, saves = { weights, v },
                        grad_order = { 2, 1 }, flops = 2 * b * heads * s * s * hd, dtype = dt, frees = {} })
  -- `attn_output.transpose(1, 2).contiguous()`: CloneBackward0 and the transpose's backward hand
  -- the gradient on as a view; matmul's backward folds it to (b * heads, s, d), which is a view of
  -- it at b = 1 and a copy otherwise (no single stride spans b and heads). Then the function
  -- returns and its locals go in their order: the repeated keys and values (key_states,
  -- value_states), then combined_logits (the shifted logits)
  local ot = nn.op(cx, { name = name .. ".attn_transpose", inputs = { o },
                         outs = { { name .. ".attn_out_t", { b, s, heads * hd }, dt } },
                         grads = { b == 1 and { pass = 1 } or { dtype = dt } } })
  nn.release(cx, { k, v, shifted }, name .. ": eager_attention_forward returns")
  return ot, weights
end

-- GptOssAttention.forward(hidden_states, position_embeddings, attention_mask).
local function attention_forward(cx, m, hn, cos, sin, mask)
  local r = cx.run
  local b, s = r.batch, r.seq
  local a, pre = m.attn, m.lpre
  local hd = a.head_dim
  local C = m.children
  -- `self.x_proj(hidden_states).view(hidden_shape).transpose(1, 2)` for q, k, v (addmm with the
  -- bias); the views' backward copies the non-contiguous gradient back
  local qv = nn.view_op(cx, pre .. ".q_heads", mod.call(cx, C.q_proj, hn), { b, a.heads, s, hd })
  local kv = nn.view_op(cx, pre .. ".k_heads", mod.call(cx, C.k_proj, hn), { b, a.kv_heads, s, hd })
  local vv = nn.view_op(cx, pre .. ".v_heads", mod.call(cx, C.v_proj, hn), { b, a.kv_heads, s, hd })
  local qe = rotary(cx, pre .. ".q_rotary", qv, cos, sin)
  local ke = rotary(cx, pre .. ".k_rotary", kv, cos, sin)
  nn.release(cx, { qv, kv }, pre .. ": query/key states reassigned")
  local kc, vc = ke, vv
  if r.use_cache then
    -- DynamicCache(config=...) (use_cache defaults to True): a DynamicSlidingWindowLayer for a
    -- sliding layer, whose lazy_initialization also moves its window size to the GPU (an int64
    -- scalar the cache keeps), then torch.cat onto the empty cache copies the keys and values;
    -- the cache holds the copies until the caller drops the output
    if a.sliding then
      local w = nn.op(cx, { name = pre .. ".cache.sliding_window_tensor", kind = "copy", inputs = {},
                            outs = { { pre .. ".cache.sliding_window_tensor", {}, "int64", no_grad = true } } })
      nn.hold(cx, w)
    end
    kc = nn.op(cx, { name = pre .. ".cache_keys", kind = "copy", inputs = { ke },
                     outs = { { pre .. ".cache.keys", ke.shape, ke.dtype } }, grads = { { pass = 1 } }, frees = {} })
    vc = nn.op(cx, { name = pre .. ".cache_values", kind = "transpose", inputs = { vv },
                     outs = { { pre .. ".cache.values", vv.shape, vv.dtype } }, grads = { { pass = 1 } }, frees = {} })
    nn.hold(cx, kc)
    nn.hold(cx, vc)
    nn.release(cx, { ke, vv }, pre .. ": key/value states rebound to the cache's")
  end
  -- repeat_kv: expand + reshape copies the keys and values to every query head
  local kr, vr = kc, vc
  if a.kv_heads ~= a.heads then
    local rep = { b, a.heads, s, hd }
    kr = nn.op(cx, { name = pre .. ".repeat_k", inputs = { kc }, outs = { { pre .. ".k_rep", rep, kc.dtype } },
                     grads = { { dtype = kc.dtype } } })
    vr = nn.op(cx, { name = pre .. ".repeat_v", inputs = { vc }, outs = { { pre .. ".v_rep", rep, vc.dtype } },
                     grads = { { dtype = vc.dtype } } })
  end
  local ao, attn_weights = sink_attention(cx, m, qe, kr, vr, mask)
  -- `attn_output.reshape(*input_shape, -1).contiguous()`: already contiguous, a view
  local o = mod.call(cx, C.o_proj, ao)
  -- forward's locals query_states, key_states and value_states (the keys and values before
  -- repeat_kv, unless the cache's copies replaced them) go as it returns
  nn.release(cx, r.use_cache and { qe } or { qe, ke, vv }, pre .. ": self_attn returns")
  return o, attn_weights
end

-- ---- the mixture of experts -------------------------------------------------------------------

-- `out.add_(bias)` after a grouped GEMM: in place, so nothing is allocated; AddBackward0 hands the
-- gradient to both sides as it is.
local function add_bias_(cx, name, out, bias)
  local v = nn.view(cx, out, out.shape, name)
  nn.op(cx, { name = name, inputs = { out, bias }, out_tensors = { v }, grads = { { pass = 1 }, { pass = 1 } },
              flops = nn.numel(out.shape), frees = { out } })
  return v
end

-- GptOssExperts._apply_gate(gate_up): `gate, up = gate_up[..., ::2], gate_up[..., 1::2]` (strided
-- views; each SliceBackward0 writes into zeros of gate_up's shape); `gate.clamp(max=limit)` and
-- `up.clamp(-limit, limit)` (ClampBackward1 keeps its input, a view of gate_up: gate_up stays
-- alive through backward); glu = gate * sigmoid(gate * alpha); (up + 1) * glu. clamp_backward is
-- `where(self >= min & self <= max, grad, 0)`: a 0-dim zero and a boolean (S, inter) per bound,
-- made before the gradient.
local function apply_gate(cx, pre, gate_up, inter)
  local n = gate_up.shape[1]
  local full = nn.bytes(gate_up.shape, gate_up.dtype)
  local shape = { n, inter }
  local dt = gate_up.dtype
  local gate = nn.view_op(cx, pre .. ".gate", gate_up, shape, full, "strided")
  local up = nn.view_op(cx, pre .. ".up", gate_up, shape, full, "strided")
  local mask = nn.bytes(shape, "bool")
  local gc = nn.op(cx, { name = pre .. ".gate_clamp", inputs = { gate }, outs = { { pre .. ".gate_clamp", shape, dt } },
                         saves = { gate }, flops = n * inter, bwd_workspace = { nn.bytes({}, dt), mask },
                         bwd_workspace_first = true })
  local uc = nn.op(cx, { name = pre .. ".up_clamp", inputs = { up }, outs = { { pre .. ".up_clamp", shape, dt } },
                         saves = { up }, flops = n * inter, bwd_workspace = { nn.bytes({}, dt), mask, mask },
                         bwd_workspace_first = true })
  local ga = nn.op(cx, { name = pre .. ".gate_alpha", inputs = { gc }, outs = { { pre .. ".gate_alpha", shape, dt } },
                         flops = n * inter, frees = {} })
  local sig = nn.op(cx, { name = pre .. ".sigmoid", inputs = { ga }, outs = { { pre .. ".sigmoid", shape, dt } },
                          save_outs = { 1 }, flops = n * inter })
  -- (the sigmoid and `up + 1` are temporaries of their expressions; gate, up and glu are
  -- _apply_gate's locals, freed in that order as it returns)
  local glu = nn.mul(cx, pre .. ".glu", gc, sig, dt, { frees = { sig } })
  local up1 = nn.op(cx, { name = pre .. ".up_plus_one", inputs = { uc }, outs = { { pre .. ".up_plus_one", shape, dt } },
                          grads = { { pass = 1 } }, flops = n * inter, frees = {} })
  local gated = nn.mul(cx, pre .. ".gated", up1, glu, dt, { frees = { up1 } })
  nn.release(cx, { gc, uc, glu }, pre .. ": _apply_gate returns")
  return gated
end

-- GptOssMLP.forward(hidden_states (b, s, hidden)): the router, then grouped_mm_experts_forward.
local function mlp_forward(cx, m, x)
  local e = m.moe
  local pre = m.opname
  local b, s, h = x.shape[1], x.shape[2], x.shape[3]
  local t, k, ne, inter = b * s, e.top_k, e.experts, e.intermediate
  local n = t * k
  local hs = nn.view(cx, x, { t, h }, pre .. ".hidden_flat")

  -- GptOssTopKRouter: logits = F.linear(x, weight, bias) (addmm); topk of the logits (TopkBackward0
  -- keeps the indices); softmax over the k in the logits' dtype, its output kept. The logits are
  -- bound to `_` until the MLP returns.
  local logits = mod.call(cx, m.children.router, hs)
  local topv, topi = nn.op(cx, { name = pre .. ".router.topk", inputs = { logits },
                                 outs = { { pre .. ".router.top_value", { t, k }, logits.dtype },
                                          { pre .. ".router.indices", { t, k }, "int64", no_grad = true } },
                                 save_outs = { 2 }, frees = {} })
  local scores = nn.op(cx, { name = pre .. ".router.softmax", kind = "softmax", inputs = { topv },
                             outs = { { pre .. ".router.scores", { t, k }, logits.dtype } }, save_outs = { 1 } })

  -- grouped_mm_experts_forward (integrations/moe.py), as moe.lua's, with the biases; under
  -- target_parameters the wrappers' factors first (strategies/lora.lua)
  local P = pre .. ".experts"
  local ex = m.children.experts
  local lora = require "strategies.lora"
  local proxies = lora.param_proxies(cx, pre, ex)
  if proxies and cx.ep then
    error(P .. ": LoRA on the experts' parameters (training.lora.target_parameters) with expert "
          .. "parallelism is not modelled", 0)
  end
  local weights = nn.view(cx, scores, { n }, pre .. ".sample_weights")
  local ids = nn.view(cx, topi, { n }, pre .. ".expert_ids")
  local ids_sorted, perm = moe.index_op(cx, pre .. ".sort", { ids },
    { { pre .. ".expert_ids_sorted", { n }, "int64" }, { pre .. ".perm", { n }, "int64" } }, nil, "sort")
  local rows = moe.index_op(cx, pre .. ".perm_div_k", { perm }, { { pre .. ".token_of_pair", { n }, "int64" } })
  local selected = moe.gather_rows(cx, pre .. ".select_hidden", hs, rows, n, true)
  local weights_g = moe.gather_rows(cx, pre .. ".select_weights", weights, perm, n, true)
  local ids32 = moe.index_op(cx, pre .. ".expert_ids.int", { ids_sorted }, { { pre .. ".expert_ids_int", { n }, "int32" } })
  local counts = moe.index_op(cx, pre .. ".histc", { ids32 }, { { pre .. ".tokens_per_expert", { ne }, "int32" } }, nil, "histc")
  local offsets = moe.index_op(cx, pre .. ".cumsum", { counts }, { { pre .. ".offsets", { ne }, "int32" } }, nil, "cumsum")

  -- (the first read of a wrapped weight folds its adapter in; the biases are not wrapped)
  local gu, gub = W(cx, ex.p.gate_up_proj), W(cx, ex.p.gate_up_proj_bias)
  local dp, dpb = W(cx, ex.p.down_proj), W(cx, ex.p.down_proj_bias)
  gu = lora.param_weight(cx, proxies, "gate_up_proj", gu)
  -- `selected_biases = self.gate_up_proj_bias[expert_ids_g]`: one bias row per pair, bound until
  -- the down projection's replaces it
  local bias1 = moe.gather_rows(cx, P .. ".gate_up_bias", gub, ids_sorted, n)
  local sel = nn.to(cx, selected, gu.dtype, P .. ".input_cast")
  local proj = moe.grouped_mm(cx, P .. ".gate_up_proj", sel, gu, offsets, true)
  proj = add_bias_(cx, P .. ".gate_up_bias_add_", proj, bias1)
  local gated = apply_gate(cx, P, proj, inter)
  -- `proj_out = self._apply_gate(proj_out)`: the gate_up output goes with the rebinding
  nn.release(cx, { proj }, P .. ": proj_out reassigned")
  dp = lora.param_weight(cx, proxies, "down_proj", dp)
  local bias2 = moe.gather_rows(cx, P .. ".down_bias", dpb, ids_sorted, n)
  nn.release(cx, { bias1 }, P .. ": selected_biases reassigned")
  local gin = nn.to(cx, gated, dp.dtype, P .. ".down_input_cast")
  local down = moe.grouped_mm(cx, P .. ".down_proj", gin, dp, offsets, true)
  down = add_bias_(cx, P .. ".down_bias_add_", down, bias2)
  local wcol = nn.view(cx, weights_g, { n, 1 }, pre .. ".sample_weights_col")
  -- MulBackward0 makes the weights' gradient as the full (S, hidden) product grad * proj_out before
  -- the engine sums it to (S, 1)
  local weighted = nn.mul(cx, P .. ".weighted", down, wcol, nn.promote(down.dtype, weights_g.dtype),
                          { frees = { wcol }, bwd_workspace = { nn.bytes(down.shape, down.dtype) },
                            bwd_workspace_first = true })
  local arange = moe.index_op(cx, pre .. ".arange", {}, { { pre .. ".arange", { n }, "int64" } })
  local inv = moe.index_op(cx, pre .. ".inv_perm", { perm, arange }, { { pre .. ".inv_perm", { n }, "int64" } }, nil,
                             "index_put")
  local reordered = moe.gather_rows(cx, pre .. ".restore_order", weighted, inv, n, true)
  local summed = nn.op(cx, { name = pre .. ".sum_top_k", kind = "reduce_rows", inputs = { reordered },
                             outs = { { pre .. ".final_hidden", { t, h }, reordered.dtype } }, frees = {} })
  local out = nn.to(cx, summed, x.dtype, pre .. ".final_hidden.to")
  -- the experts' forward returns: its locals go in their order (expert_ids_g, perm,
  -- selected_hidden_states_g, sample_weights_g, histc_input, tokens_per_expert, offsets,
  -- selected_biases, proj_out, weighted_out, inv_perm; fulltrace_gen11-gptoss-20b-lora-all-b7-
  -- ckpt-tr), then the MLP's (the router's logits)
  nn.release(cx, { ids_sorted, perm, selected, weights_g, ids32, counts, offsets, bias2, down, reordered, inv },
             P .. ": returns")
  -- parametrize.cached() holds each folded weight until the wrappers' forward returns
  if proxies then nn.release(cx, { gu, dp }, P .. ": the parametrization cache clears") end
  nn.release(cx, { logits }, pre .. ": returns")
  return nn.view(cx, out, { b, s, h }, pre .. ".out")
end

local function MLP(cfg, pre)
  local m = mod.new(F.classes.mlp, mlp_forward,
                    { opname = pre .. ".mlp",
                      moe = { experts = cfg.experts, top_k = cfg.top_k, intermediate = cfg.moe_intermediate } })
  local router = mod.new(F.classes.router, llama.linear_forward,
                         { opname = pre .. ".mlp.router", in_features = cfg.hidden, out_features = cfg.experts })
  router:declare("weight", { cfg.experts, cfg.hidden })
  router:declare("bias", { cfg.experts })
  m:add("router", router)
  -- is_transposed: the weights laid out (experts, in, out) (use_experts_implementation's flag,
  -- which peft's ParamWrapper reads too); param_lora: the two target_parameters may wrap
  local ex = mod.new(F.classes.experts, nil, { opname = pre .. ".mlp.experts", is_transposed = true,
                                               param_lora = { gate_up_proj = true, down_proj = true } })
  local e, h, i = cfg.experts, cfg.hidden, cfg.moe_intermediate
  ex:declare("gate_up_proj", { e, h, 2 * i })
  ex:declare("gate_up_proj_bias", { e, 2 * i })
  ex:declare("down_proj", { e, i, h })
  ex:declare("down_proj_bias", { e, h })
  m:add("experts", ex)
  return m
end

-- ---- the model --------------------------------------------------------------------------------

-- create_causal_mask / create_sliding_window_causal_mask under eager (masking_utils.py): sdpa_mask's
-- index tensors (arange(b), arange(1), arange(s) + q_offset, arange(s) + kv_offset), the
-- conditions as (1, 1, s, s) booleans (causal: kv_idx <= q_idx; sliding also
-- kv_idx > q_idx - window, each `&` a new boolean), then eager_mask's
-- `torch.where(mask, 0.0, min_dtype)`: two 0-dim tensors and the additive (b, 1, s, s) mask in
-- the model's dtype (the fake-CUDA capture: the full mask first, then the sliding one).
local function eager_mask(cx, r, kind, window, dtype)
  local b, s = r.batch, r.seq
  local P = kind == "sliding_attention" and "sliding_window_mask" or "causal_mask"
  local function new(name, shape, dt, inputs, frees)
    return nn.op(cx, { name = P .. "." .. name, inputs = inputs or {}, frees = frees,
                       outs = { { P .. "." .. name, shape, dt, no_grad = true } } })
  end
  local batch_idx = new("batch_arange", { b }, "int64")
  local head_idx = new("head_arange", { 1 }, "int64")
  local q_ar = new("q_arange", { s }, "int64")
  local q_idx = new("q_idx", { s }, "int64", { q_ar }, { q_ar })
  local kv_ar = new("kv_arange", { s }, "int64")
  local kv_idx = new("kv_idx", { s }, "int64", { kv_ar }, { kv_ar })
  local ss = { 1, 1, s, s }
  local mask
  if kind == "sliding_attention" then
    local ones = new("new_ones", {}, "bool", { q_idx }, {})
    local lower = new("q_minus_window", { s }, "int64", { q_idx }, {})
    local in_window = new("in_window", ss, "bool", { kv_idx, lower }, { lower })
    local r1 = new("and_window", ss, "bool", { ones, in_window }, { in_window, ones })
    local causal = new("causal", ss, "bool", { kv_idx, q_idx }, {})
    mask = new("and_causal", ss, "bool", { r1, causal }, { causal, r1 })
  else
    mask = new("causal", ss, "bool", { kv_idx, q_idx }, {})
  end
  nn.release(cx, { batch_idx, head_idx, q_idx, kv_idx }, P .. ": sdpa_mask returns")
  local zero = new("zero", {}, dtype)
  local min = new("min_dtype", {}, dtype)
  return new("additive", { b, 1, s, s }, dtype, { mask, zero, min }, { min, zero, mask })
end

-- (the DeepSeek families build their one full mask with it)
F.eager_mask = eager_mask

-- GptOssRotaryEmbedding.forward: `position_ids[..., None].float() * inv_freq.to(float)` (the
-- buffer copied where the parameters' cast made it bf16), no cat: the tables are (1, s, d / 2);
-- cos and sin times attention_scaling (YaRN's), cast to the hidden dtype.
local function rotary_tables(cx, position_ids, s, hd, dtype, buf_dtype)
  local P = "rotary"
  local pos = nn.op(cx, { name = P .. ".position_ids_float", kind = "copy", inputs = { position_ids }, frees = {},
                          outs = { { P .. ".position_ids_float", { 1, s, 1 }, "fp32", no_grad = true } } })
  local inputs = { pos }
  if buf_dtype ~= "fp32" then
    inputs[2] = nn.op(cx, { name = P .. ".inv_freq_float", kind = "copy", inputs = {},
                            outs = { { P .. ".inv_freq_float", { hd // 2 }, "fp32", no_grad = true } } })
  end
  local freqs = nn.op(cx, { name = P .. ".freqs", inputs = inputs, outs = { { P .. ".freqs", { 1, s, hd // 2 }, "fp32" } } })
  local cos32 = nn.ew(cx, P .. ".cos_scaled", { nn.op(cx, { name = P .. ".cos", inputs = { freqs }, frees = {},
                                                            outs = { { P .. ".cos", freqs.shape, "fp32" } } }) }, "fp32")
  local sin32 = nn.ew(cx, P .. ".sin_scaled", { nn.op(cx, { name = P .. ".sin", inputs = { freqs }, frees = {},
                                                            outs = { { P .. ".sin", freqs.shape, "fp32" } } }) }, "fp32")
  local cos = nn.op(cx, { name = P .. ".cos_cast", kind = "cast_down", inputs = { cos32 }, frees = {},
                          outs = { { P .. ".cos_cast", freqs.shape, dtype } } })
  local sin = nn.op(cx, { name = P .. ".sin_cast", kind = "cast_down", inputs = { sin32 }, frees = {},
                          outs = { { P .. ".sin_cast", freqs.shape, dtype } } })
  if dtype == "fp32" then cos, sin = cos32, sin32 end
  nn.release(cx, { freqs, cos32, sin32 }, P .. ": GptOssRotaryEmbedding.forward returns")
  return cos, sin
end

-- GptOssModel.forward(input_ids): the embeddings, position_ids, both kinds' masks, the rotary
-- tables, the layers (each with its kind's mask), the final norm.
local function model_forward(cx, m, ids)
  local r = cx.run
  local C = m.children
  local cfg = m.cfg
  if cx.autocast then
    error("GptOssForCausalLM under autocast (amp_bf16, amp_fp16) is not modelled: use precision bf16 "
          .. "or lora_bf16", 0)
  end
  if r.param_dtype == "fp16" then
    error("GptOssForCausalLM in fp16 is not modelled (_keep_in_fp32_modules keeps its norms in fp32 "
          .. "under fp16): use bf16", 0)
  end
  local x = mod.call(cx, C.embed_tokens, ids)
  r.inputs_embeds = x
  local dt = x and x.dtype or r.hidden_dtype
  local ar = nn.op(cx, { name = "position_ids.arange", inputs = {},
                         outs = { { "position_ids.arange", { r.seq }, "int64", no_grad = true } } })
  local position_ids = nn.op(cx, { name = "position_ids", inputs = { ar },
                                   outs = { { "position_ids", { 1, r.seq }, "int64", no_grad = true } } })
  local masks = {}
  for _, kind in ipairs { "full_attention", "sliding_attention" } do
    masks[kind] = eager_mask(cx, r, kind, cfg.sliding_window, r.param_dtype)
  end
  local cos, sin = rotary_tables(cx, position_ids, r.seq, cfg.head_dim, dt, r.param_dtype)
  local layers = {}
  for l = 0, cfg.layers - 1 do layers[l + 1] = C.layers.children[tostring(l)] end
  local run = require("vrsim.replicate").stack(cx, layers, function(l, h)
    return mod.call(cx, layers[l + 1], h, masks[cfg.layer_types[l + 1]], cos, sin)
  end)
  for l = 0, cfg.layers - 1 do x = run(l, x) end
  local hf = mod.call(cx, C.norm, x)
  -- causal_mask_mapping and position_ids live until the model returns
  nn.release(cx, { masks.full_attention, masks.sliding_attention, position_ids }, m.cls .. ".forward returns")
  if hf ~= x then
    nn.release(cx, { x }, "model.norm: hidden_states reassigned")
    if r.inputs_embeds and r.inputs_embeds ~= x then
      nn.release(cx, { r.inputs_embeds }, m.cls .. ".forward returns: inputs_embeds")
    end
  end
  return hf
end

-- The tree: Llama's, with GPT-OSS's attention, MLP, norms and model forward put in.
function F.tree(cfg)
  local cl = F.classes
  local root = llama.CausalLM(cfg, cl)
  local model = root.children.model
  model.forward = model_forward
  for l = 0, cfg.layers - 1 do
    local layer = model.children.layers.children[tostring(l)]
    local pre = "layers." .. l
    local attn = layer.children.self_attn
    attn.cls, attn.forward = cl.attn, attention_forward
    attn.attn.sliding = cfg.layer_types[l + 1] == "sliding_attention"
    attn:declare("sinks", { cfg.heads })
    local mlp = MLP(cfg, pre)
    layer.children.mlp, mlp.parent, mlp.key = mlp, layer, "mlp"
    -- the kind of layer: two layers of different kinds are not alike (replicate.lua)
    layer.attn_type = cfg.layer_types[l + 1]
  end
  mod.finalize(root)
  mod.walk(root, function(x)
    if x.cls == "LlamaRMSNorm" then x.cls, x.forward = cl.norm, rmsnorm.forward end
  end)
  return root
end

-- ---- the config -------------------------------------------------------------------------------

-- A positive number of config key k (default def).
local function number(hf, k, def, where)
  local v = hf[k]
  if v == nil then return def end
  if type(v) ~= "number" or v ~= v or v <= 0 then
    error(("%s: %s must be a positive number (got %s)"):format(where, k, tostring(v)), 0)
  end
  return v
end

-- GptOssConfig's defaults (configuration_gpt_oss.py, 5.25: gpt-oss-120b's shape).
function F.config(hf, where)
  local H = require "models.hf"
  local extra = { num_local_experts = 1, swiglu_limit = 1, swiglu_alpha = 1, quantization_config = 1,
                  -- in the released configs, read by OpenAI's own code, not by transformers
                  experts_per_token = 1, initial_context_length = 1 }
  for k in pairs(moe.KEYS) do extra[k] = 1 end
  local c = llama.config(hf, where, {
    hidden_size = 2880, intermediate_size = 2880, num_hidden_layers = 36, num_attention_heads = 64,
    num_key_value_heads = 8, head_dim = 64, vocab_size = 201088, tie_word_embeddings = false,
    attention_bias = true, extra_keys = extra,
  })
  moe.config(hf, where, c, { experts_key = "num_local_experts", experts = 128, top_k = 4 })
  local act = hf.hidden_act
  if act ~= nil and act ~= "silu" then
    error(("%s: hidden_act = %s is not modelled (GptOssExperts applies its own clamped SwiGLU; silu)")
          :format(where, tostring(act)), 0)
  end
  c.swiglu_limit = number(hf, "swiglu_limit", 7.0, where)
  c.swiglu_alpha = number(hf, "swiglu_alpha", 1.702, where)
  -- layer_types: the config's, else sliding for even layers and full for odd ones (__post_init__)
  c.layer_types = require("models.gemma2").layer_types(hf, where, c.layers, 2)
  c.sliding_window = H.int(hf, "sliding_window", 128, where)
  local q = hf.quantization_config
  if q ~= nil then
    if type(q) ~= "table" or q.quant_method ~= "mxfp4" then
      error(("%s: quantization_config with quant_method %s is not modelled (GPT-OSS's mxfp4 is, "
             .. "dequantized to bf16 for training)"):format(where, type(q) == "table" and tostring(q.quant_method) or "?"), 0)
    end
    if q.dequantize == false then
      error(where .. ": quantization_config.dequantize = false (the experts kept in MXFP4, run by the Triton "
            .. "kernels of Mxfp4GptOssExperts) is not modelled: transformers does not train it (the quantizer's "
            .. "is_trainable is False); from_pretrained(..., quantization_config=Mxfp4Config(dequantize=True)) "
            .. "loads bf16 experts, which vrsim models (drop the key or set it true)", 0)
    end
    c.mxfp4_dequantized = true
  end
  c.moe_classes = { block = F.classes.mlp, router = F.classes.router, experts = F.classes.experts }
  c.norm_cls = F.classes.norm
  return c
end

-- The attention implementation from_pretrained gives GptOssForCausalLM: eager (it declares no SDPA
-- support), with a note where SDPA was asked for; its flash kernels and flex attention are not
-- modelled. Also the MXFP4 note.
function F.attention(requested, notes, cfg)
  if cfg.mxfp4_dequantized then
    notes[#notes + 1] = "quantization_config mxfp4: the experts' MXFP4 weights are taken as dequantized to "
      .. "bf16 on load (Mxfp4Config(dequantize=True), what training needs: transformers does not train the "
      .. "MXFP4 kernels' experts), so they are bf16 parameters here"
  end
  if requested == "eager" then return "eager" end
  if requested == "sdpa" then
    notes[#notes + 1] = "GptOssForCausalLM does not run SDPA (_supports_sdpa = False: the attention sinks are "
      .. "an extra softmax column): from_pretrained falls back to eager attention, which keeps the "
      .. "(b, heads, s, s + 1) attention probabilities"
    return "eager"
  end
  error(("training.attention = \"%s\": GptOssForCausalLM does not run SDPA (_supports_sdpa = False); its "
         .. "flash kernels (vllm-flash-attn3 with sinks) and flex_attention are not modelled: use \"eager\" "
         .. "(the default it falls back to)"):format(tostring(requested)), 0)
end

return F
