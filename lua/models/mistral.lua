-- mistral.lua: transformers' MistralForCausalLM (models/mistral/modeling_mistral.py, 5.17): the
-- Llama tree with grouped-query attention by default and a sliding window. Mistral's decoder
-- layer, attention and MLP are Llama's (modular_mistral.py derives them); what differs is the
-- mask: create_sliding_window_causal_mask. With SDPA the causal shortcut (is_causal, no mask)
-- holds while the sequence is shorter than the window; from the window's length on
-- (masking_utils' _ignore_causal_mask_sdpa: kv_length >= local_attention_size) an s x s boolean
-- mask is made (expanded to (b, 1, s, s) as a view) and the attention runs with it (llama.lua
-- sliding_window_mask, attention with a mask).
local llama = require "models.llama"

local F = {}
F.architectures = { "MistralForCausalLM" }
F.model_type = "mistral"
F.classes = { lm = "MistralForCausalLM", model = "MistralModel", layer = "MistralDecoderLayer" }

-- MistralConfig's defaults (configuration_mistral.py).
function F.config(hf, where)
  local H = require "models.hf"
  local c = llama.config(hf, where, {
    hidden_size = 4096, intermediate_size = 14336, num_hidden_layers = 32, num_attention_heads = 32,
    num_key_value_heads = 8, vocab_size = 32000, tie_word_embeddings = false,
  })
  -- `"sliding_window": null` (Mistral-7B-v0.2/0.3) is full attention; a key left out takes
  -- MistralConfig's default, 4096, as transformers gives it (and a note says so where it matters: a
  -- sequence as long as the window or longer, since a config written without the key is often a
  -- v0.2+ config whose null was lost)
  if H.is_null(hf, "sliding_window") then
    c.sliding_window = nil
  elseif hf.sliding_window == nil then
    c.sliding_window, c.sliding_window_assumed = 4096, true
  elseif hf.sliding_window ~= false then
    c.sliding_window = H.int(hf, "sliding_window", nil, where)
  end
  return c
end

F.tree = function(cfg) return llama.CausalLM(cfg, F.classes) end
return F
