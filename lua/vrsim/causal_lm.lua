-- causal_lm.lua: builds a decoder-only language model's training step from its family's module
-- tree (models/llama.lua, mistral.lua, qwen2.lua) the way a training script does: the model built (on
-- the GPU, in fp32 then cast, or directly in its dtype), bitsandbytes and peft applied by name,
-- the strategies' passes hooked on module boundaries, the batch made, then forward.
--
-- A scenario names the model by a Hugging Face config (model.config: a config.json path or the
-- object) or, for the Llama-2 checkpoints, a named shape (model.size "7b", "13b-l4"; llama2.lua).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

local PARAM_DTYPE = { fp32 = "fp32", mp_fp32 = "fp32", amp_bf16 = "fp32", amp_fp16 = "fp32", bf16 = "bf16",
                      fp16 = "fp16", lora_bf16 = "bf16", lora_fp16 = "fp16" }

-- The family module and normalized config of cfg.model: its config (path or table), else the
-- named Llama-2 shape.
function M.resolve(model)
  if model.config ~= nil then
    -- explicit shape fields override the config's keys (models/hf.lua H.resolve), as editing
    -- config.json would: heads given without kv_heads keeps the config's num_key_value_heads
    -- (or, where it has none, is multi-head attention)
    local over = {}
    for k, key in pairs { hidden = "hidden_size", intermediate = "intermediate_size",
                          heads = "num_attention_heads", kv_heads = "num_key_value_heads",
                          layers = "num_hidden_layers", vocab = "vocab_size" } do
      if model[k] then over[key] = model[k] end
    end
    local _, fam, c = require("models.hf").resolve(model.config, over)
    return fam, c
  end
  return require("models.llama"), require("models.llama2").named_config(model)
end

