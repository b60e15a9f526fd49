-- deepspeed.lua: a DeepSpeed JSON config (training.deepspeed) read the way DeepSpeed reads it
-- after the Hugging Face Trainer's integration has filled it in.
--
--   1. "auto" values are resolved as transformers' integrations/deepspeed.py
--      HfTrainerDeepSpeedConfig does, with the scenario in the place of TrainingArguments:
--      trainer_config_process fills train_micro_batch_size_per_gpu (micro_batch),
--      gradient_accumulation_steps (grad_accum), train_batch_size (world x micro x accum),
--      fp16.enabled / bf16.enabled (the precision) and the optimizer and scheduler numbers;
--      trainer_config_finalize fills zero_optimization.reduce_bucket_size = hidden^2 and, under
--      ZeRO-3, stage3_prefetch_bucket_size = 0.9 hidden^2 and stage3_param_persistence_threshold
--      = 10 hidden. A value that is not "auto" and disagrees with a field the scenario gave is
--      the Trainer's mismatch error.
--   2. Keys left out take DeepSpeed's defaults (deepspeed/runtime/zero/config.py
--      DeepSpeedZeroConfig: overlap_comm = stage == 3, contiguous_gradients = true, buckets
--      5e8, ...), applied by strategies/dp.lua, which reads the same knobs from training.zero.
--   3. Batch sizes as deepspeed/runtime/config.py _set_batch_related_parameters derives the
--      missing ones and _batch_assertion checks them: train_batch_size == micro x accum x world.
--   4. fp16 / bf16 sections set the precision (DeepSpeed's fp16 runs the model in fp16 with a
--      dynamic loss scaler unless loss_scale > 0; both enabled is DeepSpeed's assertion).
--   5. Every key is accounted for: modelled, of no effect on memory (a note), not modelled with
--      a non-default value (an error), or unknown to DeepSpeed (reported by name: DeepSpeed's
--      pydantic model forbids unknown zero_optimization keys, so those are errors; it ignores
--      unknown top-level keys, so those are warnings).
local D = {}

-- The model's hidden size, for the "auto" bucket sizes (nil when the model has none: SDXL's
-- UNet has no hidden_size, and the Trainer then raises).
local function hidden_size(cfg)
  if cfg.model.arch == "sdxl" then return nil end
  local ok, _, c = pcall(function() return require("vrsim.causal_lm").resolve(cfg.model) end)
  if ok and type(c) == "table" and math.type(c.hidden) then return c.hidden end
  return nil
end

-- The values the Trainer gives zero_optimization's hidden-size "auto" keys (an integer: the
-- engine takes int(...) of them). Empty when the model has no hidden size.
function D.auto_values(cfg)
  local h = hidden_size(cfg)
  if not h then return {} end
  return { reduce_bucket_size = h * h, stage3_prefetch_bucket_size = math.floor(0.9 * h * h),
           stage3_param_persistence_threshold = 10 * h }
end

