-- hf.lua: a Hugging Face config.json (a path, or the object itself) to the family that models it
-- and that family's normalized config. The family is chosen as AutoModelForCausalLM chooses it:
-- by `architectures` first, then by `model_type`. Every key vrsim reads is listed per family
-- (FAMILIES below); a key that would change memory or time and is not modelled is an error
-- naming it, never silently ignored.
--
-- Adding a family: a file lua/models/<family>.lua returning { architectures = {...},
-- model_type = "...", config = function(hf) -> normalized config, classes = {...} } (see
-- qwen2.lua, which is Llama's tree with biases on q/k/v), and its name in FAMILIES.
local H = {}

H.FAMILIES = { "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2", "mixtral", "qwen3_moe", "gpt_oss",
              "deepseek_v2", "deepseek_v3" }

local function families()
  local by_arch, by_type = {}, {}
  for _, name in ipairs(H.FAMILIES) do
    local f = require("models." .. name)
    for _, a in ipairs(f.architectures) do by_arch[a] = name end
    by_type[f.model_type] = name
  end
  return by_arch, by_type
end

-- The config object from `src`: a table (as is) or a path (read as JSON through the sandbox's
-- reader, which also opens a path the user typed on the command line).
function H.read(src)
  if type(src) == "table" then return src, "config" end
  if type(src) ~= "string" then error("model.config must be a config.json path or a table", 0) end
  return require("vrsim.core").read_config(src), src
end

-- Whether key k of config object t was a JSON null (not a key left out): the reader keeps an
-- object's null keys in its metatable (sim/bind/bind.c push_json), since both read as nil.
function H.is_null(t, k)
  if t[k] ~= nil then return false end
  local mt = getmetatable(t)
  return type(mt) == "table" and type(mt.__json_null) == "table" and mt.__json_null[k] == true
end

-- Returns the family module's name, the family module and its normalized config.
function H.resolve(src, overrides)
  local hf, where = H.read(src)
  if overrides and next(overrides) then
    -- the scenario's shape fields replace the config's keys before the family reads them, so
    -- what follows from them (head_dim = hidden_size // num_attention_heads where the config
    -- gives none) follows as transformers has it
    local copy = setmetatable({}, getmetatable(hf))   -- its null keys too (H.is_null)
    for k, v in pairs(hf) do copy[k] = v end
    for k, v in pairs(overrides) do copy[k] = v end
    hf = copy
  end
  local by_arch, by_type = families()
  local fam
  local archs = hf.architectures
  if archs ~= nil and type(archs) ~= "table" then
    error(("%s: architectures must be a list of class names"):format(where), 0)
  end
  for _, a in ipairs(archs or {}) do fam = fam or by_arch[a] end
  -- the class comes from architectures when the config names one: a model_type vrsim knows does
  -- not make LlamaForSequenceClassification a causal LM (its head and loss differ)
  if not fam and hf.model_type and not (archs and archs[1] ~= nil) then fam = by_type[hf.model_type] end
  if not fam and hf._class_name ~= nil then
    local what = require("vrsim.unmodelled").what(tostring(hf._class_name))
    error(("%s: a diffusers %s config is not a transformers model's: arch = \"sd\" reads a Stable "
           .. "Diffusion 1.x / 2.x UNet config, arch = \"sdxl\" SDXL base's and arch = \"flux\" a "
           .. "FluxTransformer2DModel config (Flux.1), arch = \"sd3\" an SD3Transformer2DModel config (Stable "
           .. "Diffusion 3 / 3.5), and no other diffusers model is modelled%s (what is "
           .. "and is not modelled: %s)")
          :format(where, tostring(hf._class_name), what and ("; not modelled: " .. what) or "",
                  require("vrsim.unmodelled").WHERE), 0)
  end
  if not fam then
    local known = {}
    for a in pairs(by_arch) do known[#known + 1] = a end
    table.sort(known)
    local what = archs and archs[1] and ("architecture '" .. tostring(archs[1]) .. "'")
                 or ("model_type '" .. tostring(hf.model_type) .. "'")
    error(("%s: %s is not modelled (modelled: %s; what is and is not modelled: %s; a new family "
           .. "is a file in lua/models/: docs/model-families.md, \"Adding a family: Qwen2 as the worked example\")"):format(where, what,
           table.concat(known, ", "), require("vrsim.unmodelled").WHERE), 0)
  end
  local f = require("models." .. fam)
  local cfg = f.config(hf, where)
  cfg.family = fam
  -- PretrainedConfig.use_cache: what a forward's use_cache=None falls back to (the families'
  -- configs default it to True)
  cfg.use_cache = H.bool(hf, "use_cache", true, where)
  -- max_position_embeddings: the span of the RoPE cache torchtune's builders make (model.code)
  if hf.max_position_embeddings ~= nil then cfg.max_positions = H.int(hf, "max_position_embeddings", nil, where) end
  cfg.name = hf._name_or_path or hf.name_or_path or (type(src) == "string" and src:match("([^/]+)%.json$"))
             or (archs and archs[1]) or fam
  return fam, f, cfg
end

-- Reads integer field `k` of config object hf (default `def`), checked positive.
function H.int(hf, k, def, where)
  local v = hf[k]
  if v == nil then v = def end
  if v == nil then error(("%s: %s is required"):format(where, k), 0) end
  if type(v) ~= "number" or v ~= v or v < 1 or v > 2^40 or v ~= math.floor(v) then
    error(("%s: %s must be a positive integer (got %s)"):format(where, k, tostring(v)), 0)
  end
  return math.tointeger(v)
end

function H.bool(hf, k, def, where)
  local v = hf[k]
  if v == nil then return def end
  if type(v) ~= "boolean" then error(("%s: %s must be true or false (got %s)"):format(where, k, tostring(v)), 0) end
  return v
end

-- Keys that may appear and change nothing vrsim models (initialisation, generation, tokenizer,
-- numerics that do not change a tensor's size or count), and the keys H.resolve reads for every
-- family (use_cache).
H.NEUTRAL = {
  architectures = 1, model_type = 1, _name_or_path = 1, name_or_path = 1, torch_dtype = 1, dtype = 1,
  transformers_version = 1, bos_token_id = 1, eos_token_id = 1, pad_token_id = 1,
  initializer_range = 1, rms_norm_eps = 1, rope_theta = 1, rope_scaling = 1, rope_parameters = 1,
  max_position_embeddings = 1, use_cache = 1, pretraining_tp = 1, hidden_act = 1,
  attention_dropout = 0, mlp_bias = 1, attention_bias = 1, tie_word_embeddings = 1,
  vocab_size = 1, hidden_size = 1, intermediate_size = 1, num_attention_heads = 1,
  num_key_value_heads = 1, num_hidden_layers = 1, head_dim = 1, sliding_window = 1,
  use_sliding_window = 1, max_window_layers = 1, layer_types = 1, bos_token = 1, eos_token = 1,
  quantization_config = 0, id2label = 1, label2id = 1, task_specific_params = 1,
  tokenizer_class = 1, output_attentions = 1, output_hidden_states = 1, return_dict = 1,
}

-- Checks every key of hf: one this family reads or one that changes nothing modelled passes; a
-- value marked 0 above that is set (dropout, a quantization_config) is an error; any other key
-- is returned by name, for the run's warnings.
function H.check_keys(hf, where, extra)
  local unknown = {}
  for k, v in pairs(hf) do
    -- a family that reads a key itself (GPT-OSS's quantization_config) lists it in extra
    local known = (extra and extra[k]) or H.NEUTRAL[k]
    if known == nil then
      unknown[#unknown + 1] = tostring(k)
    elseif known == 0 and v ~= nil and v ~= 0 and v ~= false and type(v) ~= "userdata" then
      error(("%s: %s = %s is not modelled"):format(where, k, type(v) == "table" and "{...}" or tostring(v)), 0)
    end
  end
  table.sort(unknown)
  return unknown
end

return H
