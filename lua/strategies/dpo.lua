-- dpo.lua: DPO as TRL's DPOTrainer runs it (trl 1.16: trainer/dpo_trainer.py DataCollatorForPreference
-- and _compute_loss, trainer/utils.py add_fused_lm_head and use_adapter, kernels/chunked_logprob.py
-- ChunkedLogProbFunction), on one GPU.
--
-- The batch: micro_batch prompts, each with a chosen and a rejected completion. The collator
-- repeats the prompts (left-padded to the longest), pads chosen and rejected together (right,
-- to the longest of both), concatenates [prompt, completion] and truncates to max_length: one
-- batch of 2 x micro_batch rows (chosen first, then rejected), of the longest prompt plus the
-- longest completion. vrsim takes every row at the given lengths (the batch at its longest).
-- labels = input_ids with -100 outside the completion.
--
-- One step (_compute_loss):
--   policy     model(..., labels, fused_lm_head=True): the decoder, then TRL's fused head on the
--              completion positions only (hidden_states[:, :-1][mask], the head in tiles of
--              4096 tokens x 32768 vocabulary entries into one reused buffer, online log-sum-exp;
--              saves the compacted hidden states, the weight, the targets and two fp32 values a
--              token). Its backward recomputes each tile and accumulates fp32 gradients of the
--              hidden states and, where the head trains, of the weight, cast to their dtypes on
--              return. No logits of the batch are ever made.
--   reference  under torch.no_grad() (and without gradient checkpointing): a second, frozen copy
--              of the model (full fine-tuning: from_pretrained in the model's dtype), or, with a
--              peft adapter, the same model with its adapters disabled (use_adapter(model, None):
--              no second copy); its fused head gives log-probs only. precompute_ref_log_probs
--              computes them once before training (with the initial model when there is no
--              ref_model, so full fine-tuning then keeps no second copy either): no reference
--              forward in the step.
--   loss       the per-sequence sums of the log-probs, their log-ratios, -logsigmoid(beta x
--              delta) ("sigmoid", TRL's default): a few numbers a sequence.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

-- ChunkedLogProbFunction's tiles (kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, and
-- trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE)
M.TOKEN_CHUNK = 4096
M.VOCAB_CHUNK = 32768

-- training.dpo's keys, as `vrsim fields` lists them.
M.FIELDS = {
  prompt_length = { "integer", nil, "tokens of the longest prompt in the batch (required)" },
  completion_length = { "integer", nil, "tokens of the longest chosen or rejected completion in the batch (required)" },
  max_length = { "integer", 1024, "DPOConfig.max_length: the rows truncated to it (keep_start)" },
  precompute_ref_log_probs = { "boolean", false, "DPOConfig.precompute_ref_log_probs: the reference's log-probs computed before training, no reference forward (nor, without a ref_model, a second copy) in the step" },
}

-- The settings of training.dpo, or raises the first bad key.
function M.settings(d)
  if type(d) ~= "table" then
    error("training.dpo is a table { prompt_length = N, completion_length = M, max_length = ..., precompute_ref_log_probs = ... }", 0)
  end
  local s = { max_length = 1024, precompute_ref_log_probs = false }
  for k, v in pairs(d) do
    local f = M.FIELDS[k]
    if not f then
      local names = {}
      for n in pairs(M.FIELDS) do names[#names + 1] = n end
      table.sort(names)
      error(("training.dpo.%s is not a key vrsim knows (one of: %s)"):format(tostring(k), table.concat(names, ", ")), 0)
    end
    local ok = f[1] == "integer" and math.type(v) == "integer" and v > 0 or f[1] == "boolean" and type(v) == "boolean"
    if not ok then error(("training.dpo.%s must be a %s%s"):format(k, f[1], f[1] == "integer" and " above 0" or ""), 0) end
    s[k] = v
  end
  for _, k in ipairs { "prompt_length", "completion_length" } do
    if not s[k] then error(("training.dpo.%s is required (the batch's longest %s, in tokens)"):format(k,
      k == "prompt_length" and "prompt" or "chosen or rejected completion"), 0) end
  end
  if s.prompt_length >= s.max_length then
    -- _prepare_dataset drops such examples ("Drop examples whose prompt alone fills max_length")
    error(("training.dpo.prompt_length = %d fills max_length = %d: TRL drops such examples (keep_start "
           .. "truncation would leave no completion)"):format(s.prompt_length, s.max_length), 0)
  end
  -- the rows' length and each row's completion tokens after truncation
  s.len = math.min(s.prompt_length + s.completion_length, s.max_length)
  s.completion = s.len - s.prompt_length
  return s
end

-- The error for DPO on this run (nil when it can be simulated).
function M.refusal(t)
  local ok, why = pcall(M.settings, t.dpo)
  if not ok then return why end
  if t.inference then return "training.dpo with inference = true: DPO is training (leave inference false)" end
  if t.strategy ~= "none" or t.parallel then
    return ("training.dpo under strategy %s is not modelled (the reference model's placement under data "
            .. "parallelism is not built): one GPU"):format(t.strategy)
  end
  if t.data then return "training.dpo with training.data is not modelled: give the batch's lengths in training.dpo" end
  if t.loss ~= "full" then
    return ("training.dpo with training.loss = \"%s\": DPOTrainer patches the model with its own fused head "
            .. "(and refuses Liger's fused cross-entropy)"):format(t.loss)
  end
  if t.activation_offload or t.optimizer_in_backward or t.float8 or t.grad_accum > 1 then
    return "training.dpo with activation_offload, optimizer_in_backward, float8 or grad_accum > 1 is not modelled"
  end
  if t.checkpoint_scope == "op" then return "training.dpo with checkpoint_scope = \"op\" is not modelled" end
  return nil
end

-- The batch the collator makes: rows, length.
function M.batch(t, s)
  return 2 * t.micro_batch, s.len
end

-- add_fused_lm_head's forward after the decoder: hf (2B, S, H) the last hidden states of root's
-- model, w the head's weight. `outputs`: the per-token fields asked for (the policy: log_probs,
-- entropy, mean_logits, is_top1; the reference: log_probs). Returns the per-token log-probs
-- (2B, S - 1), fp32.
function M.head(cx, hf, w, s, outputs, pre)
  local b, S, H = hf.shape[1], hf.shape[2], hf.shape[3]
  local V = w.shape[1]
  local n = b * s.completion      -- the completion positions: labels[:, 1:] != -100
  local dt = hf.dtype
  -- hidden_states = last_hidden_state[:, :-1]: a view; SliceBackward makes a gradient the size
  -- of the whole
  local hs = nn.view_op(cx, pre .. "last_hidden_state[:, :-1]", hf, { b, S - 1, H })
  -- labels[:, 1:] != -100, and the boolean index's nonzero (int64, two per position)
  local mask = nn.op(cx, { name = pre .. "label_mask", inputs = {}, outs = { { pre .. "label_mask", { b, S - 1 }, "bool" } } })
  local idx = nn.op(cx, { name = pre .. "mask.nonzero", inputs = { mask }, frees = {},
                          outs = { { pre .. "mask.nonzero", { n, 2 }, "int64" } } })
  -- hidden_states[mask]: a gather into (n, H); IndexBackward keeps the indices and scatters its
  -- gradient into zeros of (2B, S - 1, H)
  local x = nn.op(cx, { name = pre .. "hidden_states[mask]", kind = "gather", inputs = { hs, idx },
                        outs = { { pre .. "hidden_states[mask]", { n, H }, dt } }, saves = { idx },
                        grads = { { bytes = nn.bytes({ b, S - 1, H }, dt), dtype = dt }, "none" } })
  local targets = nn.op(cx, { name = pre .. "labels[mask]", kind = "gather", inputs = { idx },
                              outs = { { pre .. "labels[mask]", { n }, "int64" } } })
  -- ChunkedLogProbFunction.forward (no grad inside): seven fp32 statistics a token, the tile
  -- buffer, then log_z and the outputs
  local was = cx.no_grad
  cx.no_grad = true
  local stats = nn.op(cx, { name = pre .. "chunked_logprob.stats", inputs = {},
                            outs = { { pre .. "chunked_logprob.stats", { 7, n }, "fp32" } } })
  local rows, cols = math.min(n, M.TOKEN_CHUNK), math.min(V, M.VOCAB_CHUNK)
  local buf = nn.op(cx, { name = pre .. "chunked_logprob.mm_buf", inputs = {},
                          outs = { { pre .. "chunked_logprob.mm_buf", { rows, cols }, dt } } })
  -- every tile: hidden_chunk @ weight[start:end].t() into the buffer, then the Triton fold
  -- (reads it once)
  nn.op(cx, { name = pre .. "chunked_logprob.tiles", kind = "mm", inputs = { x, w, buf, stats }, outs = {},
              flops = 2 * n * V * H, dtype = dt, frees = {},
              bytes = nn.bytes({ n, H }, dt) * ((V + M.VOCAB_CHUNK - 1) // M.VOCAB_CHUNK)
                      + nn.bytes(w.shape, w.dtype) * ((n + M.TOKEN_CHUNK - 1) // M.TOKEN_CHUNK) + 2 * n * V * nn.DT_SIZE[dt] })
  nn.release(cx, { buf }, pre .. "chunked_logprob: mm_buf goes as forward returns")
  -- log_z and the outputs (log_probs; entropy, mean_logits fp32, is_top1 bool where asked)
  local log_z = nn.op(cx, { name = pre .. "chunked_logprob.log_z", inputs = { stats }, frees = {},
                            outs = { { pre .. "chunked_logprob.log_z", { n }, "fp32" } } })
  local per = {}
  for _, o in ipairs(outputs) do
    per[#per + 1] = nn.op(cx, { name = pre .. "chunked_logprob." .. o, inputs = { stats, log_z }, frees = {},
                                outs = { { pre .. "chunked_logprob." .. o, { n }, o == "is_top1" and "bool" or "fp32" } } })
  end
  nn.release(cx, { stats }, pre .. "chunked_logprob: statistics go as forward returns")
  cx.no_grad = was
  -- the Function's node: saves hidden, weight, targets, log_z and (entropy or log_z); its
  -- backward makes fp32 zeros for grad_hidden (n, H) and, where the weight trains, grad_weight
  -- (V, H), the tile buffer, recomputes every tile, and returns both cast to their dtypes: all
  -- alive together as it returns
  local saves = { x, w, targets, log_z }
  local ent = nil
  for _, p in ipairs(per) do if p.name:match("entropy$") then ent = p end end
  if ent then saves[5] = ent end
  local ws = { nn.bytes({ n, H }, "fp32"), nn.bytes({ rows, cols }, dt), n * 4 }
  if w.rg then ws[#ws + 1] = nn.bytes(w.shape, "fp32") end
  local lp = nn.new_tensor(cx, pre .. "log_probs (completion tokens)", { n }, "fp32", (x.rg or w.rg) and not cx.no_grad)
  nn.op(cx, { name = pre .. "ChunkedLogProbFunction", kind = "none", inputs = { x, w, per[1] },
              out_tensors = { lp }, saves = saves,
              grads = { { bytes = nn.bytes({ n, H }, dt), dtype = dt }, w.rg and { dtype = w.dtype } or "none", "none" },
              bwd_kind = "mm", bwd_flops = 2 * n * V * H * (1 + (x.rg and 1 or 0) + (w.rg and 1 or 0)),
              bwd_workspace = ws, bwd_workspace_first = true, dtype = dt,
              frees = { x, targets, per[1] } })
  for i = 2, #per do nn.release(cx, { per[i] }, pre .. "FusedCausalLMOutput." .. outputs[i] .. " (after masked_scatter)") end
  -- x.new_zeros(mask.shape).masked_scatter(mask, x): each output back to (2B, S - 1)
  local full = nn.op(cx, { name = pre .. "log_probs.masked_scatter", inputs = { lp, mask },
                           outs = { { pre .. "log_probs", { b, S - 1 }, "fp32" } },
                           grads = { { dtype = "fp32" }, "none" } })
  for i = 2, #per do
    -- (the output object keeps them, for the trainer's metrics, until the loss is computed)
    local o = outputs[i]
    nn.hold(cx, nn.op(cx, { name = pre .. o .. ".masked_scatter", inputs = {},
                            outs = { { pre .. o, { b, S - 1 }, o == "is_top1" and "bool" or "fp32" } } }))
  end
  nn.release(cx, { idx }, pre .. "fused forward returns")
  return full
end

-- The policy's per-sequence sums and, after the reference's (run by `reference`, or the
-- precomputed ones), the DPO loss. Returns the loss.
function M.loss(cx, policy_lp, s, reference)
  local b = policy_lp.shape[1]
  -- per_token_logps.sum(dim=1)
  local logps = nn.op(cx, { name = "dpo.logps.sum", kind = "reduce_rows", inputs = { policy_lp },
                            outs = { { "dpo.logps", { b }, "fp32" } } })
  local ref
  if s.precompute_ref_log_probs then
    -- inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]: two fp32 numbers a prompt, with the batch
    ref = nn.op(cx, { name = "dpo.ref_logps (precomputed)", inputs = {}, outs = { { "dpo.ref_logps", { b }, "fp32" } } })
  else
    local was = cx.no_grad
    cx.no_grad = true
    local rlp = reference()
    ref = nn.op(cx, { name = "ref.logps.sum", kind = "reduce_rows", inputs = { rlp },
                      outs = { { "dpo.ref_logps", { b }, "fp32" } } })
    cx.no_grad = was
  end
  -- chosen/rejected log-ratios, -logsigmoid(beta * delta), mean
  return nn.op(cx, { name = "dpo.sigmoid_loss", kind = "elementwise", inputs = { logps, ref },
                     outs = { { "loss", {}, "fp32" } }, saves = { logps, ref }, grads = { { dtype = "fp32" }, "none" },
                     kernels = 8 })
end

-- With full fine-tuning and a reference forward: the reference model, a second tree built from
-- the same config (from_pretrained(dtype=model.dtype)), frozen, its ops and parameters under
-- "ref_model.". Returns its root.
function M.reference_tree(fam, mc)
  local ref = fam.tree(mc)
  mod.finalize(ref, "ref_model")
  mod.walk(ref, function(m) if m.opname then m.opname = "ref_model." .. m.opname end end)
  return ref
end

return M
