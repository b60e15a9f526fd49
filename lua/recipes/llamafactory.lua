-- recipes/llamafactory.lua: a LLaMA-Factory training YAML (`llamafactory-cli train FILE`) read as
-- LLaMA-Factory reads it (main: src/llamafactory/hparams/{model,data,finetuning}_args.py and
-- parser.py for the keys, their defaults and compute_dtype; model/loader.py, model/patcher.py,
-- model/adapter.py (cast_trainable_params_to_fp32), model/model_utils/checkpointing.py and
-- quantization.py for what loading does with them), into a vrsim scenario. Its training keys are
-- transformers' Seq2SeqTrainingArguments: recipes/hf_args.lua.
local F = {}

local H = require "recipes.hf_args"
local TOOL = "llamafactory"

function F.detect(doc)
  return doc.stage ~= nil or doc.finetuning_type ~= nil or doc.cutoff_len ~= nil
      or doc.lora_target ~= nil or doc.template ~= nil
end

-- Keys that change neither memory nor time: data and its preprocessing, templates, hub tokens,
-- loss plots and trackers.
local NOT_READ = {
  "trust_remote_code", "model_revision", "cache_dir", "use_fast_tokenizer", "split_special_tokens",
  "hf_hub_token", "ms_hub_token", "om_hub_token", "print_param_status", "low_cpu_mem_usage",
  "dataset", "eval_dataset", "dataset_dir", "media_dir", "template", "train_on_prompt",
  "mask_history", "streaming", "buffer_size", "mix_strategy", "interleave_probs",
  "overwrite_cache", "preprocessing_batch_size", "preprocessing_num_workers", "max_samples",
  "eval_num_beams", "ignore_pad_token_for_loss", "val_size", "eval_on_each_dataset",
  "tokenized_path", "data_shared_file_system", "default_system", "enable_thinking", "tool_format",
  "plot_loss", "compute_accuracy", "disable_shuffling", "early_stopping_steps",
  "include_effective_tokens_per_second", "use_swanlab", "swanlab_project", "swanlab_workspace",
  "swanlab_run_name", "swanlab_mode", "swanlab_api_key", "swanlab_logdir", "use_rslora",
  "ray_run_name", "ray_storage_path", "ray_num_workers", "resources_per_worker",
  "placement_strategy", "infer_backend", "infer_dtype", "use_kv_cache", "offload_folder",
}

-- flash_attn (AttentionFunction) -> training.attention; auto is transformers' default (sdpa)
local ATTENTION = { auto = "sdpa", sdpa = "sdpa", disabled = "eager", fa2 = "flash" }

-- packing (data_args.py, parser.py, processor/supervised.py and pretrain.py, collator.py): every
-- row is cutoff_len tokens. sft packs each sequence whole, greedy knapsack into cutoff_len - 1
-- (data_args.py lowers cutoff_len by one when packing is set), and pads the row to the original
-- cutoff_len; pt (packing on by default) concatenates the texts and cuts blocks of cutoff_len, or
-- of cutoff_len - 1 where packing: true is written. The training collator pads a batch to a
-- multiple of 8 (zeros in the attention_mask).
--   Without neat_packing the row's attention_mask is all ones, so transformers builds no mask: a
--   causal mask over the whole row, its sequences attending across their boundaries (under
--   sdpa), which is the fixed-length run.
--   With neat_packing (sft only: parser.py raises otherwise; it sets packing) the row's
--   attention_mask numbers its sequences (1, 2, ..., 0 for the padding) and
--   SFTDataCollatorWith4DAttentionMask turns it into attention that stays within each sequence:
--   under sdpa or eager prepare_4d_attention_mask's (b, 1, L, L) additive mask in the compute
--   dtype, which transformers takes as given (training.attention_mask = block_diagonal); under
--   fa2 one row a micro-batch (the collator asserts it), its padding cut off and the mask
--   dropped, so transformers runs flash attention per sequence from the position_ids.
local function read_packing(r, d, t, notes, stage, cutoff, neat)
  local row = (stage == "pt" and r:has(d, "packing")) and cutoff - 1 or cutoff
  if row % 8 ~= 0 then
    r:fail(d, r:has(d, "cutoff_len") and "cutoff_len" or "packing",
           ("packed rows of %d tokens, which the collator pads to a multiple of 8: those rows' padded mask is "
            .. "not modelled here (a cutoff_len whose packed rows are a multiple of 8 is)"):format(row))
  end
  t.seq = row
  local how = stage == "pt" and ("the texts concatenated and cut into blocks of %d"):format(row)
    or ("sequences packed whole (greedy knapsack) into rows padded to %d"):format(row)
  if neat and t.attention == "flash" then
    if t.micro_batch ~= 1 then
      r:fail(d, "per_device_train_batch_size", ("%d with neat_packing under fa2: LLaMA-Factory's collator asserts "
             .. "one row a micro-batch (\"bsz should be 1 for neat packing\")"):format(t.micro_batch))
    end
    -- _unpad_packed_features: the padding cut off, at least one token (the knapsack holds
    -- cutoff_len - 1 at most)
    t.seq = row - 1
    notes[#notes + 1] = ("llamafactory neat_packing under fa2: sequences packed whole (greedy knapsack) into one row "
      .. "a micro-batch, its padding cut off: at most %d tokens, simulated full; transformers attends each sequence "
      .. "alone from the position_ids: vrsim prices the attention over the whole row as one sequence, its most "
      .. "(the data set's lengths are not read)"):format(row - 1)
    return
  end
  if neat then
    t.attention_mask = "block_diagonal"
    notes[#notes + 1] = ("llamafactory neat_packing: %s; the collator's (%d, 1, %d, %d) block-diagonal mask in the "
      .. "compute dtype rides with the batch, and %s runs its masked kernel over every block"):format(how, t.micro_batch,
      row, row, t.attention == "eager" and "eager attention" or "SDPA")
    return
  end
  notes[#notes + 1] = ("llamafactory packing: %s; the attention_mask is all ones, so each row is one causal "
                       .. "sequence to the model (%s); the collator's position_ids input (%d x %d int64) is not simulated")
    :format(how, t.attention == "flash" and t.micro_batch == 1 and stage ~= "pt"
               and "under fa2 with one row a micro-batch transformers attends each packed sequence alone: "
                   .. "vrsim prices the attention over the whole row, its most"
               or "its sequences attend across their boundaries",
             t.micro_batch, row)
