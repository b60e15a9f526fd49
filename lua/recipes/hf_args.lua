-- recipes/hf_args.lua: the keys of transformers' TrainingArguments (transformers 5.x,
-- training_args.py) that the trainers built on it share (TRL's SFTConfig, LLaMA-Factory's
-- Seq2SeqTrainingArguments), read as the HF Trainer reads them: the batch, gradient accumulation,
-- checkpointing, bf16 / fp16, the optimizer, DeepSpeed and FSDP. The format's module reads the
-- model and its own keys, then calls H.read for these.
local H = {}

-- TrainingArguments keys that change neither memory nor the step's time: output, logging,
-- evaluation and saving cadence, the learning-rate schedule, seeds, hub and tracker settings,
-- host-side data loading.
H.NOT_READ = {
  "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "eval_strategy",
  "evaluation_strategy", "eval_steps", "eval_delay", "eval_on_start", "eval_accumulation_steps",
  "eval_do_concat_batches", "eval_use_gather_object", "per_device_eval_batch_size",
  "prediction_loss_only", "batch_eval_metrics", "include_for_metrics", "bf16_full_eval",
  "fp16_full_eval", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
  "max_grad_norm", "num_train_epochs", "max_steps", "lr_scheduler_type", "lr_scheduler_kwargs",
  "warmup_ratio", "warmup_steps", "log_level", "log_level_replica", "log_on_each_node",
  "logging_dir", "logging_strategy", "logging_first_step", "logging_steps",
  "logging_nan_inf_filter", "save_strategy", "save_steps", "save_total_limit", "save_safetensors",
  "save_on_each_node", "save_only_model", "restore_callback_states_from_checkpoint", "seed",
  "data_seed", "local_rank", "ddp_backend", "ddp_timeout", "run_name", "disable_tqdm",
  "remove_unused_columns", "label_names", "load_best_model_at_end", "metric_for_best_model",
  "greater_is_better", "ignore_data_skip", "report_to", "dataloader_drop_last",
  "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
  "dataloader_prefetch_factor", "dataloader_in_order", "train_sampling_strategy",
  "length_column_name", "push_to_hub", "resume_from_checkpoint", "hub_model_id", "hub_strategy",
  "hub_token", "hub_private_repo", "hub_always_push", "hub_revision", "full_determinism",
  "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id",
  "include_num_input_tokens_seen", "include_tokens_per_second", "average_tokens_across_devices",
  "skip_memory_metrics", "enable_jit_checkpoint", "group_by_length", "predict_with_generate",
  "generation_max_length", "generation_num_beams", "generation_config", "sortish_sampler",
}

-- TrainingArguments.optim names, as the Trainer builds each (get_optimizer_cls_and_kwargs)
H.OPTIMIZERS = {
  adamw_torch = { optimizer = "adamw", optimizer_impl = "foreach" },      -- torch.optim.AdamW
  adamw_torch_fused = { optimizer = "adamw", optimizer_impl = "fused" },  -- AdamW(fused=True)
  adamw_bnb_8bit = { optimizer = "adamw8bit" },                           -- bnb.optim.AdamW8bit
  adamw_8bit = { optimizer = "adamw8bit" },                               -- the same class
  sgd = { optimizer = "sgd" },
  -- bnb.optim.AdamW / Lion with is_paged=True, optim_bits 8 or 32 from the name: vrsim's names are
  -- transformers' own
  paged_adamw_8bit = { optimizer = "paged_adamw_8bit" },
  paged_adamw_32bit = { optimizer = "paged_adamw_32bit" },
  paged_lion_8bit = { optimizer = "paged_lion_8bit" },
  paged_lion_32bit = { optimizer = "paged_lion_32bit" },
}

