-- generate.lua: model.generate(input_ids, max_new_tokens=M) with the default DynamicCache and
-- greedy decoding, as transformers 5.25 runs it (generation/utils.py _sample,
-- cache_utils.py DynamicLayer.update, models/llama/modeling_llama.py LlamaForCausalLM.forward
-- with logits_to_keep), under inference mode.
--
--   prefill  one forward of the B x prompt tokens; each layer's DynamicLayer starts empty and
--            torch.cat copies the keys and values into it (the layer's cache); the head runs on
--            the last position only (logits_to_keep=1: hidden_states[:, -1:, :], a view), so
--            the logits are (B, 1, V) in the model's dtype
--   token    next_token_logits = outputs.logits[:, -1, :].to(copy=True, dtype=float32): a
--            (B, V) fp32 copy; greedy argmax; input_ids = torch.cat([input_ids, next_tokens])
--            (B x (prompt + t) int64, a new tensor each step); the model output goes
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
}

-- The settings of training.generate, or raises the first bad key.
function M.settings(g)
  if type(g) ~= "table" then error("training.generate is a table { prompt = N, max_new_tokens = M, batch = B }", 0) end
  local s = { batch = 1 }
  for k, v in pairs(g) do
    local f = M.FIELDS[k]
    if not f then
      local names = {}
      for n in pairs(M.FIELDS) do names[#names + 1] = n end
      table.sort(names)
      error(("training.generate.%s is not a key vrsim knows (one of: %s)"):format(tostring(k), table.concat(names, ", ")), 0)
    end
    if math.type(v) ~= "integer" or v < 1 then error(("training.generate.%s must be an integer above 0"):format(k), 0) end
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

-- next_token_logits: the (B, V) fp32 copy of the last position's logits, the output's logits
-- dropped, the greedy pick (argmax), and input_ids grown by it. Returns the new input_ids.
local function next_token(cx, logits, ids, s, t)
  local b, v = logits.shape[1], logits.shape[3]
  local nl = nn.op(cx, { name = ("generate.next_token_logits (token %d)"):format(t), kind = "cast_up", inputs = { logits },
                         outs = { { "next_token_logits", { b, v }, "fp32" } } })
  local tok = nn.op(cx, { name = ("generate.argmax (token %d)"):format(t), kind = "reduce_rows", inputs = { nl },
                          outs = { { "next_tokens", { b }, "int64" } } })
  local grown = nn.op(cx, { name = ("generate.input_ids.cat (token %d)"):format(t), kind = "copy", inputs = { ids, tok },
                            outs = { { "input_ids", { b, s.prompt + t }, "int64" } } })
  return grown
end

-- Runs the generation on `root` from input_ids `ids` (B, prompt). Returns the final input_ids.
function M.run(cx, root, ids, s)
  local r = cx.run
  cx.gen = { cache = {} }
  r.logits_to_keep = 1
  -- prefill
  local logits = mod.call(cx, root, ids)
  local all = next_token(cx, logits, ids, s, 1)
  -- `del outputs` at the end of each iteration: the model output (its logits) goes
  nn.end_forward(cx)
  for t = 1, s.max_new_tokens - 1 do
    -- the next forward takes the last token of each row (cache_position, one new position)
    r.seq, r.decode = 1, true
    local one = nn.op(cx, { name = ("generate.input_ids[:, -1:] (token %d)"):format(t + 1), kind = "copy",
                            inputs = { all }, frees = {}, outs = { { "input_ids (next)", { s.batch, 1 }, "int64" } } })
    r.inputs_embeds = nil
    logits = mod.call(cx, root, one)
    all = next_token(cx, logits, all, s, t + 1)
    nn.end_forward(cx)
  end
  -- generate returns: the DynamicCache goes with its model_kwargs
  local last = {}
  for _, c in pairs(cx.gen.cache) do last[#last + 1] = c.k; last[#last + 1] = c.v end
  table.sort(last, function(a, b) return a.id < b.id end)
  nn.release(cx, last, "generate returns: the DynamicCache")
  r.decode = nil
  return all
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
