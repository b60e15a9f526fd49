-- gemma3.lua: transformers' Gemma3ForCausalLM on a Gemma3TextConfig (model_type "gemma3_text";
-- models/gemma3/modeling_gemma3.py and modular_gemma3.py, transformers 5.25), the text model
-- alone. modular_gemma3.py derives it from Gemma 2 (gemma2.lua: the scaled embedding, GemmaRMSNorm
-- in fp32 with (1 + weight), four norms a layer, the GELU-tanh MLP, tied head), and changes:
--   - q_norm and k_norm (Gemma3RMSNorm over head_dim) on q and k after the transpose, before RoPE;
--   - five sliding layers to one global (sliding_window_pattern 6; config.layer_types), a 1024-token
--     window in the released configs;
--   - a rotary table per kind of layer: the sliding layers' from rope_local_base_freq (10,000),
--     the global layers' from rope_theta (1,000,000, with the config's rope_scaling);
--   - no attention soft-capping: Gemma3Attention passes no softcap to the attention (a config's
--     attn_logit_softcapping changes nothing), so SDPA runs (`_supports_sdpa = True`), with a
--     boolean mask on the sliding layers once the sequence is longer than the window; final
--     logit soft-capping only where the config sets it (null in the released configs);
--   - a 262,208-token vocabulary.
-- Gemma3ForConditionalGeneration (the multimodal checkpoints' class, model_type "gemma3": the
-- SigLIP vision tower and projector) is not modelled, and is refused by its name.
local gemma2 = require "models.gemma2"

local F = {}
F.architectures = { "Gemma3ForCausalLM" }
F.model_type = "gemma3_text"
F.classes = { lm = "Gemma3ForCausalLM", model = "Gemma3TextModel", layer = "Gemma3DecoderLayer",
              norm = "Gemma3RMSNorm", embed = "Gemma3TextScaledWordEmbedding" }

-- Gemma3TextConfig's defaults (configuration_gemma3.py, 5.25: the 1B-like shape of 26 layers).
function F.config(hf, where)
  local H = require "models.hf"
  local c = gemma2.gemma_config(hf, where, {
    hidden_size = 2304, intermediate_size = 9216, num_hidden_layers = 26, num_attention_heads = 8,
    num_key_value_heads = 4, head_dim = 256, vocab_size = 262208, tie_word_embeddings = true,
    attention_bias = false,
  })
  c.layer_types = gemma2.layer_types(hf, where, c.layers, H.int(hf, "sliding_window_pattern", 6, where))
  -- read, and by Gemma3Attention not used (5.25): a note where a config sets it
  c.attn_logit_softcapping_unused = gemma2.softcap(hf, "attn_logit_softcapping", nil, where)
  c.final_softcap = gemma2.softcap(hf, "final_logit_softcapping", nil, where)
  c.qk_norm = "head_transposed"
  c.rope_per_kind = true
  c.norm_cls = F.classes.norm
  return c
end

-- SDPA or eager, as asked; a note where the config sets a soft-capping the attention never uses.
function F.attention(requested, notes, cfg)
  if cfg.attn_logit_softcapping_unused then
    notes[#notes + 1] = ("attn_logit_softcapping = %s has no effect: Gemma3Attention passes no softcap to "
                         .. "the attention (transformers 5.25)"):format(cfg.attn_logit_softcapping_unused)
  end
  return requested
end

F.tree = function(cfg) return gemma2.CausalLM(cfg, F.classes) end
return F
