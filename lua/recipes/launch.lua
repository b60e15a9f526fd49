-- recipes/launch.lua: `vrsim sft.yaml --accelerate fsdp.yaml`: a TRL or TrainingArguments config
-- run under `accelerate launch --config_file fsdp.yaml`. The launcher's file gives the ranks
-- (num_processes; --gpus stands for accelerate launch's --num_processes, which wins over the
-- file), the FSDP or DeepSpeed plugin and the mixed precision; the trainer's file gives the rest
-- (recipes/trl.lua). Where both name a thing, the precedence is the sources' (transformers 5.x
-- training_args.py __post_init__ and trainer.py create_accelerator_and_postprocess):
--   mixed precision: the trainer's fp16 / bf16 when on, else the launcher's mixed_precision;
--   FSDP / DeepSpeed: a TrainingArguments fsdp or deepspeed key builds the Trainer's own plugin;
--     beside a launcher's FSDP or DeepSpeed plugin vrsim refuses the pair, naming both lines,
--     rather than guess which the user meant (over MULTI_GPU the trainer's plugin is the run's);
--   checkpointing: FSDP's fsdp_activation_checkpointing and the trainer's (gradient_/activation_)
--     checkpointing both on is the Trainer's own ValueError, so an error naming both here.
local C = {}

-- Raises "FILE:LINE: KEY and FILE:LINE: KEY: why" for key ka of the trainer's table ta (reader r)
-- and key kb of the launcher's table tb (reader ar).
local function both(r, ta, ka, ar, tb, kb, why, pb)
  -- a key the file leaves out (a default) has no line of its own
  local la = r:has(ta, ka) and r:line(ta, ka) or 0
  local lb = ar:has(tb, kb) and ar:line(tb, kb) or 0
  error(("%s%s: %s and %s%s: %s%s: %s"):format(r.file, la > 0 and (":" .. la) or "", ka, ar.file,
        lb > 0 and (":" .. lb) or "", pb or "", kb, why), 0)
end

-- Whether the trainer's key k of d is set (not null, false, "" or an empty list).
local function set(d, k)
  local v = d[k]
  return v ~= nil and v ~= false and v ~= "" and not (type(v) == "table" and next(v) == nil)
end

-- The scenario and notes of the trainer config read by r (format from: "trl" or "hf_trainer")
-- launched with the accelerate config opts.accelerate. The second reader is returned too, for
-- its note of keys not read.
function C.scenario(r, from, opts)
  local path = opts.accelerate
  if from ~= "trl" and from ~= "hf_trainer" then
    error(("--accelerate %s: a launcher's config pairs with a TRL or TrainingArguments config, not "
           .. "an %s one (%s)"):format(path, from, r.file), 0)
  end
  local ar = require("recipes.reader").open(path)
  local A = require "recipes.accelerate"
  if not A.detect(ar.doc) then
    error(("--accelerate %s: not an accelerate config (no distributed_type or compute_environment key)")
          :format(path), 0)
  end
  local ascn, anotes = A.scenario(ar, { gpu = opts.gpu, count = opts.count, script = true })
  local ad, d = ar.doc, r.doc
  local dt = ad.distributed_type or "NO"
  local plugin = dt == "FSDP" or dt == "DEEPSPEED"
  for _, k in ipairs({ "fsdp", "deepspeed" }) do
    if plugin and set(d, k) then
      both(r, d, k, ar, ad, "distributed_type", ("the Trainer builds its own %s plugin from %s, in place of "
           .. "the launcher's %s: give the distribution in one file"):format(k == "fsdp" and "FSDP" or "DeepSpeed",
           k, dt))
    end
  end
  local dyn = type(ad.dynamo_config) == "table" and ad.dynamo_config or {}
  local launch = { mixed_precision = ad.mixed_precision or "no", fsdp = dt == "FSDP",
                   regional_compile = dyn.dynamo_use_regional_compilation == true }
  local topts = { gpu = opts.gpu, count = ascn.hardware.count, model_config = opts.model_config, launch = launch }
  local scn, notes, prec = require("recipes." .. from).scenario(r, topts)
  local t, at = scn.training, ascn.training
  scn.hardware = ascn.hardware
  if dt == "FSDP" then
    local fc = ad.fsdp_config or {}
    if fc.fsdp_activation_checkpointing and t.checkpointing then
      local k = r:has(d, "activation_checkpointing") and "activation_checkpointing" or "gradient_checkpointing"
      both(r, d, k, ar, fc, "fsdp_activation_checkpointing", "both on: the Trainer refuses the pair "
           .. "(\"can't both be set to True. Use FSDP's activation checkpointing when using FSDP\")"
           .. (r:has(d, k) and "" or ("; " .. k .. " is on by SFTConfig's default: set it false")), "fsdp_config.")
    end
    t.strategy, t.zero = "fsdp2", at.zero
    t.checkpointing = t.checkpointing or at.checkpointing
    -- accelerate's regional compilation under FSDP2 lets dynamo skip the checkpointed layers'
    -- side effects (skip_fwd_side_effects_in_bwd_under_checkpoint): they compile, whichever
    -- checkpointing is on
    if at.compile and t.checkpointing then t.checkpoint_impl = "wrapper" end
  elseif dt == "DEEPSPEED" then
    if t.lora then
      r:fail(d, "use_peft", ("LoRA under the launcher's DeepSpeed plugin (%s) is not modelled"):format(path))
    end
    local dc = ad.deepspeed_config or {}
    if dc.gradient_accumulation_steps and dc.gradient_accumulation_steps ~= t.grad_accum then
      both(r, d, "gradient_accumulation_steps", ar, dc, "gradient_accumulation_steps",
           ("the Trainer's %d and the DeepSpeed plugin's %d must agree"):format(t.grad_accum,
           dc.gradient_accumulation_steps), "deepspeed_config.")
    end
    t.strategy, t.zero, t.deepspeed = at.strategy, at.zero, at.deepspeed
    -- DeepSpeed's own precision (bf16 / fp16 weights, fp32 master copies): the mixed precision
    -- resolved as TrainingArguments resolves it
    t.precision = prec.bf16 and "bf16" or prec.fp16 and "fp16" or "fp32"
  end
  -- torch_compile (hf_args.lua) on the run as merged: compile's refusal names the trainer's key
  -- the launcher's dynamo_config compiles the model too (TorchDynamoPlugin reads its environment)
  if at.compile and not t.compile then t.compile = at.compile end
  if t.compile then
    local why = require("recipes.hf_args").compile_refusal(t, scn.model.use_cache)
    if why and t.compile_key then r:fail(d, t.compile_key, why) end
    if why then ar:fail(ad, "dynamo_config", why) end
  end
  t.compile_key = nil
  for _, n in ipairs(anotes) do notes[#notes + 1] = n end
  return scn, notes, ar
end

return C
