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
-- distributed/activation_checkpoint.py and components/optimizer.py. Float8 training
-- (model.converters "quantize.linear.float8", components/quantization/float8.py) is read into
-- training.float8; so are two spellings of torchtitan before (e7c0cae, June 2025,
-- config_manager.py): converter "float8" with its top-level [float8] table, and training.compile
-- for compile.enable. MX and grouped-GEMM converters, emulate, and filters other than the output
-- layer are refused; what float8 does that vrsim does not price (the amaxes of the FSDP float8
-- all-gather, precomputed or not) is a note (read_float8 below).
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
-- varlen attention flavors are refused by name; the flex flavors are FlexAttention over the text
-- stream's documents (FLEX_FLAVORS).
local LLAMA3 = {
  debugmodel = { dim = 256, n_layers = 6, n_heads = 16, vocab_size = 2048, rope_theta = 500000 },
  ["8B"] = { dim = 4096, n_layers = 32, n_heads = 32, n_kv_heads = 8, ffn_dim_multiplier = 1.3,
             multiple_of = 1024, rope_theta = 500000 },
  ["70B"] = { dim = 8192, n_layers = 80, n_heads = 64, n_kv_heads = 8, ffn_dim_multiplier = 1.3,
              multiple_of = 4096, rope_theta = 500000 },
  ["405B"] = { dim = 16384, n_layers = 126, n_heads = 128, n_kv_heads = 8, ffn_dim_multiplier = 1.2,
               multiple_of = 4096, rope_theta = 500000 },
}

-- The flex flavors (238fa99 models/llama3/__init__.py): their base flavor's shapes with attn_type
-- "flex" and attn_mask_type "block_causal" (FlexAttention over the documents each row's EOS
-- tokens part: training.data's batching torchtitan). The varlen flavors are not modelled.
local FLEX_FLAVORS = { ["8B_flex"] = "8B", debugmodel_flex_attn = "debugmodel" }

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

-- The model's config as a table (model.config is a table, or a config.json's path), or nil.
local function config_table(cfg)
  if type(cfg) == "table" then return cfg end
  local ok, c = pcall(require("vrsim.core").read_config, cfg)
  return ok and type(c) == "table" and c or nil
end

