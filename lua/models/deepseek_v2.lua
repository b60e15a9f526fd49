-- deepseek_v2.lua: transformers' DeepseekV2ForCausalLM (5.25, models/deepseek_v2/modeling_deepseek_v2.py
-- and modular_deepseek_v2.py): DeepSeek-V3's tree (deepseek_v3.lua: multi-head latent attention,
-- dense layers before first_k_dense_replace, routed experts by grouped_mm plus shared experts),
-- with V2's own
--   - rotary embedding in complex numbers: DeepseekV2RotaryEmbedding makes freqs_cis =
--     polar(ones_like(freqs), freqs) * attention_scaling (complex64, (1, s, r / 2)), and
--     apply_rotary_emb takes q_pe and k_pe to fp32 copies, views them as complex, multiplies by
--     freqs_cis (a complex64 product each) and casts the real view back (type_as);
--   - router (DeepseekV2TopkRouter): F.linear on an fp32 copy of the input with its fp32 weight
--     (_keep_in_fp32_modules_strict), softmax in fp32, then topk_method "greedy" (top-k of the
--     scores) or "group_limited_greedy" (each group's max, the topk_group best groups kept by a
--     mask, masked_fill with 0, top-k), the weights times routed_scaling_factor; no
--     renormalisation (norm_topk_prob is not read by its forward).
-- A complex64 tensor is held as fp32 of twice the last dimension: the same bytes.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local llama = require "models.llama"
local v3 = require "models.deepseek_v3"

local F = {}
F.architectures = { "DeepseekV2ForCausalLM" }
F.model_type = "deepseek_v2"
F.classes = { lm = "DeepseekV2ForCausalLM", model = "DeepseekV2Model", layer = "DeepseekV2DecoderLayer",
              attn = "DeepseekV2Attention", norm = "DeepseekV2RMSNorm", mlp = "DeepseekV2MLP",
              moe = "DeepseekV2Moe", router = "DeepseekV2TopkRouter", experts = "DeepseekV2Experts" }
F.peft_targets = false
F.lora_example = '"q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"'

local W = mod.weight

