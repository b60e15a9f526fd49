-- blocks/dit_sd3.lua: diffusers' SD3Transformer2DModel (models/transformers/transformer_sd3.py,
-- diffusers 0.42.1) as a module tree, op by op: PatchEmbed (a 2x2 stride-2 conv, the sin-cos
-- position table cropped to the latent grid and added), CombinedTimestepTextProjEmbeddings, the
-- context_embedder, the JointTransformerBlocks (MMDiT: the image and context streams, each with
-- its AdaLayerNormZero, joint attention over both, each its own feed-forward; the last block is
-- context_pre_only: AdaLayerNormContinuous on the context and no context output), SD 3.5
-- Medium's second self-attention (attn2, SD35AdaLayerNormZeroX) in the first
-- dual_attention_layers blocks, AdaLayerNormContinuous, proj_out.
--
-- Attention is JointAttnProcessor2_0: to_q, to_k, to_v, heads, the q/k norms (qk_norm =
-- "rms_norm": diffusers' RMSNorm, which casts to fp32 itself and returns the weight's dtype),
-- add_q_proj, add_k_proj, add_v_proj of the context with norm_added_q, norm_added_k, the image
-- tokens concatenated in front of the context tokens, SDPA, the output sliced back into the two
-- streams, to_out.0 on the image part, to_add_out on the context part (absent when
-- context_pre_only). No rotary embedding: the position table is added once in PatchEmbed.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local U = require "models.blocks.unet"
local D = require "models.blocks.dit"
local F = require "models.blocks.dit_flux"

local call = mod.call

local S = {}

