-- blocks/dit.lua: the pieces diffusers' transformer (DiT) denoisers share, op by op as diffusers
-- 0.42 runs them (models/normalization.py AdaLayerNormZero, AdaLayerNormZeroSingle,
-- AdaLayerNormContinuous; models/attention.py FeedForward with GELU(approximate="tanh");
-- models/embeddings.py apply_rotary_emb; torch.nn.RMSNorm as their q/k norms). Flux.1
-- (blocks/dit_flux.lua) builds its blocks from them.
--
-- Under the training scripts' autocast (Accelerate's mixed_precision wraps the prepared
-- transformer's forward) layer_norm is an fp32 op: the bf16 input is cast up, and the normed
-- output, its modulation by (1 + scale) and + shift are fp32 tensors the next Linear casts back
-- down (each Linear its own cast); so is rms_norm (torch.nn.RMSNorm, the q/k norms).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local U = require "models.blocks.unet"

local W = mod.weight
local call = mod.call

local D = {}

-- nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6): native_layer_norm with no weight or bias;
-- its output, an fp32 mean and rstd per row; the backward node keeps input, mean and rstd.
function D.layer_norm(cx, name, x)
  x = nn.autocast(cx, "layer_norm", { x }, 1, { names = { name .. ".input_cast" } })[1]
  local rows = nn.numel(x.shape) // x.shape[#x.shape]
  local rg = x.rg and not cx.no_grad
  local out = nn.new_tensor(cx, name, x.shape, x.dtype, rg)
  local mean = nn.new_tensor(cx, name .. ".mean", { rows }, "fp32", false)
  local rstd = nn.new_tensor(cx, name .. ".rstd", { rows }, "fp32", false)
  nn.op_sized(cx, { name = name, kind = "norm", bwd_kind = "norm_bwd", inputs = { x },
                    out_tensors = { out, mean, rstd }, saves = { x, mean, rstd },
                    grads = { { dtype = x.dtype } }, flops = 8 * nn.numel(x.shape), dtype = x.dtype,
                    host = "layer_norm" })
  return out
end

-- x * (1 + scale[:, None]) + shift[:, None] with scale and shift (n, dim) chunks of the
-- modulation: the (n, dim) 1 + scale, the broadcast product, the broadcast sum (fp32 where x is).
function D.modulate(cx, name, x, scale, shift)
  local n, dim = scale.shape[1], scale.shape[2]
  local one = nn.ew(cx, name .. ".one_plus_scale", { scale }, scale.dtype)
  local ov = nn.view(cx, one, { n, 1, dim }, name .. ".one_plus_scale_bcast")
  local sv = nn.view(cx, shift, { n, 1, dim }, name .. ".shift_bcast")
  local y = nn.mul(cx, name .. ".scale", x, ov, nn.promote(x.dtype, ov.dtype))
  return nn.add(cx, name .. ".shift", y, sv)
end

-- gate.unsqueeze(1) * x: the (n, 1, dim) gate broadcast over the tokens.
function D.gate(cx, name, gate, x)
  local gv = nn.view(cx, gate, { gate.shape[1], 1, gate.shape[2] }, name .. ".gate_bcast")
  return nn.mul(cx, name, gv, x, nn.promote(gv.dtype, x.dtype))
end

-- emb = linear(silu(emb)); emb.chunk(k, dim=1): k (n, dim) views of the modulation.
function D.modulation(cx, m, temb, k)
  local name = m.opname
  local s = nn.act(cx, name .. ".silu", temb)
  local e = call(cx, m.children.linear, s)
  local n, dim = e.shape[1], e.shape[2] // k
  local parts = {}
  for i = 1, k do parts[i] = nn.view(cx, e, { n, dim }, name .. ".chunk" .. (i - 1)) end
  return parts
end

-- AdaLayerNormZero(dim): silu, linear (dim -> 6 dim), chunk(6); the normed input modulated by
-- shift_msa, scale_msa. Returns x, gate_msa, shift_mlp, scale_mlp, gate_mlp.
local function ada_zero_forward(cx, m, x, temb)
  local c = D.modulation(cx, m, temb, 6)
  local nx = D.layer_norm(cx, m.opname .. ".norm", x)
  return D.modulate(cx, m.opname, nx, c[2], c[1]), c[3], c[4], c[5], c[6]
end

function D.AdaLayerNormZero(dim)
  local m = mod.new("AdaLayerNormZero", ada_zero_forward, { dim = dim })
  m:add("linear", U.Linear(dim, 6 * dim))
  return m
end

-- AdaLayerNormZeroSingle(dim): silu, linear (dim -> 3 dim), chunk(3). Returns x, gate_msa.
local function ada_zero_single_forward(cx, m, x, temb)
  local c = D.modulation(cx, m, temb, 3)
  local nx = D.layer_norm(cx, m.opname .. ".norm", x)
  return D.modulate(cx, m.opname, nx, c[2], c[1]), c[3]
end