-- The error for an optim name not in OPTIMIZERS, listing those read: a paged one (bitsandbytes'
-- paged AdEMAMix) is named as such.
function H.optimizer_refused(opt)
  local names = {}
  for k in pairs(H.OPTIMIZERS) do names[#names + 1] = k end
  table.sort(names)
  return ("'%s' is not modelled%s (read: %s)"):format(opt, opt:match("^paged_")
         and " (no paged optimizer of that name is modelled)" or "", table.concat(names, ", "))
end

-- attn_implementation -> training.attention (flash_attention_2: SDPA's flash backend, a note;
-- flex_attention: transformers' flex_attention_forward, over the collator's padding or packed
-- sequences where training.data gives them)
H.ATTENTION = { eager = "eager", sdpa = "sdpa", flash_attention_2 = "flash", flex_attention = "flex" }

-- The config.json of a model given as a local folder (or a .json file) by key k of t: vrsim never
-- reaches the network, so a Hub id is an error that says to download config.json.
function H.model_config(r, t, k, v, prefix)
  local path = v:match("%.json$") and v or (v:gsub("/+$", "") .. "/config.json")
  local ok, msg = pcall(require("vrsim.core").read_config, path)
  if ok then return path end
  if tostring(msg):find("not found", 1, true) or tostring(msg):find("cannot read", 1, true) then
    r:fail(t, k, ("'%s' is not a local folder holding config.json (a Hugging Face Hub id?): vrsim "
           .. "never reaches the network; download the model's config.json (huggingface-cli download %s "
           .. "config.json --local-dir DIR), then name DIR, or give --set model.config=PATH"):format(v, v), prefix)
  end
  r:fail(t, k, tostring(msg), prefix)
end

-- The torch dtype a model loads in: from_pretrained's dtype (torch_dtype) value v, where "auto"
-- is the config.json's own (dtype, else torch_dtype, else float32). nil when not one vrsim reads.
local DTYPES = { float32 = "fp32", bfloat16 = "bf16", float16 = "fp16", fp32 = "fp32", bf16 = "bf16",
                 fp16 = "fp16" }
function H.load_dtype(v, config_path)
  if v == "auto" then
    local ok, c = pcall(require("vrsim.core").read_config, config_path)
    v = ok and (c.dtype or c.torch_dtype) or "float32"
  end
  return DTYPES[tostring(v):gsub("^torch%.", "")]
end

-- The Trainer's precision for weights loaded in dtype (fp32, bf16), bf16 / fp16 autocast and
-- LoRA: a training.precision, or an error on key k.
function H.precision(r, t, k, dtype, bf16, fp16, lora)
  if bf16 and fp16 then r:fail(t, "fp16", "and bf16 are both on") end
  if lora then
    -- peft's autocast_adapter_dtype: fp32 adapters beside the frozen base in its load dtype
    if dtype == "bf16" and not fp16 then return "lora_bf16" end
    r:fail(t, k, ("LoRA on %s weights%s is not modelled: load the model in bfloat16 with bf16 on")
           :format(dtype, fp16 and " under fp16 autocast" or ""))
  end
  if dtype == "fp32" then return bf16 and "amp_bf16" or fp16 and "amp_fp16" or "fp32" end
  if dtype == "bf16" and not fp16 then return "bf16" end -- the bf16 autocast casts nothing
  r:fail(t, k, ("%s weights%s: not modelled (load in float32, or in bfloat16 with bf16)")
         :format(dtype, fp16 and " under fp16 autocast" or ""))
end

-- strategies/compile.lua's refusal of training table t as a recipe reads it (the plan's defaults:
-- every decoder layer checkpointed whole, no quantization); nil when compile accepts the run.
-- use_cache: the model config's use_cache as the trainer sets it (the HF Trainer: args.use_cache),
-- nil where the config's own holds (a script of its own under accelerate: the plan checks it).
function H.compile_refusal(t, use_cache)
  local C = require "strategies.compile"
  if type(t.compile) == "table" and t.compile.scope == "model" then
    -- the whole model compiled: what the recipe knows of the run (its family is read later)
    -- (the Trainer's gradient_checkpointing is gradient_checkpointing_enable: transformers'
    -- checkpoint around every decoder layer)
    local why = C.model_refusal({ checkpointing = t.checkpointing, checkpoint_impl = "transformers",
                                  checkpoint_scope = "layer", checkpoint_every = 1,
                                  attention = t.attention or "sdpa", data = t.data,
                                  quant = t.quant or "none", float8 = t.float8,
                                  strategy = t.strategy or "none", dpo = t.dpo, loss = "full",
                                  activation_offload = t.activation_offload, precision = t.precision or "bf16" },
                                {}, nil, type(t.lora) == "table" and t.lora.dropout and t.lora or nil, "llama")
    if why then return why end
    -- under gradient checkpointing the layers run eager and take the traced mask, which is
    -- modelled (strategies/compile.lua M.ckpt_model)
    if t.checkpointing then return nil end
    -- the Trainer (TRL's trainers too) sets model.config.use_cache = args.use_cache, False by
    -- default (trainer.py's finalize); traced without a cache, create_causal_mask builds a 4-D
    -- boolean mask that the model graph's SDPA takes in place of is_causal (no flash kernel), a
    -- graph the capture did not trace (validation/oracle/check_compile_model_ckpt.py
    -- --no-checkpointing shows the mask)
    if use_cache == false then
      return "training.compile.scope = \"model\" (torch.compile of the whole model) under the HF Trainer with "
        .. "use_cache false is not modelled: the Trainer sets model.config.use_cache = args.use_cache (False by "
        .. "default), and traced without a cache transformers' create_causal_mask makes a 4-D boolean mask that "
        .. "the model graph's SDPA takes instead of is_causal (no flash kernel), which is not captured; vrsim "
        .. "models torch.compile(model) with use_cache: true, and each decoder layer compiled (accelerate's "
        .. "dynamo_use_regional_compilation: true)"
    end
  end
  return C.check({
    checkpointing = t.checkpointing, checkpoint_scope = "layer", checkpoint_every = 1,
    quant = t.quant or "none", activation_offload = t.activation_offload, strategy = t.strategy,
    float8 = t.float8, dpo = t.dpo, parallel = t.parallel,
  }, {})
end

-- The fsdp and fsdp_config keys (training_args.py _process_fsdp_args; FSDP2 the default since
-- transformers 5): nil without FSDP, else { zero = knobs, checkpointing = bool }.
local FSDP_NOT_READ = { "transformer_layer_cls_to_wrap", "state_dict_type", "min_num_params",
                        "xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt" }
function H.read_fsdp(r, d, lora, notes, tool)
  local list = r:get(d, "fsdp", { "string", "table" })
  local fc = r:get(d, "fsdp_config", { "table", "string" })
  if type(fc) == "string" then r:fail(d, "fsdp_config", "a path to an FSDP JSON is not read: give its keys inline") end
  if type(list) == "string" then
    local words = {}
    for w in list:gmatch("%S+") do words[#words + 1] = w end
    list = words
  end
  if not list or #list == 0 then
    if fc and next(fc) then r:fail(d, "fsdp_config", "without fsdp: no FSDP to configure") end
    if fc then r:get(fc, "version", "integer") end
    return nil
  end
  fc = fc or {}
  local P = "fsdp_config."
  local version = r:get(fc, "version", "integer", 2, P)
  if version ~= 2 then
    r:fail(fc, "version", ("%d: FSDP1 (FullyShardedDataParallel) is not modelled; vrsim models FSDP2 "
           .. "(fully_shard), the default"):format(version), P)
  end
  if lora then
    r:fail(d, "fsdp", "LoRA under FSDP2 is not modelled (accelerate up-casts the trainable adapters to fp32 "
           .. "shards beside the frozen base)")
  end
  local z = { raf = true }
  for i, w in ipairs(list) do
    if w == "full_shard" then z.raf = true
    elseif w == "shard_grad_op" then z.raf = false
    elseif w == "offload" then z.offload_param, z.offload_optimizer = "cpu", "cpu"
    elseif w ~= "auto_wrap" then
      r:fail(d, "fsdp", ("item %d, '%s', is not modelled (read: full_shard, shard_grad_op, offload, auto_wrap)")
             :format(i, tostring(w)))
    end
  end
  local rv = r:get(fc, "reshard_after_forward", "boolean", nil, P)
  if rv ~= nil then z.raf = rv end
  if r:get(fc, "cpu_offload", "boolean", false, P) then z.offload_param, z.offload_optimizer = "cpu", "cpu" end
  local wrap = r:get(fc, "auto_wrap_policy", "string", "TRANSFORMER_BASED_WRAP", P)
  if wrap ~= "TRANSFORMER_BASED_WRAP" then
    r:fail(fc, "auto_wrap_policy", ("'%s' is not modelled (vrsim shards per decoder layer)"):format(wrap), P)
  end
  if r:get(fc, "cpu_ram_efficient_loading", { "boolean", "string" }, nil, P) ~= nil then
    notes[#notes + 1] = tool .. " fsdp_config.cpu_ram_efficient_loading: host memory at load, not simulated "
        .. "(on the GPU each rank holds only its shards either way)"
  end
  local ckpt = r:get(fc, "activation_checkpointing", "boolean", false, P)
  r:not_read(fc, FSDP_NOT_READ, P)
  r:finish(fc, tool, P)
  return { zero = z, checkpointing = ckpt }
end

-- Reads the TrainingArguments keys of d into training table t. defaults: the trainer's own
-- (TRL: gradient_checkpointing true, bf16 on unless fp16). Returns { bf16, fp16 } as resolved
-- and the FSDP reading (nil without FSDP). lora: the run trains LoRA adapters.
function H.read(r, d, t, scn, opts, notes, defaults, lora, tool)
  t.micro_batch = r:field(d, "per_device_train_batch_size", "training", "micro_batch",
                          r:get(d, "per_device_train_batch_size", "integer", 8))
  t.grad_accum = r:field(d, "gradient_accumulation_steps", "training", "grad_accum",
                         r:get(d, "gradient_accumulation_steps", "integer", 1))
  if r:get(d, "auto_find_batch_size", "boolean") then
    r:fail(d, "auto_find_batch_size", "halving the batch after an out-of-memory error is not simulated: "
           .. "vrsim maxbatch CONFIG finds the largest batch that fits")
  end

  -- precision: bf16 / fp16 (TRL: bf16 = not fp16 when unset)
  local fp16 = r:get(d, "fp16", "boolean", false)
  local bf16 = r:get(d, "bf16", "boolean")
  if bf16 == nil then bf16 = defaults.bf16 and not fp16 or false end
  -- TrainingArguments.__post_init__: mixed_precision is the launcher's (ACCELERATE_MIXED_PRECISION,
  -- which accelerate launch sets from its config) unless fp16 or bf16 is on
  local mp = opts.launch and opts.launch.mixed_precision
  if not bf16 and not fp16 and mp then bf16, fp16 = mp == "bf16", mp == "fp16" end
  local tf32 = r:get(d, "tf32", "boolean")
  if tf32 and not bf16 and not fp16 then
    r:fail(d, "tf32", "TF32 matmuls of an fp32 run are not modelled (vrsim prices fp32 GEMMs as fp32)")
  end

  -- checkpointing: activation_checkpointing, or its deprecated alias gradient_checkpointing
  local ac = r:get(d, "activation_checkpointing", "boolean")
  local gc = r:get(d, "gradient_checkpointing", "boolean")
  local ckpt = ac
  if ckpt == nil then ckpt = gc end
  if ckpt == nil then ckpt = defaults.checkpointing end
  t.checkpointing = ckpt
  -- use_cache (False by default): the Trainer sets model.config.use_cache = args.use_cache
  -- (trainer.py's finalize), so a forward without checkpointing keeps a DynamicCache only when
  -- it is true
  local use_cache = r:get(d, "use_cache", "boolean", false)
  scn.model.use_cache = use_cache
  for _, k in ipairs({ "activation_checkpointing_kwargs", "gradient_checkpointing_kwargs" }) do
    local kw = r:get(d, k, "table")
    for kk, v in pairs(kw or {}) do
      if kk ~= "use_reentrant" or v ~= false then
        r:fail(kw, kk, "not modelled (vrsim's checkpointing is use_reentrant=False, transformers' default)", k .. ".")
      end
      r:get(kw, kk, "boolean", nil, k .. ".")
    end
  end

  -- the optimizer
  local opt = r:get(d, "optim", "string", "adamw_torch_fused")
  local o = H.OPTIMIZERS[opt]
  if not o then r:fail(d, "optim", H.optimizer_refused(opt)) end
  for k, v in pairs(o) do t[k] = v end

  -- what changes the step and is not modelled
  local REFUSED = {
    use_liger_kernel = "Liger's kernels in place of the model's are not modelled by this reader "
        .. "(training.loss = \"liger_fused\" in a scenario models its loss alone)",
    use_cpu = "training on the CPU: nothing on the GPU to simulate",
    torch_empty_cache_steps = "emptying the cache every N steps is not simulated (vrsim simulates one step)",
    neftune_noise_alpha = "NEFTune's noise on the embeddings is not modelled",
    label_smoothing_factor = "label smoothing (its extra loss terms over the logits) is not modelled",
    optim_args = "not modelled", optim_target_modules = "GaLore and its kin are not modelled",
    ddp_bucket_cap_mb = "DDP buckets other than 25 MiB are not modelled",
    accelerator_config = "not modelled", parallelism_config = "not modelled (tensor, context and "
        .. "pipeline parallel degrees)",
  }
  for k, why in pairs(REFUSED) do
    local v = r:get(d, k, { "boolean", "number", "string", "table" })
    if v ~= nil and v ~= false and v ~= 0 then r:fail(d, k, why) end
  end
  -- torch_compile (a backend or mode given turns it on: __post_init__): the Trainer's
  -- TorchDynamoPlugin compiles the whole model unless the launcher asks for regional compilation
  -- (accelerate config dynamo_config.dynamo_use_regional_compilation), which compiles each
  -- decoder layer on its own: vrsim's training.compile
  local compile_key -- (the key that asked for torch.compile, for a refusal that needs the distribution)
  local tc = r:get(d, "torch_compile", "boolean", false)
  local tcb = r:get(d, "torch_compile_backend", "string")
  local tcm = r:get(d, "torch_compile_mode", "string")
  if tc or tcb or tcm then
    local key = r:has(d, "torch_compile") and "torch_compile" or tcb and "torch_compile_backend" or "torch_compile_mode"
    if tcb and tcb ~= "inductor" then r:fail(d, "torch_compile_backend", ("'%s' is not modelled (read: inductor)"):format(tcb)) end
    if tcm and tcm ~= "default" then r:fail(d, "torch_compile_mode", ("'%s' is not modelled (read: default)"):format(tcm)) end
    -- without regional compilation the plugin compiles the whole model: training.compile.scope
    -- "model", whose refusals (strategies/compile.lua M.model_refusal) name this key
    t.compile = (opts.launch and opts.launch.regional_compile) and true or { scope = "model" }
    -- (the launcher's reader, recipes/launch.lua, checks the merged run and names the key)
    t.compile_key = opts.launch and key or nil
    local why = not opts.launch and H.compile_refusal(t, use_cache)
    if why then r:fail(d, key, why) end
    compile_key = key
  end
  -- DDP options without an effect on memory or time here
  r:not_read(d, { "ddp_find_unused_parameters", "ddp_broadcast_buffers", "ddp_static_graph" })
  if r:get(d, "debug", { "string", "table" }) and d.debug ~= "" and (type(d.debug) ~= "table" or #d.debug > 0) then
    r:fail(d, "debug", "not modelled (its hooks on every module)")
  end

  -- distribution: DeepSpeed (a JSON file), FSDP, else DDP over the ranks
  local ds = r:get(d, "deepspeed", { "string", "table" })
  if type(ds) == "table" then
    r:fail(d, "deepspeed", "an inline DeepSpeed config is not read: write it to a JSON file and name the file")
  end
  local fsdp = H.read_fsdp(r, d, lora, notes, tool)
  if ds and fsdp then r:fail(d, "deepspeed", "beside fsdp: one or the other") end
  if fsdp then
    t.strategy, t.zero = "fsdp2", fsdp.zero
    if fsdp.checkpointing then t.checkpointing = true end
  elseif ds then
    t.deepspeed = ds
    -- torch_compile beside DeepSpeed: its stage is the strategy compile's refusals read, which
    -- the plan learns only from the file (strategies/deepspeed.lua); read here, the refusal
    -- names the key and its line (an unreadable file is the plan's error, as without compile)
    if compile_key and not opts.launch then
      local okd, dsc = pcall(require("vrsim.core").read_config, ds, true)
      local z = okd and type(dsc) == "table" and dsc.zero_optimization
      local stage = type(z) == "table" and math.tointeger(z.stage) or 0
      t.strategy = ({ [0] = "ddp", [1] = "zero1", [2] = "zero2", [3] = "zero3" })[stage]
      local why = t.strategy and H.compile_refusal(t, use_cache)
      if why then r:fail(d, compile_key, why) end
      t.strategy = nil
    end
  elseif scn.hardware.count > 1 then t.strategy = "ddp" end
  r:not_read(d, H.NOT_READ)
  return { bf16 = bf16, fp16 = fp16 }, fsdp
end

return H
