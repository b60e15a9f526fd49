-- blocks/unet.lua: the blocks of diffusers' UNet2DConditionModel as modules (vrsim/module.lua),
-- op by op as diffusers 0.3x runs them (models/unets/unet_2d_condition.py, unet_2d_blocks.py,
-- models/resnet.py, models/transformers/transformer_2d.py, models/attention.py,
-- models/attention_processor.py AttnProcessor2_0, models/embeddings.py, models/downsampling.py,
-- models/upsampling.py). A UNet is a configuration of these blocks: UNet2DConditionModel picks
-- its down, mid and up blocks by name from the config (down_block_types, mid_block_type,
-- up_block_types), as get_down_block / get_up_block do.
--
-- Parameters are declared with diffusers' state-dict names (the module paths); every op carries
-- its module's path as its name. Strategies are passes over the tree (lua/strategies/): a block's
-- forward reads its parameters through module.weight and calls its children through
-- module.call, so a pass can gather, checkpoint or wrap any of them.
--
-- Python-level lifetimes matter for peak memory: a tensor passed as a temporary argument lives
-- until the callee returns, a function's locals until it returns. The trace of the measured run
-- shows them (e.g. the attention's q, k, v and its normed input are freed after to_out), and the
-- forwards below drop those references where Python does (nn.release).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local W = mod.weight
local call = mod.call

local U = {}

-- Leaf modules ---------------------------------------------------------------------------------

-- nn.Linear: F.linear(x, weight, bias). opts (the caller's view of its input): keep_input (the
-- caller's frame still holds x), noncontig (x is a permuted view), grad_transposed,
-- bwd_workspace (vrsim/ops/linear.lua).
local function linear_forward(cx, m, x, opts)
  return nn.linear(cx, m.opname, x, W(cx, m.p.weight), m.p.bias and W(cx, m.p.bias), opts)
end
U.linear_forward = linear_forward

function U.Linear(cin, cout, bias)
  local m = mod.new("Linear", linear_forward, { in_features = cin, out_features = cout })
  m:declare("weight", { cout, cin })
  if bias ~= false then m:declare("bias", { cout }) end
  return m
end

-- nn.Conv2d (padding k // 2 unless given). opts.frees: the references the call drops.
local function conv_forward(cx, m, x, opts)
  return nn.conv2d(cx, m.opname, x, W(cx, m.p.weight), W(cx, m.p.bias),
                  { stride = m.stride, pad = m.pad, frees = opts and opts.frees })
end

function U.Conv2d(cin, cout, k, stride, pad)
  local m = mod.new("Conv2d", conv_forward, { in_channels = cin, out_channels = cout, kernel = k,
                                              stride = stride, pad = pad })
  m:declare("weight", { cout, cin, k, k })
  m:declare("bias", { cout })
  return m
end

local function group_norm_forward(cx, m, x, opts)
  return nn.group_norm(cx, m.opname, x, W(cx, m.p.weight), W(cx, m.p.bias), m.groups, opts)
end

function U.GroupNorm(groups, c)
  local m = mod.new("GroupNorm", group_norm_forward, { groups = groups, channels = c })
  m:declare("weight", { c })
  m:declare("bias", { c })
  return m
end

local function layer_norm_forward(cx, m, x, opts)
  return nn.layer_norm(cx, m.opname, x, W(cx, m.p.weight), W(cx, m.p.bias), opts)
end

function U.LayerNorm(c)
  local m = mod.new("LayerNorm", layer_norm_forward, { channels = c })
  m:declare("weight", { c })
  m:declare("bias", { c })
  return m
end

-- A ModuleList: children keyed 0, 1, ...; no forward of its own.
function U.ModuleList(list)
  local m = mod.new("ModuleList", nil)
  for i, c in ipairs(list or {}) do m:add(i - 1, c) end
  return m
end

-- ResnetBlock2D ------------------------------------------------------------------------------

-- ResnetBlock2D.forward(input_tensor, temb) (time_embedding_norm "default", output_scale_factor
-- 1, dropout 0). temb may be nil (the VAE's blocks). eps (1e-5 in the UNet, 1e-6 in the VAE)
-- changes no memory.
local function resnet_forward(cx, m, x, temb)
  local name, C = m.opname, m.children
  local h = call(cx, C.norm1, x)
  h = nn.act(cx, name .. ".silu1", h)
  h = call(cx, C.conv1, h)
  if temb and C.time_emb_proj then
    local t = nn.act(cx, name .. ".temb_silu", temb)
    t = call(cx, C.time_emb_proj, t)
    local tv = nn.view(cx, t, { t.shape[1], t.shape[2], 1, 1 }, name .. ".temb_4d")
    -- temb[:, :, None, None]: two unsqueeze views (host class "view")
    h = nn.add(cx, name .. ".add_temb", h, tv, { host_views = 2 })
  end
  h = call(cx, C.norm2, h)
  h = nn.act(cx, name .. ".silu2", h)
  local c2 = call(cx, C.conv2, h)
  local short = C.conv_shortcut
  local sc = x
  if short then sc = call(cx, short, x) end
  -- output_tensor = (input_tensor + hidden_states) / output_scale_factor; the locals
  -- hidden_states and input_tensor are dropped when the function returns, and the caller's
  -- variable holds the block's input until then (it is reassigned to the output): x lives to
  -- the return even where nothing saves it (a frozen VAE's encode under no_grad)
  local sum = nn.add(cx, name .. ".add_residual", sc, c2, { frees = short and {} or { x } })
  local out = nn.div_scalar(cx, name .. ".output_scale", sum)
  nn.release(cx, short and { c2, sc, x } or { c2, x }, name .. ".return")
  return out
end

-- __init__ order: norm1, conv1, time_emb_proj, norm2, conv2, conv_shortcut (when cin ~= cout).
function U.ResnetBlock2D(cin, cout, temb, groups)
  groups = groups or 32
  local m = mod.new("ResnetBlock2D", resnet_forward, { in_channels = cin, out_channels = cout })
  m:add("norm1", U.GroupNorm(groups, cin))
  m:add("conv1", U.Conv2d(cin, cout, 3))
  if temb then m:add("time_emb_proj", U.Linear(temb, cout)) end
  m:add("norm2", U.GroupNorm(groups, cout))
  m:add("conv2", U.Conv2d(cout, cout, 3))
  if cin ~= cout then m:add("conv_shortcut", U.Conv2d(cin, cout, 1)) end
  return m
end

-- Attention ----------------------------------------------------------------------------------

-- diffusers' AttnProcessor (training.attention = "eager": no SDPA): head_to_batch_dim copies of
-- q, k, v; baddbmm into an empty (b*h, s, sk) buffer (scores, then the buffer dropped); softmax
-- (kept for backward); bmm with v; batch_to_head_dim copy back. The s x sk probabilities of
-- every attention stay alive until backward.
local function attention_eager(cx, name, q, k, v, heads)
  local b, s, c = q.shape[1], q.shape[2], q.shape[3]
  local sk = k.shape[2]
  local d = c // heads
  local function to_batch(x, nm, len)
    return nn.op_sized(cx, { name = name .. "." .. nm .. "_head_to_batch", inputs = { x },
                      outs = { { name .. "." .. nm .. "_bh", { b * heads, len, d }, x.dtype } },
                      grads = { { dtype = x.dtype } } })
  end
  local qb, kb, vb = to_batch(q, "q", s), to_batch(k, "k", sk), to_batch(v, "v", sk)
  local dt = qb.dtype
  local sshape = { b * heads, s, sk }
  local empty = nn.op_sized(cx, { name = name .. ".baddbmm_input", inputs = {}, outs = { { name .. ".baddbmm_input", sshape, dt } } })
  local scores = nn.op_sized(cx, { name = name .. ".baddbmm", kind = "mm", inputs = { empty, qb, kb },
                            outs = { { name .. ".scores", sshape, dt } }, saves = { qb, kb },
                            grads = { "none", { dtype = dt }, { dtype = dt } },
                            flops = 2 * b * heads * s * sk * d, dtype = dt })
  -- softmax is an fp32 op under autocast: the scores are cast up, the probabilities come out
  -- in fp32 and the bmm casts them back down (that copy is what it keeps)
  local sc = nn.autocast(cx, "softmax", { scores }, 1, { names = { name .. ".scores_float" } })[1]
  local probs = nn.op_sized(cx, { name = name .. ".softmax", kind = "softmax", inputs = { sc },
                           outs = { { name .. ".probs", sshape, sc.dtype } }, save_outs = { 1 },
                           flops = 5 * nn.numel(sshape), dtype = sc.dtype })
  probs = nn.autocast(cx, "bmm", { probs, vb }, 2, { names = { name .. ".probs_cast" } })[1]
  local o = nn.op_sized(cx, { name = name .. ".bmm", kind = "mm", inputs = { probs, vb },
                       outs = { { name .. ".attn_bh", { b * heads, s, d }, dt } }, saves = { probs, vb },
                       flops = 2 * b * heads * s * sk * d, dtype = dt })
  return nn.op_sized(cx, { name = name .. ".batch_to_head", inputs = { o },
                    outs = { { name .. ".attn_out", { b, s, c }, dt } }, grads = { { dtype = dt } } })
end

-- Attention with AttnProcessor2_0: q, k, v projections (the frame keeps their input), SDPA,
-- to_out[0], / rescale_output_factor. x is the caller's temporary (the normed input): released
-- with the frame's locals.
local function attention_forward(cx, m, x, ctx)
  local name, C, heads = m.opname, m.children, m.heads
  local kv_in = ctx or x
  local keep = { keep_input = true }
  local q = call(cx, C.to_q, x, keep)
  local k = call(cx, C.to_k, kv_in, keep)
  local v = call(cx, C.to_v, kv_in, keep)
  local b, s, c = q.shape[1], q.shape[2], q.shape[3]
  local sk = k.shape[2]
  local d = c // heads
  local ao, a2
  if cx.attention == "eager" then
    a2 = attention_eager(cx, name, q, k, v, heads)
    ao = a2
  else
    local qh = nn.view(cx, q, { b, heads, s, d }, name .. ".q_heads")
    local kh = nn.view(cx, k, { b, heads, sk, d }, name .. ".k_heads")
    local vh = nn.view(cx, v, { b, heads, sk, d }, name .. ".v_heads")
    -- q, k, v each .view(b, -1, heads, d).transpose(1, 2), the output .transpose(1, 2).reshape(b,
    -- -1, c): eight view ops beside the kernel (host class "view")
    ao = nn.sdpa(cx, name, qh, kh, vh, { keep_input = true, host_views = 8 })
    a2 = nn.view(cx, ao, { b, s, c }, name .. ".attn_out_nlc")
  end
  local o = call(cx, C.to_out.children["0"], a2, keep)
  local out = nn.div_scalar(cx, name .. ".rescale", o)
  nn.release(cx, { q, k, v, ao, x }, name .. ".return")
  return out
end

-- Attention(query_dim, cross_attention_dim, heads, dim_head, bias=False, out_bias=True):
-- to_q, to_k, to_v, to_out = [Linear, Dropout].
function U.Attention(dim, kv_dim, heads, qkv_bias)
  local m = mod.new("Attention", attention_forward, { heads = heads, dim = dim })
  m:add("to_q", U.Linear(dim, dim, qkv_bias or false))
  m:add("to_k", U.Linear(kv_dim, dim, qkv_bias or false))
  m:add("to_v", U.Linear(kv_dim, dim, qkv_bias or false))
  m:add("to_out", U.ModuleList { U.Linear(dim, dim, true) })
  return m
end

-- GEGLU.forward: proj (the caller keeps its input), chunk into two views, hidden * gelu(gate).
-- The two halves are views with a row stride of twice their width. gelu(gate) reads one through
-- TensorIterator's non-vectorized path: the "strided" class (1.31 TB/s measured for the step's
-- GeluCUDAKernelImpl at 1024 px, batch 4, validation/results/kernels_sdxl_h200.jsonl, against
-- 1.41 for the class and 3.81 contiguous), forward and backward. The product, whose other
-- operands are contiguous, runs between the two: the classes "strided_mixed" and its backward's
-- "strided_mixed_bwd" (2.2 and 2.9 TB/s at 16384 tokens, measure_geglu_mul.py). chunk's backward copies the two gradients into the projection's (CatArrayBatchedCopy, at
-- copy speed: 3.26 ms for 13.4 GB).
local function geglu_forward(cx, m, x)
  local name = m.opname:gsub("%.net%.0$", "")
  local p = call(cx, m.children.proj, x, { keep_input = true })
  local half = nn.copy_shape(p.shape)
  half[#half] = half[#half] // 2
  local hs = nn.view(cx, p, half, name .. ".hidden")
  local gate = nn.view(cx, p, half, name .. ".gate")
  nn.op_sized(cx, { name = name .. ".chunk", kind = "none", inputs = { p },
             out_tensors = { hs, gate }, bytes = 0, bwd_kind = "copy",
             bwd_bytes = 2 * nn.bytes(p.shape, p.dtype), grads = { { dtype = p.dtype } }, host = "view" })
  local g = nn.act(cx, name .. ".gelu", gate, { kind = "strided" })
  return nn.mul(cx, name .. ".geglu", hs, g, hs.dtype,
                { frees = { g, hs }, kind = "strided_mixed", bwd_kind = "strided_mixed_bwd" })
end

-- FeedForward.forward: for module in net (GEGLU, Dropout(0.0): the input itself, Linear).
local function feed_forward(cx, m, x)
  local net = m.children.net.children
  local h = call(cx, net["0"], x)
  return call(cx, net["2"], h)
end

function U.FeedForward(dim, mult)
  local inner = dim * (mult or 4)
  local m = mod.new("FeedForward", feed_forward)
  local net = m:add("net", mod.new("ModuleList", nil))
  local geglu = net:add(0, mod.new("GEGLU", geglu_forward))
  geglu:add("proj", U.Linear(dim, inner * 2))
  net:add(2, U.Linear(inner, dim))
  return m
end

-- BasicTransformerBlock.forward (layer norms, self-attention, cross-attention, GEGLU
-- feed-forward; only_cross_attention off, norm_type "layer_norm").
local function transformer_block_forward(cx, m, h, ctx)
  local name, C = m.opname, m.children
  -- (h is a permuted view of a 1x1 convolution's output in the first block of a Transformer2DModel
  -- without linear projections: native_layer_norm makes it contiguous first)
  local n1 = call(cx, C.norm1, h, h.permuted and { noncontig = true } or nil)
  local a1 = call(cx, C.attn1, n1, nil)
  h = nn.add(cx, name .. ".add_attn1", a1, h)
  local n2 = call(cx, C.norm2, h)
  local a2 = call(cx, C.attn2, n2, ctx)
  h = nn.add(cx, name .. ".add_attn2", a2, h)
  local n3 = call(cx, C.norm3, h)
  local f = call(cx, C.ff, n3)
  nn.release(cx, { n3 }, name .. ".ff.return")
  return nn.add(cx, name .. ".add_ff", f, h)
end

-- __init__ order: norm1, attn1, norm2, attn2, norm3, ff.
function U.BasicTransformerBlock(dim, heads, cross_dim)
  local m = mod.new("BasicTransformerBlock", transformer_block_forward, { dim = dim })
  m:add("norm1", U.LayerNorm(dim))
  m:add("attn1", U.Attention(dim, dim, heads))
  m:add("norm2", U.LayerNorm(dim))
  m:add("attn2", U.Attention(dim, cross_dim, heads))
  m:add("norm3", U.LayerNorm(dim))
  m:add("ff", U.FeedForward(dim))
  return m
end

-- Transformer2DModel.forward (continuous input). With use_linear_projection (SD 2.x, SDXL):
-- GroupNorm (eps 1e-6), the permute(0,2,3,1).reshape view, proj_in (a bmm on that
-- non-contiguous view, which it keeps), the blocks, proj_out, the copy back to NCHW, the
-- residual add. Without (SD 1.x: _operate_on_continuous_inputs): proj_in is a 1x1 convolution
-- on the normed NCHW tensor and the blocks take the permute(0,2,3,1).reshape of its output, a
-- view (h and w merge); at the end the copy back to NCHW comes first and proj_out convolves it.
local function transformer2d_forward(cx, m, x, ctx)
  local name, C = m.opname, m.children
  local b, c, hh, ww = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
  -- a frozen proj_in (LoRA, frozen base) on the permuted view is a bmm (matmul folds the view
  -- into one mm only when the weight needs a gradient: aten's matmul should_fold), whose input
  -- gradient comes back in (b, h*w, c) order: in NCHW a permuted view, which
  -- NativeGroupNormBackward makes contiguous (a clone of the norm's output size, alive for its
  -- backward). A trained one's mm gives the gradient in the view's own strides.
  local pw = m.linear and C.proj_in.p.weight
  local g = call(cx, C.norm, x, (pw and not pw.rg) and { noncontig_grad = true } or nil)
  local h
  if m.linear then
    local gv = nn.view(cx, g, { b, hh * ww, c }, name .. ".nlc_view")
    -- permute(0, 2, 3, 1) and reshape, two view ops (host class "view")
    h = call(cx, C.proj_in, gv, { noncontig = true, host_views = 2 })
  else
    local p = call(cx, C.proj_in, g)
    h = nn.view(cx, p, { b, hh * ww, c }, name .. ".nlc_view")
    h.permuted = true
  end
  local blocks = C.transformer_blocks
  for _, k in ipairs(blocks.order) do
    h = call(cx, blocks.children[k], h, ctx)
  end
  if not m.linear then
    h = nn.copy(cx, name .. ".to_nchw", h, { b, c, hh, ww })
    h = call(cx, C.proj_out, h)
    return nn.add(cx, name .. ".add_residual", h, x)
  end
  -- reshape(b, h, w, c).permute(0, 3, 1, 2).contiguous(): the gradient comes back as a
  -- permuted view, which proj_out's backward must copy when the batch does not fold into a view
  local pbw = b > 1 and { nn.bytes(h.shape, h.dtype) } or nil
  -- (reshape and permute: two view ops, host class "view")
  h = call(cx, C.proj_out, h, { bwd_workspace = pbw, grad_transposed = true, host_views = 2 })
  h = nn.copy(cx, name .. ".to_nchw", h, { b, c, hh, ww })
  return nn.add(cx, name .. ".add_residual", h, x)
end

-- __init__ order: norm, proj_in, transformer_blocks, proj_out. linear: use_linear_projection
-- (Linear projections; false: 1x1 Conv2d ones).
function U.Transformer2DModel(heads, dim, depth, cross_dim, groups, linear)
  if linear == nil then linear = true end
  local m = mod.new("Transformer2DModel", transformer2d_forward, { dim = dim, linear = linear })
  local function proj() return linear and U.Linear(dim, dim) or U.Conv2d(dim, dim, 1) end
  m:add("norm", U.GroupNorm(groups or 32, dim))
  m:add("proj_in", proj())
  local list = {}
  for i = 1, depth do list[i] = U.BasicTransformerBlock(dim, heads, cross_dim) end
  m:add("transformer_blocks", U.ModuleList(list))
  m:add("proj_out", proj())
  return m
end

-- Resampling -----------------------------------------------------------------------------------

-- Downsample2D(use_conv=True, padding=1): a stride-2 convolution.
local function downsample_forward(cx, m, x)
  return call(cx, m.children.conv, x)
end

function U.Downsample2D(c)
  local m = mod.new("Downsample2D", downsample_forward)
  m:add("conv", U.Conv2d(c, c, 3, 2, 1))
  return m
end

-- Upsample2D(use_conv=True): F.interpolate(scale_factor=2.0, mode="nearest"), then conv.
local function upsample_forward(cx, m, x)
  local u = nn.upsample_nearest2x(cx, m.opname .. ".interpolate", x)
  return call(cx, m.children.conv, u)
end

function U.Upsample2D(c)
  local m = mod.new("Upsample2D", upsample_forward)
  m:add("conv", U.Conv2d(c, c, 3))
  return m
end

-- Timestep embeddings ------------------------------------------------------------------------

-- get_timestep_embedding(t, dim, flip_sin_to_cos=True, shift=0) on (n,) values: fp32 math on
-- small tensors (arange, scale, exp, outer product, `scale * emb`, sin, cos, cat, and the
-- flip's cat of the two halves swapped), no autograd history.
function U.timestep_embedding(cx, name, t, n, dim)
  local half = dim // 2
  local saved = cx.no_grad
  cx.no_grad = true
  local a = nn.op_sized(cx, { name = name .. ".arange", inputs = {}, outs = { { name .. ".arange", { half }, "fp32" } } })
  a = nn.ew(cx, name .. ".mul_log", { a }, "fp32")
  a = nn.ew(cx, name .. ".div", { a }, "fp32")
  a = nn.ew(cx, name .. ".exp", { a }, "fp32")
  -- (`timesteps[:, None].float()`: a copy of int64 timesteps or bf16 time ids; fp32 values,
  -- SDXL's time ids under amp, are used as they are)
  local tf, tfrees = t, { a }
  if t.dtype ~= "fp32" then
    tf = nn.op_sized(cx, { name = name .. ".t_float", inputs = { t }, outs = { { name .. ".t_float", { n }, "fp32" } } })
    tfrees[2] = tf
  end
  local e = nn.op_sized(cx, { name = name .. ".outer", inputs = { tf, a }, frees = tfrees,
                              outs = { { name .. ".outer", { n, half }, "fp32" } } })
  e = nn.ew(cx, name .. ".scale", { e }, "fp32")
  local s = nn.op_sized(cx, { name = name .. ".sin", inputs = { e }, outs = { { name .. ".sin", { n, half }, "fp32" } }, frees = {} })
  local co = nn.op_sized(cx, { name = name .. ".cos", inputs = { e }, outs = { { name .. ".cos", { n, half }, "fp32" } }, frees = {} })
  local sc = nn.op_sized(cx, { name = name .. ".cat", inputs = { s, co }, outs = { { name .. ".sin_cos", { n, dim }, "fp32" } }, frees = { s, co, e } })
  local cat = nn.op_sized(cx, { name = name .. ".flip", inputs = { sc }, outs = { { name .. ".emb", { n, dim }, "fp32" } }, frees = { sc } })
  cx.no_grad = saved
  return cat
end

-- Timesteps(num_channels): the sinusoidal projection of the (flattened) values.
local function timesteps_forward(cx, m, t, n)
  return U.timestep_embedding(cx, m.opname, t, n, m.dim)
end

function U.Timesteps(dim)
  return mod.new("Timesteps", timesteps_forward, { dim = dim })
end

-- TimestepEmbedding: linear_1, SiLU, linear_2.
local function timestep_mlp_forward(cx, m, x)
  local h = call(cx, m.children.linear_1, x)
  h = nn.act(cx, m.opname .. ".act", h)
  return call(cx, m.children.linear_2, h)
end

function U.TimestepEmbedding(cin, dim)
  local m = mod.new("TimestepEmbedding", timestep_mlp_forward)
  m:add("linear_1", U.Linear(cin, dim))
  m:add("linear_2", U.Linear(dim, dim))
  return m
end

-- UNet blocks (unet_2d_blocks.py) ------------------------------------------------------------

-- CrossAttnDownBlock2D / DownBlock2D.forward(hidden_states, temb, encoder_hidden_states):
-- each resnet (then its transformer), then the downsampler; every output is a skip connection.
-- Returns the hidden states and the block's output states.
local function down_block_forward(cx, m, h, emb, ctx)
  local C = m.children
  local res, attn = C.resnets, C.attentions
  local states = {}
  for j, k in ipairs(res.order) do
    h = call(cx, res.children[k], h, emb)
    if attn then h = call(cx, attn.children[attn.order[j]], h, ctx) end
    states[#states + 1] = h
  end
  if C.downsamplers then
    h = call(cx, C.downsamplers.children["0"], h)
    states[#states + 1] = h
  end
  return h, states
end

-- A block's children as diffusers' constructors make them (unet_2d_blocks.py): one loop makes
-- resnet j then its transformer j (the parameters allocated in that order: init_order), and
-- then registers `self.attentions` before `self.resnets` (reg_order), so model.parameters(),
-- the order the optimizer steps them, gives every transformer of the block before its resnets.
local function interleaved(m, nres, nattn, tail)
  local order = {}
  for j = 1, math.max(nres, nattn) do
    if j <= nres then order[#order + 1] = "resnets." .. (j - 1) end
    if j <= nattn then order[#order + 1] = "attentions." .. (j - 1) end
  end
  if tail then order[#order + 1] = tail end
  m.init_order = order
  if nattn > 0 then m.reg_order = { "attentions", "resnets", tail } end
end

local function down_block(cls, a)
  local m = mod.new(cls, down_block_forward, { in_channels = a.cin, out_channels = a.cout })
  local res, attn = {}, {}
  for j = 1, a.layers do
    res[j] = U.ResnetBlock2D(j == 1 and a.cin or a.cout, a.cout, a.temb, a.groups)
    if a.depth then attn[j] = U.Transformer2DModel(a.heads, a.cout, a.depth, a.cross, a.groups, a.linear) end
  end
  m:add("resnets", U.ModuleList(res))
  if a.depth then m:add("attentions", U.ModuleList(attn)) end
  if a.add_downsample then m:add("downsamplers", U.ModuleList { U.Downsample2D(a.cout) }) end
  interleaved(m, #res, #attn, a.add_downsample and "downsamplers" or nil)
  return m
end

-- CrossAttnUpBlock2D / UpBlock2D.forward(hidden_states, res_hidden_states_tuple, temb,
-- encoder_hidden_states): each resnet takes the last skip concatenated to its input, then its
-- transformer; then the upsampler. The caller's `sample` keeps the block's input until the block
-- returns (dropped here, as the block ends).
local function up_block_forward(cx, m, h, skips, emb, ctx)
  local C = m.children
  local res, attn = C.resnets, C.attentions
  local block_in = h
  for j, k in ipairs(res.order) do
    local skip = table.remove(skips)
    -- (the skip stays referenced by the caller's res_samples: unet_forward drops it)
    h = nn.cat(cx, m.opname .. ".cat." .. (j - 1), { h, skip }, 2, { frees = { h } })
    h = call(cx, res.children[k], h, emb)
    if attn then h = call(cx, attn.children[attn.order[j]], h, ctx) end
  end
  if C.upsamplers then h = call(cx, C.upsamplers.children["0"], h) end
  nn.release(cx, { block_in }, m.opname .. ".return")
  return h
end

local function up_block(cls, a)
  local m = mod.new(cls, up_block_forward, { in_channels = a.cin, out_channels = a.cout })
  local res, attn = {}, {}
  for j = 1, a.layers do
    local skip = (j == a.layers) and a.cin or a.cout
    local rin = (j == 1) and a.prev or a.cout
    res[j] = U.ResnetBlock2D(rin + skip, a.cout, a.temb, a.groups)
    if a.depth then attn[j] = U.Transformer2DModel(a.heads, a.cout, a.depth, a.cross, a.groups, a.linear) end
  end
  m:add("resnets", U.ModuleList(res))
  if a.depth then m:add("attentions", U.ModuleList(attn)) end
  if a.add_upsample then m:add("upsamplers", U.ModuleList { U.Upsample2D(a.cout) }) end
  interleaved(m, #res, #attn, a.add_upsample and "upsamplers" or nil)
  return m
end

-- UNetMidBlock2DCrossAttn.forward: resnets[0], then each (attention, resnet) pair. Its first
-- resnet is called directly, outside the gradient-checkpointing branch the pairs go through
-- (no_checkpoint: the checkpoint pass leaves it alone).
local function mid_block_forward(cx, m, h, emb, ctx)
  local C = m.children
  local res, attn = C.resnets, C.attentions
  h = call(cx, res.children["0"], h, emb)
  for j, k in ipairs(attn.order) do
    h = call(cx, attn.children[k], h, ctx)
    h = call(cx, res.children[res.order[j + 1]], h, emb)
  end
  return h
end

local function mid_block(cls, a)
  local m = mod.new(cls, mid_block_forward, { in_channels = a.cin, out_channels = a.cin })
  local res = { U.ResnetBlock2D(a.cin, a.cin, a.temb, a.groups) }
  local attn = {}
  for j = 1, a.layers do
    attn[j] = U.Transformer2DModel(a.heads, a.cin, a.depth, a.cross, a.groups, a.linear)
    res[j + 1] = U.ResnetBlock2D(a.cin, a.cin, a.temb, a.groups)
  end
  res[1].no_checkpoint = true
  m:add("resnets", U.ModuleList(res))
  m:add("attentions", U.ModuleList(attn))
  interleaved(m, #res, #attn)
  return m
end

-- get_down_block / get_up_block / get_mid_block by the config's block type names.
U.DOWN_BLOCKS = {
  DownBlock2D = function(a) a.depth = nil; return down_block("DownBlock2D", a) end,
  CrossAttnDownBlock2D = function(a) return down_block("CrossAttnDownBlock2D", a) end,
}
U.UP_BLOCKS = {
  UpBlock2D = function(a) a.depth = nil; return up_block("UpBlock2D", a) end,
  CrossAttnUpBlock2D = function(a) return up_block("CrossAttnUpBlock2D", a) end,
}
U.MID_BLOCKS = {
  UNetMidBlock2DCrossAttn = function(a) return mid_block("UNetMidBlock2DCrossAttn", a) end,
}

local function pick(kind, set, name)
  local f = set[name]
  if f then return f end
  local names = {}
  for k in pairs(set) do names[#names + 1] = k end
  table.sort(names)
  error(("unet config: %s '%s' is not modelled (modelled: %s)"):format(kind, tostring(name),
        table.concat(names, ", ")), 0)
end

-- UNet2DConditionModel ------------------------------------------------------------------------

-- UNet2DConditionModel.forward(sample, timestep, encoder_hidden_states, added_cond_kwargs) with
-- addition_embed_type "text_time" (SDXL): the time embedding, the text/time embedding added to
-- it, conv_in, the down blocks (their outputs kept as skips), the mid block, the up blocks, then
-- conv_norm_out, SiLU, conv_out.
local function unet_forward(cx, m, sample, timesteps, ctx, added)
  local C = m.children
  local n = sample.shape[1]
  -- 1. time: sinusoidal projection, cast to the sample dtype, TimestepEmbedding
  local tp = call(cx, C.time_proj, timesteps, n)
  local t_emb = nn.to(cx, tp, sample.dtype, m.opname .. ".time_proj.to_sample_dtype")
  local emb = call(cx, C.time_embedding, t_emb)
  -- text_time: add_time_proj(time_ids.flatten()), concat with text_embeds, add_embedding
  -- (addition_embed_type null, SD 1.x / 2.x: the time embedding alone)
  if C.add_embedding then
    local time_ids = added.time_ids
    local nt = time_ids.shape[2]
    local dim = C.add_time_proj.dim
    local ti = call(cx, C.add_time_proj, time_ids, n * nt)
    local tiv = nn.view(cx, ti, { n, nt * dim }, m.opname .. ".time_embeds")
    local add = nn.cat(cx, m.opname .. ".add_embeds", { added.text_embeds, tiv }, 2)
    local add_c = nn.to(cx, add, emb.dtype, m.opname .. ".add_embeds.to_emb_dtype")
    local aug = call(cx, C.add_embedding, add_c)
    emb = nn.add(cx, m.opname .. ".emb_add", emb, aug)
  end
  -- 2. conv_in
  local h = call(cx, C.conv_in, sample)
  local skips = { h }
  -- 3. down
  for _, k in ipairs(C.down_blocks.order) do
    local states
    h, states = call(cx, C.down_blocks.children[k], h, emb, ctx)
    for _, s in ipairs(states) do skips[#skips + 1] = s end
  end
  -- 4. mid
  h = call(cx, C.mid_block, h, emb, ctx)
  -- 5. up: `res_samples = down_block_res_samples[-len(upsample_block.resnets):]` keeps a
  -- block's skips referenced until the next block's slice replaces it (the last block's until
  -- forward returns), after the block has concatenated them; where no backward node saves a
  -- skip (a frozen UNet under LoRA) that is when it goes
  local res_samples
  for _, k in ipairs(C.up_blocks.order) do
    local blk = C.up_blocks.children[k]
    local nres = #blk.children.resnets.order
    local nxt = { table.unpack(skips, #skips - nres + 1) }
    if res_samples then nn.release(cx, res_samples, m.opname .. ".res_samples") end
    res_samples = nxt
    h = call(cx, blk, h, skips, emb, ctx)
  end
  -- 6. out
  h = call(cx, C.conv_norm_out, h)
  h = nn.act(cx, m.opname .. ".conv_act", h)
  h = call(cx, C.conv_out, h)
  if res_samples then nn.release(cx, res_samples, m.opname .. ".res_samples") end
  return h
end

-- The tree from a diffusers UNet config (unet/config.json keys): block_out_channels,
-- layers_per_block, down_block_types, mid_block_type, up_block_types,
-- transformer_layers_per_block, attention_head_dim (the head count, as diffusers reads it when
-- num_attention_heads is absent), cross_attention_dim, in/out_channels, norm_num_groups,
-- use_linear_projection, addition_embed_type "text_time" (SDXL) or null (SD 1.x / 2.x: no
-- add_time_proj, add_embedding), addition_time_embed_dim,
-- projection_class_embeddings_input_dim. Children are added in the order the measured model's
-- build allocates their parameters: conv_in, time_proj, time_embedding, add_time_proj,
-- add_embedding, down_blocks, mid_block, up_blocks, conv_norm_out, conv_out. Block units (what
-- FSDP wraps, what reports group by) get layer ids in forward order: the down blocks, the mid
-- block, the up blocks; the rest belongs to the root (-1).
function U.UNet2DConditionModel(c, prefix)
  local bo = c.block_out_channels
  local nb = #bo
  local function per_block(v)
    if type(v) == "table" then return v end
    local r = {}
    for i = 1, nb do r[i] = v end
    return r
  end
  local heads = per_block(c.num_attention_heads or c.attention_head_dim)
  local depth = per_block(c.transformer_layers_per_block or 1)
  local groups = c.norm_num_groups or 32
  local add = c.addition_embed_type
  if add ~= nil and add ~= false and add ~= "text_time" then
    error(("unet config: addition_embed_type '%s' is not modelled (text_time: SDXL; null: SD 1.x, 2.x)")
          :format(tostring(add)), 0)
  end
  local linear = c.use_linear_projection == true
  if #c.down_block_types ~= nb or #c.up_block_types ~= nb then
    error("unet config: down_block_types and up_block_types need one entry per block_out_channels", 0)
  end
  local temb = bo[1] * 4
  local root = mod.new("UNet2DConditionModel", unet_forward, { cfg = c, layer = -1 })
  root:add("conv_in", U.Conv2d(c.in_channels or 4, bo[1], 3))
  root:add("time_proj", U.Timesteps(bo[1]))
  root:add("time_embedding", U.TimestepEmbedding(bo[1], temb))
  if add == "text_time" then
    root:add("add_time_proj", U.Timesteps(c.addition_time_embed_dim))
    root:add("add_embedding", U.TimestepEmbedding(c.projection_class_embeddings_input_dim, temb))
  end
  local downs = root:add("down_blocks", mod.new("ModuleList", nil))
  local out = bo[1]
  for i = 1, nb do
    local inp = out
    out = bo[i]
    local b = pick("down block", U.DOWN_BLOCKS, c.down_block_types[i]) {
      cin = inp, cout = out, layers = c.layers_per_block, temb = temb, groups = groups,
      depth = depth[i], heads = heads[i], cross = c.cross_attention_dim, linear = linear,
      add_downsample = i < nb }
    b.layer = i - 1
    downs:add(i - 1, b)
  end
  local mid = pick("mid block", U.MID_BLOCKS, c.mid_block_type or "UNetMidBlock2DCrossAttn") {
    cin = bo[nb], temb = temb, groups = groups, layers = 1, depth = depth[nb], heads = heads[nb],
    cross = c.cross_attention_dim, linear = linear }
  mid.layer = nb
  root:add("mid_block", mid)
  local ups = root:add("up_blocks", mod.new("ModuleList", nil))
  local prev = bo[nb]
  for i = 1, nb do
    local o = bo[nb - i + 1]
    local inp = bo[math.max(nb - i, 1)]
    local b = pick("up block", U.UP_BLOCKS, c.up_block_types[i]) {
      cin = inp, cout = o, prev = prev, layers = c.layers_per_block + 1, temb = temb,
      groups = groups, depth = depth[nb - i + 1], heads = heads[nb - i + 1],
      cross = c.cross_attention_dim, linear = linear, add_upsample = i < nb }
    b.layer = nb + i
    ups:add(i - 1, b)
    prev = o
  end
  root:add("conv_norm_out", U.GroupNorm(groups, bo[1]))
  root:add("conv_out", U.Conv2d(bo[1], c.out_channels or 4, 3))
  -- (UNet2DConditionModel.__init__ registers the empty down_blocks and up_blocks lists before
  -- it makes the mid block: model.parameters() gives the up blocks before the mid block)
  root.reg_order = {}
  for _, k in ipairs(root.order) do
    if k ~= "mid_block" then root.reg_order[#root.reg_order + 1] = k end
    if k == "up_blocks" then root.reg_order[#root.reg_order + 1] = "mid_block" end
  end
  mod.finalize(root, prefix)
  mod.walk(root, function(x) x.opname = x.opname or x.path end)
  -- FSDP's units (diffusers' _no_split_modules are the ResNet and transformer blocks; FSDP2's
  -- default policy here is one unit per down/up block and the mid block) and the classes
  -- enable_gradient_checkpointing routes through the checkpoint function
  root.no_split = {}
  for _, set in ipairs { U.DOWN_BLOCKS, U.UP_BLOCKS, U.MID_BLOCKS } do
    for k in pairs(set) do root.no_split[k] = true end
  end
  root.checkpoint_classes = { ResnetBlock2D = true, BasicTransformerBlock = true }
  return root
end

return U
