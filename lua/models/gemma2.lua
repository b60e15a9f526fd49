-- gemma2.lua: transformers' Gemma2ForCausalLM (models/gemma2/modeling_gemma2.py and
-- modular_gemma2.py, transformers 5.25), and the Gemma modules Gemma 3 shares (gemma3.lua). The
-- tree is Llama's (llama.lua) with:
--   - Gemma2TextScaledWordEmbedding: the embedding times embed_scale = sqrt(hidden_size), a 0-dim
--     fp32 buffer cast to the weight's dtype, multiplied in as an op of its own;
--   - Gemma2RMSNorm (blocks/rmsnorm.lua): x.float(), normalized in fp32, then times
--     (1 + weight.float()) in fp32 and only then cast back (Llama casts first and multiplies in the input's dtype): the product's
--     backward keeps the fp32 normalized input, and the weight side is two (hidden,) fp32 copies;
--   - four norms a layer: input_layernorm, post_attention_layernorm (on the attention's output,
--     before the residual add), pre_feedforward_layernorm, post_feedforward_layernorm (on the
--     MLP's output);
--   - the MLP's act_fn gelu_pytorch_tanh (F.gelu(approximate="tanh"): one kernel, saves its input);
--   - alternating layer kinds (config.layer_types; by default even layers "sliding_attention",
--     odd "full_attention"), each with its mask from causal_mask_mapping;
--   - attention logit soft-capping (scores / cap, tanh, * cap, before the mask) and final logit
--     soft-capping (the same on the logits, before the loss);
--   - tied embeddings, 256,000-token vocabulary, head_dim 256, query_pre_attn_scalar ** -0.5 as the
--     attention's scaling (a Python float: no tensor).
-- Attention: Gemma2PreTrainedModel sets `_supports_sdpa = False` ("sdpa does not support
-- softcapping"), so from_pretrained's default attn_implementation (get_correct_attn_implementation:
-- "sdpa", falling back to "eager" where the class cannot dispatch it) is eager, whatever the
-- soft-capping: eager_attention_forward with repeat_kv copies, the (b, heads, s, s) scores, the
-- soft-cap's three tensors (tanh's output saved), the additive mask, the fp32 softmax (saved) and
-- its cast back. Asked for SDPA by name transformers raises; flash_attention_2 and flex_attention
-- are not modelled.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local llama = require "models.llama"
local rmsnorm = require "models.blocks.rmsnorm"

local F = {}
F.architectures = { "Gemma2ForCausalLM" }
F.model_type = "gemma2"
F.classes = { lm = "Gemma2ForCausalLM", model = "Gemma2Model", layer = "Gemma2DecoderLayer",
              norm = "Gemma2RMSNorm", embed = "Gemma2TextScaledWordEmbedding" }

-- ---- the modules ------------------------------------------------------------------------------

-- Gemma2TextScaledWordEmbedding.forward: nn.Embedding's gather, then
-- `* self.embed_scale.to(self.weight.dtype)`: the 0-dim buffer sqrt(hidden_size), made in fp32 and
-- cast with the parameters by model.to(dtype) (Module._apply casts floating buffers too), so it is
-- already in the weight's dtype and `.to` makes no tensor; only a weight in another dtype than the
-- parameters' (FSDP2's param_dtype) casts it (oracle gemma3_4b_l2_bf16: no cast in the forward),
-- then a multiply that makes the
-- scaled embeddings, a new (b, s, hidden) tensor; the unscaled one is dropped (MulBackward0
-- keeps only the scalar). The 4-byte buffer itself is left out, as the rotary inv_freq buffers
-- are (llama.lua).
local function embedding_forward(cx, m, ids)
  local e = llama.embedding_forward(cx, m, ids)
  local scale = {}
  if e.dtype ~= cx.run.param_dtype then
    scale[1] = nn.op(cx, { name = "embed_tokens.embed_scale_cast", kind = "cast_down", inputs = {},
                           outs = { { "embed_tokens.embed_scale", {}, e.dtype, no_grad = true } } })
  end
  local inputs = { e, scale[1] }
  return nn.op(cx, { name = "embed_tokens.embed_scale", inputs = inputs,
                     outs = { { "inputs_embeds_scaled", e.shape, e.dtype } },
                     saves = scale, grads = { { dtype = e.dtype }, "none" }, flops = nn.numel(e.shape) })
