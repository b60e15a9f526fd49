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
    wc = nn.op(cx, { name = w.name .. ".autocast", inputs = { w },
                     outs = { { w.name .. "." .. lp, w.shape, lp } },
                     grads = { { dtype = w.dtype } } })
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
  return nn.op(cx, { name = name, inputs = { x }, outs = { { name, x.shape, lp } },
                     grads = { { dtype = x.dtype } }, frees = keep and {} or nil }), true
end

-- Input cast of an autocast "fp32" op.
function O.autocast_fp32(cx, x, name)
  if not cx.autocast or x.dtype == "fp32" then return x end
  return nn.to(cx, x, "fp32", name)
end

-- Workspace sizes cuDNN asked for on the H200 (PyTorch 2.11, cuDNN 9.19, benchmark off), by
-- "cin,cout,k,stride,h,w,dtype": forward, backward-data, backward-filter bytes. Shapes not in the
-- table take no workspace (a lower bound).
O.conv_ws = {}

local function conv_key(cin, cout, k, stride, h, w, dt, n)
  return ("%d,%d,%d,%d,%d,%d,%s,%d"):format(cin, cout, k, stride, h, w, dt, n)
end
O.conv_key = conv_key

-- F.conv2d(x, w, b) through cuDNN: the output, then the forward workspace (freed at the end).
-- ConvolutionBackward0 keeps the input (for the weight gradient) and the weight (for the input
-- gradient); backward allocates grad_input (+ workspace), grad_weight (+ workspace), then the bias
-- gradient (a reduction of grad_output).
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
  local ws = O.conv_ws[conv_key(cin, cout, k, stride, h, wd, dt, n)] or {}
  local saves = {}
  if w.rg then saves[#saves + 1] = x end
  if x.rg then saves[#saves + 1] = w end
  local inputs = { x, w, b }
  local grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none" }
  if b then grads[3] = b.rg and { dtype = b.dtype } or "none" end
  local flops = 2 * n * cout * ho * wo * cin * k * k
  local bws = {}
  if x.rg and (ws[2] or 0) > 0 then bws[#bws + 1] = ws[2] end
  if w.rg and (ws[3] or 0) > 0 then bws[#bws + 1] = ws[3] end
  return nn.op(cx, { name = name, kind = "conv", inputs = inputs,
                     outs = { { name, { n, cout, ho, wo }, dt } }, saves = saves, grads = grads,
                     workspace = (ws[1] or 0) > 0 and { ws[1] } or nil,
                     bwd_workspace = #bws > 0 and bws or nil,
                     frees = opts.frees,
                     flops = flops, bwd_flops = 2 * flops, dtype = dt })
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
  bws[#bws + 1] = n * c * 4
  bws[#bws + 1] = n * c * 4
  nn.op(cx, { name = name, kind = "norm", inputs = { x, w, b }, out_tensors = { out, mean, rstd },
              saves = { x, mean, rstd, w },
              grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none",
                        b.rg and { dtype = b.dtype } or "none" },
              workspace = { n * c * 4, n * c * 4 }, bwd_workspace = bws, frees = opts.frees,
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
  nn.op(cx, { name = name, kind = "norm", inputs = { x, w, b }, out_tensors = { out, mean, rstd },
              saves = { x, mean, rstd, w, b },
              grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none",
                        b.rg and { dtype = b.dtype } or "none" },
              bwd_workspace = opts.bwd_workspace, frees = opts.frees,
              flops = 8 * nn.numel(x.shape), dtype = x.dtype })
  return out
end

-- SiLU / GELU: a new tensor; backward keeps the input and allocates the input's gradient.
function O.act(cx, name, x, opts)
  opts = opts or {}
  return nn.op(cx, { name = name, inputs = { x }, outs = { { name, x.shape, x.dtype } },
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
  return nn.op(cx, { name = name, inputs = { a, b }, outs = { { name, big.shape, dt } },
                     grads = { g(a), g(b) }, frees = opts.frees, flops = nn.numel(big.shape),
                     dtype = dt })
end

-- x / scalar (a new tensor; DivBackward allocates grad / scalar).
function O.div_scalar(cx, name, x, opts)
  opts = opts or {}
  return nn.op(cx, { name = name, inputs = { x }, outs = { { name, x.shape, x.dtype } },
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
  return nn.op(cx, { name = name, inputs = list, outs = { { name, shape, dt } }, grads = grads,
                     frees = opts.frees, dtype = dt })
end

-- A copy into another layout (permute(...).contiguous(), reshape of a non-viewable tensor).
-- opts.grad = "new" when backward must copy the gradient back (a non-viewable reshape), else
-- the gradient flows back as a view.
function O.copy(cx, name, x, shape, opts)
  opts = opts or {}
  local g = opts.grad == "new" and { dtype = x.dtype } or { pass = 1 }
  return nn.op(cx, { name = name, inputs = { x }, outs = { { name, shape or x.shape, x.dtype } },
                     grads = { g }, frees = opts.frees, dtype = x.dtype })
end

-- F.interpolate(x, scale_factor=2, mode="nearest"): backward needs only sizes.
function O.upsample_nearest2x(cx, name, x, opts)
  opts = opts or {}
  local s = { x.shape[1], x.shape[2], x.shape[3] * 2, x.shape[4] * 2 }
  return nn.op(cx, { name = name, inputs = { x }, outs = { { name, s, x.dtype } },
                     frees = opts.frees, dtype = x.dtype })
end

-- F.linear(x, w, b). x contiguous (or 2-D): addmm (mm without bias) on the folded input, the
-- input gradient a view of the folded result. x a non-contiguous 3-D view (opts.noncontig):
-- matmul does not fold it, bmm keeps the view (its base's storage), then add_(bias) in place.
-- Backward: grad input, then grad weight (ordered as the trace shows), bias gradient last.
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
  local grads = { { dtype = x.dtype, view = not opts.noncontig }, w.rg and { dtype = w.dtype } or "none" }
  local inputs = { x, w }
  if b then
    inputs[3] = b
    grads[3] = b.rg and { dtype = b.dtype } or "none"
  end
  return nn.op(cx, { name = name, kind = "mm", inputs = inputs,
                     outs = { { name, shape, x.dtype } }, saves = saves, grads = grads,
                     grad_order = opts.grad_order or (b and { 1, 2, 3 } or { 1, 2 }), frees = frees,
                     bwd_workspace = opts.bwd_workspace,
                     flops = flops, bwd_flops = 2 * flops, dtype = x.dtype })
end

-- F.scaled_dot_product_attention(q, k, v) (no mask, no dropout), q/k/v (b, heads, s, d) views of
-- (b, s, heads*d) projections. bf16/fp16 on Hopper: cuDNN attention (two int64 philox tensors,
-- the output in q's layout, an fp32 softmax statistic per query row, a small workspace);
-- backward allocates dq, dk, dv and an fp32 dq accumulator. fp32: memory-efficient attention
-- (logsumexp padded to 32 rows).
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
  if dt == "fp32" then
    local lse_shape = { b, h, (s + 31) // 32 * 32 }
    local out = nn.op(cx, {
      name = name .. ".sdpa_mem_efficient", kind = "attention", inputs = { q, k, v },
      outs = { { name .. ".attn_out", q.shape, dt }, { name .. ".logsumexp", lse_shape, "fp32", no_grad = true },
               { name .. ".philox", { 2 }, "int64", no_grad = true } },
      save_outs = { 1, 2, 3 }, saves = { q, k, v }, frees = frees,
      flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
    return out
  end
  local seed = nn.new_tensor(cx, name .. ".philox_seed", { 1 }, "int64", false)
  local off = nn.new_tensor(cx, name .. ".philox_offset", { 1 }, "int64", false)
  local out = nn.new_tensor(cx, name .. ".attn_out", q.shape, dt, rg)
  local lse = nn.new_tensor(cx, name .. ".softmax_stats", { b, h, s }, "fp32", false)
  nn.op(cx, { name = name .. ".sdpa_cudnn", kind = "attention", inputs = { q, k, v },
              out_tensors = { seed, off, out, lse }, saves = { q, k, v, out, lse, seed, off },
              workspace = { 256 }, grad_order = { 1, 2, 3 }, frees = frees,
              bwd_workspace = { nn.numel(q.shape) * 4 + nn.bytes({ b, h, s }, "fp32") },
              flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
  return out
end

-- F.mse_loss(pred.float(), target.float()) (mean): the elementwise loss then the mean; backward
-- keeps both inputs.
function O.mse_loss(cx, name, pred, target)
  local p = nn.to(cx, pred, "fp32", name .. ".pred_float")
  local t = nn.to(cx, target, "fp32", name .. ".target_float")
  local loss = nn.op(cx, { name = name, kind = "elementwise", inputs = { p, t },
                           outs = { { name, {}, "fp32" } }, saves = { p, t },
                           grads = { { dtype = "fp32" }, "none" },
                           workspace = { nn.bytes(p.shape, "fp32") },
                           flops = 3 * nn.numel(p.shape), dtype = "fp32" })
  return loss
end

return O
