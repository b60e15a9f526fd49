-- olmo2.lua: transformers' Olmo2ForCausalLM (models/olmo2/modeling_olmo2.py and
-- modular_olmo2.py, transformers 5.25): the Llama tree with the norms moved.
--   - Olmo2DecoderLayer has no input norm: the attention takes the layer's input as it is, and a
--     norm follows each block instead, on its output before the residual add:
--     `h = residual + post_attention_layernorm(self_attn(x))`, `out = h +
--     post_feedforward_layernorm(mlp(h))`; made in the order self_attn, mlp,
--     post_attention_layernorm, post_feedforward_layernorm;
--   - Olmo2Attention: q_norm and k_norm over the whole q and k projections (heads * head_dim and
--     kv_heads * head_dim wide, not per head), before the split into heads and RoPE;
--   - Olmo2RMSNorm: `(self.weight * hidden_states).to(input_dtype)`, the weight multiplied into the
--     fp32 normalized input and the fp32 product cast back (blocks/rmsnorm.lua), on every norm,
--     the final one too;
--   - Olmo2RotaryEmbedding returns its cos and sin in fp32, so apply_rotary_pos_emb's products
--     and sums are fp32 and `q_embed.to(q_type), k_embed.to(k_type)` casts them back;
--   - a 100,352-token vocabulary; SiLU MLP, embedding, masks and head as Llama's.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local llama = require "models.llama"
local rmsnorm = require "models.blocks.rmsnorm"

local F = {}
F.architectures = { "Olmo2ForCausalLM" }
F.model_type = "olmo2"
-- peft's LoRA has no default target modules for this model type (peft 0.21)
F.peft_targets = false
F.lora_example = '"q_proj", "v_proj"'
F.classes = { lm = "Olmo2ForCausalLM", model = "Olmo2Model", layer = "Olmo2DecoderLayer", norm = "Olmo2RMSNorm" }

-- Olmo2DecoderLayer.forward(hidden_states, attention_mask, position_embeddings).
local function decoder_layer_forward(cx, m, x, mask, cos, sin)
  local pre = m.opname
  local residual = x
  local C = m.children
  -- `hidden_states, _ = self.self_attn(hidden_states=hidden_states, ...)`: on the layer's input
  local o, attn_weights = mod.call(cx, C.self_attn, x, cos, sin, mask)
  -- `hidden_states = self.post_attention_layernorm(hidden_states)`: the attention's output lives
  -- until the norm returns
  local pa = mod.call(cx, C.post_attention_layernorm, o)
  nn.release(cx, { o }, pre .. ": hidden_states reassigned")
  local h1 = llama.residual_add(cx, pre .. ".residual_add1", pre .. ".h1", residual, pa)
  local d = mod.call(cx, C.mlp, h1)
  local pf = mod.call(cx, C.post_feedforward_layernorm, d)
  nn.release(cx, { d }, pre .. ": hidden_states reassigned")
  local out = llama.residual_add(cx, pre .. ".residual_add2", pre .. ".out", h1, pf, { pf, h1 })
  llama.layer_returns(cx, pre, residual, attn_weights)
  return out
end

local function DecoderLayer(cfg, l)
  local pre = "layers." .. l
  local m = mod.new(F.classes.layer, decoder_layer_forward, { opname = pre, layer = l, dm_key = l })
  m:add("self_attn", llama.Attention(cfg, l, pre))
  m:add("mlp", llama.MLP(cfg, pre))
  m:add("post_attention_layernorm", llama.RMSNorm(pre .. ".post_attention_layernorm", cfg.hidden, cfg.norm_cls))
  m:add("post_feedforward_layernorm", llama.RMSNorm(pre .. ".post_feedforward_layernorm", cfg.hidden, cfg.norm_cls))
  return m
end

-- Olmo2Config's defaults (configuration_olmo2.py, 5.25).
function F.config(hf, where)
  local c = llama.config(hf, where, {
    hidden_size = 4096, intermediate_size = 11008, num_hidden_layers = 32, num_attention_heads = 32,
    vocab_size = 50304, tie_word_embeddings = false,
  })
  c.qk_norm = "proj"
  -- Olmo2RotaryEmbedding.forward returns fp32 cos and sin (no `.to(x.dtype)`), and
  -- apply_rotary_pos_emb rotates in fp32 and casts q and k back (modeling_olmo2.py)
  c.rotary_fp32 = true
  c.norm_cls = F.classes.norm
  return c
end

function F.tree(cfg)
  local root = llama.CausalLM(cfg, F.classes)
  local layers = root.children.model.children.layers
  for l = 0, cfg.layers - 1 do
    local m = DecoderLayer(cfg, l)
    layers.children[tostring(l)], m.parent, m.key = m, layers, tostring(l)
  end
  mod.finalize(root)
  mod.walk(root, function(x)
    if x.cls == "LlamaRMSNorm" or x.cls == cfg.norm_cls then x.cls, x.forward = cfg.norm_cls, rmsnorm.forward end
  end)
  return root
end

return F
