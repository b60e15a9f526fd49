-- cp.lua: context parallelism as torchtitan runs it for SDPA models (torchtitan at 56e7b65,
-- distributed/context_parallel/api.py: the inputs, labels and positions sharded along the
-- sequence by _context_parallel_shard with the head-tail load balancer, the attention's q, k, v
-- wrapped as Shard(seq) DTensors so that F.scaled_dot_product_attention dispatches to ring
-- attention), and as torch 2.13 runs ring attention
-- (torch/distributed/tensor/experimental/_context_parallel/_attention.py):
--
--   The sequence of s tokens is cut into 2 * cp chunks; cp rank r holds chunks r and 2cp-1-r
--   (head-tail), s/cp tokens. Every activation of the rank is of its s/cp tokens: embeddings,
--   norms, projections, MLP, the rotary tables (positions sharded too), the logits and the loss
--   over the rank's labels. Only attention needs the other ranks' keys and values.
--
--   _templated_ring_attention, cp steps. The rotater (_cp_options.rotate_method: "allgather",
--   torch's default, which torchtitan keeps; or "alltoall") brings the other ranks' k and v:
--   allgather cats the local k and v (key.contiguous(), value.contiguous(), torch.cat of both
--   flattened) and all-gathers that once (cp times its bytes, kept to the end); alltoall passes
--   the cat to the next rank each step (permute_tensor), one buffer in flight. Step 0 is SDPA of
--   the local q over the local k, v, causal; step i > 0 is SDPA without the mask of either the
--   whole local q over the first half of the arriving k, v (i <= r) or the second half of q over
--   all of them (i > r): each step half of the local q x k block (s/cp queries over s/(2cp) keys,
--   or s/(2cp) queries over s/cp keys), as much as step 0's causal half, so that the rank runs
--   cp halves of its block, 1/cp of the sequence's causal attention. _SDPAMerger,
--   convert_to_f32 = True, keeps the running output and logsumexp in fp32 and merges each
--   step's (out - sigmoid(lse_i - lse) * (out - out_i), lse - logsigmoid(lse - lse_i)), the
--   output cast back to q's dtype at the end.
--
--   The autograd node is SDPA's own (the DTensor dispatch replaces the aten op inside it), so
--   backward keeps what it keeps without context parallelism: the local q, k, v, the output and
--   the logsumexp; the gathered k, v are not saved. _templated_ring_attention_backward exchanges
--   k, v again (the same rotater), keeps fp32 accumulators of dq, dk, dv, runs each step's SDPA
--   backward, and passes the fp32 dk, dv accumulators round the ring every step (always
--   alltoall: cp exchanges), casting them back at the end.
--
-- The ops: the cat and the exchange on the compute stream, a fused-attention op and a merge per
-- step, and the cat of the arriving k, v each step but the last (torch issues each exchange
-- asynchronously and waits for it at the step that reads it, so it can overlap the step before;
-- here it runs ahead of that step, and the step time counts it whole), then the node that
-- autograd records (the final cast; its backward the cp steps' SDPA backward at their summed
-- FLOPs, with the buffers above as its workspace), and three views on its output whose backward
-- ops are the backward's own adds, cats and casts on those buffers and its two exchanges (they
-- run just before the node's backward, as the backward's all-gather and ring do before and
-- beside its kernels). Under torch.compile (torchtitan compiles each block with fullgraph=True,
-- the DTensor dispatch traced into the graph) the exchanges and the backward stay as they are
-- eager; the merges fuse, and the allgather rotater's dropped cats are dead code.
local nn = require "vrsim.nn"

local C = {}

-- The families whose attention is llama.lua's (transformers' sdpa_attention_forward, one
-- F.scaled_dot_product_attention call that the context-parallel dispatcher takes).
local FAMILIES = { llama = true, mistral = true, qwen2 = true, qwen3 = true, mixtral = true, qwen3_moe = true }

C.ROTATE = { "allgather", "alltoall" }

