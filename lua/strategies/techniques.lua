-- techniques.lua: which runs the memory techniques of training.loss, optimizer_in_backward and
-- activation_offload can be simulated with, checked before a model is built: a combination the
-- library refuses, or one vrsim does not model, is an error that names it (exit 2), never an
-- answer that ignores the setting.
local M = {}

-- The error for the first technique cfg.training asks for that this causal LM run cannot have
-- (nil when all can be simulated); notes gets a line for a technique that has no effect on it.
-- root: the model tree after peft (its lm_head's adapters).
function M.check_causal_lm(t, root, notes)
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
    end
  end
  return nil
end

-- The error for a technique given to a model that has no such step (SDXL's UNet), or nil.
function M.check_other(t, model)
  if t.loss ~= "full" then
    return ("%s: training.loss = \"%s\" is a causal language model's cross-entropy; %s's loss is "
            .. "not one"):format(model, t.loss, model)
  end
  return nil
end

return M
