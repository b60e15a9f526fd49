-- recipes/accelerate.lua: an accelerate config YAML (`accelerate config`'s file, read by
-- `accelerate launch --config_file`) read as accelerate 1.x reads it (commands/config/
-- config_args.py ClusterConfig; utils/dataclasses.py FullyShardedDataParallelPlugin and
-- DeepSpeedPlugin; utils/fsdp_utils.py fsdp2_prepare_model), into a vrsim scenario's hardware
-- and strategy.
--
-- The file holds the launch, not the run: the model, batch, sequence and optimizer are the
-- training script's, given with --set (model.config=PATH is required) or left at vrsim's
-- defaults, which the notes say.
local A = {}

local TOOL = "accelerate"

function A.detect(doc)
  return doc.distributed_type ~= nil or doc.compute_environment ~= nil
end

-- Launch settings that change neither memory nor the step's time.
local NOT_READ = {
  "compute_environment", "debug", "downcast_bf16", "enable_cpu_affinity", "machine_rank",
  "main_process_ip", "main_process_port", "main_training_function", "rdzv_backend",
  "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "gpu_ids", "use_cpu",
  "ipex_config", "mpirun_config", "commands", "command_file", "tpu_name",
  "tpu_zone", "megatron_lm_config", "fp8_config",
}
local FSDP_NOT_READ = {
  "fsdp_state_dict_type",               -- how checkpoints are saved
  "fsdp_transformer_layer_cls_to_wrap", -- the decoder layer class: vrsim wraps each decoder layer
  "fsdp_sync_module_states", "fsdp_use_orig_params", "fsdp_forward_prefetch", -- FSDP1 only
  "fsdp_backward_prefetch",             -- FSDP1 only; FSDP2 prefetches one layer ahead
  "fsdp_min_num_params",
}
local DS_NOT_READ = { "gradient_clipping", "zero3_save_16bit_model", "deepspeed_multinode_launcher",
                      "deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter" }

-- dynamo_config: accelerate launch sets ACCELERATE_DYNAMO_*, from which the Accelerator's
-- TorchDynamoPlugin compiles the script's model (prepare). With dynamo_use_regional_compilation
-- it compiles each decoder layer on its own (compile_regions): vrsim's training.compile; the whole
-- model as one graph is not modelled.
local function read_dynamo(r, d, t)
  local dc = r:get(d, "dynamo_config", "table")
  if not dc then return end
  local P = "dynamo_config."
  local backend = r:get(dc, "dynamo_backend", "string", "NO", P)
  local regional = r:get(dc, "dynamo_use_regional_compilation", "boolean", false, P)
  local mode = r:get(dc, "dynamo_mode", "string", "default", P)
  local full = r:get(dc, "dynamo_use_fullgraph", "boolean", false, P)
  r:get(dc, "dynamo_use_dynamic", "boolean", nil, P)
  if backend:upper() ~= "NO" then
    if backend:upper() ~= "INDUCTOR" then
      r:fail(dc, "dynamo_backend", ("'%s' is not modelled (read: NO, INDUCTOR)"):format(backend), P)
    end
    if mode ~= "default" then r:fail(dc, "dynamo_mode", ("'%s' is not modelled (read: default)"):format(mode), P) end
    -- without regional compilation TorchDynamoPlugin compiles the whole model (scope "model")
    t.compile = { scope = regional and "layer" or "model", fullgraph = full or nil }
    if regional and not full then t.compile = true end
  end
  r:finish(dc, TOOL, P)
end

