-- blocks/clip.lua: transformers' CLIPTextModel / CLIPTextModelWithProjection (the text encoders
-- of Stable Diffusion 1.x, 2.x and XL, models/clip/modeling_clip.py) as module trees: parameters
-- named as in their state dicts under a prefix ("text_encoder.", "text_encoder_2."), and the
-- forward ops. SDXL uses the penultimate layer's hidden states of both and the projected pooled
-- output of the second (OpenCLIP ViT-bigG/14); SD 1.x and 2.x the last hidden state (after
-- final_layer_norm) of their one encoder (output = "last"); Flux.1 its pooler_output (output =
-- "pooled": final_layer_norm's output at the end-of-text rows). Under no_grad nothing is saved
-- and only the weights matter.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local U = require "models.blocks.unet"

local W = mod.weight
local call = mod.call

local C = {}

C.configs = {
  -- openai/clip-vit-large-patch14 text tower: 123,060,480 parameters
  -- (SD 1.x's text_encoder/config.json: hidden_act quick_gelu)
  ["vit-l-14"] = { hidden = 768, layers = 12, heads = 12, intermediate = 3072, vocab = 49408,
                   positions = 77, projection = nil, act = "quick_gelu" },
  -- the same CLIP ViT-L/14 text tower as CLIPTextModelWithProjection (SD 3's text_encoder:
  -- projection_dim 768): 123,650,304 parameters
  ["vit-l-14-proj"] = { hidden = 768, layers = 12, heads = 12, intermediate = 3072, vocab = 49408,
                        positions = 77, projection = 768, act = "quick_gelu" },
  -- laion/CLIP-ViT-bigG-14 text tower with text_projection: 694,659,840 parameters
  ["vit-bigg-14"] = { hidden = 1280, layers = 32, heads = 20, intermediate = 5120, vocab = 49408,
                      positions = 77, projection = 1280, act = "gelu" },
  -- OpenCLIP ViT-H/14's text tower as SD 2.x ships it (stabilityai/stable-diffusion-2-1
  -- text_encoder/config.json: 23 of its 24 layers, hidden_act gelu): 340,387,840 parameters
  ["vit-h-14-sd2"] = { hidden = 1024, layers = 23, heads = 16, intermediate = 4096, vocab = 49408,
                       positions = 77, projection = nil, act = "gelu" },
}

-- CLIPEncoderLayer.forward(hidden_states): pre-norm attention (q, k, v projections viewed as
-- heads, causal SDPA, out_proj), residual; pre-norm MLP
-- (fc1, quick_gelu for ViT-L, gelu for bigG, fc2), residual.
local function layer_forward(cx, m, h)
  local pre, C_, cfg = m.opname, m.children, m.cfg
  local b, s, d = h.shape[1], h.shape[2], cfg.hidden
  local A = C_.self_attn.children
  local res = h
  local x = call(cx, C_.layer_norm1, h)
  local keep = { keep_input = true }
  local q = call(cx, A.q_proj, x, keep)
  local k = call(cx, A.k_proj, x, keep)
  local v = call(cx, A.v_proj, x)
  local hd = d // cfg.heads
  -- view(b, s, heads, hd).transpose(1, 2): the gradient comes back through a copy
  local qh = nn.view_op(cx, pre .. ".q_heads", q, { b, cfg.heads, s, hd })
  local kh = nn.view_op(cx, pre .. ".k_heads", k, { b, cfg.heads, s, hd })
  local vh = nn.view_op(cx, pre .. ".v_heads", v, { b, cfg.heads, s, hd })
  -- SDPA with is_causal and no mask (transformers 5's create_causal_mask gives none for sdpa):
  -- the cuDNN kernel, as the oracle's captures take it for a causal bf16 call; its outputs are
  -- the attention in (b, s, heads, hd) layout, the unpadded fp32 logsumexp and the philox seed
  -- and offset (two int64 scalars)
  local dt = qh.dtype
  local ao = nn.op_sized(cx, { name = pre .. ".sdpa", kind = "attention", inputs = { qh, kh, vh },
                         outs = { { pre .. ".attn_out", qh.shape, dt },
                                  { pre .. ".logsumexp", { b, cfg.heads, s }, "fp32", no_grad = true },
                                  { pre .. ".philox_seed", {}, "int64", no_grad = true },
                                  { pre .. ".philox_offset", {}, "int64", no_grad = true } },
                         save_outs = { 1, 2, 3, 4 }, saves = { qh, kh, vh },
                         grads = { { dtype = dt }, { dtype = dt }, { dtype = dt } },
                         frees = { qh, kh, vh },
                         flops = 4 * b * cfg.heads * s * s * hd, dtype = dt })
  -- transpose(1, 2).reshape(b, s, d): a view of the kernel's (b, s, heads, hd) output, no copy
  local at = nn.view_op(cx, pre .. ".attn_transpose", ao, { b, s, d })
  local o = call(cx, A.out_proj, at)
  h = nn.add(cx, pre .. ".residual1", res, o)
  local res2 = h
  x = call(cx, C_.layer_norm2, h)
  local M_ = C_.mlp.children
  local f = call(cx, M_.fc1, x)
  if cfg.act == "quick_gelu" then
    -- quick_gelu: x * sigmoid(1.702 * x) (transformers' QuickGELUActivation): the scaled copy,
    -- the sigmoid and the product
    local sc = nn.ew(cx, pre .. ".quick_gelu_scale", { f }, f.dtype, nil, nil)
    local sg = nn.ew(cx, pre .. ".sigmoid", { sc }, f.dtype, { sc }, nil)
    f = nn.mul(cx, pre .. ".quick_gelu", f, sg, f.dtype)
  else
    f = nn.act(cx, pre .. ".gelu", f)
  end
  f = call(cx, M_.fc2, f)
  return nn.add(cx, pre .. ".residual2", res2, f)
end

-- Forward with output_hidden_states (SDXL reads hidden_states[-2]): returns the penultimate
-- hidden states (b, 77, d) and, with a projection, the pooled projected output (b, proj).
-- With m.output "last" (SD 1.x / 2.x: text_encoder(input_ids)[0]): returns last_hidden_state,
-- final_layer_norm's output; the pooled rows the model also gathers are dropped at once.
local function clip_forward(cx, m, ids)
  local name, cfg = m.opname, m.cfg
  local tm = m.children.text_model.children
  local E = tm.embeddings.children
  local tok, pos = W(cx, E.token_embedding.p.weight), W(cx, E.position_embedding.p.weight)
  local b, s, d = ids.shape[1], ids.shape[2], cfg.hidden
  local e = nn.op_sized(cx, { name = name .. ".token_embedding", kind = "gather", inputs = { ids, tok },
                        outs = { { name .. ".inputs_embeds", { b, s, d }, tok.dtype } },
                        saves = { ids }, grads = { "none", { dtype = tok.dtype } } })
  local pe = nn.op_sized(cx, { name = name .. ".position_embedding", kind = "gather", inputs = { pos },
                         outs = { { name .. ".position_embeds", { 1, s, d }, pos.dtype } },
                         grads = { { dtype = pos.dtype } } })
  local h = nn.add(cx, name .. ".embeddings", e, pe)
  local layers = tm.encoder.children.layers
  local penultimate
  for l, k in ipairs(layers.order) do
    h = call(cx, layers.children[k], h)
    if l == #layers.order - 1 and m.output ~= "last" and m.output ~= "pooled" then
      -- (output_hidden_states: the penultimate is the caller's; encode_prompt copies or
      -- concatenates it and drops the outputs, so it lives to its last use, not the forward's end)
      penultimate = h
    end
  end
  -- CLIPTextTransformer always ends with final_layer_norm and the pooled output: the rows at
  -- the end-of-text positions, last_hidden_state[arange(b), input_ids.to(int).argmax(-1)]
  -- (the eos_token_id == 2 branch: the hub configs of SD 1.x, 2.x, XL and Flux.1 say 2)
  local fh = call(cx, tm.final_layer_norm, h)
  local rows = nn.op_sized(cx, { name = name .. ".eos_arange", inputs = {},
                             outs = { { name .. ".eos_rows", { b }, "int64" } } })
  local ids32 = nn.op_sized(cx, { name = name .. ".ids_to_int", inputs = { ids },
                              outs = { { name .. ".ids_int", { b, s }, "int32" } } })
  local eos = nn.op_sized(cx, { name = name .. ".eos_argmax", inputs = { ids32 },
                            outs = { { name .. ".eos_cols", { b }, "int64" } } })
  local pr = nn.op_sized(cx, { name = name .. ".pooled", kind = "gather", inputs = { fh, rows, eos },
                         outs = { { name .. ".pooled", { b, d }, fh.dtype } },
                         grads = { { dtype = fh.dtype }, "none", "none" } })
  if m.output == "pooled" then
    -- CLIPTextModel(...).pooler_output (the last hidden state, read by the gather only, is
    -- dropped as the model output is)
    return pr
  end
  if m.output == "last" then
    -- pooled_output: unused, freed on return
    nn.release(cx, { pr }, name .. ".return")
    return fh
  end
  local proj = m.children.text_projection
  if proj then
    return penultimate, call(cx, proj, pr)
  end
  -- (CLIPTextModel: the last hidden state and the pooled output are computed and dropped)
  nn.release(cx, { pr }, name .. ".return")
  return penultimate
end

local function embedding(num, dim)
  local m = mod.new("Embedding", nil, { num = num, dim = dim })
  m:declare("weight", { num, dim })
  return m
end

-- The tree, in construction order (CLIPTextEmbeddings: token, position; CLIPEncoderLayer:
-- self_attn (k, v, q, out), layer_norm1, mlp (fc1, fc2), layer_norm2; final_layer_norm; the
-- projection of CLIPTextModelWithProjection). `name` is the prefix of its ops in reports
-- ("text_encoder"), `prefix` of its parameters.
function C.CLIPTextModel(cfg, name, output)
  local d = cfg.hidden
  local root = mod.new(cfg.projection and "CLIPTextModelWithProjection" or "CLIPTextModel", clip_forward,
                       { cfg = cfg, opname = name, output = output })
  local tm = root:add("text_model", mod.new("CLIPTextTransformer", nil))
  local emb = tm:add("embeddings", mod.new("CLIPTextEmbeddings", nil))
  emb:add("token_embedding", embedding(cfg.vocab, d))
  emb:add("position_embedding", embedding(cfg.positions, d))
  local enc = tm:add("encoder", mod.new("CLIPEncoder", nil))
  local layers = enc:add("layers", mod.new("ModuleList", nil))
  for l = 0, cfg.layers - 1 do
    local pre = name .. ".layers." .. l
    local L = layers:add(l, mod.new("CLIPEncoderLayer", layer_forward, { cfg = cfg, opname = pre }))
    local a = L:add("self_attn", mod.new("CLIPAttention", nil))
    for _, nm in ipairs { "k_proj", "v_proj", "q_proj", "out_proj" } do
      a:add(nm, U.Linear(d, d)).opname = pre .. "." .. nm
    end
    L:add("layer_norm1", U.LayerNorm(d)).opname = pre .. ".layer_norm1"
    local mlp = L:add("mlp", mod.new("CLIPMLP", nil))
    mlp:add("fc1", U.Linear(d, cfg.intermediate)).opname = pre .. ".fc1"
    mlp:add("fc2", U.Linear(cfg.intermediate, d)).opname = pre .. ".fc2"
    L:add("layer_norm2", U.LayerNorm(d)).opname = pre .. ".layer_norm2"
  end
  tm:add("final_layer_norm", U.LayerNorm(d)).opname = name .. ".final_layer_norm"
  if cfg.projection then
    root:add("text_projection", U.Linear(d, cfg.projection, false)).opname = name .. ".text_projection"
  end
  mod.finalize(root, name)
  return root
end

return C
