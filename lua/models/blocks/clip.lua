-- blocks/clip.lua: transformers' CLIPTextModel / CLIPTextModelWithProjection (the two SDXL text
-- encoders): parameters named as in their state dicts, prefixed, and the forward ops.
-- SDXL uses the penultimate layer's hidden states of both and the projected pooled output of the
-- second (OpenCLIP ViT-bigG/14); under no_grad nothing is saved and only the weights matter.
local nn = require "vrsim.nn"
local O = require "models.blocks.ops"

local C = {}

C.configs = {
  -- openai/clip-vit-large-patch14 text tower: 123,060,480 parameters
  ["vit-l-14"] = { hidden = 768, layers = 12, heads = 12, intermediate = 3072, vocab = 49408,
                   positions = 77, projection = nil },
  -- laion/CLIP-ViT-bigG-14 text tower with text_projection: 694,659,840 parameters
  ["vit-bigg-14"] = { hidden = 1280, layers = 32, heads = 20, intermediate = 5120, vocab = 49408,
                      positions = 77, projection = 1280 },
}

-- Parameters in construction order (CLIPEncoderLayer: self_attn k, v, q, out; layer_norm1; mlp;
-- layer_norm2).
function C.params(mk, prefix, cfg)
  local d, P = cfg.hidden, { layers = {} }
  local p = prefix .. "text_model."
  P.tok = mk(p .. "embeddings.token_embedding.weight", { cfg.vocab, d })
  P.pos = mk(p .. "embeddings.position_embedding.weight", { cfg.positions, d })
  for l = 0, cfg.layers - 1 do
    local q = p .. "encoder.layers." .. l .. "."
    local L = {}
    for _, nm in ipairs { "k", "v", "q", "out" } do
      L[nm] = { w = mk(q .. "self_attn." .. nm .. "_proj.weight", { d, d }),
                b = mk(q .. "self_attn." .. nm .. "_proj.bias", { d }) }
    end
    L.ln1 = { w = mk(q .. "layer_norm1.weight", { d }), b = mk(q .. "layer_norm1.bias", { d }) }
    L.fc1 = { w = mk(q .. "mlp.fc1.weight", { cfg.intermediate, d }), b = mk(q .. "mlp.fc1.bias", { cfg.intermediate }) }
    L.fc2 = { w = mk(q .. "mlp.fc2.weight", { d, cfg.intermediate }), b = mk(q .. "mlp.fc2.bias", { d }) }
    L.ln2 = { w = mk(q .. "layer_norm2.weight", { d }), b = mk(q .. "layer_norm2.bias", { d }) }
    P.layers[l + 1] = L
  end
  P.final = { w = mk(p .. "final_layer_norm.weight", { d }), b = mk(p .. "final_layer_norm.bias", { d }) }
  if cfg.projection then P.proj = mk(prefix .. "text_projection.weight", { cfg.projection, d }) end
  return P
end

