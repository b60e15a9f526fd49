-- qwen3_moe.lua: transformers' Qwen3MoeForCausalLM (5.25, models/qwen3_moe/modeling_qwen3_moe.py):
-- Qwen3's attention (per-head q_norm / k_norm, qwen3.lua) with a sparse mixture of experts
-- (models/moe.lua) in every layer that Qwen3MoeDecoderLayer gives one: a layer not in
-- mlp_only_layers whose (index + 1) is a multiple of decoder_sparse_step; the others keep a dense
-- Qwen3MoeMLP of intermediate_size. Its router differs from Mixtral's in two ways the block reads:
-- norm_topk_prob is a config key (False in Qwen3MoeConfig, true in the released Qwen3-30B-A3B and
-- 235B-A22B configs), and it hands the top-k weights back in the logits' dtype
-- (`router_top_value.to(router_logits.dtype)`), so the experts' weighting and sum run in bf16.
-- head_dim: the config's, else hidden_size // num_attention_heads (Qwen3MoeAttention's getattr).
local qwen3 = require "models.qwen3"
local moe = require "models.moe"

local F = {}
F.architectures = { "Qwen3MoeForCausalLM" }
F.model_type = "qwen3_moe"
F.classes = { lm = "Qwen3MoeForCausalLM", model = "Qwen3MoeModel", layer = "Qwen3MoeDecoderLayer" }

-- Qwen3MoeConfig's defaults (configuration_qwen3_moe.py, 5.25).
function F.config(hf, where)
  local H = require "models.hf"
  local extra = { num_experts = 1, moe_intermediate_size = 1, norm_topk_prob = 1, decoder_sparse_step = 1,
                  mlp_only_layers = 1 }
  for k in pairs(moe.KEYS) do extra[k] = 1 end
  local c = qwen3.config(hf, where, {
    hidden_size = 2048, intermediate_size = 6144, num_hidden_layers = 24, num_attention_heads = 32,
    num_key_value_heads = 4, vocab_size = 151936, tie_word_embeddings = false, attention_bias = false,
    extra_keys = extra,
  })
  moe.config(hf, where, c, { experts_key = "num_experts", experts = 128, top_k = 8,
                             intermediate_key = "moe_intermediate_size", moe_intermediate = 768,
                             norm_topk_key = "norm_topk_prob", norm_topk_prob = false,
                             router_weights_to_logits_dtype = true })
  local step = H.int(hf, "decoder_sparse_step", 1, where)
  local dense = {}
  local only = hf.mlp_only_layers
  if only ~= nil and type(only) ~= "table" then error(where .. ": mlp_only_layers must be a list of layer indices", 0) end
  for _, l in ipairs(only or {}) do
    local i = math.tointeger(l)
    if not i or i < 0 then error(where .. ": mlp_only_layers must hold layer indices", 0) end
    dense[i] = true
  end
  for l = 0, c.layers - 1 do
    if (l + 1) % step ~= 0 then dense[l] = true end
  end
  c.dense_layers = dense
  c.moe_classes = { block = "Qwen3MoeSparseMoeBlock", router = "Qwen3MoeTopKRouter", experts = "Qwen3MoeExperts" }
  c.norm_cls = "Qwen3MoeRMSNorm"
  return c
end

F.tree = qwen3.tree
return F
