-- record.lua: one measured run (a line of a validation .jsonl, in the format of
-- docs/validation.md, "Record format", decoded into a Lua table by the C side) turned into the scenario table
-- that reproduces it. The scenario then goes through the planner like any other
-- (lua/vrsim/plan.lua), so a record is data from start to end: nothing of it becomes Lua source.
--
-- R.scenario(rec, opts) -> scenario table, or nil and the reason the record cannot be modelled.
--   opts.steps  steps to simulate (the C side counts them from `steps` / `oom_at_step`)
--   opts.rank   which rank of a multi-GPU record
-- Every field a record may carry is listed below, either mapped onto the scenario or named as
-- a measurement/provenance field; a field that is neither is a reason to skip the record, never
-- silently ignored. The provenance fields vrsim does not read at all (`meta`, `env`, `python`,
-- ...: sim/cmd_validate.c PROVENANCE) are taken out of the record before it reaches this file.
local R = {}

-- Fields that describe the measurement or where it came from: they never change what runs.
local INFO = {}
for _, k in ipairs {
  "name", "steps", "ranks", "torch", "gpu", "peft", "cuda", "cudnn", "nccl",
  "total_mib", "build_s", "process_s", "harness_s", "n_params", "n_trainable", "n_params_ok",
  "param_dtype", "after_build_alloc_mib", "after_build_reserved_mib", "after_inputs_alloc_mib",
  "nvsmi_used_minus_reserved_mib", "nvml_process_used_mib", "nvml_device_used_mib",
  "nvml_device_used_before_init_mib", "trace", "trace_events", "trace_steps", "oom_at_step", "oom_msg",
  "oom_num_alloc_retries", "oom_peak_reserved_mib", "latent_hw", "sdp_flash",
  "sdp_mem_efficient", "lora_rank", "lora_alpha", "routing",
  -- a steady-median record (validation/harness/measure_sdxl_steps.py): the steps' spread, the
  -- host's issue time whole and by phase, the host's dispatch benchmark the scale came from
  -- (host_class_bench and host_optim_bench are mapped: below)
  "warmup", "n_steps", "median_ms", "min_ms", "max_ms", "p10_ms", "p90_ms", "iqr_ms",
  "median_wall_ms", "median_host_ms", "host_bench",
  -- a compiled diffusion record (measure_diffusers.py, compile = true): the classes compiled,
  -- dynamo's counters after the warm-up steps and at the end (a difference is a recompilation
  -- in a timed step), and the summary of the steps after its warm-up (sim/cmd_validate.c holds
  -- the step time to its median_gpu_ms)
  "compiled_classes", "dynamo_warmup", "dynamo_end", "timed",
  -- the host's time by phase and cProfile's groups after the steps (measure_diffusers.py host_profile)
  "host_profile",
} do INFO[k] = true end

-- Fields that are mapped below.
local MAPPED = {}
for _, k in ipairs {
  "shape", "hf_config", "model", "res", "mode", "attn", "optim", "ckpt", "batch", "seq",
  "alloc_conf", "cap_mib", "strategy", "raf", "world_size", "offload", "empty_cache_after_build",
  "omp_num_threads", "ddp_bucket_cap_mb", "lora", "accum", "build", "cudnn_benchmark", "settle_ms",
  "host_dispatch_scale", "host_class_bench", "host_optim_bench", "dry_run", "transformers", "code",
} do MAPPED[k] = true end
-- model and loss techniques (validation/harness/tech_model.py): each record field is the
-- training field of the same name, its value as the plan gave it (`vrsim fields`)
local MODEL_TECHNIQUES = { "compile", "float8", "loss", "checkpoint_scope", "checkpoint_impl" }
for _, k in ipairs(MODEL_TECHNIQUES) do MAPPED[k] = true end
-- build, optimizer and step techniques (validation/harness/tech_train.py): the training field of
-- each name
for _, k in ipairs { "optimizer", "optimizer_in_backward", "activation_offload", "quant",
                     "generate", "inference" } do MAPPED[k] = true end
-- the batch and loss techniques (validation/harness/tech_data.py): training.dpo and
-- training.data; dpo_reference says which reference the harness ran (a second copy or the
-- adapters disabled: which one follows from the mode, and is checked against it)
for _, k in ipairs { "dpo", "data" } do MAPPED[k] = true end
for _, k in ipairs { "dpo_reference", "dpo_import_stubs", "axolotl" } do INFO[k] = true end

-- The `gpu` a record names (torch.cuda.get_device_name) -> vrsim's card (lua/hw/gpus.lua).
local RECORD_GPUS = { ["NVIDIA H200"] = "h200", ["NVIDIA H100 80GB HBM3"] = "h100_sxm" }

