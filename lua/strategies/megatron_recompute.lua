-- megatron_recompute.lua: Megatron-LM's activation recompute under training.parallel.tp_impl =
-- "megatron" (megatron-core 0.16.1, the local layer spec, sequence parallel), the fields
-- training.parallel.megatron_recompute_* named after TransformerConfig's recompute_granularity,
-- recompute_method, recompute_num_layers and recompute_modules (--recompute-granularity, ...).
--
-- Both granularities checkpoint through tensor_parallel.checkpoint (tensor_parallel/random.py
-- CheckpointFunction), a reentrant checkpoint: forward runs the function under torch.no_grad()
-- (nothing inside is saved; its tensors go as the function drops them) and keeps its arguments
-- (ctx.save_for_backward(*args)); backward runs the whole function again under enable_grad and
-- then torch.autograd.backward through it, inside the node. So a region here is recomputed to its
-- end (the early stop of torch.utils.checkpoint's non-reentrant form is not Megatron's), and its
-- arguments are held until its backward is done (nn.checkpoint_args, full).
--
-- * selective "core_attn" (transformer/attention.py _checkpointed_attention_forward, when it is in
--   recompute_modules and the model is training): the core attention (DotProductAttention:
--   repeat_interleave, baddbmm into the scores, the fp32 softmax, bmm) is one checkpoint of every
--   layer, whose arguments are query, key and value after RoPE, the attention mask (None: causal)
--   and the mask type (a host tensor). value is a view of linear_qkv's output (the split), so
--   keeping it keeps that whole output.
-- * selective "mlp" (transformer/transformer_layer.py, recompute_mlp): the dense MLP of every
--   layer one checkpoint, whose argument is pre_mlp_layernorm's output.
-- * full (transformer/transformer_block.py _checkpointed_forward, recompute_granularity "full"
--   and training): recompute_method "uniform" cuts the layers into chunks of
--   recompute_num_layers, each chunk one checkpoint; "block" checkpoints each of the first
--   recompute_num_layers layers alone and runs the rest as they are. A chunk's arguments are the
--   hidden states it starts from (and the rotary table, which the RotaryEmbedding cache keeps
--   anyway; the masks and context are None).
-- distribute_saved_activations (a chunk's saved input split over the tp group) is refused by
-- megatron-core under sequence parallelism (transformer_config.py __post_init__), which this
-- mode always runs: it has no field here.
local nn = require "vrsim.nn"

local M = {}

local PREFIX = "training.parallel."

-- training.parallel's recompute keys: { type, default, help } as mesh.lua's FIELDS write them.
M.FIELDS = {
  megatron_recompute_granularity = { "string", "none", "with tp_impl = \"megatron\": Megatron's --recompute-granularity (TransformerConfig.recompute_granularity): none (every activation kept), selective (the submodules of megatron_recompute_modules recomputed in every layer, each through tensor_parallel.checkpoint: the core attention's scores and softmax not kept, its query, key and value kept; the MLP's intermediates not kept, its input kept) or full (whole layers recomputed, as megatron_recompute_method and megatron_recompute_num_layers choose: a checkpointed chunk of layers keeps only its input hidden states) (lua/strategies/megatron_recompute.lua)" },
  megatron_recompute_method = { "string", nil, "with megatron_recompute_granularity = \"full\" (--recompute-method, required there): uniform (the layers cut into chunks of megatron_recompute_num_layers, each one checkpoint) or block (each of the first megatron_recompute_num_layers layers one checkpoint, the others run whole)" },
  megatron_recompute_num_layers = { "integer", nil, "with megatron_recompute_granularity = \"full\" (--recompute-num-layers, required there): the layers of each chunk (uniform, a divisor of the layers) or the layers checkpointed (block), from 1 to the layers" },
  megatron_recompute_modules = { "list", nil, "with megatron_recompute_granularity = \"selective\" (--recompute-modules; default core_attn): the submodules recomputed, a list or (through --set) a comma-separated string; modelled: core_attn and mlp (the dense MLP one checkpoint, keeping pre_mlp_layernorm's output); the others Megatron takes, layernorm, moe_act, mla_up_proj, moe, shared_experts, are refused by name" },
}
M.CHOICES = { megatron_recompute_granularity = { "none", "selective", "full" },
              megatron_recompute_method = { "uniform", "block" } }

-- Megatron's recompute_modules (transformer_config.py __post_init__'s allowed_modules).
local ALLOWED = { core_attn = true, moe_act = true, layernorm = true, mla_up_proj = true, mlp = true,
                  moe = true, shared_experts = true }