function D.AdaLayerNormZeroSingle(dim)
  local m = mod.new("AdaLayerNormZeroSingle", ada_zero_single_forward, { dim = dim })
  m:add("linear", U.Linear(dim, 3 * dim))
  return m
end

-- AdaLayerNormContinuous(dim, cond_dim, elementwise_affine=False): emb =
-- linear(silu(cond).to(x.dtype)); scale, shift = chunk(2); norm(x) * (1 + scale)[:, None, :] +
-- shift[:, None, :].
local function ada_continuous_forward(cx, m, x, cond)
  local name = m.opname
  local s = nn.act(cx, name .. ".silu", cond)
  s = nn.to(cx, s, x.dtype, name .. ".to_x_dtype")
  local e = call(cx, m.children.linear, s)
  local n, dim = e.shape[1], e.shape[2] // 2
  local scale = nn.view(cx, e, { n, dim }, name .. ".scale")
  local shift = nn.view(cx, e, { n, dim }, name .. ".shift")
  local nx = D.layer_norm(cx, name .. ".norm", x)
  return D.modulate(cx, name, nx, scale, shift)
end

function D.AdaLayerNormContinuous(dim, cond)
  local m = mod.new("AdaLayerNormContinuous", ada_continuous_forward, { dim = dim })
  m:add("linear", U.Linear(cond, 2 * dim))
  return m
end

