-- blocks/dit_flux.lua: diffusers' FluxTransformer2DModel (models/transformers/transformer_flux.py,
-- diffusers 0.42.1) as a module tree, op by op: the double-stream FluxTransformerBlock (image and
-- text streams, each with its AdaLayerNormZero, joint attention over both, each its own
-- feed-forward), the single-stream FluxSingleTransformerBlock (text and image concatenated, one
-- AdaLayerNormZeroSingle, attention and MLP side by side, proj_out over both), FluxPosEmbed's
-- rotary tables, the timestep / guidance / pooled-text embedding
-- (CombinedTimestepGuidanceTextProjEmbeddings, or CombinedTimestepTextProjEmbeddings without
-- guidance_embeds: schnell), and AdaLayerNormContinuous before proj_out.
--
-- FluxAttention with FluxAttnProcessor: to_q, to_k, to_v, unflatten to heads, RMSNorm on q and k
-- (norm_q, norm_k); in the double block also add_q_proj, add_k_proj, add_v_proj of the text
-- stream with norm_added_q, norm_added_k, and the text tokens concatenated in front of the image
-- tokens (q, k, v each a new tensor); the rotary embedding on q and k; SDPA through
-- dispatch_attention_fn's native backend (permuted views in and out); the output flattened, split
-- into text and image parts (split_with_sizes: views whose backward assembles one full-size
-- gradient), to_out.0 on the image part and to_add_out on the text part (.contiguous(): a copy
-- where the batch is above one). The single block's attention is pre_only: no output projection.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local U = require "models.blocks.unet"
local D = require "models.blocks.dit"

local call = mod.call

local F = {}

local function attention_forward(cx, m, x, ctx, rope)
  local name, A, heads, dh = m.opname, m.children, m.heads, m.head_dim
  local q, k, v = D.stream_qkv(cx, A, x, { "to_q", "to_k", "to_v", "norm_q", "norm_k" }, heads, dh)
  if ctx then
    local eq, ek, ev = D.stream_qkv(cx, A, ctx, { "add_q_proj", "add_k_proj", "add_v_proj",
                                                "norm_added_q", "norm_added_k" }, heads, dh)
    q = nn.cat(cx, name .. ".cat_q", { eq, q }, 2)
    k = nn.cat(cx, name .. ".cat_k", { ek, k }, 2)
    v = nn.cat(cx, name .. ".cat_v", { ev, v }, 2)
  end
  q = D.rotary(cx, name .. ".rope_q", q, rope[1], rope[2])
  k = D.rotary(cx, name .. ".rope_k", k, rope[1], rope[2])
  local n, s = q.shape[1], q.shape[2]
  -- dispatch_attention_fn (native): query, key, value permuted to (n, heads, s, d), views
  local qh = nn.view(cx, q, { n, heads, s, dh }, name .. ".q_bhsd")
  local kh = nn.view(cx, k, { n, heads, s, dh }, name .. ".k_bhsd")
  local vh = nn.view(cx, v, { n, heads, s, dh }, name .. ".v_bhsd")
  local ao = nn.sdpa(cx, name, qh, kh, vh)
  -- .permute back, .flatten(2, 3): views; .to(query.dtype): under autocast q is fp32 (the q/k
  -- norms are fp32 ops), so the bf16 attention output is cast up, a new tensor
  local o = nn.view(cx, ao, { n, s, heads * dh }, name .. ".attn_out")
  o = nn.to(cx, o, q.dtype, name .. ".attn_out.to_query_dtype")
  if not ctx then return o end
  local st = ctx.shape[2]
  local si = s - st
  local dim = heads * dh
  -- split_with_sizes: two views; SplitWithSizesBackward assembles their gradients in one
  -- full-size buffer
  local parts = {}
  -- (under torch.compile the split is aten.split_with_sizes, outside the partitioner's allowlist:
  -- its parts are nodes of their own, never recomputed; strategies/compile.lua)
  for i, p in ipairs { { "text", st }, { "image", si } } do
    parts[i] = nn.view(cx, o, { n, p[2], dim }, name .. "." .. p[1] .. "_part")
    parts[i].split_part = true
  end
  nn.op_sized(cx, { name = name .. ".split", kind = "none", inputs = { o }, out_tensors = parts,
                    bytes = 0, bwd_kind = "copy", bwd_bytes = 2 * nn.bytes(o.shape, o.dtype),
                    grads = { { dtype = o.dtype } }, frees = {}, compile_extern = true })
  local ctx_part, img = parts[1], parts[2]
  if n > 1 then
    -- (a slice of the token dim with a batch above one is not contiguous: .contiguous() copies)
    img = nn.copy(cx, name .. ".image_contiguous", img)
    ctx_part = nn.copy(cx, name .. ".text_contiguous", ctx_part)
  end
  local out = call(cx, A.to_out.children["0"], img)
  local cout = call(cx, A.to_add_out, ctx_part)
  return out, cout
