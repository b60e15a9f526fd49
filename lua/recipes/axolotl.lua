-- recipes/axolotl.lua: an axolotl YAML config read as axolotl reads it (axolotl main,
-- src/axolotl/utils/schemas/*.py for the keys and their defaults; utils/config/__init__.py
-- resolve_dtype and normalize_config; loaders/model.py and loaders/adapter.py for what loading
-- does with them), into a vrsim scenario.
--
-- Read: base_model / base_model_config (a local folder or config.json: vrsim never reaches the
-- network), adapter (lora, qlora), load_in_4bit / load_in_8bit, lora_r / lora_alpha /
-- lora_dropout / lora_target_modules / lora_target_linear, sequence_len, pad_to_sequence_len,
-- sample_packing (with flash attention), micro_batch_size, gradient_accumulation_steps, batch_size,
-- gradient_checkpointing (+ _kwargs), bf16 / fp16 / tf32 / bfloat16 / float16, optimizer,
-- attn_implementation / flash_attention / sdp_attention / eager_attention, deepspeed, fsdp /
-- fsdp_config / fsdp_version (FSDP2 of a full fine-tuning). The rest of the keys that change
-- memory or time are refused by name.

local H = require "recipes.hf_args"

local A = {}

local TOOL = "axolotl"
local read_fsdp, read_packing -- below

-- Whether a YAML document looks like an axolotl config.
function A.detect(doc)
  return doc.base_model ~= nil or doc.base_model_config ~= nil or doc.micro_batch_size ~= nil
      or doc.sequence_len ~= nil
end

-- Keys that change neither the memory nor the time of a training step: data, paths, logging,
-- hub and tracker settings, learning-rate schedule, evaluation and saving cadence.
local NOT_READ = {
  "base_model_ignore_patterns", "model_type", "tokenizer_type", "tokenizer_config",
  "tokenizer_use_fast", "tokenizer_legacy", "trust_remote_code", "revision_of_model",
  "datasets", "test_datasets", "dataset_prepared_path", "push_dataset_to_hub", "dataset_processes",
  "dataset_num_proc", "dataset_exact_deduplication", "shuffle_merged_datasets", "val_set_size",
  "chat_template", "chat_template_jinja", "default_system_message", "train_on_inputs",
  "output_dir", "hub_model_id", "hub_strategy", "hf_use_auth_token", "hub_private_repo",
  "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_run_id", "wandb_log_model",
  "wandb_mode", "mlflow_tracking_uri", "mlflow_experiment_name", "use_tensorboard",
  "num_epochs", "max_steps", "learning_rate", "lr_scheduler", "lr_scheduler_kwargs",
  "cosine_min_lr_ratio", "warmup_steps", "warmup_ratio", "weight_decay", "adam_beta1",
  "adam_beta2", "adam_epsilon", "max_grad_norm", "logging_steps", "evals_per_epoch", "eval_steps",
  "saves_per_epoch", "save_steps", "save_strategy", "save_total_limit", "save_safetensors",
  "seed", "strict", "debug", "group_by_length", "early_stopping_patience", "resume_from_checkpoint",
  "auto_resume_from_checkpoints", "local_rank", "logging_dir", "eval_table_size",
  "eval_max_new_tokens", "eval_sample_packing", "eval_batch_size", "loss_watchdog_threshold",
  "loss_watchdog_patience", "lora_model_dir", "save_first_step", "include_tokens_per_second",
}

-- axolotl passes its optimizer on as HF TrainingArguments.optim: the names hf_args reads.
local OPTIMIZERS = H.OPTIMIZERS

-- attn_implementation (and the deprecated booleans that set it) -> training.attention
-- (flex_attention: transformers' own flex path; axolotl's flex patches are not applied in 0.18,
-- patch_manager.py's _apply_flex_attention_patches being commented out)
local ATTENTION = { eager = "eager", sdpa = "sdpa", flash_attention_2 = "flash", flex_attention = "flex" }

-- The model's config.json for a base_model / base_model_config value v (a folder or a .json).
local function model_config(r, t, key, v)
  local path = v:match("%.json$") and v or (v:gsub("/+$", "") .. "/config.json")
  local ok, msg = pcall(require("vrsim.core").read_config, path)
  if ok then return path end
  if tostring(msg):find("not found", 1, true) or tostring(msg):find("cannot read", 1, true) then
    r:fail(t, key, ("'%s' is not a local folder holding config.json (a Hugging Face Hub id?): vrsim "
           .. "never reaches the network; download the model's config.json (huggingface-cli download %s "
           .. "config.json --local-dir DIR), then set base_model_config: DIR, or give --set "
           .. "model.config=PATH"):format(v, v))
  end
  r:fail(t, key, tostring(msg))
end

-- bf16: "auto" as resolve_dtype takes it: on when the GPU has bf16 (compute capability 8.0 and
-- up: torch.cuda.is_bf16_supported), and then fp16 off.
local function gpu_has_bf16(gpu)
  local plan = require "vrsim.plan"
  local name = plan.resolve_gpu(gpu)
  local g = name and require("hw.gpus")[name]
  return g and g.compute_capability >= 8.0
end

-- FSDP: fsdp_config (its keys with or without the fsdp_ prefix, as axolotl accepts them), the
-- legacy fsdp list, fsdp_version at the top or inside fsdp_config (validation.py
-- _resolve_fsdp_version: 1 when neither says). Only FSDP2 of the whole model is modelled. Returns
-- nil without FSDP, else { zero = knobs, checkpointing = bool }.
local FSDP_NOT_READ = { "transformer_layer_cls_to_wrap", "state_dict_type", "final_state_dict_type",
                        "sync_module_states", "use_orig_params", "cpu_offload_pin_memory" }
read_fsdp = function(r, d, adapter, notes)
  local list = r:get(d, "fsdp", { "table", "string" })
  local fc = r:get(d, "fsdp_config", "table")
  local top = r:get(d, "fsdp_version", "integer")
  if not list and not fc then
    if top then r:fail(d, "fsdp_version", "without fsdp_config: no FSDP to version") end
    return nil
  end
  fc = fc or {}
  local P = "fsdp_config."
  -- a key of fsdp_config by its name with or without the fsdp_ prefix
  local function key(name)
    if r:has(fc, name) and r:has(fc, "fsdp_" .. name) then r:fail(fc, name, "given twice (with and without fsdp_)", P) end
    return r:has(fc, "fsdp_" .. name) and ("fsdp_" .. name) or name
  end
  local vkey = r:has(fc, "version") and "version" or key("version")
  local version = top or r:get(fc, vkey, "integer", 1, P)
  if top then r:get(fc, vkey, "integer", nil, P) end
  local where_t, where_k = top and d or fc, top and "fsdp_version" or vkey
  if version ~= 2 then
    r:fail(where_t, where_k, ("%d: FSDP1 (FullyShardedDataParallel) is not modelled; vrsim models "
           .. "FSDP2 (fully_shard): fsdp_version: 2"):format(version), where_t == fc and P or nil)
  end
  if adapter then
    r:fail(d, "adapter", "LoRA under FSDP2 is not modelled (accelerate up-casts the trainable adapters to "
           .. "fp32 shards beside the frozen base)")
  end
  local z, raf = {}, true
  if type(list) == "string" then list = { list } end
  for i, w in ipairs(list or {}) do
    if w == "full_shard" then raf = true
    elseif w == "shard_grad_op" then raf = false
    elseif w == "offload" then z.offload_param, z.offload_optimizer = "cpu", "cpu"
    elseif w ~= "auto_wrap" then
      r:fail(d, "fsdp", ("item %d, '%s', is not modelled (read: full_shard, shard_grad_op, offload, auto_wrap)"):format(i, tostring(w)))
    end
  end
  local ss = r:get(fc, key("sharding_strategy"), "string", nil, P)
  if ss == "SHARD_GRAD_OP" then raf = false
  elseif ss and ss ~= "FULL_SHARD" then r:fail(fc, key("sharding_strategy"), ("'%s' is not modelled"):format(ss), P) end
  local rk = key("reshard_after_forward")
  local rv = r:get(fc, rk, "boolean", nil, P)
  if rv ~= nil then raf = rv end
  z.raf = raf
  if r:get(fc, key("offload_params"), "boolean", false, P) then z.offload_param, z.offload_optimizer = "cpu", "cpu" end
  local wrap = r:get(fc, key("auto_wrap_policy"), "string", "TRANSFORMER_BASED_WRAP", P)
  if wrap ~= "TRANSFORMER_BASED_WRAP" then
    r:fail(fc, key("auto_wrap_policy"), ("'%s' is not modelled (vrsim shards per decoder layer)"):format(wrap), P)
  end
  if r:get(fc, key("cpu_ram_efficient_loading"), "boolean", nil, P) ~= nil then
    notes[#notes + 1] = "axolotl fsdp cpu_ram_efficient_loading: host memory at load, not simulated "
        .. "(on the GPU each rank holds only its shards either way)"
  end
  local ckpt = r:get(fc, key("activation_checkpointing"), "boolean", false, P)
  if r:get(fc, key("mixed_precision_policy"), "string", nil, P) then
    r:fail(fc, key("mixed_precision_policy"), "not modelled (vrsim's FSDP2 policy follows bf16)", P)
  end
  local nr = {}
  for _, k in ipairs(FSDP_NOT_READ) do nr[#nr + 1] = k; nr[#nr + 1] = "fsdp_" .. k end
  r:not_read(fc, nr, P)
  r:finish(fc, TOOL, P)
  return { zero = z, checkpointing = ckpt }
end

-- The scenario of the config read by r. opts: gpu (catalog name, required), count (ranks),
-- model_config (the path --set model.config names: the file's model is not read).
-- Returns the scenario table and a list of notes.
function A.scenario(r, opts)
  local d = r.doc
  local notes = {}
  -- axolotl's trainer builder leaves TrainingArguments.use_cache at False, which the Trainer
  -- puts on model.config (its loader turns it off under gradient checkpointing too)
  local scn = { hardware = { gpu = opts.gpu, count = opts.count or 1 }, model = { use_cache = false }, training = {} }
  local t = scn.training

  -- the model: base_model_config defaults to base_model (AutoConfig.from_pretrained of either)
  local bm = r:get(d, "base_model", "string")
  local bmc = r:get(d, "base_model_config", "string")
  if not opts.model_config then
    if not bm and not bmc then r:fail(d, "base_model", "missing: axolotl needs the model to train") end
    local key = bmc and "base_model_config" or "base_model"
    scn.model.config = model_config(r, d, key, bmc or bm)
  end

  -- adapters and quantization (loaders/model.py: the BitsAndBytesConfig of each case)
  local adapter = r:get(d, "adapter", "string")
  local in4 = r:get(d, "load_in_4bit", "boolean", false)
  local in8 = r:get(d, "load_in_8bit", "boolean", false)
  if adapter and adapter ~= "lora" and adapter ~= "qlora" then
    r:fail(d, "adapter", ("'%s' is not modelled (vrsim reads lora and qlora)"):format(adapter))
  end
  if in4 and in8 then r:fail(d, "load_in_8bit", "and load_in_4bit are both set") end
  if adapter == "qlora" then
    if in8 then r:fail(d, "load_in_8bit", "axolotl: \"Can't load qlora in 8bit\"") end
    if not in4 then r:fail(d, "adapter", "axolotl: \"Require cfg.load_in_4bit to be True for qlora\"") end
    -- load_in_4bit, nf4, double quantization, quant storage bf16 (model.py's bnb_config)
    t.quant, t.quant_storage = "nf4", "bf16"
  elseif in4 then
    r:fail(d, "load_in_4bit", "4-bit loading without adapter: qlora is not modelled (axolotl's "
           .. "qlora path is: adapter: qlora)")
  elseif in8 then
    if adapter ~= "lora" then r:fail(d, "load_in_8bit", "8-bit loading without adapter: lora is not modelled") end
    t.quant = "int8"
  end
  if r:get(d, "bnb_config_kwargs", "table") then
    r:fail(d, "bnb_config_kwargs", "not modelled (vrsim simulates axolotl's own BitsAndBytesConfig)")
  end

  -- precision: resolve_dtype
  local bf16 = r:get(d, "bf16", { "boolean", "auto" }, "auto")
  local fp16 = r:get(d, "fp16", "boolean")
  local bfloat16 = r:get(d, "bfloat16", "boolean")
  local float16 = r:get(d, "float16", "boolean")
  local tf32 = r:get(d, "tf32", { "boolean", "auto" }, "auto")
  if bfloat16 then r:fail(d, "bfloat16", "bf16 weights without AMP are not modelled (use bf16: true)") end
  if float16 then r:fail(d, "float16", "fp16 weights without AMP are not modelled") end
  if not fp16 and bf16 == "auto" then
    bf16 = gpu_has_bf16(opts.gpu) and true or false
    if not bf16 and fp16 == nil then fp16 = true end
    notes[#notes + 1] = ("axolotl bf16: auto read as %s (the %s %s bf16)"):format(tostring(bf16),
                         opts.gpu, bf16 and "has" or "lacks")
  end
  if fp16 and bf16 == "auto" then bf16 = false end
  if bf16 then fp16 = false end
  local dtype = bf16 and "bf16" or (in8 or fp16) and "fp16" or "fp32"
  if dtype == "fp16" then
    r:fail(d, fp16 and "fp16" or "load_in_8bit", "fp16 training (its GradScaler and fp16 weights under "
           .. "the HF Trainer's AMP) is not modelled by this reader: use bf16")
  end
  if adapter then
    if dtype ~= "bf16" then r:fail(d, "adapter", "LoRA on fp32 weights is not modelled: set bf16: true") end
    t.precision = "lora_bf16"
  else
    -- full fine-tuning: the weights loaded in torch_dtype; the Trainer's bf16 autocast over
    -- bf16 weights casts nothing
    t.precision = dtype
  end
  if tf32 == true and dtype == "fp32" then
    r:fail(d, "tf32", "TF32 matmuls of an fp32 run are not modelled (vrsim prices fp32 GEMMs as fp32)")
  end
  t.build = "direct" -- from_pretrained(torch_dtype=...)

  -- LoRA (loaders/adapter.py _build_peft_lora_config; peft's defaults where axolotl has none)
  local lr = r:get(d, "lora_r", "integer")
  local la = r:get(d, "lora_alpha", { "integer", "number" })
  local ld = r:get(d, "lora_dropout", "number", 0.0)
  local ltm = r:get(d, "lora_target_modules", { "string", "table" })
  local ltl = r:get(d, "lora_target_linear", "boolean")
  if adapter then
    local lora = { r = lr or 8, alpha = la or 8, dropout = ld }
    if type(ltm) == "string" then ltm = { ltm } end
    if ltl then
      -- list(set(lora_target_modules + find_all_linear_names(model))): every Linear but the
      -- output layer, and the named modules, which must then be Linear themselves
      lora.targets = "all-linear"
      if ltm and #ltm > 0 then
        notes[#notes + 1] = "axolotl lora_target_modules beside lora_target_linear: every Linear is a target"
      end
    elseif ltm then
      for i, m in ipairs(ltm) do
        if type(m) ~= "string" then r:fail(d, "lora_target_modules", ("item %d is not a module name"):format(i)) end
      end
      lora.targets = ltm
    end
    t.lora = lora
  end

  -- batch and sequence (normalize_config)
  t.micro_batch = r:field(d, "micro_batch_size", "training", "micro_batch",
                          r:get(d, "micro_batch_size", "integer", 1))
  local ga = r:field(d, "gradient_accumulation_steps", "training", "grad_accum",
                     r:get(d, "gradient_accumulation_steps", "integer"))
  local bs = r:get(d, "batch_size", "integer")
  if not ga and bs then ga = r:field(d, "batch_size", "training", "grad_accum", bs // t.micro_batch) end
  t.grad_accum = ga or 1
  t.seq = r:field(d, "sequence_len", "training", "seq", r:get(d, "sequence_len", "integer", 512))
  local packing = r:get(d, "sample_packing", "boolean")
  if not packing and not r:get(d, "pad_to_sequence_len", "boolean") then
    notes[#notes + 1] = ("axolotl rows simulated at sequence_len (%d tokens), the longest a batch can be: "
                         .. "without pad_to_sequence_len axolotl pads each batch to its longest row"):format(t.seq)
  end

  -- gradient checkpointing: true, or offload / offload_disk (refused)
  local gc = r:get(d, "gradient_checkpointing", { "boolean", "string" }, false)
  if gc ~= true and gc ~= false then
    r:fail(d, "gradient_checkpointing", ("'%s' (activations offloaded) is not modelled"):format(gc))
  end
  t.checkpointing = gc
  local gck = r:get(d, "gradient_checkpointing_kwargs", "table")
  if gck then
    for k, v in pairs(gck) do
      if k ~= "use_reentrant" or v ~= false then
        r:fail(gck, k, "not modelled (vrsim's checkpointing is use_reentrant=False)", "gradient_checkpointing_kwargs.")
      end
      r:get(gck, k, "boolean")
    end
  end

  -- the optimizer: HF TrainingArguments.optim, axolotl's default adamw_torch_fused
  local opt = r:get(d, "optimizer", "string", "adamw_torch_fused")
  local o = OPTIMIZERS[opt]
  if not o then r:fail(d, "optimizer", H.optimizer_refused(opt)) end
  for k, v in pairs(o) do t[k] = v end
  if r:get(d, "optim_args", { "string", "table" }) then r:fail(d, "optim_args", "not modelled") end

  -- attention: attn_implementation, or the deprecated booleans that set it
  local impl = r:get(d, "attn_implementation", "string")
  for key, name in pairs({ flash_attention = "flash_attention_2", sdp_attention = "sdpa", eager_attention = "eager",
                           flex_attention = "flex_attention" }) do
    if r:get(d, key, "boolean") then
      if impl and impl ~= name then r:fail(d, key, ("conflicts with attn_implementation: %s"):format(impl)) end
      impl = name
    end
  end
  if impl then
    local a = ATTENTION[impl]
    if not a then r:fail(d, "attn_implementation", ("'%s' is not modelled (read: eager, sdpa, flash_attention_2, flex_attention)"):format(impl)) end
    t.attention = a
    if impl == "flash_attention_2" then
      notes[#notes + 1] = "axolotl flash_attention_2 (the flash-attn package) simulated as SDPA's flash backend, "
          .. "the same FlashAttention-2 kernel inside PyTorch"
    end
  else
    t.attention = "sdpa" -- transformers' default
  end
  if packing then read_packing(r, d, t, notes) end

  -- distribution: DeepSpeed (a JSON file; vrsim reads it as training.deepspeed), else DDP over
  -- the ranks the launcher starts
  local ds = r:get(d, "deepspeed", "string")
  local fsdp = read_fsdp(r, d, adapter, notes)
  if ds and fsdp then r:fail(d, "deepspeed", "beside fsdp_config: one or the other") end
  if fsdp then
    t.strategy, t.zero = "fsdp2", fsdp.zero
    if fsdp.checkpointing then t.checkpointing = true end
    -- fsdp2_prepare_model: under mixed precision the trainable (bf16) parameters are up-cast to
    -- fp32 shards, and MixedPrecisionPolicy computes in bf16
    t.precision = dtype == "bf16" and "mp_fp32" or "fp32"
  elseif ds then t.deepspeed = r:field(d, "deepspeed", "training", "deepspeed", ds)
  elseif scn.hardware.count > 1 then t.strategy = "ddp" end
  -- loaders/model.py _configure_embedding_dtypes on a QLoRA model: embeddings and norms to fp32,
  -- prepare_model_for_kbit_training, then back to bf16 (strategies/kbit.lua "axolotl")
  if adapter and (in4 or in8) then
    if in4 and not fsdp and not ds and not t.compile then
      t.kbit_prepare = "axolotl"
    else
      notes[#notes + 1] = "axolotl's load-time casts (prepare_model_for_kbit_training and _configure_embedding_dtypes: "
          .. "embeddings and norms to fp32 and back to bf16) are not simulated "
          .. (in8 and "for an 8-bit model" or fsdp and "under FSDP" or ds and "under DeepSpeed" or "under torch_compile")
          .. ": the load may reserve more than shown"
    end
  end
  if r:has(d, "special_tokens") or r:has(d, "tokens") then
    r:get(d, "special_tokens", "table")
    r:get(d, "tokens", "table")
    notes[#notes + 1] = "axolotl special_tokens/tokens assumed already in the vocabulary (new ones would resize the embeddings)"
  end

  r:not_read(d, NOT_READ)
  r:finish(d, TOOL)
  return scn, notes
end

-- sample_packing (axolotl 0.18): with an attention that packs (ATTN_IMPLS_SUPPORTING_PACKING:
-- flash_attention_2 and flex_attention here),
-- AxolotlTrainer._create_multipack_sampler deals one bin a micro-batch, of micro_batch_size x
-- sequence_len tokens (samplers/multipack.py, first-fit in the RandomSampler's order, or the
-- SequentialSampler's under curriculum_sampling), and V2BatchSamplerDataCollatorForSeq2Seq
-- concatenates it into one row padded to pad_to_multiple_of: 64 x ceil(sequence_len / 64) with
-- pad_to_sequence_len, which the config's validation turns on with sample_packing
-- (hint_sample_packing_padding); the attention mask is dropped and transformers' flash or flex
-- attention finds the sequences from position_ids. training.data's multipack batching, the data set's
-- lengths given with --set training.data.lengths=FILE (else the fullest bin).
--
-- With sdpa (not in ATTN_IMPLS_SUPPORTING_PACKING) multipack_real_batches defaults to true
-- (core/builders/causal.py): the sampler deals micro_batch_size bins of at most sequence_len, each
-- its own row, the attention mask dropped (sample_packing_drop_attention_mask: sdpa and eager
-- decontaminate packing), and PatchManager._apply_sdpa_varlen_patch installs sdpa_varlen
-- (sdpa_varlen: null or true; false keeps stock SDPA on a block-diagonal mask, not modelled):
-- training.data's real_batches. Under eager axolotl patches nothing (transformers' block-causal
-- mask from the position_ids); the models the patch leaves to stock SDPA are refused by
-- training.data's check.
function read_packing(r, d, t, notes)
  local real = t.attention ~= "flash" and t.attention ~= "flex"
  local given = r:get(d, "multipack_real_batches", "boolean")
  if given ~= nil and given ~= real then
    r:fail(d, "multipack_real_batches", given
      and ("true with %s attention (micro_batch_size bins of sequence_len a batch there) is not modelled"):format(t.attention)
      or ("false with %s attention (one bin of micro_batch_size x sequence_len a batch, on the patched "
          .. "attention) is not modelled"):format(t.attention))
  end
  if r:get(d, "sample_packing_sequentially", "boolean") then
    r:fail(d, "sample_packing_sequentially", "next-fit packing in the data set's order (allocate_sequentially) is not modelled")
  end
  local varlen = r:get(d, "sdpa_varlen", "boolean")
  if varlen == false and real then
    r:fail(d, "sdpa_varlen", "false: stock SDPA on transformers' block-diagonal mask of the packed rows is not modelled "
           .. "(axolotl's varlen_attn path is: sdpa_varlen null or true)")
  end
  local mbs, seq = t.micro_batch, t.seq
  local data = { batching = "multipack", pack_length = real and seq or mbs * seq, max_length = seq,
                 real_batches = real or nil }
  local multiple = r:get(d, "pad_to_multiple_of", "integer") or 64
  local pad = r:get(d, "pad_to_sequence_len", "boolean")
  if pad ~= false then
    data.pad_to_multiple_of = multiple * ((seq + multiple - 1) // multiple)
  else
    notes[#notes + 1] = "axolotl pad_to_sequence_len: false with sample_packing: each packed row as long as its tokens"
  end
  local bin = r:get(d, "sample_packing_bin_size", "integer")
  if bin then data.bin_sequences = bin end
  local group = r:get(d, "sample_packing_group_size", "integer")
  if group then data.group_size = group end
  local excess = r:get(d, "excess_length_strategy", "string")
  if excess then
    if excess ~= "drop" and excess ~= "truncate" and excess ~= "raise" then
      r:fail(d, "excess_length_strategy", ("'%s': one of drop, truncate, raise"):format(excess))
    end
    data.too_long = excess
  end
  if r:get(d, "curriculum_sampling", "boolean") then data.order = "given" end
  r:get(d, "sample_packing_eff_est", "number") -- the step count's estimate: no step's shape
  t.data = r:field(d, "sample_packing", "training", "data", data)
  -- the row's length is the bin's (training.data sets training.seq)
  t.seq = nil
  if real then
    notes[#notes + 1] = ("axolotl sample_packing under %s: %d packed rows of up to sequence_len = %d tokens a micro-batch "
                         .. "(multipack_real_batches), each sequence attended alone %s (training.data's multipack "
                         .. "batching, real_batches)"):format(t.attention, mbs, seq, t.attention == "eager"
                           and "on transformers' block-causal mask" or "by axolotl's sdpa_varlen patch")
    return
  end
  t.micro_batch = 1
  notes[#notes + 1] = ("axolotl sample_packing: one packed row of up to micro_batch_size x sequence_len = %d tokens "
                       .. "a micro-batch (training.micro_batch 1, training.data's multipack batching)"):format(mbs * seq)
end

return A
