-- blocks/t5.lua: transformers' T5EncoderModel (models/t5/modeling_t5.py, transformers 5.25) as a
-- module tree and its forward, as the text encoder Flux.1 and Stable Diffusion 3 / 3.5 call for
-- their long prompt embeddings (text_encoder_2 / text_encoder_3: T5 v1.1 XXL's encoder,
-- 4,762,310,656 parameters). The training scripts run it frozen, under no_grad, its weights moved
-- to weight_dtype (the bf16 .to() casts `wo` too, which T5's _keep_in_fp32_modules would otherwise
-- keep in fp32); so its forward matters for its transient tensors only, and nothing is saved.
--
-- Parameters are named as in its state dict under a prefix ("text_encoder_2.shared.weight",
-- "text_encoder_2.encoder.block.0.layer.0.SelfAttention.q.weight"); encoder.embed_tokens is
-- `shared` itself (tied: one tensor).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local U = require "models.blocks.unet"

local W = mod.weight
local call = mod.call

local T = {}

-- google/t5-v1_1-xxl's encoder as the pipelines ship it (text_encoder_2/config.json of
-- black-forest-labs/FLUX.1-dev, text_encoder_3 of stabilityai/stable-diffusion-3.5-*): d_model
-- 4096, d_kv 64, 64 heads, d_ff 10240, 24 layers, gated-gelu (gelu_new), 32 relative-position
-- buckets, vocabulary 32128.
T.configs = {
  ["t5-v1_1-xxl"] = { d_model = 4096, d_kv = 64, heads = 64, d_ff = 10240, layers = 24, vocab = 32128,
                      buckets = 32 },
}

