-- blocks/ops.lua: aten-level ops of convolutional and transformer blocks (SDXL's UNet, CLIP text
-- encoders, the VAE), on top of nn.op, with what each CUDA kernel allocates and what autograd
-- saves. Shapes are NCHW for images and (batch, tokens, channels) for sequences.
--
-- Checked against validation/traces/fulltrace_pub-sdxl-r1024_bf16_ckpt.csv.gz (PyTorch 2.11,
-- cuDNN 9.19 on an H200): the order and size of every allocation of one training step.
--
-- Autocast (cx.autocast = "bf16" / "fp16"): conv, linear, bmm and SDPA run in the low dtype
-- (inputs cast, weights cast once per forward and cached), group_norm, layer_norm and mse_loss
-- run in fp32 (inputs cast up), everything else in the dtype it is given (with promotion).
local nn = require "vrsim.nn"

local O = {}

local function promote(a, b)
  if a == b then return a end
  return "fp32"
end
O.promote = promote

local function copy_shape(s)
  local r = {}
  for i, d in ipairs(s) do r[i] = d end
  return r
end
O.copy_shape = copy_shape

-- Kernel launches per op, where PyTorch's op launches more than one: the counts torch.profiler
-- saw on the H200 for the SDXL UNet in bf16 at 64 and 512 px, per call
-- (validation/measure/profile_sdxl_h200.jsonl, top_ops of sdxl-r512-b1-bf16 and sdxl-r64-b1-bf16;
-- bash validation/measure/run_sdxl_profile.sh). Each launch beyond an op's first costs the host a
-- bare launch (the profile's launch_us), which is what makes this UNet's step launch-bound.
local KERNELS = {
  conv_fwd = 4,        -- aten::conv2d: 4.35 and 4.75 (layout conversions, the convolution, bias)
  conv_bwd_input = 7,  -- ConvolutionBackward0: 8.59 and 8.63, with grad_weight's and grad_bias's
                       -- own launches (one each, the two ops below) making 9
  group_norm_fwd = 3, group_norm_bwd = 6,  -- 3.00; NativeGroupNormBackward0 5.61
  layer_norm_bwd = 3,                      -- NativeLayerNormBackward0 3.00
  sdpa_cudnn_fwd = 2, sdpa_cudnn_bwd = 4,  -- 2.00; ScaledDotProductCudnnAttentionBackward0 4.00
  mul_bwd_both = 2,                        -- MulBackward0 with both gradients: 2.00
}

-- nn.op with every "new" input gradient sized from the input's shape: a view input (a chunk,
-- a head split) has no storage of its own, and its gradient is still a full buffer.
function O.op(cx, spec)
  local grads = {}
  for i, x in ipairs(spec.inputs) do
    local g = spec.grads and spec.grads[i]
    if g == nil then g = { dtype = x.dtype } end
    if type(g) == "table" and not g.pass and not g.bytes then
      local c = {}
      for k, v in pairs(g) do c[k] = v end
      c.bytes = nn.numel(x.shape) * nn.DT_SIZE[c.dtype or x.dtype]
      g = c
    end
    grads[i] = g
  end
  spec.grads = grads
  return nn.op(cx, spec)
end