-- ---- float8 training: model.converters ------------------------------------------------------
-- Two spellings, one converter: torchtitan's Float8Converter registered as "float8" and read
-- from a top-level [float8] table (e7c0cae, June 2025: torchtitan/config_manager.py class Float8,
-- torchtitan/components/quantization/float8.py), and Float8LinearConverter registered as
-- "quantize.linear.float8" and read from [quantize.linear.float8] (238fa99:
-- torchtitan/config/job_config.py class Float8Linear, the same file). Both build torchao's
-- Float8LinearConfig alike: recipe_name set, Float8LinearConfig.from_recipe_name(recipe_name)
-- (asserting enable_fsdp_float8_all_gather off, and in e7c0cae force_recompute_fp8_weight_in_bwd
-- off too); unset, the default (tensorwise) config with enable_fsdp_float8_all_gather =
-- parallel_dims.dp_shard_enabled and the key, and precompute_float8_dynamic_scale_for_fsdp
-- acting only where that all-gather is on. The Linears converted: module_filter_fn (components/
-- quantization/utils.py): an nn.Linear whose weight's dims are both divisible by 16 and whose
-- fqn contains none of filter_fqns. Below sm89 both raise ("float8 is only supported on SM89 or
-- later") unless emulate, eager: training.float8's own refusal (strategies/float8.lua) says so.
local FLOAT8_CONVERTERS = {
  float8 = { path = { "float8" }, version = "e7c0cae" },
  ["quantize.linear.float8"] = { path = { "quantize", "linear", "float8" }, version = "238fa99" },
}
-- converters refused by name: what each one converts, not modelled
local OTHER_CONVERTERS = {
  mx = "torchao's MX (mxfp8) training of nn.Linear (MXLinear)",
  ["quantize.linear.mx"] = "torchao's MX (mxfp8) training of nn.Linear (MXLinear)",
  ["quantize.grouped_mm.float8"] = "float8 grouped GEMMs of the MoE experts (torchao's moe training)",
  ["quantize.grouped_mm.mx"] = "MX (mxfp8) grouped GEMMs of the MoE experts (torchao's moe training)",
}
local RECIPES = { tensorwise = true, rowwise = true, rowwise_with_gw_hp = true }
-- the fqns of torchtitan's llama3 Transformer's nn.Linear modules in one decoder layer
local LAYER_LINEARS = { "attention.wq", "attention.wk", "attention.wv", "attention.wo",
                        "feed_forward.w1", "feed_forward.w2", "feed_forward.w3" }

-- The table at path (a list of keys) in d, with its prefix ("quantize.linear.float8."); nil
-- where absent.
local function nested(r, d, path)
  local t, pre = d, ""
  for _, k in ipairs(path) do
    if not r:has(t, k) then return nil, pre .. k .. "." end
    t = r:get(t, k, "table", nil, pre)
    pre = pre .. k .. "."
  end
  return t, pre
end

-- Reads the float8 converter `name` (a key of FLOAT8_CONVERTERS) into training.float8; m and
-- conv_key locate model.converters (where a refusal with no key of its own points). deg: the
-- mesh's degrees; cfg: the model's config (a table or a path).
local function read_float8(r, d, name, m, deg, cfg, t, notes)
  local spec = FLOAT8_CONVERTERS[name]
  local f, P = nested(r, d, spec.path)
  f = f or {}
  local recipe = r:get(f, "recipe_name", "string", nil, P)
  if recipe ~= nil and not RECIPES[recipe] then
    r:fail(f, "recipe_name", ("'%s' is not one of tensorwise, rowwise, rowwise_with_gw_hp (torchao's "
           .. "Float8LinearConfig.from_recipe_name)"):format(recipe), P)
  end
  local ag = r:get(f, "enable_fsdp_float8_all_gather", "boolean", false, P)
  local pre = r:get(f, "precompute_float8_dynamic_scale_for_fsdp", "boolean", false, P)
  local force = false
  if spec.version == "e7c0cae" then
    force = r:get(f, "force_recompute_fp8_weight_in_bwd", "boolean", false, P)
  elseif r:has(f, "force_recompute_fp8_weight_in_bwd") then
    -- (238fa99's Float8Linear has no such field: ConfigManager._dict_to_dataclass raises
    -- "Invalid field names")
    r:fail(f, "force_recompute_fp8_weight_in_bwd", "not a key of torchtitan's Float8Linear "
           .. "([quantize.linear.float8]): it was the older [float8] table's (converter \"float8\"); torchtitan "
           .. "raises on it (torchao made it a no-op: remove it)", P)
  end
  if r:get(f, "emulate", "boolean", false, P) then
    r:fail(f, "emulate", "torchao's emulated float8 GEMMs (high-precision matmuls standing in for "
           .. "_scaled_mm, for GPUs without float8) are not modelled", P)
  end
  local filter = r:get(f, "filter_fqns", "table", {}, P)
  for i, v in ipairs(filter) do
    if type(v) ~= "string" then
      r:fail(f, "filter_fqns", ("entry %d is not a string"):format(i), P)
    end
    if v == "auto_filter_small_kn" then
      r:fail(f, "filter_fqns", "'auto_filter_small_kn': torchao's _auto_filter_for_recipe (Linears left "
             .. "in high precision by their size) is not modelled", P)
    end
  end
  r:finish(f, TOOL, P)

  -- module_filter_fn's substring test against torchtitan's llama3 fqns. vrsim's float8 converts
  -- every Linear of a decoder layer whose dims are divisible by 16 and never the output layer:
  -- a filter must leave out the output (or the output must fail the dims test) and nothing else.
  local c = config_table(cfg) or {}
  local function filtered(fqn)
    for _, v in ipairs(filter) do
      if fqn:find(v, 1, true) then return v end
    end
  end
  -- (the layers' fqns tested one by one: an entry such as "layers.1" matches layers 1, 10, 11, ...;
  -- a config.json's count is held to 4096, beyond any model vrsim can simulate, so that a
  -- hostile one cannot make this loop long)
  local nl = math.min(math.max(math.tointeger(c.num_hidden_layers) or 1, 1), 4096)
  for layer = 0, nl - 1 do
    for _, lin in ipairs(LAYER_LINEARS) do
      local fqn = ("layers.%d.%s"):format(layer, lin)
      local v = filtered(fqn)
      if v then
        r:fail(f, "filter_fqns", ("'%s' keeps %s in high precision: vrsim's float8 converts every Linear of the "
               .. "decoder layers whose dims are divisible by 16 and leaves out only the output layer "
               .. "(a filter of other modules is not modelled; filter_fqns = [\"output\"] is)"):format(v, fqn), P)
      end
    end
  end
  if not filtered("output") then
    local vocab, dim = math.tointeger(c.vocab_size), math.tointeger(c.hidden_size)
    if not (vocab and dim) or (vocab % 16 == 0 and dim % 16 == 0) then
      local what = vocab and dim and ("%d x %d, both divisible by 16"):format(vocab, dim) or "its dims unknown"
      local k = r:has(f, "filter_fqns") and "filter_fqns" or nil
      local msg = ("converts the output layer (%s) to Float8Linear, its filter_fqns naming no \"output\"; "
                   .. "vrsim's float8 keeps the output layer in high precision (torchtitan's llama3 presets give "
                   .. "filter_fqns = [\"output\"])"):format(what)
      if k then r:fail(f, k, msg, P) end
      r:fail(m, "converters", ("'%s' %s"):format(name, msg), "model.")
    end
  end

  local f8 = { recipe = recipe or "tensorwise", fsdp_float8_all_gather = false }
  if recipe ~= nil then
    -- Float8Converter / Float8LinearConverter assert these off beside a recipe name
    if ag then
      r:fail(f, "enable_fsdp_float8_all_gather", "torchtitan asserts \"using `float8_config."
             .. "enable_fsdp_float8_all_gather` together with `float8_config.recipe_name` is not supported\"", P)
    end
    if force then
      r:fail(f, "force_recompute_fp8_weight_in_bwd", "torchtitan asserts \"using `float8_config."
             .. "force_recompute_fp8_weight_in_bwd` together with `float8_config.recipe_name` is not supported\"", P)
    end
    if pre then
      notes[#notes + 1] = ("%sprecompute_float8_dynamic_scale_for_fsdp has no effect beside recipe_name (torchtitan "
          .. "precomputes only for the default config's float8 all-gather)"):format(P)
    end
  else
    local on = ag and deg.dp_shard > 1
    f8.fsdp_float8_all_gather = on
    if ag and not on then
      notes[#notes + 1] = ("%senable_fsdp_float8_all_gather has no effect with data_parallel_shard_degree = 1 "
          .. "(torchtitan: parallel_dims.dp_shard_enabled and the key)"):format(P)
    end
    if pre and not on then
      notes[#notes + 1] = ("%sprecompute_float8_dynamic_scale_for_fsdp has no effect without the FSDP float8 "
          .. "all-gather"):format(P)
    elseif on then
      -- torchao's WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather casts each shard with a
      -- scale from the amax of the whole weight: without precompute, an amax of the shard and an
      -- all-reduce of it a weight at every all-gather; with it, precompute_float8_dynamic_scale_
      -- for_fsdp after each optimizer step (one _foreach_norm over the shards, one all-reduce of
      -- the stacked amaxes) and the cast reads the stored scale. Neither changes memory beyond a
      -- scalar a weight.
      notes[#notes + 1] = pre and ("%sprecompute_float8_dynamic_scale_for_fsdp: vrsim prices the shards' cast to "
          .. "float8 before each all-gather, not the amaxes torchao precomputes after the optimizer step (a "
          .. "_foreach_norm of the shards and one all-reduce of the scales)"):format(P)
          or ("%senable_fsdp_float8_all_gather: vrsim prices the shards' cast to float8 before each all-gather, not "
          .. "the amax of each shard and its all-reduce (one a weight at every all-gather) that torchao runs there "
          .. "without precompute_float8_dynamic_scale_for_fsdp"):format(P)
    end
  end
  if force then
    notes[#notes + 1] = ("%sforce_recompute_fp8_weight_in_bwd: torchao's Float8LinearConfig says it \"is deprecated "
        .. "and currently has no effect\" (torchao 0afa4c1, config.py), and vrsim reads it so"):format(P)
  end
  if recipe == "rowwise" then
    notes[#notes + 1] = "recipe rowwise: torchtitan sets torch._inductor.config.emulate_precision_casts (compiled "
        .. "casts' numerics), which vrsim does not price"
  end
  -- apply_tp's float8 tensor-parallel styles: torchtitan tests `"float8" in
  -- job_config.model.converters`, a list membership that "quantize.linear.float8" fails, so
  -- 238fa99 runs the plain styles (bf16 all-gathers feeding Float8Linear); vrsim's float8 under
  -- TP is torchao's float8 styles (e7c0cae's "float8" with a tensorwise recipe)
  if deg.tp > 1 and name ~= "float8" then
    r:fail(m, "converters", ("'%s' with tensor_parallel_degree %d: torchtitan's apply_tp turns on torchao's "
           .. "float8 tensor-parallel styles only for a converter named \"float8\" (`\"float8\" in "
           .. "model.converters`), so this runs the plain styles, bf16 all-gathers into Float8Linear, which "
           .. "vrsim does not model (its float8 under tensor parallelism is the float8 styles)"):format(name, deg.tp), "model.")
  end
  t.float8 = f8
  notes[#notes + 1] = ("torchtitan model.converters '%s' ([%s]): training.float8 = { recipe = \"%s\", "
      .. "fsdp_float8_all_gather = %s }"):format(name, P:sub(1, -2), f8.recipe, tostring(f8.fsdp_float8_all_gather))