-- T5LayerNorm: variance = x.to(fp32).pow(2).mean(-1); x * rsqrt(variance + eps) (the sum a
-- tensor of its own; the product fp32, by promotion); cast to the weight's dtype; weight * x.
local function t5_norm_forward(cx, m, x)
  local name = m.opname
  local w = W(cx, m.p.weight)
  local x32 = nn.to(cx, x, "fp32", name .. ".float")
  local rshape = nn.copy_shape(x.shape)
  rshape[#rshape] = 1
  local sq = nn.ew(cx, name .. ".pow", { x32 }, "fp32")
  local var = nn.op(cx, { name = name .. ".mean", kind = "reduce_rows", inputs = { sq },
                          outs = { { name .. ".variance", rshape, "fp32" } } })
  local ve = nn.ew(cx, name .. ".add_eps", { var }, "fp32")
  local rs = nn.ew(cx, name .. ".rsqrt", { ve }, "fp32")
  local n = nn.op(cx, { name = name .. ".mul", kind = "broadcast_rows", inputs = { x, rs },
                        outs = { { name .. ".normed", x.shape, "fp32" } } })
  local nc = nn.to(cx, n, w.dtype, name .. ".to_weight_dtype")
  return nn.mul(cx, name .. ".mul_weight", w, nc, w.dtype)
end

local function t5_norm(d)
  local m = mod.new("T5LayerNorm", t5_norm_forward, { channels = d })
  m:declare("weight", { d })
  return m
end

-- T5Attention.compute_bias(s, s) in block 0's attention, after its q, k, v: the (s, s) relative
-- positions (arange[:, None] + past_seen_tokens, arange[None, :], their difference), the
-- bidirectional _relative_position_bucket op by op (int64 but for the bool comparisons and the
-- fp32 log of the large positions; `relative_buckets += where(...)` in place), the bias
-- embedding's (s, s, heads) lookup; its permute(2, 0, 1).unsqueeze(0) is a view.
local function compute_bias(cx, name, s, heads, rb)
  local function op(nm, inputs, shape, dtype)
    return nn.op_sized(cx, { name = name .. ".bias." .. nm, inputs = inputs,
                             outs = { { name .. ".bias." .. nm, shape, dtype } } })
  end
  local ss = { s, s }
  local ctx = op("context_arange", {}, { s }, "int64")
  ctx = op("context_position", { ctx }, { s, 1 }, "int64")
  local mem = op("memory_position", {}, { s }, "int64")
  local rel = op("relative_position", { mem, ctx }, ss, "int64")
  local gt = op("gt", { rel }, ss, "bool")
  local buckets = op("gt.to_long", { gt }, ss, "int64")
  buckets = op("gt.mul_buckets", { buckets }, ss, "int64")
  buckets = op("relative_buckets", { buckets }, ss, "int64")
  local pos = op("abs", { rel }, ss, "int64")
  local small = op("is_small", { pos }, ss, "bool")
  local f = op("float", { pos }, ss, "fp32")
  f = op("div_max_exact", { f }, ss, "fp32")
  f = op("log", { f }, ss, "fp32")
  f = op("div_log_ratio", { f }, ss, "fp32")
  f = op("mul_buckets", { f }, ss, "fp32")
  local large = op("large.to_long", { f }, ss, "int64")
  large = op("large.add_max_exact", { large }, ss, "int64")
  local full = op("full_like", { large }, ss, "int64")
  large = op("large.minimum", { large, full }, ss, "int64")
  local wh = op("where", { small, pos, large }, ss, "int64")
  -- relative_buckets += where(...): in place
  nn.op_sized(cx, { name = name .. ".bias.add_", inputs = { buckets, wh }, outs = {} })
  return nn.op_sized(cx, { name = name .. ".relative_attention_bias", kind = "gather",
                           inputs = { buckets, rb },
                           outs = { { name .. ".position_bias", { s, s, heads }, rb.dtype } },
                           grads = { "none", { dtype = rb.dtype } } })
end

-- T5Block.forward: T5LayerSelfAttention (layer_norm, q, k, v, SDPA with the relative position
-- bias as its additive mask, o, residual), T5LayerFF (layer_norm, wi_0, gelu_new, wi_1, product,
-- wo, residual). Dropout is off: from_pretrained returns the model in eval mode. `st.values` is
-- the position bias block 0 computes and hands on to every block.
local function block_forward(cx, m, h, st)
  local pre, cfg = m.opname, m.cfg
  local SA = m.children.layer.children["0"].children
  local FF = m.children.layer.children["1"].children
  local A = SA.SelfAttention.children
  local b, s = h.shape[1], h.shape[2]
  local inner = cfg.heads * cfg.d_kv
  local x = call(cx, SA.layer_norm, h)
  local keep = { keep_input = true }
  local q = call(cx, A.q, x, keep)
  local k = call(cx, A.k, x, keep)
  local v = call(cx, A.v, x)
  if A.relative_attention_bias then
    st.values = compute_bias(cx, st.name, s, cfg.heads, W(cx, A.relative_attention_bias.p.weight))
  end
  local function heads(t, nm) return nn.view(cx, t, { b, cfg.heads, s, cfg.d_kv }, pre .. "." .. nm .. "_heads") end
  -- sdpa_attention_forward's create_position_bias_mask: with no attention mask and no causality
  -- the bias itself, made `.contiguous()`: the permuted (1, heads, s, s) view is copied in every
  -- block, the copy SDPA's additive attn_mask, freed when the attention returns. (nn.sdpa's mask
  -- path converts a boolean mask first, a copy T5 does not make; under no_grad the kernel keeps
  -- nothing and its output is its one allocation, so the call is made without the mask and the
  -- copy released after it)
  local mask = nn.copy(cx, pre .. ".position_bias_mask", st.values, { 1, cfg.heads, s, s })
  local ao = nn.sdpa(cx, pre .. ".attn", heads(q, "q"), heads(k, "k"), heads(v, "v"))
  nn.release(cx, { mask }, pre .. ".position_bias_mask dropped")
  -- attn_output.reshape(b, s, -1).contiguous(): the cuDNN kernel writes its output in
  -- (b, s, heads, d_kv) order, so the transpose back is contiguous already: a view, no copy
  local at = nn.view_op(cx, pre .. ".attn_out", ao, { b, s, inner })
  local o = call(cx, A.o, at)
  -- (T5Attention.forward's query/key/value_states live to its return, after `o`)
  nn.release(cx, { q, k, v }, pre .. ".qkv dropped")
  h = nn.add(cx, pre .. ".residual1", h, o)
  -- (T5LayerSelfAttention.forward's normed_hidden_states: to its return, after the residual)
  nn.release(cx, { x }, pre .. ".layer_norm1 output dropped")
  x = call(cx, FF.layer_norm, h)
  local D = FF.DenseReluDense.children
  local g = call(cx, D.wi_0, x, keep)
  -- NewGELUActivation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), op by op
  -- in Python's order (0.5 * x first)
  local half = nn.ew(cx, pre .. ".gelu.half_x", { g }, g.dtype)
  local t = nn.ew(cx, pre .. ".gelu.pow", { g }, g.dtype)
  t = nn.ew(cx, pre .. ".gelu.mul_c", { t }, g.dtype)
  t = nn.add(cx, pre .. ".gelu.add_x", g, t, { frees = { t } })
  t = nn.ew(cx, pre .. ".gelu.mul_sqrt", { t }, g.dtype)
  t = nn.ew(cx, pre .. ".gelu.tanh", { t }, g.dtype)
  t = nn.ew(cx, pre .. ".gelu.add_one", { t }, g.dtype)
  local act = nn.mul(cx, pre .. ".gelu", half, t, g.dtype)
  local lin = call(cx, D.wi_1, x)
  local prod = nn.mul(cx, pre .. ".gated", act, lin, act.dtype)
  local f = call(cx, D.wo, prod)
  -- (T5DenseGatedActDense.forward's hidden_gelu and hidden_linear live to its return, after wo;
  -- T5LayerFF.forward's caller frame holds the normed input until then too)
  nn.release(cx, { act, lin, x }, pre .. ".ff locals dropped")
  return nn.add(cx, pre .. ".residual2", h, f)
end

-- T5EncoderModel(input_ids)[0]: the embedding, the blocks (block 0 computes the position bias,
-- kept for every block until the stack returns), final_layer_norm.
local function t5_forward(cx, m, ids)
  local name, cfg = m.opname, m.cfg
  local b, s = ids.shape[1], ids.shape[2]
  local E = W(cx, m.children.shared.p.weight)
  local h = nn.op_sized(cx, { name = name .. ".embed_tokens", kind = "gather", inputs = { ids, E },
                              outs = { { name .. ".inputs_embeds", { b, s, cfg.d_model }, E.dtype } },
                              grads = { "none", { dtype = E.dtype } } })
  local enc = m.children.encoder.children
  local blocks = enc.block
  local st = { name = name }
  -- (T5Stack.forward's inputs_embeds: dropout in eval mode returns it as it is, and the local
  -- keeps it to the stack's return, as its position_bias keeps block 0's bias)
  local embeds = h
  for _, k in ipairs(blocks.order) do
    h = call(cx, blocks.children[k], h, st)
  end
  nn.release(cx, { st.values, embeds }, name .. ".position_bias, inputs_embeds dropped")
  return call(cx, enc.final_layer_norm, h)
end

local function embedding(num, dim)
  local m = mod.new("Embedding", nil, { num = num, dim = dim })
  m:declare("weight", { num, dim })
  return m
end

-- The tree in construction order: shared, encoder.block[i] (layer.0: SelfAttention q, k, v, o,
-- relative_attention_bias in block 0; layer_norm; layer.1: DenseReluDense wi_0, wi_1, wo;
-- layer_norm), encoder.final_layer_norm.
function T.T5EncoderModel(cfg, name)
  local d, inner = cfg.d_model, cfg.heads * cfg.d_kv
  local root = mod.new("T5EncoderModel", t5_forward, { cfg = cfg, opname = name })
  root:add("shared", embedding(cfg.vocab, d))
  local enc = root:add("encoder", mod.new("T5Stack", nil))
  local blocks = enc:add("block", mod.new("ModuleList", nil))
  for l = 0, cfg.layers - 1 do
    local pre = name .. ".block." .. l
    local B = blocks:add(l, mod.new("T5Block", block_forward, { cfg = cfg, opname = pre }))
    local layer = B:add("layer", mod.new("ModuleList", nil))
    local sa = layer:add(0, mod.new("T5LayerSelfAttention", nil))
    local a = sa:add("SelfAttention", mod.new("T5Attention", nil))
    for _, nm in ipairs { "q", "k", "v" } do a:add(nm, U.Linear(d, inner, false)).opname = pre .. "." .. nm end
    a:add("o", U.Linear(inner, d, false)).opname = pre .. ".o"
    if l == 0 then a:add("relative_attention_bias", embedding(cfg.buckets, cfg.heads)) end
    sa:add("layer_norm", t5_norm(d)).opname = pre .. ".layer_norm1"
    local ff = layer:add(1, mod.new("T5LayerFF", nil))
    local dd = ff:add("DenseReluDense", mod.new("T5DenseGatedActDense", nil))
    dd:add("wi_0", U.Linear(d, cfg.d_ff, false)).opname = pre .. ".wi_0"
    dd:add("wi_1", U.Linear(d, cfg.d_ff, false)).opname = pre .. ".wi_1"
    dd:add("wo", U.Linear(cfg.d_ff, d, false)).opname = pre .. ".wo"
    ff:add("layer_norm", t5_norm(d)).opname = pre .. ".layer_norm2"
  end
  enc:add("final_layer_norm", t5_norm(d)).opname = name .. ".final_layer_norm"
  mod.finalize(root, name)
  return root
end

return T
