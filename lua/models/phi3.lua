-- phi3.lua: transformers' Phi3ForCausalLM (models/phi3/modeling_phi3.py and modular_phi3.py,
-- transformers 5.25): the Llama tree with fused projections and their views.
--   - Phi3Attention: one qkv_proj (hidden -> (heads + 2 kv_heads) * head_dim) made after o_proj;
--     q, k and v are slices of its output (llama.lua split_qkv): the attention keeps v, a view, and
--     with it the whole qkv; each slice's backward is a zero-filled gradient of qkv's full size;
--   - apply_rotary_pos_emb with partial rotary support: q[..., :rotary_dim] rotated, then
--     torch.cat with the (empty) rest, a copy (llama.lua rotary_sliced);
--   - Phi3MLP: one gate_up_proj (hidden -> 2 * intermediate), `gate, up = x.chunk(2, dim=-1)` (two
--     views of it: SiLU keeps gate, the product keeps up, so the whole (b, s, 2 * intermediate)
--     output lives until both have run backward, as Llama's two outputs do), and the chunk's
--     backward (SplitBackward0) cats the two gradients into one buffer of that size;
--   - resid_pdrop dropout on the attention's and the MLP's outputs (nn.Dropout(0.0) in the
--     released configs: F.dropout with p = 0 returns its input, no tensor);
--   - the sliding window (2047 in Phi-3-mini-4k's config) as Mistral's: the causal shortcut while
--     the sequence is shorter than the window, a boolean mask from the window's length on.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local llama = require "models.llama"

local F = {}
F.architectures = { "Phi3ForCausalLM" }
F.model_type = "phi3"
-- peft's LoRA has no default target modules for this model type (peft 0.21)
F.peft_targets = false
F.lora_example = '"qkv_proj", "o_proj"'
F.classes = { lm = "Phi3ForCausalLM", model = "Phi3Model", layer = "Phi3DecoderLayer" }

-- Phi3MLP.forward: up_states = gate_up_proj(x); gate, up_states = up_states.chunk(2, dim=-1);
-- up_states = up_states * act(gate); down_proj(up_states).
local function mlp_forward(cx, m, x)
  local pre = m.opname
  local gu = mod.call(cx, m.children.gate_up_proj, x)
  local shape = nn.copy_shape(gu.shape)
  shape[#shape] = shape[#shape] // 2
  local gate = nn.view(cx, gu, shape, pre .. ".gate")
  local up = nn.view(cx, gu, nn.copy_shape(shape), pre .. ".up")
  local full = nn.bytes(gu.shape, gu.dtype)
  nn.op(cx, { name = pre .. ".chunk", kind = "none", inputs = { gu }, out_tensors = { gate, up },
              grads = { { bytes = full, dtype = gu.dtype } }, bwd_kind = "copy", bytes = 0, bwd_bytes = 2 * full })
  -- act_fn(gate) on the strided half, then up * act (MulBackward0 keeps both)
  local act = nn.ew(cx, pre .. ".silu", { gate }, gate.dtype, { gate })
  local mm = nn.mul(cx, pre .. ".mul", up, act, act.dtype)
  return mod.call(cx, m.children.down_proj, mm)
end

local function MLP(cfg, pre)
  local m = mod.new("Phi3MLP", mlp_forward, { opname = pre .. ".mlp" })
  local p = pre .. ".mlp."
  m:add("gate_up_proj", llama.Linear(p .. "gate_up_proj", cfg.hidden, 2 * cfg.intermediate, false))
  m:add("down_proj", llama.Linear(p .. "down_proj", cfg.intermediate, cfg.hidden, false))
  return m
end

-- Phi3Config's defaults (configuration_phi3.py, 5.25: Phi-3-mini's shape).
function F.config(hf, where)
  local H = require "models.hf"
  local c = llama.config(hf, where, {
    hidden_size = 3072, intermediate_size = 8192, num_hidden_layers = 32, num_attention_heads = 32,
    vocab_size = 32064, tie_word_embeddings = false,
    extra_keys = { resid_pdrop = 0, embd_pdrop = 1, original_max_position_embeddings = 1,
                   partial_rotary_factor = 1, auto_map = 1 },
  })
  -- Phi3Attention and Phi3MLP make no biases, whatever attention_bias or mlp_bias say
  c.qkv_bias, c.o_bias, c.mlp_bias = false, false, false
  local prf = hf.partial_rotary_factor
  if type(hf.rope_parameters) == "table" and hf.rope_parameters.partial_rotary_factor ~= nil then
    prf = hf.rope_parameters.partial_rotary_factor
  end
  if prf ~= nil and prf ~= 1 then
    error(("%s: partial_rotary_factor = %s (rotary on part of each head) is not modelled"):format(where, tostring(prf)), 0)
  end
  if hf.sliding_window ~= nil and hf.sliding_window ~= false then
    c.sliding_window = H.int(hf, "sliding_window", nil, where)
  end
  c.fused_qkv, c.rotary_slices = true, true
  return c
end

function F.tree(cfg)
  local root = llama.CausalLM(cfg, F.classes)
  local layers = root.children.model.children.layers
  for l = 0, cfg.layers - 1 do
    local layer = layers.children[tostring(l)]
    local m = MLP(cfg, "layers." .. l)
    -- in place of Llama's MLP, at its place in __init__'s order
    layer.children.mlp, m.parent, m.key = m, layer, "mlp"
  end
  return mod.finalize(root)
end

return F