-- DeepseekV2RotaryEmbedding.forward: freqs = `position_ids[..., None].float() * inv_freq.to(float)`
-- (the buffer copied where the parameters' cast made it bf16), ones_like(freqs), polar (complex64;
-- the ones dropped), times attention_scaling (the polar dropped). Returns freqs_cis.
function F.rotary_tables(cx, position_ids, s, d, buf_dtype)
  local P = "rotary"
  local pos = nn.op(cx, { name = P .. ".position_ids_float", kind = "copy", inputs = { position_ids }, frees = {},
                          outs = { { P .. ".position_ids_float", { 1, s, 1 }, "fp32", no_grad = true } } })
  local inputs = { pos }
  if buf_dtype ~= "fp32" then
    inputs[2] = nn.op(cx, { name = P .. ".inv_freq_float", kind = "copy", inputs = {},
                            outs = { { P .. ".inv_freq_float", { d // 2 }, "fp32", no_grad = true } } })
  end
  local freqs = nn.op(cx, { name = P .. ".freqs", inputs = inputs, outs = { { P .. ".freqs", { 1, s, d // 2 }, "fp32" } } })
  local ones = nn.op(cx, { name = P .. ".ones_like", inputs = {}, outs = { { P .. ".ones", freqs.shape, "fp32", no_grad = true } } })
  local polar = nn.op(cx, { name = P .. ".polar", inputs = { ones, freqs }, frees = { ones },
                            outs = { { P .. ".polar (complex64)", { 1, s, d }, "fp32" } } })
  local cis = nn.op(cx, { name = P .. ".freqs_cis", inputs = { polar },
                          outs = { { P .. ".freqs_cis (complex64)", { 1, s, d }, "fp32" } } })
  nn.release(cx, { freqs }, P .. ": rotary_emb returns")
  return cis
end

-- apply_rotary_emb(q_pe (b, heads, s, r), k_pe (b, 1, s, r), freqs_cis): `x.float()` of each
-- (fp32 copies, alive until the function returns), view_as_complex (views), `x_ * freqs_cis` (a
-- complex64 product; MulBackward0 keeps freqs_cis), view_as_real(...).flatten(3).type_as(x): the
-- cast back to the input's dtype, the product dropped.
-- q_grad_permuted: q's gradient comes back laid out as (b, s, heads, r) (the memory-efficient
-- SDPA kernel's dq is made in its BMHK order; the query cat's backward slices it), so the
-- type_as's backward (an fp32 copy keeping that order) is not contiguous and ViewAsRealBackward0
-- (`view_as_complex(grad.contiguous())`) copies it once more, in fp32, before the product's
-- backward (the oracle's deepseek_v2_lite_l2_bf16_sdpa_efficient).
function F.rotary_complex(cx, pre, q, k, cis, q_grad_permuted)
  local q32 = nn.op(cx, { name = pre .. ".q_pe.float", kind = "cast_up", inputs = { q }, frees = {},
                          outs = { { pre .. ".q_pe_float", q.shape, "fp32" } }, grads = { { dtype = q.dtype } } })
  local k32 = nn.op(cx, { name = pre .. ".k_pe.float", kind = "cast_up", inputs = { k }, frees = {},
                          outs = { { pre .. ".k_pe_float", k.shape, "fp32" } }, grads = { { dtype = k.dtype } } })
  local function rotate(x32, x, what, permuted)
    -- its backward is grad * freqs_cis.conj(): the conjugate resolved into a copy first (after
    -- the gradient's contiguous copy where it has one)
    local ws = { nn.bytes(cis.shape, cis.dtype) }
    if permuted then table.insert(ws, 1, nn.bytes(x32.shape, "fp32")) end
    local c = nn.op(cx, { name = pre .. "." .. what .. "_rotary", kind = "broadcast", inputs = { x32, cis },
                          outs = { { pre .. "." .. what .. "_rotary (complex64)", x32.shape, "fp32" } },
                          saves = { cis }, grads = { "new", "none" }, frees = {}, flops = 6 * nn.numel(x32.shape),
                          bwd_workspace = ws, bwd_workspace_first = true })
    return nn.cast(cx, c, x.dtype, pre .. "." .. what .. "_rotary.type_as", pre .. "." .. what .. "_embed")
  end
  local qe = rotate(q32, q, "q", q_grad_permuted)
  local ke = rotate(k32, k, "k")
  -- the function's locals (the fp32 copies) go as it returns
  nn.release(cx, { q32, k32 }, pre .. ": apply_rotary_emb returns")
  nn.release(cx, { q, k }, pre .. ": q_pe, k_pe reassigned")
  return qe, ke
end

-- DeepseekV2TopkRouter.forward(hidden_states (t, hidden)). Returns the logits (bound to `_` until
-- the block returns), the top-k weights (fp32) and indices.
local function router_v2(cx, m, hs)
  local r, pre = m.router, m.opname
  local t, ne, k = hs.shape[1], r.experts, r.top_k
  local x32 = nn.to(cx, hs, "fp32", pre .. ".input_float")
  local w = W(cx, m.p.weight)
  local w32 = w.dtype == "fp32" and w or nn.cast(cx, w, "fp32", pre .. ".weight_float", nil, true)
  local logits = nn.linear(cx, pre, x32, w32)
  -- under torch.compile, Inductor's decomposition of the softmax reduces each row twice (its
  -- max, then the sum of the exponentials): two (t, 1) reductions the partitioner may save in
  -- place of the probabilities (models/moe.lua's router; validation/oracle/captures/
  -- compile_moe_l1.json, deepseek_v2_glg_bf16: amax, sum_1)
  local sm_in = { logits }
  if cx.compiling then
    for _, stat in ipairs({ "amax", "sum_exp" }) do
      sm_in[#sm_in + 1] = nn.op(cx, { name = pre .. ".softmax." .. stat, kind = "reduce_rows",
                                      inputs = { logits }, grads = { "none" },
                                      outs = { { pre .. ".softmax." .. stat, { t, 1 }, "fp32", no_grad = true } } })
    end
  end
  -- softmax(dim=-1, dtype=float32): its output kept; its CUDA backward first makes `grad * output`
  local scores = nn.op(cx, { name = pre .. ".softmax", kind = "softmax", inputs = sm_in, frees = {},
                             outs = { { pre .. ".scores", { t, ne }, "fp32" } }, save_outs = { 1 },
                             grads = { { dtype = "fp32" }, "none", "none" },
                             bwd_workspace = { nn.bytes({ t, ne }, "fp32") } })
  local keep = {}
  local pick = scores
  if r.method == "group_limited_greedy" then
    local G = r.groups
    local masked
    masked, keep = v3.group_limited(cx, pre, scores, r, {}, function(kept)
      -- scores.view(t, groups, E / groups).max(dim=-1).values: the indices stay with the graph
      local gs, gi = v3.choice_op(cx, pre .. ".group_max", { scores },
        { { pre .. ".group_scores", { t, G }, "fp32" }, { pre .. ".group_max_idx", { t, G }, "int64" } }, {})
      kept[#kept + 1] = gi
      return gs
    end, true)
    pick = masked
    keep[#keep + 1] = masked
  end
  -- torch.topk(scores, k, sorted=False): TopkBackward0 keeps the indices and scatters into zeros
  -- of the scores' shape (aten.topk is outside torch.compile's recomputable allowlist)
  local tw, ti = nn.op(cx, { name = pre .. ".topk", inputs = { pick },
                             outs = { { pre .. ".topk_weights", { t, k }, "fp32" },
                                      { pre .. ".topk_indices", { t, k }, "int64", no_grad = true } },
                             save_outs = { 2 }, compile_extern = true, frees = {} })
  local scaled = nn.ew(cx, pre .. ".routed_scaling", { tw }, "fp32")
  keep[#keep + 1] = scores
  nn.release(cx, keep, pre .. ": returns")
  return logits, scaled, ti
end

F.tree = function(cfg) return v3.CausalLM(cfg, router_v2) end

-- DeepseekV2Config's defaults (configuration_deepseek_v2.py, 5.25).
function F.config(hf, where)
  local H = require "models.hf"
  local extra = { mlp_bias = 1 }
  for k in pairs(v3.SHARED_KEYS) do extra[k] = 1 end
  local c = llama.config(hf, where, {
    hidden_size = 4096, intermediate_size = 11008, num_hidden_layers = 32, num_attention_heads = 32,
    vocab_size = 102400, tie_word_embeddings = false, attention_bias = false, head_dim = 64, extra_keys = extra,
  })
  local method = hf.topk_method or "greedy"
  if method ~= "greedy" and method ~= "group_limited_greedy" then
    error(("%s: topk_method = %s is not modelled (DeepseekV2TopkRouter's greedy and group_limited_greedy are)")
          :format(where, tostring(method)), 0)
  end
  if hf.num_experts_per_tok == nil then
    error(where .. ": num_experts_per_tok is required (DeepseekV2Config's default is None)", 0)
  end
  if method == "group_limited_greedy" and (hf.n_group == nil or hf.topk_group == nil) then
    error(where .. ": topk_method group_limited_greedy needs n_group and topk_group", 0)
  end
  v3.mla_config(hf, where, c, { n_routed_experts = 64, n_shared_experts = 2, moe_intermediate_size = 1407,
                                first_k_dense_replace = 0, routed_scaling_factor = 1.0, n_group = 1, topk_group = 1,
                                norm_topk_prob = false })
  c.topk_method = method
  local sf = hf.scoring_func
  if sf ~= nil and sf ~= "softmax" then
    error(("%s: scoring_func = %s: DeepseekV2TopkRouter scores with a softmax"):format(where, tostring(sf)), 0)
  end
  c.rope_complex = true
  c.classes = F.classes
  -- the sparse block, its router and experts (strategies/compile.lua names the block)
  c.moe_classes = { block = F.classes.moe, router = F.classes.router, experts = F.classes.experts }
  c.norm_cls = F.classes.norm
  return c
end

F.attention = v3.attention
F.check_lora = v3.check_lora
return F