-- a * b (MulBackward keeps each operand only for the other's gradient).
function O.mul(cx, name, a, b, dtype, extra)
  local saves = {}
  if b.rg then saves[#saves + 1] = a end
  if a.rg then saves[#saves + 1] = b end
  local shape = nn.numel(a.shape) >= nn.numel(b.shape) and a.shape or b.shape
  local spec = { name = name, inputs = { a, b }, outs = { { name, shape, dtype } },
                 saves = saves, flops = nn.numel(shape), dtype = dtype,
                 bwd_kernels = a.rg and b.rg and KERNELS.mul_bwd_both or nil }
  for k, v in pairs(extra or {}) do spec[k] = v end
  return O.op(cx, spec)
end

-- x.to(dtype): the same tensor when the dtype matches.
function O.to(cx, x, dtype, name)
  if x.dtype == dtype then return x end
  return nn.cast(cx, x, dtype, name)
end

-- A tensor no op produces (an input batch): persistent, allocated at build after the params.
function O.input(cx, name, shape, dtype)
  local id = cx.G:tensor { name = name, bytes = nn.bytes(shape, dtype), numel = nn.numel(shape),
                           dtype = dtype, cat = "temp", persistent = true }
  cx.G:op { name = name, kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
  return { id = id, shape = shape, dtype = dtype, rg = false, name = name }
end

-- Drops references the Python frame held (a caller's temporary argument, a local bound until the
-- function returns): the tensors' last use was earlier, their consumers were told not to drop them.
function O.release(cx, name, tensors)
  if #tensors == 0 then return end
  local ids = {}
  for i, t in ipairs(tensors) do ids[i] = t.id end
  cx.G:op { name = name, kind = "none", phase = cx.phase, inputs = {}, outputs = {}, frees = ids,
            layer = cx.layer, region = cx.region, no_grad = cx.no_grad }
end

-- The low-precision copy of a parameter under autocast, made once per forward (autocast's cast
-- cache) and dropped when the forward ends (nn.end_forward).
function O.autocast_weight(cx, w)
  local lp = cx.autocast
  if not lp or w.dtype == lp or w.dtype ~= "fp32" then return w end
  local wc = cx.cast_cache[w.id]
  if not wc then
    wc = nn.cast(cx, w, lp, w.name .. ".autocast", w.name .. "." .. lp)
    cx.cast_cache[w.id] = wc
  end
  return wc
end

-- Input cast of an autocast "lower precision" op (a new tensor unless already in that dtype).
-- keep: the caller still holds x (the cast does not drop it). Returns the tensor to use and
-- whether it is a cast copy.
function O.autocast_input(cx, x, name, keep)
  local lp = cx.autocast
  if not lp or x.dtype == lp or x.dtype ~= "fp32" then return x, false end
  return nn.cast(cx, x, lp, name, name, keep), true
end

-- Input cast of an autocast "fp32" op.
function O.autocast_fp32(cx, x, name)
  if not cx.autocast or x.dtype == "fp32" then return x end
  return O.to(cx, x, "fp32", name)
end

-- cuDNN's workspace sizes, measured on an H200 (vrsim/ops/conv_ws_h200.lua says how), by
-- "cin,cout,k,stride,h,w,dtype,batch": { forward, backward-data, backward-filter } bytes; up to
-- 1.08 GB for one fp32 VAE convolution at 1024 px. When a workspace cannot be allocated, PyTorch
-- falls back to an algorithm that needs less (not modelled: vrsim reports the OOM). Other
-- shapes are estimated from the nearest entry (O.conv_ws_estimate).
O.conv_ws = require "vrsim.ops.conv_ws_h200"

local function conv_key(cin, cout, k, stride, h, w, dt, n)
  return ("%d,%d,%d,%d,%d,%d,%s,%d"):format(cin, cout, k, stride, h, w, dt, n)
end
O.conv_key = conv_key

-- F.conv2d(x, w, b) through cuDNN. Forward: the output, then the workspace (freed at once).
-- Backward (convolution_backward) as the trace shows it: grad_input and its workspace, then
-- grad_weight and its workspace, then grad_bias. Two ops express that order: a weight-side op
-- (a view of the weight, created first, so its backward runs second: grad_weight + workspace,
-- grad_bias; it keeps the input) and the convolution itself (output + workspace; backward:
-- grad_input + workspace; it keeps the weight; the weight side receives grad_output as is).
function O.conv2d(cx, name, x, w, b, opts)
  opts = opts or {}
  local stride, pad = opts.stride or 1, opts.pad
  local n, cin, h, wd = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
  local cout, k = w.shape[1], w.shape[3]
  pad = pad or (k // 2)
  local ho = (h + 2 * pad - k) // stride + 1
  local wo = (wd + 2 * pad - k) // stride + 1
  x = O.autocast_input(cx, x, name .. ".input_cast")
  w = O.autocast_weight(cx, w)
  if b then b = O.autocast_weight(cx, b) end
  local dt = x.dtype
  local ws = O.conv_ws[conv_key(cin, cout, k, stride, h, wd, dt, n)] or O.conv_ws_estimate(cin, cout, k, stride, h, wd, dt, n)
  local flops = 2 * n * cout * ho * wo * cin * k * k
  -- backward order: grad_input (+ workspace), grad_weight (+ workspace), grad_bias: three ops,
  -- created in the reverse order (bias side, weight side, the convolution)
  local bv = b
  if b and b.rg and not cx.no_grad then
    bv = nn.view(cx, b, b.shape, name .. ".bias_side")
    bv.rg = true
    -- its backward is convolution_backward's grad_bias: a sum of grad_output over (N, H, W)
    O.op(cx, { name = name .. ".bias_grad", kind = "none", inputs = { b }, out_tensors = { bv },
               grads = { { dtype = b.dtype } }, bytes = 0, bwd_kind = "reduce_rows",
               bwd_bytes = nn.bytes({ n, cout, ho, wo }, x.dtype) + nn.bytes(b.shape, b.dtype) })
  end
  local wv = w
  if w.rg and not cx.no_grad then
    wv = nn.view(cx, w, w.shape, name .. ".weight_side")
    wv.rg = true
    O.op(cx, { name = name .. ".weight_grad", kind = "conv", inputs = { w }, out_tensors = { wv },
               saves = { x }, grads = { { dtype = w.dtype } }, bytes = 0, flops = 0, bwd_flops = flops,
               bwd_workspace = (ws[3] or 0) > 0 and { ws[3] } or nil, dtype = dt })
  end
  local saves = x.rg and { w } or {}
  local inputs, grads = { x, wv }, { { dtype = x.dtype }, wv.rg and { pass = 1 } or "none" }
  if b then
    inputs[3] = bv
    grads[3] = bv.rg and { pass = 1 } or "none"
  end
  return O.op(cx, { name = name, kind = "conv", inputs = inputs,
                    outs = { { name, { n, cout, ho, wo }, dt } }, saves = saves, grads = grads,
                    kernels = KERNELS.conv_fwd, bwd_kernels = x.rg and KERNELS.conv_bwd_input or nil,
                    workspace = (ws[1] or 0) > 0 and { ws[1] } or nil,
                    bwd_workspace = (x.rg and (ws[2] or 0) > 0) and { ws[2] } or nil,
                    frees = opts.frees, flops = flops, bwd_flops = flops, dtype = dt })
end

-- Workspace estimate for shapes outside the table: the measured entry with the same channels,
-- kernel and stride nearest in batch x pixels, scaled by the square root of the size ratio (the
-- measured workspaces grow sublinearly: x2.4 and x1.7 for 4x the pixels); none without one.
function O.conv_ws_estimate(cin, cout, k, stride, h, w, _, n)
  local best, bd
  local size = n * h * w
  for key, v in pairs(O.conv_ws) do
    local c1, c2, k1, s1, h1, w1, _, n1 = key:match("^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%w+),(%d+)$")
    if tonumber(c1) == cin and tonumber(c2) == cout and tonumber(k1) == k and tonumber(s1) == stride then
      local s0 = tonumber(n1) * tonumber(h1) * tonumber(w1)
      local d = math.abs(math.log(size / s0))
      if not bd or d < bd or (d == bd and key < best.key) then best, bd = { key = key, v = v, s0 = s0 }, d end
    end
  end
  if not best then return {} end
  local f = math.sqrt(size / best.s0)
  local r = {}
  for i = 1, 3 do r[i] = math.floor((best.v[i] or 0) * f) end
  return r
end

-- F.group_norm (native_group_norm): the output, mean and rstd (N, G) in the input dtype (fp32 when
-- input and affine parameters differ in dtype), and two fp32 (N, C) scale/shift temporaries.
-- Backward keeps input, mean, rstd, weight; allocates dX, dgamma, dbeta and fp32 (N, C)
-- temporaries. opts.noncontig_grad: the incoming gradient is a permuted view (.contiguous()).
function O.group_norm(cx, name, x, w, b, groups, opts)
  opts = opts or {}
  x = O.autocast_fp32(cx, x, name .. ".input_cast")
  local n, c = x.shape[1], x.shape[2]
  local mixed = x.dtype ~= w.dtype
  local sdt = mixed and "fp32" or x.dtype
  local out = nn.new_tensor(cx, name, x.shape, x.dtype, (x.rg or w.rg) and not cx.no_grad)
  local mean = nn.new_tensor(cx, name .. ".mean", { n, groups }, sdt, false)
  local rstd = nn.new_tensor(cx, name .. ".rstd", { n, groups }, sdt, false)
  local bws = {}
  if opts.noncontig_grad then bws[#bws + 1] = nn.bytes(x.shape, x.dtype) end
  -- GroupNormBackward's fp32 temporaries: ds, db (N, C), two (N, G) coefficients, one (N, C)
  for _, sz in ipairs { n * c * 4, n * c * 4, n * groups * 4, n * groups * 4, n * c * 4 } do
    bws[#bws + 1] = sz
  end
  O.op(cx, { name = name, kind = "norm", inputs = { x, w, b }, out_tensors = { out, mean, rstd },
              saves = { x, mean, rstd, w },
              grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none",
                        b.rg and { dtype = b.dtype } or "none" },
              workspace = { n * c * 4, n * c * 4 }, bwd_workspace = bws, frees = opts.frees,
              kernels = KERNELS.group_norm_fwd, bwd_kernels = KERNELS.group_norm_bwd,
              flops = 8 * nn.numel(x.shape), dtype = x.dtype })
  return out
end

-- F.layer_norm over the last dim (native_layer_norm): output, then fp32 mean and rstd per row.
-- Backward keeps input, mean, rstd, weight, bias; allocates dX, dgamma, dbeta.
function O.layer_norm(cx, name, x, w, b, opts)
  opts = opts or {}
  x = O.autocast_fp32(cx, x, name .. ".input_cast")
  local rows = nn.numel(x.shape) // x.shape[#x.shape]
  local out = nn.new_tensor(cx, name, x.shape, x.dtype, (x.rg or w.rg) and not cx.no_grad)
  local mean = nn.new_tensor(cx, name .. ".mean", { rows }, "fp32", false)
  local rstd = nn.new_tensor(cx, name .. ".rstd", { rows }, "fp32", false)
  O.op(cx, { name = name, kind = "norm", inputs = { x, w, b }, out_tensors = { out, mean, rstd },
              saves = { x, mean, rstd, w, b },
              grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none",
                        b.rg and { dtype = b.dtype } or "none" },
              bwd_workspace = opts.bwd_workspace, frees = opts.frees, bwd_kernels = KERNELS.layer_norm_bwd,
              flops = 8 * nn.numel(x.shape), dtype = x.dtype })
  return out
end

-- SiLU / GELU: a new tensor; backward keeps the input and allocates the input's gradient.
function O.act(cx, name, x, opts)
  opts = opts or {}
  return O.op(cx, { name = name, inputs = { x }, outs = { { name, x.shape, x.dtype } },
                     saves = { x }, frees = opts.frees, flops = 4 * nn.numel(x.shape),
                     dtype = x.dtype })
end

-- a + b (broadcast to the larger): AddBackward passes the gradient through (reduced to a
-- broadcast input's shape with a new buffer).
function O.add(cx, name, a, b, opts)
  opts = opts or {}
  local big = nn.numel(a.shape) >= nn.numel(b.shape) and a or b
  local dt = promote(a.dtype, b.dtype)
  local function g(t)
    if nn.numel(t.shape) < nn.numel(big.shape) then return { dtype = t.dtype } end
    if t.dtype ~= dt then return { dtype = t.dtype } end
    return { pass = 1 }
  end
  return O.op(cx, { name = name, inputs = { a, b }, outs = { { name, big.shape, dt } },
                     grads = { g(a), g(b) }, frees = opts.frees, flops = nn.numel(big.shape),
                     dtype = dt })
end

-- x / scalar (a new tensor; DivBackward allocates grad / scalar).
function O.div_scalar(cx, name, x, opts)
  opts = opts or {}
  return O.op(cx, { name = name, inputs = { x }, outs = { { name, x.shape, x.dtype } },
                     frees = opts.frees, flops = nn.numel(x.shape), dtype = x.dtype })
end

-- torch.cat along dim (CatBackward returns narrowed views of the gradient: no buffers).
function O.cat(cx, name, list, dim, opts)
  opts = opts or {}
  local shape = copy_shape(list[1].shape)
  shape[dim] = 0
  local dt = list[1].dtype
  for _, t in ipairs(list) do
    shape[dim] = shape[dim] + t.shape[dim]
    dt = promote(dt, t.dtype)
  end
  -- each input's gradient is a narrowed view of the incoming one: no allocation
  local grads = {}
  for i, t in ipairs(list) do grads[i] = t.dtype == dt and { pass = 1 } or { dtype = t.dtype } end
  return O.op(cx, { name = name, inputs = list, outs = { { name, shape, dt } }, grads = grads,
                     frees = opts.frees, dtype = dt })
end

-- A copy into another layout (permute(...).contiguous(), reshape of a non-viewable tensor).
-- opts.grad = "new" when backward must copy the gradient back (a non-viewable reshape), else
-- the gradient flows back as a view.
function O.copy(cx, name, x, shape, opts)
  opts = opts or {}
  local g = opts.grad == "new" and { dtype = x.dtype } or { pass = 1 }
  return O.op(cx, { name = name, inputs = { x }, outs = { { name, shape or x.shape, x.dtype } },
                     grads = { g }, frees = opts.frees, dtype = x.dtype })
end

-- F.interpolate(x, scale_factor=2, mode="nearest"): backward needs only sizes.
function O.upsample_nearest2x(cx, name, x, opts)
  opts = opts or {}
  local s = { x.shape[1], x.shape[2], x.shape[3] * 2, x.shape[4] * 2 }
  return O.op(cx, { name = name, inputs = { x }, outs = { { name, s, x.dtype } },
                     frees = opts.frees, dtype = x.dtype })
end

-- The staging buffers of a bias gradient's row sum (nn.row_sum_buffers).
O.row_sum_buffers = nn.row_sum_buffers

-- F.linear(x, w, b) as aten::linear dispatches it:
--   no bias: matmul folds the leading dims into one mm (MmBackward: grad_weight, then
--     grad_input, a view of the folded result);
--   bias, contiguous x: addmm on the folded input (AddmmBackward: grad_input, grad_weight; the
--     input is released, then the bias gradient is reduced from grad_output: a bias-side op
--     created before the product, so that its backward runs after);
--   bias, x a non-contiguous view (opts.noncontig, Transformer2DModel's proj_in on the permuted
--     norm output): matmul does not fold it, bmm keeps the view (its base's storage) and
--     output.add_(bias) follows in place (its backward, the bias reduction, runs first).
function O.linear(cx, name, x, w, b, opts)
  opts = opts or {}
  local cast
  x, cast = O.autocast_input(cx, x, name .. ".input_cast", opts.keep_input)
  local frees = opts.frees
  if opts.keep_input and not cast then frees = {} end
  w = O.autocast_weight(cx, w)
  if b then b = O.autocast_weight(cx, b) end
  local shape = copy_shape(x.shape)
  shape[#shape] = w.shape[1]
  local m = nn.numel(x.shape) // x.shape[#x.shape]
  local flops = 2 * m * w.shape[1] * w.shape[2]
  local saves = {}
  if w.rg then saves[#saves + 1] = x end
  if x.rg then saves[#saves + 1] = w end
  local rg = (x.rg or w.rg or (b and b.rg)) and not cx.no_grad
  local function lt_outs(out)
    local outs = { out }
    if b and cx.lt_workspace_pending then
      outs[2] = cx.lt_workspace_pending
      cx.lt_workspace_pending = nil
    end
    return outs
  end
  -- (a gradient arriving as a transposed view is reduced along its fastest dim: no buffer)
  local red = b and b.rg and not opts.grad_transposed and O.row_sum_buffers(cx, m, w.shape[1]) or nil
  if b and not opts.noncontig then
    local bv = b
    if b.rg and not cx.no_grad then
      bv = nn.view(cx, b, b.shape, name .. ".bias_side")
      bv.rg = true
      -- its backward is addmm's grad_bias = grad.sum(0): a row reduction of the output gradient
      O.op(cx, { name = name .. ".bias_grad", kind = "none", inputs = { b }, out_tensors = { bv },
                 grads = { { dtype = b.dtype } }, bwd_workspace = red, bytes = 0, bwd_kind = "reduce_rows",
                 bwd_bytes = nn.bytes({ m, w.shape[1] }, x.dtype) + nn.bytes(b.shape, b.dtype) })
    end
    local out = nn.new_tensor(cx, name, shape, x.dtype, rg)
    return O.op(cx, { name = name, kind = "mm", inputs = { x, w, bv }, out_tensors = lt_outs(out),
                      saves = saves,
                      grads = { { dtype = x.dtype, view = true }, w.rg and { dtype = w.dtype } or "none",
                                bv.rg and { pass = 1 } or "none" },
                      grad_order = { 1, 2, 3 }, frees = frees, bwd_workspace = opts.bwd_workspace,
                      flops = flops, bwd_flops = 2 * flops, dtype = x.dtype })
  end
  local out = nn.new_tensor(cx, name, shape, x.dtype, rg)
  local y = O.op(cx, { name = name, kind = "mm", inputs = { x, w },
                       out_tensors = b and { out } or lt_outs(out), saves = saves,
                       grads = { { dtype = x.dtype, view = not opts.noncontig },
                                 w.rg and { dtype = w.dtype } or "none" },
                       grad_order = { 2, 1 }, frees = frees, bwd_workspace = opts.bwd_workspace,
                       flops = flops, bwd_flops = 2 * flops, dtype = x.dtype })
  if not b then return y end
  -- output.add_(bias): in place (a view of the product)
  local yb = nn.view(cx, y, y.shape, name .. ".add_bias")
  yb.rg = rg
  O.op(cx, { name = name .. ".add_bias_", kind = "elementwise", inputs = { y, b },
             out_tensors = lt_outs(yb), grads = { { pass = 1 }, b.rg and { dtype = b.dtype } or "none" },
             bwd_workspace = red, bytes = 2 * nn.bytes(y.shape, y.dtype), flops = nn.numel(y.shape) })
  return yb
end

-- Which fused kernel F.scaled_dot_product_attention picks (nn.sdpa_backend); training.attention
-- = "flash", "cudnn" or "mem_efficient" forces one.
function O.sdpa_backend(cx, dtype)
  return nn.sdpa_backend(cx.arch, dtype, cx.attention)
end

-- F.scaled_dot_product_attention(q, k, v) (no mask, no dropout), q/k/v (b, heads, s, d) views of
-- (b, s, heads*d) projections; the output comes in q's layout, so the caller's
-- transpose(1, 2).reshape is a view.
--   cuDNN: two int64 philox tensors, the output, an fp32 softmax statistic per query row and a
--     256-byte workspace; backward allocates dq, dk, dv and one buffer of an fp32 dq accumulator,
--     the row statistic and 256 bytes (the trace: 10,649,856 bytes for 4096 x 640)
--   flash: the output and an fp32 logsumexp per row; backward dq, dk, dv, an fp32 dq accumulator
--     and an fp32 row statistic
--   memory-efficient (fp32): the output, a logsumexp padded to 32 rows, the philox state
function O.sdpa(cx, name, q, k, v, opts)
  opts = opts or {}
  local frees = opts.keep_input and {} or nil
  if cx.autocast then
    local c1, c2, c3
    q, c1 = O.autocast_input(cx, q, name .. ".q_cast", opts.keep_input)
    k, c2 = O.autocast_input(cx, k, name .. ".k_cast", opts.keep_input)
    v, c3 = O.autocast_input(cx, v, name .. ".v_cast", opts.keep_input)
    if c1 or c2 or c3 then frees = nil end
  end
  local b, h, s, d = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local sk = k.shape[3]
  local flops = 4 * b * h * s * sk * d
  local dt = q.dtype
  local rg = (q.rg or k.rg or v.rg) and not cx.no_grad
  local backend = O.sdpa_backend(cx, dt)
  if backend == "mem_efficient" then
    local lse_shape = { b, h, (s + 31) // 32 * 32 }
    return O.op(cx, {
      name = name .. ".sdpa_mem_efficient", kind = "attention_mem_efficient", inputs = { q, k, v },
      outs = { { name .. ".attn_out", q.shape, dt }, { name .. ".logsumexp", lse_shape, "fp32", no_grad = true },
               { name .. ".philox", { 2 }, "int64", no_grad = true } },
      save_outs = { 1, 2, 3 }, saves = { q, k, v }, frees = frees,
      flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
  end
  if backend == "flash" then
    local lse_shape = { b, h, s }
    return O.op(cx, {
      name = name .. ".sdpa_flash", kind = "attention_flash", inputs = { q, k, v },
      outs = { { name .. ".attn_out", q.shape, dt }, { name .. ".logsumexp", lse_shape, "fp32", no_grad = true } },
      save_outs = { 1, 2 }, saves = { q, k, v }, grad_order = { 1, 2, 3 }, frees = frees,
      bwd_workspace = { nn.numel(q.shape) * 4 + nn.bytes(lse_shape, "fp32") },
      flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
  end
  local seed = nn.new_tensor(cx, name .. ".philox_seed", { 1 }, "int64", false)
  local off = nn.new_tensor(cx, name .. ".philox_offset", { 1 }, "int64", false)
  local out = nn.new_tensor(cx, name .. ".attn_out", q.shape, dt, rg)
  local lse = nn.new_tensor(cx, name .. ".softmax_stats", { b, h, s }, "fp32", false)
  O.op(cx, { name = name .. ".sdpa_cudnn", kind = "attention_cudnn", inputs = { q, k, v },
             out_tensors = { seed, off, out, lse }, saves = { k, q, v, lse, out, seed, off },
             workspace = { 256 }, grad_order = { 1, 2, 3 }, frees = frees,
             kernels = KERNELS.sdpa_cudnn_fwd, bwd_kernels = KERNELS.sdpa_cudnn_bwd,
             bwd_workspace = { nn.numel(q.shape) * 4 + nn.bytes({ b, h, s }, "fp32") + 256 },
             flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
  return out
end

-- diffusers' AttnProcessor (no SDPA): head_to_batch_dim copies of q, k, v; baddbmm into an
-- empty (b*h, s, sk) buffer (scores, then the buffer dropped); softmax (kept for backward);
-- bmm with v; batch_to_head_dim copy back. The s x sk probabilities of every attention stay
-- alive until backward.
function O.attention_eager(cx, name, q, k, v, heads)
  local b, s, c = q.shape[1], q.shape[2], q.shape[3]
  local sk = k.shape[2]
  local d = c // heads
  local function to_batch(x, nm, len)
    return O.op(cx, { name = name .. "." .. nm .. "_head_to_batch", inputs = { x },
                      outs = { { name .. "." .. nm .. "_bh", { b * heads, len, d }, x.dtype } },
                      grads = { { dtype = x.dtype } } })
  end
  local qb, kb, vb = to_batch(q, "q", s), to_batch(k, "k", sk), to_batch(v, "v", sk)
  local dt = qb.dtype
  local sshape = { b * heads, s, sk }
  local empty = O.op(cx, { name = name .. ".baddbmm_input", inputs = {}, outs = { { name .. ".baddbmm_input", sshape, dt } } })
  local scores = O.op(cx, { name = name .. ".baddbmm", kind = "mm", inputs = { empty, qb, kb },
                            outs = { { name .. ".scores", sshape, dt } }, saves = { qb, kb },
                            grads = { "none", { dtype = dt }, { dtype = dt } },
                            flops = 2 * b * heads * s * sk * d, dtype = dt })
  -- softmax is an fp32 op under autocast: the scores are cast up, the probabilities come out
  -- in fp32 and the bmm casts them back down (that copy is what it keeps)
  local sc = O.autocast_fp32(cx, scores, name .. ".scores_float")
  local probs = O.op(cx, { name = name .. ".softmax", kind = "softmax", inputs = { sc },
                           outs = { { name .. ".probs", sshape, sc.dtype } }, save_outs = { 1 },
                           flops = 5 * nn.numel(sshape), dtype = sc.dtype })
  probs = O.autocast_input(cx, probs, name .. ".probs_cast")
  local o = O.op(cx, { name = name .. ".bmm", kind = "mm", inputs = { probs, vb },
                       outs = { { name .. ".attn_bh", { b * heads, s, d }, dt } }, saves = { probs, vb },
                       flops = 2 * b * heads * s * sk * d, dtype = dt })
  return O.op(cx, { name = name .. ".batch_to_head", inputs = { o },
                    outs = { { name .. ".attn_out", { b, s, c }, dt } }, grads = { { dtype = dt } } })
end

-- F.mse_loss(pred.float(), target.float()) (mean): both casts, then (as the measured run's trace
-- shows) a buffer of the loss's size that lives to the end of the step, the elementwise loss and
-- the scalar. Backward keeps both inputs.
function O.mse_loss(cx, name, pred, target)
  local p = O.to(cx, pred, "fp32", name .. ".pred_float")
  local t = O.to(cx, target, "fp32", name .. ".target_float")
  local held = cx.G:tensor { name = name .. ".step_buffer", bytes = nn.bytes(p.shape, "fp32"),
                             numel = nn.numel(p.shape), dtype = "fp32", cat = "temp", persistent = true }
  local outs = { { id = held, shape = p.shape, dtype = "fp32", name = name .. ".step_buffer" } }
  local ws = { nn.bytes(p.shape, "fp32") }
  local loss = nn.new_tensor(cx, name, {}, "fp32", true)
  outs[2] = loss
  for _, e in ipairs(cx.late_outputs or {}) do outs[#outs + 1] = e end
  O.op(cx, { name = name, kind = "elementwise", inputs = { p, t }, out_tensors = outs,
              saves = { p, t }, grads = { { dtype = "fp32" }, "none" }, workspace = ws,
              flops = 3 * nn.numel(p.shape), dtype = "fp32" })
  return loss
end

-- cuBLASLt's workspace (1 MiB through the caching allocator, kept for the process) of a cuBLAS
-- handle, made by the first addmm with a bias (gemm_and_bias) on that handle's thread.
function O.lt_workspace(cx, name)
  local id = cx.G:tensor { name = name, bytes = 1048576, numel = 0, dtype = "uint8", cat = "temp",
                           persistent = true }
  return { id = id, shape = { 1048576 }, dtype = "uint8", name = name }
end

return O
