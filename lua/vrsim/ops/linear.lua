-- ops/linear.lua: F.linear (installed into vrsim/nn.lua's table) as aten::linear dispatches it,
-- and cuBLASLt's workspace.
return function(nn)
  -- F.linear(x, w, b) as aten::linear dispatches it:
  --   no bias: matmul folds the leading dims into one mm (MmBackward0: grad_weight, then
  --     grad_input, a view of the folded result);
  --   bias, contiguous x: addmm on the folded input (AddmmBackward0: grad_input, grad_weight; the
  --     bias gradient is reduced from grad_output: a bias-side op created before the product, so
  --     that its backward runs after);
  --   bias, x a non-contiguous view (opts.noncontig, Transformer2DModel's proj_in on the permuted
  --     norm output): matmul does not fold it, bmm keeps the view (its base's storage) and
  --     output.add_(bias) follows in place (its backward, the bias reduction, runs first).
  -- The weight gradient is mm_mat2_backward's transposed product (weight.t() is column-major),
  -- handed back through TBackward0: a view of the GEMM's result, which an InputBuffer does not
  -- add into in place (graph.c route_grad: a tied weight's two gradients).
  -- What the node keeps: the input only when the weight needs a gradient, the weight only when
  -- the input does (a frozen Linear keeps nothing of its input; one whose input needs no
  -- gradient keeps no weight), and its backward runs one GEMM per input that gets a gradient.
  -- One whose weight is frozen and whose input needs a gradient (LoRA's base layers) has a host
  -- class of its own, linear_frozen: one GEMM in its backward node, no AccumulateGrad. A frozen
  -- bias does not change that: AddmmBackward0 (derivatives.yaml) computes the bias's gradient
  -- only when it requires one, so the node of a frozen addmm is mm_mat1_backward alone, as
  -- MmBackward0's is, and addmm's forward dispatches as mm's does.
  -- Under autocast the casts are ops/autocast.lua's (lower_precision_fp): with opts.weight_cast
  -- (a transformers Linear, whose trace shows it) the weight from the weight cast cache, then the
  -- input; without, input, weight, bias (ops/autocast.lua says why that order stays).
  -- opts: host_views (view ops the caller runs around the call: nn.op), weight_cast (the name of
  -- the weight's cast op: the weight is cast first), keep_input
  -- (the caller's frame still holds x: the call drops no reference of it), frees, noncontig,
  -- grad_transposed (the gradient arrives as a transposed view: the bias reduction runs along
  -- its fastest dim, no staging buffer), bwd_workspace, lora ({ rank, "A" or "B" }: the GEMM of a
  -- LoRA adapter, graph.h Op.lora_rank; bias-free only).
  function nn.linear(cx, name, x, w, b, opts)
    opts = opts or {}
    local args, cast = nn.autocast(cx, "linear", { x, w, b }, 3,
                                   { names = { name .. ".input_cast", opts.weight_cast },
                                     params = { false, true, true }, keep = opts.keep_input,
                                     left_to_right = not opts.weight_cast })
    x, w, b = args[1], args[2], args[3]
    local frees = opts.frees
    if opts.keep_input and not cast then frees = {} end
    local shape = nn.copy_shape(x.shape)
    shape[#shape] = w.shape[1]
    local m = nn.numel(x.shape) // x.shape[#x.shape]
    local flops = 2 * m * w.shape[1] * w.shape[2]
    local saves = {}
    if w.rg then saves[#saves + 1] = x end
    if x.rg then saves[#saves + 1] = w end
    local bwd_flops = flops * ((x.rg and 1 or 0) + (w.rg and 1 or 0))
    if bwd_flops == 0 then bwd_flops = nil end
    local rg = (x.rg or w.rg or (b and b.rg)) and not cx.no_grad
    -- an input of more than two dims is folded into rows and the result unfolded (addmm's input
    -- view and output view; matmul's view and _unsafe_view): two view ops and their backward
    -- nodes beside the product (host class "view"), which the 2-D chains that time the linear
    -- classes do not run. A non-contiguous input is not folded (bmm); opts.host_views: views
    -- the caller's own code runs around the call
    local views = (#x.shape > 2 and not opts.noncontig and 2 or 0) + (opts.host_views or 0)
    -- the first addmm with a bias on a thread makes that cuBLAS handle's cuBLASLt workspace
    local function lt_outs(out)
      local outs = { out }
      if b and cx.lt_workspace_pending then
        outs[2] = cx.lt_workspace_pending
        cx.lt_workspace_pending = nil
      end
      return outs
    end
    -- grad_bias = grad.sum(0), a row sum whose staging buffers the engine sizes per GPU
    local red = b and b.rg and not opts.grad_transposed and { m, w.shape[1] } or nil
    if b and not opts.noncontig then
      local bv = b
      if b.rg and not cx.no_grad then
        bv = nn.view(cx, b, b.shape, name .. ".bias_side")
        bv.rg = true
        -- its backward is addmm's grad_bias = grad.sum(0): a row reduction of the output gradient
        nn.op_sized(cx, { name = name .. ".bias_grad", kind = "none", inputs = { b }, out_tensors = { bv },
                          grads = { { dtype = b.dtype } }, bwd_rowsum = red, bytes = 0, bwd_kind = "reduce_rows",
                          bwd_bytes = nn.bytes({ m, w.shape[1] }, x.dtype) + nn.bytes(b.shape, b.dtype),
                          host = "inside" })
      end
      local out = nn.new_tensor(cx, name, shape, x.dtype, rg)
      return nn.op_sized(cx, { name = name, kind = "mm", inputs = { x, w, bv }, out_tensors = lt_outs(out),
                               saves = saves,
                               grads = { { dtype = x.dtype, view = true }, w.rg and { dtype = w.dtype, view = true } or "none",
                                         bv.rg and { pass = 1 } or "none" },
                               grad_order = { 1, 2, 3 }, frees = frees, bwd_workspace = opts.bwd_workspace,
                               flops = flops, bwd_flops = bwd_flops, dtype = x.dtype,
                               host = (x.rg and not w.rg and not b.rg) and "linear_frozen" or "linear",
                               host_views = views })
    end
    local out = nn.new_tensor(cx, name, shape, x.dtype, rg)
    local y = nn.op_sized(cx, { name = name, kind = "mm", inputs = { x, w },
                                out_tensors = b and { out } or lt_outs(out), saves = saves,
                                grads = { { dtype = x.dtype, view = not opts.noncontig },
                                          w.rg and { dtype = w.dtype, view = true } or "none" },
                                grad_order = { 2, 1 }, frees = frees, bwd_workspace = opts.bwd_workspace,
                                flops = flops, bwd_flops = bwd_flops, dtype = x.dtype,
                                host = b and "linear" or (x.rg and not w.rg) and "linear_frozen" or "linear_nobias",
                                host_views = views })
    if opts.lora then
      if b then error(("op '%s': opts.lora is for a bias-free Linear (a LoRA adapter)"):format(name), 2) end
      cx.G:op_lora(cx.last_op, opts.lora[1], opts.lora[2])
    end
    if not b then return y end
    -- output.add_(bias): in place (a view of the product)
    local yb = nn.view(cx, y, y.shape, name .. ".add_bias")
    yb.rg = rg
    nn.op_sized(cx, { name = name .. ".add_bias_", kind = "elementwise", inputs = { y, b },
                      out_tensors = lt_outs(yb), grads = { { pass = 1 }, b.rg and { dtype = b.dtype } or "none" },
                      bwd_rowsum = red, bytes = 2 * nn.bytes(y.shape, y.dtype), flops = nn.numel(y.shape),
                      host = "inside" })
    return yb
  end

  -- cuBLASLt's workspace (1 MiB through the caching allocator, kept for the process) of a cuBLAS
  -- handle, made by the first addmm with a bias (gemm_and_bias) on that handle's thread.
  function nn.lt_workspace(cx, name)
    local id = cx.G:tensor { name = name, bytes = 1048576, numel = 0, dtype = "uint8", cat = "temp",
                             persistent = true }
    return { id = id, shape = { 1048576 }, dtype = "uint8", name = name }
  end
end