local ALLOWED_LIST = "core_attn, layernorm, mla_up_proj, mlp, moe, moe_act, shared_experts"

-- training.parallel.k = v checked, for the keys of M.FIELDS: the value, or nil and the message.
function M.check_key(k, v)
  local where = PREFIX .. k
  local ch = M.CHOICES[k]
  if ch then
    for _, c in ipairs(ch) do if c == v then return v end end
    return nil, ("%s: '%s' is not one of: %s"):format(where, tostring(v), table.concat(ch, ", "))
  end
  if k == "megatron_recompute_num_layers" then
    local i = math.type(v) == "integer" and v or (type(v) == "number" and math.tointeger(v))
    if not i or i < 1 then return nil, ("%s must be an integer >= 1, not %s"):format(where, tostring(v)) end
    return i
  end
  -- megatron_recompute_modules: a list of names, or "a,b" from --set
  local list = {}
  if type(v) == "string" then
    for name in v:gmatch("[^,%s]+") do list[#list + 1] = name end
  elseif type(v) == "table" then
    for i, name in ipairs(v) do
      if type(name) ~= "string" then return nil, ("%s[%d] must be a module name (a string)"):format(where, i) end
      list[i] = name
    end
  else
    return nil, where .. " must be a list of module names"
  end
  for _, name in ipairs(list) do
    if not ALLOWED[name] then
      return nil, ("%s: '%s' is not a module Megatron recomputes (its allowed modules: %s)"):format(where, name, ALLOWED_LIST)
    end
  end
  return list
end

-- The recompute of the mesh from the keys given (rc: key -> checked value), as megatron-core's
-- TransformerConfig.__post_init__ checks them, with tp_impl; refuses (error) what Megatron refuses
-- and what would have no effect on the run. Returns nil (no recompute) or
-- { granularity, method, num_layers, modules }.
function M.resolve(rc, tp_impl)
  if next(rc) == nil then return nil end
  if tp_impl ~= "megatron" then
    local k = next(rc)
    error(("%s%s is Megatron's activation recompute: it needs training.parallel.tp_impl = \"megatron\" "
           .. "(with DTensor's tensor parallelism set training.checkpointing)"):format(PREFIX, k), 0)
  end
  local g = rc.megatron_recompute_granularity or "none"
  local function inert(k, why)
    if rc[k] ~= nil then error(("%s%s has no effect on this run: %s"):format(PREFIX, k, why), 0) end
  end
  if g == "none" then
    for _, k in ipairs { "megatron_recompute_method", "megatron_recompute_num_layers", "megatron_recompute_modules" } do
      inert(k, "megatron_recompute_granularity is \"none\" (no recompute)")
    end
    return nil
  end
  if g == "full" then
    -- (transformer_config.py: 'Using recompute_granularity: full so recompute_method must be
    -- "block" or "uniform"', and recompute_num_layers must be given)
    for _, k in ipairs { "megatron_recompute_method", "megatron_recompute_num_layers" } do
      if rc[k] == nil then
        error(("%s%s is required with megatron_recompute_granularity = \"full\" (megatron-core's "
               .. "TransformerConfig refuses full recompute without recompute_method and recompute_num_layers)")
              :format(PREFIX, k), 0)
      end
    end
    inert("megatron_recompute_modules", "full recompute checkpoints whole layers; recompute_modules is read "
          .. "with megatron_recompute_granularity = \"selective\" only")
    return { granularity = g, method = rc.megatron_recompute_method, num_layers = rc.megatron_recompute_num_layers }
  end
  -- selective: recompute_num_layers must be None (transformer_config.py); the method is not read
  if rc.megatron_recompute_num_layers ~= nil then
    error(("%smegatron_recompute_num_layers with megatron_recompute_granularity = \"selective\": megatron-core's "
           .. "TransformerConfig refuses it (recompute_num_layers must be None; selective recomputes in every layer)")
          :format(PREFIX), 0)
  end
  inert("megatron_recompute_method", "selective recompute runs in every layer; recompute_method is read with "
        .. "megatron_recompute_granularity = \"full\" only")
  local modules = rc.megatron_recompute_modules or { "core_attn" }
  if #modules == 0 then
    error(PREFIX .. "megatron_recompute_modules is empty: selective recompute of no module recomputes nothing "
          .. "(set megatron_recompute_granularity = \"none\")", 0)
  end
  for _, name in ipairs(modules) do
    if name ~= "core_attn" and name ~= "mlp" then
      error(("%smegatron_recompute_modules: '%s' is not modelled (selective recompute is modelled for core_attn "
             .. "and mlp; %s)"):format(PREFIX, name,
             name == "layernorm" and "the norms' CheckpointWithoutOutput, which discards its output and recomputes it "
               .. "when the next module unpacks it, is not built"
             or "it recomputes a part of MoE or multi-latent-attention layers, which tp_impl = \"megatron\" does not model"), 0)
    end
  end
  local set = {}
  for _, name in ipairs(modules) do set[name] = true end
  return { granularity = g, modules = modules, core_attn = set.core_attn, mlp = set.mlp }
end

-- Why this model's layers cannot take the recompute (the message), or nil: the layer counts
-- megatron-core's _checkpointed_forward can run. layers: the decoder layers of a rank, which
-- _checkpointed_forward walks (num_layers_per_pipeline_rank: all of them without a pipeline, a
-- stage's with one); pp: the pipeline's stages (nil or 1: none).
function M.refusal(rc, layers, pp)
  if not rc or rc.granularity ~= "full" then return nil end
  local n = rc.num_layers
  local whose = (pp or 1) > 1 and ("the %d layers of a pipeline stage"):format(layers)
    or ("the %d layers of the model"):format(layers)
  if n > layers then
    return ("%smegatron_recompute_num_layers = %d: must be between 1 and %s "
            .. "(num_layers_per_pipeline_rank)"):format(PREFIX, n, whose)
  end
  if rc.method == "uniform" and layers % n ~= 0 then
    -- (custom(layer_idx, layer_idx + n) runs past the last layer: _get_layer raises IndexError)
    return ("%smegatron_recompute_num_layers = %d with method \"uniform\" does not divide %s: "
            .. "the last chunk of _checkpointed_forward runs past the last layer"):format(PREFIX, n, whose)
  end
  return nil
end

-- The header's words for the recompute ("" when none).
function M.describe(rc)
  if not rc then return "" end
  if rc.granularity == "selective" then
    return ", recompute selective " .. table.concat(rc.modules, ",")
  end
  return (", recompute full %s %d"):format(rc.method, rc.num_layers)
end

-- The chunk layer l (0-based) of `layers` starts under full recompute: its region number (> 0),
-- or nil where layer l starts no checkpoint (within a chunk, or past block's checkpointed ones).
function M.chunk_start(rc, l)
  if not rc or rc.granularity ~= "full" then return nil end
  if rc.method == "uniform" then
    return l % rc.num_layers == 0 and l // rc.num_layers + 1 or nil
  end
  return l < rc.num_layers and l + 1 or nil
end

-- Whether layer l ends its chunk (the region closes after it).
function M.chunk_end(rc, l)
  if not rc or rc.granularity ~= "full" then return false end
  if rc.method == "uniform" then return (l + 1) % rc.num_layers == 0 end
  return l < rc.num_layers
end

-- The run's note of its recompute, once: what the timeline takes from torch's checkpoint.
local function note(cx, rc)
  if not rc or cx.mg_recompute_noted then return end
  cx.mg_recompute_noted = true
  cx.notes = cx.notes or {}
  cx.notes[#cx.notes + 1] = ("Megatron's activation recompute (%s): each tensor_parallel.checkpoint is a region "
    .. "recomputed whole in backward; the host's cost of entering a region and of each op in it is the one measured "
    .. "for torch.utils.checkpoint (non-reentrant, with its saved-tensor hooks), not for Megatron's reentrant "
    .. "CheckpointFunction (not measured)"):format(M.describe(rc):sub(3))
end

-- TransformerBlock.forward's layers under full recompute: tensor_parallel.checkpoint of each chunk
-- (a region, its input hidden states held; recomputed whole). run(l, x) runs layer l on x and
-- returns its output. Without full recompute, the layers one after another.
function M.layers(cx, rc, n, x, run)
  if not cx.no_grad then note(cx, rc) end
  for l = 0, n - 1 do
    local r = not cx.no_grad and M.chunk_start(rc, l)
    if r then
      cx.region = r
      nn.checkpoint_args(cx, { x }, true)
    end
    x = run(l, x)
    if cx.region and M.chunk_end(rc, l) then cx.region = nil end
  end
  return x
end

-- Attention's core attention under selective "core_attn" recompute (_checkpointed_attention_forward):
-- one region per layer (its number layer + 1), query, key and value held as the checkpoint's
-- arguments, recomputed whole. call(q) runs the core attention on query q (key and value as they
-- are) and returns its output.
--
-- The recomputation runs on detach_variable's leaves, and torch.autograd.backward(outputs, args)
-- accumulates each argument's gradient into its .grad (AccumulateGrad), which steals the
-- incoming gradient where it obeys the leaf's layout and copies it otherwise
-- (torch/csrc/autograd/functions/accumulate_grad.h, utils::clone_obey_contract). The query's
-- gradient is baddbmm's [b * heads, s, hd] transposed back to [s, b, heads, hd]: strided unlike
-- the contiguous query, so it is copied (a new tensor of the query's size, the incoming one
-- freed); the key's and value's are repeat_interleave's sums, contiguous, and are stolen. Here
-- the copy is the backward of a view of the query the region reads.
function M.core_attention(cx, rc, layer, q, k, v, call)
  if not rc or not rc.core_attn or cx.no_grad then return call(q) end
  local qd = q
  if q.rg then
    qd = nn.view(cx, q, q.shape, q.name .. " (detach_variable)")
    qd.rg = true
    local nb = nn.bytes(q.shape, q.dtype)
    nn.op(cx, { name = q.name .. ": CheckpointFunction's leaf, its .grad copied (clone_obey_contract)", kind = "none",
                inputs = { q }, out_tensors = { qd }, grads = { { bytes = nb, dtype = q.dtype } },
                bwd_kind = "copy", bytes = 0, bwd_bytes = 2 * nb, frees = {} })
  end
  cx.region = 2 * layer + 1
  nn.checkpoint_args(cx, { q, k, v }, true)
  local out = call(qd)
  cx.region = nil
  return out
end

-- TransformerLayer's MLP under selective "mlp" recompute (transformer_layer.py, recompute_mlp:
-- tensor_parallel.checkpoint(self.mlp, False, pre_mlp_layernorm_output)): one region per layer
-- (its number 2 * layer + 2), the norm's output its argument, held; the whole MLP recomputed
-- (linear_fc1 and its all-gather, the SwiGLU, linear_fc2 and its reduce-scatter). The
-- argument's gradient is the reduce-scatter's new [s/tp, b, h], contiguous like the norm's
-- output: AccumulateGrad steals it (no copy). call() runs the MLP and returns its output.
function M.mlp(cx, rc, layer, x, call)
  if not rc or not rc.mlp or cx.no_grad then return call() end
  cx.region = 2 * layer + 2
  nn.checkpoint_args(cx, { x }, true)
  local out = call()
  cx.region = nil
  return out
end

return M