-- zero_optimization keys: how each is taken. "knob": passed to training.zero as is (dp.lua
-- checks it); a string: no effect on what is allocated (the note says why); a table
-- { default = v, why = ... }: not modelled, accepted only at DeepSpeed's default.
local ZERO_KEYS = {
  stage = "stage", reduce_bucket_size = "knob", allgather_bucket_size = "knob", overlap_comm = "knob",
  contiguous_gradients = "knob", stage3_param_persistence_threshold = "knob",
  stage3_prefetch_bucket_size = "knob", stage3_max_live_parameters = "knob",
  offload_optimizer = "offload", offload_param = "offload",
  cpu_offload = "deprecated", cpu_offload_param = "deprecated",
  reduce_scatter = { default = true, why = "all-reduce in place of reduce-scatter" },
  allgather_partitions = { default = true, why = "broadcasts in place of the all-gather" },
  use_multi_rank_bucket_allreduce = "how buckets of several ranks are combined in one call",
  load_from_fp32_weights = "checkpoint loading only", elastic_checkpoint = "checkpoint loading only",
  stage3_gather_16bit_weights_on_model_save = "checkpoint saving only",
  stage3_gather_fp16_weights_on_model_save = "checkpoint saving only",
  gather_16bit_weights_on_model_save = "checkpoint saving only",
  pipeline_loading_checkpoint = "checkpoint loading only",
  round_robin_gradients = "the order gradients are copied to the host under offload",
  sub_group_size = "how the offloaded optimizer step is chunked",
  stage3_max_reuse_distance = "ZeRO-3's parameter reuse cache (vrsim releases every layer after use)",
  ignore_unused_parameters = "an error check", enable_sanity_checks = "an error check",
  log_trace_cache_warnings = "logging", cpu_offload_use_pin_memory = "host memory only",
  override_module_apply = "module.apply under ZeRO-3", memory_efficient_linear = { default = true,
    why = "ZeRO-3's LinearFunctionForZeroStage3 off" },
  stage3_model_persistence_threshold = { default = 9223372036854775807, why = "a cap on persistent parameters" },
  stage3_module_granularity_threshold = { default = 0, why = "fetching fine-grained modules as one unit" },
  stage3_use_all_reduce_for_fetch_params = { default = false, why = "all-reduce parameter fetches" },
  stage3_allgather_sequential = { default = false, why = "sequential per-parameter all-gathers" },
  zero_hpz_partition_size = { default = 1, why = "ZeRO++ hierarchical partitioning" },
  zero_quantized_weights = { default = false, why = "ZeRO++ quantized weights" },
  zero_quantized_nontrainable_weights = { default = false, why = "ZeRO++ quantized frozen weights" },
  zero_quantized_gradients = { default = false, why = "ZeRO++ quantized gradients" },
  mics_shard_size = { default = -1, why = "MiCS sharding" },
  mics_hierarchical_params_gather = { default = false, why = "MiCS hierarchical gathers" },
  legacy_stage1 = { default = false, why = "the legacy stage-1 optimizer" },
  zeropp_loco_param = { default = nil, why = "LoCo-Zero++" },
  zenflow = { default = nil, why = "ZenFlow" }, leaf_module = { default = nil, why = "ZeRO-3 leaf modules" },
  save_muon_momentum_buffer_in_memory = "NVMe swapping of the Muon buffer",
}
-- Top-level keys. "used": read below; a string: no effect on memory (noted).
local TOP_KEYS = {
  train_batch_size = "used", train_micro_batch_size_per_gpu = "used",
  gradient_accumulation_steps = "used", fp16 = "used", bf16 = "used", bfloat16 = "used",
  zero_optimization = "used", optimizer = "used",
  scheduler = "learning-rate schedule", gradient_clipping = "in-place scaling of the gradients",
  steps_per_print = "logging", wall_clock_breakdown = "logging", dump_state = "logging",
  zero_allow_untested_optimizer = "a check", prescale_gradients = "gradient scaling order",
  gradient_predivide_factor = "gradient scaling order", communication_data_type = {
    why = "the collectives' dtype" },
  flops_profiler = "profiling", tensorboard = "logging", wandb = "logging", csv_monitor = "logging",
  comms_logger = "logging", checkpoint = "checkpoint saving only", data_types = {
    why = "the gradient accumulation dtype" },
  activation_checkpointing = { why = "DeepSpeed's own activation checkpointing (use training.checkpointing)" },
  amp = { why = "apex AMP" }, sparse_attention = { why = "sparse attention" },
  pipeline = { why = "pipeline parallelism" }, compression_training = { why = "compression" },
  memory_breakdown = "logging", timers = "logging", seed = "randomness",
}
D.ZERO_KEYS, D.TOP_KEYS = ZERO_KEYS, TOP_KEYS

local function keys(t) return require("vrsim.plan").keys(t) end

