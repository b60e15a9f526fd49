-- deepseek_v3.lua: transformers' DeepseekV3ForCausalLM (5.25, models/deepseek_v3/modeling_deepseek_v3.py
-- and modular_deepseek_v3.py), and the multi-head latent attention and mixture of experts that
-- DeepseekV2ForCausalLM shares (deepseek_v2.lua). Llama's tree (llama.lua) with:
--   - DeepseekV3Attention (MLA): q from q_proj, or with q_lora_rank from q_a_proj -> q_a_layernorm
--     -> q_b_proj (heads x (qk_nope_head_dim + qk_rope_head_dim)), split into its nope and rope
--     parts; kv_a_proj_with_mqa (hidden -> kv_lora_rank + qk_rope_head_dim), split into the
--     latent (kv_a_layernorm on it) and one rope key shared by every head; the rope parts rotated
--     (V3: rope_interleave, the even and odd columns as strided views; V2: complex numbers); the
--     KV cache holds the latent and the rope key (two small copies); query = cat(nope, rope);
--     expand_kv: kv_b_proj of the latent (heads x (qk_nope_head_dim + v_head_dim)) split into
--     k_nope and the values (views), the keys a new_empty (b, heads, s, qk) tensor both parts are
--     copied into; then eager attention (q @ k^T * scaling + mask, softmax in fp32, @ v) and
--     o_proj from heads x v_head_dim;
--   - DeepseekV3MoE in every layer from first_k_dense_replace on (a DeepseekV3MLP of
--     intermediate_size before): the router (DeepseekV3TopkRouter: its weight kept in fp32,
--     _keep_in_fp32_modules_strict, F.linear on an fp32 copy of the input; sigmoid scores, plus
--     e_score_correction_bias for the choice; group-limited top-k: each group's two best summed,
--     the topk_group best groups kept by a mask, top-k of the masked scores; the chosen scores
--     gathered, normalised (norm_topk_prob) and scaled by routed_scaling_factor), the routed
--     experts as Mixtral's (moe.lua experts_forward: grouped_mm, the fp32 weights promoting the
--     weighting), plus shared experts (an MLP of moe_intermediate_size x n_shared_experts) on
--     the block's input, added.
-- Attention: the MLA's query and key head dim (qk_nope + qk_rope, 192) differs from the values'
-- (128). SDPA (the default) runs cuDNN attention on Hopper and the memory-efficient kernel on
-- other GPUs (flash takes one head dim only: nn.sdpa_backend); eager attention as above.
-- Token routing: every tensor's size depends on tokens x top-k alone; the grouped GEMMs' time
-- is taken as balanced over the experts (models/moe.lua).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local rotary_halves = require "models.blocks.rotary_halves"
local llama = require "models.llama"
local moe = require "models.moe"

local F = {}
F.architectures = { "DeepseekV3ForCausalLM" }
F.model_type = "deepseek_v3"
F.classes = { lm = "DeepseekV3ForCausalLM", model = "DeepseekV3Model", layer = "DeepseekV3DecoderLayer",
              attn = "DeepseekV3Attention", norm = "DeepseekV3RMSNorm", mlp = "DeepseekV3MLP",
              moe = "DeepseekV3MoE", router = "DeepseekV3TopkRouter", experts = "DeepseekV3Experts" }
F.peft_targets = false
F.lora_example = '"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"'

local W = mod.weight

-- ---- rotary embeddings ------------------------------------------------------------------------

