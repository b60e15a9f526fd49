-- lm_loss.lua: the three cross-entropy losses of a causal language model that replace the full
-- logits (training.loss; "full", transformers' ForCausalLMLoss, is models/llama.lua's):
--
--   liger_fused  Liger's LigerFusedLinearCrossEntropyFunction (liger-kernel 0.8.5,
--                liger_kernel/ops/fused_linear_cross_entropy.py, through
--                transformers/model/loss_utils.py LigerForCausalLMLoss): the head's weight is
--                read directly (lm_head's forward never runs) and the tokens go through in
--                chunks; per chunk the logits are computed into one reused buffer, the
--                cross-entropy kernel overwrites them with their gradient, and the chunk's input
--                gradient and the weight gradient are accumulated at once. Forward keeps the two
--                gradients, and backward hands them on: no logits of the whole batch, and no fp32
--                logits at all.
--   chunked      torchtune's CEWithChunkedOutputLoss (torchtune 0.6.1,
--                torchtune/modules/loss/ce_chunked_output_loss.py) with the model's
--                chunked_output (torchtune/modules/transformer.py): the output projection runs on
--                num_output_chunks = 8 chunks of the hidden states along the sequence, and the
--                loss upcasts one chunk at a time. Each chunk's log_softmax output (fp32, 1/8 of
--                the logits) is still saved for backward, unless torch.compile is on: the
--                recipes then compile the upcast and cross-entropy (torchtune.training.compile_loss),
--                which save the chunk's logits and two fp32 values a row instead.
--   cce          Apple's Cut Cross-Entropy (github apple/ml-cross-entropy at d42911f, June 2025,
--                the source its transformers extra installs from; PyPI's 25.1.1 predates the
--                patch; cut_cross_entropy/cce.py LinearCrossEntropyFunction, as cce_patch calls it:
--                linear_cross_entropy(hidden_states, lm_head.weight, labels, shift=True)): no
--                logits at all, not even a chunk of them. Forward computes each token's
--                log-sum-exp blockwise in one Triton kernel (fp32 (N,), with the vocabulary's
--                fp32 logit averages for gradient filtering) and the target logit by an indexed
--                dot; backward recomputes the logit blocks and accumulates grad_e and grad_c in
--                place, so the hidden states and the LSE are what the loss keeps until backward.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

-- torchtune's TransformerDecoder.num_output_chunks as its recipes set it
-- (model.set_num_output_chunks(self._loss_fn.num_output_chunks), CEWithChunkedOutputLoss's
-- default)
M.NUM_OUTPUT_CHUNKS = 8

local function next_pow2(n)
  local p = 1
  while p < n do p = p * 2 end
  return p
end

