-- ops/norm.lua: F.group_norm and F.layer_norm (installed into vrsim/nn.lua's table), as
-- native_group_norm / native_layer_norm allocate and their backward nodes keep. Under autocast
-- both run in fp32 (the input is cast up). (LlamaRMSNorm is not an aten op: it is model code,
-- models/llama.lua.)
return function(nn)
  -- F.group_norm (native_group_norm): the output, mean and rstd (N, G) in the input dtype (fp32
  -- when input and affine parameters differ in dtype), and two fp32 (N, C) scale/shift
  -- temporaries. NativeGroupNormBackward0 exists whenever the input or the affine parameters
  -- need a gradient, and then keeps input, mean, rstd and weight; it allocates dX (and dgamma,
  -- dbeta where they need one) and fp32 (N, C) temporaries. opts.noncontig_grad: the incoming
  -- gradient is a permuted view (.contiguous()).
  function nn.group_norm(cx, name, x, w, b, groups, opts)
    opts = opts or {}
    x = nn.autocast(cx, "group_norm", { x }, 1, { names = { name .. ".input_cast" } })[1]
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
    nn.op_sized(cx, { name = name, kind = "norm", bwd_kind = "norm_bwd", inputs = { x, w, b }, out_tensors = { out, mean, rstd },
                      saves = { x, mean, rstd, w },
                      grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none",
                                b.rg and { dtype = b.dtype } or "none" },
                      workspace = { n * c * 4, n * c * 4 }, bwd_workspace = bws, frees = opts.frees,
                      kernels = nn.launches(cx, "group_norm_fwd"), bwd_kernels = nn.launches(cx, "group_norm_bwd"),
                      flops = 8 * nn.numel(x.shape), dtype = x.dtype, host = "group_norm" })
    -- its statistics kernel (RowwiseMomentsCUDAKernel) runs one block per (sample, group) row:
    -- at SDXL's 32 groups, a batch fills a few dozen of the card's SMs, so one block's walk of
    -- its row sets its time (measure_group_norm.py). The row's size in bf16 bytes: the kernel
    -- was measured in bf16; an fp32 row (autocast) is taken to cost what its elements do in bf16
    cx.G:op_rowwise(cx.last_op, n * groups, nn.numel(x.shape) // (n * groups) * 2)
    return out
  end

  -- F.layer_norm over the last dim (native_layer_norm): output, then fp32 mean and rstd per row.
  -- NativeLayerNormBackward0 exists whenever the input or the affine parameters need a
  -- gradient, and then keeps input, mean, rstd, weight and bias; it allocates dX (and dgamma,
  -- dbeta where they need one). opts.noncontig: x is a permuted view, which the forward and the
  -- backward each copy to a contiguous temporary (input.expect_contiguous(); autocast's fp32 cast
  -- keeps the strides).
  function nn.layer_norm(cx, name, x, w, b, opts)
    opts = opts or {}
    x = nn.autocast(cx, "layer_norm", { x }, 1, { names = { name .. ".input_cast" } })[1]
    local ws, bws = nil, opts.bwd_workspace
    if opts.noncontig then
      ws = { nn.bytes(x.shape, x.dtype) }
      bws = { nn.bytes(x.shape, x.dtype), table.unpack(bws or {}) }
    end
    local rows = nn.numel(x.shape) // x.shape[#x.shape]
    local out = nn.new_tensor(cx, name, x.shape, x.dtype, (x.rg or w.rg) and not cx.no_grad)
    local mean = nn.new_tensor(cx, name .. ".mean", { rows }, "fp32", false)
    local rstd = nn.new_tensor(cx, name .. ".rstd", { rows }, "fp32", false)
    nn.op_sized(cx, { name = name, kind = "norm", bwd_kind = "norm_bwd", inputs = { x, w, b }, out_tensors = { out, mean, rstd },
                      saves = { x, mean, rstd, w, b },
                      grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none",
                                b.rg and { dtype = b.dtype } or "none" },
                      workspace = ws, bwd_workspace = bws, frees = opts.frees,
                      bwd_kernels = nn.launches(cx, "layer_norm_bwd"),
                      flops = 8 * nn.numel(x.shape), dtype = x.dtype, host = "layer_norm" })
    return out
  end
end
