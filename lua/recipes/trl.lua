-- recipes/trl.lua: a TRL SFT config (the YAML `trl sft --config` reads, or SFTConfig as JSON) and
-- a plain transformers TrainingArguments JSON, read as TRL reads them (trl main:
-- trl/trainer/sft_config.py SFTConfig, trl/trainer/base_config.py, trl/trainer/model_config.py
-- ModelConfig, trl/scripts/sft.py, trl/trainer/sft_trainer.py) into a vrsim scenario. The
-- TrainingArguments keys they share are recipes/hf_args.lua's.
--
-- Two formats: "trl" (SFTConfig's defaults: gradient_checkpointing on, bf16 on unless fp16,
-- max_length 1024) and "hf_trainer" (TrainingArguments' own: checkpointing and bf16 off; the
-- sequence is the script's, given with --set seq=N).
local T = {}

local H = require "recipes.hf_args"

-- Keys only TRL's configs hold (SFTConfig, ModelConfig, ScriptArguments): a file with one is a
-- TRL config, not a bare TrainingArguments.
local TRL_KEYS = { "model_name_or_path", "max_length", "packing", "padding_free", "use_peft",
                   "dataset_name", "dataset_text_field", "completion_only_loss", "assistant_only_loss",
                   "model_init_kwargs", "dtype", "torch_dtype" }
-- Other trainers' own keys: a file with one is theirs (LLaMA-Factory's, axolotl's)
local LF_KEYS = { "stage", "finetuning_type", "cutoff_len", "template", "lora_target", "lora_rank",
                  "quantization_bit", "base_model", "base_model_config", "micro_batch_size", "sequence_len" }

local function has_any(doc, keys)
  for _, k in ipairs(keys) do if doc[k] ~= nil then return true end end
  return false
end

-- (a torchtune recipe's model is a section with a _component_: recipes/torchtune.lua)
function T.detect_trl(doc)
  return has_any(doc, TRL_KEYS) and not has_any(doc, LF_KEYS) and type(doc.model) ~= "table"
end

function T.detect_trainer(doc)
  return doc.per_device_train_batch_size ~= nil and not has_any(doc, TRL_KEYS) and not has_any(doc, LF_KEYS)
      and type(doc.model) ~= "table"
end

-- TRL keys that change neither memory nor time: data and its preparation, chat templates, hub
local NOT_READ = {
  "model_revision", "trust_remote_code", "dataset_name", "dataset_config", "dataset_train_split",
  "dataset_test_split", "dataset_streaming", "datasets", "chat_template_path", "dataset_text_field",
  "dataset_kwargs", "dataset_num_proc", "eos_token", "pad_token", "truncation_mode",
  "shuffle_dataset", "eval_packing", "completion_only_loss", "assistant_only_loss",
  "lora_task_type", "use_rslora", "ignore_bias_buffers",
}

-- The CLI's env mapping: variables set before the run. The allocator's is the one that changes
-- memory; it is vrsim's --alloc-conf.
local function read_env(r, d, tool)
  local env = r:get(d, "env", "table")
  if not env then return end
  for k in pairs(r.lines[env] or {}) do
    if k == "PYTORCH_CUDA_ALLOC_CONF" or k == "PYTORCH_ALLOC_CONF" then
      r:fail(env, k, "the allocator's settings: give them as --alloc-conf (vrsim reads them there)", "env.")
    end
  end
  local keys = {}
  for k in pairs(r.lines[env] or {}) do if k ~= 0 then keys[#keys + 1] = k end end
  table.sort(keys)
  r:not_read(env, keys, "env.")
  r:finish(env, tool, "env.")
end

-- The model: model_name_or_path (a local folder), or --set model.config.
local function read_model(r, d, scn, opts, tool)
  local m = r:get(d, "model_name_or_path", "string")
  if opts.model_config then return end
  if not m then
    r:fail(d, tool == "trl" and "model_name_or_path" or "per_device_train_batch_size",
           ("%s names no model: give it with --set model.config=PATH (its config.json)"):format(
           tool == "trl" and "the config" or "a TrainingArguments file"))
  end
  scn.model.config = H.model_config(r, d, "model_name_or_path", m)
end

-- LoRA and bitsandbytes quantization: ModelConfig's get_peft_config and get_quantization_config.
local function read_peft(r, d, t, notes)
  local use_peft = r:get(d, "use_peft", "boolean", false)
  local lr = r:get(d, "lora_r", "integer", 16)
  local la = r:get(d, "lora_alpha", { "integer", "number" }, 32)
  local ldr = r:get(d, "lora_dropout", "number", 0.05)
  local ltm = r:get(d, "lora_target_modules", { "string", "table" })
  for _, k in ipairs({ "lora_target_parameters", "lora_modules_to_save" }) do
    local v = r:get(d, k, { "string", "table" })
    if v ~= nil and (type(v) ~= "table" or #v > 0) then r:fail(d, k, "not modelled (vrsim trains LoRA on Linear modules alone)") end
  end
  if r:get(d, "use_dora", "boolean", false) then r:fail(d, "use_dora", "DoRA is not modelled") end
  local in4 = r:get(d, "load_in_4bit", "boolean", false)
  local in8 = r:get(d, "load_in_8bit", "boolean", false)
  local qt = r:get(d, "bnb_4bit_quant_type", "string", "nf4")
  local nested = r:get(d, "use_bnb_nested_quant", "boolean", false)
  local storage = r:get(d, "bnb_4bit_quant_storage", "string")
  if in4 and in8 then r:fail(d, "load_in_8bit", "and load_in_4bit are both set (TRL: \"You can't use 8 bit and 4 bit precision at the same time\")") end
  if (in4 or in8) and not use_peft then
    r:fail(d, in4 and "load_in_4bit" or "load_in_8bit", "quantized weights without use_peft: true cannot be trained")
  end
  if in4 then
    if qt ~= "nf4" then r:fail(d, "bnb_4bit_quant_type", ("'%s' is not modelled (read: nf4)"):format(qt)) end
    if not nested then
      local k = r:has(d, "use_bnb_nested_quant") and "use_bnb_nested_quant" or "load_in_4bit"
      r:fail(d, k, "NF4 without use_bnb_nested_quant (each 64-weight block's absmax in fp32, TRL's default) "
             .. "is not modelled: vrsim's NF4 is double-quantized (set use_bnb_nested_quant: true)")
    end
    t.quant = "nf4"
    local st = { bfloat16 = "bf16", float16 = "fp16", float32 = "fp32", uint8 = "uint8" }
    if storage and not st[storage] then
      r:fail(d, "bnb_4bit_quant_storage", ("'%s' is not modelled (read: uint8, bfloat16, float16, float32)"):format(storage))
    end
    -- BitsAndBytesConfig's default storage is uint8
    t.quant_storage = storage and st[storage] or "uint8"
  elseif in8 then
    t.quant = "int8"
  end
  if use_peft then
    local lora = { r = lr, alpha = la, dropout = ldr }
    if type(ltm) == "string" then ltm = (ltm == "all-linear") and ltm or { ltm } end
    if type(ltm) == "table" and #ltm == 1 and ltm[1] == "all-linear" then ltm = "all-linear" end
    if type(ltm) == "table" then
      for i, m in ipairs(ltm) do
        if type(m) ~= "string" then r:fail(d, "lora_target_modules", ("item %d is not a module name"):format(i)) end
      end
    end
    lora.targets = ltm -- nil: peft's default target modules for the model type
    t.lora = lora
    if in8 then
      notes[#notes + 1] = "trl: SFTTrainer's cast of the adapters of an 8-bit model to bf16 is not simulated"
    end
  end
  return use_peft
end

-- The scenario of the config read by r (opts as recipes/load.lua's); tool: "trl" or "hf_trainer".
local function scenario(r, opts, tool)
  local d = r.doc
  local notes = {}
  local scn = { hardware = { gpu = opts.gpu, count = opts.count or 1 }, model = {}, training = {} }
  local t = scn.training
  read_model(r, d, scn, opts, tool)
  local mc = scn.model.config or opts.model_config

  -- the load dtype: ModelConfig.dtype (torch_dtype before TRL 0.20), or model_init_kwargs' dtype;
  -- SFTTrainer loads in float32 when none is given
  local mik = r:get(d, "model_init_kwargs", "table")
  local dkey = r:has(d, "dtype") and "dtype" or "torch_dtype"
  local dval = r:get(d, "dtype", "string")
  dval = r:get(d, "torch_dtype", "string", dval)
  local attn = r:get(d, "attn_implementation", "string")
  local dt_t, dt_k = d, dkey
  if mik then
    local P = "model_init_kwargs."
    r:not_read(mik, { "revision", "trust_remote_code" }, P)
    local md = r:get(mik, "dtype", "string", nil, P)
    md = r:get(mik, "torch_dtype", "string", md, P)
    if md then dval, dt_t, dt_k = md, mik, r:has(mik, "dtype") and "dtype" or "torch_dtype" end
    attn = r:get(mik, "attn_implementation", "string", attn, P)
    if r:get(mik, "use_cache", "boolean") ~= nil then
      -- from_pretrained puts it on the config, then the Trainer's finalize replaces it
      notes[#notes + 1] = tool .. " model_init_kwargs.use_cache: the Trainer sets model.config.use_cache = "
          .. "args.use_cache afterwards (use_cache, False by default), which the run follows"
    end
    r:finish(mik, tool, P)
  end
  dval = dval or "float32"
  local dtype = H.load_dtype(dval, mc)
  if not dtype then r:fail(dt_t, dt_k, ("'%s' is not a dtype vrsim reads (float32, bfloat16, float16, auto)"):format(dval)) end

  local lora = tool == "trl" and read_peft(r, d, t, notes) or false
  local defaults = tool == "trl" and { bf16 = true, checkpointing = true } or { bf16 = false, checkpointing = false }
  local prec, fsdp = H.read(r, d, t, scn, opts, notes, defaults, lora, tool)
  t.precision = H.precision(r, dt_t, dt_k, dtype, prec.bf16, prec.fp16, lora)
  -- opts.launch.fsdp: the launcher's FSDP plugin (recipes/launch.lua), read as the file's own
  if fsdp or (opts.launch and opts.launch.fsdp) then
    if lora and not fsdp then
      r:fail(d, "use_peft", "LoRA under FSDP2 (the accelerate config's) is not modelled (accelerate up-casts "
             .. "the trainable adapters to fp32 shards beside the frozen base)")
    end
    -- fsdp2_prepare_model: trainable parameters up-cast to fp32 shards, bf16 compute under bf16
    if prec.fp16 then r:fail(d, "fp16", "fp16 under FSDP2 is not modelled") end
    t.precision = prec.bf16 and "mp_fp32" or "fp32"
  end
  t.build = "direct" -- from_pretrained(dtype=...)
  -- SFTTrainer (TRL 1.16) on a 4-bit model: no prepare_model_for_kbit_training; the adapters cast
  -- to bf16 after get_peft_model (strategies/kbit.lua "trl"), under the Trainer's bf16 autocast
  if lora and t.quant == "nf4" then
    if ((t.strategy or "none") == "none" or t.strategy == "ddp") and not t.deepspeed and not t.compile then
      t.kbit_prepare = "trl"
    else
      notes[#notes + 1] = ("trl: SFTTrainer's cast of a 4-bit model's adapters to bf16 is not simulated under %s")
                          :format(t.deepspeed and "DeepSpeed" or t.compile and "torch_compile" or t.strategy)
    end
  end

  -- attention: ModelConfig.attn_implementation (None: transformers' default, sdpa)
  if attn then
    local a = H.ATTENTION[attn]
    if not a then r:fail(d, "attn_implementation", ("'%s' is not modelled (read: eager, sdpa, flash_attention_2, flex_attention)"):format(attn)) end
    t.attention = a
    if attn == "flash_attention_2" then
      notes[#notes + 1] = tool .. " flash_attention_2 (the flash-attn package) simulated as SDPA's flash backend, "
          .. "the same FlashAttention-2 kernel inside PyTorch"
    end
  else
    t.attention = "sdpa"
  end

  -- the sequence: SFTConfig.max_length (rows are truncated to it; the collator pads each batch to
  -- its longest row, so max_length is the longest a step can be)
  if tool == "trl" then
    local ml = r:get(d, "max_length", "integer", 1024)
    if r:has(d, "max_length") and d.max_length == nil then
      r:fail(d, "max_length", "null (no truncation): the rows' length is the data's; give max_length")
    end
    local packing = r:get(d, "packing", "boolean", false)
    local strategy = r:get(d, "packing_strategy", "string", "bfd")
    if packing and strategy ~= "bfd" and strategy ~= "bfd_split" and strategy ~= "wrapped" then
      r:fail(d, "packing_strategy", ("'%s' is not one of TRL's (bfd, bfd_split, wrapped)"):format(strategy))
    end
    local padding_free = r:get(d, "padding_free", "boolean", false)
    if padding_free and packing and strategy == "wrapped" then
      r:fail(d, "padding_free", "padding-free beside wrapped packing (TRL warns against it: the rows cross "
             .. "sequence boundaries) is not modelled")
    end
    if padding_free and not packing then
      -- each micro-batch's sequences in one row, as long as the data makes them (TRL does not cut
      -- them to max_length without packing): training.data's padding_free batching under TRL's
      -- collator, over the data set's lengths (--set training.data.lengths)
      t.data = r:field(d, "padding_free", "training", "data", { batching = "padding_free", collator = "trl" })
      notes[#notes + 1] = "trl padding_free: each micro-batch's sequences flattened into one row, as long as "
          .. "the data set's lengths make it (max_length is not enforced without packing)"
    elseif packing and strategy ~= "wrapped" then
      -- pack_dataset(dataset, max_length, strategy) (trl 1.16 SFTTrainer._prepare_dataset), then
      -- the padding-free collator SFTTrainer turns on for bfd: training.data's packed batching,
      -- over the data set's lengths, which the config does not hold (--set training.data.lengths)
      if r:get(d, "shuffle_dataset", "boolean", false) then
        r:fail(d, "shuffle_dataset", "shuffled before packing: which sequences share a row is the shuffle's "
               .. "(not modelled); vrsim packs the lengths in their order")
      end
      local np = r:get(d, "dataset_num_proc", "integer")
      if np and np > 1 then
        r:fail(d, "dataset_num_proc", ("%d processes pack a shard each: the rows differ from one "
               .. "process's (not modelled)"):format(np))
      end
      t.data = r:field(d, "packing", "training", "data", { batching = strategy, pack_length = ml })
      notes[#notes + 1] = ("trl packing (%s): the data set's sequences packed into rows of max_length (%d "
                           .. "tokens), each micro-batch's rows flattened into one (padding_free)"):format(strategy, ml)
    else
      t.seq = r:field(d, "max_length", "training", "seq", ml)
      notes[#notes + 1] = packing
        and ("trl packing (wrapped): the tokens cut into rows of max_length (%d tokens) across sequence "
             .. "boundaries, each row attended as one sequence"):format(t.seq)
        or ("trl rows simulated at max_length (%d tokens), the longest a batch can be: the "
            .. "collator pads each batch to its longest row"):format(t.seq)
    end
    if r:get(d, "pad_to_multiple_of", "integer") then
      if t.data then
        r:fail(d, "pad_to_multiple_of", "the flattened row padded to a multiple (its labels -100) is not modelled")
      end
      r:not_read(d, { "pad_to_multiple_of" })
    end
    local lt = r:get(d, "loss_type", "string", "nll")
    if lt ~= "nll" then r:fail(d, "loss_type", ("'%s' is not modelled (read: nll)"):format(lt)) end
    if r:get(d, "activation_offloading", "boolean", false) then
      r:fail(d, "activation_offloading", "TRL's activation offloading is not modelled by this reader")
    end
    r:get(d, "gradient_checkpointing_use_reentrant", "boolean")
    if d.gradient_checkpointing_use_reentrant then
      r:fail(d, "gradient_checkpointing_use_reentrant", "reentrant checkpointing is not modelled")
    end
    if not r:get(d, "use_liger_kernel", "boolean") then
      notes[#notes + 1] = "trl SFTTrainer's per-step metrics (entropy and token accuracy over the logits, "
          .. "under no_grad after the forward) are not simulated: the peak may be higher than shown"
    end
  else
    notes[#notes + 1] = "a TrainingArguments file holds no sequence length: the script's is vrsim's default "
        .. "unless --set seq=N gives it"
  end
  read_env(r, d, tool)
  r:not_read(d, NOT_READ)
  r:finish(d, tool)
  return scn, notes, prec
end

T.detect = T.detect_trl
function T.scenario(r, opts) return scenario(r, opts, "trl") end
function T.trainer_scenario(r, opts) return scenario(r, opts, "hf_trainer") end
return T
