-- recipes/torchtitan.lua: a torchtitan job config (`torchrun ... -m torchtitan.train
-- --job.config_file FILE.toml`) read as torchtitan reads it, into a vrsim scenario.
--
-- The keys and defaults are torchtitan's JobConfig (torchtitan/config/job_config.py) as it stood
-- in its last release that took TOML job configs (commit 238fa99, February 2026; later versions
-- replaced the TOML files with Python config registries). How each key acts is from train.py
-- (gradient accumulation from global_batch_size, the model built under training.dtype),
-- models/llama3/infra/parallelize.py (tensor parallelism, activation checkpointing, FSDP2's
-- MixedPrecisionPolicy and reshard_after_forward policy), distributed/utils.py
-- (maybe_enable_amp: autocast only without FSDP, TP and PP), distributed/pipeline_parallel.py
-- (micro-batches = local_batch_size / pipeline_parallel_microbatch_size),
-- distributed/activation_checkpoint.py and components/optimizer.py.
--
-- The model: [model] name/flavor as torchtitan's llama3 flavors (models/llama3/__init__.py
-- llama3_args, the TransformerModelArgs defaults and FeedForward's hidden size), written out here
-- as the Hugging Face config of the same shapes; any other model through --set model.config=PATH.
local T = {}

local TOOL = "torchtitan"

function T.detect(doc)
  local m = doc.model
  return type(doc.parallelism) == "table" or type(doc.job) == "table"
      or (type(m) == "table" and m.flavor ~= nil and m._component_ == nil)
end

-- torchtitan's llama3 flavors (llama3_args): TransformerModelArgs fields that differ from its
-- defaults (vocab_size 128256, multiple_of 256, norm_eps 1e-5, n_kv_heads = n_heads). The
-- flex / varlen attention flavors are refused by name (vrsim's attention is SDPA's).
local LLAMA3 = {
  debugmodel = { dim = 256, n_layers = 6, n_heads = 16, vocab_size = 2048, rope_theta = 500000 },
  ["8B"] = { dim = 4096, n_layers = 32, n_heads = 32, n_kv_heads = 8, ffn_dim_multiplier = 1.3,
             multiple_of = 1024, rope_theta = 500000 },
  ["70B"] = { dim = 8192, n_layers = 80, n_heads = 64, n_kv_heads = 8, ffn_dim_multiplier = 1.3,
              multiple_of = 4096, rope_theta = 500000 },
  ["405B"] = { dim = 16384, n_layers = 126, n_heads = 128, n_kv_heads = 8, ffn_dim_multiplier = 1.2,
               multiple_of = 4096, rope_theta = 500000 },
}

