-- ops/loss.lua: losses of the op library (installed into vrsim/nn.lua's table): F.mse_loss and
-- F.cross_entropy (log_softmax + nll_loss), which the causal LM losses (models/llama.lua's
-- ForCausalLMLoss, vrsim/lm_loss.lua's chunked loss) call.
return function(nn)
  -- F.cross_entropy(x, labels) on fp32 logits x (rows, vocab) or (b, s, vocab) as
  -- torch.nn.functional runs it: log_softmax (saves its fp32 output) then nll_loss (saves the
  -- labels and the log-probabilities; its total_weight output is kept too). pre: the prefix of
  -- the op and tensor names ("" or "<chunk>."). opts.keep_input: the caller's frame still holds x.
  -- What the kernels move (torch.profiler's kernel table of a real step,
  -- validation/results/profile_tables_h200.jsonl): log_softmax's backward (cunn_SoftMaxBackward)
  -- reads the output gradient and the saved output and writes the input gradient, three passes;
  -- nll_loss reads one log-probability and one label per row (19 us for 8192 rows), and its
  -- backward fills a zero gradient the size of the logits, then writes one value per row
  -- (FillFunctor, then nll_loss_backward_reduce_cuda_kernel_2d).
  function nn.cross_entropy(cx, pre, x, labels, opts)
    opts = opts or {}
    local numel = nn.numel(x.shape)
    local rows = numel // x.shape[#x.shape]
    local fp32 = nn.bytes(x.shape, "fp32")
    if opts.loss_parallel then return nn.cross_entropy_loss_parallel(cx, pre, x, labels, opts) end
    local lsm = nn.op(cx, { name = pre .. "log_softmax", kind = "softmax", inputs = { x },
                            frees = opts.keep_input and {} or nil,
                            outs = { { pre .. "log_probs", x.shape, "fp32" } }, save_outs = { 1 },
                            flops = 5 * numel, bwd_bytes = 3 * fp32 })
    return nn.op(cx, { name = pre .. "nll_loss", inputs = { lsm, labels },
                       outs = { { pre .. "loss", {}, "fp32" }, { pre .. "total_weight", {}, "fp32", no_grad = true } },
                       saves = { labels, lsm }, save_outs = { 2 }, grads = { { dtype = "fp32" }, "none" },
                       bytes = rows * (4 + 8), bwd_bytes = fp32, bwd_kernels = 2 })
  end

  -- F.cross_entropy on a DTensor sharded over the vocabulary, inside torch's loss_parallel():
  -- DTensor's own handlers (torch/distributed/tensor/parallel/loss.py) run on the rank's local
  -- shard x (rows, vocab/tp) in place of the fused kernels.
  --   _log_softmax: shifted = x - all_reduce(amax(x)), then sum(exp(shifted)) (exp(shifted) a
  --     full-size temporary, freed after the sum), then result = shifted - log(all_reduce(sum)):
  --     shifted and the result live together until it returns: two fp32 buffers of x's size
  --     beside x at once, three allocations.
  --   _nll_loss_and_log_softmax_backward (nll_loss's backward, fused with log_softmax's):
  --     grad_input = zeros_like(x) with -1 scattered at the rank's targets, then
  --     (grad_input + exp(x)) * grad_output: the zeros, exp(x) and their sum live together, then
  --     the product is made while the zeros and the sum are alive: three fp32 buffers of x's size
  --     beside the saved log-probabilities (here the gradient and two workspaces; exp(x), freed
  --     before the product, whose block the product takes, is not a fourth allocation).
  --   _log_softmax_backward_data: grad_output.to(input_dtype), the fp32 gradient itself for fp32
  --     logits (no copy).
  -- The per-row tensors (the max, the sum, the masked targets, b x s values) are not ops.
  -- Measured with validation/oracle/capture_tp.py, which records inside these handlers
  -- (see_inside_loss_parallel): at Llama 3 70B's shapes (tp 8, 16 x 8192 tokens, 16032 vocabulary
  -- rows a rank) forward makes 8016 MiB (shifted), 8016 MiB (exp) and 8016 MiB (the result), the
  -- backward 8016 MiB (zeros_like), 8016 MiB (exp), 8016 MiB (add), 8016 MiB (mul).
  function nn.cross_entropy_loss_parallel(cx, pre, x, labels, opts)
    local numel = nn.numel(x.shape)
    local rows = numel // x.shape[#x.shape]
    local fp32 = nn.bytes(x.shape, "fp32")
    -- amax(x), x - max, exp(shifted) (the workspace, gone after its row sum): no autograd history
    local shifted = nn.op(cx, { name = pre .. "log_softmax (loss parallel): x - max, exp", kind = "softmax",
                                inputs = { x }, frees = {}, grads = { "none" },
                                outs = { { pre .. "shifted", x.shape, "fp32", no_grad = true } },
                                workspace = { fp32 }, flops = 4 * numel, bytes = 5 * fp32, kernels = 4 })
    -- shifted - log(sum): the output autograd keeps; its backward hands the gradient through
    local lsm = nn.op(cx, { name = pre .. "log_softmax (loss parallel)", inputs = { x, shifted },
                            frees = opts.keep_input and { shifted } or nil,
                            outs = { { pre .. "log_probs", x.shape, "fp32" } }, save_outs = { 1 },
                            grads = { { pass = 1 }, "none" },
                            flops = numel, bytes = 2 * fp32, bwd_bytes = 0 })
    return nn.op(cx, { name = pre .. "nll_loss (loss parallel)", inputs = { lsm, labels },
                       outs = { { pre .. "loss", {}, "fp32" }, { pre .. "total_weight", {}, "fp32", no_grad = true } },
                       saves = { labels, lsm }, save_outs = { 2 }, grads = { { dtype = "fp32" }, "none" },
                       bwd_workspace = { fp32, fp32 },
                       -- zeros, exp, add, mul: four fp32 writes, four reads
                       bytes = rows * (4 + 8), bwd_bytes = 8 * fp32, bwd_kernels = 5 })
  end

  -- CEWithChunkedOutputLoss.compute_cross_entropy under torch.compile (torchtune 0.6.1's
  -- torchtune.training.compile_loss compiles it alone: F.cross_entropy(logits.float(), labels,
  -- reduction="sum") on one chunk's logits x, whatever their dtype). AOTAutograd's min-cut
  -- partitioner saves the chunk's logits as they came, the labels, and two fp32 values a row
  -- (the row max and the log of the sum of exponentials): neither the fp32 copy nor the fp32
  -- log-probabilities is saved, and Inductor fuses the upcast into the reductions, so forward
  -- allocates only those. Backward (exp(x - max - log) minus the scattered one-hot, times the
  -- output gradient, cast back: Inductor rewrites the scatter on zeros as a pointwise select)
  -- is a row reduction into one fp32 value a row, then one kernel writing the gradient in x's
  -- dtype: no fp32 buffer of the logits' size. (Read from the partition and Inductor's output
  -- code for this function in torch 2.13 on the CPU.)
  function nn.cross_entropy_compiled(cx, pre, x, labels)
    local numel = nn.numel(x.shape)
    local rows = numel // x.shape[#x.shape]
    local xb = nn.bytes(x.shape, x.dtype)
    return (nn.op(cx, { name = pre .. "compiled_cross_entropy", kind = "softmax", inputs = { x, labels }, frees = {},
                        outs = { { pre .. "loss", {}, "fp32" },
                                 { pre .. "amax", { rows, 1 }, "fp32", no_grad = true },
                                 { pre .. "logsumexp", { rows, 1 }, "fp32", no_grad = true } },
                        saves = { x, labels }, save_outs = { 2, 3 }, grads = { "new", "none" },
                        bwd_workspace = { rows * 4 }, flops = 5 * numel, bytes = xb + rows * (8 + 8),
                        bwd_bytes = 2 * xb }))
  end

  -- F.mse_loss(pred.float(), target.float()) (mean): both casts, then (as the measured run's
  -- trace shows) a buffer of the loss's size that lives to the end of the step, the elementwise
  -- loss and the scalar. Backward keeps both inputs. cx.late_outputs: tensors the step makes
  -- at this point and keeps (the backward thread's cuBLASLt workspace).
  function nn.mse_loss(cx, name, pred, target)
    local p = nn.to(cx, pred, "fp32", name .. ".pred_float")
    local t = nn.to(cx, target, "fp32", name .. ".target_float")
    local held = cx.G:tensor { name = name .. ".step_buffer", bytes = nn.bytes(p.shape, "fp32"),
                               numel = nn.numel(p.shape), dtype = "fp32", cat = "temp", persistent = true }
    local outs = { { id = held, shape = p.shape, dtype = "fp32", name = name .. ".step_buffer" } }
    local ws = { nn.bytes(p.shape, "fp32") }
    local loss = nn.new_tensor(cx, name, {}, "fp32", true)
    outs[2] = loss
    for _, e in ipairs(cx.late_outputs or {}) do outs[#outs + 1] = e end
    nn.op_sized(cx, { name = name, kind = "elementwise", inputs = { p, t }, out_tensors = outs,
                      saves = { p, t }, grads = { { dtype = "fp32" }, "none" }, workspace = ws,
                      flops = 3 * nn.numel(p.shape), dtype = "fp32" })
    return loss
  end
end
