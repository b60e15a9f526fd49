-- ops/conv.lua: F.conv2d through cuDNN (installed into vrsim/nn.lua's table), with what the
-- kernels allocate and what ConvolutionBackward0 keeps. Checked against
-- validation/traces/fulltrace_pub-sdxl-r1024_bf16_ckpt.csv.gz (PyTorch 2.11, cuDNN 9.19 on an
-- H200): the order and size of every allocation of one training step.
return function(nn)
  -- cuDNN's workspace sizes, measured on an H200 (ops/conv_ws_h200.lua says how), by
  -- "cin,cout,k,stride,h,w,dtype,batch": { forward, backward-data, backward-filter } bytes; up
  -- to 1.08 GB for one fp32 VAE convolution at 1024 px. When a workspace cannot be allocated,
  -- PyTorch falls back to an algorithm that needs less (not modelled: vrsim reports the OOM).
  -- Shapes outside the table are estimated from the nearest entry (nn.conv_ws_estimate).
  -- Other GPUs: no other card has been measured; the H200's figures are used as they are on
  -- every GPU (an assumption: cuDNN's heuristics choose per architecture, so a card of another
  -- architecture may pick algorithms with other workspaces).
  -- (the table is read at the first convolution, not when the op library loads: a language
  -- model has none)
  local function conv_ws() return require "vrsim.ops.conv_ws_h200" end

  local function conv_key(cin, cout, k, stride, h, w, dt, n)
    return ("%d,%d,%d,%d,%d,%d,%s,%d"):format(cin, cout, k, stride, h, w, dt, n)
  end
  nn.conv_key = conv_key

  -- F.conv2d(x, w, b) through cuDNN. Forward: the output, then the workspace (freed at once).
  -- Backward (convolution_backward) as the trace shows it: grad_input and its workspace, then
  -- grad_weight and its workspace, then grad_bias. Three ops express that order: a bias-side and
  -- a weight-side op (views of the parameters, created first, so that their backward runs after:
  -- grad_weight + workspace keeping the input, then grad_bias) and the convolution itself
  -- (output + workspace; backward: grad_input + workspace, keeping the weight; the parameter
  -- sides receive grad_output as it is). ConvolutionBackward0 keeps input and weight whenever
  -- it exists (below); with neither input nor weight needing a gradient it is no node at all.
  -- opts: stride (1), pad (k // 2), frees (the references the call drops).
  function nn.conv2d(cx, name, x, w, b, opts)
    opts = opts or {}
    local stride, pad = opts.stride or 1, opts.pad
    local n, cin, h, wd = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
    local cout, k = w.shape[1], w.shape[3]
    pad = pad or (k // 2)
    local ho = (h + 2 * pad - k) // stride + 1
    local wo = (wd + 2 * pad - k) // stride + 1
    local args = nn.autocast(cx, "conv2d", { x, w, b }, 3,
                             { names = { name .. ".input_cast" }, params = { false, true, true } })
    x, w, b = args[1], args[2], args[3]
    local dt = x.dtype
    local ws = conv_ws()[conv_key(cin, cout, k, stride, h, wd, dt, n)]
               or nn.conv_ws_estimate(cin, cout, k, stride, h, wd, dt, n)
    local flops = 2 * n * cout * ho * wo * cin * k * k
    -- cuDNN's tensor-core engines work in NHWC: on NCHW tensors a k x k convolution (k > 1) in
    -- bf16/fp16 launches layout transforms around its kernel, each tensor read and written once
    -- (measure_conv_transforms.py, H200: every 3x3 convolution of SDXL's UNet, forward and
    -- backward; 1x1 convolutions run without). Forward: input and output (activations) and the
    -- filter; the data gradient: grad_output, grad_input and the filter; the filter gradient:
    -- grad_output, input and grad_weight. fp32 convolutions were not measured: none. Other GPUs:
    -- the same transforms (cuDNN's tensor-core convolutions are NHWC kernels on Ampere and Ada
    -- too, an assumption), at the H200's rates carried by memory bandwidth.
    local act, filt = 0, 0
    if k > 1 and (dt == "bf16" or dt == "fp16") then
      act = 2 * (nn.bytes(x.shape, dt) + nn.bytes({ n, cout, ho, wo }, dt))
      filt = 2 * nn.bytes(w.shape, dt)
    end
    -- backward order: grad_input (+ workspace), grad_weight (+ workspace), grad_bias: three
    -- ops, created in the reverse order (bias side, weight side, the convolution)
    local bv = b
    if b and b.rg and not cx.no_grad then
      bv = nn.view(cx, b, b.shape, name .. ".bias_side")
      bv.rg = true
      -- its backward is convolution_backward's grad_bias: a sum of grad_output over (N, H, W)
      nn.op_sized(cx, { name = name .. ".bias_grad", kind = "none", inputs = { b }, out_tensors = { bv },
                        grads = { { dtype = b.dtype } }, bytes = 0, bwd_kind = "reduce_rows",
                        bwd_bytes = nn.bytes({ n, cout, ho, wo }, x.dtype) + nn.bytes(b.shape, b.dtype),
                        host = "inside" })
    end
    local wv = w
    if w.rg and not cx.no_grad then
      wv = nn.view(cx, w, w.shape, name .. ".weight_side")
      wv.rg = true
      nn.op_sized(cx, { name = name .. ".weight_grad", kind = "conv", inputs = { w }, out_tensors = { wv },
                        saves = { x }, grads = { { dtype = w.dtype } }, bytes = 0, flops = 0, bwd_flops = flops,
                        bwd_workspace = (ws[3] or 0) > 0 and { ws[3] } or nil, dtype = dt, host = "inside" })
      if act > 0 then cx.G:op_layout(cx.last_op, 0, 0, act, filt) end
    end
    -- ConvolutionBackward0 is one formula for input, weight and bias (derivatives.yaml
    -- `input, weight, bias: convolution_backward(grad, input, weight, ...)`), so the node keeps
    -- both whenever it exists: a frozen convolution on an input that needs a gradient keeps
    -- that input (with a trained weight the weight side keeps it)
    local saves = {}
    if x.rg then saves = wv.rg and { w } or { x, w } end
    local inputs, grads = { x, wv }, { { dtype = x.dtype }, wv.rg and { pass = 1 } or "none" }
    if b then
      inputs[3] = bv
      grads[3] = bv.rg and { pass = 1 } or "none"
    end
    local out = nn.op_sized(cx, { name = name, kind = "conv", inputs = inputs,
                             outs = { { name, { n, cout, ho, wo }, dt } }, saves = saves, grads = grads,
                             kernels = nn.launches(cx, "conv_fwd"),
                             bwd_kernels = x.rg and nn.launches(cx, "conv_bwd_input") or nil,
                             workspace = (ws[1] or 0) > 0 and { ws[1] } or nil,
                             bwd_workspace = (x.rg and (ws[2] or 0) > 0) and { ws[2] } or nil,
                             frees = opts.frees, flops = flops, bwd_flops = flops, dtype = dt, host = "conv" })
    if act > 0 then cx.G:op_layout(cx.last_op, act, filt, x.rg and act or 0, x.rg and filt or 0) end
    return out
  end

  -- Workspace estimate for shapes outside the table: the measured entry with the same channels,
  -- kernel and stride nearest in batch x pixels, scaled by the square root of the size ratio
  -- (the measured workspaces grow sublinearly: x2.4 and x1.7 for 4x the pixels); none without
  -- one.
  function nn.conv_ws_estimate(cin, cout, k, stride, h, w, _, n)
    local best, bd
    local size = n * h * w
    for key, v in pairs(conv_ws()) do
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
end
