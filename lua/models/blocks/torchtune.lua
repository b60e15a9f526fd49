-- blocks/torchtune.lua: what torchtune's own decoder (torchtune 0.6.1, model.code = "torchtune")
-- does differently from transformers' Llama and Qwen2 on the same weights: its RMSNorm, its rotary
-- embedding and the RoPE cache that embedding keeps. The attention's expansion of grouped keys
-- and values is model.repeat_kv's (models/llama.lua), and the rest of the layer (projections,
-- SDPA, the MLP, the residual adds) runs the same ops in the same order.
-- Checked op by op against the oracle's capture of torchtune's llama3() on fake CUDA tensors
-- (validation/oracle/specs/llama3_8b_l2_bf16_torchtune.json, qwen25_05b_l2_bf16_torchtune.json).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local rmsnorm = require "models.blocks.rmsnorm"

local T = {}

-- The families whose torchtune builders use these modules, by their rotary embedding: pairs,
-- RotaryPositionalEmbeddings (or Llama3ScaledRoPE, the same computation on scaled frequencies;
-- torchtune/models/llama2, llama3, llama3_1, llama3_2, mistral _component_builders.py); halves,
-- Qwen2RotaryPositionalEmbeddings (models/qwen2, qwen2_5). Each with torchtune's RMSNorm.
T.families = { llama = "pairs", mistral = "pairs", qwen2 = "halves" }

-- The release (training.torchtune, "0.4.0" to "0.6.1"): the minor version, or nil and why not.
function T.release(v)
  local major, minor, patch = tostring(v):match("^(%d+)%.(%d+)%.(%d+)$")
  major, minor, patch = tonumber(major), tonumber(minor), tonumber(patch)
  if major ~= 0 or not minor or minor < 4 or minor > 6 or (minor == 6 and patch > 1) then
    return nil, ("training.torchtune = %q: the releases modelled are 0.4.0 to 0.6.1"):format(tostring(v))
  end
  return minor
end

-- torchtune 0.4's RMSNorm.forward (torchtune/modules/rms_norm.py before #2054):
--   x_fp32 = x.float(); x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True)
--   + self.eps)).type_as(x); return x_normed * self.scale
-- LlamaRMSNorm's ops up to the bf16 normalized input (models/llama.lua), whose temporaries die
-- with the expression; then `x_normed * scale`, in the input's dtype.
local function python_forward(cx, m, x)
  return require("models.llama").rmsnorm_forward(cx, m, x)
end

-- torchtune.modules.RMSNorm in place of LlamaRMSNorm: from 0.5.0 F.rms_norm(x.float(), ...,
-- weight=scale).to(x.dtype), ATen's composite (blocks/rmsnorm.lua composite = true); before,
-- its Python forward (python_forward)
function T.norms(root, minor)
  mod.walk(root, function(m)
    if m.cls and m.cls:match("RMSNorm$") then
      m.cls = "RMSNorm"
      if minor >= 5 then m.forward, m.composite = rmsnorm.forward, true
      else m.forward, m.tt_python = python_forward, true end
    end
  end)
end

