-- kbit.lua: what a QLoRA program does to a 4-bit model's other parameters between
-- from_pretrained and the first step (training.kbit_prepare), as casts of the parameters the
-- simulated model holds: every op after them then runs in the dtypes they leave, so the
-- embedding's output, the residual stream, the norms' outputs, each bitsandbytes Linear4bit's
-- output (`.to(inp_dtype)`, quant.lua) and autocast's copies follow from the simulation.
--
-- The programs (their source, the versions named):
--   peft     peft 0.21 utils/other.py prepare_model_for_kbit_training(model): every parameter
--            that is fp16 or bf16 and not a Params4bit to fp32 (`param.data =
--            param.data.to(torch.float32)`: a new tensor, the old one freed), then
--            torch.cuda.empty_cache() (auto_clear_cache), then gradient checkpointing on
--            (use_gradient_checkpointing=True, its default) with enable_input_require_grads.
--            peft's get_peft_model after it adds fp32 adapters (autocast_adapter_dtype).
--   trl_0.13 TRL 0.12 / 0.13's SFTTrainer (December 2024), for a 4-bit model not sharded:
--            prepare_model_for_kbit_training as above (use_gradient_checkpointing =
--            args.gradient_checkpointing) but with the peft of that time (0.13, 0.14), which
--            empties no cache (auto_clear_cache came in peft 0.20), get_peft_model, then with bf16
--            peft_module_casting_to_bf16 (trl/trainer/utils.py): every module whose name holds
--            "norm" to fp32, every module named lm_head / embed_tokens / wte / wpe whose weight
--            is fp32 back to bf16.
--   trl      TRL 1.16's SFTTrainer: no prepare_model_for_kbit_training and no
--            peft_module_casting_to_bf16 any more; after get_peft_model, for a quantized model,
--            every trainable parameter to bf16 (`param.data = param.data.to(torch.bfloat16)`,
--            sft_trainer.py "the PEFT adapter weights are converted to bf16"), so the adapters
--            and their optimizer state are bf16.
--   axolotl  axolotl's loaders/model.py _configure_embedding_dtypes without FSDP: the norms and
--            embed_tokens / lm_head to fp32, prepare_model_for_kbit_training (nothing left to
--            cast; empty_cache), then the same modules back to the load dtype (needs_fa2_dtype,
--            true for any adapter); get_peft_model's fp32 adapters after.
-- Each of them trains under the Trainer's bf16 autocast (args.bf16: accelerate's autocast
-- around forward), which a mode other than none turns on (cx.autocast).
local nn = require "vrsim.nn"

local M = {}

-- The refusal of training table t under kbit_prepare (nil when the mode applies as modelled);
-- the schema has already held the value to its choices (lua/vrsim/schema.lua CHOICES).
function M.check(t)
  local mode = t.kbit_prepare or "none"
  if mode == "none" then return nil end
  if t.quant ~= "nf4" then
    return ("training.kbit_prepare = \"%s\" needs training.quant = \"nf4\": the casts are what these programs do "
            .. "to a bitsandbytes 4-bit model (quant is %s)"):format(mode, tostring(t.quant))
  end
  if not require("strategies.lora").wanted(t) or t.precision ~= "lora_bf16" then
    return ("training.kbit_prepare = \"%s\" is modelled for QLoRA in bf16 (precision = \"lora_bf16\" with "
            .. "training.lora), as these programs run it with bf16 on"):format(mode)
  end
  if t.inference then
    return ("training.kbit_prepare = \"%s\" with inference = true is not modelled: it is a training "
            .. "program's preparation (modelled for training runs)"):format(mode)
  end
  if (t.strategy or "none") ~= "none" and t.strategy ~= "ddp" then
    return ("training.kbit_prepare = \"%s\" under %s is not modelled (sharded QLoRA: TRL and axolotl skip these "
            .. "casts there)"):format(mode, t.strategy)
  end
  if t.framework == "litgpt" then
    return ("training.kbit_prepare = \"%s\" with framework = \"litgpt\" is not modelled: it is a transformers "
            .. "program's preparation (modelled with framework = \"transformers\")"):format(mode)
  end
  if t.compile then
    return ("training.kbit_prepare = \"%s\" with training.compile is not modelled (the casts are modelled "
            .. "in eager layers, as these programs run QLoRA)"):format(mode)
  end
  if mode == "peft" and not t.checkpointing then
    return "training.kbit_prepare = \"peft\": prepare_model_for_kbit_training(model) turns gradient checkpointing on "
        .. "(use_gradient_checkpointing=True, its default): set training.checkpointing = true"
  end
  return nil
end

