-- generate.lua: model.generate(input_ids, max_new_tokens=M) with the default DynamicCache and
-- greedy decoding, as transformers 5.25 runs it (generation/utils.py _sample,
-- cache_utils.py DynamicLayer.update, models/llama/modeling_llama.py LlamaForCausalLM.forward
-- with logits_to_keep), under inference mode.
--
--   prefill  one forward of the B x prompt tokens; each layer's DynamicLayer starts empty and
--            torch.cat copies the keys and values into it (the layer's cache); the head runs on
--            the last position only (logits_to_keep=1: hidden_states[:, -1:, :], a view), so
--            the logits are (B, 1, V) in the model's dtype
--   token    the loop's own small ops (after_forward below): position_ids grown, the (B, V)
--            fp32 copy of the last logits, greedy argmax, EOS padding, input_ids grown, the
--            stopping criteria and StopCheck's host sync; the model output goes
--            (the model takes generate's (B, s) position_ids: models/llama.lua)
--   decode   max_new_tokens - 1 more forwards of one token a row: each layer's
--            DynamicLayer.update is `self.keys = torch.cat([self.keys, key_states], dim=-2)`
--            (and the values): a new tensor one token longer, the old one freed as it is
--            rebound; attention of the one query over the whole cache (is_causal off: one
--            query)
-- The cache grows by 2 x layers x B x kv_heads x head_dim x dtype bytes a token, one layer's
-- copy at a time; the step's peak is at the last token. Each decode forward reads every weight
-- and the whole cache for B tokens: a memory-bound pass, priced so by the cost model (its
-- GEMMs of B rows, its attention of one query).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

-- training.generate's keys, as `vrsim fields` lists them.
M.FIELDS = {
  prompt = { "integer", nil, "prompt tokens a row (required)" },
  max_new_tokens = { "integer", nil, "tokens generated a row (required)" },
  batch = { "integer", 1, "rows generated together (the prompts of one batch, of equal length)" },
  eos = { "boolean", true, "the generation config has an eos_token_id: EosTokenCriteria and the padding of "
                          .. "finished rows run each token (no row is taken to stop early); false: eos_token_id = None" },
}

-- The settings of training.generate, or raises the first bad key.
function M.settings(g)
  if type(g) ~= "table" then error("training.generate is a table { prompt = N, max_new_tokens = M, batch = B }", 0) end
  local s = { batch = 1, eos = true }
  for k, v in pairs(g) do
    local f = M.FIELDS[k]
    if not f then
      local names = {}
      for n in pairs(M.FIELDS) do names[#names + 1] = n end
      table.sort(names)
      error(("training.generate.%s is not a key vrsim knows (one of: %s)"):format(tostring(k), table.concat(names, ", ")), 0)
    end
    if f[1] == "boolean" then
      if type(v) ~= "boolean" then error(("training.generate.%s must be true or false"):format(k), 0) end
    elseif math.type(v) ~= "integer" or v < 1 then
      error(("training.generate.%s must be an integer above 0"):format(k), 0)
    end
    s[k] = v
  end
  for _, k in ipairs { "prompt", "max_new_tokens" } do
    if not s[k] then error(("training.generate.%s is required"):format(k), 0) end
  end
  return s
end

-- The error for generation on this run (nil when it can be simulated).
function M.refusal(t)
  local ok, why = pcall(M.settings, t.generate)
  if not ok then return why end
  if not t.inference then return "training.generate needs inference = true (model.generate runs under no_grad)" end
  if t.strategy ~= "none" or t.parallel or t.device_map ~= "none" then
    return "training.generate is modelled on one GPU (no strategy, mesh or device_map)"
  end
  if t.attention == "eager" then
    return "training.generate with attention = \"eager\" is not modelled (its (q, kv) score shapes in decode); use sdpa"
  end
  if t.data or t.dpo or t.float8 or t.quant ~= "none" then
    return "training.generate with training.data, dpo, float8 or bitsandbytes quantization is not modelled"
  end
  return nil
end

-- One small op of the loop on (B,)-sized or scalar tensors: its own kernel, its output kept
-- until released (frees = {}: the loop's Python names hold each tensor until rebound).
local function small(cx, name, t, inputs, shape, dtype, extra)
  local spec = { name = ("generate.%s (token %d)"):format(name, t), kind = "elementwise", inputs = inputs,
                 frees = {}, outs = { { "generate." .. name, shape, dtype } } }
  for k, v in pairs(extra or {}) do spec[k] = v end
  return nn.op(cx, spec)
end

-- The host code of one iteration of _sample's loop after the forward, token `t`, op for op
-- (generation/utils.py, stopping_criteria.py), greedy:
--   _update_model_kwargs_for_generation: position_ids grown by one,
--     torch.cat([position_ids, position_ids[:, -1:] + torch.arange(1).view(1, -1) + 1])
--   next_token_logits = outputs.logits[:, -1].to(copy=True, dtype=float32); argmax
--   (with an eos_token_id) next_tokens * unfinished + pad_token_id * (1 - unfinished)
--   input_ids = torch.cat([input_ids, next_tokens[:, None]])
--   stopping_criteria: StoppingCriteriaList's is_done = torch.full((B,), False) or-ed with
--     MaxLengthCriteria's torch.full((B,), cur_len >= max_length) (and EosTokenCriteria's
--     isin(input_ids[:, -1], eos).any(-1)); unfinished = unfinished & ~is_done
--   StopCheck: bool(unfinished.max() == 0), a host sync: the host waits for the device to
--     drain before it issues the next forward (DeferredStopCheck, which defers it, runs on mps
--     only)
-- Each name holds its tensor until rebound: the previous iteration's next_token_logits and
-- next_tokens are freed once the new ones exist. `st` carries the loop's state.
local function after_forward(cx, logits, st, s, t)
  local b, v = logits.shape[1], logits.shape[3]
  local L = st.pos.shape[2]
  local ar = small(cx, "position_ids.arange", t, {}, { 1 }, "int64")
  local a1 = small(cx, "position_ids.add", t, { st.pos, ar }, { b, 1 }, "int64")
  nn.release(cx, { ar }, "generate: torch.arange(1) dropped")
  local a2 = small(cx, "position_ids.add_one", t, { a1 }, { b, 1 }, "int64")
  nn.release(cx, { a1 }, "generate: position_ids[:, -1:] + arange dropped")
  local pos = nn.op(cx, { name = ("generate.position_ids.cat (token %d)"):format(t), kind = "copy",
                          inputs = { st.pos, a2 }, frees = {}, outs = { { "generate.position_ids", { b, L + 1 }, "int64" } } })
  nn.release(cx, { a2, st.pos }, "generate: model_kwargs position_ids rebound")
  st.pos = pos
  local nl = nn.op(cx, { name = ("generate.next_token_logits (token %d)"):format(t), kind = "cast_up", inputs = { logits },
                         frees = {}, outs = { { "next_token_logits", { b, v }, "fp32" } } })
  nn.release(cx, { st.logits32 }, "generate: next_token_logits rebound")
  st.logits32 = nl
  local tok = nn.op(cx, { name = ("generate.argmax (token %d)"):format(t), kind = "reduce_rows", inputs = { nl },
                          frees = {}, outs = { { "next_tokens", { b }, "int64" } } })
  nn.release(cx, { st.tokens }, "generate: next_tokens rebound")
  if s.eos then
    local kept = small(cx, "eos_pad.mul", t, { tok, st.unfinished }, { b }, "int64")
    local done = small(cx, "eos_pad.rsub", t, { st.unfinished }, { b }, "int64")
    local pad = small(cx, "eos_pad.mul_pad", t, { done }, { b }, "int64")
    nn.release(cx, { done }, "generate: 1 - unfinished dropped")
    local padded = small(cx, "eos_pad.add", t, { kept, pad }, { b }, "int64")
    nn.release(cx, { kept, pad, tok }, "generate: next_tokens rebound (EOS padding)")
    tok = padded
  end
  st.tokens = tok
  local ids = nn.op(cx, { name = ("generate.input_ids.cat (token %d)"):format(t), kind = "copy", inputs = { st.ids, tok },
                          frees = {}, outs = { { "input_ids", { b, s.prompt + t }, "int64" } } })
  nn.release(cx, { st.ids }, "generate: input_ids rebound")
  st.ids = ids
  -- stopping_criteria(input_ids, scores)
  local is_done = small(cx, "stopping.is_done", t, {}, { b }, "bool")
  local maxlen = small(cx, "stopping.max_length", t, {}, { b }, "bool")
  local done = small(cx, "stopping.or_max_length", t, { is_done, maxlen }, { b }, "bool")
  nn.release(cx, { is_done, maxlen }, "generate: is_done rebound")
  if s.eos then
    local hit = small(cx, "stopping.eos_isin", t, { ids }, { b, 1 }, "bool")
    local any = small(cx, "stopping.eos_any", t, { hit }, { b }, "bool")
    nn.release(cx, { hit }, "generate: isin dropped")
    local d2 = small(cx, "stopping.or_eos", t, { done, any }, { b }, "bool")
    nn.release(cx, { done, any }, "generate: is_done rebound")
    done = d2
  end
  local nd = small(cx, "unfinished.not", t, { done }, { b }, "bool")
  local unf = small(cx, "unfinished.and", t, { st.unfinished, nd }, { b }, "int64")
  nn.release(cx, { st.unfinished }, "generate: unfinished_sequences rebound")
  nn.release(cx, { nd, done }, "generate: stopping criteria's result dropped")
  st.unfinished = unf
  -- StopCheck: bool(unfinished_sequences.max() == 0) copies the flag to the host
  local mx = small(cx, "stop_check.max", t, { unf }, {}, "int64")
  local eq = small(cx, "stop_check.eq", t, { mx }, {}, "bool", { sync = true })
  nn.release(cx, { mx, eq }, "generate: bool(unfinished_sequences.max() == 0) read")
end

-- Runs the generation on `root` from input_ids `ids` (B, prompt). Returns the final input_ids.
function M.run(cx, root, ids, s)
  local r = cx.run
  local b = s.batch
  cx.gen = { cache = {} }
  r.logits_to_keep = 1
  -- before the loop: unfinished_sequences = torch.ones(B), and the (B, prompt) position_ids
  -- from the attention mask's cumsum (its ones, cumsum and masked_fill temporaries and the
  -- validity checks' two syncs, run once, are left out); the prefill takes a copy of it
  -- (prepare_inputs_for_generation slices and clones it)
  local st = { ids = ids }
  st.unfinished = nn.op(cx, { name = "generate.unfinished_sequences", kind = "elementwise", inputs = {}, frees = {},
                              outs = { { "generate.unfinished_sequences", { b }, "int64" } } })
  st.pos = nn.op(cx, { name = "generate.position_ids", kind = "elementwise", inputs = {}, frees = {},
                       outs = { { "generate.position_ids", { b, s.prompt }, "int64" } } })
  local model_pos = nn.op(cx, { name = "generate.position_ids.clone", kind = "copy", inputs = { st.pos }, frees = {},
                                outs = { { "position_ids (model input)", { b, s.prompt }, "int64" } } })
  r.position_ids = model_pos
  -- prefill
  local logits = mod.call(cx, root, ids)
  if not r.position_ids_taken then
    -- (a family whose model forward is not Llama's makes its own (1, s) position_ids)
    cx.notes = cx.notes or {}
    cx.notes[#cx.notes + 1] = "training.generate: this family's model forward builds its own (1, s) position_ids, "
      .. "so the (B, s) ones generate passes it and their per-row rotary tables are not modelled"
  end
  after_forward(cx, logits, st, s, 1)
  -- `del outputs` at the end of each iteration: the model output (its logits) goes
  nn.end_forward(cx)
  local model_ids
  for t = 1, s.max_new_tokens - 1 do
    -- prepare_inputs_for_generation: input_ids[:, -1:] and position_ids[:, -1:] cloned for
    -- the next forward (one new position); the previous step's inputs go as model_inputs is
    -- rebound
    r.seq, r.decode = 1, true
    local one = nn.op(cx, { name = ("generate.input_ids[:, -1:] (token %d)"):format(t + 1), kind = "copy",
                            inputs = { st.ids }, frees = {}, outs = { { "input_ids (next)", { b, 1 }, "int64" } } })
    local p1 = nn.op(cx, { name = ("generate.position_ids[:, -1:] (token %d)"):format(t + 1), kind = "copy",
                           inputs = { st.pos }, frees = {}, outs = { { "position_ids (next)", { b, 1 }, "int64" } } })
    nn.release(cx, { model_pos, model_ids }, "generate: model_inputs rebound")
    model_ids, model_pos = one, p1
    r.position_ids = p1
    r.inputs_embeds = nil
    logits = mod.call(cx, root, one)
    after_forward(cx, logits, st, s, t + 1)
    nn.end_forward(cx)
  end
  -- generate returns: the DynamicCache goes with its model_kwargs, and the loop's tensors
  local last = {}
  for _, c in pairs(cx.gen.cache) do last[#last + 1] = c.k; last[#last + 1] = c.v end
  table.sort(last, function(x, y) return x.id < y.id end)
  nn.release(cx, last, "generate returns: the DynamicCache")
  nn.release(cx, { model_pos, st.pos, st.logits32, st.tokens, st.unfinished, model_ids },
             "generate returns: its loop's tensors")
  r.decode, r.position_ids = nil, nil
  return st.ids
end

-- DynamicLayer.update for the layer `pre`: ke, vv the new keys and values (B, kv_heads, n, hd).
-- The prefill's cat onto the empty tensors copies them; a decode step's makes a tensor one
-- token longer and frees the old. Returns the layer's keys and values.
function M.update(cx, pre, ke, vv, vdt)
  local c = cx.gen.cache[pre]
  local kc, vc
  if not c then
    kc = nn.op(cx, { name = pre .. ".cache_keys", kind = "copy", inputs = { ke }, frees = {},
                     outs = { { pre .. ".cache.keys", ke.shape, ke.dtype } } })
    vc = nn.op(cx, { name = pre .. ".cache_values", kind = vdt == vv.dtype and "transpose" or "cast_up",
                     inputs = { vv }, frees = {}, outs = { { pre .. ".cache.values", vv.shape, vdt } } })
  else
    local L = c.k.shape[3] + ke.shape[3]
    local ks, vs = nn.copy_shape(c.k.shape), nn.copy_shape(c.v.shape)
    ks[3], vs[3] = L, L
    kc = nn.op(cx, { name = pre .. ".cache_keys.cat", kind = "copy", inputs = { c.k, ke }, frees = { c.k },
                     outs = { { pre .. ".cache.keys", ks, c.k.dtype } } })
    vc = nn.op(cx, { name = pre .. ".cache_values.cat", kind = "copy", inputs = { c.v, vv }, frees = { c.v },
                     outs = { { pre .. ".cache.values", vs, c.v.dtype } } })
  end
  -- (the cache holds a reference until the next update rebinds it, or generate returns)
  cx.gen.cache[pre] = { k = kc, v = vc }
  return kc, vc
end

return M