local function num(v) return math.type(v) ~= nil and v == v and v ~= math.huge and v ~= -math.huge end

-- Whether v is a JSON object: a table whose keys are all strings (a JSON array is a table of
-- integer keys; an empty one cannot be told from {}, and is taken as an empty object).
local function is_object(v)
  if type(v) ~= "table" then return false end
  for k in pairs(v) do if type(k) ~= "string" then return false end end
  return true
end

-- The zero_optimization keys whose "auto" the HF Trainer fills from the model's hidden size
-- (trainer_config_finalize); for any other key "auto" stays a string DeepSpeed rejects.
local HIDDEN_AUTO = { reduce_bucket_size = true, stage3_prefetch_bucket_size = true,
                      stage3_param_persistence_threshold = true }

local function enabled(sec)
  if type(sec) ~= "table" then return nil end
  return sec.enabled
end

-- Reads cfg.training.deepspeed into cfg (strategy, training.zero, micro_batch, grad_accum,
-- precision, optimizer_impl) the way DeepSpeed under the HF Trainer would. ctx.given names the
-- fields the scenario or --set gave ("training.micro_batch"); fail(msg) raises the error with
-- the scenario's line. Adds cfg.notes, and cfg.deepspeed_read (what was read, one line) and
-- cfg.deepspeed_unknown (keys DeepSpeed would not know, by name).
function D.apply(cfg, ctx, fail)
  local t = cfg.training
  local path = t.deepspeed
  -- (a file that cannot be read is the scenario's error, at its line, not the loader's)
  local ok, ds = pcall(require("vrsim.core").read_config, path, true)
  if not ok then fail("training.deepspeed: " .. (tostring(ds):gsub("^[^:]*%.lua:%d+: ", ""))) end
  local function err(m) fail(path .. ": " .. m) end
  local given = ctx.given or {}
  cfg.notes = cfg.notes or {}
  local unknown, read = {}, {}
  local function note(m) cfg.notes[#cfg.notes + 1] = "deepspeed " .. m end

  for _, k in ipairs(keys(ds)) do
    local how = TOP_KEYS[k]
    if how == nil then
      unknown[#unknown + 1] = k
      local s = require("vrsim.plan").closest(k, keys(TOP_KEYS))
      note(("key '%s' is not a DeepSpeed config key (DeepSpeed ignores it)%s"):format(k,
           s and ("; did you mean '" .. s .. "'?") or ""))
    elseif type(how) == "table" then
      local sec = ds[k]
      if type(sec) == "table" and sec.enabled == false then
        note(("%s: disabled"):format(k))
      elseif k == "communication_data_type" or k == "data_types" then
        err(("%s (%s) is not modelled: remove it, or leave the collectives in the parameters' dtype"):format(k, how.why))
      else
        err(("%s (%s) is not modelled"):format(k, how.why))
      end
    elseif how ~= "used" then
      note(("%s: no effect on memory (%s)"):format(k, how))
    end
  end

  -- precision: fp16 / bf16 ("auto" -> the scenario's precision, as fill_match does)
  local prec = t.precision
  local function resolve_enabled(sec, name, want)
    if not is_object(sec) then
      if sec ~= nil then err(name .. " must be an object {\"enabled\": ...}") end
      return nil
    end
    local e = sec.enabled
    if e == "auto" then return want end
    if e ~= nil and type(e) ~= "boolean" then err(name .. ".enabled must be true, false or \"auto\"") end
    return e
  end
  local fp16_on = resolve_enabled(ds.fp16, "fp16", prec == "fp16")
  local bf16_sec = ds.bf16 or ds.bfloat16
  local bf16_on = resolve_enabled(bf16_sec, "bf16", prec == "bf16")
  if fp16_on and bf16_on then err("fp16 and bf16 are both enabled (DeepSpeed: \"bfloat16 and fp16 modes cannot be simultaneously enabled\")") end
  local ds_prec = fp16_on and "fp16" or bf16_on and "bf16" or nil
  if ds_prec then
    if given["training.precision"] and prec ~= ds_prec then
      err(("%s.enabled = true, but training.precision = %s (the HF Trainer's mismatch error: set it to \"auto\" "
           .. "or the precision to %s)"):format(ds_prec, prec, ds_prec))
    end
    t.precision = ds_prec
    read[#read + 1] = "precision " .. ds_prec
  end
  if fp16_on then
    local f = ds.fp16
    for _, k in ipairs(keys(f)) do
      if k == "auto_cast" and f[k] == true then
        err("fp16.auto_cast (torch.autocast around the fp16 model) is not modelled")
      elseif not ({ enabled = 1, loss_scale = 1, initial_scale_power = 1, loss_scale_window = 1,
                    hysteresis = 1, consecutive_hysteresis = 1, min_loss_scale = 1, auto_cast = 1,
                    fp16_master_weights_and_grads = 1 })[k] then
        unknown[#unknown + 1] = "fp16." .. k
        note(("key 'fp16.%s' is not a DeepSpeed fp16 key"):format(k))
      end
    end
    if f.fp16_master_weights_and_grads then err("fp16.fp16_master_weights_and_grads is not modelled") end
    -- DeepSpeed's loss scaler: dynamic (loss_scale 0, the default: DynamicLossScaler from
    -- 2^initial_scale_power) or static; the scaled loss and the overflow check are tensors
    t.loss_scaling = (num(f.loss_scale) and f.loss_scale > 0) and "static" or "dynamic"
    read[#read + 1] = "fp16 " .. t.loss_scaling .. " loss scaling"
  end

  -- optimizer: DeepSpeed builds it from the config (Adam/AdamW -> FusedAdam on the GPU,
  -- DeepSpeedCPUAdam under offload); without the section the Trainer's torch AdamW is used
  if is_object(ds.optimizer) then
    local ty = tostring(ds.optimizer.type or ""):lower()
    if ty == "adam" or ty == "adamw" then
      t.optimizer, t.optimizer_impl = "adamw", "fused"
      read[#read + 1] = "optimizer " .. tostring(ds.optimizer.type) .. " (FusedAdam)"
    else
      err(("optimizer.type '%s' is not modelled (Adam and AdamW are)"):format(tostring(ds.optimizer.type)))
    end
  elseif ds.optimizer ~= nil then
    err("optimizer must be an object")
  end

  -- zero_optimization
  local z = ds.zero_optimization
  local stage = 0
  if z == nil then z = {} elseif not is_object(z) then err("zero_optimization must be an object") end
  t.zero = t.zero or {}
  if z.stage ~= nil then
    stage = math.tointeger(z.stage)
    if not stage or stage < 0 or stage > 3 then err("zero_optimization.stage must be 0, 1, 2 or 3") end
  end
  local strategy = ({ [0] = "ddp", [1] = "zero1", [2] = "zero2", [3] = "zero3" })[stage]
  if given["training.strategy"] and t.strategy ~= strategy then
    err(("zero_optimization.stage = %d, but training.strategy = %s"):format(stage, t.strategy))
  end
  t.strategy = strategy
  read[#read + 1] = ("ZeRO stage %d (%s)"):format(stage, strategy)
  if stage < 2 then
    note(("stage %d is simulated as %s: torch DDP%s, whose buckets and reductions are laid out like "
          .. "DeepSpeed's at this stage"):format(stage, strategy, stage == 1 and " with ZeroRedundancyOptimizer" or ""))
  end
  local auto = D.auto_values(cfg)
  for _, k in ipairs(keys(z)) do
    local how, v = ZERO_KEYS[k], z[k]
    if how == nil then
      unknown[#unknown + 1] = "zero_optimization." .. k
      local s = require("vrsim.plan").closest(k, keys(ZERO_KEYS))
      err(("zero_optimization.%s is not a DeepSpeed key (DeepSpeedZeroConfig forbids unknown keys)%s"):format(k,
          s and ("; did you mean '" .. s .. "'?") or ""))
    elseif how == "knob" then
      if v == "auto" and not HIDDEN_AUTO[k] then
        err(("zero_optimization.%s = \"auto\": the HF Trainer fills \"auto\" only in %s, and "
             .. "DeepSpeed rejects the string here (give %s)"):format(k,
             table.concat(keys(HIDDEN_AUTO), ", "),
             (k:match("size$") or k:match("threshold$") or k:match("parameters$")) and "a number"
             or "true or false"))
      elseif v == "auto" then
        -- trainer_config_finalize: reduce_bucket_size always, the stage3_ pair under ZeRO-3
        -- only (otherwise DeepSpeed would reject the string; the keys are unused below stage 3)
        if k ~= "reduce_bucket_size" and stage ~= 3 then
          note(("zero_optimization.%s = \"auto\" is left unfilled below stage 3 (%s)"):format(k, k:match("^stage3_") and "unused there" or "DeepSpeed reads it at stage 2 and would want a value: its default is simulated"))
          v = nil
        elseif auto[k] == nil then
          err(("zero_optimization.%s = \"auto\" needs the model's hidden_size, which %s has none of "
               .. "(the Trainer's error: give a number)"):format(k,
               cfg.model.arch and ("model arch " .. cfg.model.arch) or "this model"))
        else
          v = auto[k]
          read[#read + 1] = ("%s auto = %d"):format(k, v)
        end
      elseif k:match("bucket_size$") or k:match("threshold$") or k:match("parameters$") then
        if not num(v) or v < 0 then err(("zero_optimization.%s must be a number >= 0, not %s"):format(k, tostring(v))) end
      elseif type(v) ~= "boolean" then
        err(("zero_optimization.%s must be true or false, not %s"):format(k, tostring(v)))
      end
      if v ~= nil and (k:match("^stage3_") and stage ~= 3) then
        note(("zero_optimization.%s: unused below stage 3"):format(k)); v = nil
      end
      if v ~= nil then t.zero[k] = v end
    elseif how == "offload" then
      local dev = v
      if type(v) == "table" and not is_object(v) then
        err(("zero_optimization.%s must be an object {\"device\": ...}"):format(k))
      end
      if type(v) == "table" then dev = v.device end
      if dev == nil then dev = "none" end
      if dev == "nvme" then
        err(("zero_optimization.%s.device = \"nvme\" (ZeRO-Infinity) is not modelled: vrsim models "
             .. "\"cpu\" offload only"):format(k))
      elseif dev ~= "cpu" and dev ~= "none" then
        err(("zero_optimization.%s.device must be \"cpu\", \"nvme\" or \"none\", not %s"):format(k, tostring(dev)))
      end
      if type(v) == "table" and v.ratio ~= nil and v.ratio ~= 1 then
        err(("zero_optimization.%s.ratio = %s (partial offload) is not modelled"):format(k, tostring(v.ratio)))
      end
      if k == "offload_param" and dev == "cpu" and stage ~= 3 then
        err("zero_optimization.offload_param is valid with stage 3 only (DeepSpeed)")
      end
      t.zero[k] = dev
      if dev ~= "none" then read[#read + 1] = k .. " " .. dev end
    elseif how == "deprecated" then
      if v == true then
        t.zero[k == "cpu_offload" and "offload_optimizer" or "offload_param"] = "cpu"
        note(("zero_optimization.%s (deprecated) read as %s.device = \"cpu\""):format(k,
             k == "cpu_offload" and "offload_optimizer" or "offload_param"))
      end
    elseif how == "stage" then
      -- handled above
    elseif type(how) == "table" then
      if v ~= how.default then
        err(("zero_optimization.%s = %s (%s) is not modelled; DeepSpeed's default %s is"):format(k,
            tostring(v), how.why, tostring(how.default)))
      end
    else
      note(("zero_optimization.%s: no effect on memory (%s)"):format(k, how))
    end
  end
  if stage == 3 and z.stage3_prefetch_bucket_size ~= nil then
    note("stage3_prefetch_bucket_size: vrsim prefetches the next layer's parameters, as DeepSpeed does "
         .. "when one layer fits in the bucket")
  end

  -- batch sizes: "auto" is the scenario's value (fill_match); a number the scenario also gave
  -- must agree; missing ones derived as DeepSpeed does; then its assertion
  local world = cfg.hardware.count
  -- a batch field's value within the bounds the scenario field has (--set's, plan.lua check_field)
  local function bounded(scen_field, v, k)
    local ok, r = pcall(require("vrsim.plan").check_field, "training", scen_field, v, k)
    if not ok then err(tostring(r)) end
    return r
  end
  local function int_key(k, scen_field)
    local v = ds[k]
    if v == nil then return nil end
    if v == "auto" then return t[scen_field], true end
    if math.tointeger(v) == nil or v <= 0 then err(("%s must be a positive integer or \"auto\", not %s"):format(k, tostring(v))) end
    v = math.tointeger(v)
    if scen_field then v = bounded(scen_field, v, k) end
    if scen_field and given["training." .. scen_field] and t[scen_field] ~= v then
      err(("%s = %d, but training.%s = %d (the HF Trainer's mismatch error: set it to \"auto\")"):format(
          k, v, scen_field, t[scen_field]))
    end
    return v
  end
  local mb = int_key("train_micro_batch_size_per_gpu", "micro_batch")
  local ga = int_key("gradient_accumulation_steps", "grad_accum")
  local tb_auto = ds.train_batch_size == "auto"
  local tb = (not tb_auto) and int_key("train_batch_size", nil) or nil
  if tb then
    -- a value derived from train_batch_size is held to its field's bounds too (0 is left to
    -- the assertion below, which names all four)
    local function derived(f, v, k)
      if v >= 1 then return bounded(f, v, k .. " (train_batch_size / the others)") end
      return v
    end
    if mb and not ga then ga = derived("grad_accum", tb // mb // world, "gradient_accumulation_steps")
    elseif ga and not mb then mb = derived("micro_batch", tb // world // ga, "train_micro_batch_size_per_gpu")
    elseif not mb and not ga then ga = 1; mb = derived("micro_batch", tb // world, "train_micro_batch_size_per_gpu") end
  end
  mb = mb or t.micro_batch
  ga = ga or t.grad_accum
  if tb and (mb <= 0 or ga <= 0 or tb ~= mb * ga * world) then
    err(("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size: "
         .. "%d != %d * %d * %d (DeepSpeed's assertion)"):format(tb, mb, ga, world))
  end
  t.micro_batch, t.grad_accum = mb, ga
  read[#read + 1] = ("micro-batch %d x %d accumulation x %d GPUs = %d per step"):format(mb, ga, world, mb * ga * world)
  for _, k in ipairs(keys(t.zero)) do
    local v = t.zero[k]
    if ZERO_KEYS[k] == "knob" and k ~= "overlap_comm" and not (auto[k] and z[k] == "auto") then
      read[#read + 1] = ("%s %s"):format(k, math.tointeger(v) and ("%d"):format(math.tointeger(v)) or tostring(v))
    end
  end
  if t.zero.overlap_comm == nil then
    read[#read + 1] = ("overlap_comm %s (DeepSpeed's default: stage == 3)"):format(tostring(stage == 3))
  else
    read[#read + 1] = "overlap_comm " .. tostring(t.zero.overlap_comm)
  end
  cfg.deepspeed_read = table.concat(read, "; ")
  cfg.deepspeed_unknown = unknown
end

return D
