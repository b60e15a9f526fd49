-- tf_version.lua: what the transformers release a run used (training.transformers) changes in
-- what vrsim simulates of it: the causal-LM loss path, the one part that moves memory from
-- release to release in the families vrsim builds. Read from transformers' own source at each
-- minor release (src/transformers/models/<family>/modeling_<family>.py *ForCausalLM.forward,
-- src/transformers/loss/loss_utils.py ForCausalLMLoss), 4.36.0 to 4.57.0, 5.0.0 and 5.25.0:
--
--   4.36.0 .. 4.45.x  the model's forward upcasts: `logits = self.lm_head(hidden_states)`, then
--                     `logits = logits.float()` (4.45: `self.lm_head(...).float()`, then
--                     `logits.float()` again, a no-op), so the head's bf16 logits are dropped at
--                     once and the fp32 ones are what the output object returns; then
--                     `shift_logits = logits[..., :-1, :].contiguous()`, a second fp32 copy one
--                     position shorter, `labels[..., 1:].contiguous()`, and CrossEntropyLoss.
--                     (Gemma 2, 4.42 on: the soft-capping runs on the bf16 logits before the
--                     upcast.) MistralForCausalLM kept this forward through 4.47.x.
--   4.46.0 .. 4.48.x  self.loss_function (ForCausalLMLoss): the model returns the head's logits
--                     in their dtype, and the loss makes `logits = logits.float()` (a local of
--                     ForCausalLMLoss until it returns) and the same shifted .contiguous() copy.
--   4.49.0 on         ForCausalLMLoss pads the labels (`nn.functional.pad(labels, (0, 1),
--                     value=ignore_index)`, then `labels[..., 1:].contiguous()`) and passes the
--                     fp32 logits as they are: no shifted copy of the logits.
--
-- What autograd makes of the older path: `.float()` saves nothing and its backward
-- (ToCopyBackward0) casts the gradient back; `.contiguous()` of the slice is a clone whose
-- gradient passes through; the slice's backward (SliceBackward0) writes its gradient into zeros
-- of the whole logits' shape, a full-size fp32 buffer (models/llama.lua causal_lm_loss).
--
-- Each family exists from the release that added its modeling file (checked in each minor
-- release's wheel); before it the run is refused. Before 4.36.0 and after 5.25.x vrsim has not
-- read the source: refused. Patch releases follow their minor release (the loss path changed only
-- in minor releases: 4.44.2 read beside 4.44.0).

local release = require "strategies.release"
local parse, cmp = release.parse, release.cmp

local M = {}

M.DEFAULT = "5.25.0"   -- the version of the GPU records (validation/records)
M.OLDEST, M.NEWEST = { 4, 36, 0 }, { 5, 25, 99999 }

-- The first release of each family's modeling file, by model_type (models/*.lua F.model_type);
-- llama, mistral and mixtral are older than 4.36.0.
M.FIRST = {
  qwen2 = "4.37.0", phi3 = "4.41.0", gemma2 = "4.42.0", olmo2 = "4.47.0", gemma3_text = "4.50.0",
  qwen3 = "4.51.0", qwen3_moe = "4.51.0", deepseek_v3 = "4.51.0", deepseek_v2 = "4.54.0",
  gpt_oss = "4.55.0",
}

local function before(x, v) return cmp(x, parse(v)) < 0 end

-- The families whose rotary tables vrsim builds in their own file, as 5.19 on makes them
-- (models/gpt_oss.lua, deepseek_v2.lua, deepseek_v3.lua): the release does not change them here.
local OWN_ROTARY = { gpt_oss = true, deepseek_v2 = true, deepseek_v3 = true }

-- Why version string v cannot be simulated, or nil when it can.
function M.bad(v)
  local x = parse(v)
  if not x then
    return ("training.transformers = %q: not a release number (MAJOR.MINOR.PATCH, e.g. \"4.44.2\")"):format(tostring(v))
  end
  if cmp(x, M.OLDEST) < 0 or cmp(x, M.NEWEST) > 0 then
    return ("training.transformers = %q is not modelled: vrsim reads transformers' causal-LM loss "
            .. "from 4.36.0 to 5.25.x"):format(v)
  end
  return nil
end

-- What release v (a string M.bad accepts; nil for the default) changes for the family whose
-- model_type is `model_type` (nil: Llama):
--   version       the release string
--   default       v is the release vrsim's other modelling follows (5.25)
--   model_upcast  the model's forward upcasts the logits (the output holds fp32 logits only)
--   shift_copy    the loss makes logits[..., :-1, :].contiguous(), a second fp32 copy
--   rotary_matmul the rotary tables' freqs are `inv_freq_expanded @ position_ids_expanded` (before
--                 5.19.0, every family), not the broadcast product (models/llama.lua rotary_tables)
--   rotary_follows whether vrsim's rotary tables of the family follow the release (not for the
--                 families that build their own, always as 5.19 on makes them)
-- Errors (a message naming training.transformers) where the family is newer than v.
function M.era(v, model_type)
  v = v or M.DEFAULT
  local why = M.bad(v)
  if why then error(why, 0) end
  local x = parse(v)
  local first = model_type and M.FIRST[model_type]
  if first and before(x, first) then
    error(("training.transformers = %q: model_type %q first appears in transformers %s "
           .. "(its modeling file); it is not in %s"):format(v, model_type, first, v), 0)
  end
  local upcast_until = model_type == "mistral" and "4.48.0" or "4.46.0"
  return { version = v, default = cmp(x, parse(M.DEFAULT)) == 0,
           model_upcast = before(x, upcast_until), shift_copy = before(x, "4.49.0"),
           rotary_matmul = before(x, "5.19.0") and not OWN_ROTARY[model_type or ""],
           -- from 5.23.0 a packed row's mask compares the positions, not the indices
           -- (masking_utils.py remap_positions_for_packed_sequence)
           packed_remap = not before(x, "5.23.0"),
           rotary_follows = not OWN_ROTARY[model_type or ""] }
end

-- Whether the run's training settings t (the training section) run transformers' causal-LM
-- loss: training with the full cross-entropy, not DPO's fused head, torchtitan's compiled loss
-- or litgpt's own model.
function M.loss_runs(t)
  return not t.inference and t.loss == "full" and not t.compile_loss and not t.dpo
         and (t.framework or "transformers") == "transformers"
end

-- The rotary tables' freqs of era e in words, for the run's note.
function M.describe_rotary(e)
  if not e.rotary_follows then return nil end
  if e.rotary_matmul then
    return "freqs as inv_freq_expanded @ position_ids_expanded, the step's first cuBLAS call"
  end
  return "freqs as the broadcast product position_ids[..., None].float() * inv_freq"
end

-- The loss path of era e in words, for the run's note.
function M.describe(e)
  if e.model_upcast then
    return "the model's forward upcasts the logits to fp32, then logits[..., :-1, :].contiguous() copies them"
  elseif e.shift_copy then
    return "ForCausalLMLoss upcasts the logits to fp32, then logits[..., :-1, :].contiguous() copies them"
  end
  return "ForCausalLMLoss upcasts the logits to fp32 and pads the labels"
end

return M