end

-- FluxAttention(query_dim=dim, heads, dim_head, bias=True, out_dim=dim, ...), in __init__'s
-- order: norm_q, norm_k, to_q, to_k, to_v, to_out (Linear, Dropout) unless pre_only; with
-- added_kv_proj_dim: norm_added_q, norm_added_k, add_q_proj, add_k_proj, add_v_proj, to_add_out.
function F.FluxAttention(dim, heads, dh, added, pre_only)
  local m = mod.new("FluxAttention", attention_forward, { heads = heads, head_dim = dh })
  local inner = heads * dh
  m:add("norm_q", D.RMSNorm(dh))
  m:add("norm_k", D.RMSNorm(dh))
  m:add("to_q", U.Linear(dim, inner))
  m:add("to_k", U.Linear(dim, inner))
  m:add("to_v", U.Linear(dim, inner))
  if not pre_only then m:add("to_out", U.ModuleList { U.Linear(inner, dim) }) end
  if added then
    m:add("norm_added_q", D.RMSNorm(dh))
    m:add("norm_added_k", D.RMSNorm(dh))
    m:add("add_q_proj", U.Linear(dim, inner))
    m:add("add_k_proj", U.Linear(dim, inner))
    m:add("add_v_proj", U.Linear(dim, inner))
    m:add("to_add_out", U.Linear(inner, dim))
  end
  return m
end

-- FluxTransformerBlock.forward(hidden_states, encoder_hidden_states, temb, image_rotary_emb):
-- returns encoder_hidden_states, hidden_states.
-- The frame's locals live where Python keeps them (D.frame_release): the caller's hidden_states
-- and encoder_hidden_states until the block returns; norm_hidden_states and
-- norm_encoder_hidden_states until norm2 and norm2_context rebind them; the attention_outputs
-- tuple, the gated attn_output and context_attn_output, the modulated norms, the gated ff_output
-- and context_ff_output until the return.
local function double_forward(cx, m, h, ctx, temb, rope)
  local name, C = m.opname, m.children
  local h_in, ctx_in = h, ctx
  local nh, gate_msa, shift_mlp, scale_mlp, gate_mlp = call(cx, C.norm1, h, temb)
  local nc, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = call(cx, C.norm1_context, ctx, temb)
  local ao, cao = call(cx, C.attn, nh, nc, rope)
  local gao = D.gate(cx, name .. ".gate_msa", gate_msa, ao)
  h = nn.add(cx, name .. ".add_attn", h, gao)
  local n2 = D.layer_norm(cx, name .. ".norm2", h)
  D.frame_release(cx, name .. ".norm_hidden_states", { nh })
  n2 = D.modulate(cx, name .. ".norm2", n2, scale_mlp, shift_mlp)
  local f = call(cx, C.ff, n2)
  local gf = D.gate(cx, name .. ".gate_mlp", gate_mlp, f)
  h = nn.add(cx, name .. ".add_ff", h, gf)
  local gcao = D.gate(cx, name .. ".c_gate_msa", c_gate_msa, cao)
  ctx = nn.add(cx, name .. ".add_context_attn", ctx, gcao)
  local nc2 = D.layer_norm(cx, name .. ".norm2_context", ctx)
  D.frame_release(cx, name .. ".norm_encoder_hidden_states", { nc })
  nc2 = D.modulate(cx, name .. ".norm2_context", nc2, c_scale_mlp, c_shift_mlp)
  local cf = call(cx, C.ff_context, nc2)
  ctx = nn.add(cx, name .. ".add_context_ff", ctx, D.gate(cx, name .. ".c_gate_mlp", c_gate_mlp, cf))
  D.frame_release(cx, name .. ".frame", { h_in, ctx_in, ao, cao, gao, n2, gf, gcao, nc2, cf })
  return ctx, h