local MODES = { fp32 = 1, amp_bf16 = 1, amp_fp16 = 1, bf16 = 1, fp16 = 1, lora_bf16 = 1,
                mp_fp32 = 1, qlora_bf16 = 1 }
-- optim -> optimizer, optimizer_impl (torch.optim.AdamW(foreach=True) / (fused=True) /
-- (foreach=False); torch.optim.SGD(momentum=0.9, foreach=True))
local OPTIMS = { adamw_foreach = { "adamw", "foreach" }, adamw_fused = { "adamw", "fused" },
                 adamw_forloop = { "adamw", "forloop" }, sgd_momentum = { "sgd", "foreach" } }

local function int(rec, k, def)
  local v = rec[k]
  if v == nil then return def end
  local i = math.type(v) and math.tointeger(v)
  if not i then error(("record field '%s' must be an integer, not %s"):format(k, tostring(v)), 0) end
  return i
end

local function num(rec, k)
  local v = rec[k]
  if v == nil then return nil end
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    error(("record field '%s' must be a finite number, not %s"):format(k, tostring(v)), 0)
  end
  return v
end

local function str(rec, k)
  local v = rec[k]
  if v ~= nil and type(v) ~= "string" then
    error(("record field '%s' must be a string, not %s"):format(k, type(v)), 0)
  end
  return v
end

local function bool(rec, k)
  local v = rec[k]
  if v ~= nil and type(v) ~= "boolean" then
    error(("record field '%s' must be true or false, not %s"):format(k, tostring(v)), 0)
  end
  return v
end

-- The type the planner gives a scenario field ("string", "table", ...), nil when it has none.
local function field_type(section, field)
  return require("vrsim.plan").field_type(section, field)
end

-- hf_config keys that do not change what LlamaForCausalLM allocates or computes in a training
-- step (initialisation, generation and tokenizer settings, the rotary base; transformers 5.17
-- computes the rotary frequencies per forward, so max_position_embeddings makes no tensor)
local HF_NO_MEMORY = { rms_norm_eps = 1, rope_theta = 1, max_position_embeddings = 1,
  initializer_range = 1, bos_token_id = 1, eos_token_id = 1, pad_token_id = 1, torch_dtype = 1,
  dtype = 1, use_cache = 1, transformers_version = 1, pretraining_tp = 1, _name_or_path = 1 }

