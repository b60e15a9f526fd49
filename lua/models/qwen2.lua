-- qwen2.lua: transformers' Qwen2ForCausalLM (models/qwen2/modeling_qwen2.py, 5.17): the Llama
-- tree with a bias on q_proj, k_proj and v_proj (not o_proj), a 151,936-token vocabulary, and
-- optionally a sliding window on the layers from max_window_layers on (use_sliding_window,
-- off in every released Qwen2/2.5 config). The small models tie the head to the embeddings.
local llama = require "models.llama"

local F = {}
F.architectures = { "Qwen2ForCausalLM" }
F.model_type = "qwen2"
F.classes = { lm = "Qwen2ForCausalLM", model = "Qwen2Model", layer = "Qwen2DecoderLayer" }

-- Qwen2Config's defaults (configuration_qwen2.py).
function F.config(hf, where)
  local H = require "models.hf"
  local c = llama.config(hf, where, {
    hidden_size = 4096, intermediate_size = 22016, num_hidden_layers = 32, num_attention_heads = 32,
    vocab_size = 151936, tie_word_embeddings = false, qkv_bias = true, attention_bias = false,
  })
  if H.bool(hf, "use_sliding_window", false, where) then
    -- layer_types: sliding attention on layers >= max_window_layers; one mask per kind of layer
    error(where .. ": use_sliding_window = true (sliding attention on some Qwen2 layers) is not modelled", 0)
  end
  return c
end

F.tree = function(cfg) return llama.CausalLM(cfg, F.classes) end
return F
