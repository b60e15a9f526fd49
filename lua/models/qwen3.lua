-- qwen3.lua: transformers' Qwen3ForCausalLM (models/qwen3/modeling_qwen3.py and
-- modular_qwen3.py, transformers 5.25): the Llama tree with an RMSNorm on every head of q and of
-- k before the rotary embedding (Qwen3Attention's q_norm and k_norm, over head_dim only: "unlike
-- olmo, only on the head dim"), head_dim a config field of its own (128 by default, not
-- hidden_size // num_attention_heads), no bias on q, k, v (attention_bias, false in every
-- released config), and optionally a sliding window on the layers from max_window_layers on
-- (use_sliding_window, off in every released Qwen3 config). The norms are Qwen3RMSNorm, which is
-- LlamaRMSNorm op for op (fp32 compute, weight * x.to(input_dtype)); llama.lua's attention runs
-- them on the (b, s, heads, head_dim) view of each projection and transposes their output.
local llama = require "models.llama"

local F = {}
F.architectures = { "Qwen3ForCausalLM" }
F.model_type = "qwen3"
F.classes = { lm = "Qwen3ForCausalLM", model = "Qwen3Model", layer = "Qwen3DecoderLayer" }

-- Qwen3Config's defaults (configuration_qwen3.py, 5.25).
-- `defaults` replaces Qwen3Config's (a family built on Qwen3's attention: qwen3_moe.lua).
function F.config(hf, where, defaults)
  local H = require "models.hf"
  local c = llama.config(hf, where, defaults or {
    hidden_size = 4096, intermediate_size = 22016, num_hidden_layers = 32, num_attention_heads = 32,
    num_key_value_heads = 32, head_dim = 128, vocab_size = 151936, tie_word_embeddings = false,
    attention_bias = false,
  })
  if H.bool(hf, "use_sliding_window", false, where) then
    -- layer_types: sliding attention on layers >= max_window_layers, a mask per kind of layer
    error(where .. ": use_sliding_window = true (sliding attention on some Qwen3 layers) is not modelled", 0)
  end
  for i, t in ipairs(type(hf.layer_types) == "table" and hf.layer_types or {}) do
    if t ~= "full_attention" then
      error(("%s: layer_types[%d] = %s is not modelled (Qwen3 layers are modelled with full attention)")
            :format(where, i - 1, tostring(t)), 0)
    end
  end
  c.qk_norm = "head"
  c.norm_cls = "Qwen3RMSNorm"
  return c
end

-- Llama's tree; its norms are Qwen3RMSNorm, LlamaRMSNorm's ops under the family's class name.
function F.tree(cfg)
  local root = llama.CausalLM(cfg, F.classes)
  require("vrsim.module").walk(root, function(m)
    if m.cls == "LlamaRMSNorm" then m.cls = cfg.norm_cls end
  end)
  return root
end
return F