-- Until the model layer takes a config table (model.config of type "table"), an hf_config that
-- LLaMA2's explicit shape fields express exactly is given as those fields; any key that would
-- change the model beyond them is a reason to skip, not a field to drop.
local function llama_fields(hf)
  local arch = hf.architectures
  if arch ~= nil and not (type(arch) == "table" and #arch == 1 and arch[1] == "LlamaForCausalLM") then
    return nil, ("hf_config architectures %s: only LlamaForCausalLM until model.config takes a config table")
      :format(type(arch) == "table" and table.concat(arch, ",") or tostring(arch))
  end
  if hf.model_type ~= nil and hf.model_type ~= "llama" then
    return nil, ("hf_config model_type '%s' is not llama"):format(tostring(hf.model_type))
  end
  local m = { arch = "llama2" }
  local MAP = { hidden_size = "hidden", intermediate_size = "intermediate",
                num_attention_heads = "heads", num_key_value_heads = "kv_heads",
                num_hidden_layers = "layers", vocab_size = "vocab" }
  local names = {}
  for k in pairs(hf) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local v = hf[k]
    if MAP[k] then
      m[MAP[k]] = v
    elseif k == "architectures" or k == "model_type" or HF_NO_MEMORY[k] then
      -- checked above, or no effect on a training step
    elseif k == "tie_word_embeddings" and v == false then
      -- LLaMA2's untied lm_head
    elseif (k == "attention_bias" or k == "mlp_bias") and v == false then
      -- the LLaMA2 model has no biases
    elseif k == "hidden_act" and v == "silu" then
      -- LLaMA2's activation
    elseif k == "head_dim" and hf.hidden_size and hf.num_attention_heads
           and v == hf.hidden_size / hf.num_attention_heads then
      -- the default head size
    else
      return nil, ("hf_config.%s = %s is not expressible by the LLaMA2 shape fields (model.config "
                   .. "as a table is needed)"):format(k, tostring(v))
    end
  end
  for _, f in pairs(MAP) do
    if m[f] == nil and f ~= "kv_heads" then return nil, "hf_config has no " .. f end
  end
  return m
end

-- ---- diffusion records (validation/harness/measure_diffusers.py) ----------------------------
-- model flux / sd3 / sd with diffusers_config, the diffusers config.json object the harness built
-- from (its cut keys laid over), res in pixels; the transformer or UNet only, the latents and text
-- embeddings given: text_encoders = vae = "cached", as the record says.
local DIFFUSION = { flux = true, sd3 = true, sd = true }
for _, k in ipairs { "diffusers" } do INFO[k] = true end
for _, k in ipairs { "diffusers_config", "text_encoders", "vae", "max_sequence_length" } do MAPPED[k] = true end

local function diffusion_model(rec, model)
  if not DIFFUSION[model] then return nil end
  if type(rec.diffusers_config) ~= "table" then
    return nil, ("model '%s' needs diffusers_config, its config.json object"):format(model)
  end
  return { arch = model, config = rec.diffusers_config }, "diffusion"
end

local function diffusion_training(rec, tr)
  tr.resolution = int(rec, "res")
  if not tr.resolution then return nil, "a diffusion record has no res" end
  if rec.seq ~= nil then return nil, "a diffusion record has res, not seq" end
  -- attn: the SDPA backend the harness left on (flash: torch.backends.cuda.enable_*_sdp)
  tr.attention = str(rec, "attn")
  tr.text_encoders = str(rec, "text_encoders")
  tr.vae = str(rec, "vae")
  tr.max_sequence_length = int(rec, "max_sequence_length")
  return tr
end
-- ---- end of diffusion records ----------------------------------------------------------------

local function model_of(rec)
  local hf, shape, model = rec.hf_config, str(rec, "shape"), str(rec, "model")
  if hf ~= nil then
    if type(hf) ~= "table" then return nil, "hf_config is not a JSON object" end
    if shape then return nil, "the record has both shape and hf_config" end
    -- the model layer takes the config object itself (model.config of type "config": a path or
    -- a table); the family comes from its architectures / model_type
    local ft = field_type("model", "config")
    if ft and ft ~= "string" then return { config = hf } end
    return llama_fields(hf)
  end
  if model and DIFFUSION[model] then return diffusion_model(rec, model) end
  if (model and model:match("^sdxl")) or rec.res ~= nil then
    local m = { arch = "sdxl", variant = model or "sdxl-base-unet" }
    -- measure_diffusers.py's SDXL UNet: diffusers' UNet2DConditionModel from this config
    -- (models/sdxl.lua checks it is SDXL base's, cut only in its sizing keys)
    if rec.diffusers_config ~= nil then
      if type(rec.diffusers_config) ~= "table" then return nil, "diffusers_config is not a JSON object" end
      m.config = rec.diffusers_config
    end
    return m, "sdxl"
  end
  if model then return nil, ("model '%s' is not one vrsim knows"):format(model) end
  if not shape then return nil, "record has no shape or hf_config" end
  return { arch = "llama2", size = shape }
end

-- lora {r, alpha, dropout, targets} -> training.lora (peft's LoraConfig(r, lora_alpha,
-- lora_dropout, target_modules)); target names as peft writes them (q_proj, to_out.0)
local function lora_of(rec)
  local l = rec.lora
  if l == nil then return nil end
  if type(l) ~= "table" then error("record field 'lora' must be an object", 0) end
  for k in pairs(l) do
    if k ~= "r" and k ~= "alpha" and k ~= "dropout" and k ~= "targets" then
      error(("record field 'lora.%s' is not understood (r, alpha, dropout, targets)"):format(tostring(k)), 0)
    end
  end
  local out = { r = int(l, "r"), alpha = num(l, "alpha"), dropout = num(l, "dropout") }
  if type(l.targets) == "string" then
    -- peft's target_modules as one string: "all-linear" (every Linear but the output layer)
    out.targets = l.targets
  elseif l.targets ~= nil then
    if type(l.targets) ~= "table" then error("record field 'lora.targets' must be an array or a string", 0) end
    out.targets = {}
    for i, t in ipairs(l.targets) do
      if type(t) ~= "string" then error(("record field 'lora.targets[%d]' must be a string"):format(i), 0) end
      out.targets[i] = t
    end
  end
  -- the older SDXL fields say the same thing
  if rec.lora_rank ~= nil and rec.lora_rank ~= out.r then error("lora_rank differs from lora.r", 0) end
  if rec.lora_alpha ~= nil and rec.lora_alpha ~= out.alpha then error("lora_alpha differs from lora.alpha", 0) end
  return out
end

-- DDP's first-iteration bucket (every trainable gradient) outlives step 1's rebuild or not by a
-- race the configuration does not decide (lua/strategies/ddp.lua first_bucket_release); the
-- rank's own steps say which way it went. Kept through step 1's backward, the bucket lifts that
-- step's peak allocated above the steady steps' by its size: "all_reduce" when step 1 peaks
-- above the rank's last step by more than half the bucket, "rebuild" when not. A record with no
-- steady step after step 1 to tell is "rebuild" when measure_multi.py slept settle_ms >= 200
-- after step 0 (two of the watchdog's 100 ms wake-ups before step 1's barrier), else "auto".
local GRAD_BYTES = { bf16 = 2, fp16 = 2, lora_bf16 = 2 }
-- measure_host_classes.py's chain names that are not vrsim's class names (its F.silu chain is the
-- activation class); the others are the same
local BENCH_CLASS = { silu = "activation" }
-- ops of vrsim's class in one op of a chain: its `view` chain runs x.view(4096).view(64, 64), its
-- `cast` chain x.to(torch.float32).to(torch.bfloat16), two casts (ToCopyBackward0 nodes) an op;
-- the class prices one (h200_torch.lua host_class_us: cast is one of the chain's two, 14.4 / 17.8
-- us where host_classes_h200*.json's chains took 24.0-31.8 / 32.3-39.0)
local BENCH_PER_OP = { view = 2, cast = 2 }

-- hardware.host_classes from a record's host_class_bench (validation/harness/measure_sdxl_steps.py:
-- the model's host op classes timed on the run's host after its steps), nil when it has none.
-- The host figures outside those classes (ops priced per kernel, the optimizer's per-tensor
-- work, the checkpointed region) then take the ratio of the classes' summed figures to the
-- calibration host's, a scale measured on module calls that record autograd, as those are,
-- rather than host_dispatch_scale's tight F.linear loop (lua/hw/host_speed.lua). A backward
-- node's median less the empty chain's can come out below 0 by noise; it is 0, as
-- measure_host_classes.py's own checkpoint columns are.
local function host_classes_of(rec)
  local b = rec.host_class_bench
  if b == nil then return nil end
  if type(b) ~= "table" or type(b.classes) ~= "table" then
    error("record field 'host_class_bench' must be an object with 'classes'", 0)
  end
  local out = {}
  for name, c in pairs(b.classes) do
    if type(c) ~= "table" then error(("record field 'host_class_bench.classes.%s' must be an object"):format(name), 0) end
    local cls = BENCH_CLASS[name] or name
    if out[cls] then error(("record field 'host_class_bench': class '%s' timed twice"):format(cls), 0) end
    out[cls] = { fwd_us = num(c, "fwd_us"), bwd_us = num(c, "bwd_us") }
    local per = BENCH_PER_OP[name]
    if per and out[cls].fwd_us and out[cls].bwd_us then
      out[cls].fwd_us, out[cls].bwd_us = out[cls].fwd_us / per, out[cls].bwd_us / per
    end
    if out[cls].bwd_us and out[cls].bwd_us < 0 then out[cls].bwd_us = 0 end
  end
  if next(out) == nil then return nil end
  local bad = require("hw.host_speed").bad_classes(out)
  if bad then error("record field 'host_class_bench': " .. bad, 0) end
  return out
end

-- hardware.host_optim from a record's host_optim_bench (validation/harness/measure_sdxl_steps.py
-- --optim-bench: measure_optim_host.per_tensor_us on the run's host after its steps), nil when it
-- has none. Its committed_* figures are the calibration host's, written beside for the reader.
-- The bench times one optimizer implementation (impl: AdamW with foreach=True) and the figure
-- replaces every implementation's (lua/hw/host_speed.lua), so it describes a run of that
-- optimizer alone: a record of another is an error naming both, not a silent substitution.
local OPTIM_BENCH_KEYS = { step_tensor_us = true, zero_grad_tensor_us = true, impl = true, dtype = true,
                           committed_step_tensor_us = true, committed_zero_grad_tensor_us = true }
local function host_optim_of(rec, optim)
  local b = rec.host_optim_bench
  if b == nil then return nil end
  if type(b) ~= "table" then error("record field 'host_optim_bench' must be an object", 0) end
  for k in pairs(b) do
    if not OPTIM_BENCH_KEYS[k] then
      error(("record field 'host_optim_bench.%s' is not one vrsim validate understands"):format(tostring(k)), 0)
    end
  end
  local impl = b.impl == nil and "foreach" or b.impl
  if type(impl) ~= "string" then error("record field 'host_optim_bench.impl' must be a string", 0) end
  -- (a bitsandbytes optimizer, the record's `optimizer`, replaces torch.optim's AdamW)
  local ran = type(rec.optimizer) == "string" and rec.optimizer or optim
  local want = "adamw_" .. impl
  if ran ~= want then
    error(("record field 'host_optim_bench' timed %s but the record's optimizer is %s"):format(want, ran), 0)
  end
  local out = { step_tensor_us = b.step_tensor_us, zero_grad_tensor_us = b.zero_grad_tensor_us }
  local bad = require("hw.host_speed").bad_optim(out)
  if bad then error("record field 'host_optim_bench': " .. bad, 0) end
  return out
end

local function first_iteration_bucket_of(rec, rank, mode)
  local settled = (tonumber(rec.settle_ms) or 0) >= 200
  local n = tonumber(rec.n_trainable)
  local ranks = type(rec.ranks) == "table" and rec.ranks or {}
  for i, rk in ipairs(ranks) do
    local st = type(rk) == "table" and rk.steps
    if (tonumber(rk.rank) or i - 1) == rank and type(st) == "table" and #st >= 3 and n and n > 0 then
      local p1, pl = tonumber(st[2].peak_alloc_mib), tonumber(st[#st].peak_alloc_mib)
      if p1 and pl then
        local half_mib = n * (GRAD_BYTES[mode] or 4) / 2 / 2^20
        return p1 - pl > half_mib and "all_reduce" or "rebuild"
      end
    end
  end
  return settled and "rebuild" or "auto"
end

-- The keys a record's dpo and data objects may carry (training.dpo's and training.data's as
-- tech_data.py writes them; a file of lengths is not data a record can carry).
local DPO_KEYS = { prompt_length = true, completion_length = true, max_length = true,
                   precompute_ref_log_probs = true }
local DATA_KEYS = { lengths = true, batching = true, order = true, pad_to_multiple_of = true, real_batches = true,
                    pack_length = true, max_length = true }

local function object_of(rec, k, keys)
  local v = rec[k]
  if type(v) ~= "table" then error(("record field '%s' must be an object"):format(k), 0) end
  for key in pairs(v) do
    if not keys[key] then
      local names = {}
      for n in pairs(keys) do names[#names + 1] = n end
      table.sort(names)
      error(("record field '%s.%s' is not understood (%s)"):format(k, tostring(key), table.concat(names, ", ")), 0)
    end
  end
  return v
end

-- dpo and data onto training.dpo and training.data. Both set the rows' length themselves
-- (the planner refuses training.seq beside them), so the record's seq, the length the harness
-- ran, is checked against the one they give and then left out. Returns true, or nil and the
-- reason the record is skipped.
local function batch_techniques(rec, tr, lora)
  if rec.dpo ~= nil then
    local d = object_of(rec, "dpo", DPO_KEYS)
    local out = { prompt_length = int(d, "prompt_length"), completion_length = int(d, "completion_length"),
                  max_length = int(d, "max_length"), precompute_ref_log_probs = bool(d, "precompute_ref_log_probs") }
    local ref = str(rec, "dpo_reference")
    local want = (out.precompute_ref_log_probs and "none") or (lora and "adapters_disabled") or "ref_model_copy"
    if ref ~= nil and ref ~= want then
      return nil, ("dpo_reference '%s': vrsim's DPO with this mode runs '%s'"):format(ref, want)
    end
    if out.prompt_length and out.completion_length and rec.seq ~= nil then
      local len = math.min(out.prompt_length + out.completion_length, out.max_length or 1024)
      if tr.seq ~= len then
        return nil, ("seq %d is not the DPO rows' length %d (prompt + completion, truncated to max_length)")
          :format(tr.seq, len)
      end
    end
    tr.dpo, tr.seq = out, nil
  elseif rec.dpo_reference ~= nil then
    return nil, "field 'dpo_reference' without dpo"
  end
  if rec.data ~= nil then
    local d = object_of(rec, "data", DATA_KEYS)
    if type(d.lengths) ~= "table" then
      return nil, "data.lengths is not a list (a record carries the lengths, not a file of them)"
    end
    local out = { lengths = {}, batching = str(d, "batching"), order = str(d, "order"),
                  pad_to_multiple_of = int(d, "pad_to_multiple_of"), real_batches = bool(d, "real_batches"),
                  pack_length = int(d, "pack_length"), max_length = int(d, "max_length") }
    local sum, max = 0, 0
    for i, v in ipairs(d.lengths) do
      local n = math.type(v) and math.tointeger(v)
      if not n then error(("record field 'data.lengths[%d]' must be an integer"):format(i), 0) end
      out.lengths[i] = n
      sum, max = sum + n, math.max(max, n)
    end
    -- which batch ran is in the record only when the lengths are one micro-batch in the given
    -- order (tech_data.py runs no other)
    -- (axolotl's real batches under sdpa: lengths that pack first-fit into micro_batch bins)
    local rows, longest = #out.lengths, max
    if out.batching == "multipack" and out.real_batches and out.pack_length then
      -- (training.data's own first-fit, the lengths in the given order, axolotl's defaults)
      local order = {}
      for i = 1, #out.lengths do order[i] = i end
      local bins = require("strategies.data").pack_first_fit(out.lengths, order, out.pack_length, 200, 100000)
      rows, longest = #bins, 0
      for _, bn in ipairs(bins) do longest = math.max(longest, bn.total) end
    end
    if out.order ~= "given" or rows ~= tr.micro_batch then
      return nil, "data: the record's lengths are not one micro-batch in the given order (which batch ran is not recorded)"
    end
    local m = out.pad_to_multiple_of or 1
    local len = out.batching == "padding_free" and sum or (longest + m - 1) // m * m
    if rec.seq ~= nil and tr.seq ~= len then
      return nil, ("seq %d is not the collated row's length %d"):format(tr.seq, len)
    end
    tr.data, tr.seq = out, nil
  end
  return true
end

function R.scenario(rec, opts)
  local names = {}
  for k in pairs(rec) do names[#names + 1] = tostring(k) end
  table.sort(names)
  for _, k in ipairs(names) do
    if not INFO[k] and not MAPPED[k] then
      return nil, ("field '%s' is not one vrsim validate understands"):format(k)
    end
  end
  if bool(rec, "dry_run") then
    return nil, "dry_run = true: the harness's CPU stand-in model, not the run it names"
  end
  local gpu = str(rec, "gpu")
  local gpu_key = RECORD_GPUS[gpu or "NVIDIA H200"]
  if not gpu_key then return nil, ("measured on %s, not a GPU vrsim validate maps"):format(gpu) end
  if bool(rec, "cudnn_benchmark") then return nil, "cudnn_benchmark = true is not modelled" end
  local mode = str(rec, "mode")
  if not mode then return nil, "record has no mode" end
  if not MODES[mode] then return nil, ("mode '%s' is not one vrsim knows"):format(mode) end
  local model, why = model_of(rec)
  if not model then return nil, why end
  -- the modelling code the harness built (tech_model.py build_torchtune: torchtune's own decoder)
  if rec.code ~= nil then
    if rec.code ~= "torchtune" and rec.code ~= "transformers" then
      return nil, ("code '%s' is not transformers or torchtune"):format(tostring(rec.code))
    end
    model.code = rec.code
  end
  local sdxl = why == "sdxl"
  local optim = str(rec, "optim") or "adamw_foreach"
  local oi = OPTIMS[optim]
  if not oi then return nil, ("optim '%s' is not one vrsim knows"):format(optim) end
  local total, cap = num(rec, "total_mib"), num(rec, "cap_mib")
  local build = str(rec, "build")
  if build ~= nil and build ~= "direct" and build ~= "cast" then
    return nil, ("build '%s' is not cast or direct"):format(build)
  end

  local hw = { gpu = gpu_key }
  -- the run's host against the calibration host on the same tiny-op loop (host_bench's
  -- eager_linear_us over h200_torch.lua's); lua/hw/host_speed.lua refuses one that is not > 0
  hw.host_dispatch_scale = num(rec, "host_dispatch_scale")
  -- where the record timed the model's host op classes on its host, those instead
  local classes = host_classes_of(rec)
  -- ...where they describe the run's ops: the class chains were timed recording autograd, and
  -- generate runs under torch.no_grad (GenerationMixin.generate's decorator), whose ops record
  -- none, as host_bench's tight loop on tensors that need no gradient does (on one H100 host the
  -- chains said 1.22 and the loop 1.02 of the calibration host; generate's steady steps ran at
  -- 0.93-1.45 of vrsim's calibration-host figure, median 1.08: llama_h100_gen6_generate.jsonl)
  if classes and bool(rec, "inference") then classes = nil end
  if classes then
    hw.host_classes = classes
    hw.host_dispatch_scale = require("hw.host_speed").class_ratio(classes)
  end
  -- the optimizer's per-tensor work as timed on the run's host; an inference record runs no
  -- optimizer step (its optimizer's figures would price nothing)
  local optim_host = host_optim_of(rec, optim)
  if optim_host and not bool(rec, "inference") then hw.host_optim = optim_host end
  local tr = { micro_batch = int(rec, "batch", 1), precision = mode, optimizer = oi[1],
               optimizer_impl = oi[2], checkpointing = bool(rec, "ckpt") == true, steps = opts.steps }
  if sdxl then
    hw.capacity_mib = total or (gpu_key == "h200" and 143155.9375 or nil)
    tr.resolution = int(rec, "res", 1024)
    if rec.attn ~= nil and str(rec, "attn") ~= "sdpa" then
      return nil, ("attn '%s' for SDXL: its blocks call scaled_dot_product_attention"):format(rec.attn)
    end
    if rec.seq ~= nil then return nil, "an SDXL record has res, not seq" end
    -- the UNet alone takes its text embeddings and latents given (measure_diffusers.py says
    -- cached); SDXL's step takes 77 tokens from its CLIP encoders
    for _, k in ipairs { "text_encoders", "vae" } do
      if rec[k] ~= nil and rec[k] ~= "cached" then
        return nil, ("%s '%s' for the SDXL UNet alone (its inputs are given: cached)"):format(k, tostring(rec[k]))
      end
    end
    if rec.max_sequence_length ~= nil then return nil, "max_sequence_length for SDXL (77 CLIP tokens)" end
  elseif why == "diffusion" then
    hw.capacity_mib = total or 143155.9375
    local ok, err = diffusion_training(rec, tr)
    if not ok then return nil, err end
  else
    if total and total > 0 then hw.capacity_mib = total end
    tr.seq = int(rec, "seq", 2048)
    tr.attention = str(rec, "attn") or "sdpa"
    -- the harness hands attn to transformers' attn_implementation as it is: "flex_attention" is
    -- vrsim's flex
    if tr.attention == "flex_attention" then tr.attention = "flex" end
  end
  -- set_per_process_memory_fraction(cap_mib / total) before the model is built
  if cap ~= nil then
    if not (total and total > 0) then return nil, "cap_mib without total_mib" end
    if not (cap > 0) then return nil, "cap_mib must be > 0" end
    hw.memory_fraction = cap / total
  end
  if oi[1] == "sgd" and field_type("training", "momentum") then tr.momentum = 0.9 end
  local accum = int(rec, "accum", 1)
  if accum ~= 1 then tr.grad_accum = accum end
  -- the harnesses build with from_config in fp32, then .to(dtype), unless the record says direct
  tr.build = build or "cast"
  -- the transformers release the run imported (training.transformers): the rotary tables' matmul
  -- before 5.19 and the loss path before 4.49 follow it (strategies/tf_version.lua)
  if rec.transformers ~= nil then tr.transformers = str(rec, "transformers") end
  local lora = lora_of(rec)
  if lora then tr.lora = lora end
  -- model and loss techniques: onto the training fields as they are
  for _, k in ipairs(MODEL_TECHNIQUES) do
    if rec[k] ~= nil then tr[k] = rec[k] end
  end
  -- tech_model.py compiles the decoder layers alone (apply_compile) and runs its chunked loss
  -- eager: F.cross_entropy(lc.float(), ...) per chunk, each chunk's fp32 log-probabilities saved
  -- (fulltrace_ttc-compile-oib-act-offload-8bit: an fp32 copy and a kept fp32 output of 250.5 MiB
  -- per chunk), not torchtune's compile_loss
  if tr.loss == "chunked" and tr.compile then
    local c = {}
    if type(tr.compile) == "table" then
      for k, x in pairs(tr.compile) do c[k] = x end
    end
    c.loss = false
    tr.compile = c
  end
  -- the harnesses checkpoint through transformers' gradient_checkpointing_enable (use_reentrant=False),
  -- unless the record names torchtitan's order (tech_model.py apply_wrapper_compile: each layer in
  -- torch's checkpoint_wrapper, then compiled)
  if tr.checkpointing and rec.checkpoint_impl == nil then tr.checkpoint_impl = "transformers" end
  if rec.checkpoint_impl ~= nil and not (tr.checkpointing and rec.checkpoint_impl == "wrapper") then
    return nil, "field 'checkpoint_impl' is \"wrapper\" with ckpt = true, or absent"
  end
  -- the scope is read only with checkpointing on: a record naming it without ckpt is not a run
  -- vrsim would simulate as measured
  if rec.checkpoint_scope ~= nil and not tr.checkpointing then
    return nil, "field 'checkpoint_scope' without ckpt = true"
  end
  -- multi-GPU records: strategy, raf, world_size, offload, empty_cache_after_build
  local strategy = str(rec, "strategy")
  if strategy then
    hw.count = int(rec, "world_size", 1)
    hw.interconnect = "nvlink"
    hw.rank = opts.rank
    tr.strategy = strategy
    tr.zero = { raf = rec.raf ~= false }
    -- measure_multi.py builds the whole model on every GPU, then fully_shard replaces it
    if strategy == "fsdp2" then tr.zero.init = "whole" end
    if bool(rec, "offload") then
      tr.zero.offload_param, tr.zero.offload_optimizer = "cpu", "cpu"
    end
    local bucket = num(rec, "ddp_bucket_cap_mb")
    if bucket ~= nil then tr.zero.bucket_cap_mb = bucket end
    if strategy == "ddp" or strategy == "zero1" then
      tr.zero.first_iteration_bucket = first_iteration_bucket_of(rec, opts.rank, mode)
    end
    if rec.settle_ms ~= nil and not (num(rec, "settle_ms") and rec.settle_ms >= 0) then
      return nil, "settle_ms must be a number >= 0"
    end
    tr.empty_cache_after_build = rec.empty_cache_after_build == true
    -- measure_multi.py runs each rank with OMP_NUM_THREADS=8 unless the record says
    tr.cpu_threads = int(rec, "omp_num_threads", 8)
  else
    for _, k in ipairs { "raf", "world_size", "offload", "ddp_bucket_cap_mb", "omp_num_threads", "settle_ms" } do
      if rec[k] ~= nil and rec[k] ~= false then
        return nil, ("field '%s' without a strategy"):format(k)
      end
    end
    if rec.empty_cache_after_build == true then tr.empty_cache_after_build = true end
  end
  -- build, optimizer and step techniques (validation/harness/tech_train.py)
  -- qlora_bf16: bitsandbytes nf4 (double quant, bf16 compute) and peft LoRA, vrsim's lora_bf16
  -- precision with quant = "nf4"; the record names quant itself
  -- quant torchao_nf4 with mode lora_bf16: torchtune's QLoRA base weights on peft's model
  -- (validation/harness/tech_model.py apply_torchao_nf4)
  local quant = str(rec, "quant")
  if mode == "qlora_bf16" then
    if quant ~= "nf4" then return nil, "mode qlora_bf16 without quant = \"nf4\"" end
    tr.precision = "lora_bf16"
  elseif quant == "torchao_nf4" then
    if mode ~= "lora_bf16" then return nil, "quant 'torchao_nf4' outside mode lora_bf16" end
  elseif quant ~= nil then
    return nil, ("quant '%s' outside mode qlora_bf16"):format(quant)
  end
  if quant then tr.quant = quant end
  -- optimizer: bitsandbytes' AdamW as the Trainer builds it for adamw_bnb_8bit / paged_adamw_8bit
  local optimizer = str(rec, "optimizer")
  if optimizer ~= nil then
    if optimizer ~= "adamw8bit" and optimizer ~= "paged_adamw_8bit" then
      return nil, ("optimizer '%s' is not one the harness runs (adamw8bit, paged_adamw_8bit)"):format(optimizer)
    end
    tr.optimizer = optimizer
  end
  if bool(rec, "optimizer_in_backward") then tr.optimizer_in_backward = true end
  if bool(rec, "activation_offload") then tr.activation_offload = true end
  -- generate {prompt, max_new_tokens, batch} with inference: model.generate; the planner sets
  -- micro_batch and seq from it
  if bool(rec, "inference") then tr.inference = true end
  local g = rec.generate
  if g ~= nil then
    if type(g) ~= "table" then error("record field 'generate' must be an object", 0) end
    for k in pairs(g) do
      if k ~= "prompt" and k ~= "max_new_tokens" and k ~= "batch" then
        error(("record field 'generate.%s' is not understood (prompt, max_new_tokens, batch)"):format(tostring(k)), 0)
      end
    end
    -- (the harness sets generation_config.eos_token_id = None: no row stops early)
    tr.generate = { prompt = int(g, "prompt"), max_new_tokens = int(g, "max_new_tokens"),
                    batch = int(g, "batch"), eos = false }
    if tr.generate.batch ~= tr.micro_batch or tr.generate.prompt ~= tr.seq then
      return nil, "generate.batch and generate.prompt differ from the record's batch and seq"
    end
    tr.micro_batch, tr.seq = nil, nil
  end
  local ok, err = batch_techniques(rec, tr, lora ~= nil)
  if not ok then return nil, err end
  return { hardware = hw, model = model, training = tr,
           allocator = { conf = str(rec, "alloc_conf") or "" } }
end

return R