-- apply_rotary_pos_emb_interleave on one of q_rot (b, heads, s, r) and k_rot (b, 1, s, r): cos and
-- sin sliced to their first half (views); x1 = x[..., 0::2], x2 = x[..., 1::2] (strided views, each
-- SliceBackward0 a gradient of x's size); cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin]), each
-- product dropped once summed.
local function rotary_interleave(cx, name, x, cos, sin)
  local half = nn.copy_shape(x.shape)
  half[#half] = half[#half] // 2
  local x1 = nn.view_op(cx, name .. ".even", x, half, nil, "strided")
  local x2 = nn.view_op(cx, name .. ".odd", x, half, nil, "strided")
  return rotary_halves.rotate(cx, name, x, x1, x2, cos, sin, { "even", "odd" })
end

-- DeepseekV3RotaryEmbedding.forward: `position_ids[..., None].float() * inv_freq.to(float)` (the
-- buffer copied where the parameters' cast made it bf16), emb = cat((freqs, freqs)), cos and sin
-- times attention_scaling (YaRN's), cast to the hidden dtype.
local function rotary_tables(cx, position_ids, s, d, dtype, buf_dtype)
  local P = "rotary"
  local pos = nn.op(cx, { name = P .. ".position_ids_float", kind = "copy", inputs = { position_ids }, frees = {},
                          outs = { { P .. ".position_ids_float", { 1, s, 1 }, "fp32", no_grad = true } } })
  local inputs = { pos }
  if buf_dtype ~= "fp32" then
    inputs[2] = nn.op(cx, { name = P .. ".inv_freq_float", kind = "copy", inputs = {},
                            outs = { { P .. ".inv_freq_float", { d // 2 }, "fp32", no_grad = true } } })
  end
  local freqs = nn.op(cx, { name = P .. ".freqs", inputs = inputs, outs = { { P .. ".freqs", { 1, s, d // 2 }, "fp32" } } })
  local emb = nn.op(cx, { name = P .. ".cat", inputs = { freqs }, frees = {}, outs = { { P .. ".emb", { 1, s, d }, "fp32" } } })
  local function table_of(what)
    local t = nn.op(cx, { name = P .. "." .. what, inputs = { emb }, frees = {}, outs = { { P .. "." .. what, emb.shape, "fp32" } } })
    return nn.ew(cx, P .. "." .. what .. "_scaled", { t }, "fp32")
  end
  local cos32, sin32 = table_of("cos"), table_of("sin")
  if dtype == "fp32" then
    nn.release(cx, { freqs, emb }, P .. ": rotary_emb returns")
    return cos32, sin32
  end
  local cos = nn.op(cx, { name = P .. ".cos_cast", kind = "cast_down", inputs = { cos32 }, frees = {},
                          outs = { { P .. ".cos_cast", emb.shape, dtype } } })
  local sin = nn.op(cx, { name = P .. ".sin_cast", kind = "cast_down", inputs = { sin32 }, frees = {},
                          outs = { { P .. ".sin_cast", emb.shape, dtype } } })
  nn.release(cx, { freqs, emb, cos32, sin32 }, P .. ": rotary_emb returns")
  return cos, sin
end

-- The tables' first half, as apply_rotary_pos_emb_interleave slices them (views).
local function half_tables(cx, cos, sin)
  local shape = nn.copy_shape(cos.shape)
  shape[#shape] = shape[#shape] // 2
  return nn.view(cx, cos, shape, "rotary.cos_half"), nn.view(cx, sin, shape, "rotary.sin_half")
end

-- ---- multi-head latent attention --------------------------------------------------------------

-- `torch.split(x, sizes, dim=-1)`: views; SplitWithSizesBackward0 joins their gradients into one
-- buffer of x's size.
local function split(cx, name, x, shapes)
  local outs = {}
  for i, sh in ipairs(shapes) do outs[i] = nn.view(cx, x, sh, name .. "." .. i) end
  nn.op(cx, { name = name, kind = "none", inputs = { x }, out_tensors = outs,
              grads = { { dtype = x.dtype } }, bwd_kind = "cat_strided", bytes = 0 })
  return table.unpack(outs)
end

-- sdpa_attention_forward (integrations/sdpa_attention.py) on the MLA's query and keys (b, heads,
-- s, qk) and values (b, heads, s, v): every head its own keys, no mask (create_causal_mask gives
-- SDPA none), so is_causal; the kernel nn.sdpa_backend picks for two head dims (cuDNN on Hopper,
-- the memory-efficient kernel elsewhere). Then `attn_output.transpose(1, 2).contiguous()`: cuDNN
-- writes its output in the query's layout (MHA.cpp alloc_with_matching_layout), and
-- torch.cat((q_pass, q_rot)) made the query contiguous in (b, heads, s, qk): the transpose is a
-- copy, which o_proj keeps for its weight gradient while the kernel keeps its own output; its
-- gradient reaches the kernel as a transposed view (cuDNN 9.5.1 and above take any strides with
-- a unit innermost one). The memory-efficient kernel writes (b, s, heads, v) (attention.cu
-- at::empty({B, M, num_heads, Kv})): the transpose is a view. reshape(b, s, -1).contiguous()
-- is a view either way.
local function sdpa_forward(cx, m, query, key, value, locals)
  local r = cx.run
  local b, s = r.batch, r.seq
  local H, dv = m.mla.heads, m.mla.v
  local name, pre = m.opname, m.lpre
  local impl = r.attention
  local o = nn.sdpa(cx, name, query, key, value, { impl = impl, causal = true })
  local ot
  if nn.sdpa_backend(cx.arch, query.dtype, impl, { qk = query.shape[4], v = dv }) == "mem_efficient" then
    ot = nn.view(cx, o, { b, s, H * dv }, name .. ".attn_out_t")
  else
    ot = nn.op(cx, { name = name .. ".attn_transpose", inputs = { o },
                     outs = { { name .. ".attn_out_t", { b, s, H * dv }, o.dtype } }, grads = { { pass = 1 } } })
  end
  local out = mod.call(cx, m.children.o_proj, ot)
  nn.release(cx, locals, pre .. ": self_attn returns")
  return out, nil
end

-- DeepseekV3Attention.forward(hidden_states, position_embeddings, attention_mask): cos and sin are
-- V3's tables, or (V2) cos the complex freqs_cis and sin nil.
local function mla_forward(cx, m, hn, cos, sin, mask)
  local r = cx.run
  local b, s = r.batch, r.seq
  local a, pre, name = m.mla, m.lpre, m.opname
  local C = m.children
  local H, dn, dr, dv, dq = a.heads, a.nope, a.rope, a.v, a.nope + a.rope
  local dt
  -- q_states = q_proj(x), or q_b_proj(q_a_layernorm(q_a_proj(x))); .view().transpose(1, 2)
  local q
  if C.q_proj then q = mod.call(cx, C.q_proj, hn)
  else q = mod.call(cx, C.q_b_proj, mod.call(cx, C.q_a_layernorm, mod.call(cx, C.q_a_proj, hn))) end
  dt = q.dtype
  local qh = nn.view_op(cx, pre .. ".q_heads", q, { b, H, s, dq })
  local q_pass, q_rot = split(cx, pre .. ".q_split", qh, { { b, H, s, dn }, { b, H, s, dr } })
  -- the latent and the shared rope key
  local ckv = mod.call(cx, C.kv_a_proj_with_mqa, hn)
  local kv_nope, k_rot = split(cx, pre .. ".kv_split", ckv, { { b, s, a.kv_rank }, { b, s, dr } })
  local latent = nn.view(cx, mod.call(cx, C.kv_a_layernorm, kv_nope), { b, 1, s, a.kv_rank }, pre .. ".latent")
  local k_rot4 = nn.view(cx, k_rot, { b, 1, s, dr }, pre .. ".k_rot")
  local q_re, k_re
  if a.rope_complex then
    local permuted = r.attention ~= "eager"
      and nn.sdpa_backend(cx.arch, dt, r.attention, { qk = dq, v = dv }) == "mem_efficient"
    q_re, k_re = require("models.deepseek_v2").rotary_complex(cx, pre, q_rot, k_rot4, cos, permuted)
  else
    local ch, sh = half_tables(cx, cos, sin)
    q_re = rotary_interleave(cx, pre .. ".q_rotary", q_rot, ch, sh)
    k_re = rotary_interleave(cx, pre .. ".k_rotary", k_rot4, ch, sh)
  end
  -- DynamicCache.update on the compressed latent and the rope key: torch.cat onto the empty
  -- cache copies both; the cache holds them until the caller drops the output
  local kl, kr = latent, k_re
  if r.use_cache then
    kl = nn.op(cx, { name = pre .. ".cache_latent", kind = "copy", inputs = { latent },
                     outs = { { pre .. ".cache.latent", latent.shape, latent.dtype } }, grads = { { pass = 1 } }, frees = {} })
    kr = nn.op(cx, { name = pre .. ".cache_k_rot", kind = "copy", inputs = { k_re },
                     outs = { { pre .. ".cache.k_rot", k_re.shape, k_re.dtype } }, grads = { { pass = 1 } }, frees = {} })
    nn.hold(cx, kl)
    nn.hold(cx, kr)
    nn.release(cx, { latent, k_re }, pre .. ": latents rebound to the cache's")
  end
  -- query_states = cat((q_pass, q_rot)); q_pass stays bound until the attention returns
  local query = nn.op(cx, { name = pre .. ".query_cat", kind = "cat_strided", inputs = { q_pass, q_re },
                            outs = { { pre .. ".query_states", { b, H, s, dq }, dt } },
                            grads = { { pass = 1 }, { pass = 1 } }, frees = { q_re } })
  -- expand_kv: kv_b_proj(latent).view().transpose(1, 2), split into k_nope and the values (views);
  -- the keys a new_empty tensor that k_nope and the rope key (expanded to every head: its
  -- gradient summed back over the heads) are copied into
  local kvb = mod.call(cx, C.kv_b_proj, kl)
  local kvh = nn.view_op(cx, pre .. ".kv_heads", kvb, { b, H, s, dn + dv })
  local k_nope, value = split(cx, pre .. ".kv_b_split", kvh, { { b, H, s, dn }, { b, H, s, dv } })
  -- (each copy_ into a slice is a CopySlices node: its backward makes a new_empty_strided gradient
  -- of the whole keys, clones the slice's part for the source and zeros it with a zeros_like of
  -- the slice where the base needs a gradient (the first, on new_empty, does not); the rope part's
  -- clone is then summed over the heads)
  local full, nope, rot = nn.bytes({ b, H, s, dq }, dt), nn.bytes({ b, H, s, dn }, dt), nn.bytes({ b, H, s, dr }, dt)
  local key = nn.op(cx, { name = pre .. ".key_states", kind = "copy", inputs = { k_nope, kr },
                          outs = { { pre .. ".key_states", { b, H, s, dq }, dt } },
                          grads = { { bytes = nope, dtype = dt }, "new" },
                          bwd_workspace = { full, rot, rot, full }, bwd_workspace_first = true })

  if r.attention ~= "eager" then return sdpa_forward(cx, m, query, key, value, { q_pass, query, key, kv_nope }) end
  -- eager_attention_forward (num_key_value_heads = heads: no repeat_kv)
  local ss = { b, H, s, s }
  local scores = nn.op(cx, { name = name .. ".qk", kind = "mm", inputs = { query, key },
                             outs = { { name .. ".scores", ss, dt } }, saves = { query, key }, grad_order = { 2, 1 },
                             flops = 2 * b * H * s * s * dq, dtype = dt })
  local scaled = nn.op(cx, { name = name .. ".scale", inputs = { scores }, outs = { { name .. ".scale", ss, dt } },
                             flops = nn.numel(ss), bwd_bytes = 2 * nn.bytes(ss, dt) })
  local masked = nn.op(cx, { name = name .. ".add_mask", inputs = { scaled, mask },
                             outs = { { name .. ".masked", ss, dt } }, grads = { { pass = 1 }, "none" },
                             frees = { scaled } })
  -- softmax(dtype=float32) on a bf16 input: a cast, then _softmax (its output kept; its CUDA
  -- backward first makes grad * output), then `.to(query.dtype)`
  local m32 = nn.to(cx, masked, "fp32", name .. ".scores_fp32")
  local p32 = nn.op(cx, { name = name .. ".softmax", kind = "softmax", inputs = { m32 },
                          outs = { { name .. ".probs_fp32", ss, "fp32" } }, save_outs = { 1 },
                          bwd_workspace = { nn.bytes(ss, "fp32") }, flops = 5 * nn.numel(ss), dtype = "fp32" })
  local pr = nn.to(cx, p32, dt, name .. ".probs_cast")
  -- `attn_weights = softmax(attn_weights, ...).to(...)`: the masked scores die on reassignment,
  -- after the cast (fulltrace_gen11-dsv2lite-lora-b6-ckpt-eager-tr: the 3 GiB bf16 scores freed
  -- after the fp32 probabilities)
  nn.release(cx, { masked }, name .. ": attn_weights reassigned")
  -- the values are a strided view of kv_b_proj's output: matmul folds (b, heads) into bmm's batch
  -- as a view at b = 1, a copy otherwise
  local v = value
  if b > 1 then
    v = nn.op(cx, { name = name .. ".v_bmm_copy", kind = "transpose", inputs = { value },
                    outs = { { name .. ".v_bmm", value.shape, dt } }, grads = { { pass = 1 } } })
  end
  local o = nn.op(cx, { name = name .. ".pv", kind = "mm", inputs = { pr, v },
                        outs = { { name .. ".attn_out", { b, H, s, dv }, dt } }, saves = { pr, v },
                        grad_order = { 2, 1 }, flops = 2 * b * H * s * s * dv, dtype = dt })
  -- transpose(1, 2).contiguous(): a copy; its gradient folds back to bmm's batch as a view at
  -- b = 1, a copy otherwise
  local ot = nn.op(cx, { name = name .. ".attn_transpose", inputs = { o },
                         outs = { { name .. ".attn_out_t", { b, s, H * dv }, dt } },
                         grads = { b == 1 and { pass = 1 } or { dtype = dt } } })
  local out = mod.call(cx, C.o_proj, ot)
  -- DeepseekV3Attention.forward returns: q_states (q_pass's storage), the query and keys it
  -- still names go; the probabilities are its second return value, which the decoder layer binds
  -- to `_` until it returns (llama.lua's layer_returns)
  nn.release(cx, { q_pass, query, key, kv_nope }, pre .. ": self_attn returns")
  return out, pr
end

local function Linear(opname, cin, cout, bias)
  return llama.Linear(opname, cin, cout, bias)
end

-- DeepseekV3Attention.__init__: q_proj or q_a_proj, q_a_layernorm, q_b_proj; kv_a_proj_with_mqa,
-- kv_a_layernorm, kv_b_proj; o_proj.
function F.Attention(cfg, l, pre)
  local a = { heads = cfg.heads, nope = cfg.qk_nope, rope = cfg.qk_rope, v = cfg.v_head, kv_rank = cfg.kv_rank,
              rope_complex = cfg.rope_complex }
  local m = mod.new(cfg.classes.attn, mla_forward, { mla = a, opname = pre .. ".self_attn", lpre = pre })
  local p = pre .. ".self_attn."
  local h, H, dq = cfg.hidden, cfg.heads, cfg.qk_nope + cfg.qk_rope
  local norm = cfg.classes.norm
  if cfg.q_rank then
    m:add("q_a_proj", Linear(p .. "q_a_proj", h, cfg.q_rank, cfg.attention_bias))
    m:add("q_a_layernorm", llama.RMSNorm(p .. "q_a_layernorm", cfg.q_rank, norm))
    m:add("q_b_proj", Linear(p .. "q_b_proj", cfg.q_rank, H * dq, false))
  else
    m:add("q_proj", Linear(p .. "q_proj", h, H * dq, false))
  end
  m:add("kv_a_proj_with_mqa", Linear(p .. "kv_a_proj_with_mqa", h, cfg.kv_rank + cfg.qk_rope, cfg.attention_bias))
  m:add("kv_a_layernorm", llama.RMSNorm(p .. "kv_a_layernorm", cfg.kv_rank, norm))
  m:add("kv_b_proj", Linear(p .. "kv_b_proj", cfg.kv_rank, H * (cfg.qk_nope + cfg.v_head), false))
  m:add("o_proj", Linear(p .. "o_proj", H * cfg.v_head, h, cfg.attention_bias))
  return m
end

-- ---- the mixture of experts -------------------------------------------------------------------

-- An op of the router's choice that no gradient flows through (the group scores, masks, indices):
-- outputs marked as needing none.
-- extern: an op outside torch.compile's recomputable allowlist (aten.topk, aten.scatter_), which
-- a compiled layer's partitioner never recomputes (strategies/compile.lua)
local function choice_op(cx, name, inputs, outs, frees, extern)
  for _, o in ipairs(outs) do o.no_grad = true end
  return nn.op(cx, { name = name, inputs = inputs, outs = outs, frees = frees, grads = { "none", "none" },
                     compile_extern = extern })
end

-- The group-limited choice both routers make (V3's noaux_tc, V2's group_limited_greedy) on
-- `choice` (t, E): the group scores from `group_scores(view)`, then
-- `topk(group_scores, topk_group)[1]`, `zeros_like(group_scores).scatter_(1, idx, 1)`, the mask
-- expanded and reshaped to (t, E) (a copy), `~score_mask.bool()` (two booleans, the first dropped),
-- `masked_fill` (a new (t, E) tensor); the topks and the scatter are compile_extern. grad: the masked scores carry the gradient (V2, whose
-- top-k weights come from them: MaskedFillBackward0 keeps the mask); V3 takes only indices from
-- them. Returns the masked scores and the tensors the router's locals keep until it returns.
local function group_limited(cx, pre, choice, r, fill_frees, group_scores, grad)
  local t, ne = choice.shape[1], choice.shape[2]
  local G = r.groups
  local keep = {}
  local gs = group_scores(keep)
  local gv, gi = choice_op(cx, pre .. ".group_topk", { gs },
    { { pre .. ".group_topk_values", { t, r.topk_group }, "fp32" }, { pre .. ".group_idx", { t, r.topk_group }, "int64" } }, {}, true)
  nn.release(cx, { gv }, pre .. ": topk(...)[1]")
  local gm = choice_op(cx, pre .. ".group_mask", { gs }, { { pre .. ".group_mask", { t, G }, "fp32" } }, {})
  local sm
  if cx.compiling then
    -- functionalized under torch.compile: the scatter makes a new (t, G) tensor, which the
    -- partitioner never recomputes (it saves it, the smallest of the mask's chain, where
    -- backward needs the mask: validation/oracle/captures/compile_moe_l1.json,
    -- deepseek_v2_glg_bf16), and the expand and reshape copy it to (t, E)
    local sc = choice_op(cx, pre .. ".group_mask.scatter", { gm, gi },
                         { { pre .. ".group_mask_scattered", { t, G }, "fp32" } }, {}, true)
    keep[#keep + 1] = sc
    sm = choice_op(cx, pre .. ".score_mask", { sc }, { { pre .. ".score_mask", { t, ne }, "fp32" } }, {})
  else
    sm = choice_op(cx, pre .. ".score_mask", { gm, gi }, { { pre .. ".score_mask", { t, ne }, "fp32" } }, {}, true)
  end
  local sb = choice_op(cx, pre .. ".score_mask.bool", { sm }, { { pre .. ".score_mask_bool", { t, ne }, "bool" } }, {})
  local nb = choice_op(cx, pre .. ".score_mask.not", { sb }, { { pre .. ".score_mask_not", { t, ne }, "bool" } })
  local masked = nn.op(cx, { name = pre .. ".masked_fill", inputs = { choice, nb },
                             outs = { { pre .. ".masked_scores", { t, ne }, "fp32", no_grad = not grad } },
                             saves = grad and { nb } or nil, grads = { grad and "new" or "none", "none" },
                             frees = fill_frees })
  for _, x in ipairs { gs, gi, gm, sm, nb } do keep[#keep + 1] = x end
  return masked, keep
end

-- DeepseekV3TopkRouter.forward(hidden_states (t, hidden)). Returns the logits (bound to `_` until
-- the block returns), the top-k weights (fp32) and indices.
local function router_v3(cx, m, hs)
  local r, pre = m.router, m.opname
  local t, ne, k = hs.shape[1], r.experts, r.top_k
  local G = r.groups
  local x32 = nn.to(cx, hs, "fp32", pre .. ".input_float")
  local w = W(cx, m.p.weight)
  local w32 = w.dtype == "fp32" and w or nn.cast(cx, w, "fp32", pre .. ".weight_float", nil, true)
  local logits = nn.linear(cx, pre, x32, w32)
  local scores = nn.op(cx, { name = pre .. ".sigmoid", inputs = { logits }, frees = {},
                             outs = { { pre .. ".scores", { t, ne }, "fp32" } }, save_outs = { 1 } })
  -- scores + e_score_correction_bias (an fp32 buffer), for the choice only
  local choice = choice_op(cx, pre .. ".add_correction_bias", { scores }, { { pre .. ".scores_for_choice", { t, ne }, "fp32" } }, {})
  local masked, keep = group_limited(cx, pre, choice, r, { choice }, function(kept)
    -- view(t, groups, E / groups).topk(2)[0].sum(-1): the indices stay with the (dead) graph
    local v2, i2 = choice_op(cx, pre .. ".group_top2", { choice },
      { { pre .. ".group_top2_values", { t, G, 2 }, "fp32" }, { pre .. ".group_top2_idx", { t, G, 2 }, "int64" } }, {}, true)
    kept[#kept + 1] = i2
    return choice_op(cx, pre .. ".group_scores", { v2 }, { { pre .. ".group_scores", { t, G }, "fp32" } })
  end)
  local tv, ti = choice_op(cx, pre .. ".topk", { masked },
    { { pre .. ".topk_values", { t, k }, "fp32" }, { pre .. ".topk_indices", { t, k }, "int64" } }, {}, true)
  nn.release(cx, { tv }, pre .. ": topk(...)[1]")
  -- scores.gather(1, topk_indices): GatherBackward0 scatters into zeros of the scores' shape (an
  -- unfusible kernel under torch.compile: the indices are materialized in backward, bw_unfused)
  local tw = nn.op(cx, { name = pre .. ".gather", kind = "gather", inputs = { scores, ti },
                         outs = { { pre .. ".topk_weights", { t, k }, "fp32" } }, saves = { ti },
                         grads = { "new", "none" }, bw_unfused = true, index_arg = true, frees = {} })
  if r.norm_topk then
    -- denominator = sum + 1e-20; `topk_weights /= denominator` in place: DivBackward0 keeps a copy
    -- of the values it divided and the divisor
    local sum = nn.op(cx, { name = pre .. ".topk_sum", kind = "reduce_rows", inputs = { tw },
                            outs = { { pre .. ".topk_sum", { t, 1 }, "fp32" } }, frees = {} })
    local den = nn.ew(cx, pre .. ".denominator", { sum }, "fp32", nil, { { pass = 1 } })
    tw = nn.op(cx, { name = pre .. ".topk_normalize", kind = "broadcast_rows", inputs = { tw, den },
                     outs = { { pre .. ".topk_weights_normalized", { t, k }, "fp32" } }, saves = { tw, den } })
  end
  local scaled = nn.ew(cx, pre .. ".routed_scaling", { tw }, "fp32")
  keep[#keep + 1] = masked
  keep[#keep + 1] = ti
  nn.release(cx, keep, pre .. ": returns")
  return logits, scaled, ti
end

-- An MLP (DeepseekV3MLP) of `inter`, its ops named `opname`.
local function MLP(cfg, inter, opname)
  local m = llama.MLP({ hidden = cfg.hidden, intermediate = inter, mlp_bias = cfg.mlp_bias }, "mlp")
  m.cls, m.opname = cfg.classes.mlp, opname
  for _, k in ipairs { "gate_proj", "up_proj", "down_proj" } do m.children[k].opname = opname .. "." .. k end
  return m
end

-- DeepseekV3MoE.forward(hidden_states): the router on the flattened tokens, the routed experts,
-- then `hidden_states + self.shared_experts(residuals)`.
local function moe_forward(cx, m, x)
  local pre = m.opname
  local b, s, h = x.shape[1], x.shape[2], x.shape[3]
  local hs = nn.view(cx, x, { b * s, h }, pre .. ".hidden_flat")
  local logits, tw, ti = mod.call(cx, m.children.gate, hs)
  local routed = moe.experts_forward(cx, pre, m.children.experts, hs, tw, ti, m.moe, x.dtype)
  local r3 = nn.view(cx, routed, { b, s, h }, pre .. ".routed")
  local shared = mod.call(cx, m.children.shared_experts, x)
  local out = llama.residual_add(cx, pre .. ".add_shared", pre .. ".out", r3, shared)
  nn.release(cx, { logits, tw }, pre .. ": returns")
  return out
end

-- DeepseekV3MoE.__init__: experts, gate, shared_experts.
function F.MoE(cfg, pre, router_forward)
  local m = mod.new(cfg.classes.moe, moe_forward,
                    { opname = pre .. ".mlp",
                      moe = { experts = cfg.experts, top_k = cfg.top_k, intermediate = cfg.moe_intermediate } })
  -- param_lora: peft's target_parameters may wrap the routed experts' 3-D weights (laid out as
  -- Mixtral's, run by moe.lua's experts_forward); the shared experts are plain Linears
  local ex = mod.new(cfg.classes.experts, nil, { opname = pre .. ".mlp.experts",
                                                 param_lora = { gate_up_proj = true, down_proj = true } })
  -- checkpoints hold them per expert: stacked as they load (strategies/expert_load.lua; the
  -- conversion of transformers' "qwen2_moe", which deepseek_v2 and deepseek_v3 alias)
  ex:declare("gate_up_proj", { cfg.experts, 2 * cfg.moe_intermediate, cfg.hidden }, { load = "gate_up" })
  ex:declare("down_proj", { cfg.experts, cfg.hidden, cfg.moe_intermediate }, { load = "stack" })
  m:add("experts", ex)
  local gate = mod.new(cfg.classes.router, router_forward,
                       { opname = pre .. ".mlp.gate",
                         router = { experts = cfg.experts, top_k = cfg.top_k, groups = cfg.n_group,
                                    topk_group = cfg.topk_group, norm_topk = cfg.norm_topk_prob,
                                    method = cfg.topk_method } })
  -- _keep_in_fp32_modules_strict: from_pretrained keeps the router's weight in fp32
  gate:declare("weight", { cfg.experts, cfg.hidden }, { dtype = "fp32" })
  m:add("gate", gate)
  m:add("shared_experts", MLP(cfg, cfg.moe_intermediate * cfg.n_shared, pre .. ".mlp.shared_experts"))
  return m
end

-- ---- the model --------------------------------------------------------------------------------

-- DeepseekV3Model.forward / DeepseekV2Model.forward(input_ids): the embeddings, position_ids, the
-- causal mask (eager: the additive one), the rotary tables, the layers, the final norm.
local function model_forward(cx, m, ids)
  local r = cx.run
  local C = m.children
  local cfg = m.cfg
  if r.stage then
    -- (the stages' split of the tree and the stage forward are Llama's, models/llama.lua)
    error(cfg.classes.lm .. " with pipeline parallelism (training.parallel.pp) is not modelled", 0)
  end
  if cx.autocast then
    error(cfg.classes.lm .. " under autocast (amp_bf16, amp_fp16) is not modelled: use precision bf16 or lora_bf16", 0)
  end
  local x = mod.call(cx, C.embed_tokens, ids)
  r.inputs_embeds = x
  local dt = x and x.dtype or r.hidden_dtype
  local ar = nn.op(cx, { name = "position_ids.arange", inputs = {},
                         outs = { { "position_ids.arange", { r.seq }, "int64", no_grad = true } } })
  local position_ids = nn.op(cx, { name = "position_ids", inputs = { ar },
                                   outs = { { "position_ids", { 1, r.seq }, "int64", no_grad = true } } })
  -- create_causal_mask: eager's additive mask; none for SDPA (is_causal), which a padded or
  -- packed batch would need
  local mask
  if r.attention == "eager" then
    mask = require("models.gpt_oss").eager_mask(cx, r, "full_attention", nil, r.param_dtype)
  elseif r.data and (r.data.padded or r.data.packed) then
    error(("training.data with %s on %s under SDPA is not modelled (the attention mask it needs is not built "
           .. "for the multi-head latent attention)"):format(r.data.padded and "padded batches" or "packed batches",
                                                           cfg.classes.lm), 0)
  end
  local dq = cfg.qk_nope + cfg.qk_rope
  if r.attention ~= "eager" and not r.mla_noted
     and nn.sdpa_backend(cx.arch, dt, r.attention, { qk = dq, v = cfg.v_head }) == "mem_efficient" then
    r.mla_noted = true
    cx.notes[#cx.notes + 1] = ("SDPA on %s's query/key head dim %d and value head dim %d runs the memory-efficient "
      .. "kernel on this GPU: its forward (output, logsumexp, fp32 output accumulator) is modelled, its "
      .. "backward's own buffers (the row deltas, the split-key gradient accumulators) are not"):format(
      cfg.classes.lm, dq, cfg.v_head)
  end
  if cx.gen or r.decode or cx.cp then
    error(("%s under SDPA: %s is not modelled for the multi-head latent attention"):format(cfg.classes.lm,
          cx.cp and "context parallelism (ring attention)" or "generation (decode steps)"), 0)
  end
  local cos, sin
  if cfg.rope_complex then
    cos = require("models.deepseek_v2").rotary_tables(cx, position_ids, r.seq, cfg.qk_rope, r.param_dtype)
  else
    cos, sin = rotary_tables(cx, position_ids, r.seq, cfg.qk_rope, dt, r.param_dtype)
  end
  local layers = {}
  for l = 0, cfg.layers - 1 do layers[l + 1] = C.layers.children[tostring(l)] end
  local run = require("vrsim.replicate").stack(cx, layers, function(l, h)
    return mod.call(cx, layers[l + 1], h, mask, cos, sin)
  end)
  for l = 0, cfg.layers - 1 do x = run(l, x) end
  local hf = mod.call(cx, C.norm, x)
  nn.release(cx, mask and { mask, position_ids } or { position_ids }, m.cls .. ".forward returns")
  if hf ~= x then
    nn.release(cx, { x }, "model.norm: hidden_states reassigned")
    if r.inputs_embeds and r.inputs_embeds ~= x then
      nn.release(cx, { r.inputs_embeds }, m.cls .. ".forward returns: inputs_embeds")
    end
  end
  return hf
end

-- The tree of either family: Llama's, with the MLA attention, the dense MLPs or MoE blocks
-- (layers from first_k_dense_replace on), the norms' class and the model forward put in.
function F.CausalLM(cfg, router_forward)
  local cl = cfg.classes
  local root = llama.CausalLM(cfg, cl)
  local model = root.children.model
  model.forward = model_forward
  for l = 0, cfg.layers - 1 do
    local layer = model.children.layers.children[tostring(l)]
    local pre = "layers." .. l
    local attn = F.Attention(cfg, l, pre)
    layer.children.self_attn, attn.parent, attn.key = attn, layer, "self_attn"
    local mlp = l >= cfg.first_dense and F.MoE(cfg, pre, router_forward) or MLP(cfg, cfg.intermediate, pre .. ".mlp")
    layer.children.mlp, mlp.parent, mlp.key = mlp, layer, "mlp"
    -- a dense layer and a MoE layer are not alike (replicate.lua)
    layer.attn_type = l >= cfg.first_dense and "moe" or "dense"
  end
  mod.finalize(root)
  mod.walk(root, function(x)
    if x.cls == "LlamaRMSNorm" then x.cls = cl.norm end
  end)
  return root
end

F.tree = function(cfg) return F.CausalLM(cfg, router_v3) end

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

-- The keys both families read (MLA, the experts, the routing), with the class's defaults `d`, into
-- c (llama.config's reading of the rest). Keys of the released checkpoints that transformers does
-- not read (their own modeling code's) pass.
F.SHARED_KEYS = { q_lora_rank = 1, kv_lora_rank = 1, qk_rope_head_dim = 1, qk_nope_head_dim = 1, v_head_dim = 1,
                  n_routed_experts = 1, n_shared_experts = 1, moe_intermediate_size = 1, first_k_dense_replace = 1,
                  routed_scaling_factor = 1, n_group = 1, topk_group = 1, topk_method = 1, norm_topk_prob = 1,
                  num_experts_per_tok = 1, output_router_logits = 1, router_aux_loss_coef = 1,
                  -- read by DeepSeek's own remote code only
                  auto_map = 1, aux_loss_alpha = 1, seq_aux = 1, scoring_func = 1, moe_layer_freq = 1, ep_size = 1,
                  num_nextn_predict_layers = 1 }

function F.mla_config(hf, where, c, d)
  local H = require "models.hf"
  -- q_lora_rank: null is no query compression (q_proj, DeepSeek-V2-Lite). A key left out is the
  -- class default 1536 in transformers, but a config written as a Lua table (the oracle's
  -- scenarios, a scenario's own model.config) cannot hold a null, and the released configs give
  -- the key either way: a key left out is read as null, and a note says so
  c.notes = {}
  if hf.q_lora_rank ~= nil then c.q_rank = H.int(hf, "q_lora_rank", nil, where)
  elseif not H.is_null(hf, "q_lora_rank") then
    c.notes[#c.notes + 1] = "q_lora_rank absent from the config: read as null (q_proj, no query "
      .. "compression); transformers gives a config that leaves the key out the class default 1536: give it"
  end
  c.kv_rank = H.int(hf, "kv_lora_rank", 512, where)
  c.qk_rope = H.int(hf, "qk_rope_head_dim", 64, where)
  c.qk_nope = H.int(hf, "qk_nope_head_dim", 128, where)
  c.v_head = H.int(hf, "v_head_dim", 128, where)
  if c.qk_rope % 2 ~= 0 then error(where .. ": qk_rope_head_dim must be even (rotary pairs)", 0) end
  if c.kv_heads ~= c.heads then
    error(("%s: num_key_value_heads (%d) other than num_attention_heads (%d) is not modelled (MLA expands "
           .. "the latent to every head)"):format(where, c.kv_heads, c.heads), 0)
  end
  c.experts = H.int(hf, "n_routed_experts", d.n_routed_experts, where)
  c.n_shared = H.int(hf, "n_shared_experts", d.n_shared_experts, where)
  c.moe_intermediate = H.int(hf, "moe_intermediate_size", d.moe_intermediate_size, where)
  c.top_k = H.int(hf, "num_experts_per_tok", d.num_experts_per_tok, where)
  if c.top_k > c.experts then
    error(("%s: num_experts_per_tok (%d) exceeds n_routed_experts (%d)"):format(where, c.top_k, c.experts), 0)
  end
  local fk = hf.first_k_dense_replace
  c.first_dense = fk == 0 and 0 or H.int(hf, "first_k_dense_replace", d.first_k_dense_replace, where)
  c.routed_scaling = number(hf, "routed_scaling_factor", d.routed_scaling_factor, where)
  c.n_group = H.int(hf, "n_group", d.n_group, where)
  c.topk_group = H.int(hf, "topk_group", d.topk_group, where)
  if c.experts % c.n_group ~= 0 or c.topk_group > c.n_group then
    error(("%s: n_routed_experts (%d) must split into n_group (%d) groups of which topk_group (%d) are kept")
          :format(where, c.experts, c.n_group, c.topk_group), 0)
  end
  c.norm_topk_prob = H.bool(hf, "norm_topk_prob", d.norm_topk_prob, where)
  c.attention_bias = H.bool(hf, "attention_bias", false, where)
  if H.bool(hf, "output_router_logits", false, where) then
    error(where .. ": output_router_logits = true (the load-balancing auxiliary loss) is not modelled", 0)
  end
  local freq = hf.moe_layer_freq
  if freq ~= nil and freq ~= 1 then
    error(("%s: moe_layer_freq = %s is not modelled (transformers puts a MoE block in every layer from "
           .. "first_k_dense_replace on)"):format(where, tostring(freq)), 0)
  end
  local act = hf.hidden_act
  if act ~= nil and act ~= "silu" then
    error(("%s: hidden_act = %s is not modelled (silu)"):format(where, tostring(act)), 0)
  end
  local q = hf.quantization_config
  if q ~= nil then
    error(("%s: quantization_config (quant_method %s: the released FP8 weights) is not modelled: training "
           .. "loads a bf16 checkpoint (the same config without quantization_config)")
          :format(where, type(q) == "table" and tostring(q.quant_method) or "?"), 0)
  end
  return c
end

-- DeepseekV3Config's defaults (configuration_deepseek_v3.py, 5.25: DeepSeek-V3's shape).
function F.config(hf, where)
  local extra = { rope_interleave = 1, quantization_config = 1 }
  for k in pairs(F.SHARED_KEYS) do extra[k] = 1 end
  local llama_defaults = {
    hidden_size = 7168, intermediate_size = 18432, num_hidden_layers = 61, num_attention_heads = 128,
    num_key_value_heads = 128, vocab_size = 129280, tie_word_embeddings = false, attention_bias = false,
    head_dim = 64, extra_keys = extra,
  }
  local c = llama.config(hf, where, llama_defaults)
  F.mla_config(hf, where, c, { q_lora_rank = 1536, n_routed_experts = 256, n_shared_experts = 1,
                               moe_intermediate_size = 2048, num_experts_per_tok = 8, first_k_dense_replace = 3,
                               routed_scaling_factor = 2.5, n_group = 8, topk_group = 4, norm_topk_prob = true })
  local ri = hf.rope_interleave
  if ri ~= nil and ri ~= true then
    error(where .. ": rope_interleave = false (apply_rotary_pos_emb's rotate_half on the rope parts) is not modelled", 0)
  end
  local tm = hf.topk_method
  if tm ~= nil and tm ~= "noaux_tc" then
    error(("%s: topk_method = %s is not modelled (DeepseekV3TopkRouter's group-limited sigmoid routing, noaux_tc)")
          :format(where, tostring(tm)), 0)
  end
  local sf = hf.scoring_func
  if sf ~= nil and sf ~= "sigmoid" then
    error(("%s: scoring_func = %s: DeepseekV3TopkRouter scores with a sigmoid"):format(where, tostring(sf)), 0)
  end
  c.topk_method = "noaux_tc"
  c.classes = F.classes
  -- the sparse block, its router and experts (strategies/compile.lua names the block)
  c.moe_classes = { block = F.classes.moe, router = F.classes.router, experts = F.classes.experts }
  c.norm_cls = F.classes.norm
  return c
end

-- The attention implementation: eager, or SDPA (transformers' default for these classes) and
-- the SDPA backends it may be forced to (see the header); flash_attention_2 is not modelled.
-- Also the config's notes.
function F.attention(requested, notes, cfg)
  for _, n in ipairs(cfg.notes or {}) do notes[#notes + 1] = n end
  if requested == "eager" or requested == "sdpa" or requested == "cudnn" or requested == "mem_efficient" then
    return requested
  end
  error(("training.attention = \"%s\": %s's multi-head latent attention has a query/key head dim (%d) other "
         .. "than the values' (%d), which flash attention does not take (transformers' flash_attention_2 "
         .. "and SDPA's flash kernel alike); flex attention is not modelled either; use \"sdpa\" (the "
         .. "default) or \"eager\"")
        :format(tostring(requested), cfg.classes.lm, cfg.qk_nope + cfg.qk_rope, cfg.v_head), 0)
end

-- peft 0.21 on transformers 5 (utils/transformers_weight_conversion.py, _convert_peft_config_moe)
-- turns the MLP names (gate_proj, up_proj, down_proj) into target_parameters on the routed
-- experts' 3-D gate_up_proj / down_proj (strategies/lora.lua convert_moe_targets, modelled), and
-- the router's name (gate, and so "all-linear") into its fp32 gate.weight under a 2-D
-- ParamWrapper, which is not modelled: refused by name.
function F.check_lora(lora, cfg)
  local bad = lora.all_linear and "all-linear" or nil
  for _, t in ipairs(lora.targets or {}) do
    if t:match("([^.]+)$") == "gate" then bad = bad or t end
  end
  if bad then
    error(("training.lora.targets: \"%s\" on %s: peft 0.21 converts the router's name (\"all-linear\" "
           .. "includes it) into target_parameters on the fp32 router weight gate.weight (a 2-D "
           .. "lora.ParamWrapper), which is not modelled for this family; name the attention's Linears, "
           .. "e.g. { %s }, and the MLP names (gate_proj, up_proj, down_proj: converted to the routed "
           .. "experts' target_parameters) or training.lora.target_parameters")
          :format(bad, cfg.classes.lm, cfg.classes == F.classes and F.lora_example
                  or require("models.deepseek_v2").lora_example), 0)
  end
end

F.router_v3 = router_v3
F.group_limited = group_limited
F.choice_op = choice_op
return F
