-- fields.lua: the text of `vrsim fields`, every field a scenario may set, made from the schema
-- that checks scenarios (lua/vrsim/schema.lua) and the knobs of the strategies that read the
-- table-valued fields, so that the list and the checker cannot differ.
local unmodelled = require "vrsim.unmodelled"
local schema = require "vrsim.schema"
local names = require "vrsim.names"
local keys, shown = names.keys, names.shown
local SCHEMA, CHOICES, arch_modules = schema.SCHEMA, schema.CHOICES, schema.arch_modules

local M = {}

-- What each training.zero knob does, for `vrsim fields` (the knobs, their types, choices and
-- defaults are lua/strategies/dp.lua's DEFAULTS and KNOB_TYPES, which check them).
local ZERO_HELP = {
  bucket_cap_mb = "DDP's gradient bucket size in MiB (DistributedDataParallel bucket_cap_mb)",
  first_bucket_mb = "DDP's first gradient bucket in MiB",
  first_iteration_bucket = "DDP: when step 0's one bucket of every gradient is freed, a race with ProcessGroupNCCL's watchdog: at step 1's bucket rebuild, at step 1's first all-reduce, auto (DDP: all_reduce, ZeRO-1: rebuild)",
  reduce_bucket_size = "DeepSpeed: elements per gradient reduction bucket (\"auto\": hidden^2)",
  allgather_bucket_size = "DeepSpeed: elements per parameter all-gather bucket",
  overlap_comm = "DeepSpeed: overlap reductions with backward (\"auto\": true at stage 3 only)",
  contiguous_gradients = "DeepSpeed: copy gradients into one contiguous buffer as they are reduced",
  stage3_param_persistence_threshold = "ZeRO-3: parameters of fewer elements stay whole on every rank (\"auto\": 10 hidden)",
  stage3_prefetch_bucket_size = "ZeRO-3: elements of parameters gathered ahead (\"auto\": 0.9 hidden^2)",
  stage3_max_live_parameters = "ZeRO-3: elements of gathered parameters kept at once",
  offload_optimizer = "optimizer state and step on the host (DeepSpeed offload_optimizer, FSDP2 CPUOffloadPolicy); nvme is refused",
  offload_param = "parameters on the host between uses (ZeRO-3 offload_param, FSDP2 CPUOffloadPolicy); nvme is refused",
  raf = "reshard after forward: free gathered parameters after forward, gather again for backward",
  init = "how the sharded model is built: whole (on every GPU, then sharded), partitioned (at construction, as zero.Init), meta (on the meta device, then materialised as shards), auto (the strategy's own: the run's header names it)",
  shard_group = "FSDP2 hybrid sharding (HSDP): shard over this many consecutive ranks, all-reduce across groups (0: every rank)",
  reduce_dtype = "FSDP2 MixedPrecisionPolicy.reduce_dtype (auto: the gradients' dtype)",
  units = "FSDP2: modules outside the decoder layers that get a fully_shard of their own before the root's (torchtune's custom_sharded_layers), e.g. { \"model.embed_tokens\", \"lm_head\" } (--set zero.units=model.embed_tokens,lm_head): gathered per call, in forward and in backward, reduce-scattered once",
  sync_every_micro_batch = "FSDP2 with grad_accum: reduce-scatter every micro-batch (false: set_requires_gradient_sync(False) until the last)",
}

-- The ops of each host class (lua/hw/calibrated/h200_torch.lua host_class_us), for `vrsim fields`.
local HOST_CLASS_HELP = {
  linear = "nn.Linear with a bias (addmm)", linear_nobias = "nn.Linear(bias=False) (mm)",
  linear_frozen = "a Linear whose weight (and bias) is frozen while its input needs a gradient (LoRA's base layers)",
  conv = "nn.Conv2d", group_norm = "nn.GroupNorm", layer_norm = "nn.LayerNorm",
  sdpa = "F.scaled_dot_product_attention", cast = "x.to(dtype), autocast's casts",
  activation = "F.silu, F.gelu", add = "x + y", mul_scalar = "x * scale (LoRA's scaling)",
  dropout = "nn.Dropout", view = "a view op (view, transpose, permute, unsqueeze, chunk) and its backward node",
  float8_linear_tensorwise = "torchao's Float8Linear, recipe tensorwise: the whole call (casts, tensor subclass, Function)",
  float8_linear_rowwise = "torchao's Float8Linear, recipe rowwise: the whole call (casts, tensor subclass, Function)",
}

-- A default as `vrsim fields` shows it, in brackets ("" when there is none).
local function default_shown(d)
  if d == nil then return "" end
  return " [" .. shown(d) .. "]"
end

-- The rows of `vrsim fields` for one table of fields: names sorted, each with its type, meaning,
-- default and choices (ch: field -> { value = 1 } or a list; tags: field -> "[sdxl] ").
local function field_rows(out, fields, ch, extra)
  for _, f in ipairs(keys(fields)) do
    local spec = fields[f]
    local e = extra and extra[f] or {}
    -- (a name past the column keeps one space before its type)
    local rest = (e.tag or "") .. (spec[3] or "") .. default_shown(spec[2])
    out[#out + 1] = #f < 24 and ("  %-24s %-8s %s"):format(f, spec[1], rest)
                    or ("  %s %s %s"):format(f, spec[1], rest)
    local c = ch[f]
    if c then
      if c[1] == nil then c = keys(c) end
      out[#out + 1] = ("  %-24s %-8s one of%s: %s"):format("", "", e.choices_of or "", table.concat(c, ", "))
    end
    for _, more in ipairs(e.more or {}) do
      out[#out + 1] = ("  %-24s %-8s %s"):format("", "", more)
    end
  end
end

-- `vrsim fields`: every field a scenario may set, with its type, default, choices and meaning, by
-- section: the schema that checks scenarios (SCHEMA and CHOICES, each model module's own fields,
-- training.zero's knobs from lua/strategies/dp.lua and training.lora's keys from
-- lua/strategies/lora.lua), so that the list and the checker cannot differ.
function M.fields_text()
  local order = { "hardware", "model", "training", "allocator" }
  local out = { "Scenario fields (a scenario returns { title = ..., hardware = {...}, model = {...},",
                "training = {...}, allocator = {...} }; --set section.field=value or field=value",
                "overrides one). Defaults in brackets; [ARCH] marks a field only that model.arch reads.", "" }
  for _, sec in ipairs(order) do
    out[#out + 1] = sec
    local fields, extra = {}, {}
    for f, spec in pairs(SCHEMA[sec]) do fields[f] = spec end
    local ch = {}
    for f in pairs(fields) do ch[f] = CHOICES[f] end
    for _, m in ipairs(arch_modules()) do
      for _, f in ipairs(keys(m.schema[sec] or {})) do
        local spec = m.schema[sec][f]
        if not fields[f] then
          fields[f], ch[f] = spec, m.choices[f]
          extra[f] = { tag = "[" .. m.arch .. "] ", archs = { m.arch }, more = {} }
        elseif extra[f] and extra[f].archs then
          -- a field several archs read: the tag names them all, and each later arch's meaning,
          -- default and choices follow where they differ from the first's
          local e = extra[f]
          e.archs[#e.archs + 1] = m.arch
          e.tag = "[" .. table.concat(e.archs, ", ") .. "] "
          if spec[3] ~= fields[f][3] or spec[2] ~= fields[f][2] then
            e.more[#e.more + 1] = ("[%s] %s%s"):format(m.arch, spec[3] or "", default_shown(spec[2]))
          end
          local c = m.choices[f]
          if c and table.concat(keys(c), ", ") ~= table.concat(keys(ch[f] or {}), ", ") then
            e.more[#e.more + 1] = ("one of (%s): %s"):format(m.arch, table.concat(keys(c), ", "))
          end
        end
      end
      for f, c in pairs(m.choices) do
        if SCHEMA[sec][f] and not CHOICES[f] then ch[f], extra[f] = c, { choices_of = " (" .. m.arch .. ")" } end
      end
    end
    field_rows(out, fields, ch, extra)
    out[#out + 1] = ""
  end
  -- hardware.host_classes: the profile's host op classes, each with the calibration host's figures
  out[#out + 1] = "hardware.host_classes (the run's host's own host time per op of a class: host_classes = { NAME = "
    .. "{ fwd_us = us, bwd_us = us } }; the calibration host's in brackets, forward / backward node)"
  local hfields = {}
  for c, v in pairs(require("hw.host_speed").calibration_classes()) do
    hfields[c] = { "table", nil, ("%s [%s / %s us]"):format(HOST_CLASS_HELP[c] or "", shown(v.fwd), shown(v.bwd)) }
  end
  field_rows(out, hfields, {})
  out[#out + 1] = ""
  -- training.zero: dp.lua's knobs, which strategies read each
  local dp = require "strategies.dp"
  out[#out + 1] = "training.zero (the data-parallel strategy's knobs: zero = { NAME = value }, --set zero.NAME=value)"
  local zfields, zch, zextra = {}, {}, {}
  for k, d in pairs(dp.DEFAULTS) do
    local ty = dp.KNOB_TYPES[k]
    local kind = type(ty) == "table" and "string" or ty == "paths" and "list of strings" or ty or type(d)
    zfields[k] = { kind, type(d) == "table" and "{}" or d, ZERO_HELP[k] or "" }
    if type(ty) == "table" then zch[k] = ty end
    local by = dp.KNOB_STRATEGIES[k]
    if by then zextra[k] = { more = { "read by: " .. table.concat(keys(by), ", ") } } end
  end
  field_rows(out, zfields, zch, zextra)
  out[#out + 1] = ""
  -- training.lora: peft's LoraConfig keys
  local lora = require "strategies.lora"
  out[#out + 1] = "training.lora (peft's LoraConfig: lora = { NAME = value }, --set lora.NAME=value; any lora_* precision uses it)"
  field_rows(out, lora.FIELDS, lora.CHOICES)
  out[#out + 1] = ""
  -- training.float8: torchao's Float8LinearConfig as modelled (lua/strategies/float8.lua)
  out[#out + 1] = "training.float8 (torchao's float8 training: float8 = { NAME = value })"
  field_rows(out, require("strategies.float8").FIELDS, { recipe = { tensorwise = 1, rowwise = 1, rowwise_with_gw_hp = 1 } })
  out[#out + 1] = ""
  -- training.data: the data set's lengths and how its batches are made (lua/strategies/data.lua)
  out[#out + 1] = "training.data (variable-length data: data = { NAME = value }, --set training.data.NAME=value)"
  field_rows(out, require("strategies.data").FIELDS, {
    batching = { pad = 1, padding_free = 1, bfd = 1, bfd_split = 1, multipack = 1 }, collator = { transformers = 1, trl = 1 },
    order = { shuffle = 1, given = 1 }, too_long = { drop = 1, truncate = 1, raise = 1 } })
  out[#out + 1] = ""
  -- training.generate: model.generate as modelled (lua/strategies/generate.lua)
  out[#out + 1] = "training.generate (transformers' generate, inference = true: generate = { NAME = value })"
  field_rows(out, require("strategies.generate").FIELDS, {})
  out[#out + 1] = ""
  -- training.dpo: TRL's DPOTrainer as modelled (lua/strategies/dpo.lua)
  out[#out + 1] = "training.dpo (TRL's DPOTrainer: dpo = { NAME = value })"
  field_rows(out, require("strategies.dpo").FIELDS, {})
  out[#out + 1] = ""
  -- training.parallel: the device mesh's degrees (lua/vrsim/mesh.lua)
  local mesh = require "vrsim.mesh"
  out[#out + 1] = "training.parallel (the device mesh, outermost first " .. table.concat(mesh.ORDER, ", ")
    .. "; product = hardware.count: parallel = { NAME = value }, --set parallel.NAME=value)"
  field_rows(out, mesh.FIELDS, mesh.CHOICES)
  out[#out + 1] = ""
  out[#out + 1] = "Not modelled (refused by name): " .. unmodelled.WHERE .. "."
  out[#out + 1] = "GPU names: vrsim gpus. Hosts, links and networks: lua/hw/hosts.lua, links.lua."
  return table.concat(out, "\n") .. "\n"
end

return M