-- What context parallelism over cp ranks cannot be applied to as modelled: the message naming
-- it, or nil. attention: the implementation the family runs (fam.attention's answer).
function C.refusal(fam, mc, t, cp, tp, attention)
  local where = ("training.parallel.cp = %d"):format(cp)
  if not FAMILIES[fam.model_type or ""] then
    return ("%s: context parallelism is modelled for the families whose attention is one SDPA call "
            .. "(Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE), not for %s"):format(where, tostring(fam.model_type))
  end
  if attention == "eager" then
    return ("%s with attention = \"eager\": ring attention replaces F.scaled_dot_product_attention "
            .. "(its flash, memory-efficient or cuDNN kernels; torchtitan's SDPA module), which eager "
            .. "attention never calls: use attention = \"sdpa\""):format(where)
  end
  if t.seq % (2 * cp) ~= 0 then
    return ("%s: training.seq = %d is not a multiple of 2 * cp = %d (the head-tail load balancer cuts "
            .. "the sequence into 2 * cp equal chunks)"):format(where, t.seq, 2 * cp)
  end
  if (t.seq // cp) % tp ~= 0 then
    return ("%s: each rank's %d tokens are not a multiple of tp = %d (sequence parallelism shards them)")
      :format(where, t.seq // cp, tp)
  end
  -- transformers makes the window's mask from a sequence as long as the window on
  -- (masking_utils' _ignore_causal_mask_sdpa: kv_length >= local_attention_size)
  if mc.sliding_window and t.seq >= mc.sliding_window then
    return ("%s: a sliding window (%d) no longer than the sequence needs an attention mask, which "
            .. "ring attention does not take"):format(where, mc.sliding_window)
  end
  local unsupported = {
    { t.data_batch ~= nil, "training.data (variable-length or packed batches need a mask)" },
    { t.inference, "inference" },
    -- (mp_fp32, FSDP2's MixedPrecisionPolicy(bf16, fp32) over fp32 shards as torchtitan runs it
    -- by default, is modelled: the layers compute in bf16 from the gathered bf16 parameters, so
    -- the ring takes bf16 q, k, v as under bf16; only the shards, their gradients and the
    -- optimizer's states are fp32 (oracle llama2_7b_l2_mp_fp32_cp2). Autocast would run the ring
    -- under its casts, fp32 in fp32: neither is modelled)
    { t.precision:match("^amp") or t.precision == "fp32", "precision " .. t.precision },
    { t.quant ~= "none", "bitsandbytes quantization" },
    { t.device_map ~= "none", "device_map" },
    { t.strategy ~= "none" and t.strategy ~= "fsdp2", "training.strategy = \"" .. t.strategy .. "\" (torchtitan folds cp into FSDP2's mesh)" },
  }
  for _, u in ipairs(unsupported) do
    if u[1] then return ("%s with %s: not modelled"):format(where, u[2]) end
  end
  return nil
end

-- A view of x whose backward op is a collective of the cp group (kind, bytes): the backward's
-- exchanges, which run before the ring attention's backward kernels. compile_extern: under
-- torch.compile the collective stays NCCL's (a functional collective in the graph), never part of
-- an Inductor kernel, so a compiled layer keeps its bytes (lua/strategies/compile.lua).
local function backward_exchange(cx, name, x, kind, bytes, g)
  local v = nn.view(cx, x, x.shape, name)
  nn.op(cx, { name = name, kind = "none", inputs = { x }, out_tensors = { v }, grads = { { pass = 1 } },
              bwd_kind = kind, bytes = 0, bwd_bytes = bytes, world = g.size, per_node = g.per_node,
              compile_extern = true })
  return v
end

-- _templated_ring_attention_backward's own elementwise work on its fp32 buffers (bytes moved in
-- `kernels` kernels), as a view of x whose backward op it is: it runs beside the ring's kernels.
-- compile_extern: the bytes given are already what a compiled graph's fused kernels move.
local function backward_elementwise(cx, name, x, bytes, kernels)
  local v = nn.view(cx, x, x.shape, name)
  nn.op(cx, { name = name, kind = "none", inputs = { x }, out_tensors = { v }, grads = { { pass = 1 } },
              bwd_kind = "elementwise", bytes = 0, bwd_bytes = bytes, bwd_kernels = kernels, dtype = "fp32",
              compile_extern = true })
  return v
end

-- The bytes and kernels of that work for a rank r of cp over q's qn and k's kvn elements in
-- dtype size sz. Eager, each statement its kernel(s): zeros_like for the fp32 dq, dk, dv; the
-- local k, v made contiguous and catted for the rotater (v a transposed view: one copy and the
-- cat); every step but the last the arriving k, v catted again (the allgather rotater drops it);
-- each step's dk_, dv_ added into the fp32 pair (read 4 + sz, write 4 bytes an element), or,
-- where only the first half of k, v took part (0 < i <= r), added into that half and the halves
-- catted back (_partial_update: 8 bytes an element more); the pair catted to be passed on (16);
-- dq_ added likewise (its second half and the cat where i > r); at the end dq and the last dk, dv
-- cast to q's dtype. Compiled, Inductor fuses each step's adds and cats into the kernel that
-- writes the pair passed on and the one that updates dq, and the zeros into their first add; the
-- rotater's dropped cat is dead code.
function C.backward_work(cp, r, qn, kvn, sz, compiled, alltoall)
  local acc = 8 + sz                                        -- x += y_, x fp32, y_ in q's dtype
  local bytes, kernels = (4 + sz) * (qn + 2 * kvn), 2       -- the final casts
  if not compiled then
    bytes = bytes + 4 * qn + 8 * kvn + 3 * 2 * kvn * sz     -- zeros_like x3; v.contiguous(), the cat
    kernels = kernels + 5
  end
  for i = 0, cp - 1 do
    local half_kv, half_q = i > 0 and i <= r, i > r
    if i > 0 and i < cp - 1 and (alltoall or not compiled) then
      bytes, kernels = bytes + 2 * 2 * kvn * sz, kernels + 1 -- the arriving k, v catted
    end
    if compiled then
      -- the received pair (or none at step 0) plus dk_, dv_ in, the pair passed on out; dq
      -- read, dq_ (or its half) read, dq written
      bytes = bytes + (i > 0 and 8 or 0) * kvn + (half_kv and sz / 2 or sz) * 2 * kvn + 8 * kvn
              + 8 * qn + (half_q and sz / 2 or sz) * qn
      kernels = kernels + 2
    else
      bytes = bytes + (half_kv and acc / 2 + 8 or acc) * 2 * kvn + 16 * kvn
              + (half_q and acc / 2 + 8 or acc) * qn
      kernels = kernels + (half_kv and 4 or 2) + 1 + (half_q and 2 or 1)
    end
  end
  return bytes, kernels
end

-- Ring attention of the local q (b, heads, s/cp, d) over the cp group's keys and values, k and v
-- (b, kv_heads, s/cp, d). g: { size, rank (this rank's place in the group), per_node, rotate }.
-- backend: the SDPA kernel ("cudnn", "flash", "mem_efficient"). Returns the output in q's layout.
function C.ring_attention(cx, name, q, k, v, g, backend)
  local b, h, sl, d = q.shape[1], q.shape[2], q.shape[3], q.shape[4]
  local kvh = k.shape[2]
  local dt = q.dtype
  local cp, r = g.size, g.rank
  local kind = "attention_" .. backend
  local qn, kvn = b * h * sl * d, b * kvh * sl * d
  local sz = nn.DT_SIZE[dt]
  local kv_bytes = 2 * kvn * sz -- k and v flattened and catted
  local lse_shape = { b, h, sl }
  local block = 4 * b * h * sl * sl * d -- FLOPs of the local q over the local k, unmasked
  local none = function(n) local t = {} for i = 1, n do t[i] = "none" end return t end
  -- key.contiguous() (a copy of v, which arrives as a transposed view), value.contiguous() and
  -- torch.cat([key.flatten(), value.flatten()])
  local kvcat = nn.op(cx, { name = name .. ".cp_kv_cat", kind = "copy", inputs = { k, v }, grads = none(2),
                            outs = { { name .. ".cp_kv", { 2 * kvn }, dt, no_grad = true } },
                            workspace = { kvn * sz }, bytes = 3 * kv_bytes })
  local gathered
  if g.rotate == "allgather" then
    gathered = nn.op(cx, { name = name .. ".cp_kv_all_gather", kind = "all_gather", inputs = { kvcat }, grads = none(1),
                           outs = { { name .. ".cp_kv_gathered", { cp * 2 * kvn }, dt, no_grad = true } },
                           bytes = cp * kv_bytes, world = cp, per_node = g.per_node })
  end
  -- step 0: the local block, causal (half of it)
  local o0, lse = nn.op(cx, { name = name .. ".cp_step0", kind = kind, inputs = { q, k, v }, grads = none(3),
                              outs = { { name .. ".cp_out0", q.shape, dt, no_grad = true },
                                       { name .. ".cp_lse", lse_shape, "fp32", no_grad = true } },
                              flops = block / 2, dtype = dt })
  local out = nn.op(cx, { name = name .. ".cp_out_fp32", kind = "cast_up", inputs = { o0 }, grads = none(1),
                          outs = { { name .. ".cp_out", q.shape, "fp32", no_grad = true } } })
  local held = kvcat
  for i = 1, cp - 1 do
    local src = gathered
    if not src then
      -- alltoall: this step's k, v arrive from the previous rank (permute_tensor), the buffer
      -- passed on
      src = nn.op(cx, { name = ("%s.cp_kv_send_step%d"):format(name, i), kind = "send", inputs = { held },
                        grads = none(1), outs = { { ("%s.cp_kv_step%d"):format(name, i), { 2 * kvn }, dt, no_grad = true } },
                        bytes = kv_bytes, world = cp, per_node = g.per_node })
    end
    -- `if i < size - 1: next_kv = torch.cat([key.flatten(), value.flatten()])` of the arriving
    -- k, v, every step but the last: what alltoall sends on; the allgather rotater has gathered
    -- already and drops it, so that a compiled graph never makes it (dead code), eager does
    if i < cp - 1 and (not gathered or not cx.compiling) then
      local nxt = nn.op(cx, { name = ("%s.cp_kv_cat_step%d"):format(name, i), kind = "copy", inputs = { src },
                              grads = none(1), outs = { { ("%s.cp_kv_next%d"):format(name, i), { 2 * kvn }, dt, no_grad = true } },
                              bytes = 2 * kv_bytes })
      if gathered then nn.release(cx, { nxt }, name .. ": the allgather rotater drops the cat") end
      held = nxt
    end
    -- i <= r: all of q over the first half of the arriving k, v; i > r: q's second half over all
    local partial = i > r
    local qs = partial and { b, h, sl // 2, d } or q.shape
    local ls = partial and { b, h, sl // 2 } or lse_shape
    local oi, li = nn.op(cx, { name = ("%s.cp_step%d"):format(name, i), kind = kind, inputs = { q, src }, grads = none(2),
                               outs = { { ("%s.cp_out%d"):format(name, i), qs, dt, no_grad = true },
                                        { ("%s.cp_lse%d"):format(name, i), ls, "fp32", no_grad = true } },
                               flops = block / 2, dtype = dt })
    -- _SDPAMerger: the block cast to fp32, (out - out_i), its product with the sigmoid, the new
    -- output (a partial update cats the unchanged half back in), and the new logsumexp. Eager,
    -- each a kernel of its own: over the block's p elements, block_out.to(fp32) (read in q's
    -- dtype, written in fp32), out - block_out (12 bytes an element), sigmoid(...) * that (8: the
    -- sigmoid is one value a row, broadcast), out - that (12); over its rows, block_lse - lse,
    -- sigmoid, lse - block_lse, logsigmoid, lse - that (52 bytes a row); a partial update's two
    -- torch.cat read and write the whole output and logsumexp (16 bytes an element)
    local qpart, lpart = nn.numel(qs), nn.numel(ls)
    local merge_bytes = (sz + 4 + 32) * qpart + 52 * lpart
    if partial then merge_bytes = merge_bytes + 16 * (qn + nn.numel(lse_shape)) end
    out, lse = nn.op(cx, { name = ("%s.cp_merge%d"):format(name, i), kind = "elementwise",
                           inputs = { out, lse, oi, li }, grads = none(4),
                           outs = { { name .. ".cp_out", q.shape, "fp32", no_grad = true },
                                    { name .. ".cp_lse", lse_shape, "fp32", no_grad = true } },
                           workspace = { 3 * qpart * 4 }, flops = 6 * qpart, dtype = "fp32",
                           bytes = merge_bytes, kernels = partial and 11 or 9 })
  end
  if gathered then nn.release(cx, { gathered }, name .. ": ring attention returns (the gathered k, v)") end
  -- the node autograd records: the output cast back; its backward the ring's. What it keeps is
  -- SDPA's: q, k, v (the local ones), the output and the logsumexp. compile_extern: under
  -- torch.compile its backward is still the ring's flash kernels, exchanges and fp32 buffers (the
  -- DTensor dispatch traced into the graph), not a fused kernel without workspace.
  local total = cp * block / 2
  local acc = qn * 4 + 2 * kvn * 4                        -- fp32 dq, dk, dv accumulators
  local ring = 2 * (2 * kvn * 4)                          -- the dk, dv cat sent and the one received
  local step = qn * sz + 2 * kvn * sz + qn * 4 + nn.bytes(lse_shape, "fp32") -- a step's dq_, dk_, dv_ and kernel workspace
  local kvx = kv_bytes + (g.rotate == "allgather" and cp * kv_bytes or kv_bytes) -- k, v again
  local y, lse_out = nn.op(cx, { name = name .. ".ring_attention", kind = "cast_down", inputs = { q, k, v, out, lse },
                                 grads = { "new", "new", "new", "none", "none" }, grad_order = { 1, 2, 3 },
                                 outs = { { name .. ".attn_out", q.shape, dt },
                                          { name .. ".logsumexp", lse_shape, "fp32", no_grad = true } },
                                 saves = { q, k, v }, save_outs = { 1, 2 },
                                 bwd_kind = kind, bwd_flops = 2.5 * total, flops = qn,
                                 bwd_workspace = { acc + ring + step + kvx }, bwd_workspace_first = true,
                                 dtype = dt, compile_extern = true })
  nn.release(cx, { lse_out }, name .. ": the logsumexp (kept by autograd)")
  -- the backward's adds, cats and casts on its fp32 buffers, beside its kernels
  local wb, wk = C.backward_work(cp, r, qn, kvn, sz, cx.compiling, g.rotate == "alltoall")
  y = backward_elementwise(cx, name .. ".cp_grad_accumulate", y, wb, wk)
  -- backward's exchanges: k, v again (the rotater's), then the dk, dv ring (cp passes of fp32)
  if g.rotate == "allgather" then
    y = backward_exchange(cx, name .. ".cp_kv_all_gather (backward)", y, "all_gather", cp * kv_bytes, g)
  else
    y = backward_exchange(cx, name .. ".cp_kv_send (backward)", y, "send", (cp - 1) * kv_bytes, g)
  end
  y = backward_exchange(cx, name .. ".cp_dkv_send (backward)", y, "send", cp * 2 * kvn * 4, g)
  return y
end

-- The note a run with context parallelism carries.
function C.notes(cp, rotate, rank)
  return {
    ("context parallelism over %d ranks (torch's ring attention, rotate method %s, head-tail load balance): "
     .. "each rank runs s/%d tokens, this rank (cp %d) its chunks %d and %d; the ring's exchanges timed ahead "
     .. "of their step (not overlapped), its backward kernels priced as one at their summed FLOPs, its adds and casts "
     .. "on the fp32 buffers as one elementwise op; the loss's "
     .. "all-reduce over cp not an op"):format(cp, rotate, cp, rank,
     rank, 2 * cp - 1 - rank),
  }
end

return C