-- The notes of a run under kbit_prepare: what of the program's own setting vrsim does not take.
function M.notes(t)
  local mode = t.kbit_prepare or "none"
  if (mode == "peft" or mode == "trl_0.13") and t.checkpointing and not t.checkpoint_reentrant then
    -- prepare_model_for_kbit_training calls gradient_checkpointing_enable with
    -- gradient_checkpointing_kwargs = {} (peft's default; TRL 0.13 passes
    -- args.gradient_checkpointing_kwargs or {}), and torch.utils.checkpoint without use_reentrant
    -- runs the reentrant variant
    return { ("training.kbit_prepare = \"%s\": prepare_model_for_kbit_training turns on torch.utils.checkpoint "
              .. "without use_reentrant, which runs reentrant; simulated non-reentrant (set "
              .. "training.checkpoint_reentrant = true for the reentrant one)"):format(mode) }
  end
  return {}
end

-- The module name of a parameter (its name without the last component).
local function module_of(p)
  return (p.name:gsub("%.[^.]+$", ""))
end

-- `param.data = param.data.to(dtype)` (or module.to(dtype) on the parameter's module): a new
-- tensor of the parameter in dtype, written from the old one, which is then freed.
local function cast(cx, p, dtype, why)
  cx.layer = p.layer or -1
  local id = cx.G:tensorv(p.name, nn.bytes(p.shape, dtype), nn.numel(p.shape), dtype, "param",
                          p.trainable, p.trainable, true, true, nil)
  cx.G:op { name = why .. ": " .. p.name .. ".to(" .. dtype .. ")", kind = "elementwise", phase = "build",
            inputs = { p.id }, outputs = { id }, frees = { p.id },
            bytes = nn.bytes(p.shape, p.dtype) + nn.bytes(p.shape, dtype) }
  p.id, p.dtype = id, dtype
  cx.layer = -1
end

local function empty_cache(cx, why)
  cx.G:op { name = why .. ": torch.cuda.empty_cache()", kind = "empty_cache", phase = "build", inputs = {},
            outputs = {}, frees = {} }
end

-- The parameters in cx.params (construction order, as named_parameters walks them) that are
-- not quantized, for which keep(p) holds.
local function each(cx, keep, f)
  for _, p in ipairs(cx.params) do
    if not p.quant and keep(p) then f(p) end
  end
end

local LOW = { bf16 = true, fp16 = true }
local function is_norm(p) return module_of(p):find("norm", 1, true) ~= nil end
-- (trl's list; axolotl's get_linear_embedding_layers for Llama-like models: embed_tokens, lm_head)
local function is_embedding(p, names)
  local m = module_of(p)
  for _, n in ipairs(names) do
    if m:find(n, 1, true) then return true end
  end
  return false
end
local TRL_EMB = { "lm_head", "embed_tokens", "wte", "wpe" }
local AXO_EMB = { "embed_tokens", "lm_head" }

-- prepare_model_for_kbit_training's casts: every fp16 / bf16 parameter that is not 4-bit to fp32,
-- then (peft 0.20 and later: clear) the cache emptied
local function prepare(cx, why, clear)
  each(cx, function(p) return LOW[p.dtype] end, function(p) cast(cx, p, "fp32", why) end)
  if clear then empty_cache(cx, why) end
end

-- What the program does to the base model before get_peft_model (cx.params: the base model's).
function M.before_peft(cx, mode, load_dtype)
  if mode == "peft" or mode == "trl_0.13" then
    prepare(cx, "prepare_model_for_kbit_training", mode == "peft")
  elseif mode == "axolotl" then
    local sel = function(p) return is_norm(p) or is_embedding(p, AXO_EMB) end
    each(cx, function(p) return sel(p) and p.dtype ~= "fp32" end,
         function(p) cast(cx, p, "fp32", "_configure_embedding_dtypes") end)
    prepare(cx, "prepare_model_for_kbit_training", true)
    each(cx, function(p) return sel(p) and p.dtype ~= load_dtype end,
         function(p) cast(cx, p, load_dtype, "_configure_embedding_dtypes") end)
  end
end

-- What the program does once get_peft_model has added the adapters (cx.params: base, then
-- adapters).
function M.after_peft(cx, mode)
  if mode == "trl_0.13" then
    -- peft_module_casting_to_bf16: a norm module's .to(float32) (already fp32 after the prepare),
    -- an fp32 embedding or head back to bf16
    each(cx, function(p) return is_norm(p) and p.dtype ~= "fp32" end,
         function(p) cast(cx, p, "fp32", "peft_module_casting_to_bf16") end)
    each(cx, function(p) return not is_norm(p) and is_embedding(p, TRL_EMB) and p.dtype == "fp32" end,
         function(p) cast(cx, p, "bf16", "peft_module_casting_to_bf16") end)
  elseif mode == "trl" then
    each(cx, function(p) return p.trainable and p.dtype ~= "bf16" end,
         function(p) cast(cx, p, "bf16", "SFTTrainer: trainable parameters of a quantized model") end)
  end
end

return M
