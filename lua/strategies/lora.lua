-- lora.lua: peft's LoRA as inject_adapter applies it (peft 0.21, tuners/tuners_utils.py and
-- tuners/lora/layer.py): after the base model is built, every Linear whose name matches a
-- target gets lora_A (r, in) and lora_B (out, r), and its forward becomes LoraLayer.forward:
-- base result, input cast to the adapter dtype, dropout, A, B, scaling, add, cast back.
--
-- Targets are matched as peft matches target_modules (check_target_module_exists): a name equals
-- the module's full path or ends it after a dot ("q_proj", "to_out.0", "ff.net.2" match
-- "...self_attn.q_proj", "...attn1.to_out.0", "...transformer_blocks.0.ff.net.2");
-- "all-linear" is every Linear but the output layer. A target that matches no module is an error,
-- as in peft ("Target modules ... not found in the base model").
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

local promote = nn.promote

-- LoraLayer.forward around the module's base forward (arguments after x, such as a block's
-- view of its input, go to the base layer as they came).
local function lora_forward(base)
  return function(cx, m, x, ...)
    -- adapters disabled (peft's disable_adapter / TRL's use_adapter(model, None)): the base layer alone
    if cx.adapters_off then return base(cx, m, x, ...) end
    local ad, lora = m.lora, m.lora.cfg
    local name = m.opname
    local result = base(cx, m, x, ...)
    local A, B = mod.weight(cx, ad.A), mod.weight(cx, ad.B)
    -- `x = self._cast_input_dtype(x, lora_A.weight.dtype)`: the cast input is forward's local `x`
    -- until it returns (fulltrace_held-lora-13b-l4-b8-ckpt: freed after the output cast)
    local xa = nn.to(cx, x, A.dtype, name .. ".lora_input_cast")
    local xd = xa
    if lora.dropout > 0 then
      -- native_dropout makes its bool mask, then the output; backward needs only the mask
      local _, out = nn.op(cx, { name = name .. ".lora_dropout", inputs = { xa },
                                 outs = { { name .. ".dropout_mask", xa.shape, "bool", no_grad = true },
                                          { name .. ".lora_dropout", xa.shape, xa.dtype } },
                                 save_outs = { 1 }, frees = {}, flops = nn.numel(xa.shape), host = "dropout" })
      xd = out
    end
    -- (the adapters' skinny GEMMs are priced by the profile's table of them: nn.linear's opts.lora)
    local a = nn.linear(cx, name .. ".lora_A", xd, A, nil, { lora = { lora.r, "A" } })
    local b = nn.linear(cx, name .. ".lora_B", a, B, nil, { lora = { lora.r, "B" } })
    local scaled = nn.op(cx, { name = name .. ".lora_scale", inputs = { b },
                               outs = { { name .. ".lora_scale", b.shape, b.dtype } },
                               flops = nn.numel(b.shape), dtype = b.dtype, host = "mul_scalar" })
    -- `result = result + lora_B(lora_A(dropout(x))) * scaling`: the product is a temporary
    -- dropped as the add returns, then the old `result` with the rebinding (the allocator
    -- sees the two frees in that order: fulltrace_gen-llama32-1b-lora-all-r16-b4-ckpt-trace)
    -- (its backward casts the fp32 gradient for a bf16 base output: nn.add_grads)
    local sum_dt = promote(result.dtype, scaled.dtype)
    local grads, moved = nn.add_grads(sum_dt, result, scaled)
    local sum = nn.op(cx, { name = name .. ".lora_add", inputs = { result, scaled },
                            outs = { { name .. ".lora_sum", result.shape, sum_dt } },
                            grads = grads, bwd_bytes = moved, frees = { scaled, result }, host = "add" })
    local y = nn.to(cx, sum, result.dtype, name .. ".lora_out_cast")
    if xd ~= xa then nn.release(cx, { xa }, name .. ": lora forward returns") end
    -- the caller holds the module's input until the call returns (the argument of
    -- `self.o_proj(attn_output)`, `self.down_proj(act * up)`), past its last use here
    nn.release(cx, { x }, name .. ": returns to the caller")
    return y
  end
end

-- The keys of training.lora, as `vrsim fields` lists them and the planner checks them (a key not
-- here is an error): peft's LoraConfig fields that vrsim models. Defaults in brackets are the
-- family's where left out (settings' `defaults`).
M.FIELDS = {
  r = { "integer", nil, "adapter rank, LoraConfig(r) [8; SDXL 4]" },
  alpha = { "integer", nil, "lora_alpha: scales the adapter, no memory effect [32; SDXL r]" },
  dropout = { "number", nil, "lora_dropout in [0, 1): above 0 a dropout mask is kept per adapter [0.05; SDXL 0]" },
  targets = { "list", nil, "target_modules: Linear names as peft matches them, or \"all-linear\" [q_proj, v_proj; SDXL to_q, to_k, to_v, to_out.0]" },
  dtype = { "string", nil, "adapter dtype [fp32; SDXL the UNet's, fp32 under fp16]" },
}
M.CHOICES = { dtype = { fp32 = 1, bf16 = 1, fp16 = 1 } }

