-- blocks/unet.lua: the blocks of diffusers' UNet2DConditionModel (ResnetBlock2D,
-- Transformer2DModel with BasicTransformerBlock, Downsample2D, Upsample2D, timestep embeddings),
-- their parameters (named as in diffusers' state dict) and their forward ops.
--
-- Python-level lifetimes matter for peak memory: a tensor passed as a temporary argument lives
-- until the callee returns, a function's locals until it returns. The trace of the measured run
-- shows them (e.g. the attention's q, k, v and its normed input are freed after to_out), and the
-- forward functions below drop those references where Python does (ops.release).
local nn = require "vrsim.nn"
local O = require "models.blocks.ops"

local U = {}

-- Parameter declaration -----------------------------------------------------------------------

-- mk(name, shape) declares one parameter; returns a table of them keyed by short names.
function U.resnet_params(mk, p, cin, cout, temb)
  local R = { cin = cin, cout = cout }
  R.norm1_w = mk(p .. "norm1.weight", { cin })
  R.norm1_b = mk(p .. "norm1.bias", { cin })
  R.conv1_w = mk(p .. "conv1.weight", { cout, cin, 3, 3 })
  R.conv1_b = mk(p .. "conv1.bias", { cout })
  if temb then
    R.temb_w = mk(p .. "time_emb_proj.weight", { cout, temb })
    R.temb_b = mk(p .. "time_emb_proj.bias", { cout })
  end
  R.norm2_w = mk(p .. "norm2.weight", { cout })
  R.norm2_b = mk(p .. "norm2.bias", { cout })
  R.conv2_w = mk(p .. "conv2.weight", { cout, cout, 3, 3 })
  R.conv2_b = mk(p .. "conv2.bias", { cout })
  if cin ~= cout then
    R.short_w = mk(p .. "conv_shortcut.weight", { cout, cin, 1, 1 })
    R.short_b = mk(p .. "conv_shortcut.bias", { cout })
  end
  return R
end

function U.attention_params(mk, p, dim, kv_dim, bias_qkv)
  local A = { prefix = p }
  if U.registry then U.registry[#U.registry + 1] = A end
  A.q = mk(p .. "to_q.weight", { dim, dim })
  if bias_qkv then A.qb = mk(p .. "to_q.bias", { dim }) end
  A.k = mk(p .. "to_k.weight", { dim, kv_dim })
  if bias_qkv then A.kb = mk(p .. "to_k.bias", { dim }) end
  A.v = mk(p .. "to_v.weight", { dim, kv_dim })
  if bias_qkv then A.vb = mk(p .. "to_v.bias", { dim }) end
  A.o = mk(p .. "to_out.0.weight", { dim, dim })
  A.ob = mk(p .. "to_out.0.bias", { dim })
  return A
end

function U.transformer_params(mk, p, dim, depth, cross_dim)
  local T = { dim = dim, blocks = {} }
  T.norm_w = mk(p .. "norm.weight", { dim })
  T.norm_b = mk(p .. "norm.bias", { dim })
  T.proj_in_w = mk(p .. "proj_in.weight", { dim, dim })
  T.proj_in_b = mk(p .. "proj_in.bias", { dim })
  for i = 0, depth - 1 do
    local q = p .. "transformer_blocks." .. i .. "."
    local B = {}
    B.norm1_w = mk(q .. "norm1.weight", { dim })
    B.norm1_b = mk(q .. "norm1.bias", { dim })
    B.attn1 = U.attention_params(mk, q .. "attn1.", dim, dim)
    B.norm2_w = mk(q .. "norm2.weight", { dim })
    B.norm2_b = mk(q .. "norm2.bias", { dim })
    B.attn2 = U.attention_params(mk, q .. "attn2.", dim, cross_dim)
    B.norm3_w = mk(q .. "norm3.weight", { dim })
    B.norm3_b = mk(q .. "norm3.bias", { dim })
    B.ff_w = mk(q .. "ff.net.0.proj.weight", { dim * 8, dim })
    B.ff_b = mk(q .. "ff.net.0.proj.bias", { dim * 8 })
    B.ff2_w = mk(q .. "ff.net.2.weight", { dim, dim * 4 })
    B.ff2_b = mk(q .. "ff.net.2.bias", { dim })
    T.blocks[i + 1] = B
  end
  T.proj_out_w = mk(p .. "proj_out.weight", { dim, dim })
  T.proj_out_b = mk(p .. "proj_out.bias", { dim })
  return T
end

function U.conv_params(mk, p, cin, cout, k)
  return { w = mk(p .. "weight", { cout, cin, k, k }), b = mk(p .. "bias", { cout }) }
end

function U.linear_params(mk, p, cin, cout)
  return { w = mk(p .. "weight", { cout, cin }), b = mk(p .. "bias", { cout }) }
end

-- Forward ---------------------------------------------------------------------------------------

-- Checkpoint regions: cx.next_region() gives a new region id when checkpointing is on.
local function region(cx, on)
  if not on then return nil end
  cx.region_count = (cx.region_count or 0) + 1
  return cx.region_count
end
U.new_region = region

-- ResnetBlock2D.forward (time_embedding_norm "default", output_scale_factor 1, dropout 0).
-- temb may be nil (the VAE's blocks). eps: 1e-5 in the UNet, 1e-6 in the VAE (no memory effect).
function U.resnet(cx, name, R, x, temb, ckpt)
  local saved_region = cx.region
  cx.region = region(cx, ckpt) or saved_region
  local h = O.group_norm(cx, name .. ".norm1", x, R.norm1_w, R.norm1_b, 32)
  h = O.act(cx, name .. ".silu1", h)
  h = O.conv2d(cx, name .. ".conv1", h, R.conv1_w, R.conv1_b)
  if temb then
    local t = O.act(cx, name .. ".temb_silu", temb)
    t = O.linear(cx, name .. ".time_emb_proj", t, R.temb_w, R.temb_b)
    local tv = nn.view(cx, t, { t.shape[1], t.shape[2], 1, 1 }, name .. ".temb_4d")
    h = O.add(cx, name .. ".add_temb", h, tv)
  end
  h = O.group_norm(cx, name .. ".norm2", h, R.norm2_w, R.norm2_b, 32)
  h = O.act(cx, name .. ".silu2", h)
  local c2 = O.conv2d(cx, name .. ".conv2", h, R.conv2_w, R.conv2_b)
  local sc = x
  if R.short_w then
    sc = O.conv2d(cx, name .. ".conv_shortcut", x, R.short_w, R.short_b)
  end
  -- output_tensor = (input_tensor + hidden_states) / output_scale_factor; the locals
  -- hidden_states and input_tensor are dropped when the function returns
  local sum = O.add(cx, name .. ".add_residual", sc, c2, { frees = R.short_w and {} or { x } })
  local out = O.div_scalar(cx, name .. ".output_scale", sum)
  O.release(cx, name .. ".return", R.short_w and { c2, sc } or { c2 })
  cx.region = saved_region
  return out
end

-- peft's LoRA Linear.forward on top of the (frozen) base projection: result = base(x); the input
-- cast to the adapters' dtype (a copy, kept by lora_A for its weight gradient); dropout (a mask,
-- when p > 0); lora_A; lora_B; * scaling; result + that (promoted); .to(result dtype).
function U.lora_linear(cx, name, x, w, b, ad, opts)
  local lora = cx.lora
  local result = O.linear(cx, name, x, w, b, opts)
  local xa = O.to(cx, x, ad.A.dtype, name .. ".lora_input_cast")
  local xd = xa
  if lora.dropout > 0 then
    xd = O.op(cx, { name = name .. ".lora_dropout", inputs = { xa },
                    outs = { { name .. ".lora_dropout", xa.shape, xa.dtype },
                             { name .. ".dropout_mask", xa.shape, "bool", no_grad = true } },
                    save_outs = { 2 }, flops = nn.numel(xa.shape) })
  end
  local a = O.linear(cx, name .. ".lora_A", xd, ad.A)
  local bo = O.linear(cx, name .. ".lora_B", a, ad.B)
  local scaled = O.op(cx, { name = name .. ".lora_scale", inputs = { bo },
                            outs = { { name .. ".lora_scale", bo.shape, bo.dtype } } })
  local dt = O.promote(result.dtype, scaled.dtype)
  local sum = O.op(cx, { name = name .. ".lora_add", inputs = { result, scaled },
                         outs = { { name .. ".lora_sum", result.shape, dt } },
                         grads = { { pass = 1 }, { pass = 1 } } })
  return O.to(cx, sum, result.dtype, name .. ".lora_out_cast")
end

local function proj(cx, name, x, A, key, w, b, opts)
  local ad = A.lora and A.lora[key]
  if ad then
    if opts and opts.keep_input then
      -- the frame keeps x; the LoRA branch reads it too
      local r = U.lora_linear(cx, name, x, w, b, ad, { keep_input = true })
      return r
    end
    return U.lora_linear(cx, name, x, w, b, ad, opts)
  end
  return O.linear(cx, name, x, w, b, opts)
end

-- Attention with AttnProcessor2_0: q, k, v projections, SDPA, to_out, / rescale_output_factor.
-- x is the caller's temporary (the normed input): released with the frame's locals.
function U.attention(cx, name, A, x, ctx, heads)
  local kv_in = ctx or x
  local q = proj(cx, name .. ".to_q", x, A, "to_q", A.q, A.qb, { keep_input = true })
  local k = proj(cx, name .. ".to_k", kv_in, A, "to_k", A.k, A.kb, { keep_input = true })
  local v = proj(cx, name .. ".to_v", kv_in, A, "to_v", A.v, A.vb, { keep_input = true })
  local b, s, c = q.shape[1], q.shape[2], q.shape[3]
  local sk = k.shape[2]
  local d = c // heads
  local ao, a2
  if cx.attention == "eager" then
    a2 = O.attention_eager(cx, name, q, k, v, heads)
    ao = a2
  else
    local qh = nn.view(cx, q, { b, heads, s, d }, name .. ".q_heads")
    local kh = nn.view(cx, k, { b, heads, sk, d }, name .. ".k_heads")
    local vh = nn.view(cx, v, { b, heads, sk, d }, name .. ".v_heads")
    ao = O.sdpa(cx, name, qh, kh, vh, { keep_input = true })
    a2 = nn.view(cx, ao, { b, s, c }, name .. ".attn_out_nlc")
  end
  local o = proj(cx, name .. ".to_out.0", a2, A, "to_out.0", A.o, A.ob, { keep_input = true })
  local out = O.div_scalar(cx, name .. ".rescale", o)
  O.release(cx, name .. ".return", { q, k, v, ao, x })
  return out
end

-- BasicTransformerBlock (layer norms, self-attention, cross-attention, GEGLU feed-forward).
function U.transformer_block(cx, name, B, h, ctx, heads, ckpt)
  local saved_region = cx.region
  cx.region = region(cx, ckpt) or saved_region
  local n1 = O.layer_norm(cx, name .. ".norm1", h, B.norm1_w, B.norm1_b)
  local a1 = U.attention(cx, name .. ".attn1", B.attn1, n1, nil, heads)
  h = O.add(cx, name .. ".add_attn1", a1, h)
  local n2 = O.layer_norm(cx, name .. ".norm2", h, B.norm2_w, B.norm2_b)
  local a2 = U.attention(cx, name .. ".attn2", B.attn2, n2, ctx, heads)
  h = O.add(cx, name .. ".add_attn2", a2, h)
  local n3 = O.layer_norm(cx, name .. ".norm3", h, B.norm3_w, B.norm3_b)
  -- GEGLU: proj, chunk (two views), gelu(gate), product
  local p = O.linear(cx, name .. ".ff.net.0.proj", n3, B.ff_w, B.ff_b, { keep_input = true })
  local half = O.copy_shape(p.shape)
  half[#half] = half[#half] // 2
  local hs = nn.view(cx, p, half, name .. ".ff.hidden")
  local gate = nn.view(cx, p, half, name .. ".ff.gate")
  O.op(cx, { name = name .. ".ff.chunk", kind = "none", inputs = { p },
             out_tensors = { hs, gate }, bytes = 0,
             grads = { { dtype = p.dtype } } })
  local g = O.act(cx, name .. ".ff.gelu", gate)
  local m = O.mul(cx, name .. ".ff.geglu", hs, g, hs.dtype, { frees = { g, hs } })
  local f = O.linear(cx, name .. ".ff.net.2", m, B.ff2_w, B.ff2_b)
  O.release(cx, name .. ".ff.return", { n3 })
  h = O.add(cx, name .. ".add_ff", f, h)
  cx.region = saved_region
  return h
end

-- Transformer2DModel (continuous input, linear projections): GroupNorm (eps 1e-6), the
-- permute(0,2,3,1).reshape view, proj_in (a bmm on that non-contiguous view, which it keeps),
-- the blocks (each a checkpoint region), proj_out, the copy back to NCHW, the residual add.
function U.transformer2d(cx, name, T, x, ctx, heads, ckpt)
  local b, c, hh, ww = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
  local g = O.group_norm(cx, name .. ".norm", x, T.norm_w, T.norm_b, 32)
  local gv = nn.view(cx, g, { b, hh * ww, c }, name .. ".nlc_view")
  local h = O.linear(cx, name .. ".proj_in", gv, T.proj_in_w, T.proj_in_b, { noncontig = true })
  for i, B in ipairs(T.blocks) do
    h = U.transformer_block(cx, name .. ".transformer_blocks." .. (i - 1), B, h, ctx, heads, ckpt)
  end
  -- reshape(b, h, w, c).permute(0, 3, 1, 2).contiguous(): the gradient comes back as a
  -- permuted view, which proj_out's backward must copy when the batch does not fold into a view
  local pbw = b > 1 and { nn.bytes(h.shape, h.dtype) } or nil
  h = O.linear(cx, name .. ".proj_out", h, T.proj_out_w, T.proj_out_b,
                { bwd_workspace = pbw, grad_transposed = true })
  h = O.copy(cx, name .. ".to_nchw", h, { b, c, hh, ww })
  return O.add(cx, name .. ".add_residual", h, x)
end

function U.downsample(cx, name, C, x)
  return O.conv2d(cx, name .. ".conv", x, C.w, C.b, { stride = 2, pad = 1 })
end

function U.upsample(cx, name, C, x)
  local u = O.upsample_nearest2x(cx, name .. ".interpolate", x)
  return O.conv2d(cx, name .. ".conv", u, C.w, C.b)
end

-- get_timestep_embedding(t, dim, flip_sin_to_cos=True, shift=0) on (n,) values: fp32 math on small
-- tensors (arange, scale, exp, outer product, sin, cos, cat).
function U.timestep_embedding(cx, name, t, n, dim)
  local half = dim // 2
  local saved = cx.no_grad
  cx.no_grad = true
  local a = O.op(cx, { name = name .. ".arange", inputs = {}, outs = { { name .. ".arange", { half }, "fp32" } } })
  a = nn.ew(cx, name .. ".mul_log", { a }, "fp32")
  a = nn.ew(cx, name .. ".div", { a }, "fp32")
  a = nn.ew(cx, name .. ".exp", { a }, "fp32")
  local tf = O.op(cx, { name = name .. ".t_float", inputs = { t }, outs = { { name .. ".t_float", { n }, "fp32" } } })
  local e = O.op(cx, { name = name .. ".outer", inputs = { tf, a }, outs = { { name .. ".outer", { n, half }, "fp32" } } })
  local s = O.op(cx, { name = name .. ".sin", inputs = { e }, outs = { { name .. ".sin", { n, half }, "fp32" } }, frees = {} })
  local co = O.op(cx, { name = name .. ".cos", inputs = { e }, outs = { { name .. ".cos", { n, half }, "fp32" } }, frees = {} })
  local cat = O.op(cx, { name = name .. ".cat", inputs = { co, s }, outs = { { name .. ".emb", { n, dim }, "fp32" } }, frees = {} })
  O.release(cx, name .. ".return", { e, s, co })
  cx.no_grad = saved
  return cat
end

-- TimestepEmbedding: linear_1, SiLU, linear_2.
function U.timestep_mlp(cx, name, L1, L2, x)
  local h = O.linear(cx, name .. ".linear_1", x, L1.w, L1.b)
  h = O.act(cx, name .. ".act", h)
  return O.linear(cx, name .. ".linear_2", h, L2.w, L2.b)
end

return U