end

function T.scenario(r, opts)
  local d = r.doc
  local notes = {}
  local world = opts.count or 1
  -- (torchtitan's Transformer has no KV cache)
  local scn = { hardware = { gpu = opts.gpu, count = world }, model = { use_cache = false }, training = {} }
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
  -- training.compile: torchtitan's spelling before the [compile] section (e.g. e7c0cae, June
  -- 2025: parallelize_llama's apply_compile of each block and build_cross_entropy_loss's
  -- torch.compile of the loss, both on this one flag), read as compile.enable with its default
  -- components below
  local old_compile = r:get(tr, "compile", "boolean", nil, P)
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
  local f8name
  for _, cv in ipairs(conv) do
    if FLOAT8_CONVERTERS[cv] then
      if f8name then
        r:fail(m, "converters", ("'%s' beside '%s': one float8 converter"):format(cv, f8name), P)
      end
      f8name = cv
      -- below sm89 the converter raises as the model is built (Float8LinearConverter's
      -- has_cuda_capability(8, 9)): the refusal of training.float8 on this GPU, at this key
      local gname = require("vrsim.hardware").resolve_gpu(opts.gpu)
      local why = gname and require("strategies.float8").gpu_refusal(require("hw.gpus")[gname])
      if why then r:fail(m, "converters", ("'%s': %s"):format(cv, why), P) end
    elseif OTHER_CONVERTERS[cv] then
      r:fail(m, "converters", ("'%s': %s is not modelled"):format(cv, OTHER_CONVERTERS[cv]), P)
    else
      r:fail(m, "converters", ("'%s' is not a model converter vrsim reads (float8, quantize.linear.float8)")
             :format(tostring(cv)), P)
    end
  end
  r:not_read(m, { "hf_assets_path", "tokenizer_path", "print_after_conversion" }, P)
  local flex_base = FLEX_FLAVORS[flavor]
  if flavor:match("varlen") then
    r:fail(m, "flavor", ("'%s': the varlen attention flavors (varlen_attn over the documents' cu_seqlens) are not "
           .. "modelled; the flex flavors are"):format(flavor), P)
  end
  if opts.model_config then
    r:not_read(m, { "name", "flavor" }, P)
    notes[#notes + 1] = ("torchtitan's %s %s simulated as the model of --set model.config"):format(name, flavor)
  else
    if name ~= "llama3" then
      r:fail(m, "name", ("'%s': vrsim's torchtitan reader builds llama3's flavors; for another model give "
             .. "--set model.config=PATH (a config.json of the same shapes)"):format(name), P)
    end
    local a = LLAMA3[flex_base or flavor]
    if not a then
      local names = {}
      for k in pairs(LLAMA3) do names[#names + 1] = k end
      for k in pairs(FLEX_FLAVORS) do names[#names + 1] = k end
      table.sort(names)
      r:fail(m, "flavor", ("'%s' is not a llama3 flavor vrsim reads (%s; the varlen attention flavors are "
             .. "not modelled); or give --set model.config=PATH"):format(flavor, table.concat(names, ", ")), P)
    end
    scn.model.config = llama3_config(a, seq)
    local hd = a.dim // a.n_heads
    notes[#notes + 1] = ("torchtitan's llama3 %s simulated as the transformers Llama model of its shapes: the same "
        .. "weights and operations per layer, transformers' intermediates; torchtitan's freqs_cis buffer "
        .. "(seq_len x %d complex64, %.1f MiB) is not in it"):format(flavor, hd // 2, seq * (hd // 2) * 8 / 1048576)
  end
  r:finish(m, TOOL, P)

  -- float8: the converter's table read into training.float8; the other spelling's table is
  -- not read by that torchtitan (e7c0cae ignores keys it does not know; 238fa99 raises on a
  -- [float8] table, refused here), nor are the tables of converters not named
  if f8name == "quantize.linear.float8" and r:has(d, "float8") then
    r:fail(d, "float8", "the table of torchtitan's older converter \"float8\"; converter \"quantize.linear."
           .. "float8\" reads [quantize.linear.float8] (torchtitan raises \"Invalid field names\" on this one)")
  end
  if f8name then read_float8(r, d, f8name, m, deg, opts.model_config or scn.model.config, t, notes) end
  for _, sec in ipairs { "quantize", "float8", "mx" } do
    if r:has(d, sec) and not (f8name and FLOAT8_CONVERTERS[f8name].path[1] == sec) then
      r:get(d, sec, "table")
      r.skipped[#r.skipped + 1] = f8name and ("%s (not read by converter '%s')"):format(sec, f8name)
          or ("%s (model.converters names no converter)"):format(sec)
    end
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

  -- [compile]: CompileConfig (enable, components = ["model", "loss"], backend = "inductor").
  -- "model": apply_compile compiles each TransformerBlock on its own (fullgraph=True), after
  -- apply_ac wrapped it: training.compile of scope "layer" with checkpoint_impl "wrapper" (set by
  -- [activation_checkpoint] above). "loss": build_cross_entropy_loss wraps loss_fn in
  -- torch.compile: training.compile_loss.
  local c = section(r, d, "compile")
  P = "compile."
  if old_compile ~= nil and r:has(c, "enable") then
    r:fail(tr, "compile", "torchtitan's older spelling of compile.enable, beside it: give one", "training.")
  end
  local enable = r:get(c, "enable", "boolean", old_compile or false, P)
  local comps = { model = false, loss = false }
  if enable then
    local list = r:get(c, "components", "table", { "model", "loss" }, P)
    for _, v in ipairs(list) do
      if comps[v] == nil then
        r:fail(c, "components", ("'%s' is not a component torchtitan compiles (model, loss)"):format(tostring(v)), P)
      end
      comps[v] = true
    end
    local backend = r:get(c, "backend", "string", "inductor", P)
    if backend ~= "inductor" then r:fail(c, "backend", ("'%s' is not modelled (read: inductor)"):format(backend), P) end
  else
    r:not_read(c, { "components", "backend" }, P)
  end
  if async_tp and deg.tp > 1 and not comps.model then
    -- (torchtitan's maybe_enable_async_tp raises so, in apply_tp, before the loss is built)
    r:fail(pa, "enable_async_tensor_parallel", "async TP requires 'model' in --compile.components and "
           .. "--compile.enable (Inductor's micro_pipeline_tp pass)", "parallelism.")
  end
  if enable then
    if comps.model then
      local why = require("strategies.compile").check({
        checkpointing = t.checkpointing, checkpoint_scope = t.checkpoint_scope or "layer",
        checkpoint_every = t.checkpoint_every or 1, checkpoint_impl = t.checkpoint_impl, quant = "none",
        strategy = t.strategy, parallel = t.parallel }, {})
      if why then
        if old_compile ~= nil then r:fail(tr, "compile", why, "training.") end
        r:fail(c, "enable", why, P)
      end
      t.compile = true
    end
    if comps.loss then
      if deg.tp > 1 and old_compile ~= nil then
        r:fail(tr, "compile", "compiles the loss too (build_cross_entropy_loss), and under tensor parallelism "
               .. "loss parallel's DTensor cross-entropy compiled is not modelled", "training.")
      elseif deg.tp > 1 then
        r:fail(c, "components", "'loss' under tensor parallelism: loss parallel's DTensor cross-entropy compiled is "
               .. "not modelled (give components = [\"model\"])", P)
      end
      t.compile_loss = true
    end
    notes[#notes + 1] = ("torchtitan compile: %s"):format(comps.model and comps.loss
        and "each TransformerBlock compiled (training.compile) and the loss_fn (training.compile_loss)"
        or comps.model and "each TransformerBlock compiled (training.compile); the loss eager"
        or comps.loss and "the loss_fn alone (training.compile_loss); the model eager"
        or "components names nothing: nothing compiled")
  end
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
  if flex_base then
    -- a flex flavor: block_causal FlexAttention over the text stream's rows (their documents,
    -- told apart by EOS), the BlockMask made by the train step (get_attention_masks)
    t.attention = "flex"
    t.data = { batching = "torchtitan", pack_length = t.seq }
    t.seq = nil
    notes[#notes + 1] = ("torchtitan's %s: FlexAttention (block_causal) over each row's documents; "
      .. "--set training.data.lengths=FILE gives the data set's documents' token counts (BOS and EOS "
      .. "included), which decide its blocks"):format(flavor)
  end
  t.loss = "full"      -- build_cross_entropy_loss: the whole logits' cross-entropy
  -- a spelling of torchtitan before 238fa99 (training.compile, converter "float8"): that torchtitan
  -- ran attention otherwise (e7c0cae's models/attention.py: ScaledDotProductAttention's backends
  -- FLASH, EFFICIENT, MATH, cuDNN first only on sm100; llama3/model.py repeat_kv before SDPA),
  -- where 238fa99 puts cuDNN first and passes enable_gqa. The step is read as 238fa99 runs it,
  -- and the note says how to run it as the older torchtitan did.
  if old_compile ~= nil or f8name == "float8" then
    notes[#notes + 1] = ("%s is torchtitan's spelling before 238fa99 (e.g. e7c0cae, June 2025), whose attention put "
      .. "SDPA's flash kernel first (cuDNN only on sm100) and repeated k and v to every query head; vrsim reads the "
      .. "config as 238fa99 runs it (cuDNN first, enable_gqa): --set attention=flash --set model.repeat_kv=true runs "
      .. "it as that torchtitan did"):format(old_compile ~= nil and "training.compile" or "model.converters \"float8\"")
  end
  r:finish(d, TOOL)
  return scn, notes
end

return T