end

function F.scenario(r, opts)
  local d = r.doc
  local notes = {}
  local scn = { hardware = { gpu = opts.gpu, count = opts.count or 1 }, model = {}, training = {} }
  local t = scn.training

  local m = r:get(d, "model_name_or_path", "string")
  if not opts.model_config then
    if not m then r:fail(d, "model_name_or_path", "missing: LLaMA-Factory needs the model to train") end
    scn.model.config = H.model_config(r, d, "model_name_or_path", m)
  end
  for _, k in ipairs({ "adapter_name_or_path", "adapter_folder" }) do
    if r:get(d, k, "string") then r:fail(d, k, "training on from a saved adapter is not modelled") end
  end

  -- the stage: sft (and pt without packing: the same causal-LM loss over every token)
  local stage = r:get(d, "stage", "string", "sft")
  local packing = r:get(d, "packing", "boolean")
  if packing == nil then packing = stage == "pt" end -- parser.py: packing defaults on for pt
  if stage ~= "sft" and stage ~= "pt" then
    r:fail(d, "stage", ("'%s' is not modelled (read: sft, pt): its reference or reward model and paired "
           .. "batches are not simulated"):format(stage))
  end
  local neat = r:get(d, "neat_packing", "boolean", false)
  if neat then
    if stage ~= "sft" then r:fail(d, "neat_packing", "true outside stage sft: LLaMA-Factory raises (parser.py)") end
    packing = true -- data_args.py: neat_packing sets packing
  end

  -- the method
  local ft = r:get(d, "finetuning_type", "string", "lora")
  if ft ~= "lora" and ft ~= "full" then
    r:fail(d, "finetuning_type", ("'%s' is not modelled (read: lora, full)"):format(ft))
  end
  local lora = ft == "lora"
  local rank = r:get(d, "lora_rank", "integer", 8)
  local alpha = r:get(d, "lora_alpha", { "integer", "number" })
  local dropout = r:get(d, "lora_dropout", "number", 0.0)
  local target = r:get(d, "lora_target", "string", "all")
  if r:get(d, "additional_target", "string") then
    r:fail(d, "additional_target", "modules trained beside LoRA (modules_to_save) are not modelled")
  end
  if lora then
    local tg = {}
    for w in target:gmatch("[^,%s]+") do tg[#tg + 1] = w end
    -- "all": find_all_linear_modules, every Linear but the output layer
    local targets = (#tg == 1 and tg[1] == "all") and "all-linear" or tg
    if #tg == 0 then r:fail(d, "lora_target", "names no module") end
    t.lora = { r = rank, alpha = alpha or rank * 2, dropout = dropout, targets = targets }
  end
  if r:get(d, "pure_bf16", "boolean") then
    r:fail(d, "pure_bf16", "trainable parameters kept in bf16 (no fp32 upcast) are not modelled")
  end

  -- quantization (model_utils/quantization.py: bitsandbytes, nf4, double quantization, the
  -- packed weights stored in the compute dtype)
  local qbit = r:get(d, "quantization_bit", "integer")
  local qm = r:get(d, "quantization_method", "string", "bnb")
  local qt = r:get(d, "quantization_type", "string", "nf4")
  local dq = r:get(d, "double_quantization", "boolean", true)
  if qbit then
    if qm ~= "bnb" then r:fail(d, "quantization_method", ("'%s' is not modelled (read: bnb)"):format(qm)) end
    if not lora then r:fail(d, "quantization_bit", "quantized weights need finetuning_type: lora") end
    if qbit == 4 then
      if qt ~= "nf4" then r:fail(d, "quantization_type", ("'%s' is not modelled (read: nf4)"):format(qt)) end
      if not dq then r:fail(d, "double_quantization", "false is not modelled: vrsim's NF4 is double-quantized") end
      t.quant, t.quant_storage = "nf4", "bf16"
    elseif qbit == 8 then
      t.quant = "int8"
    else
      r:fail(d, "quantization_bit", ("%d is not modelled (read: 4, 8)"):format(qbit))
    end
  end

  -- the TrainingArguments keys; LLaMA-Factory enables checkpointing itself (below)
  local prec, fsdp = H.read(r, d, t, scn, opts, notes, { bf16 = false, checkpointing = false }, lora, TOOL)
  if prec.fp16 then r:fail(d, "fp16", "fp16 training (GradScaler, fp16 weights) is not modelled by this reader: use bf16") end
  -- compute_dtype: bf16 loads the weights in bf16 (config.torch_dtype set to it, from_pretrained
  -- "auto"); adapter.py then up-casts the trainable parameters to fp32 unless ZeRO-3 (which keeps
  -- its own fp32 master) or quantization
  if lora then
    if not prec.bf16 then r:fail(d, "finetuning_type", "LoRA without bf16: true is not modelled (set bf16: true)") end
    t.precision = "lora_bf16"
  elseif fsdp then
    t.precision = prec.bf16 and "mp_fp32" or "fp32"
  elseif t.deepspeed then
    t.precision = prec.bf16 and "bf16" or "fp32" -- the engine runs the module in the JSON's dtype
  else
    -- bf16 weights up-cast to fp32 trainable parameters, the Trainer's bf16 autocast over them
    t.precision = prec.bf16 and "amp_bf16" or "fp32"
    if prec.bf16 then
      notes[#notes + 1] = "llamafactory full fine-tuning: the weights load in bf16 and are up-cast to fp32 "
          .. "(cast_trainable_params_to_fp32); the load's bf16 copies are not simulated, the run is"
    end
  end
  t.build = "direct"

  -- gradient checkpointing: on unless disable_gradient_checkpointing; use_reentrant_gc defaults true
  local off = r:get(d, "disable_gradient_checkpointing", "boolean", false)
  local reentrant = r:get(d, "use_reentrant_gc", "boolean", true)
  if not off then t.checkpointing = true end
  if t.checkpointing and reentrant and not fsdp then
    r:fail(d, r:has(d, "use_reentrant_gc") and "use_reentrant_gc" or "disable_gradient_checkpointing",
           "LLaMA-Factory's default reentrant gradient checkpointing (use_reentrant_gc: true) is not modelled: "
           .. "set use_reentrant_gc: false (non-reentrant), or disable_gradient_checkpointing: true")
  end
  if r:get(d, "use_unsloth_gc", "boolean") then r:fail(d, "use_unsloth_gc", "Unsloth's offloaded checkpointing is not modelled") end

  -- attention
  local fa = r:get(d, "flash_attn", "string", "auto")
  local a = ATTENTION[fa]
  if not a then r:fail(d, "flash_attn", ("'%s' is not modelled (read: auto, sdpa, fa2, disabled)"):format(fa)) end
  t.attention = a
  if fa == "fa2" then
    notes[#notes + 1] = "llamafactory flash_attn: fa2 (the flash-attn package) simulated as SDPA's flash backend, "
        .. "the same FlashAttention-2 kernel inside PyTorch"
  end

  -- the rows: cutoff_len (the collator pads each batch to its longest row), or packed rows
  local cutoff = r:get(d, "cutoff_len", "integer", 2048)
  t.seq = r:field(d, "cutoff_len", "training", "seq", cutoff)
  if packing then
    read_packing(r, d, t, notes, stage, cutoff, neat)
  else
    notes[#notes + 1] = ("llamafactory rows simulated at cutoff_len (%d tokens), the longest a batch can be: "
                         .. "the collator pads each batch to its longest row"):format(t.seq)
  end
  for _, k in ipairs({ "upcast_layernorm", "upcast_lmhead_output", "enable_liger_kernel", "use_unsloth",
                       "shift_attn", "resize_vocab", "train_from_scratch" }) do
    if r:get(d, k, "boolean") then r:fail(d, k, "not modelled") end
  end
  r:not_read(d, NOT_READ)
  r:finish(d, TOOL)
  return scn, notes
end

return F
