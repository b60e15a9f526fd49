-- unmodelled.lua: names of things training scripts set that vrsim knows it does not model, so that
-- a scenario naming one (a field, a section, a knob or a value: `compile = true`,
-- `strategy = "pp"`, `use_liger_kernel = true`) is refused as not modelled, with a
-- pointer to the list of what is and is not modelled, instead of "unknown field" and a guess at
-- a modelled name that would answer another question. docs/scenarios.md "Not modelled" lists the
-- same things; every entry there is one here.
local U = {}

-- Where a refusal points: the docs' list of what is and is not modelled.
U.WHERE = 'docs/scenarios.md, "Not modelled"'

-- { what it is, names as people write them }. A name matches once lowercased with everything
-- but letters and digits removed ("torch.compile", "torch_compile" and "TorchCompile" alike),
-- whole, or with a suffix of SUFFIXES ("tp_size", "pipeline_parallel_degree").
local THINGS = {
  { "torch.compile", { "compile", "torchcompile", "compiled", "inductor", "dynamo" },
    "training.compile = true (each decoder layer compiled: the min-cut partitioner, Inductor's fusion)",
    modelled = true },
  { "float8 training (torchao's Float8Linear)", { "fp8", "fp8e4m3", "fp8e5m2", "torchao", "float8training" },
    "training.float8 = { recipe = \"tensorwise\" } (torchao's convert_to_float8_training)", modelled = true },
  { "Transformer Engine (its fp8 layers and recipes)", { "transformerengine", "te" },
    "torchao's float8 training is training.float8" },
  { "FlexAttention (torch.nn.attention.flex_attention)", { "flexattention", "flexattn", "flexattentionimpl" },
    "training.attention = \"flex\" (transformers' flex_attention_forward on a causal BlockMask)", modelled = true },
  { "Liger's kernels beyond its fused loss (RMSNorm, SwiGLU, RoPE, as use_liger_kernel patches them in)",
    { "liger", "ligerkernel", "useligerkernel" },
    "its fused linear cross-entropy alone is training.loss = \"liger_fused\"" },
  { "Cut Cross-Entropy", { "cutcrossentropy", "cce", "cceloss" },
    "training.loss = \"cce\" (Apple's cut-cross-entropy, as its transformers patch calls it)", modelled = true },
  -- what vrsim models under another name: the refusal names the field
  { "a fused or chunked cross-entropy", { "fusedcrossentropy", "fusedce", "fusedlinearcrossentropy",
                                          "chunkedcrossentropy", "chunkedce", "chunkedloss" },
    "training.loss = \"liger_fused\" (Liger's fused linear cross-entropy) or \"chunked\" (torchtune's)",
    modelled = true },
  { "tensor parallelism", { "tp", "tensorparallel", "tensorparallelism", "tensormodelparallel" },
    "training.parallel = { tp = N } (DTensor's, torchtitan's plan with sequence parallelism)", modelled = true },
  { "pipeline parallelism", { "pp", "pipelineparallel", "pipelineparallelism", "pipeline" } },
  { "context / sequence parallelism (ring attention, Ulysses)",
    { "cp", "sp", "contextparallel", "contextparallelism", "sequenceparallel", "sequenceparallelism",
      "ringattention", "ulysses" } },
  { "expert parallelism (mixture-of-experts models are modelled on data parallelism)",
    { "ep", "expertparallel", "expertparallelism" } },
  { "activation offloading to host memory",
    { "activationoffloading", "offloadactivations", "cpuoffloadactivations", "enableactivationoffloading",
      "offloadactivation" },
    "training.activation_offload = true (torchtune's OffloadActivations)", modelled = true },
  { "the optimizer step in backward", { "optiminbwd", "optimizerinbwd", "optimizerbackward" },
    "training.optimizer_in_backward = true (torchtune's optimizer_in_bwd)", modelled = true },
  { "paged optimizers (bitsandbytes' paged AdamW, unified memory)",
    { "paged", "pagedadamw", "pagedadamw8bit", "pagedadamw32bit", "pagedadam", "pagedlion8bit",
      "pagedoptimizer" },
    "training.optimizer = \"paged_adamw_8bit\" (or paged_adamw_32bit, paged_adamw, paged_lion_8bit, "
      .. "paged_lion_32bit: bitsandbytes' paged state in unified memory)", modelled = true },
  { "sequence packing into fixed-length rows (axolotl's sample_packing, TRL's packing, torchtune's packed data sets)",
    { "packing", "samplepacking", "pack", "packed", "padfree" },
    "training.data = { lengths = ..., batching = \"bfd\" } (TRL's packing), \"multipack\" (axolotl's sample_packing "
      .. "under flash or flex attention), \"torchtune\" (torchtune's packed data sets, attention = flex) or "
      .. "\"padding_free\"", modelled = true },
  { "DPO (TRL's DPOTrainer)", { "dpo", "dpotrainer", "referencemodel", "refmodel" },
    "training.dpo = { prompt_length = N, completion_length = M }", modelled = true },
  { "preference and RL training beyond DPO (ORPO, KTO, PPO, GRPO)", { "orpo", "kto", "ppo", "grpo", "rlhf" } },
  { "generation (model.generate with its KV cache)", { "generation", "kvcache", "maxnewtokens", "decode" },
    "training.generate = { prompt = N, max_new_tokens = M } with inference = true", modelled = true },
  { "Stable Diffusion 3 / 3.5 (diffusers' SD3Transformer2DModel)",
    { "sd3", "sd35", "sd3medium", "sd35medium", "sd35large", "stablediffusion3", "mmdit",
      "sd3transformer2dmodel" },
    "model = { arch = \"sd3\", config = \"configs/sd35-large-transformer.json\" }", modelled = true },
}

-- Suffixes a name may carry and still be the thing: tp_size, pipeline_parallel_degree, ...
local SUFFIXES = { "", "size", "degree", "world", "worldsize", "enabled", "enable", "config", "kwargs" }

local BY_NAME = {}
for _, t in ipairs(THINGS) do
  for _, n in ipairs(t[2]) do BY_NAME[n] = t end
end

-- The entry of THINGS `name` names ({ what, names, instead, modelled = }), or nil.
local function entry(name)
  if type(name) ~= "string" then return nil end
  local n = name:lower():gsub("[^%w]", "")
  for _, s in ipairs(SUFFIXES) do
    if s == "" or (#n > #s and n:sub(-#s) == s) then
      local stem = n:sub(1, #n - #s)
      local w = BY_NAME[stem] or BY_NAME[stem:gsub("^use", "", 1)] or BY_NAME[stem:gsub("^enable", "", 1)]
      if w then return w end
    end
  end
  return nil
end

-- What `name` names that vrsim does not model, or nil when it names none of them.
function U.what(name)
  local t = entry(name)
  return t and not t.modelled and t[1] or nil
end

-- The refusal for `where` (a field, a section or a value as the scenario wrote it), or nil when
-- `name` is nothing vrsim knows: what vrsim does not model is said so, with what it does model
-- nearby (t[3]); what it models under another name is pointed to that name.
function U.refusal(where, name)
  local t = entry(name)
  if not t then return nil end
  if t.modelled then return ("%s: %s is written %s"):format(where, t[1], t[3]) end
  return ("%s: vrsim does not model %s%s (what it does and does not model: %s)"):format(where, t[1],
    t[3] and ("; " .. t[3]) or "", U.WHERE)
end

-- Every thing in the list that is not modelled, for the docs' check.
function U.things()
  local r = {}
  for _, t in ipairs(THINGS) do if not t.modelled then r[#r + 1] = t[1] end end
  return r
end

return U