end

-- __init__ order: norm1, norm1_context, attn, norm2 (no parameters), ff, norm2_context, ff_context.
function F.FluxTransformerBlock(dim, heads, dh)
  local m = mod.new("FluxTransformerBlock", double_forward, { dim = dim })
  m:add("norm1", D.AdaLayerNormZero(dim))
  m:add("norm1_context", D.AdaLayerNormZero(dim))
  m:add("attn", F.FluxAttention(dim, heads, dh, true, false))
  m:add("ff", D.FeedForward(dim))
  m:add("ff_context", D.FeedForward(dim))
  return m
end

-- FluxSingleTransformerBlock.forward: hidden = cat([encoder_hidden_states, hidden_states], 1);
-- norm; mlp = gelu_tanh(proj_mlp(norm)); attn(norm); cat([attn, mlp], 2); gate * proj_out(...);
-- + residual; the text and image slices (their backward: a full-size buffer each).
-- The frame's locals live where Python keeps them (D.frame_release): the caller's hidden_states
-- and encoder_hidden_states (the slices of the block before), norm_hidden_states,
-- mlp_hidden_states and attn_output until the block returns; the concatenation until
-- `gate * proj_out(...)` rebinds its name (the H100 trace of gen5-flux-dev-d2s4-lora-r1024-flash:
-- the last block's peak is that product, with normalization.py:201's output and the block's
-- inputs still live).
local function single_forward(cx, m, h, ctx, temb, rope)
  local name, C = m.opname, m.children
  local st = ctx.shape[2]
  local x = nn.cat(cx, name .. ".cat_streams", { ctx, h }, 2)
  local nx, gate = call(cx, C.norm, x, temb)
  local mlp = call(cx, C.proj_mlp, nx, { keep_input = true })
  mlp = nn.act(cx, name .. ".act_mlp", mlp)
  local ao = call(cx, C.attn, nx, nil, rope)
  local both = nn.cat(cx, name .. ".cat_attn_mlp", { ao, mlp }, 3)
  local p = call(cx, C.proj_out, both)
  local gp = D.gate(cx, name .. ".gate", gate, p)
  D.frame_release(cx, name .. ".cat_rebound", { both })
  local y = nn.add(cx, name .. ".residual", x, gp)
  D.frame_release(cx, name .. ".frame", { h, ctx, nx, mlp, ao })
  local n, s, dim = y.shape[1], y.shape[2], y.shape[3]
  local c = nn.view_op(cx, name .. ".text_slice", y, { n, st, dim }, nil, "copy")
  local i = nn.view_op(cx, name .. ".image_slice", y, { n, s - st, dim }, nil, "copy")
  return c, i
end

-- __init__ order: norm, proj_mlp, proj_out, attn.
function F.FluxSingleTransformerBlock(dim, heads, dh)
  local m = mod.new("FluxSingleTransformerBlock", single_forward, { dim = dim })
  m:add("norm", D.AdaLayerNormZeroSingle(dim))
  m:add("proj_mlp", U.Linear(dim, 4 * dim))
  m:add("proj_out", U.Linear(5 * dim, dim))
  m:add("attn", F.FluxAttention(dim, heads, dh, false, true))
  return m
end

-- CombinedTimestep(Guidance)TextProjEmbeddings.forward(timestep, [guidance,] pooled_projection):
-- Timesteps(256) of each, cast to the pooled projection's dtype, TimestepEmbedding; their sum
-- plus text_embedder(pooled) (PixArtAlphaTextProjection: linear_1, SiLU, linear_2).
local function time_text_forward(cx, m, t, guidance, pooled)
  local C = m.children
  local n = t.shape[1]
  local function embed(x, emb, nm)
    local p = call(cx, C.time_proj, x, n)
    p = nn.to(cx, p, pooled.dtype, m.opname .. "." .. nm .. "_proj.to_dtype")
    return call(cx, emb, p)
  end
  local e = embed(t, C.timestep_embedder, "timesteps")
  if C.guidance_embedder then
    e = nn.add(cx, m.opname .. ".time_guidance", e, embed(guidance, C.guidance_embedder, "guidance"))
  end
  return nn.add(cx, m.opname .. ".conditioning", e, call(cx, C.text_embedder, pooled))
