-- techniques.lua: which runs the memory techniques of training.loss, optimizer_in_backward and
-- activation_offload can be simulated with, checked before a model is built: a combination the
-- library refuses, or one vrsim does not model, is an error that names it (exit 2), never an
-- answer that ignores the setting.
local M = {}

local NEW_OPTIMIZERS = { adafactor = "transformers' Adafactor", lion = "lion-pytorch's Lion",
                         lion_32bit = "bitsandbytes' Lion", paged_adamw_8bit = "bitsandbytes' paged AdamW",
                         paged_adamw_32bit = "bitsandbytes' paged AdamW", paged_adamw = "bitsandbytes' paged AdamW",
                         paged_lion_8bit = "bitsandbytes' paged Lion", paged_lion_32bit = "bitsandbytes' paged Lion" }

-- Adafactor and Lion: the error where the strategy hands them parameters vrsim does not model
-- (a sharded parameter's shard), or nil; a note where optimizer_impl is given but not read.
local function check_optimizer(t, notes)
  local what = NEW_OPTIMIZERS[t.optimizer]
  if not what or t.inference then return nil end
  if t.strategy == "zero3" or t.strategy == "fsdp2" then
    return ("training.optimizer = \"%s\" under strategy %s is not modelled: %s would step the "
            .. "parameters' shards (flattened under ZeRO-3), whose updates and state vrsim does not "
            .. "build (use none, ddp or zero1)"):format(t.optimizer, t.strategy, what)
  end
  if t.optimizer_impl ~= "foreach" then
    notes[#notes + 1] = ("training.optimizer_impl = %s has no effect on this run: %s has one implementation")
                        :format(t.optimizer_impl, what)
  end
  return nil
end

-- The error for the first technique cfg.training asks for that this causal LM run cannot have
-- (nil when all can be simulated); notes gets a line for a technique that has no effect on it.
-- root: the model tree after peft (its lm_head's adapters); arch: the GPU's class (nn.arch_class).
function M.check_causal_lm(t, root, notes, arch, code)
  local bad = check_optimizer(t, notes)
  if bad then return bad end
  if t.compile_loss then
    -- torchtitan's compiled loss_fn is the full cross-entropy over the whole logits
    if t.inference then
      notes[#notes + 1] = "training.compile_loss = true has no effect on this run: inference computes no loss"
    elseif t.loss ~= "full" then
      return ("training.compile_loss with training.loss = \"%s\" is not modelled: compile_loss compiles the full "
              .. "cross-entropy (torchtitan's loss_fn)%s"):format(t.loss, t.loss == "chunked"
              and "; torchtune's chunked loss is compiled with training.compile" or "")
    elseif t.dpo then
      return "training.compile_loss with training.dpo is not modelled: DPO's loss is TRL's fused head, not the "
             .. "cross-entropy torchtitan compiles"
    end
  end
  if t.loss ~= "full" then
    if t.inference then
      notes[#notes + 1] = ("training.loss = %s has no effect on this run: inference computes no loss"):format(t.loss)
    elseif t.loss == "liger_fused" and t.precision:match("^amp_") then
      -- under autocast the fused loss's products and its gradient accumulators change dtype
      -- inside the Function (custom_fwd keeps autocast on): not built
      return ("training.loss = \"liger_fused\" with precision %s is not modelled (autocast inside "
              .. "Liger's fused linear cross-entropy); use bf16, fp16, fp32 or a lora_ precision"):format(t.precision)
    elseif t.loss == "liger_fused" and root.children.lm_head and root.children.lm_head.lora then
      -- LigerForCausalLMLoss takes self.lm_head.weight: peft's adapter on the head never runs
      return "training.loss = \"liger_fused\" with LoRA on lm_head: Liger's fused loss reads "
             .. "lm_head.weight directly, so the adapter would not be trained (leave lm_head out of "
             .. "training.lora.targets, or use loss = \"chunked\")"
    elseif t.loss == "cce" and t.precision:match("^amp_") then
      -- custom_fwd keeps autocast on: forward casts e and c to the autocast dtype (a copy of the
      -- head's weight, saved) and backward casts the gradients back: not built
      return ("training.loss = \"cce\" with precision %s is not modelled (autocast inside Cut "
              .. "Cross-Entropy's Function); use bf16, fp16, fp32 or a lora_ precision"):format(t.precision)
    elseif t.loss == "cce" and root.children.lm_head and root.children.lm_head.lora then
      -- cce_patch's forward takes self.lm_head.weight: peft's adapter on the head never runs
      return "training.loss = \"cce\" with LoRA on lm_head: Cut Cross-Entropy reads lm_head.weight "
             .. "directly, so the adapter would not be trained (leave lm_head out of "
             .. "training.lora.targets, or use loss = \"chunked\")"
    elseif t.loss == "cce" and arch == "pre-ampere" then
      -- cce_linear_cross_entropy: `if not torch.cuda.is_bf16_supported(): raise RuntimeError(
      -- "Cut Cross Entropy requires an ampere GPU or newer. ...")`
      return "training.loss = \"cce\": Cut Cross Entropy requires an Ampere GPU or newer (compute "
             .. "capability 8.0), and this one is older (use loss = \"liger_fused\" or \"chunked\")"
    elseif t.loss == "cce" then
      notes[#notes + 1] = "training.loss = cce is Cut Cross-Entropy's default (filter_eps \"auto\"): its "
        .. "backward time is the unfiltered kernel's, since how many logit blocks gradient filtering "
        .. "skips depends on the weights' values"
    elseif t.loss == "liger_fused" then
      notes[#notes + 1] = "training.loss = liger_fused is Liger's fused linear cross-entropy alone: the RMSNorm, "
        .. "SwiGLU and RoPE kernels apply_liger_kernel_to_* (and use_liger_kernel) also patch in by default are not modelled"
    elseif code ~= "torchtune" then
      notes[#notes + 1] = "training.loss = chunked is torchtune's chunked output and loss on the transformers model: "
        .. "the rest of the model is transformers', not torchtune's (model.code = \"torchtune\" runs its own "
        .. "decoder)"
    end
  end
  if t.optimizer_in_backward then
    if t.inference then
      notes[#notes + 1] = "training.optimizer_in_backward = true has no effect on this run: inference has no optimizer step"
    elseif t.grad_accum > 1 then
      -- torchtune's recipes: "Gradient accumulation is not supported with optimizer in bwd."
      return ("training.optimizer_in_backward with grad_accum = %d: torchtune refuses it (each "
              .. "gradient is stepped and freed as soon as it is made, so none is left to accumulate); "
              .. "set grad_accum = 1"):format(t.grad_accum)
    elseif t.strategy ~= "none" then
      return ("training.optimizer_in_backward under strategy %s is not modelled (the per-parameter "
              .. "hooks are built for one GPU's parameters, not for a data-parallel framework's "
              .. "gradient reductions)"):format(t.strategy)
    elseif t.precision == "amp_fp16" then
      return "training.optimizer_in_backward with precision amp_fp16 is not modelled: GradScaler's "
             .. "unscale_ and step need the whole optimizer after backward"
    end
  end
  if t.activation_offload then
    if t.inference then
      notes[#notes + 1] = "training.activation_offload = true has no effect on this run: inference saves no activations"
    elseif not t.checkpointing then
      -- torchtune's recipes: "enable_activation_offloading should only be True when
      -- enable_activation_checkpointing is True"
      return "training.activation_offload without checkpointing: torchtune refuses it (offloading "
             .. "every saved activation of every layer would stall on the host link); set checkpointing = true"
    end
  end
  return nil
end

-- The error for a technique given to a model that has no such step (the diffusion models), or nil
-- (notes: where a technique's unread knob is noted).
function M.check_other(t, model, notes)
  local bad = check_optimizer(t, notes or {})
  if bad then return bad end
  if t.loss ~= "full" then
    return ("%s: training.loss = \"%s\" is a causal language model's cross-entropy; %s's loss is "
            .. "not one"):format(model, t.loss, model)
  end
  if t.activation_offload then
    return ("%s: training.activation_offload is not modelled for this model (torchtune's "
            .. "OffloadActivations around a decoder's forward)"):format(model)
  end
  if t.optimizer_in_backward then
    return ("%s: training.optimizer_in_backward is not modelled for this model (torchtune's "
            .. "per-parameter hooks are built for the causal language models)"):format(model)
  end
  if t.compile_loss then
    return ("%s: training.compile_loss is not modelled for this model (it compiles a causal language "
            .. "model's cross-entropy)"):format(model)
  end
  -- (diffusers' regional compilation: strategies/compile.lua, for the families it names)
  if t.compile then
    local why = require("strategies.compile").diffusion_refusal(t, model)
    if why then return why end
  end
  -- torchao's converter, TRL's trainer and transformers' generate are built on the causal
  -- language models' graph alone
  if t.float8 then
    return ("%s: training.float8 is not modelled for this model (torchao's Float8Linear is built "
            .. "into the causal language models' Linears)"):format(model)
  end
  if t.dpo then
    return ("%s: training.dpo is TRL's DPOTrainer for a causal language model; %s has no "
            .. "preference objective here (Diffusion-DPO is not modelled)"):format(model, model)
  end
  if t.generate then
    return ("%s: training.generate is transformers' generate for a causal language model; %s "
            .. "does not generate tokens"):format(model, model)
  end
  return nil
end

return M
