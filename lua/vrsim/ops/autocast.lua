-- ops/autocast.lua: torch.autocast's cast rule, stated once per op of the op library, and the
-- one function that applies it (installed into vrsim/nn.lua's table).
--
-- Policies, as aten/src/ATen/autocast_mode.cpp lists the CUDA kernels (PyTorch 2.11):
--   lower_precision_fp  KERNEL_CUDA(op, lower_precision_fp): mm, addmm, bmm, baddbmm, linear,
--                       conv*, _scaled_dot_product_*_attention. Every floating argument that is
--                       not already in the low dtype is cast to it (cached_cast); an fp32 leaf
--                       parameter's copy comes from the weight cast cache (once per forward,
--                       dropped by nn.end_forward).
--   fp32                KERNEL_CUDA(op, fp32): softmax (under some conditions), log_softmax,
--                       layer_norm, group_norm, norm, upsample_nearest*, mse_loss,
--                       cross_entropy / nll_loss, pow, sum... Arguments are cast up to fp32 and
--                       the op runs and returns in fp32.
--   promote             KERNEL_CUDA(op, promote): cat, stack, index_put, addcmul... The
--                       arguments are cast to their widest floating type (nn.promote), which
--                       the op does itself.
--   none                not autocast-enabled: runs in the dtype it is given (add, activations,
--                       layout copies, casts).
--   helper              makes no kernel (shapes, sizes, the cost tables' keys, bookkeeping).
--
-- The order of the casts: WrapFunction_'s `redispatch(cached_cast(to_type, args)...)` leaves the
-- order of the arguments' evaluation to the compiler, and GCC's x86-64 builds evaluate them
-- right to left: a Linear's weight copy comes before its input copy, SDPA casts value, key,
-- then query (fulltrace_gen-stk-g07-amp-bf16-b4: each 32 MiB weight copy before its 64 MiB
-- input copy; SDPA's three 64 MiB copies v, k, q). F.conv2d too: fulltrace_gen4-sd15-unet-
-- ampbf16-r512-b4 casts conv_in's bias, weight, then input (640, 23040, 131072 bytes); the
-- sd15_cut_amp_bf16 capture casts a 1x1 convolution's weight before its input, and its backward, whose ready queue runs the
-- highest sequence number first, runs the casts' ToCopyBackward0 input, weight, bias (a UNet's
-- every convolution; cast from the first argument on, the backward's order put SD 1.5's
-- repeated transformer blocks a block out of alignment). nn.autocast casts in that order, except
-- where a caller passes left_to_right: the diffusers models' F.linear (ops/linear.lua without
-- opts.weight_cast) and their SDPA (ops/attention.lua without opts.cast_v_first) still cast from
-- the first argument on, as no captured trace of theirs shows the order (the flux_cut_lora_ckpt
-- capture casts q and k, of one size, before its SDPA, which cannot tell them apart).
return function(nn)
  nn.AUTOCAST = {
    -- lower_precision_fp
    linear = "lower_precision_fp", conv2d = "lower_precision_fp", sdpa = "lower_precision_fp",
    bmm = "lower_precision_fp",
    -- fp32
    group_norm = "fp32", layer_norm = "fp32", upsample_nearest2x = "fp32", mse_loss = "fp32",
    rms_norm = "fp32", softmax = "fp32", log_softmax = "fp32", nll_loss = "fp32", cross_entropy = "fp32",
    -- promote
    cat = "promote",
    -- not autocast-enabled
    act = "none", add = "none", div_scalar = "none", copy = "none", view = "none", view_op = "none",
    ew = "none", mul = "none", cast = "none", to = "none", input = "none", op = "none",
    op_sized = "none", new_tensor = "none",
    -- flex_attention is a higher-order op autocast's lists do not name (and vrsim refuses it
    -- under autocast: causal_lm.lua flex_refusal)
    flex_attention = "none",
    -- a BlockMask's int32 tensors, made from integer and boolean tensors
    block_mask = "none",
    -- torchtune's compiled compute_cross_entropy upcasts its argument itself (logits.float()),
    -- inside the graph, so no cast precedes the call
    cross_entropy_compiled = "none",
    -- reached from nn.cross_entropy (whose policy casts its argument) under loss parallel
    cross_entropy_loss_parallel = "none",
    -- no kernel
    bytes = "helper", numel = "helper", context = "helper", param = "helper", launches = "helper",
    promote = "helper", copy_shape = "helper", sdpa_backend = "helper", arch_class = "helper",
    split_reduce_buffer = "helper",
    row_sum_buffers = "helper", conv_ws_estimate = "helper", conv_key = "helper", lt_workspace = "helper",
    add_grads = "helper", release = "helper", checkpoint_args = "helper", hold = "helper",
    end_forward = "helper", autocast = "helper", autocast_weight = "helper",
  }

  -- The low-precision copy of a parameter under autocast, made once per forward (autocast's
  -- cast cache) and dropped when the forward ends (nn.end_forward). name: the cast op's name
  -- (default "<param>.autocast").
  function nn.autocast_weight(cx, w, name)
    local lp = cx.autocast
    if not lp or w.dtype ~= "fp32" then return w end
    local wc = cx.cast_cache[w.id]
    if not wc then
      wc = nn.cast(cx, w, lp, name or (w.name .. ".autocast"), w.name .. "." .. lp)
      cx.cast_cache[w.id] = wc
    end
    return wc
  end

  -- The casts autocast inserts before op (a key of nn.AUTOCAST) on its tensor arguments args
  -- (in the op's signature order, n of them: a nil is an absent argument), right to left.
  -- opts: left_to_right (the exception to the order: the header says where), names (each argument's cast
  -- op name; an input's copy carries the same name), params
  -- (the indices that are parameters: copies from the weight cast cache), keep (the caller
  -- still holds the inputs: a cast drops no reference). Returns the arguments to use and
  -- whether an input (not a parameter) was cast. Without cx.autocast nothing is cast.
  function nn.autocast(cx, op, args, n, opts)
    local policy = nn.AUTOCAST[op]
    if not policy or policy == "helper" then
      error(("nn.autocast: op '%s' has no autocast policy (lua/vrsim/ops/autocast.lua nn.AUTOCAST)"):format(op), 2)
    end
    local lp = cx.autocast
    if not lp or policy == "none" or policy == "promote" then return args, false end
    opts = opts or {}
    local names, params = opts.names or {}, opts.params or {}
    local to = policy == "fp32" and "fp32" or lp
    local out, cast = {}, false
    local first, last, step = n, 1, -1
    if opts.left_to_right then first, last, step = 1, n, 1 end
    for i = first, last, step do
      local t = args[i]
      if t and params[i] and to == lp then
        out[i] = nn.autocast_weight(cx, t, names[i])
      elseif t and t.dtype ~= to and (t.dtype == "fp32" or to == "fp32") then
        out[i] = nn.cast(cx, t, to, names[i], names[i], opts.keep)
        cast = true
      else
        out[i] = t
      end
    end
    return out, cast
  end
end