end

-- Gemma2DecoderLayer.forward(hidden_states, position_embeddings, attention_mask): the attention
-- between input_layernorm and post_attention_layernorm, the MLP between pre_feedforward_layernorm
-- and post_feedforward_layernorm, a residual add after each.
local function decoder_layer_forward(cx, m, x, mask, cos, sin)
  local pre = m.opname
  local residual = x
  local C = m.children
  local hn = mod.call(cx, C.input_layernorm, x)
  -- `hidden_states, _ = self.self_attn(...)`
  local o, attn_weights = mod.call(cx, C.self_attn, hn, cos, sin, mask)
  nn.release(cx, { hn }, pre .. ": hidden_states reassigned")
  -- `hidden_states = self.post_attention_layernorm(hidden_states)`: the attention's output lives
  -- until the norm returns
  local pa = mod.call(cx, C.post_attention_layernorm, o)
  nn.release(cx, { o }, pre .. ": hidden_states reassigned")
  local h1 = llama.residual_add(cx, pre .. ".residual_add1", pre .. ".h1", residual, pa)
  local hn2 = mod.call(cx, C.pre_feedforward_layernorm, h1)
  local d = mod.call(cx, C.mlp, hn2)
  nn.release(cx, { hn2 }, pre .. ": hidden_states reassigned")
  local pf = mod.call(cx, C.post_feedforward_layernorm, d)
  nn.release(cx, { d }, pre .. ": hidden_states reassigned")
  local out = llama.residual_add(cx, pre .. ".residual_add2", pre .. ".out", h1, pf, { pf, h1 })
  llama.layer_returns(cx, pre, residual, attn_weights)
  return out
end

-- The masks of causal_mask_mapping (create_causal_mask, create_sliding_window_causal_mask), as
-- llama.lua makes its one: under eager a boolean (1, 1, s, s) mask then the additive (b, 1, s, s)
-- one in the mask dtype, for each kind; under SDPA none for full attention (is_causal) and, for
-- sliding attention, a boolean (b, 1, s, s) mask once the sequence is as long as the window.
local function make_mask(cx, r, kind, window, mask_dtype)
  local b, s = r.batch, r.seq
  local name = kind == "sliding_attention" and "sliding_window_mask" or "causal_mask"
  if r.attention == "eager" then
    local allowed = nn.op(cx, { name = name .. ".bool", inputs = {},
                                outs = { { name .. ".bool", { 1, 1, s, s }, "bool" } } })
    return nn.op(cx, { name = name, inputs = { allowed }, outs = { { name, { b, 1, s, s }, mask_dtype } } })
  end
  -- masking_utils' _ignore_causal_mask_sdpa keeps the is_causal shortcut only while
  -- `kv_length < local_attention_size`: at a sequence as long as the window the mask is made,
  -- though it allows what causal does (oracle gemma3_4b_l2_bf16, 1024 tokens)
  if kind == "sliding_attention" and window <= s then
    return nn.op(cx, { name = name, inputs = {}, outs = { { name, { b, 1, s, s }, "bool", no_grad = true } } })
  end
  return nil
end

