-- mixtral.lua: transformers' MixtralForCausalLM (5.25, models/mixtral/modeling_mixtral.py): the
-- Mistral tree (grouped-query attention, an optional sliding window) with every decoder layer's
-- MLP a sparse mixture of experts (models/moe.lua: the top-k router, the experts as 3-D
-- parameters run by grouped GEMMs). MixtralConfig's defaults are Mixtral-8x7B's shape: 8
-- experts, 2 per token, intermediate 14336, no sliding window.
local llama = require "models.llama"
local moe = require "models.moe"

local F = {}
F.architectures = { "MixtralForCausalLM" }
F.model_type = "mixtral"
F.classes = { lm = "MixtralForCausalLM", model = "MixtralModel", layer = "MixtralDecoderLayer" }

-- MixtralConfig's defaults (configuration_mixtral.py).
function F.config(hf, where)
  local H = require "models.hf"
  local extra = { num_local_experts = 1 }
  for k in pairs(moe.KEYS) do extra[k] = 1 end
  local c = llama.config(hf, where, {
    hidden_size = 4096, intermediate_size = 14336, num_hidden_layers = 32, num_attention_heads = 32,
    num_key_value_heads = 8, vocab_size = 32000, tie_word_embeddings = false, extra_keys = extra,
  })
  -- sliding_window: None in MixtralConfig (full attention) unless the config gives one
  if hf.sliding_window ~= nil and hf.sliding_window ~= false then
    c.sliding_window = H.int(hf, "sliding_window", nil, where)
  end
  moe.config(hf, where, c, { experts_key = "num_local_experts", experts = 8, top_k = 2, norm_topk_prob = true })
  c.moe_classes = { block = "MixtralSparseMoeBlock", router = "MixtralTopKRouter", experts = "MixtralExperts" }
  return c
end

F.tree = function(cfg) return llama.CausalLM(cfg, F.classes) end
return F
