-- llama2.lua: the Llama-2 checkpoints by name ("7b", "13b", "70b", or "13b-l4": a shape cut to
-- four layers), or a shape given field by field, as LlamaForCausalLM configs (llama.lua builds
-- the model). A scenario with model.config uses the config instead (hf.lua).
local M = {}

-- Named shapes (transformers' LlamaConfig for the Llama-2 checkpoints).
M.sizes = {
  ["7b"]  = { hidden = 4096, intermediate = 11008, heads = 32, kv_heads = 32, layers = 32 },
  ["13b"] = { hidden = 5120, intermediate = 13824, heads = 40, kv_heads = 40, layers = 40 },
  ["70b"] = { hidden = 8192, intermediate = 28672, heads = 64, kv_heads = 8, layers = 80 },
}

-- The normalized config (llama.lua's L.config fields) of a named or explicit shape.
function M.named_config(model)
  local size = model.size or "7b"
  local base, cut = tostring(size):match("^(%w+)%-l(%d+)$")
  base = base or size
  local s = M.sizes[base]
  if not s and not model.hidden then
    local names = {}
    for k in pairs(M.sizes) do names[#names + 1] = k end
    table.sort(names)
    error(("unknown LLaMA2 size '%s' (known: %s, or NAME-lN for N layers, or give hidden, "
           .. "intermediate, heads, layers, or model.config)"):format(size, table.concat(names, ", ")), 0)
  end
  s = s or {}
  local c = {
    hidden = model.hidden or s.hidden, intermediate = model.intermediate or s.intermediate,
    heads = model.heads or s.heads, kv_heads = model.kv_heads or s.kv_heads or model.heads,
    layers = model.layers or (cut and tonumber(cut)) or s.layers, vocab = model.vocab or 32000,
  }
  for k, v in pairs(c) do
    if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) then
      error(("model.%s must be a positive integer"):format(k), 0)
    end
  end
  if c.hidden % c.heads ~= 0 then error("model.hidden must be a multiple of heads", 0) end
  if c.heads % c.kv_heads ~= 0 then error("model.heads must be a multiple of kv_heads", 0) end
  c.head_dim = c.hidden // c.heads
  -- (Llama 2's max_position_embeddings, the span of torchtune's RoPE cache: model.code)
  c.max_positions = 4096
  c.tie, c.qkv_bias, c.o_bias, c.mlp_bias = false, false, false, false
  c.name = "llama2-" .. tostring(size)
  return c
end

M.build = function(cx, cfg) return require("vrsim.causal_lm").build(cx, cfg) end

return M