-- Liger's chunk rule (fused_linear_cross_entropy_forward, chunk_mem_const 1): the transient
-- logits are bounded by about BT x H elements, so inc_factor = ceil(V / H) and chunk_size =
-- next_power_of_2(ceil(BT / inc_factor)), at most BT. Returns chunk_size, num_chunks.
function M.liger_chunks(bt, h, v)
  local inc = (v + h - 1) // h
  local cs = math.min(next_pow2((bt + inc - 1) // inc), bt)
  return cs, (bt + cs - 1) // cs
end

-- The labels as both losses take them: labels padded with ignore_index and shifted left
-- (LigerForCausalLMLoss: nn.functional.pad(labels, (0, 1)), then [..., 1:].contiguous();
-- torchtune's recipes build the same shifted (b, s) tensor with torch.hstack).
local function shifted_labels(cx, b, s)
  local labels = nn.op(cx, { name = "labels.pad", inputs = {}, outs = { { "labels_padded", { b, s + 1 }, "int64" } } })
  return nn.op(cx, { name = "labels.shift", inputs = { labels }, outs = { { "shift_labels", { b, s }, "int64" } } })
end

-- LigerFusedLinearCrossEntropyFunction.apply(hidden.view(-1, H), lm_head.weight, labels): the
-- loss, in forward, of hidden states hf (b, s, H) and the head weight w (V, H). Returns the loss.
function M.liger_fused(cx, hf, w, b, s)
  local bt, h, v = b * s, hf.shape[#hf.shape], w.shape[1]
  local dt, wdt = hf.dtype, w.dtype
  local target = shifted_labels(cx, b, s)
  local x = nn.view(cx, hf, { bt, h }, "hidden_states.view(-1, H)")
  -- autograd.Function.forward runs without grad mode: the ops inside record no history
  local was = cx.no_grad
  cx.no_grad = true
  local cs, nchunks = M.liger_chunks(bt, h, v)
  -- target != ignore_index, then its sum's .item() (a host sync): the mask stays a local of the
  -- function until it returns
  local mask = nn.op(cx, { name = "fused_lce.target_mask", inputs = { target }, frees = {},
                           outs = { { "fused_lce.target_mask", { bt }, "bool" } } })
  local count = nn.op(cx, { name = "fused_lce.n_non_ignore", kind = "reduce_rows", inputs = { mask },
                            frees = {}, outs = { { "fused_lce.n_non_ignore", {}, "int64" } } })
  nn.release(cx, { count }, "fused_lce: .item()")
  -- torch.zeros_like(_input); zeros_like(weight) where the weight needs a gradient (accum_dtype
  -- None: the parameter's dtype); loss_1d in fp32
  local gi = nn.op(cx, { name = "fused_lce.grad_input", inputs = {},
                         outs = { { "fused_lce.grad_input", { bt, h }, dt } } })
  local gw = w.rg and nn.op(cx, { name = "fused_lce.grad_weight", inputs = {},
                                  outs = { { "fused_lce.grad_weight", w.shape, wdt } } })
  local loss_1d = nn.op(cx, { name = "fused_lce.loss_1d", inputs = {}, outs = { { "fused_lce.loss_1d", { bt }, "fp32" } } })
  -- _can_use_mm_out: input and weight of one dtype (fp16, bf16 or fp32) and grad mode off, as it
  -- is inside forward: one (chunk_size, V) buffer in the input's dtype that every chunk's
  -- torch.mm(out=) reuses
  local store = nn.op(cx, { name = "fused_lce.logits_storage", inputs = {},
                            outs = { { "fused_lce.logits_storage", { cs, v }, dt } } })
  local fp32_accum = gw and gw.dtype == "fp32"
  for c = 1, nchunks do
    local rows = math.min(cs, bt - (c - 1) * cs)
    local pre = ("fused_lce.chunk%d"):format(c)
    local xc = nn.view(cx, x, { rows, h }, pre .. ".input")
    local flops = 2 * rows * v * h
    nn.op(cx, { name = pre .. ".logits", kind = "mm", inputs = { xc, w, store }, outs = {}, flops = flops,
                bytes = nn.bytes({ rows, h }, dt) + nn.bytes(w.shape, wdt) + nn.bytes({ rows, v }, dt), dtype = dt })
    -- liger_cross_entropy_kernel: one program per row reads the row for its max and sum, then
    -- writes the gradient over the logits in place, and the row's loss into loss_1d
    nn.op(cx, { name = pre .. ".cross_entropy", kind = "softmax", inputs = { store, target, loss_1d }, outs = {},
                flops = 5 * rows * v, bytes = 3 * nn.bytes({ rows, v }, dt), dtype = "fp32" })
    -- grad_input[chunk] = grad_logits @ weight (torch.mm(out=))
    nn.op(cx, { name = pre .. ".grad_input", kind = "mm", inputs = { store, w, gi }, outs = {}, flops = flops,
                bytes = nn.bytes({ rows, v }, dt) + nn.bytes(w.shape, wdt) + nn.bytes({ rows, h }, dt), dtype = dt })
    if gw then
      -- grad_weight += grad_logits.t() @ input_chunk: addmm(out=grad_weight) in place where the
      -- logits' gradient is fp16/bf16 of the accumulator's dtype; an fp32 accumulator with fp32
      -- logits takes the legacy path, torch.mm(...).float() into a weight-sized fp32 temporary
      local ws = fp32_accum and dt == "fp32" and { nn.bytes(w.shape, "fp32") } or nil
      nn.op(cx, { name = pre .. ".grad_weight", kind = "mm", inputs = { store, xc, gw }, outs = {}, flops = flops,
                  workspace = ws, bytes = nn.bytes({ rows, v }, dt) + nn.bytes({ rows, h }, dt) + 2 * nn.bytes(w.shape, gw.dtype),
                  dtype = dt })
    end
  end
  -- del logits_storage; loss = torch.sum(loss_1d); the mask and loss_1d go as forward returns
  nn.release(cx, { store }, "fused_lce: del logits_storage")
  local lsum = nn.op(cx, { name = "fused_lce.sum", kind = "reduce_rows", inputs = { loss_1d },
                           outs = { { "fused_lce.loss", {}, "fp32" } } })
  nn.release(cx, { mask }, "fused_lce: forward returns")
  cx.no_grad = was
  -- the Function's node: its output is the loss; ctx.save_for_backward(grad_input, grad_weight);
  -- backward returns them as the input's and the weight's gradients (grad_output is 1.0, so
  -- the element_mul kernels are skipped; torch.equal reads the scalar)
  local saves, grads = { gi }, { { saved = 1 }, "none", "none" }
  if gw then saves[2] = gw; grads[2] = { saved = 2 } end
  local loss = nn.new_tensor(cx, "loss", {}, "fp32", true)
  nn.op(cx, { name = "LigerFusedLinearCrossEntropyFunction", kind = "none", inputs = { x, w, lsum },
              out_tensors = { loss }, saves = saves, grads = grads, bytes = 0, bwd_bytes = 8 })
  return loss
end

local function cdiv(a, b) return (a + b - 1) // b end

-- cce_linear_cross_entropy(e = hf (b, s, H), c = w (V, H), targets = ids (b, s), shift = True,
-- reduction "mean", filter_eps "auto", accum_e_fp32 / accum_c_fp32 False: the patch's defaults).
-- The labels are the input ids (vrsim trains on labels = input_ids), which the Function saves.
-- Returns the loss.
function M.cce(cx, hf, w, ids, b, s)
  local h, v = hf.shape[#hf.shape], w.shape[1]
  local dt, wdt = hf.dtype, w.dtype
  -- _build_flat_valids(targets, -100, shift=1): (targets[..., 1:] != ignore_index).nonzero()
  -- (int64 (N, 2), a host sync), .to(torch.int32), the batch index scaled by its stride in
  -- place, then .sum(1), which promotes to int64: the flat row of every valid token. Every
  -- label is valid here (no padding), so N = b * (s - 1) rows, and shift != 0 keeps the index
  -- even when none is ignored.
  local n = b * (s - 1)
  if ids.dtype ~= "int64" or #ids.shape ~= 2 then
    -- a pipeline stage that receives hidden states: its labels arrive on their own
    ids = nn.op(cx, { name = "labels", inputs = {}, outs = { { "labels", { b, s }, "int64" } } })
  end
  local tail = nn.view(cx, ids, { b, s - 1 }, "targets[..., 1:]")
  local ne = nn.op(cx, { name = "cce.valids.ne", inputs = { tail }, outs = { { "cce.valids.ne", { b, s - 1 }, "bool" } } })
  local nz = nn.op(cx, { name = "cce.valids.nonzero", kind = "reduce_rows", inputs = { ne },
                         outs = { { "cce.valids.nonzero", { n, 2 }, "int64" } } })
  local v32 = nn.to(cx, nz, "int32", "cce.valids.int32")
  nn.op(cx, { name = "cce.valids.mul_", inputs = { v32 }, outs = {}, frees = {}, bytes = 2 * nn.bytes({ n }, "int32") })
  local valids = nn.op(cx, { name = "cce.valids", kind = "reduce_rows", inputs = { v32 },
                             outs = { { "cce.valids", { n }, "int64" } } })
  -- e.flatten(0, -2), targets.flatten(): views (the final norm's output is contiguous, and the
  -- caching allocator's 512-byte alignment passes the targets' 16-byte check without the pad)
  local e = nn.view(cx, hf, { b * s, h }, "e.flatten(0, -2)")
  local targets = nn.view(cx, ids, { b * s }, "targets.flatten()")
  -- LinearCrossEntropyFunction.forward runs without grad mode
  local was = cx.no_grad
  cx.no_grad = true
  -- cce_lse_forward_kernel: lse = new_full((N,), -inf, fp32); locks, one uint32 per 128 rows;
  -- logit_avg = new_full((V,), 0, fp32), since a gradient is needed and filter_eps is set
  local lse = nn.op(cx, { name = "cce.lse", inputs = {}, outs = { { "cce.lse", { n }, "fp32" } } })
  local locks = nn.op(cx, { name = "cce.lse_locks", inputs = {}, outs = { { "cce.lse_locks", { cdiv(n, 128) }, "int32" } } })
  local avg = nn.op(cx, { name = "cce.logit_avg", inputs = {}, outs = { { "cce.logit_avg", { v }, "fp32" } } })
  -- _cce_lse_forward_kernel: each (BLOCK_B, BLOCK_V) program computes its logit block in
  -- registers, folds it into the rows' LSE under the locks and its column sums into logit_avg
  local fwd_flops = 2 * n * v * h
  nn.op(cx, { name = "cce.lse_forward", kind = "mm", inputs = { e, w, valids, lse, locks, avg }, outs = {}, frees = {},
              flops = fwd_flops, dtype = dt,
              bytes = nn.bytes({ n, h }, dt) + nn.bytes(w.shape, wdt) + nn.bytes({ n }, "fp32") + nn.bytes({ v }, "fp32") })
  nn.release(cx, { locks }, "cce_lse_forward_kernel returns: locks")
  -- indexed_neg_dot_forward_kernel: out = new_zeros((N,), fp32), -e[i] . c[target[i]]; then
  -- nll = neg_dot.add_(lse), in place
  local nd = nn.op(cx, { name = "cce.neg_dot", inputs = { e, w, targets, valids }, frees = {},
                         outs = { { "cce.neg_dot", { n }, "fp32" } }, flops = 2 * n * h,
                         bytes = 2 * nn.bytes({ n, h }, dt) + nn.bytes({ n }, "fp32") })
  nn.op(cx, { name = "cce.nll.add_", inputs = { nd, lse }, outs = {}, frees = {}, bytes = 3 * nn.bytes({ n }, "fp32") })
  local mean = nn.op(cx, { name = "cce.nll.mean", kind = "reduce_rows", inputs = { nd },
                           outs = { { "cce.nll.mean", {}, "fp32" } } })
  cx.no_grad = was
  -- the Function's node: ctx.save_for_backward(e, c, bias, lse, targets, valids, logit_avg).
  -- Backward: vocab_ordering = argsort(logit_avg).to(int32) (a compiled graph; its int64 sort
  -- output is gone before the gradients are made), de = zeros_like(e) and dc = zeros_like(c)
  -- where c trains, in their own dtypes (accum_*_fp32 off), lock grids of
  -- (cdiv(rows, 128), cdiv(H, 64)) int32 for each, then one kernel that recomputes every logit
  -- block (2 N V H), and adds d_logits @ c into de and d_logits^T @ e into dc (2 N V H each).
  -- Gradient filtering skips the blocks whose softmax gradient is below filter_eps everywhere;
  -- how many that is depends on the weights' values, so the time is the unfiltered kernel's.
  -- Priced as GEMMs ("mm"), the engine opens the autograd thread's cuBLAS workspace here, at
  -- the first GEMM of backward, where PyTorch opens it at the next layer's (Triton is not cuBLAS).
  local nd_locks = cdiv(h, 64)
  local ws = { nn.bytes({ v }, "int32"), nn.bytes({ cdiv(n, 128), nd_locks }, "int32") }
  local bwd_flops = 2 * 2 * n * v * h
  if w.rg then
    ws[3] = nn.bytes({ cdiv(v, 128), nd_locks }, "int32")
    bwd_flops = bwd_flops + 2 * n * v * h
  end
  local grads = { { bytes = nn.bytes(e.shape, dt), dtype = dt },
                  w.rg and { bytes = nn.bytes(w.shape, wdt), dtype = wdt } or "none", "none" }
  local loss = nn.new_tensor(cx, "loss", {}, "fp32", true)
  nn.op(cx, { name = "LinearCrossEntropyFunction", kind = "none", inputs = { e, w, mean }, out_tensors = { loss },
              saves = { e, w, lse, targets, valids, avg }, grads = grads, bwd_kind = "mm", bwd_kernels = 1,
              bwd_workspace = ws, bwd_workspace_first = true, bwd_flops = bwd_flops, dtype = dt,
              bwd_bytes = 2 * nn.bytes(e.shape, dt) + (w.rg and 3 or 1) * nn.bytes(w.shape, wdt) + nn.bytes({ n }, "fp32") })
  nn.release(cx, { lse, valids, avg }, "LinearCrossEntropyFunction.forward returns")
  return loss
end

-- The head m applied to chunks of hf along the sequence (sizes: the chunks' token counts), as
-- torch.chunk and Tensor.split cut it: views, whose gradients SplitBackward cats into one of hf's
-- size. A chunk of a batch of several sequences is not contiguous, and matmul's reshape to
-- (tokens, H) copies it (clone + _unsafe_view, whose gradients pass through). name: the views'
-- name ("hidden_states.chunk", "x.split"); hold: the caller keeps the logits in a list until the
-- loss is done. Returns the chunks' logits.
local function head_on_chunks(cx, head, hf, b, sizes, name, hold)
  local h = hf.shape[#hf.shape]
  local views = {}
  for k, sz in ipairs(sizes) do
    views[k] = nn.view(cx, hf, { b, sz, h }, ("%s%d"):format(name, k))
  end
  nn.op(cx, { name = name, kind = "none", inputs = { hf }, out_tensors = views,
              grads = { { bytes = nn.bytes(hf.shape, hf.dtype), dtype = hf.dtype } }, bwd_kind = "copy",
              bytes = 0, bwd_bytes = 2 * nn.bytes(hf.shape, hf.dtype) })
  local opname = head.opname
  local logits = {}
  -- (how many times the head runs per forward: an FSDP2 unit of its own has hooks per call,
  -- strategies/shard.lua extra_units)
  head.calls_per_forward = #views
  for k, v in ipairs(views) do
    local xin = v
    if b > 1 then
      xin = nn.op(cx, { name = ("lm_head.chunk%d.reshape"):format(k), kind = "copy", inputs = { v },
                        outs = { { ("lm_head.chunk%d.input"):format(k), { b * sizes[k], h }, hf.dtype } },
                        grads = { { pass = 1 } } })
    end
    head.opname = ("lm_head.chunk%d"):format(k)
    logits[k] = mod.call(cx, head, xin)
    head.opname = opname
    if hold then nn.hold(cx, logits[k]) end
  end
  return logits
end

-- torchtune's TransformerDecoder.chunked_output and CEWithChunkedOutputLoss: the head m applied
-- to each chunk of hf along the sequence, then the loss over the chunks. compiled: torch.compile
-- is on, and torchtune's recipes then compile the loss's compute_cross_entropy
-- (torchtune.training.compile_loss). Returns the loss.
function M.chunked(cx, head, hf, b, s, compiled)
  local n = M.NUM_OUTPUT_CHUNKS
  -- torch.chunk: chunks of ceil(s / n) tokens, the last shorter; fewer than n when s is small
  local cs = (s + n - 1) // n
  local sizes = {}
  for start = 0, s - 1, cs do sizes[#sizes + 1] = math.min(cs, s - start) end
  -- last_hidden_state.chunk(n, dim=1), [self.output(chunk) for chunk in ...]; the recipe's
  -- `logits` list is deleted after the loss
  local logits = head_on_chunks(cx, head, hf, b, sizes, "hidden_states.chunk", true)
  -- TransformerDecoder.forward returns the chunks' logits: its h is gone before the loss runs
  -- (kept only where the head saved views of it, a batch of one sequence). Measured:
  -- fulltrace_gen4-tm-l3-8b-l4-b2-s4096-chunked, 25 hidden-sized (64 MiB) tensors live at the
  -- peak, not 26
  nn.release(cx, { hf }, "TransformerDecoder.forward returns: h")
  local target = shifted_labels(cx, b, s)
  -- total_elements = (labels != ignore_index).sum()
  local ne = nn.op(cx, { name = "chunked_ce.labels_ne", inputs = { target }, frees = {},
                         outs = { { "chunked_ce.labels_ne", { b, s }, "bool" } } })
  local total = nn.op(cx, { name = "chunked_ce.total_elements", kind = "reduce_rows", inputs = { ne },
                            outs = { { "chunked_ce.total_elements", {}, "int64" } } })
  local total_loss
  for k, lg in ipairs(logits) do
    local pre = ("chunked_ce.chunk%d"):format(k)
    -- labels.chunk(n, dim=1) -> reshape(-1): a copy where the batch has several sequences
    local lab = nn.view(cx, target, { b * sizes[k] }, pre .. ".labels")
    if b > 1 then
      lab = nn.op(cx, { name = pre .. ".labels_reshape", kind = "copy", inputs = { lab }, frees = {},
                        outs = { { pre .. ".labels", { b * sizes[k] }, "int64" } } })
    end
    -- compute_cross_entropy: F.cross_entropy(logits.float(), labels, reduction="sum"); the fp32
    -- copy is the call's argument until it returns
    local l
    if compiled then
      -- torchtune.training.compile_loss: compute_cross_entropy is its own compiled graph
      l = nn.cross_entropy_compiled(cx, pre .. ".", lg, lab)
    else
      local lf = nn.to(cx, lg, "fp32", pre .. ".float")
      l = nn.cross_entropy(cx, pre .. ".", lf, lab, { keep_input = lf ~= lg })
      if lf ~= lg then nn.release(cx, { lf }, pre .. ": compute_cross_entropy returns") end
    end
    -- total_loss += ...: 0.0 + loss first, then a new sum each time
    local inputs = total_loss and { total_loss, l } or { l }
    total_loss = nn.op(cx, { name = pre .. ".accumulate", inputs = inputs,
                             outs = { { pre .. ".total_loss", {}, "fp32" } },
                             grads = total_loss and { { pass = 1 }, { pass = 1 } } or { { pass = 1 } } })
  end
  nn.release(cx, { ne }, "chunked_ce: forward returns")
  -- total_loss / total_elements: DivBackward0 keeps the divisor and makes the dividend's gradient
  return nn.op(cx, { name = "chunked_ce.normalize", inputs = { total_loss, total },
                     outs = { { "loss", {}, "fp32" } }, saves = { total }, grads = { { dtype = "fp32" }, "none" } })
end

-- litgpt's head and loss in its fine-tuning loop (litgpt 0.5.13, finetune/lora.py fit): `logits =
-- model(input_ids, lm_head_chunk_size=128)`, GPT.forward's `[self.lm_head(x_i) for x_i in
-- x.split(128, dim=1)]`. The model is Fabric's _FabricModule: its forward returns
-- precision.convert_output(output), which for HalfPrecision and BitsandbytesPrecision alike is
-- apply_to_collection(..., _convert_fp_tensor, dst_type=torch.get_default_dtype()) run outside
-- forward_context, where the default dtype is fp32 again: each bf16 chunk gets an fp32 copy
-- (ToCopyBackward0), and the bf16 list goes when the wrapper returns. Then `logits[-1] =
-- logits[-1][..., :-1, :]` (a view) and utils.chunked_cross_entropy(logits, targets[..., 1:]):
-- per chunk F.cross_entropy on those fp32 logits (reduction="none": the chunk's fp32
-- log_softmax output saved, an fp32 loss per row), then torch.cat(loss_chunks).sum() /
-- non_masked_elems. Returns the loss.
M.LITGPT_CHUNK = 128

function M.litgpt_chunked(cx, head, hf, b, s)
  local cs = M.LITGPT_CHUNK
  local sizes = {}
  for start = 0, s - 1, cs do sizes[#sizes + 1] = math.min(cs, s - start) end
  -- x.split(128, dim=1), [self.lm_head(x_i) for x_i in ...]
  local chunks = head_on_chunks(cx, head, hf, b, sizes, "x.split", false)
  -- GPT.forward returns the list: ln_f's output is gone unless the head saved views of it
  nn.release(cx, { hf }, "GPT.forward returns: x")
  -- _FabricModule.forward: convert_output makes the new list of fp32 copies while GPT.forward's
  -- list is still bound, then returns and drops that list
  local logits = {}
  for k, c in ipairs(chunks) do
    logits[k] = nn.cast(cx, c, "fp32", ("convert_output: logits[%d].float"):format(k - 1),
                        ("logits[%d] (fp32)"):format(k - 1), true)
  end
  nn.release(cx, chunks, "_FabricModule.forward returns: GPT.forward's bf16 list")
  -- `logits = model(...)` rebinds fit()'s list: the previous micro-batch's chunks are dropped now
  -- and these are kept into the next forward (strategies/litgpt.lua)
  require("strategies.litgpt").rebind_logits(cx, logits)
  local v = head.out_features
  local dt = logits[1].dtype
  -- targets[..., 1:] (a view), split to the chunks' lengths; reshape(-1) copies where the batch
  -- has several rows
  -- batch["labels"] (b, s), moved to the GPU with the batch
  local targets = nn.op(cx, { name = "targets", inputs = {}, outs = { { "targets", { b, s }, "int64" } } })
  local ne = nn.op(cx, { name = "chunked_cross_entropy.targets_ne", inputs = { targets }, frees = {},
                         outs = { { "chunked_cross_entropy.targets_ne", { b, s - 1 }, "bool" } } })
  local count = nn.op(cx, { name = "chunked_cross_entropy.non_masked_elems", kind = "reduce_rows", inputs = { ne },
                            outs = { { "chunked_cross_entropy.non_masked_elems", {}, "int64" } } })
  local losses, copies = {}, {}
  for k, lg in ipairs(logits) do
    local pre = ("chunked_cross_entropy.chunk%d."):format(k)
    -- the last chunk lost its last token (logits[-1][..., :-1, :])
    local last = k == #logits
    local rows = b * (sizes[k] - (last and 1 or 0))
    local lab = nn.view(cx, targets, { rows }, pre .. "targets")
    if b > 1 then
      lab = nn.op(cx, { name = pre .. "targets_reshape", kind = "copy", inputs = { lab }, frees = {},
                        outs = { { pre .. "targets", { rows }, "int64" } } })
    end
    -- logit_chunk.reshape(-1, V): a view, but of the sliced last chunk a copy where the batch has
    -- several rows, which the list logit_chunks keeps until the function returns
    local x = nn.view(cx, lg, { rows, v }, pre .. "logits")
    if last and b > 1 then
      x = nn.op(cx, { name = pre .. "logits_reshape", kind = "copy", inputs = { lg }, frees = {},
                      outs = { { pre .. "logits", { rows, v }, dt } }, grads = { { dtype = dt } } })
      copies[#copies + 1] = x
    end
    -- F.cross_entropy(bf16 logits, reduction="none"): log_softmax in the logits' dtype, its output
    -- saved; nll_loss's per-row losses in that dtype (total_weight made and dropped)
    local lsm = nn.op(cx, { name = pre .. "log_softmax", kind = "softmax", inputs = { x }, frees = {},
                            outs = { { pre .. "log_probs", { rows, v }, dt } }, save_outs = { 1 },
                            flops = 5 * rows * v, bwd_bytes = 3 * nn.bytes({ rows, v }, dt) })
    losses[k] = nn.op(cx, { name = pre .. "nll_loss", inputs = { lsm, lab },
                            outs = { { pre .. "loss", { rows }, dt }, { pre .. "total_weight", {}, dt, no_grad = true } },
                            saves = { lab, lsm }, grads = { { dtype = dt }, "none" },
                            bytes = rows * (nn.DT_SIZE[dt] + 8), bwd_bytes = nn.bytes({ rows, v }, dt), bwd_kernels = 2 })
  end
  nn.release(cx, { ne, targets, table.unpack(copies) }, "chunked_cross_entropy returns")
  -- torch.cat(loss_chunks).sum() / non_masked_elems.maximum(ones_like(...))
  local n = b * (s - 1)
  local cat = nn.op(cx, { name = "chunked_cross_entropy.cat", kind = "copy", inputs = losses,
                          outs = { { "chunked_cross_entropy.losses", { n }, dt } } })
  local sum = nn.op(cx, { name = "chunked_cross_entropy.sum", kind = "reduce_rows", inputs = { cat },
                          outs = { { "chunked_cross_entropy.sum", {}, dt } } })
  local one = nn.op(cx, { name = "chunked_cross_entropy.maximum", inputs = { count },
                          outs = { { "chunked_cross_entropy.denominator", {}, "int64" } } })
  return nn.op(cx, { name = "chunked_cross_entropy.div", inputs = { sum, one },
                     outs = { { "loss", {}, dt } }, saves = { one }, grads = { { dtype = dt }, "none" } })
end

return M