-- The order torchtune's builders construct the model in, which is the order its parameters are
-- allocated in (the caching allocator's first segments follow it): the RoPE module first
-- (T.rope_cache), every decoder layer, then tok_embeddings, the output projection and the final
-- norm (`TransformerDecoder(tok_embeddings=..., layers=..., norm=RMSNorm(...), output=...)` after
-- the layers' loop). transformers' order, the model's registration order, stays the parameters'
-- order everywhere else (model.parameters(): the optimizer's). One build op a module makes its
-- parameters, in that order.
local RANK = { embed_tokens = 2, lm_head = 3, norm = 4 }
function T.construct(cx, root)
  local list = {}
  mod.walk(root, function(m)
    local ids = {}
    for _, d in ipairs(m.decls) do
      local p = m.p[d.key]
      if p and p.id and not (m.tied and m.tied[d.key]) then ids[#ids + 1] = p.id end
    end
    if #ids > 0 then
      local last = m.path:match("([%w_]+)$") or ""
      local rank = m.path:match("%.layers%.") and 1 or RANK[last] or 0
      list[#list + 1] = { rank = rank, n = #list, path = m.path, ids = ids }
    end
  end)
  table.sort(list, function(a, b)
    if a.rank ~= b.rank then return a.rank < b.rank end
    return a.n < b.n
  end)
  for _, e in ipairs(list) do
    cx.G:op { name = "construct " .. e.path, kind = "none", phase = "build", inputs = {}, outputs = e.ids,
              frees = {} }
  end
end

-- RotaryPositionalEmbeddings.__init__ -> rope_init() -> build_rope_cache(max_seq_len), made where
-- the model is built (its device), in fp32 whatever the default dtype: theta = 1 / base **
-- (arange(0, dim, 2)[:dim // 2].float() / dim) (an int64 arange, its fp32 copy, the quotient, the
-- power, the reciprocal; theta the buffer), then seq_idx = arange(max_seq_len) (fp32),
-- idx_theta = einsum("i, j -> ij") (an outer product), and the cache torch.stack([cos, sin], -1):
-- (max_seq_len, dim // 2, 2) fp32, a buffer (persistent=False) of the one module every layer
-- shares. Returns the cache.
-- Qwen2RotaryPositionalEmbeddings builds its cache as `torch.cat([freqs.cos(), freqs.sin()], -1)`
-- of freqs = cat([idx_theta, idx_theta], -1): (max_seq_len, 2 x head_dim) fp32 (style "halves").
function T.rope_cache(cx, hd, max_seq, style)
  local function made(name, shape, dtype, keep)
    local numel = nn.numel(shape)
    local id = cx.G:tensor { name = "rope." .. name, bytes = nn.bytes(shape, dtype), numel = numel, dtype = dtype,
                             cat = "temp", persistent = keep or nil }
    cx.G:op { name = "rope." .. name, kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
    return id
  end
  local function free(ids, why)
    cx.G:op { name = "rope: " .. why, kind = "none", phase = "build", inputs = {}, outputs = {}, frees = ids }
  end
  local half = hd // 2
  local ar = made("arange", { half }, "int64")
  local fl = made("arange_float", { half }, "fp32")
  local q = made("div", { half }, "fp32")
  free({ ar, fl }, "the exponent made")
  local pw = made("pow", { half }, "fp32")
  free({ q }, "the power made")
  local rc = made("reciprocal", { half }, "fp32")
  free({ pw }, "the reciprocal made")
  made("theta", { half }, "fp32", true)
  free({ rc }, "theta registered")
  local seq = made("seq_idx", { max_seq }, "fp32")
  local idx = made("idx_theta", { max_seq, half }, "fp32")
  if style == "halves" then
    local freqs = made("freqs", { max_seq, hd }, "fp32")
    local cos = made("cos", { max_seq, hd }, "fp32")
    local sin = made("sin", { max_seq, hd }, "fp32")
    local cache = made("cache", { max_seq, 2 * hd }, "fp32", true)
    free({ seq, idx, freqs, cos, sin }, "build_rope_cache returns")
    return { id = cache, shape = { max_seq, 2 * hd }, dtype = "fp32", rg = false, name = "rope.cache", style = style }
  end
  local cos = made("cos", { max_seq, half }, "fp32")
  local sin = made("sin", { max_seq, half }, "fp32")
  local cache = made("cache", { max_seq, half, 2 }, "fp32", true)
  free({ seq, idx, cos, sin }, "build_rope_cache returns")
  return { id = cache, shape = { max_seq, half, 2 }, dtype = "fp32", rg = false, name = "rope.cache", style = style }
end

-- A packed batch's `self.cache[input_pos]`: the (b, s, ...) fp32 rows of the cache its
-- positions index, gathered for one call (the caller drops them as the call returns).
local function cache_rows(cx, name, shape)
  return nn.op(cx, { name = name .. ".cache_index", kind = "copy", inputs = {},
                     outs = { { name .. ".rope_cache", shape, "fp32", no_grad = true } } })
end

-- Qwen2RotaryPositionalEmbeddings.forward's tables for x (b, h, s, d): `rope_cache[..., :d]
-- .to(x.dtype)` and `[..., d:]`, each a copy of the s rows in x's dtype (a packed batch's
-- input_pos gathers its (b, s, 2d) fp32 rows first). The rotation is transformers' own ops on
-- them (rotate_half, models/llama.lua); the caller drops the tables as the call returns.
-- Returns cos, sin and the gathered rows (or nil).
function T.halves_tables(cx, name, x, packed)
  local b, s, d = x.shape[1], x.shape[#x.shape - 1], x.shape[#x.shape]
  local rows, gathered = 1, nil
  if packed then rows, gathered = b, cache_rows(cx, name, { b, s, 2 * d }) end
  local function table_(what)
    return nn.op(cx, { name = name .. "." .. what, kind = "cast_down", inputs = gathered and { gathered } or {},
                       frees = {}, outs = { { name .. "." .. what, { rows, 1, s, d }, x.dtype, no_grad = true } } })
  end
  local cos = table_("cos")
  local sin = table_("sin")
  return cos, sin, gathered
end

-- RotaryPositionalEmbeddings.forward on x (b, s, heads, d) (the caller's view; vrsim's tensor
-- is in heads-first order, the same elements): xshaped = x.float() viewed as (..., d/2, 2)
-- pairs; x_out = stack([x0 * c0 - x1 * s1, x1 * c0 + x0 * s1], -1); flatten; type_as(x). Each
-- product reads a select of the fp32 copy and saves its slice of the cache (a buffer: nothing
-- new); its backward is a half-size product, then SelectBackward writes it into a zeroed tensor
-- of the copy's full shape, the four summed into the copy's gradient. The difference negates
-- its second gradient (a new half-size tensor); the stack's backward is views of the fp32
-- gradient type_as made. The fp32 copy and the stacked result die as the function returns.
-- packed: a (b, s) input_pos (a packed batch's positions): `self.cache[input_pos]` gathers a
-- (b, s, d/2, 2) fp32 table for the call.
function T.rope(cx, name, x, cache, packed)
  local half = nn.copy_shape(x.shape)
  half[#half] = half[#half] // 2
  local b = x.shape[1]
  local s = x.shape[#x.shape - 1]
  local d = x.shape[#x.shape]
  local tab = packed and cache_rows(cx, name, { b, s, d // 2, 2 }) or cache
  local xf = nn.to(cx, x, "fp32", name .. ".float")
  local full32 = nn.bytes(x.shape, "fp32")
  local function mul(what)
    return nn.op(cx, { name = name .. "." .. what, kind = "broadcast", inputs = { xf, tab },
                       outs = { { name .. "." .. what, half, "fp32" } }, saves = { tab },
                       grads = { { bytes = full32, dtype = "fp32" }, "none" },
                       bwd_workspace = { nn.bytes(half, "fp32") }, bwd_workspace_first = true,
                       flops = nn.numel(half), bytes = 3 * nn.bytes(half, "fp32") })
  end
  local t1 = mul("x0_cos")
  local t2 = mul("x1_sin")
  local first = nn.op(cx, { name = name .. ".sub", inputs = { t1, t2 }, outs = { { name .. ".first", half, "fp32" } },
                            grads = { { pass = 1 }, "new" }, flops = nn.numel(half) })
  local t3 = mul("x1_cos")
  local t4 = mul("x0_sin")
  local second = nn.op(cx, { name = name .. ".add", inputs = { t3, t4 }, outs = { { name .. ".second", half, "fp32" } },
                             grads = { { pass = 1 }, { pass = 1 } }, flops = nn.numel(half) })
  -- torch.stack along the new last dim: each input copied into its stride-2 slice of the output,
  -- a direct copy kernel apiece (not the batched cat kernel: torch.profiler on an H100, gen18's
  -- 8B cut, validation/results/profile_gen19_h100.jsonl: 2 copies a stack, 16 for 8 stacks)
  local st = nn.op(cx, { name = name .. ".stack", kind = "strided", kernels = 2, inputs = { first, second },
                         outs = { { name .. ".stacked", x.shape, "fp32" } }, grads = { { pass = 1 }, { pass = 1 } } })
  local out = nn.op(cx, { name = name .. ".type_as", kind = "cast_down", inputs = { st },
                          outs = { { name, x.shape, x.dtype } }, grads = { { dtype = "fp32" } }, frees = {},
                          bytes = full32 + nn.bytes(x.shape, x.dtype) })
  nn.release(cx, { xf, st, packed and tab or nil }, name .. ": returns")
  return out
end

return T