end

-- CombinedTimestepTextProjEmbeddings(dim, pooled_dim) on its own (SD3Transformer2DModel's
-- time_text_embed): time_proj, timestep_embedder, text_embedder; forward(t, nil, pooled).
function F.CombinedTimestepTextProjEmbeddings(dim, pooled_dim)
  local tt = mod.new("CombinedTimestepTextProjEmbeddings", time_text_forward)
  tt:add("time_proj", U.Timesteps(256))
  tt:add("timestep_embedder", U.TimestepEmbedding(256, dim))
  tt:add("text_embedder", U.TimestepEmbedding(pooled_dim, dim))
  return tt
end

-- FluxPosEmbed(theta=10000, axes_dim).forward(cat(txt_ids, img_ids)): per axis
-- get_1d_rotary_pos_embed in float64 (outer product of positions and frequencies, cos and sin,
-- repeat_interleave to the axis' width, cast to fp32), the axes' tables concatenated: cos and
-- sin (s, head_dim) fp32, no autograd history. The float64 temporaries are per axis (s, d_axis)
-- (written int64 here: the op library's 8-byte dtype, as it names no float64).
local function rope_tables(cx, name, ids, axes)
  local s = ids.shape[1]
  local saved = cx.no_grad
  cx.no_grad = true
  local pos = nn.op_sized(cx, { name = name .. ".ids_float", inputs = { ids }, outs = { { name .. ".pos", { s, #axes }, "fp32" } } })
  local cs, ss = {}, {}
  local total = 0
  for i, d in ipairs(axes) do
    local nm = name .. ".axis" .. (i - 1)
    -- 1.0 / (theta ** (arange(0, d, 2) / d)) / linear_factor in float64: arange, div, pow,
    -- reciprocal, mul, div, each a (d / 2,) tensor; freqs = outer(pos, that); cos, sin,
    -- repeat_interleave(2), float()
    local f1 = nn.op_sized(cx, { name = nm .. ".arange", inputs = {}, outs = { { nm .. ".arange", { d // 2 }, "int64" } } })
    for _, op in ipairs { "div_dim", "pow_theta", "reciprocal", "mul", "div_linear_factor" } do
      f1 = nn.op_sized(cx, { name = nm .. "." .. op, inputs = { f1 }, outs = { { nm .. "." .. op, { d // 2 }, "int64" } } })
    end
    local fr = nn.op_sized(cx, { name = nm .. ".freqs", inputs = { pos, f1 }, frees = { f1 },
                                 outs = { { nm .. ".freqs", { s, d // 2 }, "int64" } } })
    for _, kind in ipairs { "cos", "sin" } do
      local f = nn.op_sized(cx, { name = nm .. "." .. kind, inputs = { fr }, frees = {},
                                  outs = { { nm .. "." .. kind .. "64", { s, d // 2 }, "int64" } } })
      f = nn.op_sized(cx, { name = nm .. "." .. kind .. ".repeat_interleave", inputs = { f },
                            outs = { { nm .. "." .. kind .. "_rep", { s, d }, "int64" } } })
      f = nn.op_sized(cx, { name = nm .. "." .. kind .. ".float", inputs = { f },
                            outs = { { nm .. "." .. kind, { s, d }, "fp32" } } })
      if kind == "cos" then cs[i] = f else ss[i] = f end
    end
    nn.release(cx, { fr }, nm .. ".freqs dropped")
    total = total + d
  end
  local cos = nn.cat(cx, name .. ".cos", cs, 2)
  local sin = nn.cat(cx, name .. ".sin", ss, 2)
  nn.release(cx, { pos }, name .. ".pos dropped")
  cx.no_grad = saved
  return { cos, sin }
end

-- FluxTransformer2DModel.forward(hidden_states, encoder_hidden_states, pooled_projections,
-- timestep, img_ids, txt_ids, guidance): x_embedder; timestep.to(dtype) * 1000 (and guidance);
-- time_text_embed; context_embedder; the rotary tables of cat(txt_ids, img_ids); the double
-- blocks, the single blocks (each a checkpoint unit under enable_gradient_checkpointing);
-- norm_out, proj_out.
local function flux_forward(cx, m, x, ctx, pooled, t, img_ids, txt_ids, guidance)
  local C, name = m.children, m.opname
  local h = call(cx, C.x_embedder, x)
  local ts = nn.to(cx, t, h.dtype, name .. ".timestep.to_dtype")
  ts = nn.ew(cx, name .. ".timestep.mul_1000", { ts }, ts.dtype)
  local g
  if C.time_text_embed.children.guidance_embedder then
    g = nn.to(cx, guidance, h.dtype, name .. ".guidance.to_dtype")
    g = nn.ew(cx, name .. ".guidance.mul_1000", { g }, g.dtype)
  end
  local temb = call(cx, C.time_text_embed, ts, g, pooled)
  local e = call(cx, C.context_embedder, ctx)
  local ids = nn.cat(cx, name .. ".ids", { txt_ids, img_ids }, 1)
  local rope = rope_tables(cx, name .. ".pos_embed", ids, m.cfg.axes_dims_rope)
  local blocks = C.transformer_blocks
  for _, k in ipairs(blocks.order) do e, h = call(cx, blocks.children[k], h, e, temb, rope) end
  local singles = C.single_transformer_blocks
  for _, k in ipairs(singles.order) do e, h = call(cx, singles.children[k], h, e, temb, rope) end
  nn.release(cx, { e }, name .. ".encoder_hidden_states dropped")
  h = call(cx, C.norm_out, h, temb)
  return call(cx, C.proj_out, h)
end

-- The tree from a FluxTransformer2DModel config (c: patch_size, in_channels, out_channels,
-- num_layers, num_single_layers, attention_head_dim, num_attention_heads, joint_attention_dim,
-- pooled_projection_dim, guidance_embeds, axes_dims_rope), children in __init__'s order:
-- pos_embed (no parameters), time_text_embed (time_proj, timestep_embedder, guidance_embedder,
-- text_embedder), context_embedder, x_embedder, transformer_blocks, single_transformer_blocks,
-- norm_out, proj_out. The blocks are the units (layer ids in forward order).
function F.FluxTransformer2DModel(c, prefix)
  local dim = c.num_attention_heads * c.attention_head_dim
  local heads, dh = c.num_attention_heads, c.attention_head_dim
  local root = mod.new("FluxTransformer2DModel", flux_forward, { cfg = c, layer = -1 })
  local tt = root:add("time_text_embed", mod.new(c.guidance_embeds and "CombinedTimestepGuidanceTextProjEmbeddings"
                                                 or "CombinedTimestepTextProjEmbeddings", time_text_forward))
  tt:add("time_proj", U.Timesteps(256))
  tt:add("timestep_embedder", U.TimestepEmbedding(256, dim))
  if c.guidance_embeds then tt:add("guidance_embedder", U.TimestepEmbedding(256, dim)) end
  tt:add("text_embedder", U.TimestepEmbedding(c.pooled_projection_dim, dim))
  root:add("context_embedder", U.Linear(c.joint_attention_dim, dim))
  root:add("x_embedder", U.Linear(c.in_channels, dim))
  local list = {}
  for i = 1, c.num_layers do
    list[i] = F.FluxTransformerBlock(dim, heads, dh)
    list[i].layer = i - 1
  end
  root:add("transformer_blocks", U.ModuleList(list))
  list = {}
  for i = 1, c.num_single_layers do
    list[i] = F.FluxSingleTransformerBlock(dim, heads, dh)
    list[i].layer = c.num_layers + i - 1
  end
  root:add("single_transformer_blocks", U.ModuleList(list))
  root:add("norm_out", D.AdaLayerNormContinuous(dim, dim))
  local p = c.patch_size or 1
  root:add("proj_out", U.Linear(dim, p * p * (c.out_channels or c.in_channels)))
  mod.finalize(root, prefix)
  mod.walk(root, function(x) x.opname = x.opname or x.path end)
  root.no_split = { FluxTransformerBlock = true, FluxSingleTransformerBlock = true }
  root.checkpoint_classes = { FluxTransformerBlock = true, FluxSingleTransformerBlock = true }
  root.checkpoint_holds_args = true
  return root
end

return F