-- Forward with output_hidden_states (SDXL reads hidden_states[-2]): returns the penultimate
-- hidden states (b, 77, d) and, with a projection, the pooled projected output (b, proj).
function C.forward(cx, name, P, cfg, ids)
  local b, s, d = ids.shape[1], ids.shape[2], cfg.hidden
  local e = O.op(cx, { name = name .. ".token_embedding", kind = "gather", inputs = { ids, P.tok },
                        outs = { { name .. ".inputs_embeds", { b, s, d }, P.tok.dtype } },
                        saves = { ids }, grads = { "none", { dtype = P.tok.dtype } } })
  local pe = O.op(cx, { name = name .. ".position_embedding", kind = "gather", inputs = { P.pos },
                         outs = { { name .. ".position_embeds", { 1, s, d }, P.pos.dtype } },
                         grads = { { dtype = P.pos.dtype } } })
  local h = O.add(cx, name .. ".embeddings", e, pe)
  local mask = O.op(cx, { name = name .. ".causal_mask", inputs = {},
                           outs = { { name .. ".causal_mask", { b, 1, s, s }, cx.autocast or P.tok.dtype } } })
  local hd = d // cfg.heads
  local penultimate
  for l, L in ipairs(P.layers) do
    local pre = name .. ".layers." .. (l - 1)
    local res = h
    local x = O.layer_norm(cx, pre .. ".layer_norm1", h, L.ln1.w, L.ln1.b)
    local q = O.linear(cx, pre .. ".q_proj", x, L.q.w, L.q.b, { keep_input = true })
    local k = O.linear(cx, pre .. ".k_proj", x, L.k.w, L.k.b, { keep_input = true })
    local v = O.linear(cx, pre .. ".v_proj", x, L.v.w, L.v.b)
    -- view(b, s, heads, hd).transpose(1, 2): the gradient comes back through a copy
    local qh = nn.view_op(cx, pre .. ".q_heads", q, { b, cfg.heads, s, hd })
    local kh = nn.view_op(cx, pre .. ".k_heads", k, { b, cfg.heads, s, hd })
    local vh = nn.view_op(cx, pre .. ".v_heads", v, { b, cfg.heads, s, hd })
    -- SDPA with the causal mask: PyTorch takes the memory-efficient kernel for a masked call
    local dt = qh.dtype
    local ao = O.op(cx, { name = pre .. ".sdpa", kind = "attention", inputs = { qh, kh, vh, mask },
                           outs = { { pre .. ".attn_out", qh.shape, dt },
                                    { pre .. ".logsumexp", { b, cfg.heads, (s + 31) // 32 * 32 }, "fp32", no_grad = true },
                                    { pre .. ".philox", { 2 }, "int64", no_grad = true } },
                           save_outs = { 1, 2, 3 }, saves = { qh, kh, vh, mask },
                           grads = { { dtype = dt }, { dtype = dt }, { dtype = dt }, "none" },
                           frees = { qh, kh, vh },
                           flops = 4 * b * cfg.heads * s * s * hd, dtype = dt })
    local at = O.op(cx, { name = pre .. ".attn_transpose", inputs = { ao },
                           outs = { { pre .. ".attn_out_t", { b, s, d }, dt } } })
    local o = O.linear(cx, pre .. ".out_proj", at, L.out.w, L.out.b)
    h = O.add(cx, pre .. ".residual1", res, o)
    local res2 = h
    x = O.layer_norm(cx, pre .. ".layer_norm2", h, L.ln2.w, L.ln2.b)
    local f = O.linear(cx, pre .. ".fc1", x, L.fc1.w, L.fc1.b)
    if cfg.hidden == 768 then
      -- quick_gelu: x * sigmoid(1.702 x): the sigmoid and the product
      local sg = nn.ew(cx, pre .. ".sigmoid", { f }, f.dtype, { f }, nil)
      f = O.mul(cx, pre .. ".quick_gelu", f, sg, f.dtype)
    else
      f = O.act(cx, pre .. ".gelu", f)
    end
    f = O.linear(cx, pre .. ".fc2", f, L.fc2.w, L.fc2.b)
    h = O.add(cx, pre .. ".residual2", res2, f)
    if l == #P.layers - 1 then
      penultimate = h
      nn.hold(cx, h) -- output_hidden_states keeps every layer's output; the penultimate is used
    end
  end
  local pooled
  if P.proj then
    local fh = O.layer_norm(cx, name .. ".final_layer_norm", h, P.final.w, P.final.b)
    -- pooled = last_hidden_state[arange(b), eos positions]: an index_select of b rows
    local pr = O.op(cx, { name = name .. ".pooled", kind = "gather", inputs = { fh },
                           outs = { { name .. ".pooled", { b, d }, fh.dtype } },
                           grads = { { dtype = fh.dtype } } })
    pooled = O.linear(cx, name .. ".text_projection", pr, P.proj)
  end
  return penultimate, pooled
end

return C
