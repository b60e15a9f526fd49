-- ops/pointwise.lua: elementwise and layout ops of the op library (installed into vrsim/nn.lua's
-- table): activations, add, division by a scalar, cat, layout copies, nearest upsampling, and
-- PyTorch's type promotion. Shapes are NCHW for images and
-- (batch, tokens, channels) for sequences.
--
-- Autocast (cx.autocast = "bf16" / "fp16"): each op's policy and the casts it inserts are
-- ops/autocast.lua's (nn.AUTOCAST, nn.autocast).
return function(nn)
  -- Kernel launches per op, where PyTorch's op launches more than one: the counts
  -- torch.profiler saw on the H200 for the SDXL UNet in bf16 at 64 and 512 px, per call
  -- (validation/results/profile_sdxl_h200.jsonl, top_ops of sdxl-r512-b1-bf16 and
  -- sdxl-r64-b1-bf16; bash validation/harness/run_sdxl_profile.sh). Each launch beyond an op's
  -- first costs the host a bare launch (the profile's launch_us), which is what makes that UNet's
  -- step launch-bound. A model whose step time was calibrated with them sets
  -- cx.measured_launches (SDXL); the decoder families' host cost was calibrated per op
  -- (host_op_us) and leaves them off.
  nn.KERNELS = {
    conv_fwd = 4,        -- aten::conv2d: 4.35 and 4.75 (layout conversions, the convolution, bias)
    conv_bwd_input = 7,  -- ConvolutionBackward0: 8.59 and 8.63, with grad_weight's and grad_bias's
                         -- own launches (one each, the two ops of nn.conv2d) making 9
    group_norm_fwd = 3, group_norm_bwd = 6,  -- 3.00; NativeGroupNormBackward0 5.61
    layer_norm_bwd = 3,                      -- NativeLayerNormBackward0 3.00
    sdpa_cudnn_fwd = 2, sdpa_cudnn_bwd = 4,  -- 2.00; ScaledDotProductCudnnAttentionBackward0 4.00
    mul_bwd_both = 2,                        -- MulBackward0 with both gradients: 2.00
  }

  -- The measured launch count of `key` for this model, or nil (one launch).
  function nn.launches(cx, key)
    return cx.measured_launches and nn.KERNELS[key] or nil
  end

  -- Type promotion of two floating dtypes (PyTorch's rules for same-category tensors): fp32 with
  -- anything, or bf16 with fp16, is fp32.
  function nn.promote(a, b)
    if a == b then return a end
    return "fp32"
  end

  function nn.copy_shape(s)
    local r = {}
    for i, d in ipairs(s) do r[i] = d end
    return r
  end

  -- nn.op with every "new" input gradient sized from the input's shape and the gradient's own
  -- dtype: a view input (a chunk, a head split) has no storage of its own, and its gradient is
  -- still a full buffer.
  function nn.op_sized(cx, spec)
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

  -- A tensor no op produces (an input batch): persistent, allocated at build after the params.
  function nn.input(cx, name, shape, dtype)
    local id = cx.G:tensor { name = name, bytes = nn.bytes(shape, dtype), numel = nn.numel(shape),
                             dtype = dtype, cat = "temp", persistent = true }
    cx.G:op { name = name, kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
    return { id = id, shape = shape, dtype = dtype, rg = false, name = name }
  end

  -- SiLU / GELU: a new tensor; backward keeps the input and allocates the input's gradient.
  -- opts.kind: the memory-access class of forward and backward ("strided" on a chunk's view,
  -- which TensorIterator cannot vectorize).
  function nn.act(cx, name, x, opts)
    opts = opts or {}
    return nn.op_sized(cx, { name = name, inputs = { x }, outs = { { name, x.shape, x.dtype } },
                             saves = { x }, frees = opts.frees, flops = 4 * nn.numel(x.shape),
                             dtype = x.dtype, host = "activation", kind = opts.kind, bwd_kind = opts.kind })
  end

  -- The gradients of a same-shape a + b in dtype dt (nn.promote of theirs): AddBackward0 passes
  -- the output gradient on, and the engine casts it for an input of another dtype
  -- (validate_outputs, torch/csrc/autograd/engine.cpp): a new buffer in that input's dtype
  -- (under autocast, an fp32 residual plus a bf16 sublayer output; a bf16 base output plus an
  -- fp32 LoRA adapter's). Returns the grads and the bytes backward moves: each cast reads the
  -- gradient and writes its copy (nil where both pass: no kernel).
  function nn.add_grads(dt, a, b)
    local moved
    local function g(t)
      if t.dtype == dt then return { pass = 1 } end
      moved = (moved or 0) + nn.numel(t.shape) * (nn.DT_SIZE[dt] + nn.DT_SIZE[t.dtype])
      return { dtype = t.dtype }
    end
    return { g(a), g(b) }, moved
  end

  -- a + b (broadcast to the larger): AddBackward passes the gradient through (reduced to a
  -- broadcast input's shape, or cast to an input's dtype, with a new buffer). opts.host_views:
  -- view ops the caller runs to broadcast an input (nn.op).
  function nn.add(cx, name, a, b, opts)
    opts = opts or {}
    local big = nn.numel(a.shape) >= nn.numel(b.shape) and a or b
    local dt = nn.promote(a.dtype, b.dtype)
    local function g(t)
      if nn.numel(t.shape) < nn.numel(big.shape) then return { dtype = t.dtype } end
      if t.dtype ~= dt then return { dtype = t.dtype } end
      return { pass = 1 }
    end
    return nn.op_sized(cx, { name = name, inputs = { a, b }, outs = { { name, big.shape, dt } },
                             grads = { g(a), g(b) }, frees = opts.frees, flops = nn.numel(big.shape),
                             dtype = dt, host = "add", host_views = opts.host_views })
  end

  -- x / scalar (a new tensor; DivBackward allocates grad / scalar).
  function nn.div_scalar(cx, name, x, opts)
    opts = opts or {}
    return nn.op_sized(cx, { name = name, inputs = { x }, outs = { { name, x.shape, x.dtype } },
                             frees = opts.frees, flops = nn.numel(x.shape), dtype = x.dtype })
  end

  -- torch.cat along dim (CatBackward returns narrowed views of the gradient: no buffers).
  function nn.cat(cx, name, list, dim, opts)
    opts = opts or {}
    local shape = nn.copy_shape(list[1].shape)
    shape[dim] = 0
    local dt = list[1].dtype
    for _, t in ipairs(list) do
      shape[dim] = shape[dim] + t.shape[dim]
      dt = nn.promote(dt, t.dtype)
    end
    local grads = {}
    for i, t in ipairs(list) do grads[i] = t.dtype == dt and { pass = 1 } or { dtype = t.dtype } end
    return nn.op_sized(cx, { name = name, inputs = list, outs = { { name, shape, dt } }, grads = grads,
                             frees = opts.frees, dtype = dt })
  end

  -- A copy into another layout (permute(...).contiguous(), reshape of a non-viewable tensor).
  -- opts.grad = "new" when backward must copy the gradient back (a non-viewable reshape), else
  -- the gradient flows back as a view.
  function nn.copy(cx, name, x, shape, opts)
    opts = opts or {}
    local g = opts.grad == "new" and { dtype = x.dtype } or { pass = 1 }
    return nn.op_sized(cx, { name = name, inputs = { x }, outs = { { name, shape or x.shape, x.dtype } },
                             grads = { g }, frees = opts.frees, dtype = x.dtype })
  end

  -- F.interpolate(x, scale_factor=2, mode="nearest"): backward needs only sizes. Under autocast
  -- upsample_nearest2d is an fp32 op: the input is cast up (a temporary) and the output is fp32.
  function nn.upsample_nearest2x(cx, name, x, opts)
    opts = opts or {}
    local xc = nn.autocast(cx, "upsample_nearest2x", { x }, 1, { names = { name .. ".input_cast" } })[1]
    local frees = opts.frees
    if xc ~= x then
      frees = { xc }
      for _, f in ipairs(opts.frees or {}) do frees[#frees + 1] = f end
    end
    local s = { xc.shape[1], xc.shape[2], xc.shape[3] * 2, xc.shape[4] * 2 }
    return nn.op_sized(cx, { name = name, inputs = { xc }, outs = { { name, s, xc.dtype } },
                             frees = frees, dtype = xc.dtype })
  end
end
