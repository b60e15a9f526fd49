-- plan.lua: turns a scenario table into a plan the C core runs.
--
-- 1. checks every field against the schema below (unknown fields are errors that name the
--    scenario's file and line and suggest the closest valid name);
-- 2. applies --set overrides ("micro_batch=4", "training.seq=4096", "gpu=a100_80g");
-- 3. looks the GPU up in lua/hw/gpus.lua;
-- 4. builds the forward graph with the model builder, derives backward (C), adds the optimizer.
local nn = require "vrsim.nn"
local unmodelled = require "vrsim.unmodelled"
local gpus = require "hw.gpus"
local memory = require "hw.memory"

local P = {}

-- section -> field -> { type, default, check, help }
local SCHEMA = {
  title = "string",
  notes = "list", -- lines the report shows as notes (a trainer config's reader: what it did not read)
  hardware = {
    gpu = { "string", "h200", "catalog name (vrsim gpus)" },
    count = { "integer", 1, "data-parallel GPUs (symmetric ranks, simulated once)" },
    gpus_per_node = { "integer", 8, "GPUs in one node (links inside a node are NVLink/PCIe)" },
    rank = { "index", 0, "which rank to simulate when ranks differ (ZeRO-1 partitions, device_map)" },
    max_memory_gib = { "number", nil, "device_map: memory Accelerate may fill on each GPU (max_memory)" },
    interconnect = { "string", "auto", "auto, nvlink or pcie: the link collectives run on" },
    nvlink_bridge = { "boolean", false, "two cards sold without NVLink (RTX 3090/A5000/A6000, H100 PCIe) have a 2-way NVLink bridge fitted; without it they talk over PCIe" },
    network = { "string", "ib_ndr", "link between nodes (lua/hw/links.lua network): ib_hdr, ib_ndr, roce_400g, ..." },
    nics_per_node = { "integer", nil, "network ports (of hardware.network) per node, rail-optimised [one per GPU, as DGX/HGX]" },
    host = { "string", nil, "host config from lua/hw/hosts.lua (host RAM for offload)" },
    pcie = { "string", nil, "the GPU's host link, a key of lua/hw/links.lua pcie (gen3_x16, gen4_x8, gen4_x16, gen5_x16): a slot or riser below the card's own [the card's own]" },
    host_dispatch_scale = { "number", 1, "the host's CPU time per op (PyTorch dispatch, launches) as a multiple of the calibration host's (lua/hw/host_speed.lua): 1.5 = 1.5x slower" },
    memory_fraction = { "number", nil, "torch.cuda.set_per_process_memory_fraction" },
    capacity_gib = { "number", nil, "pretend the card has this much memory (GiB)" },
    capacity_mib = { "number", nil, "the same in MiB" },
  },
  model = {
    arch = { "string", nil, "model family: llama2 (named Llama-2 shapes), llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3, olmo2, mixtral, qwen3_moe, gpt_oss, deepseek_v2, deepseek_v3 (from model.config), sdxl, sd (Stable Diffusion 1.x / 2.x, from model.config), flux (Flux.1, from model.config), sd3 (Stable Diffusion 3 / 3.5, from model.config)" },
    variant = { "string", nil, "model-specific variant (sdxl: sdxl-base-unet, ...)" },
    size = { "string", "7b", "7b, 13b, 70b, or NAME-lN (cut to N layers)" },
    layers = { "integer", nil, "override the layer count" },
    hidden = { "integer", nil, "hidden size (beside model.config: replaces its hidden_size, as editing config.json)" },
    intermediate = { "integer", nil, "MLP size (beside model.config: its intermediate_size)" },
    heads = { "integer", nil, "attention heads (beside model.config: its num_attention_heads)" },
    kv_heads = { "integer", nil, "key/value heads, grouped-query attention (beside model.config: its num_key_value_heads)" },
    vocab = { "integer", nil, "vocabulary size (model.config's vocab_size; 32000 for the Llama-2 shapes)" },
    config = { "config", nil, "a Hugging Face config.json (a path beside the scenario, or the object as a table): the family and every size" },
  },
  training = {
    micro_batch = { "integer", 1, "sequences per step per GPU" },
    seq = { "integer", 2048, "tokens per sequence" },
    resolution = { "integer", 1024, "image side in pixels (diffusion models)" },
    precision = { "string", "bf16", "fp32, amp_bf16, amp_fp16, bf16, fp16, lora_bf16, lora_fp16, mp_fp32 (FSDP2: fp32 shards, bf16 compute)" },
    optimizer = { "string", "adamw", "adamw, adam, sgd, adamw8bit, adafactor (transformers' Adafactor: factored second moments), lion (lion-pytorch), lion_32bit (bitsandbytes' Lion), or bitsandbytes' paged ones as transformers names them (state in unified memory outside the allocator, paged to the host under pressure): paged_adamw_8bit, paged_adamw_32bit, paged_adamw, paged_lion_8bit, paged_lion_32bit" },
    optimizer_impl = { "string", "foreach", "foreach, fused or forloop" },
    attention = { "string", "sdpa", "sdpa (PyTorch's pick), flash, mem_efficient, cudnn or eager" },
    checkpointing = { "boolean", false, "gradient checkpointing per decoder layer" },
    checkpoint_every = { "integer", 1, "checkpoint every k-th layer only" },
    checkpoint_scope = { "string", "layer", "layer (whole decoder layers), attention (selective) or op (torchtitan's op-level policy: matmuls and attention saved, every second mm recomputed)" },
    inference = { "boolean", false, "forward only under torch.no_grad(): no backward, no optimizer" },
    quant = { "string", "none", "bitsandbytes base weights: none, nf4 (QLoRA 4-bit) or int8 (LLM.int8)" },
    quant_storage = { "string", "auto", "bnb_4bit_quant_storage, the dtype the packed 4-bit weights are stored in: auto (the parameters' dtype under fsdp2 and zero3, as the FSDP-QLoRA and ZeRO-3 QLoRA guides set it, so the packed weights shard; uint8, transformers' default, otherwise), uint8, bf16, fp16 or fp32" },
    device_map = { "string", "none", "inference: none, or auto (Accelerate: layers across hardware.count GPUs, then the CPU)" },
    steps = { "integer", 4, "training steps to simulate (step 0 creates optimizer state)" },
    build_layers_once = { "boolean", true, "build one decoder layer in Lua and carry it over to the layers declared alike, where the check allows (lua/vrsim/replicate.lua); false builds every layer in Lua: the same graph, slower" },
    grad_accum = { "integer", 1, "micro-batches per optimizer step (gradient accumulation)" },
    build = { "string", "direct", "direct: the weights made in their dtype, as from_pretrained(torch_dtype=...) loads them; cast: built in fp32 then .to(dtype), as from_config does" },
    lora = { "table", nil, "peft's LoraConfig: { r = 16, targets = \"all-linear\" } (its keys: training.lora below)" },
    strategy = { "string", "none", "none, ddp, zero1, zero2, zero3 or fsdp2 (data parallel over hardware.count)" },
    parallel = { "table", nil, "the device mesh, torchtitan's degrees: { dp_replicate, dp_shard, tp, cp, pp, ep, ... } (its keys: training.parallel below)" },
    cpu_threads = { "integer", 8, "intra-op CPU threads per rank (OMP_NUM_THREADS) for optimizer steps on the host" },
    empty_cache_after_build = { "boolean", false, "torch.cuda.empty_cache() once the model and optimizer are built" },
    zero = { "table", nil, "DeepSpeed/FSDP2/DDP knobs: { offload_optimizer = \"cpu\" } (its keys: training.zero below)" },
    deepspeed = { "string", nil, "a DeepSpeed JSON config beside the scenario (zero_optimization is read)" },
    activation_offload = { "boolean", false, "torchtune's enable_activation_offloading (OffloadActivations): the decoder's saved activations (with checkpointing: each layer's input) copied to pinned host memory in forward and back in backward, on their own streams" },
    optimizer_in_backward = { "boolean", false, "torchtune's optimizer_in_bwd: each parameter's optimizer step and zero_grad run in backward as soon as its gradient is complete (one gradient alive at a time instead of all)" },
    data = { "table", nil, "variable-length data: { lengths = \"lengths.txt\" (or a list, or JSONL with length_field), batching = \"pad\" or \"padding_free\", order = \"shuffle\" or \"given\", batch = \"worst\" or \"p50\"... }: the batch the run meets (lua/strategies/data.lua)" },
    generate = { "table", nil, "inference: transformers' model.generate with its DynamicCache, greedy: { prompt = N, max_new_tokens = M, batch = B }: the prompt's prefill, then one forward a token, the cache grown by torch.cat (its keys: training.generate below)" },
    dpo = { "table", nil, "TRL's DPOTrainer: { prompt_length = N, completion_length = M, max_length = 1024, precompute_ref_log_probs = false }: chosen and rejected in one batch of 2 x micro_batch rows, the reference model's forward under no_grad (its keys: training.dpo below)" },
    float8 = { "table", nil, "torchao's float8 training (convert_to_float8_training, torchtitan's filter): { recipe = \"tensorwise\", fsdp_float8_all_gather = false } (its keys: training.float8 below; sm89 and newer)" },
    compile = { "compile", false, "torch.compile (mode \"default\"): true, or { scope = \"layer\", mode = \"default\", fullgraph = false }: each decoder layer one graph, as torchtitan and torchtune compile them; AOTAutograd's min-cut partitioner decides what backward reads from forward and what it recomputes, Inductor's fused kernels allocate only their outputs (lua/strategies/compile.lua)" },
    loss = { "string", "full", "cross-entropy of a language model: full (transformers: the whole fp32 logits), liger_fused (Liger's fused linear cross-entropy: chunks, gradients in forward) or chunked (torchtune's CEWithChunkedOutputLoss: the head and the fp32 upcast in 8 chunks)" },
  },
  allocator = {
    conf = { "string", "", "PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True" },
    kind = { "string", "caching", "caching (PyTorch's) or ideal (no fragmentation)" },
  },
}

local CHOICES = {
  precision = { fp32 = 1, amp_bf16 = 1, amp_fp16 = 1, bf16 = 1, fp16 = 1, lora_bf16 = 1, lora_fp16 = 1,
                mp_fp32 = 1 },
  optimizer = { adamw = 1, adam = 1, sgd = 1, adamw8bit = 1, adafactor = 1, lion = 1, lion_32bit = 1,
                paged_adamw_8bit = 1, paged_adamw_32bit = 1, paged_adamw = 1, paged_lion_8bit = 1, paged_lion_32bit = 1 },
  quant = { none = 1, nf4 = 1, int8 = 1 },
  quant_storage = { auto = 1, uint8 = 1, bf16 = 1, fp16 = 1, fp32 = 1 },
  device_map = { none = 1, auto = 1 },
  optimizer_impl = { foreach = 1, fused = 1, forloop = 1 },
  attention = { sdpa = 1, eager = 1, flash = 1, mem_efficient = 1, cudnn = 1 },
  checkpoint_scope = { layer = 1, attention = 1, op = 1 },
  build = { cast = 1, direct = 1 },
  kind = { caching = 1, ideal = 1 },
  strategy = { none = 1, ddp = 1, zero1 = 1, zero2 = 1, zero3 = 1, fsdp2 = 1 },
  interconnect = { auto = 1, nvlink = 1, pcie = 1 },
  arch = { llama2 = 1, llama = 1, mistral = 1, qwen2 = 1, qwen3 = 1, gemma2 = 1, gemma3 = 1, phi3 = 1, olmo2 = 1, mixtral = 1, qwen3_moe = 1, gpt_oss = 1,
          deepseek_v2 = 1, deepseek_v3 = 1, sdxl = 1, sd = 1, flux = 1, sd3 = 1 },
  loss = { full = 1, liger_fused = 1, chunked = 1 },
}

-- Edit distance with adjacent transpositions counted as one edit (optimal string alignment), for
-- "did you mean": "bf61" is one slip from "bf16".
local function distance(a, b)
  local d = {}
  for i = 0, #a do d[i] = { [0] = i } end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[#a][#b]
end

-- Whether cand is close enough to word to be what was meant: a suggestion that names another
-- thing is worse than none ("loss" is not "lora", "tp" not "ddp", "fp8" not "fp16"). The word
-- has at least three characters, the two differ by at most one edit in four (one for names up to
-- seven characters), and their digits differ by no more than a swap or one digit typed twice or
-- dropped: a changed digit is another product or format (rtx4080 is not rtx4090, fp8 not fp16).
local function close_enough(word, cand, d)
  if #word < 3 then return false end
  if d > math.max(1, math.max(#word, #cand) // 4) then return false end
  local da, db = word:gsub("%D", ""), cand:gsub("%D", "")
  if da == db then return true end
  if #da == #db then
    local sa, sb = {}, {}
    for c in da:gmatch(".") do sa[#sa + 1] = c end
    for c in db:gmatch(".") do sb[#sb + 1] = c end
    table.sort(sa); table.sort(sb)
    return table.concat(sa) == table.concat(sb) and distance(da, db) == 1
  end
  return math.abs(#da - #db) == 1 and distance(da, db) == 1
end

-- The name of `names` that `word` most likely misspells, or nil when none is close enough.
local function closest(word, names)
  if type(word) ~= "string" then return nil end
  local w = word:lower()
  local best, bd = nil, math.huge
  for _, n in ipairs(names) do
    local d = distance(w, n:lower())
    if d < bd then best, bd = n, d end
  end
  if best and close_enough(w, best:lower(), bd) then return best end
  return nil
end
P.closest = closest

-- The keys of t, sorted (for messages that list the valid names).
local function keys(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end
P.keys = keys

-- The keys of t in a fixed order (strings sorted, then any other key by its text), so that a
-- scenario with several bad fields always reports the same one first
local function ordered_keys(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r, function(a, b)
    local sa, sb = type(a) == "string", type(b) == "string"
    if sa ~= sb then return sa end
    if sa then return a < b end
    return tostring(a) < tostring(b)
  end)
  return r
end

-- The line of the scenario where `field =` first appears (after `section` when given).
local function line_of(src, field, section)
  local start = 1
  if section then
    local s = src:find("%f[%w_]" .. section .. "%s*=")
    if s then start = s end
  end
  local pos = src:find("%f[%w_]" .. field .. "%s*=", start) or src:find("%f[%w_]" .. field .. "%f[^%w_]", start)
  if not pos then return nil end
  local _, n = src:sub(1, pos):gsub("\n", "")
  return n + 1
end

local function fail(ctx, field, section, msg)
  local line = ctx.src and line_of(ctx.src, field, section)
  error(("%s:%s: %s"):format(ctx.file, line or "?", msg), 0)
end

-- The error for a training.zero key vrsim does not model (nil when it knows it).
local function unknown_zero_knob(k)
  local known = require("strategies.dp").DEFAULTS
  if type(k) == "string" and known[k] ~= nil then return nil end
  local r = unmodelled.refusal("training.zero." .. tostring(k), k)
  if r then return r end
  local s = type(k) == "string" and closest(k, keys(known))
  return ("training.zero.%s is not a knob vrsim knows%s (one of: %s)"):format(tostring(k),
    s and ("; did you mean '" .. s .. "'?") or "", table.concat(keys(known), ", "))
end

-- Upper bounds: a typo (an extra zero, a wrapped integer) must not run for hours or overflow a
-- byte count. Far beyond any real run.
local MAX = { micro_batch = 65536, seq = 1 << 26, steps = 1000, grad_accum = 4096,
              resolution = 32768, layers = 1024, hidden = 1 << 20, intermediate = 1 << 22,
              heads = 4096, kv_heads = 4096, vocab = 1 << 24, count = 65536, gpus_per_node = 1024,
              checkpoint_every = 1024, cpu_threads = 4096 }

-- Ranges of the number fields (lo exclusive, hi inclusive): a capacity past any card would
-- overflow the byte counts, and one that leaves no byte is not "unlimited".
local NUM_RANGE = { memory_fraction = { 0, 1 }, capacity_gib = { 0, 1 << 20 },
                    capacity_mib = { 0, 1 << 30 }, max_memory_gib = { 0, 1 << 20 } }

-- A number as a message shows it (integers without a fraction, nan and inf by name).
local function shown(v)
  if type(v) ~= "number" then return tostring(v) end
  if v ~= v then return "nan" end
  if math.type(v) == "integer" then return tostring(v) end
  local t = ("%.15g"):format(v)
  return tonumber(t) == v and t or ("%.17g"):format(v)
end
P.shown = shown

local function check_value(ctx, section, field, spec, v, origin, choices)
  local ty = spec[1]
  local where = section .. "." .. field
  local bad = function(m)
    if origin then error(origin .. ": " .. m, 0) end
    fail(ctx, field, section, m)
  end
  if ty == "index" or ty == "integer" then
    local lo, hi = ty == "index" and 0 or 1, MAX[field] or math.maxinteger
    local range = ("an integer in [%d, %d]"):format(lo, hi)
    if type(v) ~= "number" then bad(("%s must be %s, not %s"):format(where, range, shown(v))) end
    local i = math.tointeger(v)
    if not i and v == v and v ~= math.floor(v) then
      bad(("%s must be %s, not %s"):format(where, range, shown(v)))
    end
    if not i or i < lo or i > hi then
      bad(("%s = %s is out of range: must be %s"):format(where, shown(v), range))
    end
    v = i
  elseif ty == "number" then
    if type(v) ~= "number" then bad(("%s must be a number, not %s"):format(where, shown(v))) end
    local r = NUM_RANGE[field]
    local lo, hi = r and r[1] or 0, r and r[2] or 1e18
    if not (v > lo and v <= hi) then
      bad(("%s = %s is out of range: must be a finite number in (%s, %s]"):format(where, shown(v),
          shown(lo), shown(hi)))
    end
  elseif ty == "boolean" then
    if type(v) ~= "boolean" then bad(("%s must be true or false"):format(where)) end
  elseif ty == "string" then
    if type(v) ~= "string" then bad(("%s must be a string"):format(where)) end
    local ch = (choices or CHOICES)[field]
    if ch and not ch[v] then
      local s = closest(v, keys(ch))
      bad(unmodelled.refusal(("%s = \"%s\""):format(where, v), v)
          or ("%s: unknown value '%s' (one of: %s)%s"):format(where, v, table.concat(keys(ch), ", "),
          s and ("; did you mean '" .. s .. "'?") or ""))
    end
  elseif ty == "table" then
    if type(v) ~= "table" then bad(("%s must be a table"):format(where)) end
  elseif ty == "compile" then
    -- its keys are strategies/compile.lua's to check
    if type(v) ~= "boolean" and type(v) ~= "table" then bad(("%s must be true, false or a table"):format(where)) end
  elseif ty == "config" then
    if type(v) ~= "string" and type(v) ~= "table" then
      bad(("%s must be a config.json path or a config table"):format(where))
    end
  end
  return v
end

-- A value for section.field from a source other than the scenario or --set (a DeepSpeed JSON
-- config, a validation record), checked with the same bounds: the value as the field holds it,
-- or an error that starts with origin ("ds.json: gradient_accumulation_steps").
function P.check_field(section, field, v, origin)
  return check_value(nil, section, field, SCHEMA[section][field], v, origin)
end

-- A value of training.zero.k whose default is a number (a bucket size, a threshold): a finite
-- count in [0, 1e15], or DeepSpeed's "auto". Returns the error message, or nil when v is fine
-- (flags and placements are checked by strategies/dp.lua).
local function bad_zero_value(k, v)
  local def = require("strategies.dp").DEFAULTS[k]
  if type(def) ~= "number" or v == "auto" then return nil end
  if type(v) ~= "number" or not (v >= 0 and v <= 1e15) then
    return ("training.zero.%s = %s is out of range: must be a finite number in [0, 1e15]"):format(k, shown(v))
  end
  return nil
end
P.bad_zero_value = bad_zero_value

-- A Hugging Face config's sizes (config.json or a table), checked before any model is built
-- from them: integers in the range of the scenario field they set, so a size cannot wrap a byte
-- count (an intermediate_size of 2^52 times a hidden size of 4096 is 2^64: zero bytes).
local HF_SIZES = { hidden_size = "hidden", intermediate_size = "intermediate",
                   num_attention_heads = "heads", num_key_value_heads = "kv_heads",
                   num_hidden_layers = "layers", vocab_size = "vocab", head_dim = "hidden",
                   max_position_embeddings = "seq", sliding_window = "seq" }
function P.check_hf_config(c, name)
  if type(c) ~= "table" then return end
  for k, f in pairs(HF_SIZES) do
    local v = c[k]
    if v ~= nil and v ~= false then
      local i = math.tointeger(v)
      if not i or i < 1 or i > MAX[f] then
        error(("%s: %s = %s is out of range: must be an integer in [1, %d]"):format(name, k,
              shown(v), MAX[f]), 0)
      end
    end
  end
end

-- Converts a --set value string to the field's type.
local function parse_set_value(spec, raw, origin)
  local ty = spec[1]
  if ty == "integer" or ty == "number" or ty == "index" then
    local n = tonumber(raw)
    if not n then error(("%s: '%s' is not a number"):format(origin, raw), 0) end
    return n
  elseif ty == "boolean" then
    if raw == "true" or raw == "1" or raw == "yes" then return true end
    if raw == "false" or raw == "0" or raw == "no" then return false end
    error(("%s: '%s' is not true or false"):format(origin, raw), 0)
  elseif ty == "table" then
    error(("%s: tables cannot be set from the command line"):format(origin), 0)
  elseif ty == "compile" then
    -- training.compile: a flag, or a scope for short (compile=layer)
    if raw == "true" or raw == "false" then return raw == "true" end
    if raw == "layer" or raw == "model" then return { scope = raw } end
    error(("%s: '%s' is not true, false, layer or model"):format(origin, raw), 0)
  end
  return raw
end

-- Every field name -> its sections (for "micro_batch=4" without a section).
local function field_index(schema)
  local idx = {}
  for sec, fields in pairs(schema) do
    if type(fields) == "table" then
      for f in pairs(fields) do
        idx[f] = idx[f] or {}
        table.insert(idx[f], sec)
      end
    end
  end
  return idx
end

-- A model module may add fields to any section (module.schema = { training = { name = spec } })
-- and choices (module.choices = { field = { value = 1 } }): read by that arch's runs only, so a
-- run of another arch refuses them (by arch, in the order of CHOICES.arch's names).
local function arch_modules()
  local r = {}
  for _, arch in ipairs(keys(CHOICES.arch)) do
    local ok, mod = pcall(require, "models." .. arch)
    if ok and type(mod) == "table" and (type(mod.schema) == "table" or type(mod.choices) == "table") then
      r[#r + 1] = { arch = arch, schema = mod.schema or {}, choices = mod.choices or {} }
    end
  end
  return r
end

-- The archs whose modules add section.field ("sd or sdxl"), or nil.
local function field_arch(section, field)
  local r = {}
  for _, m in ipairs(arch_modules()) do
    if type(m.schema[section]) == "table" and m.schema[section][field] then r[#r + 1] = m.arch end
  end
  return r[1] and table.concat(r, " or ") or nil
end

-- The arch a scenario and its --set name (its model module's fields apply), or nil when the
-- scenario names none vrsim knows (the checker then refuses the arch itself).
local function arch_of(scn, sets)
  local arch = type(scn.model) == "table" and scn.model.arch or "llama2"
  for _, s in ipairs(sets) do arch = s:match("^model%.arch=(.*)$") or s:match("^arch=(.*)$") or arch end
  if type(arch) ~= "string" or not CHOICES.arch[arch] then return nil end
  return arch
end

-- The schema and choices of a run of `arch` (SCHEMA and CHOICES with that arch's module's fields),
-- made once per arch; SCHEMA and CHOICES themselves never change.
local MERGED = {}
local function schema_of(arch)
  local key = arch or "?"
  if MERGED[key] then return MERGED[key].schema, MERGED[key].choices end
  local schema, choices = {}, {}
  for sec, fields in pairs(SCHEMA) do
    if type(fields) == "table" then
      schema[sec] = {}
      for f, spec in pairs(fields) do schema[sec][f] = spec end
    else
      schema[sec] = fields
    end
  end
  for f, ch in pairs(CHOICES) do choices[f] = ch end
  for _, m in ipairs(arch_modules()) do
    if m.arch == arch then
      for sec, fields in pairs(m.schema) do
        if type(schema[sec]) == "table" then
          for f, spec in pairs(fields) do schema[sec][f] = schema[sec][f] or spec end
        end
      end
      for f, ch in pairs(m.choices) do choices[f] = choices[f] or ch end
    end
  end
  MERGED[key] = { schema = schema, choices = choices }
  return schema, choices
end

-- The message for a field `name` of section `sec` that the run's schema lacks: a thing vrsim
-- knows it does not model, a field of another arch's model, or a misspelling of one of `names`
-- (listed when none is close).
local function unknown_field(sec, name, names, arch)
  local full = sec and (sec .. "." .. tostring(name)) or tostring(name)
  local r = unmodelled.refusal(full, name)
  if r then return r end
  local other = type(name) == "string" and sec and field_arch(sec, name)
  if other then
    return ("%s is read by arch %s only (this run's model.arch is %s)"):format(full, other, tostring(arch))
  end
  local s = closest(name, names)
  return ("unknown field '%s'%s"):format(full, s and ("; did you mean '" .. s .. "'?")
         or (" (fields: " .. table.concat(names, ", ") .. ")"))
end

-- The message for a key of training.lora that peft's LoraConfig as vrsim models it does not
-- take (nil when it is one: lua/strategies/lora.lua FIELDS).
local function unknown_lora_key(k)
  local fields = require("strategies.lora").FIELDS
  if type(k) == "string" and fields[k] then return nil end
  local r = unmodelled.refusal("training.lora." .. tostring(k), k)
  if r then return r end
  local s = closest(k, keys(fields))
  return ("training.lora.%s is not a key vrsim knows%s (one of: %s)"):format(tostring(k),
    s and ("; did you mean '" .. s .. "'?") or "", table.concat(keys(fields), ", "))
end

function P.normalize(scn, sets, file, src)
  local ctx = { file = file, src = src, given = {} } -- given: "section.field" the scenario or --set gave
  local arch = arch_of(scn, sets)
  local schema, choices = schema_of(arch)
  local cfg = {}
  for _, k in ipairs(ordered_keys(scn)) do
    if type(k) ~= "string" or schema[k] == nil then
      local s = type(k) == "string" and closest(k, keys(schema))
      fail(ctx, tostring(k), nil, unmodelled.refusal(tostring(k), k) or ("unknown section '%s'%s"):format(tostring(k),
           s and ("; did you mean '" .. s .. "'?") or " (sections: " .. table.concat(keys(schema), ", ") .. ")"))
    end
  end
  if scn.title ~= nil and type(scn.title) ~= "string" then fail(ctx, "title", nil, "title must be a string") end
  cfg.title = scn.title
  if scn.notes ~= nil then
    if type(scn.notes) ~= "table" then fail(ctx, "notes", nil, "notes must be a list of strings") end
    cfg.notes = {}
    for i, n in ipairs(scn.notes) do cfg.notes[i] = tostring(n) end
  end
  for _, sec in ipairs(keys(schema)) do
    local fields = schema[sec]
    if type(fields) == "table" then
      local given = scn[sec] or {}
      if type(given) ~= "table" then fail(ctx, sec, nil, sec .. " must be a table") end
      cfg[sec] = {}
      for _, f in ipairs(ordered_keys(given)) do
        local v = given[f]
        if not fields[f] then fail(ctx, tostring(f), sec, unknown_field(sec, f, keys(fields), arch)) end
        cfg[sec][f] = check_value(ctx, sec, f, fields[f], v, nil, choices)
        ctx.given[sec .. "." .. f] = true
      end
    end
  end
  local idx = field_index(schema)
  for _, set in ipairs(sets) do
    local key, raw = set:match("^([%w_%.]+)=(.*)$")
    if not key then error(("--set %s: expected key=value"):format(set), 0) end
    local sec3, tbl, sub = key:match("^([%w_]+)%.([%w_]+)%.([%w_]+)$")
    if not sec3 then
      tbl, sub = key:match("^(zero)%.([%w_]+)$")
      if tbl then sec3 = "training" end
      if not tbl then tbl, sub = key:match("^(lora)%.([%w_]+)$"); if tbl then sec3 = "training" end end
      if not tbl then tbl, sub = key:match("^(parallel)%.([%w_]+)$"); if tbl then sec3 = "training" end end
    end
    if sec3 then
      -- a field of a table-valued field: training.zero.offload_optimizer=cpu
      local spec = schema[sec3] and schema[sec3][tbl]
      if not spec or spec[1] ~= "table" then
        error(("--set %s: '%s.%s' is not a table field"):format(set, sec3, tbl), 0)
      end
      local v = raw
      if raw == "true" then v = true elseif raw == "false" then v = false
      elseif tonumber(raw) then v = tonumber(raw) end
      local bad_knob = (tbl == "zero" and unknown_zero_knob(sub)) or (tbl == "lora" and unknown_lora_key(sub))
        or (tbl == "parallel" and require("vrsim.mesh").unknown_key(sub))
      if bad_knob then error(("--set %s: %s"):format(set, bad_knob), 0) end
      cfg[sec3][tbl] = cfg[sec3][tbl] or {}
      cfg[sec3][tbl][sub] = v
      goto continue
    end
    local sec, f = key:match("^([%w_]+)%.([%w_]+)$")
    if not sec then
      f = key
      local secs = idx[f]
      if not secs then
        local all = {}
        for name in pairs(idx) do all[#all + 1] = name end
        table.sort(all)
        local other = field_arch("training", f) and "training" or field_arch("model", f) and "model"
        error(("--set %s: %s"):format(set, unknown_field(other, f, all, arch):gsub(" %(fields: .*%)$", "")), 0)
      end
      if #secs > 1 then
        error(("--set %s: '%s' is in several sections (%s): write section.%s"):format(set, f,
              table.concat(secs, ", "), f), 0)
      end
      sec = secs[1]
    end
    local spec = schema[sec] and schema[sec][f]
    if not spec then
      error(("--set %s: %s"):format(set, type(schema[sec]) == "table" and unknown_field(sec, f, keys(schema[sec]), arch)
            or ("unknown section '" .. sec .. "'")), 0)
    end
    local origin = "--set " .. set
    cfg[sec][f] = check_value(ctx, sec, f, spec, parse_set_value(spec, raw, origin), origin, choices)
    ctx.given[sec .. "." .. f] = true
    ::continue::
  end
  for sec, fields in pairs(schema) do
    if type(fields) == "table" then
      for f, spec in pairs(fields) do
        if cfg[sec][f] == nil then cfg[sec][f] = spec[2] end
      end
    end
  end
  return cfg, ctx
end

-- Parameters per second one rank's torch.optim.AdamW steps on the CPU, from the measured points
-- (lua/hw/hosts.lua torch_cpu_adamw) for `ranks` ranks of one host with `threads` threads each.
-- Points with the most processes not above `ranks` are used; more ranks than that share the
-- measured aggregate.  Between measured thread counts the rate is interpolated linearly; below
-- the fewest it scales with the threads (each thread then streams on its own), above the most it
-- stays flat (the memory bus is the limit).
local function torch_cpu_adamw_rate(m, ranks, threads)
  if not (m and m.points) then return 0 end
  local procs = 0
  for _, p in ipairs(m.points) do
    if p.procs <= ranks and p.procs > procs then procs = p.procs end
  end
  if procs == 0 then return 0 end
  local pts = {}
  for _, p in ipairs(m.points) do
    if p.procs == procs then pts[#pts + 1] = p end
  end
  table.sort(pts, function(a, b) return a.threads < b.threads end)
  local rate
  if threads <= pts[1].threads then
    rate = pts[1].bf16_params_per_s * threads / pts[1].threads
  elseif threads >= pts[#pts].threads then
    rate = pts[#pts].bf16_params_per_s
  else
    for i = 2, #pts do
      local a, b = pts[i - 1], pts[i]
      if threads <= b.threads then
        local f = (threads - a.threads) / (b.threads - a.threads)
        rate = a.bf16_params_per_s + f * (b.bf16_params_per_s - a.bf16_params_per_s)
        break
      end
    end
  end
  return rate * procs / math.max(procs, ranks)
end

-- A GPU name as people type it ("h100", "4090", "NVIDIA A100-SXM4-80GB") -> the catalog name,
-- through lua/hw/gpu_aliases.lua; nil and a message when it is unknown or ambiguous.
local function resolve_gpu(name)
  if gpus[name] then return name end
  local key = name:lower():gsub("nvidia", ""):gsub("geforce", ""):gsub("tesla", ""):gsub("[%s%-_]", "")
  if gpus[key] then return key end
  local a = require("hw.gpu_aliases")[key]
  if type(a) == "string" and gpus[a] then return a end
  if type(a) == "table" then
    return nil, ("GPU '%s' is ambiguous: %s (vrsim gpus lists them)"):format(name, table.concat(a, " or "))
  end
  local names = keys(gpus)
  for k in pairs(require("hw.gpu_aliases")) do names[#names + 1] = k end
  table.sort(names)
  local s = closest(key, names)
  local sa = s and require("hw.gpu_aliases")[s]
  if type(sa) == "string" then s = sa elseif type(sa) == "table" then s = table.concat(sa, "' or '") end
  -- the suggestion's memory beside it: a card near in name may be far in size (a 12 GB
  -- RTX 4070 is not the catalog's 16 GB RTX 4080)
  local sg = s and gpus[s]
  local what = sg and (" (%s, %.0f GB)"):format(sg.name, sg.memory_bytes / 2^30) or ""
  return nil, ("unknown GPU '%s'%s (vrsim gpus lists them)"):format(name,
              s and ("; did you mean '" .. s .. "'" .. what .. "?") or "")
end
P.resolve_gpu = resolve_gpu

-- device_of's joined row lists, by GPU and table
local JOINED = {}

-- GPU g's NVLink as the n cards of the run have it: built in, or a 2-way bridge only where the
-- scenario says one is fitted (hardware.nvlink_bridge; cards are sold without); nil when the
-- collectives cannot take NVLink. A bridge joins two cards: with more, or on a card that takes
-- none, stating one is an error.
local function link_as_sold(g, name, n, bridge)
  if bridge then
    if not (g.nvlink and g.nvlink.bridge) then
      error(("hardware.nvlink_bridge = true: the %s takes no NVLink bridge (%s)"):format(name,
            g.nvlink and "its NVLink is built in" or "it has no NVLink"), 0)
    end
    if n ~= 2 then
      error(("hardware.nvlink_bridge = true joins two cards, and hardware.count is %d: with more, the "
             .. "collectives cross PCIe between bridged pairs (leave nvlink_bridge out)"):format(n), 0)
    end
    return g.nvlink
  end
  if g.nvlink and g.nvlink.bridge then return nil end
  return g.nvlink or nil
end

local function device_of(cfg, ctx)
  local name, msg = resolve_gpu(cfg.hardware.gpu)
  if not name then
    if ctx.from_set then error(msg, 0) end
    fail(ctx, "gpu", "hardware", msg)
  end
  if name ~= cfg.hardware.gpu then
    cfg.notes = cfg.notes or {}
    table.insert(cfg.notes, ("GPU '%s' read as the catalog's %s"):format(cfg.hardware.gpu, name))
    cfg.hardware.gpu = name
  end
  local g = gpus[name]
  local links = require "hw.links"
  local hosts = require "hw.hosts"
  -- the GPU's host link: hardware.pcie where the slot gives it less than its own (x8, an older
  -- generation), else the card's; offload's copies and collectives over PCIe run on it
  local pcie_key = cfg.hardware.pcie or ("gen%d_x%d"):format(g.pcie.gen, g.pcie.lanes)
  if cfg.hardware.pcie and not links.pcie[pcie_key] then
    error(("hardware.pcie = '%s' is not a link of lua/hw/links.lua (one of: %s)"):format(pcie_key,
      table.concat(keys(links.pcie), ", ")), 0)
  end
  local pcie_link = links.pcie[pcie_key] or links.pcie.gen4_x16
  local n = cfg.hardware.count
  local ic = cfg.hardware.interconnect
  local nvlink = link_as_sold(g, name, n, cfg.hardware.nvlink_bridge)
  if ic == "auto" then ic = (nvlink and n > 1) and "nvlink" or "pcie" end
  local coll_bw, coll_lat
  if ic == "nvlink" then
    if not nvlink then
      error(g.nvlink and g.nvlink.bridge
        and ("%s is sold without NVLink: set hardware.nvlink_bridge = true if the two cards have a bridge fitted"):format(name)
        or ("%s has no NVLink: use hardware.interconnect = \"pcie\""):format(name), 0)
    end
    local gen = g.nvlink.gen
    local l = links.nvlink[type(gen) == "string" and gen or ("gen" .. gen)] or {}
    coll_bw, coll_lat = l.bw_bytes_per_s or g.nvlink.bw_bytes_per_s, (l.latency_s or 3e-6) * 1e9
    -- a full mesh (MI300X's Infinity Fabric): a group of n GPUs of one node uses n - 1 of each
    -- GPU's links
    if l.mesh and l.links then
      coll_bw = coll_bw * math.min(math.max(math.min(n, cfg.hardware.gpus_per_node) - 1, 1), l.links) / l.links
    end
  else
    local l = pcie_link
    coll_bw, coll_lat = l.bw_bytes_per_s, l.latency_s * 1e9
    -- without peer-to-peer (GeForce Ada) NCCL stages every transfer through host memory: the
    -- data crosses PCIe twice
    if g.p2p == false then coll_bw = coll_bw / 2 end
  end
  -- beyond one node, collectives cross the network: nics_per_node ports of hardware.network per
  -- node, rail-optimised; the C core (sim/collective.h coll_net_time_ns) gives each group the
  -- NICs of the GPUs it has in each node
  local nodes = math.ceil(n / cfg.hardware.gpus_per_node)
  local nics = cfg.hardware.nics_per_node or cfg.hardware.gpus_per_node
  if nics < 1 then error("hardware.nics_per_node must be at least 1", 0) end
  local net
  if nodes > 1 then
    net = links.network[cfg.hardware.network]
    if not net then
      local names = keys(links.network)
      local s = closest(cfg.hardware.network, names)
      error(("unknown network '%s'%s (one of: %s)"):format(cfg.hardware.network,
            s and ("; did you mean '" .. s .. "'?") or "", table.concat(names, ", ")), 0)
    end
    ic = ("%s+%dx%s"):format(ic, nics, cfg.hardware.network)
  end
  -- FSDP2 hybrid sharding (HSDP): shards over shard_group consecutive ranks, gradients all-reduced
  -- over the replicate group of one rank per shard group
  -- (over the data-parallel ranks: the mesh's, which tensor parallelism's groups divide)
  local dp_n = ctx.mesh and ctx.mesh.given and ctx.mesh.dp or n
  local shard = cfg.training.zero and cfg.training.zero.shard_group
  local replicate = shard and shard > 0 and shard < dp_n and dp_n // shard or 0
  local pl = pcie_link
  local host = cfg.hardware.host and hosts[cfg.hardware.host]
  if cfg.hardware.host and not host then
    local s = closest(cfg.hardware.host, keys(hosts))
    error(("unknown host '%s'%s"):format(cfg.hardware.host, s and ("; did you mean '" .. s .. "'?") or ""), 0)
  end
  -- a profile measured on this GPU by sim/calib (make calibrate), when there is one, and the
  -- supplements measured beside it (lua/hw/calibrated/<gpu>_<what>.lua), each nil when absent
  local function calibrated(suffix, gname)
    local ok, t = pcall(require, "hw.calibrated." .. (gname or name) .. suffix)
    return ok and type(t) == "table" and t or nil
  end
  -- A list of rows followed by the `key` rows of each supplement named by suffixes that
  -- exists: the modules' own tables stay as loaded. Made once per GPU and table (JOINED): the
  -- modules' rows never change once loaded
  local function joined(rows, key, suffixes, gname)
    local memo = (gname or name) .. "/" .. key
    if JOINED[memo] then return JOINED[memo] end
    local all = {}
    for _, r in ipairs(rows) do all[#all + 1] = r end
    for _, suffix in ipairs(suffixes) do
      local extra = calibrated(suffix, gname)
      for _, r in ipairs(extra and extra[key] or {}) do all[#all + 1] = r end
    end
    JOINED[memo] = all
    return all
  end
  local function load_profile(gname)
    local prof = calibrated("", gname)
    if prof then
      prof.source = prof.source or ("lua/hw/calibrated/" .. gname .. ".lua")
      -- GEMMs timed each from an idle card (vrsim-calibrate --gemm-idle-ms): a training step's
      -- GEMMs run between memory-bound kernels, below the power limit, and torch.profiler's
      -- kernel times of real steps match these, not a grid timed back to back
      -- (validation/PROVENANCE.md, the fourth session)
      local gp = calibrated("_gemm", gname)
      -- with the small and skinny GEMMs' kernels timed by torch.profiler
      -- (measure_gemm_kernels.py), which replace the grid's rows up to their largest problem
      -- (sim/cost.c gemm_points)
      if gp and type(gp.gemm) == "table" then
        prof.gemm = joined(gp.gemm, "gemm_kernels", { "_gemm_kernels" }, gname)
      end
      -- scaled_dot_product_attention per backend and shape (validation/harness/measure_sdpa.py):
      -- fused attention takes its time from these rather than from the GEMM curve
      -- fused attention: its kernels' own time where measured (measure_sdpa_kernels.py), else
      -- single calls timed with events (measure_sdpa.py)
      local sp = calibrated("_sdpa_kernels", gname) or calibrated("_sdpa", gname)
      if sp then prof.sdpa = sp.sdpa end
      -- LoRA adapters' skinny GEMMs by rank, tokens and width (measure_lora_gemms.py): their
      -- kernels run far below the GEMM curve's rate for their FLOPs, in fp32 on the SIMT cores.
      -- Only a run with adapters has such GEMMs; the others do not read the table's 960 rows
      local lg = require("strategies.lora").wanted(cfg.training) and calibrated("_lora_gemm", gname)
      prof.lora_gemm = lg and lg.lora_gemm or nil
      -- the rows C makes the cost model from are a function of these two alone: the process
      -- makes that model once per key (sim/bind/plan_read.c read_profile)
      prof.cost_key = gname .. (lg and "+lora_gemm" or "")
      -- compute kernels beside an NCCL collective (measure_contention.py, two GPUs): none is
      -- applied until it is measured
      local ct = calibrated("_contention", gname)
      if ct then prof.contention = ct.contention end
      -- the stream's dead time between back-to-back kernels (measure_kernel_gap.py)
      local kg = calibrated("_kernel_gap", gname)
      if kg then prof.kernel_gap_us = kg.kernel_gap_us end
      -- PyTorch's own dispatch cost per op on that machine (validation/harness/measure_dispatch.py)
      local torchp = calibrated("_torch", gname)
      -- per kernel of module-heavy code (nn.Module calls, hooks, views) when measured, else per op
      if torchp then
        prof.host_op_us = torchp.host_kernel_us or torchp.host_op_us
        prof.host_ckpt_op_us = torchp.host_kernel_ckpt_us
        prof.host_ckpt_region_us = torchp.host_ckpt_region_us
        -- the optimizer's host work per parameter tensor (measure_optim_host.py)
        -- the host dispatch of each op class, forward and backward node (measure_host_classes.py)
        prof.host_classes = torchp.host_class_us
        prof.fsdp2_hook_us = torchp.fsdp2_hook_us
        prof.optim_host = { step_tensor_us = torchp.optim_step_tensor_us,
                            zero_grad_tensor_us = torchp.zero_grad_tensor_us }
      end
      -- PyTorch's elementwise/copy/reduction kernels by access class (measure_torch_ops.py)
      -- with more classes, each from its own measurement: cuDNN's layout transforms around NCHW
      -- convolutions (measure_conv_transforms.py), GroupNorm's statistics kernel, one block
      -- per row (measure_group_norm.py), the norms' other kernels (measure_norm_kernels.py) and
      -- GEGLU's product of a strided and a contiguous operand (measure_geglu_mul.py)
      local ops = calibrated("_torch_ops", gname)
      if ops then
        prof.torch_ops = joined(ops.torch_ops, "torch_ops",
                                { "_conv_layout", "_group_norm", "_norm", "_geglu_mul" }, gname)
      end
    end
    return prof
  end
  -- this GPU's own profile; else the H200's, carried to it op class by op class (lua/hw/carry.lua)
  local carry_mod = require "hw.carry"
  local prof, carry = load_profile(name), nil
  if prof then
    prof.basis = "measured on this GPU: lua/hw/calibrated/" .. name .. "*.lua"
  elseif gpus[carry_mod.REFERENCE] then
    prof = load_profile(carry_mod.REFERENCE)
    if prof then carry, prof.basis = carry_mod.carry(g, gpus[carry_mod.REFERENCE], carry_mod.best_bf16(prof)) end
  end
  -- the host costs carried to the run's host (hardware.host_dispatch_scale, lua/hw/host_speed.lua)
  prof = require("hw.host_speed").scaled(prof, cfg.hardware.host_dispatch_scale)
  -- NCCL collectives measured between GPUs of this kind over NVLink (make calibrate on a
  -- machine with several), used when the collectives run on NVLink
  local nccl, nccl_ranks
  local lk = calibrated("_x2_links")
  if lk and ic == "nvlink" and nodes == 1 then nccl, nccl_ranks = lk.nccl, lk.nccl_ranks end
  return {
    nccl = nccl, nccl_ranks = nccl_ranks,
    profile = prof, carry = carry,
    world = n, coll_bw = coll_bw, coll_latency_ns = coll_lat, interconnect = ic,
    gpus_per_node = cfg.hardware.gpus_per_node, nics_per_node = nics, replicate = replicate,
    nic_bw = net and net.bw_bytes_per_s or 0, nic_latency_ns = net and net.latency_s * 1e9 or 0,
    host_bw = pl.bw_bytes_per_s, host_latency_ns = pl.latency_s * 1e9,
    cpu_adam_rate = (hosts.cpu_adam and hosts.cpu_adam.params_per_s or 0) / math.max(1, math.min(n, 8)),
    cpu_torch_adamw_rate = torch_cpu_adamw_rate(hosts.torch_cpu_adamw, math.min(n, cfg.hardware.gpus_per_node),
                                                cfg.training.cpu_threads),
    host = host,
    key = name, name = g.name,
    total_bytes = g.usable_bytes or g.memory_bytes,
    context_bytes = g.cuda_context_bytes or 0,
    cublas_workspace_bytes = memory.cublas_workspace_bytes(g),
    peak_flops = g.peak_flops, mem_bw = g.mem_bw_bytes_per_s,
    -- efficiencies: without a calibrated profile, large GEMMs are taken to reach 75 % of the
    -- datasheet dense rate and streaming kernels 85 % of HBM bandwidth (H200 through PyTorch:
    -- 777/989 TFLOP/s bf16 and 4.22/4.8 TB/s, validation/results/hw_h200_pytorch.json)
    eff_compute = g.eff_compute or 0.75, eff_memory = g.eff_memory or 0.85,
    launch_ns = g.launch_ns or 5000,
    -- what sizes a row sum's staging buffers on this GPU (sim/device.c device_row_sum_buffers)
    sm_count = g.sm_count, compute_capability = g.compute_capability,
  }, g
end

-- A value as a string that two values share exactly when they are equal as data (tables by
-- content, keys in order, numbers exact), or nil for what is not data (a function, a table
-- nested deeper than 32 or holding itself).
local function canonical(v)
  local out, seen = {}, {}
  local function key_less(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "boolean" then return (not a) and b end
    return a < b
  end
  local function put(x, depth)
    local t = type(x)
    if t == "table" then
      if depth > 32 or seen[x] then return false end
      seen[x] = true
      -- (keys of one type, strings or numbers, sort as key_less sorts them with Lua's own
      -- comparison, without a call into Lua for each)
      local ks, kt, mixed = {}, nil, false
      for k in next, x do
        ks[#ks + 1] = k
        local t1 = type(k)
        if kt == nil then kt = t1 elseif t1 ~= kt then mixed = true end
      end
      if mixed or (kt ~= "string" and kt ~= "number") then table.sort(ks, key_less) else table.sort(ks) end
      out[#out + 1] = "{"
      for _, k in ipairs(ks) do
        if not (put(k, depth + 1) and put(rawget(x, k), depth + 1)) then return false end
        out[#out + 1] = ";"
      end
      out[#out + 1] = "}"
      seen[x] = nil
    elseif t == "string" then out[#out + 1] = ("%q"):format(x)
    elseif t == "number" then out[#out + 1] = math.type(x) == "integer" and ("%d"):format(x) or ("%a"):format(x)
    elseif t == "boolean" or t == "nil" then out[#out + 1] = tostring(x)
    else return false end
    return true
  end
  return put(v, 0) and table.concat(out) or nil
end

-- graph_key's canonical strings of the profile's host costs by op class, by table
local HOST_CANON = setmetatable({}, { __mode = "k" })

-- What a graph may depend on beyond the hardware section and the GPU's catalog entry (whose
-- fields the build reads are noted one by one): the rest of the normalized scenario (the
-- allocator section and the notes apart: compared where the build read them, and not an input),
-- the GPU's architecture as the op library tells them apart (nn.arch_class: the fused attention
-- kernel) and the host costs its ops carry. nil when some of it is not data.
local function graph_key(st)
  local rest = {}
  for k, v in pairs(st.cfg) do
    if k ~= "hardware" and k ~= "allocator" and k ~= "notes" then rest[k] = v end
  end
  local prof = st.dev.profile or {}
  -- (the profile's table of host costs by op class is a loaded module's, which nothing changes:
  -- its canonical string is made once, HOST_CANON)
  local hc = prof.host_classes
  if type(hc) == "table" then
    if HOST_CANON[hc] == nil then HOST_CANON[hc] = canonical(hc) or false end
    hc = HOST_CANON[hc]
    if not hc then return nil end
  end
  return canonical { cfg = rest, arch = nn.arch_class(st.g.arch, st.g.compute_capability), host_classes = hc,
                     optim_host = prof.optim_host, fsdp2_hook_us = prof.fsdp2_hook_us }
end

-- A stand-in for table t that notes in reads[prefix .. key] the canonical value of every field
-- read through it ("*" for the whole table, when iterated; "!" once anything is written, which
-- no reuse can follow).
local function noting_reads(t, prefix, reads)
  return setmetatable({}, {
    __index = function(_, k)
      local v = t[k]
      reads[prefix .. tostring(k)] = canonical(v) or "?"
      return v
    end,
    __newindex = function(_, k, v) reads[prefix .. "!"] = "!"; t[k] = v end,
    __pairs = function() reads[prefix .. "*"] = canonical(t) or "?"; return next, t, nil end,
    __len = function() reads[prefix .. "*"] = canonical(t) or "?"; return #t end,
  })
end

-- Raises msg where the value came from: the last --set of one of `keys` (quoted), else the
-- scenario's line of section.field.
local function fail_given(ctx, sets, keys, field, section, msg)
  for i = #sets, 1, -1 do
    local k = sets[i]:match("^([%w_.]+)=")
    for _, want in ipairs(keys) do
      if k == want then error(("--set %s: %s"):format(sets[i], msg), 0) end
    end
  end
  fail(ctx, field, section, msg)
end

-- The size a search or sweep moves must be one the model reads: given to the other kind of
-- model (an image size to a language model, a token count to SDXL), it is an error.
local function check_size_read(cfg, ctx, sets)
  local t, sdxl = cfg.training, P.diffusion(cfg.model.arch)
  for _, e in ipairs { { "resolution", not sdxl, "an image size, for diffusion models (a language model's length is training.seq)" },
                       { "seq", sdxl, "its text encoders take 77 tokens (its size is training.resolution)" } } do
    local f, unread, why = e[1], e[2], e[3]
    if ctx.given["training." .. f] and unread and t[f] ~= SCHEMA.training[f][2] then
      fail_given(ctx, sets, { f, "training." .. f }, f, "training",
                 ("training.%s = %s: %s does not read it: %s"):format(f, shown(t[f]), cfg.model.arch, why))
    end
  end
end

-- Whether a decoder run reads training.build: weights whose dtype is not fp32, built for training
-- in full precision (vrsim/causal_lm.lua: inference and bitsandbytes weights are built in their
-- dtype whatever it says).
local function build_read(t)
  local low = { bf16 = 1, fp16 = 1, lora_bf16 = 1, lora_fp16 = 1 }
  return low[t.precision] ~= nil and not t.inference and t.quant == "none"
end

-- Fields the scenario or --set gave that nothing in this run reads, each with why: a knob that
-- only some runs use (checkpointing's, device_map's, the network's between nodes, ...) is noted
-- where it has no effect, so that setting it is never silently an answer that ignores it. (A
-- field given its default value is not: it asks for nothing.)
local function inert_given(cfg, ctx)
  local t, hw = cfg.training, cfg.hardware
  local diffusion = P.diffusion(cfg.model.arch)
  local zero = t.zero or {}
  local sharded = t.strategy == "zero3" or t.strategy == "fsdp2"
  local offload_opt = zero.offload_optimizer == "cpu" and (sharded or t.strategy == "zero2")
  local offload = offload_opt or (zero.offload_param == "cpu" and sharded)
  local nodes = math.ceil(hw.count / hw.gpus_per_node)
  local impl_unread = t.inference and "inference has no optimizer step"
    or (t.optimizer == "adamw8bit" or t.optimizer:match("^paged_")) and "bitsandbytes' optimizers have one implementation"
    or t.strategy == "zero2" and "ZeRO-2's step is DeepSpeed's FusedAdam"
    or offload_opt and "the optimizer steps on the CPU"
  -- { field, read by this run, why not }
  local rules = {
    { "training.checkpoint_every", t.checkpointing and not t.inference, "checkpointing is off" },
    { "training.checkpoint_scope", t.checkpointing and not t.inference, "checkpointing is off" },
    { "hardware.max_memory_gib", t.device_map == "auto", "device_map is not \"auto\"" },
    { "hardware.network", nodes > 1, "the run's GPUs are in one node" },
    { "hardware.nics_per_node", nodes > 1, "the run's GPUs are in one node" },
    { "hardware.interconnect", hw.count > 1, "one GPU runs no collectives" },
    { "hardware.nvlink_bridge", hw.interconnect ~= "pcie",
      "hardware.interconnect = \"pcie\" runs the collectives on PCIe" },
    { "hardware.rank", t.strategy == "zero1" or t.device_map == "auto",
      "every rank is alike (only ZeRO-1's partitions and a device map differ by rank)" },
    { "training.optimizer_impl", not impl_unread, impl_unread },
    { "training.cpu_threads", t.strategy == "fsdp2" and offload_opt,
      "only FSDP2's CPU-offloaded torch AdamW step runs on those threads" },
    { "hardware.host", offload, "nothing is offloaded to host memory" },
    { "hardware.pcie", offload or hw.count > 1, "one GPU with nothing offloaded copies nothing over PCIe" },
    { "model.size", cfg.model.config == nil and not diffusion,
      cfg.model.arch == "sdxl" and "SDXL's shapes are its variant's"
      or cfg.model.arch == "sd" and "the UNet's shapes are model.config's"
      or (cfg.model.arch == "flux" or cfg.model.arch == "sd3") and "the transformer's shapes are model.config's"
      or "model.config gives the shape" },
    { "model.variant", cfg.model.arch == "sdxl", "only sdxl has variants" },
    { "training.quant_storage", t.quant == "nf4", "only 4-bit (nf4) weights are packed into a storage dtype" },
  }
  for _, f in ipairs { "hidden", "intermediate", "heads", "kv_heads", "layers", "vocab" } do
    rules[#rules + 1] = { "model." .. f, not diffusion, cfg.model.arch == "sd"
      and "the UNet's shapes are model.config's" or (cfg.model.arch == "flux" or cfg.model.arch == "sd3")
      and "the transformer's shapes are model.config's" or "SDXL's shapes are its variant's" }
  end
  if not diffusion then
    rules[#rules + 1] = { "training.build", build_read(t),
      "the weights are built in their own dtype (fp32 weights, inference or bitsandbytes)" }
  end
  if cfg.model.arch == "sdxl" then
    local full = cfg.model.variant == "sdxl-base"
    rules[#rules + 1] = { "training.text_encoders", full, "the sdxl-base-unet variant runs the UNet alone" }
    rules[#rules + 1] = { "training.vae", full, "the sdxl-base-unet variant runs the UNet alone" }
    rules[#rules + 1] = { "training.build", false, "SDXL's models are built in their dtype (diffusers' from_pretrained)" }
  end
  if cfg.model.arch == "sd" or cfg.model.arch == "flux" or cfg.model.arch == "sd3" then
    rules[#rules + 1] = { "training.build", false, "the models are built in their dtype (diffusers' from_pretrained)" }
  end
  local schema = schema_of(diffusion and cfg.model.arch or "llama2")
  local out = {}
  for _, r in ipairs(rules) do
    local sec, f = r[1]:match("^(%a+)%.(.*)$")
    local v, spec = cfg[sec][f], schema[sec][f]
    if ctx.given[r[1]] and not r[2] and not (spec and v == spec[2]) then
      out[#out + 1] = ("%s = %s has no effect on this run: %s"):format(r[1], shown(v), r[3])
    end
  end
  if t.strategy == "none" then
    for _, k in ipairs(ordered_keys(zero)) do
      out[#out + 1] = ("training.zero.%s has no effect: strategy is none (one GPU, no data parallelism)"):format(k)
    end
  end
  return out
end

-- Building a plan, in three parts: prepare (the scenario normalized, its GPU and links found, the
-- inputs checked), build_graph (the model, the strategy and the optimizer as ops) and finish (what
-- the report needs). P.build runs all three. A graph that did not read what distinguishes two
-- scenarios is the same for both, so P.rebuild prepares a new one and, where the graph P.build
-- made last read nothing that differs, finishes it with that graph (vrsim sweep and shop, whose
-- points often differ only in the GPU: sim/points.c).

-- st: the prepared scenario (prepare's table).
local function prepare(scn, sets, file, src)
  local cfg, ctx = P.normalize(scn, sets, file, src)
  for _, s in ipairs(sets) do if s:match("^gpu=") or s:match("^hardware%.gpu=") then ctx.from_set = true end end
  -- the device mesh (training.parallel, or the strategy and count it shortens), before the links:
  -- a layout sets the data-parallel strategy it implies (lua/vrsim/mesh.lua)
  local mesh_mod = require "vrsim.mesh"
  local mesh_sets = { "count", "hardware.count", "strategy", "training.strategy" }
  for k in pairs(mesh_mod.FIELDS) do
    mesh_sets[#mesh_sets + 1] = "parallel." .. k
    mesh_sets[#mesh_sets + 1] = "training.parallel." .. k
  end
  local okm, mesh = pcall(mesh_mod.resolve, cfg, ctx.given)
  if not okm then fail_given(ctx, sets, mesh_sets, "parallel", "training", tostring(mesh)) end
  local nm = mesh_mod.not_modelled(mesh)
  if nm then fail_given(ctx, sets, mesh_sets, "parallel", "training", nm) end
  ctx.mesh, ctx.mesh_sets = mesh, mesh_sets
  local dev, g = device_of(cfg, ctx)
  -- Whether building the graph reads the allocator settings: the build sees cfg.allocator through
  -- a table that notes every read (and write); when nothing touched it, the graph is the same
  -- whatever the allocator settings, and a run that only changes them reuses it (cmd_run's "what
  -- would help" row for expandable segments)
  local alloc_real, alloc_read = cfg.allocator, false
  cfg.allocator = setmetatable({}, {
    __index = function(_, k) alloc_read = true; return alloc_real[k] end,
    __newindex = function(_, k, v) alloc_read = true; alloc_real[k] = v end,
    __pairs = function() alloc_read = true; return next, alloc_real, nil end,
    __len = function() alloc_read = true; return #alloc_real end,
  })
  -- the rank simulated is one of the run's (ZeRO-1's partition and a device map pick by it)
  if cfg.hardware.rank >= cfg.hardware.count then
    fail_given(ctx, sets, { "rank", "hardware.rank", "count", "hardware.count" }, "rank", "hardware",
               ("hardware.rank = %d: the ranks of %d GPUs are 0 to %d"):format(
               cfg.hardware.rank, cfg.hardware.count, cfg.hardware.count - 1))
  end
  check_size_read(cfg, ctx, sets)
  local t0 = cfg.training
  if t0.data then
    require("strategies.data").apply(cfg, ctx, function(m) fail_given(ctx, sets, { "training.seq", "seq" }, "data", "training", m) end)
  end
  if t0.float8 then
    local why = require("strategies.float8").refusal(t0, g)
    if why then fail(ctx, "float8", "training", why) end
  end
  if t0.dpo then
    local why = require("strategies.dpo").refusal(t0)
    if why then fail(ctx, "dpo", "training", why) end
    -- the rows' length is the collator's (prompt + completion, cut to max_length)
    if ctx.given["training.seq"] then
      fail_given(ctx, sets, { "training.seq", "seq" }, "seq", "training", "training.seq is set by training.dpo "
                 .. "(prompt_length + completion_length, cut to max_length): leave it out")
    end
    t0.seq = require("strategies.dpo").settings(t0.dpo).len
  end
  if t0.generate then
    local why = require("strategies.generate").refusal(t0)
    if why then fail(ctx, "generate", "training", why) end
    for _, k in ipairs { "seq", "micro_batch" } do
      if ctx.given["training." .. k] then
        fail_given(ctx, sets, { "training." .. k, k }, k, "training", ("training.%s is set by training.generate "
                   .. "(prompt, batch): leave it out"):format(k))
      end
    end
    local gs = require("strategies.generate").settings(t0.generate)
    t0.seq, t0.micro_batch = gs.prompt, gs.batch
  end
  local st = { cfg = cfg, ctx = ctx, dev = dev, g = g, t0 = t0, sets = sets, alloc_real = alloc_real,
               alloc_read = function() return alloc_read end }
  -- (a DeepSpeed config sets the strategy itself, over hardware.count: not beside a mesh)
  if t0.deepspeed and mesh.given then
    fail(ctx, "deepspeed", "training", "training.deepspeed and training.parallel: a DeepSpeed config's data "
         .. "parallelism runs over hardware.count, a layout names its own: give one of them")
  end
  if t0.deepspeed then require("strategies.deepspeed").apply(cfg, ctx, function(m) fail(ctx, "deepspeed", "training", m) end) end
  -- training.zero's knobs are checked whether or not a strategy uses them: a typo is an error
  for k, v in pairs(t0.zero or {}) do
    local msg = unknown_zero_knob(k) or bad_zero_value(k, v)
    if msg then fail(ctx, "zero", "training", msg) end
  end
  -- training.lora's keys likewise: one peft's LoraConfig as modelled does not take is an error,
  -- never a default silently in its place
  for _, k in ipairs(ordered_keys(t0.lora or {})) do
    local msg = unknown_lora_key(k)
    if msg then fail_given(ctx, sets, { "lora." .. tostring(k), "training.lora." .. tostring(k) }, "lora", "training", msg) end
  end
  -- a Hugging Face config's sizes are checked before a model is built from them
  if cfg.model.config ~= nil then
    local c = cfg.model.config
    local okc, msg = pcall(function()
      if type(c) == "string" then c = require("vrsim.core").read_config(c) end
      P.check_hf_config(c, type(cfg.model.config) == "string" and cfg.model.config or "model.config")
    end)
    if not okc then fail(ctx, "config", "model", (tostring(msg):gsub("^[^:]*plan%.lua:%d+: ", ""))) end
  end
  cfg.notes = cfg.notes or {}
  for _, n in ipairs(inert_given(cfg, ctx)) do cfg.notes[#cfg.notes + 1] = n end
  for _, n in ipairs(mesh.notes) do cfg.notes[#cfg.notes + 1] = n end
  if mesh.given then
    cfg.notes[#cfg.notes + 1] = mesh_mod.describe(mesh, cfg.hardware.rank, cfg.hardware.gpus_per_node,
      dev.interconnect:match("^[^+]*"), cfg.hardware.network)
  end
  st.mesh = mesh
  st.key = graph_key(st)
  st.notes_before = #cfg.notes
  return st
end

-- The graph of a prepared scenario, what it read of the hardware section and of the GPU's catalog
-- entry (name -> canonical value; P.rebuild compares them) and the notes it added.
local function build_graph(st)
  local cfg, ctx, dev, g, t0 = st.cfg, st.ctx, st.dev, st.g, st.t0
  local reads = {}
  local G = require("vrsim.core").new_graph()
  local cx = nn.context(G)
  cx.mesh = st.mesh
  cx.no_grad = t0.inference
  cx.layers_once = t0.build_layers_once
  cx.arch = nn.arch_class(g.arch, g.compute_capability)
  cx.gpu = noting_reads(g, "gpu.", reads)
  cx.optim_host = dev.profile and dev.profile.optim_host
  cx.host_classes = dev.profile and dev.profile.host_classes
  cx.fsdp2_hook_us = dev.profile and dev.profile.fsdp2_hook_us
  local hw = cfg.hardware
  cfg.hardware = noting_reads(hw, "hardware.", reads)
  local dp = nil
  if t0.strategy ~= "none" then
    -- (on one GPU the strategy still shapes memory: ZeRO-Offload on one card is common)
    dp = require "strategies.dp"
    dp.setup(cx, cfg)
  end
  -- (a config the arch does not read is an error at the scenario's model.arch or model.config)
  local okb, builder = pcall(P.builder, cfg)
  if not okb then
    local m = tostring(builder)
    fail(ctx, m:match("^model%.arch") and "arch" or "config", "model", m)
  end
  local model = require(builder)
  cx.micro, cx.micro_total = 1, t0.inference and 1 or t0.grad_accum
  -- pipeline parallelism: this plan is one pipeline rank, its schedule declared in order
  -- (vrsim/pipeline.lua)
  if st.mesh and st.mesh.degrees.pp > 1 then
    local okp, pl = pcall(function()
      if builder ~= "vrsim.causal_lm" then error("training.parallel: only decoder language models are modelled", 0) end
      local _, mc = require("vrsim.causal_lm").resolve(cfg.model)
      return require("vrsim.pipeline").layout(cfg, mc.layers, st.mesh)
    end)
    if not okp then fail(ctx, "parallel", "training", tostring(pl)) end
    cx.pp = pl
    if pl then cx.layers_once = false end -- (replicate.lua numbers a stack's layers from 0)
    -- FSDP2 over dp_shard beside the pipeline keeps each stage's parameters unsharded (dp.lua)
    if pl and dp then dp.pp_keep(cx) end
  end
  local ok, loss, _, mc, forward = pcall(model.build, cx, cfg)
  if not ok then
    local msg = tostring(loss)
    -- (what the layout asks of this model that is not modelled names training.parallel)
    if msg:match("^training%.parallel") then fail_given(ctx, st.sets, ctx.mesh_sets, "parallel", "training", msg) end
    if not msg:match("^[^:]+:%d+:") then
      fail(ctx, msg:match("^config '") and "config" or "model", msg:match("^config '") and "model" or nil, msg)
    end
    error(msg, 0)
  end
  -- a layout's tensor parallelism is applied by the model's builder or refused: never ignored
  if st.mesh.degrees.tp > 1 and not cx.tp_applied then
    fail_given(ctx, st.sets, ctx.mesh_sets, "parallel", "training",
      ("training.parallel.tp = %d: tensor parallelism is not modelled for model.arch %s"):format(
        st.mesh.degrees.tp, tostring(cfg.model.arch)))
  end
  for _, k in ipairs { { "cp", "context", cx.cp }, { "ep", "expert", cx.ep } } do
    if st.mesh.degrees[k[1]] > 1 and not k[3] then
      fail_given(ctx, st.sets, ctx.mesh_sets, "parallel", "training",
        ("training.parallel.%s = %d: %s parallelism is not modelled for model.arch %s"):format(
          k[1], st.mesh.degrees[k[1]], k[2], tostring(cfg.model.arch)))
    end
  end
  -- gradient accumulation: forward + backward per micro-batch, gradients accumulate into .grad;
  -- the strategy declares its reduction hooks for each micro-batch as its framework runs them
  -- (dp.before_backward: DDP/ZeRO-1 on the last only, ZeRO-2/3 and FSDP2 on every one)
  local k = t0.inference and 0 or t0.grad_accum
  if cx.pp then
    local okr, pp = pcall(require("vrsim.pipeline").run, cx, cx.pp, mc, forward)
    if not okr then fail(ctx, "parallel", "training", tostring(pp)) end
    cx.pp_plan, k = pp, 0
    if dp then dp.pp_reduce_grads(cx) end
  end
  for i = 1, k do
    cx.micro = i
    if i > 1 then
      if not forward then error(cfg.model.arch .. " does not support gradient accumulation", 0) end
      loss = forward()
    end
    if dp then dp.before_backward(cx, cfg, cx.params, i, k) end
    -- loss scaling: scaler.scale(loss).backward() under amp_fp16, DeepSpeed's fp16 loss scaler
    local scaled = loss
    if require("strategies.optim").uses_grad_scaler(cfg) then scaled = require("strategies.optim").scale_loss(cx, loss)
    elseif t0.loss_scaling then scaled = require("strategies.optim").scale_loss(cx, loss, true) end
    G:derive_backward(scaled.id)
  end
  if t0.empty_cache_after_build then
    G:op { name = "torch.cuda.empty_cache()", kind = "empty_cache", phase = "build", inputs = {},
           outputs = {}, frees = {} }
  end
  cx.phase = "optim"
  local optim = require "strategies.optim"
  if t0.inference then
    -- nothing to update
  elseif dp then
    local upd = dp.after_backward(cx, cfg, cx.params)
    if upd.zero2 and upd.zero2.offload then
      dp.offload_step(cx, upd.zero2)
      dp.zero2_step_gather(cx, upd.zero2)
    elseif upd.zero2 then
      dp.zero2_step(cx, upd.zero2)
    elseif upd.offload then
      dp.offload_step(cx, upd.offload)
    else
      optim.build(cx, cfg, cx.params, upd)
    end
    dp.after_step(cx)
  else
    optim.build(cx, cfg, cx.params)
  end

  cfg.hardware = hw
  -- notes the build added (the plan's own come again from prepare)
  local notes = {}
  for i = st.notes_before + 1, #(cfg.notes or {}) do notes[#notes + 1] = cfg.notes[i] end
  return G, cx, reads, notes
end

-- What the report counts of a graph's parameters, worked out once per graph (P.rebuild's plans
-- share it): the base model's parameter count as model.parameters() sees it before peft (a tied
-- weight once; adapters not counted) and the parameters that train (adapters included), as the
-- measured records define n_params and n_trainable; for DeepSpeed's estimator, every
-- parameter's elements and the largest layer's.
local function param_counts(cx)
  if cx.param_counts then return cx.param_counts end
  local n_params, n_trainable, counted = 0, 0, {}
  local total, largest_layer, per_layer = 0, 0, {}
  for _, p in ipairs(cx.params) do
    local n = nn.numel(p.shape)
    if not counted[p] then
      counted[p] = true
      -- (an adapter by its flag, or by peft's parameter names where a model sets no flag; the
      -- plain find first: an unanchored pattern tries every position of every name)
      local name = tostring(p.name)
      local adapter = p.adapter or (name:find("lora_", 1, true) and name:match("%.lora_[AB]%."))
      if not adapter then n_params = n_params + n end
      if p.trainable then n_trainable = n_trainable + n end
    end
    -- (the estimator's sums take every entry of the list; counted is for the report's counts)
    total = total + n
    local l = p.layer or -1
    per_layer[l] = (per_layer[l] or 0) + n
  end
  for _, n in pairs(per_layer) do if n > largest_layer then largest_layer = n end end
  cx.param_counts = { n_params = n_params, n_trainable = n_trainable, total = total,
                      largest_layer = largest_layer }
  return cx.param_counts
end

-- How the model came onto the GPU, for the header: the defaults (from_pretrained's dtype, FSDP2's
-- meta-device init) are stated, since they decide the build's peak.
local function how_built(t, cx)
  if t.inference then return "" end
  local dtype = cx.run and cx.run.param_dtype
  local s = ""
  if build_read(t) then
    s = t.build == "cast" and "; built in fp32, then .to(" .. tostring(dtype) .. ")"
        or "; weights made in their dtype (from_pretrained)"
  end
  if cx.dp and (t.strategy == "fsdp2" or t.strategy == "zero3") then
    s = s .. (cx.dp.init_partitioned and (t.strategy == "fsdp2" and ", sharded from meta-device init" or ", partitioned by zero.Init")
              or ", whole on every GPU, then sharded")
  end
  return s
end

-- The plan table C reads (sim/bind/bind.c load_protected), of a prepared scenario and its graph.
local function finish(st, G, cx, alloc_read)
  local cfg, dev, sets = st.cfg, st.dev, st.sets
  local dp = st.t0.strategy ~= "none" and require("strategies.dp") or nil
  cfg.allocator = st.alloc_real

  -- capacity the allocator may reserve: the card minus the CUDA context, or the fraction cap
  -- (lua/hw/memory.lua, the one rule)
  local cap, fraction_set = memory.capacity(dev.total_bytes, dev.context_bytes, cfg.hardware)
  local t = cfg.training
  local model_mod = require(P.builder(cfg))
  local settings_line = model_mod.settings and model_mod.settings(cfg)
  local d = t.data_batch
  local shape = d and d.batching == "padding_free" and ("micro-batch %d flattened to 1 x seq %d"):format(d.n, d.len)
    or ("micro-batch %d x seq %d"):format(d and d.rows or t.micro_batch, t.seq)
  local settings = settings_line or ("%s %s, %s, %s, %s %s, attention %s%s%s%s"):format(
    cfg.model.arch, cfg.model.config ~= nil and cx.model_name or cfg.model.size, shape, t.precision, t.optimizer,
    t.optimizer_impl, t.attention, (t.checkpointing and ", checkpointing" or "") ..
    (t.strategy ~= "none" and (", " .. t.strategy .. " over " .. (st.mesh and st.mesh.given and st.mesh.dp or cfg.hardware.count) .. " GPUs") or "")
      .. (st.mesh and st.mesh.degrees.tp > 1 and (", tensor parallel over " .. st.mesh.degrees.tp .. " GPUs") or ""),
    cfg.allocator.conf ~= "" and (", " .. cfg.allocator.conf) or "", how_built(t, cx))
  local counts = param_counts(cx)
  local n_params, n_trainable = counts.n_params, counts.n_trainable
  local notes = {}
  for _, n in ipairs(cfg.notes or {}) do notes[#notes + 1] = n end
  for _, n in ipairs(cx.notes or {}) do notes[#notes + 1] = n end
  -- bf16 math on a GPU without bf16 tensor cores (Volta, Turing: compute capability below 8.0):
  -- PyTorch emulates it, and the catalog gives those GEMMs the GPU's fp32 rate as their bf16 peak
  -- (lua/hw/gpus.lua), which nobody measured. Then what vrsim does not model on the card.
  local bf16_math = t.precision:match("bf16") or t.precision == "mp_fp32"
  local gpu = gpus[dev.key] or {}
  if bf16_math and gpu.vendor ~= "amd" and (dev.compute_capability or 0) < 8 then
    notes[#notes + 1] = ("the %s has no bf16 tensor cores (compute capability %.1f): PyTorch emulates bf16, "
                         .. "and vrsim prices its bf16 GEMMs at the GPU's fp32 rate, an assumption no "
                         .. "measurement checks"):format(dev.name, dev.compute_capability or 0)
  end
  for _, n in ipairs(gpu.not_modelled or {}) do
    notes[#notes + 1] = ("not modelled on the %s: %s"):format(dev.name, n)
  end
  if gpu.nvlink and not gpu.nvlink.bridge and type(gpu.nvlink.gen) == "string" and dev.interconnect:match("^nvlink") then
    notes[#notes + 1] = ("the %s's collectives run on its own links (lua/hw/links.lua nvlink.%s), shown as nvlink")
      :format(dev.name, gpu.nvlink.gen)
  end
  -- DeepSpeed's estimator for the model states, beside the simulation (ZeRO-2 and -3 only)
  local ds_est = 0
  if dp and (t.strategy == "zero2" or t.strategy == "zero3") then
    local total, largest_layer = counts.total, counts.largest_layer
    local off = cx.dp.opts.offload_optimizer == "cpu"
    ds_est = dp.deepspeed_estimate(t.strategy == "zero2" and 2 or 3, total, largest_layer,
                                   math.min(cfg.hardware.count, cfg.hardware.gpus_per_node),
                                   math.max(1, math.ceil(cfg.hardware.count / cfg.hardware.gpus_per_node)),
                                   off, cx.dp.opts.offload_param == "cpu") or 0
  end
  return {
    strategy = t.strategy, interconnect = dev.interconnect, ds_estimate_bytes = ds_est,
    host_bytes = cx.dp and cx.dp.host_bytes or 0,
    host_capacity = dev.host and dev.host.host_ram_bytes or 0,
    managed_bytes = cx.paged_bytes or 0, -- paged optimizer state (strategies/quant.lua bnb_state)
    notes = table.concat(notes, "; "),
    overrides = table.concat(sets, ", "),
    deepspeed_read = cfg.deepspeed_read, deepspeed_unknown = table.concat(cfg.deepspeed_unknown or {}, ", "),
    graph = G, title = cfg.title or "", pp = cx.pp_plan,
    model = cx.model_name or (cfg.model.arch .. "-" .. (cfg.model.variant or cfg.model.size)),
    n_params = n_params, n_trainable = n_trainable,
    settings = settings, steps = t.steps, gpus = cfg.hardware.count,
    tokens_per_step = cx.tokens or 0, samples_per_step = t.data_batch and t.data_batch.n or t.micro_batch,
    device = dev,
    allocator = { conf = cfg.allocator.conf, kind = cfg.allocator.kind, capacity_bytes = cap,
                  fraction_set = fraction_set },
    graph_reads_allocator = alloc_read,
    -- the settings in effect that the "what would help" changes (sim/variants.c) start from, as
    -- key=value words: a change whose every setting is already here is the run itself
    knobs = ("training.checkpointing=%s training.precision=%s training.optimizer_impl=%s training.strategy=%s"
             .. " training.optimizer=%s training.checkpoint_scope=%s training.grad_accum=%s training.quant=%s"
             .. " hardware.count=%s hardware.gpu=%s training.zero.offload_optimizer=%s training.build=%s"):format(
      tostring(t.checkpointing), tostring(t.precision), tostring(t.optimizer_impl), tostring(t.strategy),
      tostring(t.optimizer), tostring(t.checkpoint_scope), tostring(t.grad_accum), tostring(t.quant),
      tostring(cfg.hardware.count), tostring(cfg.hardware.gpu),
      tostring(cx.dp and cx.dp.opts.offload_optimizer or "none"), tostring(t.build)),
  }
end

function P.build(scn, sets, file, src)
  -- a state that builds again (sim/points.c, a child sent a job anew) holds nothing of the last
  -- build while it makes this one, as a fresh state would not
  P.last_build = nil
  local st = prepare(scn, sets, file, src)
  local G, cx, reads, notes = build_graph(st)
  local alloc_read = st.alloc_read()
  P.last_build = { key = st.key, alloc = canonical(st.alloc_real), alloc_read = alloc_read, reads = reads,
                   notes = notes, G = G, cx = cx }
  return finish(st, G, cx, alloc_read)
end

-- The plan of scenario scn with sets, as P.build would make it, made with the graph of the last
-- P.build in this state where that graph read nothing that differs between the two: the same
-- normalized scenario outside its hardware section (the allocator section too, where the graph
-- read it), the same GPU architecture and host costs, and the same value of every hardware field
-- and catalog field of the GPU that the build read. Returns nil and why when it cannot. The plan
-- has graph_reused = true: its graph is the one the earlier plan took (sim/bind/bind.c load_protected).
function P.rebuild(scn, sets, file, src)
  local last = P.last_build
  if not last then return nil, "no graph was built in this state" end
  local st = prepare(scn, sets, file, src)
  if not st.key or st.key ~= last.key then return nil, "the scenario differs beyond its hardware" end
  if last.alloc_read and canonical(st.alloc_real) ~= last.alloc then return nil, "the allocator settings differ" end
  for name, v in pairs(last.reads) do
    local sec, k = name:match("^(%a+)%.(.*)$")
    local t = sec == "gpu" and st.g or st.cfg.hardware
    local now = (k == "*" or k == "!") and canonical(t) or canonical(t[k])
    if k == "!" or now ~= v then return nil, ("the graph read %s, which differs"):format(name) end
  end
  st.cfg.notes = st.cfg.notes or {}
  for _, n in ipairs(last.notes) do table.insert(st.cfg.notes, n) end
  local plan = finish(st, last.G, last.cx, last.alloc_read or st.alloc_read())
  plan.graph_reused = true
  return plan
end

-- The archs whose model is a diffusers denoiser and its pipeline (models/<arch>.lua builds the run).
function P.diffusion(arch) return arch == "sdxl" or arch == "sd" or arch == "flux" or arch == "sd3" end

-- The module that builds a normalized config's run: models.sdxl, models.sd, or vrsim.causal_lm for the decoder families (whose
-- family comes from model.config, or the named Llama-2 shapes for arch llama2).
function P.builder(cfg)
  local m = cfg.model
  if P.diffusion(m.arch) then return "models." .. m.arch end
  if m.resolved_arch then return "vrsim.causal_lm" end
  local given = m.arch
  if m.config ~= nil then
    local fam = require("models.hf").resolve(m.config)
    -- (llama2 names the Llama-2 shapes: beside a config of another family, as --set model.config
    -- on a Llama-2 scenario gives, the config's family is built, and the run says so)
    if given == "llama2" and fam ~= "llama" then
      cfg.notes = cfg.notes or {}
      local note = ("model.arch = llama2 read as %s, the family of model.config (%s)"):format(fam,
                    type(m.config) == "string" and m.config or "a table")
      -- (a plan finished with an earlier build's graph has that build's notes already)
      local seen = false
      for _, n in ipairs(cfg.notes) do seen = seen or n == note end
      if not seen then table.insert(cfg.notes, note) end
    elseif given ~= nil and given ~= fam and given ~= "llama2" then
      error(("model.arch = %s, but the config is a %s model (%s)"):format(given, fam,
            type(m.config) == "string" and m.config or "model.config"), 0)
    end
    m.arch = fam
  else
    if given ~= nil and given ~= "llama2" then
      error(("model.arch = %s needs model.config (a config.json path or its table)"):format(given), 0)
    end
    m.arch = "llama2"
  end
  m.resolved_arch = true
  return "vrsim.causal_lm"
end

-- The type of scenario field section.field ("integer", "string", "table", ...), or nil when the
-- schema has no such field (lua/vrsim/record.lua asks before it maps a record's field).
function P.field_type(section, field)
  local sec = SCHEMA[section]
  local spec = type(sec) == "table" and sec[field]
  return spec and spec[1] or nil
end

-- What each training.zero knob does, for `vrsim fields` (the knobs, their types, choices and
-- defaults are lua/strategies/dp.lua's DEFAULTS and KNOB_TYPES, which check them).
local ZERO_HELP = {
  bucket_cap_mb = "DDP's gradient bucket size in MiB (DistributedDataParallel bucket_cap_mb)",
  first_bucket_mb = "DDP's first gradient bucket in MiB",
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
  sync_every_micro_batch = "FSDP2 with grad_accum: reduce-scatter every micro-batch (false: set_requires_gradient_sync(False) until the last)",
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
function P.fields_text()
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
  -- training.zero: dp.lua's knobs, which strategies read each
  local dp = require "strategies.dp"
  out[#out + 1] = "training.zero (the data-parallel strategy's knobs: zero = { NAME = value }, --set zero.NAME=value)"
  local zfields, zch, zextra = {}, {}, {}
  for k, d in pairs(dp.DEFAULTS) do
    local ty = dp.KNOB_TYPES[k]
    local kind = type(ty) == "table" and "string" or ty or type(d)
    zfields[k] = { kind, d, ZERO_HELP[k] or "" }
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

return P
