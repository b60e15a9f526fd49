-- lora.lua: peft's LoRA as inject_adapter applies it (peft 0.21, tuners/tuners_utils.py and
-- tuners/lora/layer.py): after the base model is built, every Linear whose name matches a
-- target gets lora_A (r, in) and lora_B (out, r), and its forward becomes LoraLayer.forward:
-- base result, input cast to the adapter dtype, dropout, A, B, scaling, add, cast back.
--
-- Targets are matched as peft matches target_modules (check_target_module_exists): a name equals
-- the module's full path or ends it after a dot ("q_proj", "to_out.0", "ff.net.2" match
-- "...self_attn.q_proj", "...attn1.to_out.0", "...transformer_blocks.0.ff.net.2");
-- "all-linear" is every Linear but the output layer. A target that matches no module is an error,
-- as in peft ("Target modules ... not found in the base model"). On a transformers 5
-- mixture-of-experts model peft first turns the MLP names into target_parameters
-- (M.convert_moe_targets), whose wrappers M.param_proxies and M.param_weight model.
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
    if m.cls == "Linear4bit" and not cx.compiling then
      -- peft's lora.bnb Linear4bit.forward: `result = result.clone()` ("for 4bit, we need to
      -- defensively clone here"), the base output dropped with the rebinding (eager only: in a
      -- compiled layer Inductor fuses the copy into the add below). Not Linear8bitLt's forward.
      result = nn.op(cx, { name = name .. ".clone", kind = "copy", inputs = { result },
                           outs = { { name .. ".clone", result.shape, result.dtype } }, grads = { { pass = 1 } } })
    end
    local A, B = mod.weight(cx, ad.A), mod.weight(cx, ad.B)
    -- `x = self._cast_input_dtype(x, lora_A.weight.dtype)`: the cast input is forward's local `x`
    -- until it returns (fulltrace_held-lora-13b-l4-b8-ckpt: freed after the output cast)
    -- (peft's lora.bnb forward casts only with autocast off: `requires_conversion = not
    -- torch.is_autocast_enabled()`; under autocast lora_A's F.linear casts its own arguments)
    local bnb = m.cls == "Linear4bit" or m.cls == "Linear8bitLt"
    local xa = (bnb and cx.autocast) and x or nn.to(cx, x, A.dtype, name .. ".lora_input_cast")
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
    -- at lora_dropout 0 peft's dropout is nn.Identity, so lora_A reads the local `x` itself,
    -- which outlives the GEMM (fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr: the fp32 cast freed
    -- after the output cast, under checkpointing's first forward where nothing saves it)
    local a = nn.linear(cx, name .. ".lora_A", xd, A, nil, { lora = { lora.r, "A" }, keep_input = xd == xa })
    local b = nn.linear(cx, name .. ".lora_B", a, B, nil, { lora = { lora.r, "B" } })
    local scaled = nn.op(cx, { name = name .. ".lora_scale", inputs = { b },
                               outs = { { name .. ".lora_scale", b.shape, b.dtype } },
                               flops = nn.numel(b.shape), dtype = b.dtype, host = "mul_scalar" })
    -- `result = result + lora_B(lora_A(dropout(x))) * scaling`: the product is a temporary
    -- dropped as the add returns, then the old `result` with the rebinding (the allocator
    -- sees the two frees in that order: fulltrace_gen-llama32-1b-lora-all-r16-b4-ckpt-trace)
    -- (its backward casts the fp32 gradient for a bf16 base output: nn.add_grads)
    local y
    if (m.cls == "Linear4bit" or m.cls == "Linear8bitLt") and not cx.autocast then
      -- peft's lora.bnb forward (requires_conversion, autocast off): `output = output.to(
      -- expected_dtype)` before `result = result + output`: the product is cast to the base
      -- output's dtype (the fp32 product dropped with the rebinding) and the sum made in it; the
      -- old `result` goes with the rebinding, `output` as forward returns
      local cast = nn.to(cx, scaled, result.dtype, name .. ".lora_out_cast")
      local grads, moved = nn.add_grads(result.dtype, result, cast)
      y = nn.op(cx, { name = name .. ".lora_add", inputs = { result, cast },
                      outs = { { name .. ".lora_sum", result.shape, result.dtype } },
                      grads = grads, bwd_bytes = moved, frees = { result, cast }, host = "add" })
    else
      local sum_dt = promote(result.dtype, scaled.dtype)
      local grads, moved = nn.add_grads(sum_dt, result, scaled)
      -- a bf16 base output plus the fp32 product: contiguous operands of two dtypes run
      -- TensorIterator's unrolled kernel with LoadWithCast (Loops.cuh: vectorized only where
      -- every operand has the common dtype), not the contiguous class's vectorized one (the
      -- H200's Qwen3 4 x 4096 step: CUDAFunctor_add<float> with LoadWithCast<2>, 192 launches,
      -- 22.6 ms for 56 GB, 2.5 TB/s; results/kernels_gen11_qwen3_b4_h200.jsonl): class add_mixed,
      -- measured as this very add (measure_torch_ops.py --only add_mixed: 2.0-2.3 TB/s on an H100
      -- SXM), or, on a card without it, the class of the same kernel's cast (cast_up, "bf16 to
      -- fp32": sim/cost.c class_curve)
      -- (its backward, the incoming gradient passed and cast, keeps the elementwise class)
      local add_kind = result.dtype ~= scaled.dtype and not cx.compiling and "add_mixed" or nil
      local sum = nn.op(cx, { name = name .. ".lora_add", kind = add_kind, bwd_kind = add_kind and "elementwise",
                              inputs = { result, scaled },
                              outs = { { name .. ".lora_sum", result.shape, sum_dt } },
                              grads = grads, bwd_bytes = moved, frees = { scaled, result }, host = "add" })
      y = nn.to(cx, sum, result.dtype, name .. ".lora_out_cast")
    end
    if xa ~= x then nn.release(cx, { xa }, name .. ": lora forward returns") end
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
  target_parameters = { "list", nil, "target_parameters: a mixture-of-experts block's 3-D expert weights as peft matches them (\"mlp.experts.gate_up_proj\", \"down_proj\"), wrapped by lora.ParamWrapper; needs dropout = 0 [none]" },
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
  local tp = lc.target_parameters
  s.target_parameters = {}
  if tp ~= nil then
    if type(tp) ~= "table" then error("training.lora.target_parameters must be a list of parameter names", 0) end
    for i, t in ipairs(tp) do
      if type(t) ~= "string" or t == "" then error("training.lora.target_parameters must name parameters", 0) end
      s.target_parameters[i] = t
    end
  end
  M.check_wrapped(s)
  return s
end

-- ParamWrapper.__init__: "lora.ParamWrapper does not work with lora_dropout != 0" (the input
-- cannot be factored out of the folded weight, so dropout has nothing to act on).
function M.check_wrapped(s, why)
  if #s.target_parameters > 0 and s.dropout > 0 then
    error(("training.lora.target_parameters%s: peft's lora.ParamWrapper does not work with lora_dropout != 0 "
           .. "(training.lora.dropout is %s): set dropout = 0"):format(why or "", tostring(s.dropout)), 0)
  end
end

-- peft 0.21 on transformers 5 (peft/utils/transformers_weight_conversion.py,
-- _convert_peft_config_moe, run by inject_adapter for every model type transformers has a
-- weight conversion for): the MLP names of a v4 mixture-of-experts model in target_modules
-- become target_parameters on the fused v5 experts, and leave target_modules (so a dense MLP
-- of the same names is not adapted either); the two halves of gate_up_proj take twice the rank
-- and twice lora_alpha (rank_pattern, alpha_pattern); the router's name becomes "gate.weight", a
-- 2-D ParamWrapper (not modelled). "all-linear" is resolved first to the attention's Linears
-- plus every v4 MLP name, the router's included. Keyed by vrsim's family (model_type).
M.MOE_RENAMED = {
  mixtral = { names = { gate = "gate.weight", w1 = "gate_up_proj", w3 = "gate_up_proj", w2 = "down_proj" },
              fused = { "w1", "w3" } },
  qwen3_moe = { names = { gate = "gate.weight", gate_proj = "gate_up_proj", up_proj = "gate_up_proj",
                          down_proj = "down_proj" },
                fused = { "gate_proj", "up_proj" } },
}
-- DeepSeek V2/V3 by the qwen2_moe pattern, as Qwen3-MoE: the MLP names leave the dense layers'
-- and shared experts' Linears too (their check_lora refuses the router's name and "all-linear")
M.MOE_RENAMED.deepseek_v2 = M.MOE_RENAMED.qwen3_moe
M.MOE_RENAMED.deepseek_v3 = M.MOE_RENAMED.qwen3_moe

function M.convert_moe_targets(s, model_type, root, output)
  local conv = M.MOE_RENAMED[model_type]
  if not conv then return end
  local why = (" (peft 0.21 turns %s's MLP names into target_parameters on the experts)"):format(model_type)
  local targets = s.targets
  if s.all_linear then
    -- _resolve_string_target_modules: the leaf names of every Linear but the output layer (the
    -- experts and the router are no Linear here) plus every v4 MLP name; the list stands for
    -- "all-linear"
    s.all_linear = false
    local seen = {}
    targets = {}
    mod.walk(root, function(m)
      local last = m.path:match("([^.]+)$")
      local linear = m.cls == "Linear" or m.cls == "Linear4bit" or m.cls == "Linear8bitLt" or m.cls == "FrozenNF4Linear"
      if linear and m.path ~= output and not seen[last] then seen[last] = true; targets[#targets + 1] = last end
    end)
    for name in pairs(conv.names) do
      if not seen[name] then seen[name] = true; targets[#targets + 1] = name end
    end
    table.sort(targets)
  end
  local keep, seen, added = {}, {}, {}
  for _, t in ipairs(targets) do
    local old
    for name in pairs(conv.names) do
      if t == name or t:sub(-#name - 1) == "." .. name then old = name end
    end
    if not old then
      keep[#keep + 1] = t
    else
      seen[old] = true
      local new = conv.names[old]
      if not added[new] then added[new] = true; added[#added + 1] = new end
    end
  end
  local n = (seen[conv.fused[1]] and 1 or 0) + (seen[conv.fused[2]] and 1 or 0)
  if n == 1 then
    local has, miss = conv.fused[1], conv.fused[2]
    if seen[miss] then has, miss = miss, has end
    error(("training.lora.targets: peft 0.21 cannot convert '%s' without '%s' on %s: they are fused into "
           .. "gate_up_proj"):format(has, miss, model_type), 0)
  end
  if #added == 0 then return end
  s.targets = keep
  s.param_scale = s.param_scale or {}
  for _, new in ipairs(added) do
    s.target_parameters[#s.target_parameters + 1] = new
    if new == "gate_up_proj" then s.param_scale[new] = 2 end
  end
  s.converted = ("training.lora.targets: peft 0.21 turns %s's MLP names into target_parameters on the experts%s "
                 .. "(%s; gate_up_proj at twice r and lora_alpha)")
                :format(model_type, added["gate.weight"] and " and the router" or "", table.concat(added, ", "))
  M.check_wrapped(s, why)
end

-- Marks every targeted Linear of the tree (`output` is the output layer's path, which
-- all-linear leaves out). Returns the targeted modules in module order.
function M.apply(root, s, output)
  local hit, used = {}, {}
  mod.walk(root, function(m)
    if m.cls ~= "Linear" and m.cls ~= "Linear4bit" and m.cls ~= "Linear8bitLt" and m.cls ~= "FrozenNF4Linear" then return end
    local match = s.all_linear and m.path ~= output
    for _, t in ipairs(s.targets) do
      if t == m.path or m.path:sub(-#t - 1) == "." .. t then match = true; used[t] = true end
    end
    if match then
      m.lora = { cfg = s, base = m.forward }
      m.forward = lora_forward(m.forward)
      hit[#hit + 1] = m
    end
  end)
  for _, t in ipairs(s.targets) do
    if not used[t] then
      local names, seen = {}, {}
      mod.walk(root, function(m)
        if m.cls == "Linear" or m.cls == "Linear4bit" or m.cls == "Linear8bitLt" or m.cls == "FrozenNF4Linear" then
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
        error(("training.lora.targets: '%s' is a %s, not a Linear: peft's target_modules takes Linear "
               .. "layers; its parameters are reached by training.lora.target_parameters (e.g. "
               .. "\"mlp.experts.gate_up_proj\") (Linear names: %s, or \"all-linear\")")
              :format(t, other, table.concat(names, ", ")), 0)
      end
      error(("training.lora.targets: no Linear module named '%s' in this model (its Linear names: %s, or \"all-linear\")")
            :format(t, table.concat(names, ", ")), 0)
    end
  end
  M.apply_parameters(root, s)
  -- the adapters are made in module order (peft injects module by module), the wrapped
  -- parameters' beside their block's Linears
  hit.order = {}
  mod.walk(root, function(m)
    if m.lora or m.lora_params then hit.order[#hit.order + 1] = m end
  end)
  return hit
end

-- peft's target_parameters (BaseTuner._inject_parameters): a parameter whose
-- "<module path>.<name>" equals a target or ends with "." .. target is wrapped by a
-- lora.ParamWrapper; the parameters of one module are wrapped in their declaration order, each
-- wrapper around the one before (the last-declared outermost). Only the 3-D experts of the
-- grouped_mm experts forward (models/moe.lua, gpt_oss.lua, deepseek_v3.lua mark them
-- `param_lora`) and the 2-D router weight moe.lua marks are modelled;
-- a target that matches no parameter is an error, as in peft.
function M.apply_parameters(root, s)
  if #s.target_parameters == 0 then return end
  local used = {}
  mod.walk(root, function(m)
    for _, d in ipairs(m.decls) do
      local key = (m.path == "" and "" or m.path .. ".") .. d.key
      local hit
      for _, t in ipairs(s.target_parameters) do
        if key == t or key:sub(-#t - 1) == "." .. t then used[t] = true; hit = hit or t end
      end
      -- (a parameter two targets name is wrapped once)
      local t = hit
      if t then
          if not (m.param_lora and m.param_lora[d.key]) then
            error(("training.lora.target_parameters: '%s' matches %s (%s, shape %s): peft's lora.ParamWrapper "
                   .. "is modelled on the 3-D experts of the grouped_mm experts forward (gate_up_proj, "
                   .. "down_proj: Mixtral, Qwen3-MoE, GPT-OSS, DeepSeek V2/V3's routed experts) and the "
                   .. "router's weight (gate.weight) of Mixtral and Qwen3-MoE only")
                  :format(t, key, m.cls, table.concat(d.shape, " x ")), 0)
          end
          m.lora_params = m.lora_params or {}
          -- (rank_pattern: a converted gate_up_proj takes twice r)
          local k = s.param_scale and s.param_scale[d.key] or 1
          m.lora_params[#m.lora_params + 1] = { key = d.key, shape = d.shape, cfg = s, r = k * s.r }
      end
    end
  end)
  for _, t in ipairs(s.target_parameters) do
    if not used[t] then
      -- (peft wraps nothing for it, and warns only when no target matched at all)
      error(("training.lora.target_parameters: '%s' matches no parameter of this model; the experts' are e.g. "
             .. "\"mlp.experts.gate_up_proj\", \"mlp.experts.down_proj\", the router's \"mlp.gate.weight\"")
            :format(t), 0)
    end
  end
end

-- Makes the adapters of the targeted modules (after the base parameters, as get_peft_model runs
-- after the model is built). prefix: the peft wrapper's ("base_model.model.").
function M.materialize(cx, hit, prefix)
  for _, m in ipairs(hit.order or hit) do
    cx.layer = m.layer_of or -1
    if m.lora_params then M.materialize_parameters(cx, m, prefix) end
    if m.lora then M.materialize_linear(cx, m, prefix) end
  end
  cx.layer = -1
end

-- The adapter of a wrapped 3-D parameter (E, d1, d2) laid out (experts, out, in) as the
-- grouped_mm experts keep it (not is_transposed: ParamWrapper.update_layer swaps in and out), or
-- (experts, in, out) where the experts module is_transposed (GPT-OSS's: no swap):
-- lora_A = Linear(in, r * E), lora_B = Linear(r * E, out), one rank-r pair per expert. The
-- innermost wrapper's adapters sit under as many ".base_layer" as wrappers around it.
function M.materialize_parameters(cx, m, prefix)
  local n = #m.lora_params
  for i, lp in ipairs(m.lora_params) do
    local s = lp.cfg
    -- (a 2-D weight (out, in) is one "expert": _get_in_out_features)
    local e, out, inn = lp.shape[1], lp.shape[2], lp.shape[3]
    if m.is_transposed then out, inn = inn, out end
    if #lp.shape == 2 then e, out, inn = 1, lp.shape[1], lp.shape[2] end
    local base = prefix .. m.path .. (".base_layer"):rep(n - i) .. "."
    lp.A = nn.param(cx, base .. "lora_A.default.weight", { lp.r * e, inn }, s.dtype, true)
    lp.B = nn.param(cx, base .. "lora_B.default.weight", { out, lp.r * e }, s.dtype, true)
    lp.A.adapter, lp.B.adapter = true, true
    m.extra_params = m.extra_params or {}
    m.extra_params[#m.extra_params + 1] = { key = lp.key .. ".lora_A", param = lp.A }
    m.extra_params[#m.extra_params + 1] = { key = lp.key .. ".lora_B", param = lp.B }
  end
end

function M.materialize_linear(cx, m, prefix)
  do
    local s = m.lora.cfg
    local base = prefix .. m.path .. "."
    -- (a framework's own adapter may shape them otherwise: m.lora.shape_A, shape_B)
    m.lora.A = nn.param(cx, base .. "lora_A.default.weight", m.lora.shape_A or { s.r, m.in_features }, s.dtype, true)
    m.lora.B = nn.param(cx, base .. "lora_B.default.weight", m.lora.shape_B or { m.out_features, s.r }, s.dtype, true)
    m.lora.A.adapter, m.lora.B.adapter = true, true
    m.extra_params = { { key = "lora_A", param = m.lora.A }, { key = "lora_B", param = m.lora.B } }
  end
end

-- ParamWrapper.forward of the wrapped parameters of experts module `ex` (block prefix `pre`),
-- outermost first, before the experts' forward runs: each wrapper's _activate_lora takes its
-- factors (get_delta_factors: B viewed (E, out, r) by a permute, A viewed (E, r, in), both cast
-- to the parameter's dtype) and registers the _LoraFactorsProxy parametrization, whose
-- register_parametrization (unsafe=False) evaluates it once to check its shape and dtype: a
-- whole (E, out, in) baddbmm made and dropped. Returns the proxies by parameter key for
-- M.param_weight; nil where there are none (or the adapters are off).
function M.param_proxies(cx, pre, ex)
  if not ex.lora_params or cx.adapters_off then return nil end
  local proxies = {}
  for i = #ex.lora_params, 1, -1 do
    local lp = ex.lora_params[i]
    if ex.p[lp.key].sharded then
      -- FSDP2 / ZeRO-3 swap the gathered weight in by setattr around the forward, where the
      -- wrapper registers its parametrization on the same attribute: how the two interleave
      -- (and what each keeps) is not modelled
      error(("training.lora.target_parameters with a sharded %s (FSDP2 / ZeRO-3 parameter sharding) is not "
             .. "modelled; use DDP, ZeRO-1 or ZeRO-2"):format(pre .. ".experts." .. lp.key), 0)
    end
    local w = mod.weight(cx, ex.p[lp.key])
    local e, out, inn, r = lp.shape[1], lp.shape[2], lp.shape[3], lp.r
    local name = pre .. ".experts." .. lp.key
    local A, B = mod.weight(cx, lp.A), mod.weight(cx, lp.B)
    local lhs, rhs
    if ex.is_transposed then
      -- W is (E, in, out): lhs = A.reshape(E, r, in).transpose(-2, -1) (E, in, r) and rhs =
      -- B.reshape(out, r, E).permute(2, 0, 1).transpose(-2, -1) (E, r, out); the casts keep the
      -- transposed strides, so each factor's contiguous gradient comes back transposed and its
      -- reshape's backward copies it (a clone of A's size, and of B's)
      inn, out = lp.shape[2], lp.shape[3]
      local at = nn.view_op(cx, name .. ".lora_A.reshape_t", A, { e, inn, r })
      local bt = nn.view_op(cx, name .. ".lora_B.permute_t", B, { e, r, out })
      lhs = nn.to(cx, at, w.dtype, name .. ".lora_lhs")
      rhs = nn.to(cx, bt, w.dtype, name .. ".lora_rhs")
    else
      -- weight_B.reshape(out, r, E).permute(2, 0, 1): the reshape's backward copies the permuted
      -- gradient back to (out, r * E) (a clone of B's size)
      local bv = nn.view_op(cx, name .. ".lora_B.permute", B, { e, out, r })
      local av = nn.view(cx, A, { e, r, inn }, name .. ".lora_A.reshape")
      lhs = nn.to(cx, bv, w.dtype, name .. ".lora_lhs")
      rhs = nn.to(cx, av, w.dtype, name .. ".lora_rhs")
    end
    local wb = nn.bytes(w.shape, w.dtype)
    -- the factor from B is a permuted view (strides (1, r * E, E) of (E, out, r), or transposed
    -- after it where the experts are): neither of its matrix dimensions has unit stride, so
    -- cuBLAS cannot take it and baddbmm copies it contiguous (Blas.cpp
    -- prepare_batch_matrix_for_cublas: .contiguous()) after the result is made, freed as the call
    -- returns; A's reshaped view is taken as it is
    local copy = nn.bytes(ex.is_transposed and rhs.shape or lhs.shape, w.dtype)
    nn.op(cx, { name = name .. ".lora_check", kind = "mm_baddbmm", inputs = { w, lhs, rhs },
                workspace = { wb, copy }, grads = { "none", "none", "none" },
                flops = 2 * e * out * inn * r, dtype = w.dtype, kernels = 2,
                bytes = M.baddbmm_bytes(wb, lhs, rhs) })
    proxies[lp.key] = { w = w, lhs = lhs, rhs = rhs, name = name, r = r, copy = copy }
  end
  return proxies
end

-- The bytes of torch.baddbmm(W, lhs, rhs) (W of wb bytes) on CUDA: the structured kernel's meta
-- copies W into the new result first (common_checks_baddbmm_bmm: result.copy_(self) where beta
-- is not 0, a device-to-device memcpy), then cuBLAS's batched GEMM with beta 1 reads and writes
-- the result in place (Blas.cpp baddbmm_out_cuda_impl); two kernels. The H100 profile of the
-- experts' LoRA (validation/results/kernels_gen11_experts_h100.jsonl) has each baddbmm's memcpy
-- beside its GEMM: 192 of each a forward. Where the GPU measured the whole call
-- (lua/hw/calibrated/<gpu>_baddbmm.lua, class mm_baddbmm: 2.4 TB/s on an H100 SXM, 3.2 on an H200)
-- it takes no less than that rate over these bytes; its backward's two bmm likewise no less than
-- the rate that card measured for BaddbmmBackward0 over twice the stack's bytes (class
-- mm_baddbmm_bwd, 2.3-2.7 TB/s on an H100 SXM), and are priced as GEMMs where it has none.
function M.baddbmm_bytes(wb, lhs, rhs)
  return 2 * wb + 2 * wb + nn.bytes(lhs.shape, lhs.dtype) + nn.bytes(rhs.shape, rhs.dtype)
end

-- The experts' parameter `key` as the experts forward reads it under parametrize.cached(): the
-- first read evaluates _LoraFactorsProxy, torch.baddbmm(W, lhs, rhs, alpha=scaling) with
-- autocast off, a new (E, out, in) tensor in the parameter's dtype that the grouped GEMM
-- saves for its input's gradient. BaddbmmBackward0 keeps lhs and rhs; its two gradients are each
-- a bmm and the alpha scaling (a temporary of the factor's size each). The factor
-- from B goes through cuBLAS's contiguous copy in the forward's baddbmm and again, transposed,
-- in the one backward bmm that takes it as an operand rather than as the gradient's shape
-- (lhs.transpose(1, 2).bmm(grad), or grad.bmm(rhs.transpose(1, 2)) where the experts are
-- transposed): fulltrace_gen11-qwen3-30b-a3b-lora-experts-b1-ckpt-tr has five copies of B's
-- bf16 size a layer and step (the check, the forward and the recomputation's two, backward's).
-- W is frozen.
function M.param_weight(cx, proxies, key, plain)
  local p = proxies and proxies[key]
  if not p then return plain end
  local w, lhs, rhs = p.w, p.lhs, p.rhs
  local e, out, inn = w.shape[1], w.shape[2], w.shape[3]
  local flops = 2 * e * out * inn * p.r
  return nn.op(cx, { name = p.name .. ".lora_baddbmm", kind = "mm_baddbmm", bwd_kind = "mm_baddbmm_bwd", inputs = { w, lhs, rhs },
                     outs = { { p.name .. ".lora_weight", w.shape, w.dtype } }, saves = { lhs, rhs },
                     grads = { "none", { dtype = lhs.dtype }, { dtype = rhs.dtype } },
                     workspace = { p.copy },
                     bwd_workspace = { nn.bytes(lhs.shape, lhs.dtype), nn.bytes(rhs.shape, rhs.dtype), p.copy },
                     flops = flops + e * out * inn, bwd_flops = 2 * flops, dtype = w.dtype,
                     bytes = M.baddbmm_bytes(nn.bytes(w.shape, w.dtype), lhs, rhs), kernels = 2,
                     -- (backward reads the stack's gradient once for each factor)
                     bwd_bytes = 2 * nn.bytes(w.shape, w.dtype) })
end

-- ParamWrapper.forward around a 2-D weight (the router's gate.weight, one "expert"): with
-- num_experts 1, _activate_lora takes get_delta_weight, Linear's (lora_B.weight @ lora_A.weight)
-- * scaling in the adapters' dtype, cast to the weight's, and registers _LoraParameterProxy
-- (W + delta), which register_parametrization evaluates once to check; the module's forward
-- then reads W + delta (a new tensor; AddBackward0 passes its gradient to the delta) under
-- parametrize.cached(). The delta goes as the wrapper's forward returns, the folded weight
-- with the cache, or with the node that saved it. `run(w)` is the module's forward on the folded
-- weight. Returns run's result.
function M.param_wrap_2d(cx, m, key, run)
  local lp = m.lora_params and m.lora_params[1]
  if not lp or cx.adapters_off then return run(nil) end
  local w = mod.weight(cx, m.p[key])
  if m.p[key].sharded then
    error(("training.lora.target_parameters with a sharded %s (FSDP2 / ZeRO-3 parameter sharding) is not "
           .. "modelled; use DDP, ZeRO-1 or ZeRO-2"):format(m.opname .. "." .. key), 0)
  end
  local A, B = mod.weight(cx, lp.A), mod.weight(cx, lp.B)
  local name = m.opname .. "." .. key
  local out, inn = w.shape[1], w.shape[2]
  local ab = nn.op(cx, { name = name .. ".lora_BA", kind = "mm", inputs = { B, A },
                         outs = { { name .. ".lora_BA", { out, inn }, B.dtype } }, saves = { B, A },
                         grads = { { dtype = B.dtype }, { dtype = A.dtype } },
                         flops = 2 * out * inn * lp.r, bwd_flops = 4 * out * inn * lp.r, dtype = B.dtype })
  local scaled = nn.op(cx, { name = name .. ".lora_scaling", inputs = { ab },
                             outs = { { name .. ".lora_scaled", ab.shape, ab.dtype } },
                             flops = nn.numel(ab.shape), dtype = ab.dtype })
  local delta = nn.to(cx, scaled, w.dtype, name .. ".lora_delta")
  local wb = nn.bytes(w.shape, w.dtype)
  nn.op(cx, { name = name .. ".lora_check", inputs = { w, delta }, workspace = { wb }, frees = {},
              grads = { "none", "none" }, flops = nn.numel(w.shape), dtype = w.dtype, bytes = 3 * wb })
  local folded = nn.op(cx, { name = name .. ".lora_weight", inputs = { w, delta },
                             outs = { { name .. ".lora_weight", w.shape, w.dtype } },
                             grads = { "none", { pass = 1 } }, frees = {}, flops = nn.numel(w.shape),
                             dtype = w.dtype })
  mod.bind(cx, m.p[key], folded)
  local y = run(folded)
  mod.bind(cx, m.p[key], nil)
  -- the wrapper returns: its proxy (holding the delta) and the cache (the folded weight) go
  nn.release(cx, { delta, folded }, name .. ": the wrapper returns")
  return y
end

return M