-- diffusers' RMSNorm(dim_head, eps=1e-6) as Attention(qk_norm="rms_norm") builds it
-- (models/normalization.py RMSNorm.forward): variance = x.to(float32).pow(2).mean(-1,
-- keepdim=True); x * torch.rsqrt(variance + eps), the product of the input itself (bf16) and the
-- fp32 rsqrt, so it keeps x, not the fp32 copy pow keeps, and its fp32 output; .to(weight.dtype)
-- for a half-precision weight; * weight. No autocast op among them (the fp32 copy is explicit):
-- the output is in the weight's dtype. (The H100 trace of gen4-sd35m-l4-lora-r1024: each q/k
-- norm keeps its bf16 input, 12 MiB at 4096 tokens, beside the 24 MiB fp32 copy.)
local function diffusers_rms_forward(cx, m, x)
  local name = m.opname
  local w = mod.weight(cx, m.p.weight)
  local rshape = nn.copy_shape(x.shape)
  rshape[#rshape] = 1
  local x32 = nn.to(cx, x, "fp32", name .. ".float")
  local sq = nn.op(cx, { name = name .. ".pow", inputs = { x32 }, outs = { { name .. ".squared", x.shape, "fp32" } },
                         saves = { x32 }, bwd_workspace = { nn.bytes(x.shape, "fp32"), nn.bytes(x.shape, "fp32") },
                         bwd_workspace_first = true })
  local var = nn.op(cx, { name = name .. ".mean", kind = "reduce_rows", inputs = { sq },
                          outs = { { name .. ".variance", rshape, "fp32" } } })
  -- variance + eps: its own row-sized fp32 tensor, freed once rsqrt has read it
  var = nn.op(cx, { name = name .. ".add_eps", inputs = { var }, outs = { { name .. ".variance_eps", rshape, "fp32" } },
                    grads = { { pass = 1 } } })
  local rs = nn.op(cx, { name = name .. ".rsqrt", inputs = { var }, outs = { { name .. ".rsqrt", rshape, "fp32" } },
                         save_outs = { 1 }, bwd_workspace = { nn.bytes(rshape, "fp32"), nn.bytes(rshape, "fp32") },
                         bwd_workspace_first = true, bwd_kernels = 3 })
  -- MulBackward0: grad * rsqrt in fp32, cast to x's dtype; grad * x (fp32) before its row sum
  local n = nn.op(cx, { name = name .. ".mul", kind = "broadcast_rows", inputs = { x, rs },
                        outs = { { name .. ".normed", x.shape, "fp32" } }, saves = { x, rs },
                        bwd_workspace = { nn.bytes(x.shape, "fp32"), nn.bytes(x.shape, "fp32") },
                        bwd_workspace_first = true })
  if w.dtype == "bf16" or w.dtype == "fp16" then n = nn.to(cx, n, w.dtype, name .. ".to_weight_dtype") end
  return nn.mul(cx, name, n, w, nn.promote(n.dtype, w.dtype))
end

local function diffusers_rms_norm(dim)
  local m = D.RMSNorm(dim)
  m.cls = "RMSNorm"
  m.forward = function(cx, self, x)
    local saved = cx.autocast
    cx.autocast = nil
    local y = diffusers_rms_forward(cx, self, x)
    cx.autocast = saved
    return y
  end
  return m
end

-- One stream's to_q, to_k, to_v, .view(n, -1, heads, d) and the q/k norms. Joint (both streams
-- concatenated before SDPA), each view's gradient is a copy: torch.cat(dim=2) makes q, k, v
-- contiguous as (n, heads, s, d), so SDPA's gradients are, and CatBackward's narrow slice of
-- them, transposed back (the norms' elementwise backward keeps that layout), cannot be viewed
-- as (n, s, heads * d): ViewBackward0 reshapes, a copy. Alone (attn2), SDPA's gradients are
-- laid out as its inputs, the transposed projections, so they view back without one.
local function stream_qkv(cx, A, x, names, heads, dh, joint)
  if not joint then return D.stream_qkv(cx, A, x, names, heads, dh) end
  local keep = { keep_input = true }
  local shape = { x.shape[1], x.shape[2], heads, dh }
  local p = {}
  for i = 1, 3 do p[i] = call(cx, A[names[i]], x, keep) end
  local q, k, v = p[1], p[2], p[3]
  q = nn.view_op(cx, q.name .. ".heads", q, shape, nil, "copy")
  k = nn.view_op(cx, k.name .. ".heads", k, shape, nil, "copy")
  v = nn.view_op(cx, v.name .. ".heads", v, shape, nil, "copy")
  if A[names[4]] then
    q = call(cx, A[names[4]], q)
    k = call(cx, A[names[5]], k)
  end
  return q, k, v
end

-- JointAttnProcessor2_0.__call__(attn, hidden_states, encoder_hidden_states): returns the image
-- stream's output and, with a context stream that is not pre_only, the context's.
local function attention_forward(cx, m, x, ctx)
  local name, A, heads, dh = m.opname, m.children, m.heads, m.head_dim
  local q, k, v = stream_qkv(cx, A, x, { "to_q", "to_k", "to_v", "norm_q", "norm_k" }, heads, dh, ctx ~= nil)
  local si = x.shape[2]
  if ctx then
    local eq, ek, ev = stream_qkv(cx, A, ctx, { "add_q_proj", "add_k_proj", "add_v_proj",
                                              "norm_added_q", "norm_added_k" }, heads, dh, true)
    q = nn.cat(cx, name .. ".cat_q", { q, eq }, 2)
    k = nn.cat(cx, name .. ".cat_k", { k, ek }, 2)
    v = nn.cat(cx, name .. ".cat_v", { v, ev }, 2)
  end
  local n, s = q.shape[1], q.shape[2]
  local qh = nn.view(cx, q, { n, heads, s, dh }, name .. ".q_bhsd")
  local kh = nn.view(cx, k, { n, heads, s, dh }, name .. ".k_bhsd")
  local vh = nn.view(cx, v, { n, heads, s, dh }, name .. ".v_bhsd")
  local ao = nn.sdpa(cx, name, qh, kh, vh)
  -- .transpose(1, 2).reshape: the SDPA kernel lays its output out as q is laid out. Alone, q is
  -- the (n, s, heads, d) projection transposed, so the output transposed back is contiguous
  -- and the reshape a view; joint, q is torch.cat(dim=2) of the two streams, contiguous as
  -- (n, heads, s, d), so the reshape copies (the H100 trace of gen4-sd35m-l4-lora-r1024: one
  -- 12.45 MiB copy per joint attention, attention_processor.py:1485, kept by to_out.0's LoRA).
  -- Its backward is views of the gradient.
  local o
  if ctx then
    o = nn.op_sized(cx, { name = name .. ".attn_out", kind = "copy", inputs = { ao },
                          outs = { { name .. ".attn_out", { n, s, heads * dh }, ao.dtype } },
                          grads = { { pass = 1 } } })
  else
    o = nn.view(cx, ao, { n, s, heads * dh }, name .. ".attn_out")
  end
  -- .to(query.dtype) is the same dtype (the q/k norms return the weight's dtype)
  o = nn.to(cx, o, q.dtype, name .. ".attn_out.to_query_dtype")
  if not ctx then return call(cx, A.to_out.children["0"], o) end
  local dim = heads * dh
  -- hidden_states[:, :si], hidden_states[:, si:]: two slices, two SliceBackward nodes, each
  -- writing its part's gradient into zeros of the whole (n, s, dim) (the engine then adds the
  -- second into the first); a pre_only block's text slice gets no gradient, so makes none
  local img = nn.view_op(cx, name .. ".image_part", o, { n, si, dim }, nil, "copy")
  local ctx_part = nn.view_op(cx, name .. ".text_part", o, { n, s - si, dim }, nil, "copy")
  local cout
  if A.to_add_out then cout = call(cx, A.to_add_out, ctx_part) end
  local out = call(cx, A.to_out.children["0"], img)
  return out, cout
end

-- Attention(query_dim=dim, added_kv_proj_dim=dim or nil, dim_head, heads, out_dim=dim,
-- context_pre_only, bias=True, qk_norm, eps=1e-6), in __init__'s order.
function S.Attention(dim, heads, dh, qk_norm, added, pre_only)
  local m = mod.new("Attention", attention_forward, { heads = heads, head_dim = dh })
  local inner = heads * dh
  if qk_norm then
    m:add("norm_q", diffusers_rms_norm(dh))
    m:add("norm_k", diffusers_rms_norm(dh))
  end
  m:add("to_q", U.Linear(dim, inner))
  m:add("to_k", U.Linear(dim, inner))
  m:add("to_v", U.Linear(dim, inner))
  if added then
    m:add("add_k_proj", U.Linear(dim, inner))
    m:add("add_v_proj", U.Linear(dim, inner))
    m:add("add_q_proj", U.Linear(dim, inner))
  end
  m:add("to_out", U.ModuleList { U.Linear(inner, dim) })
  if added and not pre_only then m:add("to_add_out", U.Linear(inner, dim)) end
  if added and qk_norm then
    m:add("norm_added_q", diffusers_rms_norm(dh))
    m:add("norm_added_k", diffusers_rms_norm(dh))
  end
  return m
end

-- SD35AdaLayerNormZeroX(dim): silu, linear (dim -> 9 dim), chunk(9); the one layer norm
-- modulated twice (attn and attn2). Returns x, gate_msa, shift_mlp, scale_mlp, gate_mlp, x2,
-- gate_msa2.
local function ada_zero_x_forward(cx, m, x, temb)
  local c = D.modulation(cx, m, temb, 9)
  local nx = D.layer_norm(cx, m.opname .. ".norm", x)
  local a = D.modulate(cx, m.opname, nx, c[2], c[1])
  local b = D.modulate(cx, m.opname .. ".msa2", nx, c[8], c[7])
  return a, c[3], c[4], c[5], c[6], b, c[9]
end

function S.SD35AdaLayerNormZeroX(dim)
  local m = mod.new("SD35AdaLayerNormZeroX", ada_zero_x_forward, { dim = dim })
  m:add("linear", U.Linear(dim, 9 * dim))
  return m
end

-- The block's Python locals that outlive their last use: forward's frame holds each until the
-- name is rebound or the block returns (attn_output and attn_output2 after their gating,
-- norm_hidden_states2, the modulated norm_hidden_states the feed-forward reads, ff_output after
-- its gating; the H100 trace of gen4-sd35m-l4-lora-r1024 shows them live through the last
-- block's feed-forward, attention.py:711/716/720 and normalization.py:126): D.frame_release.
local frame_release = D.frame_release

-- JointTransformerBlock.forward(hidden_states, encoder_hidden_states, temb): returns
-- encoder_hidden_states (nil after a context_pre_only block), hidden_states.
local function joint_forward(cx, m, h, ctx, temb)
  local name, C = m.opname, m.children
  -- the caller's hidden_states and encoder_hidden_states: SD3Transformer2DModel.forward rebinds
  -- them only when the block returns
  local h_in, ctx_in = h, ctx
  local nh, gate_msa, shift_mlp, scale_mlp, gate_mlp, nh2, gate_msa2 = call(cx, C.norm1, h, temb)
  local nc, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp
  if m.pre_only then
    nc = call(cx, C.norm1_context, ctx, temb)
  else
    nc, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = call(cx, C.norm1_context, ctx, temb)
  end
  local ao, cao = call(cx, C.attn, nh, nc)
  local gao = D.gate(cx, name .. ".gate_msa", gate_msa, ao)
  h = nn.add(cx, name .. ".add_attn", h, gao)
  local gao2
  if C.attn2 then
    local ao2 = call(cx, C.attn2, nh2)
    gao2 = D.gate(cx, name .. ".gate_msa2", gate_msa2, ao2)
    h = nn.add(cx, name .. ".add_attn2", h, gao2)
  end
  local n2 = D.layer_norm(cx, name .. ".norm2", h)
  n2 = D.modulate(cx, name .. ".norm2", n2, scale_mlp, shift_mlp)
  local f = call(cx, C.ff, n2)
  local gf = D.gate(cx, name .. ".gate_mlp", gate_mlp, f)
  h = nn.add(cx, name .. ".add_ff", h, gf)
  local locals = { gao, gao2, C.attn2 and nh2 or nil, n2, gf, h_in }
  if m.pre_only then
    -- (norm_encoder_hidden_states, never rebound here, lives to the return)
    locals[#locals + 1] = nc
    frame_release(cx, name .. ".frame", locals)
    nn.release(cx, { ctx }, name .. ".encoder_hidden_states dropped")
    return nil, h
  end
  local gcao = D.gate(cx, name .. ".c_gate_msa", c_gate_msa, cao)
  ctx = nn.add(cx, name .. ".add_context_attn", ctx, gcao)
  local nc2 = D.layer_norm(cx, name .. ".norm2_context", ctx)
  -- norm_encoder_hidden_states is rebound only here, after the image stream's feed-forward
  frame_release(cx, name .. ".norm_encoder_hidden_states", { nc })
  nc2 = D.modulate(cx, name .. ".norm2_context", nc2, c_scale_mlp, c_shift_mlp)
  local cf = call(cx, C.ff_context, nc2)
  ctx = nn.add(cx, name .. ".add_context_ff", ctx, D.gate(cx, name .. ".c_gate_mlp", c_gate_mlp, cf))
  -- (and the context stream's: context_attn_output after its gating, the modulated
  -- norm_encoder_hidden_states the context feed-forward read)
  locals[#locals + 1] = ctx_in
  locals[#locals + 1] = gcao
  locals[#locals + 1] = nc2
  frame_release(cx, name .. ".frame", locals)
  return ctx, h
end

-- __init__ order: norm1, norm1_context, attn, attn2, norm2 (no parameters), ff, norm2_context,
-- ff_context.
function S.JointTransformerBlock(dim, heads, dh, pre_only, qk_norm, dual)
  local m = mod.new("JointTransformerBlock", joint_forward, { dim = dim, pre_only = pre_only })
  m:add("norm1", dual and S.SD35AdaLayerNormZeroX(dim) or D.AdaLayerNormZero(dim))
  m:add("norm1_context", pre_only and D.AdaLayerNormContinuous(dim, dim) or D.AdaLayerNormZero(dim))
  m:add("attn", S.Attention(dim, heads, dh, qk_norm, true, pre_only))
  if dual then m:add("attn2", S.Attention(dim, heads, dh, qk_norm, false, false)) end
  m:add("ff", D.FeedForward(dim))
  if not pre_only then m:add("ff_context", D.FeedForward(dim)) end
  return m
end

-- PatchEmbed.forward(latent): proj (Conv2d k = stride = patch), flatten(2).transpose(1, 2) (a
-- view of the conv output's layout), cropped_pos_embed: the (1, max, max, dim) table sliced to
-- the grid's centre and reshaped (a copy: the slice is not contiguous), the sum, .to(dtype).
local function patch_embed_forward(cx, m, x)
  local name = m.opname
  local y = call(cx, m.children.proj, x)
  local n, dim, gh, gw = y.shape[1], y.shape[2], y.shape[3], y.shape[4]
  if gh > m.max_size or gw > m.max_size then
    error(("sd3: a %dx%d latent grid is larger than pos_embed_max_size %d"):format(gh, gw, m.max_size), 0)
  end
  local tokens = gh * gw
  y = nn.view(cx, y, { n, tokens, dim }, name .. ".flatten_transpose")
  local pe = nn.op_sized(cx, { name = name .. ".cropped_pos_embed", inputs = { m.p.pos_embed },
                               outs = { { name .. ".cropped_pos_embed", { 1, tokens, dim }, m.p.pos_embed.dtype } },
                               grads = { "none" } })
  return nn.add(cx, name .. ".add_pos_embed", y, pe)
end

-- SD3Transformer2DModel.forward(hidden_states, encoder_hidden_states, pooled_projections,
-- timestep): pos_embed; time_text_embed; context_embedder; the blocks (each a checkpoint unit
-- under enable_gradient_checkpointing); norm_out, proj_out; the unpatchify (reshape, einsum,
-- reshape: one copy, made by the caller).
local function sd3_forward(cx, m, x, ctx, pooled, t)
  local C = m.children
  local h = call(cx, C.pos_embed, x)
  -- hidden_states.contiguous(): PatchEmbed's sum takes the layout of the conv output's
  -- flatten(2).transpose(1, 2) view, (n, tokens, dim) not contiguous, so this is a copy
  h = nn.copy(cx, m.opname .. ".contiguous", h)
  local temb = call(cx, C.time_text_embed, t, nil, pooled)
  local e = call(cx, C.context_embedder, ctx)
  local blocks = C.transformer_blocks
  for _, k in ipairs(blocks.order) do e, h = call(cx, blocks.children[k], h, e, temb) end
  h = call(cx, C.norm_out, h, temb)
  return call(cx, C.proj_out, h)
end

-- The tree from an SD3Transformer2DModel config (patch_size, in_channels, out_channels,
-- num_layers, attention_head_dim, num_attention_heads, joint_attention_dim,
-- caption_projection_dim, pooled_projection_dim, pos_embed_max_size, dual_attention_layers (a
-- set of block indices), qk_norm), children in __init__'s order. pos_embed's table is a
-- persistent buffer (buffer_decls): GPU memory in the model's dtype, not a parameter.
function S.SD3Transformer2DModel(c, prefix)
  local heads, dh = c.num_attention_heads, c.attention_head_dim
  local dim = heads * dh
  local p = c.patch_size
  local root = mod.new("SD3Transformer2DModel", sd3_forward, { cfg = c, layer = -1 })
  local pe = root:add("pos_embed", mod.new("PatchEmbed", patch_embed_forward, { max_size = c.pos_embed_max_size }))
  pe:add("proj", U.Conv2d(c.in_channels, dim, p, p, 0))
  pe.buffer_decls = { { key = "pos_embed", shape = { 1, c.pos_embed_max_size * c.pos_embed_max_size, dim } } }
  root:add("time_text_embed", F.CombinedTimestepTextProjEmbeddings(dim, c.pooled_projection_dim))
  root:add("context_embedder", U.Linear(c.joint_attention_dim, c.caption_projection_dim))
  local list = {}
  for i = 1, c.num_layers do
    list[i] = S.JointTransformerBlock(dim, heads, dh, i == c.num_layers, c.qk_norm ~= nil,
                                      c.dual_attention_layers[i - 1] ~= nil)
    list[i].layer = i - 1
  end
  root:add("transformer_blocks", U.ModuleList(list))
  root:add("norm_out", D.AdaLayerNormContinuous(dim, dim))
  root:add("proj_out", U.Linear(dim, p * p * c.out_channels))
  mod.finalize(root, prefix)
  mod.walk(root, function(x) x.opname = x.opname or x.path end)
  root.no_split = { JointTransformerBlock = true }
  root.checkpoint_classes = { JointTransformerBlock = true }
  root.checkpoint_holds_args = true
  return root
end

return S
