-- ops/attention.lua: F.scaled_dot_product_attention (installed into vrsim/nn.lua's table) as
-- PyTorch 2.11 runs it on CUDA: the fused kernel nn.sdpa_backend picks, what it allocates and
-- what its backward node keeps.
return function(nn)
  -- F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal), q/k/v
  -- (b, heads, s, d); k and v may have fewer heads (enable_gqa, taken by cuDNN and flash). The
  -- output comes in q's layout (a caller's transpose(1, 2).reshape is a view).
  --   cuDNN: two int64 philox tensors, the output, an fp32 softmax statistic per query row and
  --     a 256-byte workspace; backward allocates dq, dk, dv and one buffer of an fp32 dq
  --     accumulator, the row statistic and 256 bytes (the SDXL trace: 10,649,856 bytes for
  --     4096 x 640; optrace_pub-c04 for LLaMA)
  --   flash: the output and an fp32 logsumexp per row; backward dq, dk, dv, an fp32 dq
  --     accumulator and an fp32 row statistic
  --   memory-efficient (fp32, or a mask with flash chosen): the output, a logsumexp padded to a
  --     multiple of 32 rows, the philox state; an fp32 output accumulator for head dims above 128
  -- A boolean mask: convert_boolean_attn_mask makes an additive mask in q's dtype (a new tensor
  -- each call), which the fused kernel keeps for backward (ScaledDotProduct{Cudnn,Efficient}
  -- AttentionBackward0 save attn_bias); flash attention takes no mask, so PyTorch picks cuDNN
  -- (Hopper) or memory-efficient attention; is_causal is then off and every block of the score
  -- matrix is computed.
  -- Under autocast q, k, v are cast to the low dtype first (ops/autocast.lua): q, k, v, or with
  -- opts.cast_v_first v, k, q (ops/autocast.lua says why both stand). opts.host_views: view ops
  -- the caller runs around the call (the heads' views and transposes: nn.op).
  -- The values may have a head dim of their own (multi-head latent attention: q and k 192, v
  -- 128): the output and its gradient are (b, h, s, v's), the score matrix is q's by k's and the
  -- output is probabilities by v's; nn.sdpa_backend says which kernel takes such shapes.
  -- opts: impl (a forced backend: "flash", "cudnn", "mem_efficient"; default cx.attention),
  -- causal (half the score matrix computed), mask (a boolean mask tensor), keep_input (the
  -- caller's frame keeps q, k, v), frees.
  function nn.sdpa(cx, name, q, k, v, opts)
    opts = opts or {}
    local frees = opts.frees
    if opts.keep_input then frees = {} end
    local args, cast = nn.autocast(cx, "sdpa", { q, k, v }, 3,
                                   { names = { name .. ".q_cast", name .. ".k_cast", name .. ".v_cast" },
                                     keep = opts.keep_input,
                                     left_to_right = not opts.cast_v_first })
    q, k, v = args[1], args[2], args[3]
    if cast then frees = opts.frees end
    local b, h, s, d = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
    local sk, dv = k.shape[3], v.shape[4]
    local out_shape = { b, h, s, dv }
    local flops = 2 * b * h * s * sk * (d + dv)
    local mask = opts.mask
    if opts.causal and not mask then flops = flops / 2 end
    local dt = q.dtype
    local rg = (q.rg or k.rg or v.rg) and not cx.no_grad
    local backend = nn.sdpa_backend(cx.arch, dt, opts.impl or cx.attention, dv ~= d and { qk = d, v = dv } or nil)
    -- an additive mask (its kernels skip no block), or fewer keys than queries (cross-attention
    -- on text tokens): priced by curves of their own where the profile has them (sim/cost.h,
    -- cost_from_profile)
    local variant = mask and "_masked" or sk < s and "_cross" or ""
    if mask and backend == "flash" then backend = "mem_efficient" end
    -- a mask row not a multiple of 16 bytes (keys not a multiple of 8 in 16 bits: a padded batch's
    -- odd longest sequence, a packed row of any length): cuDNN's forward reads it 2-2.7x slower on
    -- an H100 (sim/cost.h); memory-efficient attention pads the mask itself (its own rows)
    if mask and nn.bytes({ mask.shape[#mask.shape] }, dt) % 16 ~= 0 then
      variant = "_masked_unaligned"
      local from = cx.sdpa_unaligned_from
      if backend == "cudnn" and from ~= "own" and not cx.noted_sdpa_unaligned then
        cx.noted_sdpa_unaligned = true
        cx.notes = cx.notes or {}
        cx.notes[#cx.notes + 1] = from
          and ("attention mask of %d keys, its rows not a multiple of 16 bytes: cuDNN's kernels at the rows "
               .. "%s measured at such lengths (the same die: lua/hw/carry.lua sdpa_borrowed_rows)")
            :format(sk, from)
          or ("attention mask of %d keys, its rows not a multiple of 16 bytes: cuDNN's forward at the aligned "
              .. "mask's rate, this GPU's attention table having no such rows (on an H100 it ran 2-2.7x slower: "
              .. "validation/results/sdpa_kernels_masked_more_h100_sxm.json)"):format(sk)
      end
    end
    local inputs, saves, grads = { q, k, v }, { q, k, v }, nil
    local bias
    if mask and mask.dtype ~= "bool" then
      -- an additive mask already in q's dtype (a 4-D mask the batch carries) is the bias itself;
      -- its holder frees it, not this call
      bias = mask
      inputs[4], saves[4] = bias, bias
      grads = { "new", "new", "new", "none" }
    elseif mask then
      bias = nn.op(cx, { name = name .. ".attn_mask_to_bias", inputs = { mask },
                         outs = { { name .. ".attn_bias", mask.shape, dt, no_grad = true } },
                         grads = { "none" } })
      inputs[4], saves[4] = bias, bias
      grads = { "new", "new", "new", "none" }
      frees = { bias }
    end
    if backend == "mem_efficient" then
      local lse_shape = { b, h, (s + 31) // 32 * 32 }
      -- a head dim above 128 takes the cutlassF kernel of unbounded kMaxK, which does not keep
      -- the output in registers: in 16 bits it writes an fp32 (b, s, h, v) accumulator first
      -- (attention.cu _efficient_attention_forward: output_accum when
      -- kNeedsOutputAccumulatorBuffer), freed as the kernel returns
      local ws
      if dt ~= "fp32" and math.max(d, dv) > 128 then ws = { nn.numel(out_shape) * 4 } end
      return nn.op_sized(cx, {
        name = name .. ".sdpa_mem_efficient", kind = "attention_mem_efficient" .. variant, inputs = inputs,
        outs = { { name .. ".attn_out", out_shape, dt }, { name .. ".logsumexp", lse_shape, "fp32", no_grad = true },
                 { name .. ".philox", { 2 }, "int64", no_grad = true } },
        save_outs = { 1, 2, 3 }, saves = saves, grads = grads, frees = frees, workspace = ws,
        flops = flops, bwd_flops = 2.5 * flops, dtype = dt, host = "sdpa",
        host_views = opts.host_views })
    end
    if backend == "flash" then
      local lse_shape = { b, h, s }
      return nn.op_sized(cx, {
        name = name .. ".sdpa_flash", kind = "attention_flash" .. variant, inputs = inputs,
        outs = { { name .. ".attn_out", out_shape, dt }, { name .. ".logsumexp", lse_shape, "fp32", no_grad = true } },
        save_outs = { 1, 2 }, saves = saves, grad_order = { 1, 2, 3 }, frees = frees,
        bwd_workspace = { nn.numel(q.shape) * 4 + nn.bytes(lse_shape, "fp32") },
        flops = flops, bwd_flops = 2.5 * flops, dtype = dt, host = "sdpa",
        host_views = opts.host_views })
    end
    local lse_shape = { b, h, s }
    local seed = nn.new_tensor(cx, name .. ".philox_seed", { 1 }, "int64", false)
    local off = nn.new_tensor(cx, name .. ".philox_offset", { 1 }, "int64", false)
    local out = nn.new_tensor(cx, name .. ".attn_out", out_shape, dt, rg)
    local lse = nn.new_tensor(cx, name .. ".softmax_stats", lse_shape, "fp32", false)
  -- the backward's one workspace: an fp32 dq accumulator, the row statistic and 256 bytes; with
  -- fewer key/value heads than query heads (enable_gqa) the accumulator is twice that size
  -- (torch 2.11+cu130: 134,742,272 bytes for (2, 32, 2048, 128) queries
  -- on 8 or 4 key/value heads in fulltrace_gen4-qwen3-8b-l4-b2, fulltrace_gen4-qwen3moe-l4-b2 and
  -- fulltrace_gen-llama3-8b-l4-lora-all-r16-b2-trace, 67,371,264 for (1, 32, 2048, 128) in
  -- fulltrace_gen4-mixtral-l2-b1; the phi3, olmo2 and mistral traces, every head its own, keep
  -- the single accumulator)
  local acc = nn.numel(q.shape) * 4
  if k.shape[2] < h then acc = 2 * acc end
  local bwd_ws = acc + nn.bytes(lse_shape, "fp32") + 256
  local csaves = { k, q, v }
    if bias then csaves[4] = bias end
    for _, t in ipairs { lse, out, seed, off } do csaves[#csaves + 1] = t end
    nn.op_sized(cx, { name = name .. ".sdpa_cudnn", kind = "attention_cudnn" .. variant, inputs = inputs,
                      out_tensors = { seed, off, out, lse }, saves = csaves, grads = grads,
                      workspace = { 256 }, grad_order = { 1, 2, 3 }, frees = frees,
                      kernels = nn.launches(cx, "sdpa_cudnn_fwd"), bwd_kernels = nn.launches(cx, "sdpa_cudnn_bwd"),
                      bwd_workspace = { bwd_ws },
                      flops = flops, bwd_flops = 2.5 * flops, dtype = dt, host = "sdpa",
        host_views = opts.host_views })
    return out
  end

  -- transformers' flex_attention_forward (integrations/flex_attention.py, 5.25) through
  -- compile_friendly_flex_attention, torch.compile(flex_attention): q (b, h, s, d), k and v
  -- (b, kv_heads, s, d) with enable_gqa (the caller repeats them where the query heads are not a
  -- power of two), the BlockMask masking_utils made (block_mask: its tensors, which the compiled
  -- function keeps for backward). Its Triton kernel writes the output in q's layout and an fp32
  -- (b, h, s) log-sum-exp, and autograd keeps q, k, v, the output and the log-sum-exp
  -- (measure_flex_attention.py: the forward leaves exactly the output and the log-sum-exp
  -- allocated); transformers casts the log-sum-exp to v's dtype, a copy it returns and the
  -- layer drops. The kernel also writes an fp32 (b, h, s) row maximum nobody asked for
  -- (torch/_higher_order_ops/flex_attention.py: max_scores = query.new_empty(...)), freed as the
  -- call returns. The backward makes two fp32 (b, h, s) rows first, the zero gradient of the
  -- log-sum-exp (FlexAttentionAutogradOp.backward: torch.zeros_like(logsumexp)) and the row term
  -- delta (the Inductor lowering: sum(out * grad_out) in fp32), then a copy of the incoming
  -- gradient, the original freed once copied, then dq, dk, dv in their inputs' layouts (the H100
  -- traces fulltrace_gen16-flex-*: 512 KiB, 16 MiB, 512 KiB, the 16 MiB freed, at 32 heads x 4096
  -- and head dim 64; 1, 64, 1 MiB at 8192 and 128). Its FLOPs: causal SDPA's (the
  -- causal BlockMask computes the 128 x 128 blocks on and below the diagonal: 2080 of 4096 at
  -- 8192 tokens, 1.6 % over half), priced by the flex rows (kind attention_flex).
  -- A BlockMask (torch.nn.attention.flex_attention, 128 x 128 blocks) for `rows` rows of `len`
  -- tokens: eight int32 tensors, the partial and full blocks' counts (rows, 1, n) and indices
  -- (rows, 1, n, n) for the keys, and the same transposed for the queries' backward, made from
  -- `inputs` (which it does not free: a mask function's closure holds them). Returns the list.
  function nn.block_mask(cx, rows, len, inputs)
    local n = (len + 127) // 128
    local outs = {}
    for _, side in ipairs { "kv", "q" } do
      for _, full in ipairs { "", "full_" } do
        outs[#outs + 1] = { ("block_mask.%s%s_num_blocks"):format(full, side), { rows, 1, n }, "int32", no_grad = true }
        outs[#outs + 1] = { ("block_mask.%s%s_indices"):format(full, side), { rows, 1, n, n }, "int32", no_grad = true }
      end
    end
    return { nn.op(cx, { name = "block_mask", kind = "elementwise", inputs = inputs or {}, frees = {}, outs = outs }) }
  end

  -- A partial block's cost in full ones, forward and backward, at head dims of 64 or less and
  -- above: measure_flex_attention.py's rows on an H100 (validation/results/
  -- flex_attention_h100_sxm.json), the causal row and the 16-document row of 8192 tokens, two
  -- equations in the two blocks' times (docs/step-time.md, "FlexAttention over documents")
  local FLEX_PARTIAL_BLOCK = { d64 = { fwd = 2.8, bwd = 2.2 }, d128 = { fwd = 2.0, bwd = 2.0 } }
  function nn.flex_attention(cx, name, q, k, v, opts)
    local b, h, s, d = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
    local sk, dv = k.shape[3], v.shape[4]
    local dt = q.dtype
    local flops = 2 * b * h * s * sk * (d + dv) / 2
    -- a document BlockMask (opts.blocks: its partial and full 128 x 128 blocks): its kernels
    -- launch the causal mask's grid, a program per q-block and head, and each runs the kv-blocks
    -- its row keeps: the causal FLOPs in proportion to the work of its blocks against the causal
    -- mask's, at the causal shape's rate (rate_at). A partial block (mask_mod applied to every
    -- score) costs FLEX_PARTIAL_BLOCK full ones
    local bwd_flops, rate_at, bwd_rate_at = 2.5 * flops
    if opts.blocks then
      local n = (s + 127) // 128
      local w = FLEX_PARTIAL_BLOCK[d <= 64 and "d64" or "d128"]
      local function share(partial)
        return (partial * opts.blocks.partial + opts.blocks.full) / (partial * b * n + b * n * (n - 1) // 2)
      end
      local f, bw = share(w.fwd), share(w.bwd)
      flops, bwd_flops, rate_at, bwd_rate_at = flops * f, bwd_flops * bw, 1 / f, 1 / bw
    end
    local P = name .. ".flex_attention"
    local saves = { q, k, v }
    for _, t in ipairs(opts.block_mask or {}) do saves[#saves + 1] = t end
    local out, lse = nn.op_sized(cx, {
      -- (head dims of 64 or less have curves of their own: sim/cost.h)
      name = P, kind = d <= 64 and "attention_flex_d64" or "attention_flex", inputs = { q, k, v },
      outs = { { P .. ".out", { b, h, s, dv }, dt }, { P .. ".lse", { b, h, s }, "fp32", no_grad = true } },
      save_outs = { 1, 2 }, saves = saves, grad_order = { 1, 2, 3 },
      workspace = { nn.bytes({ b, h, s }, "fp32") }, workspace_first = true,
      bwd_workspace = { nn.bytes({ b, h, s }, "fp32"), nn.bytes({ b, h, s }, "fp32") }, bwd_workspace_first = true,
      flops = flops, bwd_flops = bwd_flops, rate_at = rate_at, bwd_rate_at = bwd_rate_at, dtype = dt,
      host = "sdpa" })
    -- the backward's copy of the incoming gradient, before the kernel's: a no-kernel op on the
    -- output whose backward makes the copy and drops what it was given
    if out.rg then
      local ov = nn.view(cx, out, out.shape, P .. ".out")
      ov.rg = true
      nn.op(cx, { name = P .. ".grad_out_copy", kind = "none", inputs = { out }, out_tensors = { ov },
                  grads = { { dtype = dt } }, bytes = 0, frees = {}, bwd_kind = "copy",
                  bwd_bytes = 2 * nn.bytes(out.shape, dt) })
      out = ov
    end
    if not cx.flex_noted and cx.sdpa_flex_from ~= "own" then
      cx.flex_noted = true
      cx.notes = cx.notes or {}
      cx.notes[#cx.notes + 1] = cx.sdpa_flex_from
        and ("attention flex: FlexAttention's kernels at the rows %s measured (the same die: lua/hw/carry.lua "
             .. "sdpa_borrowed_rows)"):format(cx.sdpa_flex_from)
        or "attention flex: no FlexAttention kernel measured on this GPU's architecture, priced as a GEMM-bound kernel"
    end
    if opts.output_only then return out end
    -- `lse = lse.to(value.dtype)`: transformers' copy, dropped with the layer's locals
    local lse_cast = nn.op(cx, { name = P .. ".lse_to", kind = "cast_down", inputs = { lse },
                                 outs = { { P .. ".lse_cast", { b, h, s }, v.dtype, no_grad = true } },
                                 grads = { "none" } })
    nn.release(cx, { lse_cast }, P .. ": flex_attention_forward returns")
    return out
  end
end