-- The kinds of layer in the order transformers first meets them (Gemma 3 makes a rotary table per
-- kind in `set(layer_types)` order, which Python's string hashing varies run to run: the tables
-- are (1, s, head_dim), and their order moves no peak).
local function kinds_of(cfg)
  local seen, kinds = {}, {}
  for _, t in ipairs(cfg.layer_types) do
    if not seen[t] then seen[t] = true; kinds[#kinds + 1] = t end
  end
  table.sort(kinds)
  return kinds
end

-- Gemma2Model.forward / Gemma3TextModel.forward(input_ids): the scaled embeddings, the mask of
-- each kind, the rotary tables (one set for Gemma 2; one per kind for Gemma 3, whose sliding layers
-- use rope_local_base_freq), the layers, each with its kind's mask and tables, the final norm.
local function model_forward(cx, m, ids)
  local r = cx.run
  local C = m.children
  local cfg = m.cfg
  local x = mod.call(cx, C.embed_tokens, ids)
  r.inputs_embeds = x
  local dt = x and x.dtype or r.hidden_dtype
  -- the masks are made in inputs_embeds' dtype (masking_utils.py), fp32 under autocast too
  local mdt = r.param_dtype
  -- position_ids = arange(seq) + past_seen_tokens, unsqueezed (int64, alive until the model
  -- returns), made before the masks, as in llama.lua; the rotary forward copies them to fp32
  local ar = nn.op(cx, { name = "position_ids.arange", inputs = {},
                         outs = { { "position_ids.arange", { r.seq }, "int64", no_grad = true } } })
  local position_ids = nn.op(cx, { name = "position_ids", inputs = { ar },
                                   outs = { { "position_ids", { 1, r.seq }, "int64", no_grad = true } } })
  local masks = {}
  for _, kind in ipairs { "full_attention", "sliding_attention" } do
    masks[kind] = make_mask(cx, r, kind, cfg.sliding_window, mdt)
  end
  local cos, sin = {}, {}
  if cfg.rope_per_kind then
    for _, kind in ipairs(kinds_of(cfg)) do
      cos[kind], sin[kind] = llama.rotary_tables(cx, r.seq, cfg.head_dim, dt, "rotary." .. kind,
                                                 position_ids, r.param_dtype)
    end
  else
    local c1, s1 = llama.rotary_tables(cx, r.seq, cfg.head_dim, dt, nil, position_ids, r.param_dtype)
    for _, kind in ipairs(kinds_of(cfg)) do cos[kind], sin[kind] = c1, s1 end
  end
  local layers = {}
  for l = 0, cfg.layers - 1 do layers[l + 1] = C.layers.children[tostring(l)] end
  local run = require("vrsim.replicate").stack(cx, layers, function(l, h)
    local kind = cfg.layer_types[l + 1]
    return mod.call(cx, layers[l + 1], h, masks[kind], cos[kind], sin[kind])
  end)
  for l = 0, cfg.layers - 1 do x = run(l, x) end
  -- causal_mask_mapping keeps an SDPA mask until the model returns
  if r.attention ~= "eager" and masks.sliding_attention then
    nn.release(cx, { masks.sliding_attention }, "sliding_window_mask: " .. m.cls .. ".forward returns")
  end
  nn.release(cx, { position_ids }, "position_ids: " .. m.cls .. ".forward returns")
  local hf = mod.call(cx, C.norm, x)
  if hf ~= x then
    nn.release(cx, { x }, "model.norm: hidden_states reassigned")
    if r.inputs_embeds and r.inputs_embeds ~= x then
      nn.release(cx, { r.inputs_embeds }, m.cls .. ".forward returns: inputs_embeds")
    end
  end
  return hf
end

-- Gemma2ForCausalLM.forward(input_ids, labels=input_ids): the model, the head, the final logit
-- soft-capping (logits / cap, tanh, * cap: each a new (b, s, vocab) tensor in the logits' dtype,
-- tanh's output kept for its backward), the loss.
local function causal_lm_forward(cx, m, ids)
  local r = cx.run
  if not r.inference and r.loss ~= "full" then
    -- the fused and chunked losses (vrsim/lm_loss.lua) are built on Llama's head, without the
    -- soft-capping between the head and the loss
    error(("training.loss = \"%s\" is not modelled for %s (vrsim builds it on Llama's head, not on "
           .. "this family's); use loss = \"full\""):format(r.loss, m.cls), 0)
  end
  local hf = mod.call(cx, m.children.model, ids)
  if not hf then return nil end
  local logits = mod.call(cx, m.children.lm_head, hf)
  if not logits or logits == hf then return nil end
  local cap = m.cfg.final_softcap
  if cap then
    local v = logits.shape
    local d = nn.op(cx, { name = "final_softcap.div", inputs = { logits },
                          outs = { { "logits.softcap_div", v, logits.dtype } }, flops = nn.numel(v) })
    local t = nn.op(cx, { name = "final_softcap.tanh", inputs = { d },
                          outs = { { "logits.softcap_tanh", v, logits.dtype } }, save_outs = { 1 },
                          flops = nn.numel(v) })
    logits = nn.op(cx, { name = "final_softcap.mul", inputs = { t },
                         outs = { { "logits.softcapped", v, logits.dtype } }, flops = nn.numel(v) })
  end
  -- CausalLMOutputWithPast.logits lives until the output object is dropped (before transformers
  -- 4.46 the soft-capped logits upcast to fp32 first: llama.output_logits)
  logits = llama.output_logits(cx, logits)
  if r.inference then return logits end
  local loss = llama.causal_lm_loss(cx, logits, r.batch, r.seq, r.compile_loss, ids)
  nn.release(cx, { hf }, m.cls .. ".forward returns: hidden_states")
  return loss
end

-- The Gemma tree from a normalized config: Llama's, with the modules above put in. `classes` names
-- the family's classes (Gemma2*, Gemma3*).
function F.CausalLM(cfg, classes)
  local root = llama.CausalLM(cfg, classes)
  root.forward = causal_lm_forward
  local model = root.children.model
  model.forward = model_forward
  local embed = model.children.embed_tokens
  embed.cls, embed.forward = classes.embed, embedding_forward
  for l = 0, cfg.layers - 1 do
    local layer = model.children.layers.children[tostring(l)]
    local pre = "layers." .. l
    -- __init__ order: self_attn, mlp, input_layernorm, post_attention_layernorm,
    -- pre_feedforward_layernorm, post_feedforward_layernorm
    layer:add("pre_feedforward_layernorm", llama.RMSNorm(pre .. ".pre_feedforward_layernorm", cfg.hidden))
    layer:add("post_feedforward_layernorm", llama.RMSNorm(pre .. ".post_feedforward_layernorm", cfg.hidden))
    layer.forward = decoder_layer_forward
    -- the kind of layer: two layers of different kinds are not alike (replicate.lua)
    layer.attn_type = cfg.layer_types[l + 1]
    layer.children.mlp.act = "gelu_tanh"
  end
  mod.finalize(root)
  mod.walk(root, function(x)
    if x.cls == "LlamaRMSNorm" or x.cls == cfg.norm_cls then x.cls, x.forward, x.one_plus = classes.norm, rmsnorm.forward, true end
  end)
  return root
end

-- ---- the config -------------------------------------------------------------------------------

-- config.layer_types, checked, or the default pattern: a layer is "full_attention" when (i + 1) is
-- a multiple of `every` (Gemma 2: 2; Gemma 3: sliding_window_pattern, 6), else sliding.
function F.layer_types(hf, where, layers, every)
  local types = {}
  if hf.layer_types ~= nil then
    if type(hf.layer_types) ~= "table" or #hf.layer_types ~= layers then
      error(("%s: layer_types must list one kind per layer (%d)"):format(where, layers), 0)
    end
    for i, t in ipairs(hf.layer_types) do
      if t ~= "full_attention" and t ~= "sliding_attention" then
        error(("%s: layer_types[%d] = %s is not modelled (full_attention or sliding_attention)")
              :format(where, i - 1, tostring(t)), 0)
      end
      types[i] = t
    end
    return types
  end
  for i = 0, layers - 1 do types[i + 1] = (i + 1) % every ~= 0 and "sliding_attention" or "full_attention" end
  return types
end

-- A soft-capping value of config key k: a positive number, null (none), or absent for the class
-- default `def` (nil: none).
function F.softcap(hf, k, def, where)
  local v = hf[k]
  if require("models.hf").is_null(hf, k) then return nil end
  if v == nil then return def end
  if type(v) ~= "number" or v ~= v or v <= 0 then
    error(("%s: %s must be a positive number or null (got %s)"):format(where, k, tostring(v)), 0)
  end
  return v
end

-- What Gemma's config classes share: the tree's fields from LlamaConfig's reader with the class's
-- defaults, the checks transformers makes, and the keys vrsim reads beyond Llama's.
function F.gemma_config(hf, where, defaults)
  local H = require "models.hf"
  defaults.extra_keys = { hidden_activation = 1, query_pre_attn_scalar = 1, final_logit_softcapping = 1,
                          attn_logit_softcapping = 1, sliding_window_size = 1, cache_implementation = 1,
                          use_bidirectional_attention = 0, sliding_window_pattern = 1,
                          rope_local_base_freq = 1 }
  local c = llama.config(hf, where, defaults)
  -- validate_architecture: hidden_size a multiple of num_attention_heads, head_dim apart
  if c.hidden % c.heads ~= 0 then
    error(("%s: hidden_size (%d) must be a multiple of num_attention_heads (%d), as transformers checks")
          :format(where, c.hidden, c.heads), 0)
  end
  local act = hf.hidden_activation
  if act ~= nil and act ~= "gelu_pytorch_tanh" then
    error(("%s: hidden_activation = %s is not modelled (gelu_pytorch_tanh)"):format(where, tostring(act)), 0)
  end
  local q = hf.query_pre_attn_scalar
  if q ~= nil and (type(q) ~= "number" or q <= 0) then
    error(("%s: query_pre_attn_scalar must be a positive number"):format(where), 0)
  end
  c.sliding_window = H.int(hf, "sliding_window", 4096, where)
  return c
end

-- Gemma2Config's defaults (configuration_gemma2.py, 5.25: the 2B shape).
function F.config(hf, where)
  local c = F.gemma_config(hf, where, {
    hidden_size = 2304, intermediate_size = 9216, num_hidden_layers = 26, num_attention_heads = 8,
    num_key_value_heads = 4, head_dim = 256, vocab_size = 256000, tie_word_embeddings = true,
    attention_bias = false,
  })
  c.layer_types = F.layer_types(hf, where, c.layers, 2)
  c.attn_softcap = F.softcap(hf, "attn_logit_softcapping", 50.0, where)
  c.final_softcap = F.softcap(hf, "final_logit_softcapping", 30.0, where)
  c.softcap_assumed = {}
  for _, k in ipairs { "attn_logit_softcapping", "final_logit_softcapping" } do
    if hf[k] == nil and not require("models.hf").is_null(hf, k) then c.softcap_assumed[#c.softcap_assumed + 1] = k end
  end
  c.norm_cls = F.classes.norm
  return c
end

-- The attention implementation from_pretrained gives Gemma2ForCausalLM for what the scenario asks
-- (training.attention): eager in place of the default SDPA, a note saying so; SDPA asked for by
-- kernel is an error, as transformers raises for attn_implementation="sdpa" on this class.
function F.attention(requested, notes, cfg)
  for _, k in ipairs(cfg.softcap_assumed or {}) do
    notes[#notes + 1] = ("%s absent from the config: Gemma2Config's default applies, as in transformers "
                         .. "(a null there is no soft-capping)"):format(k)
  end
  if requested == "eager" then return "eager" end
  if requested == "sdpa" then
    notes[#notes + 1] = "Gemma2ForCausalLM does not run SDPA (_supports_sdpa = False: SDPA has no logit "
      .. "soft-capping): from_pretrained falls back to eager attention, which keeps the (b, heads, s, s) "
      .. "attention probabilities and the soft-cap's tanh output"
    return "eager"
  end
  error(("training.attention = \"%s\": Gemma2ForCausalLM does not run SDPA (_supports_sdpa = False, "
         .. "transformers raises for it); its flash_attention_2 and flex_attention are not modelled: use "
         .. "\"eager\" (the default it falls back to)"):format(tostring(requested)), 0)
end

F.tree = function(cfg) return F.CausalLM(cfg, F.classes) end
return F