-- Whether a run's training settings (cfg.training) ask for LoRA adapters: a lora_* precision or a
-- training.lora table (the model builders and the profile's adapter GEMM table ask the same).
function M.wanted(t)
  return (tostring(t.precision):match("^lora") or t.lora) and true or false
end

-- The LoRA settings of a run: training.lora with peft's LoraConfig defaults where left out
-- (r 8, lora_alpha 8, lora_dropout 0), or the family's defaults (`defaults`). Legacy short
-- names ("q", "v") name the projections of the same letter.
function M.settings(lc, defaults)
  lc = lc or {}
  local d = defaults or {}
  local s = { r = lc.r or d.r or 8, alpha = lc.alpha or d.alpha or lc.r or 8,
              dropout = lc.dropout or d.dropout or 0.0, dtype = lc.dtype or d.dtype or "fp32" }
  local targets = lc.targets or d.targets
  if targets == "all-linear" or (type(targets) == "table" and targets[1] == "all-linear") then
    s.all_linear = true
    targets = {}
  end
  if type(targets) ~= "table" then error("training.lora.targets must be a list of module names or \"all-linear\"", 0) end
  s.targets = {}
  for i, t in ipairs(targets) do
    if type(t) ~= "string" then error("training.lora.targets must name modules", 0) end
    s.targets[i] = (d.aliases and d.aliases[t]) or t
  end
  for _, k in ipairs { "r", "alpha" } do
    local v = s[k]
    if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) or v > 65536 then
      error(("training.lora.%s must be a positive integer (got %s)"):format(k, tostring(v)), 0)
    end
  end
  if type(s.dropout) ~= "number" or s.dropout < 0 or s.dropout >= 1 then
    error("training.lora.dropout must be in [0, 1)", 0)
  end
  if not M.CHOICES.dtype[s.dtype] then
    error(("training.lora.dtype: unknown dtype %s (one of: bf16, fp16, fp32)"):format(tostring(s.dtype)), 0)
  end
  return s
end

-- Marks every targeted Linear of the tree (`output` is the output layer's path, which
-- all-linear leaves out). Returns the targeted modules in module order.
function M.apply(root, s, output)
  local hit, used = {}, {}
  mod.walk(root, function(m)
    if m.cls ~= "Linear" and m.cls ~= "Linear4bit" and m.cls ~= "Linear8bitLt" then return end
    local match = s.all_linear and m.path ~= output
    for _, t in ipairs(s.targets) do
      if t == m.path or m.path:sub(-#t - 1) == "." .. t then match = true; used[t] = true end
    end
    if match then
      m.lora = { cfg = s }
      m.forward = lora_forward(m.forward)
      hit[#hit + 1] = m
    end
  end)
  for _, t in ipairs(s.targets) do
    if not used[t] then
      local names, seen = {}, {}
      mod.walk(root, function(m)
        if m.cls == "Linear" or m.cls == "Linear4bit" or m.cls == "Linear8bitLt" then
          local last = m.path:match("([^.]+)$")
          if not tonumber(last) and not seen[last] then seen[last] = true; names[#names + 1] = last end
        end
      end)
      table.sort(names)
      -- a module of that name that is no Linear (a mixture-of-experts router or experts block):
      -- peft's target_modules takes Linear layers; their parameters need target_parameters
      local other
      mod.walk(root, function(m)
        if not other and m.path:match("([^.]+)$") == t then other = m.cls end
      end)
      if other then
        error(("training.lora.targets: '%s' is a %s, not a Linear: LoRA on its parameters (peft's "
               .. "target_parameters) is not modelled (Linear names: %s, or \"all-linear\")")
              :format(t, other, table.concat(names, ", ")), 0)
      end
      error(("training.lora.targets: no Linear module named '%s' in this model (its Linear names: %s, or \"all-linear\")")
            :format(t, table.concat(names, ", ")), 0)
    end
  end
  return hit
end

-- Makes the adapters of the targeted modules (after the base parameters, as get_peft_model runs
-- after the model is built). prefix: the peft wrapper's ("base_model.model.").
function M.materialize(cx, hit, prefix)
  for _, m in ipairs(hit) do
    local s = m.lora.cfg
    cx.layer = m.layer_of or -1
    local base = prefix .. m.path .. "."
    m.lora.A = nn.param(cx, base .. "lora_A.default.weight", { s.r, m.in_features }, s.dtype, true)
    m.lora.B = nn.param(cx, base .. "lora_B.default.weight", { m.out_features, s.r }, s.dtype, true)
    m.lora.A.adapter, m.lora.B.adapter = true, true
    m.extra_params = { { key = "lora_A", param = m.lora.A }, { key = "lora_B", param = m.lora.B } }
  end
  cx.layer = -1
end

return M