-- FeedForward's hidden size: int(2 * 4 * dim / 3), times ffn_dim_multiplier (int), rounded up to
-- a multiple of multiple_of.
local function ffn_hidden(a)
  local h = (2 * 4 * a.dim) // 3
  if a.ffn_dim_multiplier then h = math.floor(a.ffn_dim_multiplier * h) end
  local m = a.multiple_of or 256
  return m * ((h + m - 1) // m)
end

-- The Hugging Face config (a table, model.config) of a llama3 flavor: torchtitan's Transformer
-- has LlamaForCausalLM's weights (untied output) and operations per layer.
local function llama3_config(a, seq)
  return {
    architectures = { "LlamaForCausalLM" }, model_type = "llama",
    hidden_size = a.dim, num_hidden_layers = a.n_layers, num_attention_heads = a.n_heads,
    num_key_value_heads = a.n_kv_heads or a.n_heads, intermediate_size = ffn_hidden(a),
    vocab_size = a.vocab_size or 128256, rms_norm_eps = 1e-5, rope_theta = a.rope_theta or 10000,
    max_position_embeddings = seq, hidden_act = "silu", attention_bias = false, mlp_bias = false,
    tie_word_embeddings = false,
  }
end

-- Sections and keys that change neither memory nor step time (or that vrsim does not simulate:
-- logging, profiling, saving), listed as not read.
local NOT_READ_SECTIONS = { "profiling", "metrics", "lr_scheduler", "checkpoint", "comm", "debug" }

local function dtype_of(r, t, k, allowed, default, prefix)
  local v = r:get(t, k, "string", default, prefix)
  for _, a in ipairs(allowed) do if v == a then return v end end
  r:fail(t, k, ("'%s' is not one of %s"):format(v, table.concat(allowed, ", ")), prefix)
end

-- A section's table (absent: empty; it must be a table).
local function section(r, d, k)
  return r:get(d, k, "table") or {}
end

-- The number of decoder layers of the model, for the checks that need it (nil: unknown).
local function n_layers(cfg)
  if type(cfg) == "table" then return cfg.num_hidden_layers end
  local ok, c = pcall(require("vrsim.core").read_config, cfg)
  return ok and type(c) == "table" and math.tointeger(c.num_hidden_layers) or nil
end

function T.scenario(r, opts)
  local d = r.doc
  local notes = {}
  local world = opts.count or 1
  local scn = { hardware = { gpu = opts.gpu, count = world }, model = {}, training = {} }
  local t = scn.training

  -- [job]: paths and names; a custom config module would change what the file means
  local job = section(r, d, "job")
  if r:get(job, "custom_config_module", "string", "", "job.") ~= "" then
    r:fail(job, "custom_config_module", "a custom config module (its own keys) is not read", "job.")
  end
  r:not_read(job, { "config_file", "dump_folder", "description", "print_config", "save_config_file" }, "job.")
  r:finish(job, TOOL, "job.")

  -- [training]
  local tr = section(r, d, "training")
  local P = "training."
  local lbs_key = r:has(tr, "local_batch_size") and "local_batch_size" or "batch_size"
  if r:has(tr, "local_batch_size") and r:has(tr, "batch_size") then
    r:fail(tr, "batch_size", "the older name of local_batch_size, beside it: give one", P)
  end
  local lbs = r:get(tr, lbs_key, "integer", 8, P)
  local gbs = r:get(tr, "global_batch_size", "integer", -1, P)
  local seq = r:get(tr, "seq_len", "integer", 2048, P)
  t.seq = r:field(tr, "seq_len", "training", "seq", seq, P)
  local dtype = dtype_of(r, tr, "dtype", { "float32", "bfloat16" }, "float32", P)
  local mpp = dtype_of(r, tr, "mixed_precision_param", { "bfloat16", "float32" }, "bfloat16", P)
  dtype_of(r, tr, "mixed_precision_reduce", { "float32" }, "float32", P)
  local cpu_offload = r:get(tr, "enable_cpu_offload", "boolean", false, P)
  r:not_read(tr, { "dataset", "dataset_path", "max_norm", "steps", "gc_freq", "gc_debug", "dataloader" }, P)
  r:finish(tr, TOOL, P)

  -- [parallelism]: the device mesh (lua/vrsim/mesh.lua's training.parallel)
  local pa = section(r, d, "parallelism")
  P = "parallelism."
  local deg = {}
  local KEYS = { dp_replicate = "data_parallel_replicate_degree", dp_shard = "data_parallel_shard_degree",
                 tp = "tensor_parallel_degree", pp = "pipeline_parallel_degree", cp = "context_parallel_degree",
                 ep = "expert_parallel_degree" }
  for _, dim in ipairs { "dp_replicate", "dp_shard", "tp", "pp", "cp", "ep" } do
    deg[dim] = r:get(pa, KEYS[dim], "integer", dim == "dp_shard" and -1 or 1, P)
    if deg[dim] < 1 and not (dim == "dp_shard" and deg[dim] == -1) then
      r:fail(pa, KEYS[dim], ("%d: a degree is an integer >= 1%s"):format(deg[dim], dim == "dp_shard" and " (or -1, the rest)" or ""), P)
    end
  end
  local others = deg.pp * deg.dp_replicate * deg.cp * deg.tp
  if deg.dp_shard == -1 then
    if world % others ~= 0 then
      r:fail(pa, KEYS.dp_shard, ("-1 (the rest): pipeline x replicate x context x tensor degrees = %d do not divide "
             .. "the %d GPUs (--gpus)"):format(others, world), P)
    end
    deg.dp_shard = world // others
  elseif others * deg.dp_shard ~= world then
    r:fail(pa, KEYS.dp_shard, ("the degrees multiply to %d; torchtitan runs on the world size, %d GPUs (--gpus)")
           :format(others * deg.dp_shard, world), P)
  end
  -- context parallelism's rotate method (torchtitan's default "allgather", torch's set_rotate_method)
  local rotate = r:get(pa, "context_parallel_rotate_method", "string", "allgather", P)
  if rotate ~= "allgather" and rotate ~= "alltoall" then
    r:fail(pa, "context_parallel_rotate_method", ("'%s' is not one of allgather, alltoall"):format(rotate), P)
  end
  -- async tensor parallelism: training.parallel.async_tp (apply_tp's maybe_enable_async_tp, with
  -- tensor parallelism only; it needs the model compiled, checked with [compile] below)
  local async_tp = r:get(pa, "enable_async_tensor_parallel", "boolean", false, P)
  if r:get(pa, "disable_loss_parallel", "boolean", false, P) and deg.tp > 1 then
    r:fail(pa, "disable_loss_parallel", "the output gathered whole before the loss is not modelled (vrsim's "
           .. "tensor parallelism keeps torchtitan's default, loss parallel)", P)
  end
  local ett = r:get(pa, "expert_tensor_parallel_degree", "integer", 1, P)
  if ett ~= 1 then r:fail(pa, "expert_tensor_parallel_degree", "expert tensor parallelism is not modelled", P) end
  local raf = r:get(pa, "fsdp_reshard_after_forward", "string", "default", P)
  if raf ~= "default" and raf ~= "always" and raf ~= "never" then
    r:fail(pa, "fsdp_reshard_after_forward", ("'%s' is not one of default, always, never"):format(raf), P)
  end
  local sched = r:get(pa, "pipeline_parallel_schedule", "string", "1F1B", P)
  local mbs = r:get(pa, "pipeline_parallel_microbatch_size", "integer", 1, P)
  local lps = r:get(pa, "pipeline_parallel_layers_per_stage", "integer", nil, P)
  for _, k in ipairs { "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers" } do
    if r:get(pa, k, "integer", 1, P) ~= 1 then
      r:fail(pa, k, "vrsim's split counts the embeddings and the head as one layer each (torchtitan's default, 1)", P)
    end
  end
  if r:get(pa, "module_fqns_per_model_part", "table", nil, P) then
    r:fail(pa, "module_fqns_per_model_part", "a split by module names is not read: give the layers per stage "
           .. "as --set parallel.pp_stage_layers after --print-scenario", P)
  end
  local csv = r:get(pa, "pipeline_parallel_schedule_csv", "string", "", P)
  if csv ~= "" then r:fail(pa, "pipeline_parallel_schedule_csv", "a schedule from a CSV file is not modelled", P) end
  r:not_read(pa, { "context_parallel_load_balancer", "expert_parallel_comm_backend", "pipeline_parallel_expert_parallel_overlap" }, P)
  r:finish(pa, TOOL, P)

  local par = {}
  for _, dim in ipairs { "dp_replicate", "dp_shard", "tp", "pp", "cp", "ep" } do
    if deg[dim] ~= 1 then par[dim] = deg[dim] end
  end
  par.dp_shard = deg.dp_shard -- (as resolved: -1 made the rest)
  if deg.cp > 1 then par.cp_rotate_method = rotate end
  if async_tp and deg.tp > 1 then
    par.async_tp = true
  elseif async_tp then
    notes[#notes + 1] = "parallelism.enable_async_tensor_parallel has no effect with tensor_parallel_degree = 1 "
        .. "(torchtitan enables it in apply_tp, which runs only with tensor parallelism)"
  end
  local fsdp = deg.dp_shard > 1 or deg.cp > 1 -- ParallelDims.fsdp_enabled
  if deg.pp > 1 then
    par.pp_schedule = sched
    if lbs % mbs ~= 0 then
      r:fail(pa, "pipeline_parallel_microbatch_size", ("%d does not divide training.%s = %d (torchtitan)"):format(mbs, lbs_key, lbs), P)
    end
    par.pp_microbatches = lbs // mbs
    if lps then par.pp_layers_per_stage = lps end
    t.micro_batch = r:field(pa, "pipeline_parallel_microbatch_size", "training", "micro_batch", mbs, P)
  else
    t.micro_batch = r:field(tr, lbs_key, "training", "micro_batch", lbs, "training.")
  end
  t.parallel = par

  -- gradient accumulation: global_batch_size over local_batch_size x the data-parallel degree
  local dp = deg.dp_replicate * deg.dp_shard
  if gbs < 0 then gbs = lbs * dp end
  if gbs % (lbs * dp) ~= 0 then
    r:fail(tr, "global_batch_size", ("%d is not a multiple of %s x data-parallel degree = %d x %d (torchtitan)")
           :format(gbs, lbs_key, lbs, dp), "training.")
  end
  t.grad_accum = r:field(tr, "global_batch_size", "training", "grad_accum", gbs // (lbs * dp), "training.")

  -- precision: the model built in training.dtype; FSDP2's MixedPrecisionPolicy(param_dtype =
  -- mixed_precision_param, reduce_dtype = float32) where FSDP is on, else autocast to
  -- mixed_precision_param under DDP or one GPU, else (TP or PP without FSDP) none
  if dtype == "bfloat16" then
    if fsdp and mpp == "float32" then
      r:fail(tr, "mixed_precision_param", "float32 over bfloat16 parameters (FSDP2 gathering them up-cast) is not modelled", "training.")
    end
    t.precision = "bf16"
    if fsdp then t.zero = { reduce_dtype = "fp32" } end
  elseif fsdp then
    t.precision = mpp == "bfloat16" and "mp_fp32" or "fp32"
  elseif deg.tp > 1 or deg.pp > 1 then
    t.precision = "fp32"
    if mpp == "bfloat16" then
      notes[#notes + 1] = "torchtitan runs no mixed precision with tensor or pipeline parallelism without FSDP "
          .. "(maybe_enable_amp): fp32, as simulated"
    end
  else
    t.precision = mpp == "bfloat16" and "amp_bf16" or "fp32"
  end
  t.build = "direct" -- built on the meta device, then materialized and initialized in place

  -- FSDP2's knobs
  if cpu_offload then
    if not fsdp then r:fail(tr, "enable_cpu_offload", "FSDP's CPUOffloadPolicy needs FSDP (data_parallel_shard_degree > 1)", "training.") end
    t.zero = t.zero or {}
    t.zero.offload_param, t.zero.offload_optimizer = "cpu", "cpu"
  end
  if fsdp and raf ~= "default" then
    local want = raf == "always"
    if deg.pp > 1 and want then
      r:fail(pa, "fsdp_reshard_after_forward", "'always' beside a pipeline (per-micro-batch all-gathers) is not modelled", "parallelism.")
    elseif deg.pp == 1 and not want then
      t.zero = t.zero or {}
      t.zero.raf = false
    end
  end

  -- apply_fsdp's units: tok_embeddings alone (resharded after forward), each layer, [norm,
  -- output] (not resharded), the root; vrsim's FSDP2 has one root unit for the embeddings, norm
  -- and head, gathered through the step. Beside a pipeline nothing is resharded: the same.
  if fsdp and deg.pp == 1 and raf ~= "never" then
    notes[#notes + 1] = "torchtitan's FSDP shards tok_embeddings as a unit of its own, resharded after forward; "
        .. "vrsim's FSDP2 keeps the embeddings in the root's unit with the final norm and the head, gathered from "
        .. "the first forward to the end of backward, so its peak may count their gathered copy where torchtitan "
        .. "holds the shard (an overestimate of up to the embeddings' unsharded size)"
  end

  -- [model]
  local m = section(r, d, "model")
  P = "model."
  local name = r:get(m, "name", "string", "llama3", P)
  local flavor = r:get(m, "flavor", "string", "debugmodel", P)
  local conv = r:get(m, "converters", "table", {}, P)
  if #conv > 0 then
    r:fail(m, "converters", ("'%s': torchtitan's model converters (float8, mx quantized training) are not "
           .. "modelled"):format(tostring(conv[1])), P)
  end
  r:not_read(m, { "hf_assets_path", "tokenizer_path", "print_after_conversion" }, P)
  if opts.model_config then
    r:not_read(m, { "name", "flavor" }, P)
    notes[#notes + 1] = ("torchtitan's %s %s simulated as the model of --set model.config"):format(name, flavor)
  else
    if name ~= "llama3" then
      r:fail(m, "name", ("'%s': vrsim's torchtitan reader builds llama3's flavors; for another model give "
             .. "--set model.config=PATH (a config.json of the same shapes)"):format(name), P)
    end
    local a = LLAMA3[flavor]
    if not a then
      local names = {}
      for k in pairs(LLAMA3) do names[#names + 1] = k end
      table.sort(names)
      r:fail(m, "flavor", ("'%s' is not a llama3 flavor vrsim reads (%s; the flex and varlen attention flavors are "
             .. "not modelled); or give --set model.config=PATH"):format(flavor, table.concat(names, ", ")), P)
    end
    scn.model.config = llama3_config(a, seq)
    local hd = a.dim // a.n_heads
    notes[#notes + 1] = ("torchtitan's llama3 %s simulated as the transformers Llama model of its shapes: the same "
        .. "weights and operations per layer, transformers' intermediates; torchtitan's freqs_cis buffer "
        .. "(seq_len x %d complex64, %.1f MiB) is not in it"):format(flavor, hd // 2, seq * (hd // 2) * 8 / 1048576)
  end
  r:finish(m, TOOL, P)

  -- [quantize]: read only through model.converters, which names none here
  if r:has(d, "quantize") then
    r:get(d, "quantize", "table")
    r.skipped[#r.skipped + 1] = "quantize (model.converters names no converter)"
  end

  -- [activation_checkpoint]
  local ac = section(r, d, "activation_checkpoint")
  P = "activation_checkpoint."
  local mode = r:get(ac, "mode", "string", "selective", P)
  local opt = r:get(ac, "selective_ac_option", { "string", "integer" }, "2", P)
  if mode == "none" then
    t.checkpointing = false
    r:not_read(ac, { "selective_ac_option" }, P)
  elseif mode == "full" then
    t.checkpointing = true
    -- apply_ac wraps each block in ptd_checkpoint_wrapper before apply_compile compiles it
    t.checkpoint_impl = "wrapper"
    r:not_read(ac, { "selective_ac_option" }, P)
  elseif mode == "selective" then
    t.checkpointing = true
    t.checkpoint_impl = "wrapper"
    if opt == "op" then
      t.checkpoint_scope = "op"
    else
      local k = math.tointeger(tonumber(opt))
      if not k or k < 0 then
        r:fail(ac, "selective_ac_option", ("'%s' is not 'op' or a whole number of layers"):format(tostring(opt)), P)
      end
      -- torchtitan wraps layers k, 2k, ... (a count from 1, k = 0 or 1: every layer); vrsim the
      -- layers 1, 1 + k, ...: the same number of them only where k divides the layers
      if k > 1 then
        local n = n_layers(opts.model_config or scn.model.config)
        if not n or n % k ~= 0 then
          r:fail(ac, "selective_ac_option", ("every %d layers: torchtitan checkpoints layers %d, %d, ...; vrsim "
                 .. "checkpoints 1, %d, ..., the same count only where %d divides the %s layers"):format(k, k, 2 * k,
                 k + 1, k, n and tostring(n) or "model's"), P)
        end
        t.checkpoint_every = k
        notes[#notes + 1] = ("torchtitan's selective_ac_option %d checkpoints decoder layers %d, %d, ...; simulated as "
            .. "every %d-th from the first (the same number of layers)"):format(k, k, 2 * k, k)
      end
    end
  else
    r:fail(ac, "mode", ("'%s' is not modelled (read: none, full, selective; memory_budget is torch.compile's)"):format(mode), P)
  end
  if r:get(ac, "early_stop", "boolean", false, P) then
    r:fail(ac, "early_stop", "stopping recomputation early is not modelled", P)
  end
  r:not_read(ac, { "per_op_sac_force_recompute_mm_shapes_by_fqns", "memory_budget", "visualize_memory_budget_pareto",
                   "preserve_rng_state", "determinism_check", "debug" }, P)
  r:finish(ac, TOOL, P)

  -- [optimizer]: build_optimizers (torch.optim's Adam / AdamW with the implementation's flag)
  local o = section(r, d, "optimizer")
  P = "optimizer."
  local oname = r:get(o, "name", "string", "AdamW", P)
  if oname == "AdamW" then t.optimizer = "adamw"
  elseif oname == "Adam" then t.optimizer = "adam"
  else r:fail(o, "name", ("'%s' is not modelled (read: AdamW, Adam)"):format(oname), P) end
  local impl = r:get(o, "implementation", "string", "fused", P)
  local IMPL = { fused = "fused", foreach = "foreach", ["for-loop"] = "forloop" }
  if not IMPL[impl] then r:fail(o, "implementation", ("'%s' is not one of fused, foreach, for-loop"):format(impl), P) end
  t.optimizer_impl = IMPL[impl]
  if r:get(o, "early_step_in_backward", "boolean", false, P) then t.optimizer_in_backward = true end
  r:not_read(o, { "lr", "beta1", "beta2", "eps", "weight_decay" }, P)
  r:finish(o, TOOL, P)

  -- [compile]
  local c = section(r, d, "compile")
  P = "compile."
  if r:get(c, "enable", "boolean", false, P) then
    r:fail(c, "enable", "torch.compile (its fused kernels and freed intermediates) is not modelled", P)
  end
  if async_tp and deg.tp > 1 then
    -- (torchtitan's maybe_enable_async_tp raises so)
    r:fail(pa, "enable_async_tensor_parallel", "async TP requires 'model' in --compile.components and "
           .. "--compile.enable (Inductor's micro_pipeline_tp pass)", "parallelism.")
  end
  r:not_read(c, { "components", "backend" }, P)
  r:finish(c, TOOL, P)

  -- sections that change the run only when enabled, which is not modelled: off, their other
  -- keys have no effect
  local function off(sec, key, why)
    local s = section(r, d, sec)
    if r:get(s, key, "boolean", false, sec .. ".") then r:fail(s, key, why, sec .. ".") end
    local rest = {}
    for k in pairs(r.lines[s] or {}) do
      if k ~= 0 and k ~= key then rest[#rest + 1] = k end
    end
    table.sort(rest)
    r:not_read(s, rest, sec .. ".")
    r:finish(s, TOOL, sec .. ".")
  end
  off("validation", "enable", "validation steps (their forward passes every freq steps) are not modelled")
  off("fault_tolerance", "enable", "torchft's replica groups are not modelled")
  off("memory_estimation", "enable", "torchtitan's own memory estimation replaces the run; vrsim simulates the run itself")
  local ex = section(r, d, "experimental")
  for _, k in ipairs { "custom_import", "custom_args_module" } do
    if r:get(ex, k, "string", "", "experimental.") ~= "" then
      r:fail(ex, k, "a custom module (its own model or keys) is not read", "experimental.")
    end
  end
  r:finish(ex, TOOL, "experimental.")

  for _, sname in ipairs(NOT_READ_SECTIONS) do
    if r:has(d, sname) then
      r:get(d, sname, "table")
      r.skipped[#r.skipped + 1] = sname
    end
  end
  t.attention = "sdpa" -- the llama3 flavors' attn_type
  t.loss = "full"      -- build_cross_entropy_loss: the whole logits' cross-entropy
  r:finish(d, TOOL)
  return scn, notes
end

return T