-- The scenario of the config read by r (opts as recipes/load.lua's).
function A.scenario(r, opts)
  local d = r.doc
  local notes = {}
  local scn = { hardware = { gpu = opts.gpu }, model = {}, training = {} }
  local t = scn.training
  -- opts.script: the training script's config is read beside this one (recipes/launch.lua)
  if not opts.model_config and not opts.script then
    r:fail(d, "distributed_type", "an accelerate config names no model: give the training script's "
           .. "with --set model.config=PATH (its config.json), and its batch with --set micro_batch=N seq=N")
  end

  local dt = r:get(d, "distributed_type", "string", "NO")
  local np = r:field(d, "num_processes", "hardware", "count", r:get(d, "num_processes", "integer", 1))
  local nm = r:get(d, "num_machines", "integer", 1)
  if np < 1 then r:fail(d, "num_processes", "must be at least 1") end
  if nm < 1 or np % nm ~= 0 then r:fail(d, "num_machines", ("must divide num_processes (%d)"):format(np)) end
  local count = opts.count or np
  if dt == "NO" then count = opts.count or 1 end
  scn.hardware.count = count
  if nm > 1 then scn.hardware.gpus_per_node = count // nm end
  local mp = r:get(d, "mixed_precision", "string", "no")
  if mp ~= "no" and mp ~= "bf16" and mp ~= "fp16" then
    r:fail(d, "mixed_precision", ("'%s' is not modelled (read: no, bf16, fp16)"):format(mp))
  end

  if dt == "NO" or dt == "MULTI_GPU" then
    t.strategy = count > 1 and "ddp" or "none"
    -- Accelerator(mixed_precision=...): torch.autocast around the script's fp32 model
    t.precision = ({ no = "fp32", bf16 = "amp_bf16", fp16 = "amp_fp16" })[mp]
  elseif dt == "FSDP" then
    local fc = r:get(d, "fsdp_config", "table") or {}
    local P = "fsdp_config."
    local v = r:get(fc, "fsdp_version", "integer", 1, P)
    if v ~= 2 then
      r:fail(fc, "fsdp_version", ("%d (FSDP1, FullyShardedDataParallel) is not modelled: vrsim models "
             .. "FSDP2 (fully_shard), fsdp_version: 2"):format(v), P)
    end
    t.strategy = "fsdp2"
    t.zero = {}
    -- fsdp2_prepare_model: with mixed_precision on, trainable parameters are up-cast to fp32
    -- shards and MixedPrecisionPolicy computes in bf16
    if mp == "fp16" then r:fail(d, "mixed_precision", "fp16 under FSDP2 is not modelled") end
    t.precision = mp == "bf16" and "mp_fp32" or "fp32"
    local raf = r:get(fc, "fsdp_reshard_after_forward", { "boolean", "string" }, true, P)
    -- FSDP1's sharding strategy names, which accelerate maps onto reshard_after_forward for FSDP2
    if raf == "FULL_SHARD" then raf = true elseif raf == "SHARD_GRAD_OP" then raf = false end
    if type(raf) ~= "boolean" then r:fail(fc, "fsdp_reshard_after_forward", ("'%s' is not modelled"):format(raf), P) end
    local ss = r:get(fc, "fsdp_sharding_strategy", "string", nil, P)
    if ss and ss ~= "FULL_SHARD" and ss ~= "SHARD_GRAD_OP" then
      r:fail(fc, "fsdp_sharding_strategy", ("'%s' is not modelled (read: FULL_SHARD, SHARD_GRAD_OP)"):format(ss), P)
    end
    if ss == "SHARD_GRAD_OP" then raf = false end
    t.zero.raf = raf
    if r:get(fc, "fsdp_offload_params", "boolean", false, P) then
      -- CPUOffloadPolicy: parameters, gradients and optimizer state on the host
      t.zero.offload_param, t.zero.offload_optimizer = "cpu", "cpu"
    end
    -- cpu_ram_efficient_loading changes where the host holds the checkpoint; either way
    -- fully_shard puts only each rank's shards on its GPU (zero.init auto)
    r:get(fc, "fsdp_cpu_ram_efficient_loading", "boolean", nil, P)
    notes[#notes + 1] = "accelerate fsdp_cpu_ram_efficient_loading: host memory at load, not simulated "
        .. "(on the GPU each rank holds only its shards either way)"
    t.checkpointing = r:get(fc, "fsdp_activation_checkpointing", "boolean", false, P)
    -- regional compilation under FSDP2 sets torch._dynamo.config.
    -- skip_fwd_side_effects_in_bwd_under_checkpoint (accelerator.py), so the checkpointed layers
    -- compile (strategies/compile.lua M.eager_layer); without it compile is refused above
    if t.checkpointing then t.checkpoint_impl = "wrapper" end
    local wrap = r:get(fc, "fsdp_auto_wrap_policy", "string", "TRANSFORMER_BASED_WRAP", P)
    if wrap ~= "TRANSFORMER_BASED_WRAP" then
      r:fail(fc, "fsdp_auto_wrap_policy", ("'%s' is not modelled (vrsim shards per decoder layer: "
             .. "TRANSFORMER_BASED_WRAP)"):format(wrap), P)
    end
    r:not_read(fc, FSDP_NOT_READ, P)
    r:finish(fc, TOOL, P)
  elseif dt == "DEEPSPEED" then
    local dc = r:get(d, "deepspeed_config", "table") or {}
    local P = "deepspeed_config."
    -- DeepSpeed's own precision: bf16 / fp16 weights with fp32 master copies in the optimizer
    t.precision = ({ no = "fp32", bf16 = "bf16", fp16 = "fp16" })[mp]
    local file = r:get(dc, "deepspeed_config_file", "string", nil, P)
    if file then
      t.deepspeed = file
      for k in pairs(r.lines[dc] or {}) do
        if k ~= 0 and k ~= "deepspeed_config_file" and dc[k] ~= nil then
          r:fail(dc, k, "beside deepspeed_config_file (accelerate refuses the mix: set it in the JSON)", P)
        end
      end
    else
      local stage = r:get(dc, "zero_stage", "integer", 2, P)
      local s = ({ [0] = "ddp", [1] = "zero1", [2] = "zero2", [3] = "zero3" })[stage]
      if not s then r:fail(dc, "zero_stage", "must be 0, 1, 2 or 3", P) end
      t.strategy = s
      t.zero = {}
      for key, knob in pairs({ offload_optimizer_device = "offload_optimizer", offload_param_device = "offload_param" }) do
        local dev = r:get(dc, key, "string", "none", P)
        if dev ~= "none" and dev ~= "cpu" then r:fail(dc, key, ("'%s' is not modelled (none, cpu)"):format(dev), P) end
        if dev == "cpu" then t.zero[knob] = "cpu" end
      end
      if r:get(dc, "zero3_init_flag", "boolean", false, P) == false and stage == 3 then
        r:fail(dc, "zero3_init_flag", "false with zero_stage 3: loading the whole model before "
               .. "DeepSpeed partitions it is not modelled (set it true: zero.Init)", P)
      end
      local ga = r:field(dc, "gradient_accumulation_steps", "training", "grad_accum",
                         r:get(dc, "gradient_accumulation_steps", "integer", nil, P), P)
      if ga then t.grad_accum = ga end
      r:not_read(dc, DS_NOT_READ, P)
      r:finish(dc, TOOL, P)
    end
  else
    r:fail(d, "distributed_type", ("'%s' is not modelled (read: NO, MULTI_GPU, FSDP, DEEPSPEED)"):format(dt))
  end
  read_dynamo(r, d, t)
  if t.compile and not opts.script then
    -- compile's refusals (strategies/compile.lua) on the key that turns it on
    local why = require("recipes.hf_args").compile_refusal(t)
    if why then r:fail(d, "dynamo_config", why) end
  end
  if not opts.script then notes[#notes + 1] = "accelerate config: the training script's batch, sequence, optimizer and checkpointing "
      .. "are vrsim's defaults unless --set gives them" end
  r:not_read(d, NOT_READ)
  r:finish(d, TOOL)
  return scn, notes
end

return A