-- Parameters, in construction order: the base model's (bitsandbytes-quantized Linears made
-- packed), then peft's adapters.
local function materialize(cx, root, build_dtype, trainable, quant_dtype)
  local q = require "strategies.quant"
  -- a load onto the GPU (cx.load_on_gpu) builds the parameters a checkpoint holds otherwise
  -- (d.load: a MoE block's per-expert tensors) from them there
  local loaded, modules, last = {}, 0, nil
  mod.materialize(root, function(m, d, full)
    cx.layer = m.layer_of or -1
    cx.module = m.dm_unit
    -- (double quantization unless training.quant_double = false: litgpt's bnb.nf4)
    if d.quant then return q.param(cx, full, d.shape, d.quant, quant_dtype, cx.quant_double ~= false) end
    local tr = trainable
    if d.trainable ~= nil then tr = d.trainable end
    local p = nn.param(cx, full, d.shape, d.dtype or build_dtype, tr)
    if cx.load_on_gpu and d.load then
      if m ~= last then modules, last = modules + 1, m end
      loaded[#loaded + 1] = { p = p, load = d.load, dtype = d.dtype or build_dtype, module = modules }
    end
    return p
  end)
  if #loaded > 0 then require("strategies.expert_load").emit(cx, loaded) end
  cx.layer, cx.module = -1, nil
  -- a constructor's tensors that post_init replaces (a tied head's own weight): made as the
  -- module is built, freed once the model is (not under device_map: Accelerate builds on the
  -- meta device)
  -- (torchtune's TiedLinear makes no weight of its own: model.code)
  if cx.dm or cx.torchtune_code then return end
  mod.walk(root, function(m)
    for key, shape in pairs(m.untied_at_init or {}) do
      local name = m.path .. "." .. key .. " (constructed, then tied)"
      local id = cx.G:tensor { name = name, bytes = nn.bytes(shape, build_dtype), numel = nn.numel(shape),
                               dtype = build_dtype, cat = "param" }
      cx.G:op { name = name, kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
      cx.G:op { name = "tie_weights: " .. m.path .. "." .. key .. " is the embedding's", kind = "none",
                phase = "build", inputs = {}, outputs = {}, frees = { id } }
    end
  end)
end

-- Module.to(dtype) after a build in fp32: every parameter converted (a new tensor, the old
-- freed), depth first in construction order; peft's adapters and parameters made as shards
-- keep theirs.
local function cast_parameters(cx, pdtype, lora)
  for _, p in ipairs(cx.params) do
    if not (lora and p.trainable) and not (p.sharded and cx.dp.init_partitioned) and not p.quant then
      cx.layer = p.layer
      local keep = cx.shard_param
      cx.shard_param = nil -- the cast copy is not a new parameter to shard
      local np = nn.param(cx, p.name, p.shape, pdtype, p.trainable, nil)
      cx.shard_param = keep
      cx.params[#cx.params] = nil
      cx.G:op { name = "to(" .. pdtype .. ") " .. p.name, kind = "elementwise", phase = "build",
                inputs = { p.id }, outputs = { np.id }, frees = { p.id },
                bytes = nn.bytes(p.shape, "fp32") + nn.bytes(p.shape, pdtype) }
      p.id, p.dtype = np.id, pdtype
    end
  end
  cx.layer = -1
end

-- Marks which decoder layer every module belongs to (reports and sharding group by it) and the
-- placement unit under device_map.
local function mark_layers(root)
  local function walk(m, layer, unit)
    if m.layer ~= nil and m.layer >= 0 then layer = m.layer end
    if m.dm_key ~= nil then unit = m.dm_key end
    m.layer_of, m.dm_unit = layer, unit
    for _, k in ipairs(m.order) do walk(m.children[k], layer, unit) end
  end
  walk(root, nil, nil)
end

local register = mod.register

-- training.attention_mask = "block_diagonal": the collator's (b, 1, seq, seq) additive mask in the
-- compute dtype (LLaMA-Factory's SFTDataCollatorWith4DAttentionMask: prepare_4d_attention_mask, 0
-- where a token sees a token of its own sequence at or before it, the dtype's minimum elsewhere),
-- made on the CPU and moved to the GPU with the batch, which masking_utils takes as it is (a 4-D
-- mask skips every mask function). The error for what does not take it (nil when all does).
local function mask_4d_refusal(t, attention, mesh)
  if t.attention_mask ~= "block_diagonal" then return nil end
  local why
  if t.data_batch then
    why = "with training.data (whose collator makes the batch's mask itself)"
  elseif attention == "flash" then
    why = "under flash attention (flash_attention_2 takes no 4-D mask: LLaMA-Factory's neat_packing hands it "
      .. "position_ids instead, a packed row)"
  elseif t.inference then
    why = "for inference"
  elseif mesh and ((mesh.degrees.cp or 1) > 1 or (mesh.degrees.tp or 1) > 1) then
    why = "under tensor or context parallelism"
  end
  return why and ("training.attention_mask = block_diagonal %s is not modelled"):format(why) or nil
end

-- attention = "flex" (transformers' flex_attention_forward on masking_utils' causal BlockMask):
-- the error for what it is not modelled with (nil when all is).
local function flex_refusal(t, attention, mc, mesh)
  if attention ~= "flex" then return nil end
  local why
  if t.attention_mask == "block_diagonal" then
    why = "with training.attention_mask = block_diagonal (a 4-D mask flex attention adds in its score_mod)"
  elseif mc.sliding_window and mc.sliding_window <= t.seq then
    why = ("past the sliding window (%d tokens, sequences of %d: the window's BlockMask)"):format(mc.sliding_window, t.seq)
  elseif t.inference or t.generate then
    why = "for inference"
  elseif mesh and (mesh.degrees.cp or 1) > 1 then
    why = "under context parallelism"
  elseif mc.head_dim and mc.head_dim > 128 then
    why = ("at head dim %d (its kernels were measured at 64 and 128)"):format(mc.head_dim)
  elseif t.precision ~= "bf16" and t.precision ~= "lora_bf16" and t.precision ~= "mp_fp32" then
    -- (under autocast the rotary embedding's fp32 tables promote q and k to fp32 beside a bf16 v,
    -- which flex_attention does not take; FSDP2's mixed precision runs the layers on bf16
    -- parameters, so q, k and v are bf16)
    why = ("in %s (its kernels were measured on bf16 tensors: bf16, lora_bf16 or FSDP2's mp_fp32)"):format(t.precision)
  end
  return why and ("attention = flex %s is not modelled"):format(why) or nil
end

-- The batch's 4-D mask, made once with the batch (as the input ids are) and alive every step.
local function mask_4d_input(cx, t, b, s)
  local p = t.precision
  local dt = p:find("bf16") and "bf16" or p:find("fp16") and "fp16" or "fp32"
  local shape = { b, 1, s, s }
  local numel = b * s * s
  local id = cx.G:tensor { name = "attention_mask_4d", bytes = numel * (dt == "fp32" and 4 or 2), numel = numel,
                           dtype = dt, cat = "temp", persistent = true }
  cx.G:op { name = "attention_mask_4d", kind = "none", phase = "build", inputs = {}, outputs = { id }, frees = {} }
  return { id = id, shape = shape, dtype = dt, rg = false, name = "attention_mask_4d" }
end

-- Builds the forward graph; returns the loss tensor (or the logits for inference), the tree,
-- the normalized config and the function that runs one more forward (gradient accumulation).
function M.build(cx, cfg)
  local fam, mc = M.resolve(cfg.model)
  -- model.use_cache is the config's use_cache as a trainer sets it (the HF Trainer: args.use_cache)
  if cfg.model.use_cache ~= nil then mc.use_cache = cfg.model.use_cache end
  local t = cfg.training
  local b, s = t.micro_batch, t.seq
  -- variable-length data: the collator's shape of the batch simulated (strategies/data.lua)
  if t.data_batch then b, s = t.data_batch.rows, t.data_batch.len end
  -- generation (model.generate with a DynamicCache): the prompt's batch first (strategies/generate.lua)
  local gen = t.generate and require("strategies.generate").settings(t.generate)
  if gen then
    b, s = gen.batch, gen.prompt
    cx.layers_once = false -- (every decode step runs the layers again)
  end
  -- DPO: chosen and rejected in one batch of 2 x micro_batch rows (strategies/dpo.lua)
  local dpo = t.dpo and require("strategies.dpo").settings(t.dpo)
  if dpo then
    b, s = require("strategies.dpo").batch(t, dpo)
    cx.layers_once = false -- (the reference forward runs the layers a second time)
    cx.notes = cx.notes or {}
    cx.notes[#cx.notes + 1] = ("training.dpo: %d prompts, each with a chosen and a rejected completion: one batch of "
      .. "%d rows of %d tokens (%d of prompt, %d of completion)"):format(t.micro_batch, b, s, dpo.prompt_length, dpo.completion)
  end
  -- Megatron-LM's tensor parallelism (training.parallel.tp_impl = "megatron"): megatron-core's
  -- own GPTModel at the rank's shapes in place of the family's tree (strategies/megatron_tp.lua);
  -- what it does not model is refused before anything else is read
  local MG = cx.mesh and cx.mesh.tp_impl == "megatron" and require("strategies.megatron_tp")
  if MG then
    local why = MG.refusal(fam, mc, t, cx.mesh, fam.attention and fam.attention(t.attention, {}, mc) or t.attention)
    if why then error(why, 0) end
  end
  local prec = t.precision
  local pdtype = PARAM_DTYPE[prec]
  if prec == "amp_bf16" then cx.autocast = "bf16" elseif prec == "amp_fp16" then cx.autocast = "fp16" end
  cx.notes = cx.notes or {}
  for _, k in ipairs(mc.unknown_keys or {}) do
    cx.notes[#cx.notes + 1] = ("config key '%s' is not read by vrsim (assumed not to change memory)"):format(k)
  end
  -- the window decides from a sequence as long as it on (the mask llama.lua make_mask builds)
  if mc.sliding_window and mc.sliding_window_assumed and s >= mc.sliding_window then
    cx.notes[#cx.notes + 1] = ("sliding_window absent from the config: MistralConfig's default %d "
                               .. "applies, as in transformers (a null there is full attention)")
                              :format(mc.sliding_window)
  end

  local bad = require("strategies.quant").check_torchao(t) or require("strategies.kbit").check(t)
  if bad then error(bad, 0) end
  -- the programs of training.kbit_prepare train under the Trainer's bf16 autocast (args.bf16)
  if (t.kbit_prepare or "none") ~= "none" then
    cx.autocast = "bf16"
    for _, n in ipairs(require("strategies.kbit").notes(t)) do cx.notes[#cx.notes + 1] = n end
  end
  if t.quant ~= "none" and not t.inference then
    -- transformers' Trainer refuses a quantized model without adapters ("You cannot perform
    -- fine-tuning on purely quantized models"); LLM.int8's backward (MatMul8bitLt) is not built
    if not require("strategies.lora").wanted(t) then
      error(("training.quant = \"%s\" without LoRA: transformers' Trainer does not fine-tune a purely "
             .. "quantized model (use precision lora_bf16 for QLoRA, or inference = true)"):format(t.quant), 0)
    end
    if t.quant == "int8" then
      error("training.quant = \"int8\" with LoRA is not modelled (LLM.int8's backward through its "
            .. "int8 weights is not built): use quant = \"nf4\" (QLoRA), or inference = true", 0)
    end
  end
  if gen and mc.sliding_window and gen.prompt + gen.max_new_tokens > mc.sliding_window then
    error(("training.generate past the sliding window (%d tokens): DynamicSlidingWindowLayer's cache is not "
           .. "modelled"):format(mc.sliding_window), 0)
  end
  if dpo and mc.experts then
    -- DPOTrainer asks a mixture-of-experts policy for its router logits and adds their
    -- load-balancing loss: not built
    error("training.dpo with a mixture-of-experts model is not modelled (the router logits and auxiliary loss "
          .. "DPOTrainer adds)", 0)
  end
  -- litgpt's fine-tuning program (strategies/litgpt.lua): what of it is built, refused here
  local litgpt = t.framework == "litgpt" and require("strategies.litgpt")
  if litgpt then
    local why = litgpt.refusal(t, fam, cfg.hardware.count)
    if why then error(why, 0) end
    for _, n in ipairs(litgpt.notes(t)) do cx.notes[#cx.notes + 1] = n end
    -- litgpt's CausalSelfAttention: one qkv Linear (q, k and v stacked)
    mc.fused_qkv = true
  end
  -- (a Megatron pipeline rank builds its stage's part only: strategies/megatron_pp.lua)
  local root = MG and MG.tree(mc, cx.mesh.degrees.tp, cx.pp and require("strategies.megatron_pp").rank_stage(cx.pp))
               or fam.tree(mc)
  -- (litgpt's RMSNorm: its own forward, fp32 through the weight product)
  if litgpt then litgpt.rmsnorms(root) end
  -- torchtune's own decoder (model.code): its norms here, its RoPE cache with the model below
  local TT = cfg.model.code == "torchtune" and require("models.blocks.torchtune")
  if TT then
    local why = not TT.families[fam.model_type or ""] and ("the family %s (torchtune's own modules are "
                  .. "modelled for Llama, Mistral and Qwen2)"):format(tostring(fam.model_type))
      or litgpt and "training.framework = \"litgpt\"" or MG and "Megatron-LM's model"
      or (gen or t.inference) and "generation or inference (torchtune's KV cache)"
      or (cx.mesh and (cx.mesh.degrees.tp > 1 or cx.mesh.degrees.cp > 1 or (cx.mesh.degrees.pp or 1) > 1))
         and "tensor, context or pipeline parallelism"
      or (t.data_batch and not t.data_batch.torchtune) and "training.data batched other than torchtune's packing"
      or dpo and "training.dpo"
      or cfg.model.hub_kernels == "on" and "model.hub_kernels = \"on\" (transformers kernelizes its own models)"
    if why then error(("model.code = \"torchtune\" with %s is not modelled"):format(why), 0) end
    local minor, bad = TT.release(t.torchtune)
    if not minor then error(bad, 0) end
    TT.norms(root, minor)
    cx.torchtune_code = true
  end
  -- a pipeline rank holds its stages' part of the tree only (vrsim/pipeline.lua)
  if cx.pp and not MG then require("vrsim.pipeline").prune(cx.pp, root, mc) end
  mark_layers(root)
  -- bitsandbytes first (from_pretrained(quantization_config=...)), then peft on the result
  local lora_hit
  if t.quant ~= "none" then
    -- (litgpt's BitsandbytesPrecision has no ignore_modules: lm_head is quantized too)
    require("strategies.quant").apply(root, t.quant, not litgpt and "lm_head" or nil)
    if mc.experts then
      -- transformers 5.25: replace_with_bnb_linear swaps nn.Linear (and Conv1D) modules only, and
      -- Bnb4BitHfQuantizer.param_needs_quantization quantizes Linear4bit parameters only
      -- (Bnb8BitHfQuantizer likewise), so a MoE block's 3-D experts load unquantized; peft's
      -- target_parameters then wraps them as they are
      local wrapped = t.lora and type(t.lora.target_parameters) == "table" and #t.lora.target_parameters > 0
      cx.notes[#cx.notes + 1] = ("bitsandbytes quantizes nn.Linear modules only: the experts' 3-D weights "
        .. "(%d experts a layer) stay in %s%s"):format(mc.experts, pdtype,
          wrapped and " (training.lora.target_parameters folds the adapters into them in that dtype)" or "")
    end
  end
  local lora = nil
  if require("strategies.lora").wanted(t) then
    local L = require "strategies.lora"
    -- peft's LoraConfig without target_modules takes them from its table of model types
    -- (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: q_proj and v_proj for Llama, Mistral,
    -- Qwen and Gemma); a family it has no entry for (peft_targets = false) needs them named
    if fam.peft_targets == false and (type(t.lora) ~= "table" or t.lora.targets == nil) then
      error(("training.lora.targets: peft has no default target modules for %s (\"Please specify "
             .. "`target_modules` in `peft_config`\"): name them, e.g. { %s } or \"all-linear\"")
            :format(fam.model_type, fam.lora_example), 0)
    end
    lora = L.settings(t.lora, { r = 8, alpha = 32, dropout = 0.05, targets = { "q_proj", "v_proj" },
                                aliases = { q = "q_proj", k = "k_proj", v = "v_proj", o = "o_proj",
                                            gate = "gate_proj", up = "up_proj", down = "down_proj" } })
    -- (litgpt: the query, key and value switches adapt the one qkv Linear)
    if litgpt then litgpt.fused_targets(lora) end
    -- a family whose peft targets go beyond Linear modules (its target_parameters) refuses them
    if fam.check_lora then fam.check_lora(lora, mc) end
    L.convert_moe_targets(lora, fam.model_type, root, "lm_head")
    if lora.converted then cx.notes[#cx.notes + 1] = lora.converted end
    if dpo and lora.dropout > 0 then
      -- DPOConfig.disable_dropout (default True): every nn.Dropout's p set to 0, peft's lora_dropout
      -- included, and dropout with p = 0 returns its input
      lora.dropout = 0
      cx.notes[#cx.notes + 1] = "training.dpo: lora_dropout is 0 (DPOConfig.disable_dropout, TRL's default)"
    end
    lora_hit = L.apply(root, lora, "lm_head")
    if litgpt then litgpt.qkv_adapters(lora_hit, mc) end
  end
  -- torchao's convert_to_float8_training (after the model is built, before sharding), with
  -- torchtitan's filter (strategies/float8.lua)
  local f8, f8hit
  if t.float8 then
    local F8 = require "strategies.float8"
    f8 = F8.settings(t.float8)
    local left
    f8hit, left = F8.apply(root, f8, "lm_head")
    cx.notes[#cx.notes + 1] = ("float8 (torchao, recipe %s): %d Linears are Float8Linear, %d stay nn.Linear "
      .. "(the output layer, as torchtitan's filter_fqns = [\"output\"], and any with dims not divisible by 16); %s"):format(f8.recipe, #f8hit, #left,
      t.compile and "compiled casts, each an amax and one fused kernel writing the float8 operand"
      or "eager casts, each intermediate a tensor (under torch.compile they fuse)")
  end
  -- the attention the family runs for the one asked (its notes are made below, with the build's)
  local runs = fam.attention and fam.attention(t.attention, {}, mc) or t.attention
  local refused = require("strategies.techniques").check_causal_lm(t, root, cx.notes, cx.arch, cfg.model.code)
    or require("strategies.data").check(t, mc, runs, fam.model_type)
    or require("strategies.sac").check(t, mc)
    or mask_4d_refusal(t, runs, cx.mesh)
    or flex_refusal(t, runs, mc, cx.mesh)
  -- torch.compile: its settings checked, and what it does not compose with refused
  local compiled = require("strategies.compile").settings(t.compile)
  if compiled and compiled.scope == "model" then
    refused = refused or require("strategies.compile").model_refusal(t, mc, cx.mesh, lora, fam.model_type)
  end
  if compiled and t.inference then
    cx.notes[#cx.notes + 1] = "training.compile is not modelled for inference: the forward runs as eager PyTorch runs it"
    compiled = nil
  end
  refused = refused or (compiled and require("strategies.compile").check(t, mc, cx.mesh, lora))
  if refused then error(refused, 0) end
  -- tensor parallelism (parallelize_module, before fully_shard): each rank's shapes
  local tp = cx.mesh and cx.mesh.degrees.tp or 1
  if MG then
    -- (the tree is the rank's already; its collectives are its layers' own)
    cx.tp_applied = true
    for _, n in ipairs(MG.notes(tp, cx.dp and cx.dp.kind == "megatron")) do cx.notes[#cx.notes + 1] = n end
    if t.build ~= "direct" then
      cx.notes[#cx.notes + 1] = "training.build: Megatron builds each rank's partitions on the GPU in params_dtype "
        .. "(bf16), as training.build = \"direct\""
      t.build = "direct"
    end
  elseif tp > 1 then
    local TP = require "strategies.tp"
    local why = TP.refusal(fam, mc, t, tp)
    if why then error(why, 0) end
    TP.shard_tree(root, tp)
    cx.tp_applied = true
    -- the head's output stays sharded over the vocabulary and torchtitan's loss runs inside
    -- loss_parallel(): DTensor's cross-entropy handlers (ops/loss.lua)
    cx.loss_parallel = true
    if cx.mesh.async_tp then
      -- (torchtitan's maybe_enable_async_tp: "Async TP requires 'model' in --compile.components
      -- and --compile.enable"; the micro_pipeline_tp pass is Inductor's)
      if not compiled then
        error("training.parallel.async_tp = true needs training.compile: async tensor parallelism is a pass of "
              .. "Inductor's (torch._inductor.config._micro_pipeline_tp) over the compiled layers", 0)
      end
      cx.async_tp = true
      cx.notes[#cx.notes + 1] = TP.async_note(tp)
    end
    for _, n in ipairs(TP.notes(tp, cx.dp and cx.shard_params and not cx.dp.pp_keep)) do cx.notes[#cx.notes + 1] = n end
    if cx.dp and cx.shard_params and (t.grad_accum or 1) > 1 and cx.dp.opts.sync_every_micro_batch == false then
      -- (FSDP2 then keeps the unsharded gradients, the embedding's as the whole table, until the
      -- last micro-batch: not held to a capture)
      cx.notes[#cx.notes + 1] = "tensor parallelism with zero.sync_every_micro_batch = false: the micro-batches before "
        .. "the last accumulate the rank's tp-local gradients; the embedding's whole-table Replicate gradient that "
        .. "FSDP2 would keep unsharded between them is not modelled"
    end
  end
  -- context parallelism (torchtitan's context_parallel: the batch's sequence sharded before the
  -- model runs): the rank's graph is of its s/cp tokens, its attention the ring's
  local cp = cx.mesh and cx.mesh.degrees.cp or 1
  if cp > 1 then
    local CP = require "strategies.cp"
    local why = CP.refusal(fam, mc, t, cp, tp, fam.attention and fam.attention(t.attention, {}, mc) or t.attention)
    if why then error(why, 0) end
    local hw = cfg.hardware
    local _, coords = require("vrsim.mesh").groups(cx.mesh, hw.rank or 0, hw.gpus_per_node)
    local place = require("vrsim.mesh").placement(cx.mesh, { "cp" }, hw.rank or 0, hw.gpus_per_node)
    cx.cp = { size = cp, rank = coords.cp, per_node = place.ranks_per_node, rotate = cx.mesh.cp_rotate_method }
    s = s // cp
    for _, n in ipairs(CP.notes(cp, cx.cp.rotate, coords.cp)) do cx.notes[#cx.notes + 1] = n end
  end
  -- expert parallelism (torchtitan's ExpertParallel on the experts): E/ep experts a rank, the
  -- tokens dispatched to them and back (models/moe.lua calls strategies/ep.lua)
  local ep = cx.mesh and cx.mesh.degrees.ep or 1
  if ep > 1 then
    local EP = require "strategies.ep"
    local why = EP.refusal(fam, mc, t, cx.mesh)
    if why then error(why, 0) end
    EP.shard_tree(root, ep)
    local place = require("vrsim.mesh").placement(cx.mesh, { "dp_shard", "cp" }, cfg.hardware.rank or 0,
                                                  cfg.hardware.gpus_per_node)
    cx.ep = { size = ep, per_node = place.ranks_per_node, imbalance = cx.mesh.ep_imbalance }
    for _, n in ipairs(EP.notes(ep, cx.ep.imbalance)) do cx.notes[#cx.notes + 1] = n end
  end

  -- the model built as training.build says: directly in its dtype (from_pretrained, the default) or
  -- in fp32 then cast with .to() (from_config, as the measured runs built it)
  cx.phase = "build"
  local build_dtype = (t.build == "direct" or t.inference or t.quant ~= "none") and pdtype or "fp32"
  local dm_hooks
  if t.device_map == "auto" then
    if not t.inference then error("training.device_map = \"auto\" is for inference (set inference = true)", 0) end
    dm_hooks = require("strategies.device_map").hooks(cx, cfg, root, { shape = { b, s, mc.hidden }, dtype = pdtype }, pdtype)
  end
  if t.quant == "int8" and not cx.bnb.int8 then
    error(("training.quant = \"int8\" with bitsandbytes %s is not modelled: vrsim follows LLM.int8 "
           .. "as rewritten in 0.45.0 (MatMul8bitLt without the col32 layouts)"):format(cx.bnb.version), 0)
  end
  if t.quant == "nf4" then
    cx.quant_storage = require("strategies.quant").storage(t.quant_storage, t.strategy, pdtype)
    if cx.quant_storage == "uint8" and t.strategy == "zero3" then
      error("training.quant_storage = \"uint8\" under zero3 is not modelled: ZeRO-3 QLoRA stores the "
            .. "4-bit weights in the model's dtype (bnb_4bit_quant_storage) so that DeepSpeed partitions "
            .. "them; leave quant_storage \"auto\" or set \"bf16\"", 0)
    elseif cx.quant_storage == "uint8" and t.strategy == "fsdp2" then
      cx.notes[#cx.notes + 1] = "4-bit weights stored in uint8 are left out of fully_shard (accelerate puts "
        .. "non-floating Params4bit in ignored_params): every rank holds the whole 4-bit model; "
        .. "training.quant_storage = \"bf16\" shards them"
    end
  end
  -- from_pretrained through a device_map on this GPU (bitsandbytes' quantized load puts the
  -- model on the current GPU; device_map = "auto"): transformers' caching_allocator_warmup
  -- reserves the model's bytes before the weights come
  -- (torchtune builds its QLoRA model on the GPU and loads a state dict: no from_pretrained)
  -- (litgpt builds its model under fabric.init_module, each Linear quantized as it is made, and
  -- loads its own checkpoint: no from_pretrained either)
  if ((t.quant ~= "none" and t.quant ~= "torchao_nf4") or t.device_map == "auto") and not litgpt then
    if cx.shard_param then
      cx.notes[#cx.notes + 1] = "from_pretrained's caching_allocator_warmup is not modelled under "
        .. t.strategy .. " (the parameters made as shards)"
    else
      require("strategies.warmup").declare(cx, root, build_dtype, cx.card_bytes)
      cx.load_on_gpu = true
    end
  end
  -- litgpt under --quantize: StableEmbedding's parameters beside the embedding it replaces
  local outside = litgpt and t.quant == "nf4" and litgpt.stable_embedding(root, mc)
  cx.quant_double = t.quant_double
  -- (Lightning's BitsandbytesPrecision quantizes `weight.to(torch.half)`: litgpt's QuantState is fp16)
  if litgpt then cx.quant_from_dtype = "fp16" end
  -- (torchtune's builders make the RoPE cache first: the one module every layer shares)
  local rope_cache = TT and TT.rope_cache(cx, mc.head_dim, mc.max_positions
    or error("model.code = \"torchtune\": the config gives no max_position_embeddings, which sizes the RoPE cache", 0),
    TT.families[fam.model_type])
  materialize(cx, root, build_dtype, not lora and not t.inference, pdtype)
  -- (torchtune's construction order, one device's parameters: sharded ones are made by FSDP2's
  -- sharding)
  if TT and not cx.shard_params then TT.construct(cx, root) end
  if outside then litgpt.mark_outside_optimizer(cx, outside) end
  -- the program's casts of the loaded 4-bit model's other parameters, before and after peft
  -- (training.kbit_prepare: strategies/kbit.lua)
  local kbit = t.kbit_prepare ~= nil and t.kbit_prepare ~= "none" and t.kbit_prepare
  if kbit then require("strategies.kbit").before_peft(cx, kbit, pdtype) end
  if lora then require("strategies.lora").materialize(cx, lora_hit, "base_model.model.") end
  if kbit then require("strategies.kbit").after_peft(cx, kbit) end
  if cx.dp and cx.dp.init_partitioned then
    for _, p in ipairs(cx.params) do if p.sharded then p.dtype = pdtype end end
  end
  if build_dtype ~= pdtype then cast_parameters(cx, pdtype, lora) end
  if f8 then require("strategies.float8").mark_params(f8hit, f8) end
  -- DPO's reference model beside a full fine-tune (TRL's create_model_from_path in the model's
  -- dtype, frozen), unless the reference's log-probs are precomputed
  local ref_root
  if dpo and not lora and not dpo.precompute_ref_log_probs then
    ref_root = require("strategies.dpo").reference_tree(fam, mc)
    mark_layers(ref_root)
    local first = #cx.params + 1
    materialize(cx, ref_root, pdtype, false, pdtype)
    -- DPOTrainer.__init__ creates it once the policy is built (and cast): its parameters are the
    -- outputs of a build op here, so they are allocated after the policy's, not before its cast
    local ids = {}
    for i = first, #cx.params do ids[#ids + 1] = cx.params[i].id end
    cx.G:op { name = "ref_model = create_model_from_path(dtype=model.dtype)", kind = "none", phase = "build",
              inputs = {}, outputs = ids, frees = {} }
  end
  if dpo and lora and root.children.lm_head and root.children.lm_head.lora then
    error("training.dpo with LoRA on lm_head: TRL's fused head reads lm_head.weight directly, so the adapter "
          .. "would not be trained (leave lm_head out of training.lora.targets)", 0)
  end
  -- a sharding strategy (FSDP2 fully_shard, ZeRO-3) now replaces the whole parameters by shards
  if cx.dp then require("strategies.dp").after_build(cx) end
  if t.optimizer_in_backward and not t.inference then require("strategies.optim_in_bwd").register(cx, cfg) end
  -- the input batch is made once, after the model and optimizer, and reused every step
  local ids = { id = cx.G:tensor { name = "input_ids", bytes = b * s * 8, numel = b * s,
                                   dtype = "int64", cat = "temp", persistent = true },
                shape = { b, s }, dtype = "int64", rg = false, name = "input_ids" }
  cx.G:op { name = "input_ids", kind = "none", phase = "build", inputs = {}, outputs = { ids.id },
            frees = {} }
  local data_inputs = t.data_batch and require("strategies.data").inputs(cx, t.data_batch)
  local mask_4d = t.attention_mask == "block_diagonal" and mask_4d_input(cx, t, b, s) or nil
  if MG then MG.build_extras(cx, mc, b, s, tp) end
  cx.phase = "fwd"

  -- the passes' hooks, in the order the runtime nests them: checkpoint regions outermost, then
  -- device placement, then sharding, then the checkpointed function's arguments (known only once
  -- the module's inputs have arrived on this device)
  local ck = t.checkpointing and not t.inference and
             require("strategies.checkpoint").hooks(root, root.checkpoint_layer, t.checkpoint_every,
                                                     t.checkpoint_scope, "self_attn") or {}
  register(ck, "first")
  if dm_hooks then register(dm_hooks) end
  if tp > 1 and not MG then register(require("strategies.tp").hooks(cx, root, tp)) end
  if cx.dp and cx.shard_params then register(require("strategies.shard").hooks(cx, root, cx.dp.kind)) end
  -- each compiled decoder layer is one region, like a checkpointed one (strategies/compile.lua),
  -- inside the sharding hooks: FSDP2's pre- and post-forward hooks are graph breaks around the
  -- compiled layer (torch._dynamo.config.skip_fsdp_hooks), whose graph sees the gathered parameters
  if compiled then
    register(require("strategies.compile").hooks(root, root.checkpoint_layer, t), "first")
    -- DPO's reference model: accelerate's prepare_model compiles it as it compiles the policy
    if ref_root then register(require("strategies.compile").hooks(ref_root, ref_root.checkpoint_layer, t, true), "first") end
  end
  register(ck, "last")
  if t.activation_offload and not t.inference then
    -- torchtune's recipes enter OffloadActivations around the model; the head runs under a
    -- NoOpManager and the loss outside: the decoder body is what offloads
    require("strategies.offload_act").install(cx, mod.get(root, "model"))
  end
  if lora and t.checkpointing then
    -- enable_input_require_grads(): a forward hook makes the embedding output require grad
    -- (output.requires_grad_(True)): a leaf with no history, so autograd computes its gradient in
    -- full, layer 0's first norm casting its part back to the embedding's dtype, and drops it
    -- (no parameter reads it): the view stands for the leaf, its producer passes nothing on
    mod.hook(mod.get(root, "model.embed_tokens"), { post = function(hcx, _, _, outs)
      local o = outs[1]
      if not o then return end
      if o.rg then return end
      o.rg = true
      local v = nn.view(hcx, o, o.shape, o.name .. ".requires_grad_")
      nn.op(hcx, { name = "embed_tokens.requires_grad_", kind = "none", inputs = { o }, out_tensors = { v },
                   grads = { "none" }, bytes = 0, frees = {} })
      outs[1] = v
    end })
  end

  cx.layer = -1
  cx.last_layer = mc.layers - 1
  -- the attention implementation from_pretrained gives the family for the one asked (Gemma 2
  -- cannot run SDPA and falls back to eager)
  local attention = t.attention
  if fam.attention then attention = fam.attention(attention, cx.notes, mc) end
  if gen and attention == "eager" then
    error(("training.generate with eager attention (%s's) is not modelled (its (q, kv) score shapes in decode)")
          :format(fam.model_type or "this model"), 0)
  end
  -- model.repeat_kv is read by llama.lua's attention, which these families run
  local repeat_kv_families = { llama = true, mistral = true, qwen2 = true, qwen3 = true, mixtral = true, qwen3_moe = true }
  if cfg.model.repeat_kv and not repeat_kv_families[fam.model_type or ""] then
    error(("model.repeat_kv = true: modelled for the families whose attention is Llama's (Llama, Mistral, Qwen2, "
           .. "Qwen3, Mixtral, Qwen3-MoE), not for %s"):format(tostring(fam.model_type)), 0)
  end
  -- the transformers release (training.transformers, strategies/tf_version.lua): the family must
  -- exist in it, and what vrsim follows of it is the causal-LM loss, which runs only in training
  -- with the full cross-entropy (not DPO's fused head, the fused or chunked losses, torchtitan's
  -- compiled loss or litgpt's own model)
  if not litgpt then
    local TF = require "strategies.tf_version"
    cx.tf = TF.era(t.transformers, fam.model_type)
    if cx.tf.model_upcast and t.inference then
      error(("training.transformers = %q with inference = true is not modelled: before 4.46 the "
             .. "causal LM returns fp32 logits (before 4.45 for every position, generate's prefill "
             .. "included), and vrsim's inference follows 5.25's head"):format(t.transformers), 0)
    end
    local loss_runs = TF.loss_runs(t)
    if not loss_runs then cx.tf.model_upcast, cx.tf.shift_copy = false, false end
    if not cx.tf.default then
      local followed = {}
      local rot = TF.describe_rotary(cx.tf)
      if rot then followed[#followed + 1] = ("the rotary tables (%s)"):format(rot) end
      if loss_runs then followed[#followed + 1] = ("the causal-LM loss path (%s)"):format(TF.describe(cx.tf)) end
      cx.notes[#cx.notes + 1] = ("transformers %s: %s; the rest of the model (%sattention masks, the "
        .. "attention and norm code, gradient checkpointing, the Trainer) is simulated as transformers "
        .. "5.25 runs it"):format(t.transformers,
          #followed > 0 and (table.concat(followed, " and ") .. (#followed > 1 and " follow" or " follows") .. " the release")
            or "nothing of the release changes this run",
          rot and "" or "the rotary tables, ")
    end
  end
  -- hidden_dtype: what flows between the layers (and between pipeline stages): the parameters'
  -- dtype, but bf16 under FSDP2's mixed precision, whose layers run on the gathered bf16
  -- parameters (and whose fully_shard casts a stage's floating inputs to param_dtype)
  -- use_cache: the forward's DynamicCache where the config's use_cache (model.use_cache over
  -- it) holds; transformers turns it off under gradient checkpointing in training
  cx.run = { batch = b, seq = s, attention = attention, inference = t.inference,
             use_cache = (mc.use_cache ~= false and not t.checkpointing) or t.inference, param_dtype = pdtype,
             hidden_dtype = t.precision == "mp_fp32" and "bf16" or pdtype,
             loss = litgpt and "litgpt_chunked" or t.loss, compile_loss = t.compile_loss and not t.inference,
             compile_model = compiled ~= nil and compiled.scope == "model",
             ckpt_model = compiled ~= nil and require("strategies.compile").ckpt_model(t),
             data = t.data_batch, data_inputs = data_inputs, mask_4d = mask_4d, dpo = dpo,
             compile = compiled ~= nil, compile_chunked_loss = compiled ~= nil and compiled.loss,
             repeat_kv = cfg.model.repeat_kv,
             -- (Megatron's GPTModel and torchtune's decoder are no transformers models: no Hub kernels)
             hub_kernels = not MG and not TT and require("vrsim.hub_kernels").resolve(cfg.model.hub_kernels, fam.model_type, t, tp,
                                                                 compiled ~= nil, cx.notes) or nil }
  -- DPOTrainer calls both models with use_cache=False; litgpt's GPT has no cache in training
  if dpo or litgpt then cx.run.use_cache = false end
  -- litgpt's CausalSelfAttention repeats grouped keys and values to every query head in training
  -- (k.repeat_interleave(q_per_kv, dim=1) where input_pos is None) before SDPA
  if litgpt then cx.run.repeat_kv = true end
  -- torchtune's MultiHeadAttention expands them too (k.unsqueeze(2).expand(...).flatten(1, 2))
  -- (and keeps no KV cache in training: setup_caches is generation's)
  if TT then cx.run.repeat_kv, cx.run.rope_cache, cx.run.use_cache = true, rope_cache, false end
  -- one forward pass (a micro-batch); gradient accumulation calls it again
  local function forward()
    cx.run.inputs_embeds = nil
    if gen then
      local out = require("strategies.generate").run(cx, root, ids, gen)
      nn.end_forward(cx)
      return out
    end
    -- a torchtune packed batch: its collator's BlockMask, made with each micro-batch; a
    -- torchtitan row's: made by the train step before the model's forward
    if t.data_batch and (t.data_batch.torchtune or t.data_batch.torchtitan) then
      cx.run.block_mask = require("strategies.data").flex_document_mask(cx, t.data_batch, data_inputs, ids)
    end
    local out = mod.call(cx, root, ids)
    if dpo then
      -- the reference after the policy, under no_grad: the frozen copy, or the same model with
      -- its adapters disabled (peft's use_adapter(model, None))
      out = require("strategies.dpo").loss(cx, out, dpo, function()
        cx.run.inputs_embeds = nil
        cx.adapters_off = lora and true or nil
        local r = mod.call(cx, ref_root or root, ids)
        cx.adapters_off = nil
        return r
      end)
    end
    nn.end_forward(cx)
    return out
  end

  cx.model_name = mc.name
  if cx.pp then
    -- the pipeline schedule runs each stage's forwards (vrsim/pipeline.lua P.run)
    -- (the tensor-parallel group shares each micro-batch: its tokens counted once, 1/tp a GPU)
    cx.tokens = b * s * cx.pp.par.pp_microbatches // tp
    return nil, root, mc, forward
  end
  local loss = forward()
  if MG then cx.notes[#cx.notes + 1] = MG.buffer_note(cx) end
  -- (a tensor-parallel group of tp GPUs works on one batch: each GPU's share of the tokens is
  -- 1/tp of it, as torchtitan counts tokens per second per GPU)
  cx.tokens = (t.data_batch and t.data_batch.real or b * s) * (t.grad_accum or 1) // tp
  -- generation: the tokens generated
  if gen then cx.tokens = gen.batch * gen.max_new_tokens end
  if gen and next(cx.gen.cache) == nil then
    error(("training.generate: %s's attention does not run DynamicCache's update (not modelled for this family)")
          :format(fam.model_type or "this model"), 0)
  end
  if dpo and not cx.run.dpo_head then
    error(("training.dpo: %s's forward does not run TRL's fused head (not modelled for this family)")
          :format(fam.model_type or "this model"), 0)
  end
  if attention == "flex" and not (cx.run.flex_taken and cx.run.flex_mask_made) then
    error(("attention = flex: %s's %s (not modelled for this family)"):format(fam.model_type or "this model",
          cx.run.flex_taken and "forward does not build flex attention's BlockMask"
          or "attention does not run transformers' flex_attention_forward"), 0)
  end
  if mask_4d and not cx.run.mask_4d_taken then
    error(("training.attention_mask = block_diagonal: %s's forward does not take a 4-D mask as given (not modelled "
           .. "for this family)"):format(fam.model_type or "this model"), 0)
  end
  if t.data_batch and (t.data_batch.padded or t.data_batch.packed) and not cx.run.data_mask_made then
    error(("training.data: %s's forward does not build the mask a %s batch needs (not modelled for this family)")
          :format(fam.model_type or "this model", t.data_batch.padded and "padded" or "packed"), 0)
  end
  cx.model_name = mc.name
  return loss, root, mc, forward
end

return M