-- torch.nn.RMSNorm(head_dim) on (n, s, heads, head_dim): F.rms_norm as PyTorch 2.11 runs it on
-- CUDA (aten/src/ATen/native/layer_norm.cpp rms_norm_symint). rms_norm is on no autocast list in
-- 2.11 (2.12 put it on the fp32 policy, pytorch/pytorch#174824), so under autocast the bf16
-- activation meets the weight as it is. Input and weight of one dtype: at::_fused_rms_norm, one
-- CUDA kernel that writes the output in the input's dtype and an fp32 rstd per row, and whose
-- backward (_fused_rms_norm_backward) keeps the input, rstd and weight: the fp32 copies of the
-- composite are never made (the H100 trace fulltrace_gen5-flux-dev-d2s4-lora-r1024-flash shows
-- the bf16 outputs and the rstd rows, nothing else). Dtypes that differ (an fp32 weight under
-- bf16 autocast): rms_norm_composite, with PyTorch's "Mismatch dtype" warning: the input cast up
-- to fp32, pow(2), mean over the last dim, + eps in place, rsqrt, x * rsqrt, * weight, then
-- type_as(input).
local function fused_rms_norm(cx, name, x, w)
  local rows = nn.numel(x.shape) // x.shape[#x.shape]
  local rshape = nn.copy_shape(x.shape)
  rshape[#rshape] = 1
  local out = nn.new_tensor(cx, name, x.shape, x.dtype, (x.rg or w.rg) and not cx.no_grad)
  local rstd = nn.new_tensor(cx, name .. ".rstd", rshape, "fp32", false)
  nn.op_sized(cx, { name = name, kind = "norm", bwd_kind = "norm_bwd", inputs = { x, w },
                    out_tensors = { out, rstd }, saves = { x, rstd, w },
                    grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none" },
                    bwd_kernels = nn.launches(cx, "layer_norm_bwd"),
                    flops = 4 * nn.numel(x.shape) + rows, dtype = x.dtype, host = "layer_norm" })
  return out
end

local function rms_norm_forward(cx, m, x)
  local name = m.opname
  local w = W(cx, m.p.weight)
  if w.dtype == x.dtype then return fused_rms_norm(cx, name, x, w) end
  local x32 = nn.to(cx, x, "fp32", name .. ".float")
  local rshape = nn.copy_shape(x.shape)
  rshape[#rshape] = 1
  -- (the backward nodes' temporaries as in models/llama.lua's LlamaRMSNorm, which runs the same
  -- ops: PowBackward0's two, RsqrtBackward0's two, the product's full grad * x before its row sum)
  local sq = nn.op(cx, { name = name .. ".pow", inputs = { x32 }, outs = { { name .. ".squared", x.shape, "fp32" } },
                         saves = { x32 }, bwd_workspace = { nn.bytes(x.shape, "fp32"), nn.bytes(x.shape, "fp32") },
                         bwd_workspace_first = true })
  local var = nn.op(cx, { name = name .. ".mean", kind = "reduce_rows", inputs = { sq },
                          outs = { { name .. ".variance", rshape, "fp32" } } })
  local rs = nn.op(cx, { name = name .. ".rsqrt", inputs = { var }, outs = { { name .. ".rsqrt", rshape, "fp32" } },
                         save_outs = { 1 }, bwd_workspace = { nn.bytes(rshape, "fp32"), nn.bytes(rshape, "fp32") },
                         bwd_workspace_first = true, bwd_kernels = 3 })
  local n = nn.op(cx, { name = name .. ".mul", kind = "broadcast_rows", inputs = { x32, rs },
                        outs = { { name .. ".normed", x.shape, "fp32" } }, saves = { x32, rs },
                        bwd_workspace = { nn.bytes(x.shape, "fp32") }, bwd_workspace_first = true })
  n = nn.mul(cx, name, n, w, nn.promote(n.dtype, w.dtype))
  return nn.to(cx, n, x.dtype, name .. ".type_as")
end

-- A Python frame's locals that outlive their last use: the frame holds each until its name is
-- rebound or the function returns. A no-kernel op reading them where the frame lets them go.
function D.frame_release(cx, name, list)
  -- (a compiled block is one graph: Inductor frees each buffer after its last use, and no
  -- Python frame holds its intermediates; strategies/compile.lua)
  if cx.compiling then return end
  local ids = {}
  for _, t in pairs(list) do if t then ids[#ids + 1] = t.id end end
  if #ids == 0 then return end
  cx.G:op { name = name, kind = "none", phase = cx.phase, inputs = ids, outputs = {},
            layer = cx.layer, region = cx.region }
end

function D.RMSNorm(dim)
  local m = mod.new("RMSNorm", rms_norm_forward, { channels = dim })
  m:declare("weight", { dim })
  return m
end

-- apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1, sequence_dim=1) on
-- (n, s, heads, head_dim): x_real, x_imag = x.reshape(..., -1, 2).unbind(-1) (views);
-- x_rotated = stack([-x_imag, x_real], -1).flatten(3) (the negation, the stack);
-- (x.float() * cos + x_rotated.float() * sin).to(x.dtype): two fp32 copies, two products, the sum
-- and the cast back. cos and sin (s, head_dim) fp32 need no gradient: the products keep only them.
function D.rotary(cx, name, x, cos, sin)
  local half = nn.copy_shape(x.shape)
  half[#half] = half[#half] // 2
  local neg = nn.op_sized(cx, { name = name .. ".neg_imag", inputs = { x }, outs = { { name .. ".neg_imag", half, x.dtype } },
                                grads = { { pass = 1 } } })
  local rot = nn.op_sized(cx, { name = name .. ".stack", inputs = { neg, x },
                                outs = { { name .. ".rotated", x.shape, x.dtype } },
                                grads = { { dtype = x.dtype }, { dtype = x.dtype } } })
  local s, d = x.shape[2], x.shape[4]
  local cv = nn.view(cx, cos, { 1, s, 1, d }, name .. ".cos")
  local sv = nn.view(cx, sin, { 1, s, 1, d }, name .. ".sin")
  local xf = nn.to(cx, x, "fp32", name .. ".x_float")
  local a = nn.mul(cx, name .. ".mul_cos", xf, cv, "fp32")
  local rf = nn.to(cx, rot, "fp32", name .. ".rotated_float")
  local b = nn.mul(cx, name .. ".mul_sin", rf, sv, "fp32")
  local sum = nn.add(cx, name .. ".add", a, b)
  return nn.to(cx, sum, x.dtype, name .. ".to_dtype")
end

-- FeedForward(dim, dim_out=dim, activation_fn="gelu-approximate"): net.0 = GELU (proj, then
-- F.gelu(approximate="tanh")), net.1 = Dropout(0.0), net.2 = Linear(4 dim, dim).
-- q, k, v of one stream of a joint (MMDiT) attention: its projections (names[1..3]), viewed as
-- heads, then its q/k norms (names[4], names[5]) where the attention has them (Flux always; SD3
-- with qk_norm). Returns q, k, v as (n, s, heads, d).
function D.stream_qkv(cx, A, x, names, heads, dh)
  local keep = { keep_input = true }
  local q = call(cx, A[names[1]], x, keep)
  local k = call(cx, A[names[2]], x, keep)
  local v = call(cx, A[names[3]], x, keep)
  local n, s = x.shape[1], x.shape[2]
  local shape = { n, s, heads, dh }
  q = nn.view(cx, q, shape, q.name .. ".heads")
  k = nn.view(cx, k, shape, k.name .. ".heads")
  v = nn.view(cx, v, shape, v.name .. ".heads")
  if A[names[4]] then
    q = call(cx, A[names[4]], q)
    k = call(cx, A[names[5]], k)
  end
  return q, k, v
end

local function ff_forward(cx, m, x)
  local net = m.children.net.children
  local name = m.opname
  local h = call(cx, net["0"].children.proj, x)
  h = nn.act(cx, name .. ".gelu_tanh", h)
  return call(cx, net["2"], h)
end

function D.FeedForward(dim, mult)
  local inner = dim * (mult or 4)
  local m = mod.new("FeedForward", ff_forward, { dim = dim })
  local net = m:add("net", mod.new("ModuleList", nil))
  local gelu = net:add(0, mod.new("GELU", nil))
  gelu:add("proj", U.Linear(dim, inner))
  net:add(2, U.Linear(inner, dim))
  return m
end

D.fused_rms_norm = fused_rms_norm

return D
