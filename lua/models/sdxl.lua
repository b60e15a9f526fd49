-- sdxl.lua: Stable Diffusion XL base training step, op by op as PyTorch runs it.
--
-- Variants (model.variant):
--   sdxl-base-unet  the UNet alone (UNet2DConditionModel with the SDXL base config), as the
--                   measured runs train it: latents, text embeddings, pooled embeddings and
--                   time ids given; VAE and text encoders not run
--   sdxl-base       the full step of diffusers' / kohya's SDXL scripts: VAE encode of the image
--                   batch under no_grad (or cached latents), the two CLIP text encoders (frozen
--                   under no_grad, trained, or cached), noise, UNet forward and backward, MSE
--
-- Parameters are named as in diffusers' state dicts ("unet.down_blocks.0.resnets.0.conv1.weight",
-- "text_encoder.text_model...", "text_encoder_2...", "vae.encoder..."), so the report groups them
-- by model. The models are built directly in their parameter dtype on the GPU (no cast after).
local nn = require "vrsim.nn"
local U = require "models.blocks.unet"
local clip = require "models.blocks.clip"
local vae = require "models.blocks.vae"
local mod = require "vrsim.module"

local M = {}

M.schema = {
  training = {
    text_encoders = { "string", "frozen", "sdxl-base: frozen (no_grad forward), cached (not loaded), trained" },
    vae = { "string", "fp32", "sdxl-base: VAE encode dtype fp32, bf16, fp16, or cached (not loaded)" },
    ema = { "boolean", false, "keep an EMA copy of the trained UNet (fp32 under amp, else param dtype)" },
    width = { "integer", nil, "image width in pixels for a non-square aspect bucket (resolution is then the height)" },
  },
}

M.choices = {
  variant = { ["sdxl-base-unet"] = 1, ["sdxl-base"] = 1 },
  text_encoders = { frozen = 1, cached = 1, trained = 1 },
  vae = { fp32 = 1, bf16 = 1, fp16 = 1, cached = 1 },
}

-- The SDXL base UNet config (diffusers' stabilityai/stable-diffusion-xl-base-1.0
-- unet/config.json, the keys that shape the tree): SDXL is this configuration of the shared
-- blocks of blocks/unet.lua.
M.unet_config = {
  in_channels = 4, out_channels = 4,
  block_out_channels = { 320, 640, 1280 },
  down_block_types = { "DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D" },
  mid_block_type = "UNetMidBlock2DCrossAttn",
  up_block_types = { "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D" },
  layers_per_block = 2,
  transformer_layers_per_block = { 1, 2, 10 },
  attention_head_dim = { 5, 10, 20 },   -- the head count (dim 64), as diffusers reads it
  cross_attention_dim = 2048,
  norm_num_groups = 32,
  addition_embed_type = "text_time", addition_time_embed_dim = 256,
  projection_class_embeddings_input_dim = 2816,
}

-- model.config for arch sdxl: a diffusers unet/config.json (or its table) is read only to check
-- that it is the UNet vrsim builds, since the step around it (the text encoders' widths, the
-- pooled embedding, the six time ids, the VAE) is SDXL base's: every key that shapes the tree
-- must hold SDXL base's value (a key left out takes diffusers' default, UNet2DConditionModel's
-- __init__), and any other key is one that changes nothing modelled (NEUTRAL) or an error. So
-- SD 1.5's UNet config (cross_attention_dim 768, four blocks) or a Llama config given with
-- arch = "sdxl" is refused, naming what differs, rather than simulated as SDXL.
M.CONFIG_CLASS = "UNet2DConditionModel"
-- keys the tree assumes at SDXL base's value, beyond unet_config's (false: null or false)
local ASSUMED = {
  num_attention_heads = false, only_cross_attention = false, dual_cross_attention = false,
  use_linear_projection = true, class_embed_type = false, num_class_embeds = false,
  encoder_hid_dim = false, encoder_hid_dim_type = false, time_embedding_type = "positional",
  time_embedding_dim = false, time_embedding_act_fn = false, timestep_post_act = false,
  time_cond_proj_dim = false, conv_in_kernel = 3, conv_out_kernel = 3, act_fn = "silu",
  resnet_time_scale_shift = "default", resnet_skip_time_act = false, attention_type = "default",
  class_embeddings_concat = false, mid_block_only_cross_attention = false, cross_attention_norm = false,
  reverse_transformer_layers_per_block = false, dropout = 0, upcast_attention = false,
  downsample_padding = 1,
}
-- diffusers' defaults (UNet2DConditionModel.__init__) where they are not SDXL base's: a key left
-- out of the config has this value
local DIFFUSERS_DEFAULT = {
  block_out_channels = { 320, 640, 1280, 1280 },
  down_block_types = { "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D" },
  up_block_types = { "UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D" },
  transformer_layers_per_block = 1, attention_head_dim = 8, cross_attention_dim = 1280,
  addition_embed_type = false, addition_time_embed_dim = false,
  projection_class_embeddings_input_dim = false, use_linear_projection = false,
}
-- keys that change no tensor vrsim simulates (names, versions, the sampling defaults)
local NEUTRAL = {
  _class_name = 1, _diffusers_version = 1, _name_or_path = 1, sample_size = 1, flip_sin_to_cos = 1,
  freq_shift = 1, center_input_sample = 1, norm_eps = 1, mid_block_scale_factor = 1,
  resnet_out_scale_factor = 1, addition_embed_type_num_heads = 1,
}

local function same(a, b)
  if a == false then return b == nil or b == false end
  if type(a) == "table" and type(b) == "number" then
    for _, x in ipairs(a) do if x ~= b then return false end end
    return true
  end
  if type(a) ~= "table" then return a == b end
  if type(b) ~= "table" or #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  for k in pairs(b) do if math.type(k) ~= "integer" or k < 1 or k > #a then return false end end
  return true
end

local function shown(v)
  if type(v) == "string" and #v > 24 then return '"' .. v:sub(1, 20) .. '..."' end
  if v == nil or v == false then return "null" end
  if type(v) == "table" then
    local r = {}
    if #v > 4 then return ("[%d values]"):format(#v) end
    for i, x in ipairs(v) do r[i] = type(x) == "string" and ('"' .. x .. '"') or shown(x) end
    return "[" .. table.concat(r, ", ") .. "]"
  end
  if type(v) == "string" then return '"' .. v .. '"' end
  return math.tointeger(v) and tostring(math.tointeger(v)) or tostring(v)
end

-- Checks model.config (a path or a table) against the UNet vrsim builds for SDXL; raises the
-- first difference, by key, in a fixed order.
function M.check_config(src)
  local c, where = require("models.hf").read(src)
  where = type(src) == "string" and src or "model.config"
  local head = ("%s: arch sdxl builds SDXL base's UNet (stabilityai/stable-diffusion-xl-base-1.0 "
                .. "unet/config.json) and reads model.config only as that config"):format(where)
  if c._class_name ~= M.CONFIG_CLASS then
    local what = c._class_name and ("a diffusers %s config"):format(tostring(c._class_name))
                 or (c.architectures or c.model_type) and ("a transformers %s config"):format(
                   tostring(type(c.architectures) == "table" and c.architectures[1] or c.model_type))
                 or "not a diffusers UNet config (no _class_name)"
    error(("%s; this is %s"):format(head, what), 0)
  end
  local names = {}
  for k in pairs(M.unet_config) do names[#names + 1] = k end
  for k in pairs(ASSUMED) do if M.unet_config[k] == nil then names[#names + 1] = k end end
  -- (what tells one UNet from another first: the text width, then the blocks)
  local first = { cross_attention_dim = 1, block_out_channels = 2, addition_embed_type = 3, down_block_types = 4 }
  table.sort(names, function(a, b)
    local pa, pb = first[a] or 9, first[b] or 9
    if pa ~= pb then return pa < pb end
    return a < b
  end)
  local diff, diff_names = {}, {}
  local function names_of(_, from) return { table.unpack(diff_names, from) } end
  for _, k in ipairs(names) do
    local want = M.unet_config[k]
    if want == nil then want = ASSUMED[k] end
    local v = c[k]
    local left_out = v == nil
    if left_out and DIFFUSERS_DEFAULT[k] ~= nil then v = DIFFUSERS_DEFAULT[k] end
    if not (left_out and DIFFUSERS_DEFAULT[k] == nil) and not same(want, v) then
      diff[#diff + 1] = ("%s = %s%s (SDXL base: %s)"):format(k, shown(v), left_out and ", left out" or "", shown(want))
      diff_names[#diff] = k
    end
  end
  if #diff > 0 then
    -- (the first three in full; the message stays one readable line)
    local more = #diff > 3 and ("; and %d more: %s"):format(#diff - 3, table.concat(names_of(diff, 4), ", ")) or ""
    error(("%s; this UNet differs, and is not modelled: %s%s"):format(head,
          table.concat(diff, "; ", 1, math.min(3, #diff)), more), 0)
  end
  local other = {}
  for k in pairs(c) do
    if M.unet_config[k] == nil and ASSUMED[k] == nil and not NEUTRAL[k] then other[#other + 1] = tostring(k) end
  end
  table.sort(other)
  if #other > 0 then
    error(("%s; it has keys vrsim does not read: %s"):format(head, table.concat(other, ", ")), 0)
  end
end

local function precision(t)
  local p = t.precision
  local pd = ({ fp32 = "fp32", amp_bf16 = "fp32", amp_fp16 = "fp32", bf16 = "bf16", fp16 = "fp16",
                lora_bf16 = "bf16", lora_fp16 = "fp16" })[p]
  if not pd then error("sdxl: unknown precision '" .. tostring(p) .. "'", 0) end
  local ac = (p == "amp_bf16" and "bf16") or (p == "amp_fp16" and "fp16") or nil
  return pd, ac
end

-- peft's targets in diffusers' SDXL LoRA scripts (train_text_to_image_lora_sdxl.py).
M.LORA_TARGETS = { "to_q", "to_k", "to_v", "to_out.0" }

-- The UNet's module tree (blocks/unet.lua) from a diffusers UNet config.
function M.unet(cfg)
  return U.UNet2DConditionModel(cfg or M.unet_config, "unet")
end

local function vae_dtype(t, pd)
  if t.vae == "cached" then return nil end
  if t.vae == "fp32" then return "fp32" end
  return t.vae or pd
end

-- What this model cannot do, as a clear error (exit 2) rather than a silently wrong answer.
local function check_supported(cfg, full)
  local t = cfg.training
  if t.device_map ~= "none" then
    error("sdxl: training.device_map = \"" .. t.device_map .. "\" (Accelerate's placement of a "
          .. "transformers model's layers across devices) is not modelled for SDXL's UNet", 0)
  end
  if t.quant ~= "none" then
    error("sdxl: training.quant = \"" .. t.quant .. "\" (bitsandbytes base weights) is not modelled "
          .. "for SDXL: vrsim quantizes the decoder families' Linear layers only", 0)
  end
  if t.checkpoint_every ~= 1 or t.checkpoint_scope ~= "layer" then
    error("sdxl: training.checkpoint_every / checkpoint_scope are transformers' per-layer options; "
          .. "diffusers' enable_gradient_checkpointing checkpoints every ResNet and transformer "
          .. "block (set checkpointing = true alone)", 0)
  end
  local sharded = t.strategy == "zero3" or t.strategy == "fsdp2"
  if sharded and full and t.text_encoders == "trained" then
    error("sdxl: strategy " .. t.strategy .. " with text_encoders = \"trained\" is not modelled: "
          .. "only the UNet is sharded (diffusers' scripts keep the text encoders out of "
          .. "zero.Init and accelerator.prepare)", 0)
  end
  if sharded and t.ema then
    error("sdxl: an EMA copy of a " .. t.strategy .. "-sharded UNet is not modelled", 0)
  end
  local refused = require("strategies.techniques").check_other(t, "sdxl", cfg.notes)
  if refused then error(refused, 0) end
end

-- Makes the parameters of a tree in construction order: depth first, children in the order
-- the constructor made them (a module's init_order, where set, names its descendants in that
-- order: a constructor that appends to two lists in one loop). Each parameter is tagged with
-- its block (the unit a sharding strategy gathers, the layer reports group by).
local function materialize(cx, root, dtype, trainable)
  local function walk(m, layer)
    if m.layer and m.layer >= 0 then layer = m.layer end
    m.layer_of = layer
    cx.layer = layer
    for _, d in ipairs(m.decls) do
      m.p[d.key] = nn.param(cx, m.path .. "." .. d.key, d.shape, d.dtype or dtype, trainable)
    end
    for _, k in ipairs(m.init_order or m.order) do walk(mod.get(m, k), layer) end
  end
  walk(root, -1)
  cx.layer = -1
end

local register = mod.register

function M.build(cx, cfg)
  local t = cfg.training
  local variant = cfg.model.variant or "sdxl-base-unet"
  if not M.choices.variant[variant] then
    error(("sdxl: unknown variant '%s' (sdxl-base-unet or sdxl-base)"):format(variant), 0)
  end
  local full = variant == "sdxl-base"
  check_supported(cfg, full)
  if cfg.model.config ~= nil then M.check_config(cfg.model.config) end
  cx.model_name = variant
  local pd, ac = precision(t)
  cx.autocast = ac
  cx.gpu = require("hw.gpus")[cfg.hardware.gpu]
  cx.attention = t.attention
  -- kernel launches per op as torch.profiler measured them for this UNet (nn.KERNELS)
  cx.measured_launches = true
  cx.arch = cx.arch or (cx.gpu and cx.gpu.arch)
  local n = t.micro_batch
  local width = t.width or t.resolution
  if t.resolution % 64 ~= 0 or width % 64 ~= 0 then
    error(("sdxl: training.resolution and training.width must be multiples of 64 (got %d x %d)")
          :format(t.resolution, width), 0)
  end
  local lat, latw = t.resolution // 8, width // 8

  local unet = M.unet()
  -- peft's unet.add_adapter(LoraConfig(...)): the targeted Linears wrapped (lora.lua)
  local lora, lora_hit
  if require("strategies.lora").wanted(t) then
    local L = require "strategies.lora"
    -- adapters in the UNet's dtype: add_adapter (peft's inject_adapter_in_model) makes them
    -- on the base layer's device and dtype (BaseTunerLayer._move_adapter_to_device_of_base_layer;
    -- no PeftModel, so no autocast_adapter_dtype upcast), and diffusers'
    -- train_text_to_image_lora_sdxl.py casts them to fp32 (cast_training_params) only for fp16
    -- (pub-s01's build: 11,612,160 adapter parameters, 22.15 MiB: two bytes each)
    lora = L.settings(t.lora, { r = 4, dropout = 0.0, targets = M.LORA_TARGETS,
                                dtype = pd == "fp16" and "fp32" or pd })
    lora_hit = L.apply(unet, lora, nil)
  end

  -- build: the models directly in their dtype on the GPU, parameters in construction order
  cx.phase = "build"
  local te_mode = t.text_encoders
  local vdt = full and vae_dtype(t, pd) or nil
  local TE1, TE2, V
  -- the text encoders and the VAE are not sharded (diffusers' scripts load them outside
  -- zero.Init and do not prepare them: only the UNet is wrapped)
  local shard_param = cx.shard_param
  cx.shard_param = nil
  if full and te_mode ~= "cached" then
    -- frozen text encoders are moved to the compute dtype (diffusers' weight_dtype: bf16/fp16
    -- under mixed precision); trained ones keep the parameter dtype
    local tr = te_mode == "trained"
    local tdt = tr and pd or (ac or pd)
    TE1 = clip.CLIPTextModel(clip.configs["vit-l-14"], "text_encoder")
    TE2 = clip.CLIPTextModel(clip.configs["vit-bigg-14"], "text_encoder_2")
    materialize(cx, TE1, tdt, tr)
    materialize(cx, TE2, tdt, tr)
  end
  if vdt then
    V = vae.AutoencoderKL(vae.config, "vae")
    materialize(cx, V, vdt, false)
  end
  cx.shard_param = shard_param
  materialize(cx, unet, pd, not lora)
  -- the adapters after the base model
  if lora then require("strategies.lora").materialize(cx, lora_hit, "") end
  if t.ema then
    -- EMAModel(unet.parameters()): a copy of every trained parameter, kept in fp32 under amp
    for _, p in ipairs(cx.params) do
      if p.trainable then
        cx.G:tensor { name = "ema." .. p.name, bytes = nn.bytes(p.shape, p.dtype),
                      numel = 0, dtype = p.dtype, cat = "optstate", persistent = true }
      end
    end
  end
  -- a sharding strategy (FSDP2 fully_shard, ZeRO-3) now replaces the whole parameters by shards
  if cx.dp then require("strategies.dp").after_build(cx) end

  -- the step's inputs, made once after the model (as the measured runs do)
  local act = pd
  local inp = {}
  if full then
    if vdt then
      inp.pixels = nn.input(cx, "pixel_values", { n, 3, t.resolution, width }, vdt)
    else
      inp.latents = nn.input(cx, "latents", { n, 4, lat, latw }, act)
    end
    if te_mode == "cached" then
      inp.context = nn.input(cx, "prompt_embeds", { n, 77, M.unet_config.cross_attention_dim }, act)
      inp.text_embeds = nn.input(cx, "pooled_prompt_embeds", { n, 1280 }, act)
    else
      inp.ids1 = nn.input(cx, "input_ids", { n, 77 }, "int64")
      inp.ids2 = nn.input(cx, "input_ids_2", { n, 77 }, "int64")
    end
    inp.time_ids = nn.input(cx, "add_time_ids", { n, 6 }, act)
  else
    inp.sample = nn.input(cx, "latents", { n, 4, lat, latw }, act)
    inp.target = nn.input(cx, "noise", { n, 4, lat, latw }, act)
    inp.context = nn.input(cx, "encoder_hidden_states", { n, 77, M.unet_config.cross_attention_dim }, act)
    inp.text_embeds = nn.input(cx, "text_embeds", { n, 1280 }, act)
    inp.time_ids = nn.input(cx, "time_ids", { n, 6 }, act)
  end
  inp.timesteps = nn.input(cx, "timesteps", { n }, "int64")
  cx.phase = "fwd"

  -- the passes' hooks on the UNet, outermost first: checkpoint regions, then sharding
  if t.checkpointing and not t.inference then
    register(require("strategies.checkpoint").module_hooks(unet, unet.checkpoint_classes), "first")
  end
  if cx.dp and cx.shard_params then
    register(require("strategies.shard").hooks(cx, unet, cx.dp.kind))
  end

  if full then
    -- latents = vae.encode(pixels).latent_dist.sample() * scaling_factor (no_grad)
    if vdt then
      cx.no_grad = true
      local saved_ac = cx.autocast
      cx.autocast = nil
      local l = mod.call(cx, V, inp.pixels)
      cx.autocast = saved_ac
      l = nn.to(cx, l, act, "latents.to_unet_dtype")
      cx.no_grad = false
      inp.latents = l
    end
    -- text encoders: hidden states of the penultimate layer of both, concatenated; pooled
    -- (projected) output of the second
    if te_mode ~= "cached" then
      local frozen = te_mode == "frozen"
      cx.no_grad = frozen
      local h1 = mod.call(cx, TE1, inp.ids1)
      local h2, pooled = mod.call(cx, TE2, inp.ids2)
      inp.context = nn.cat(cx, "prompt_embeds", { h1, h2 }, 3)
      inp.text_embeds = pooled
      cx.no_grad = false
    end
    -- noise = randn_like(latents); timesteps; noisy = scheduler.add_noise(latents, noise, t)
    inp.target = nn.op_sized(cx, { name = "noise", inputs = {}, outs = { { "noise", inp.latents.shape, act } } })
    inp.sample = nn.op_sized(cx, { name = "add_noise", inputs = { inp.latents, inp.target },
                             outs = { { "noisy_latents", inp.latents.shape, act } },
                             frees = { inp.latents } })
  end

  -- cuBLASLt workspaces of the forward thread's handle (first addmm) and of the autograd
  -- thread's (its first GEMM comes in backward; kept from the end of forward here)
  cx.lt_workspace_pending = nn.lt_workspace(cx, "cublasLt workspace (forward)")
  cx.late_outputs = { nn.lt_workspace(cx, "cublasLt workspace (backward)") }
  local pred = mod.call(cx, unet, inp.sample, inp.timesteps, inp.context,
                        { text_embeds = inp.text_embeds, time_ids = inp.time_ids })
  local loss = nn.mse_loss(cx, "mse_loss", pred, inp.target)
  nn.end_forward(cx)
  cx.tokens = 0
  return loss, unet
end

function M.settings(cfg)
  local t = cfg.training
  local v = cfg.model.variant or "sdxl-base-unet"
  local extra = ""
  if v == "sdxl-base" then
    extra = (", text encoders %s, VAE %s"):format(t.text_encoders, t.vae)
  end
  local lora = ""
  if require("strategies.lora").wanted(t) then
    local lc = t.lora or {}
    lora = (", LoRA r=%d on %s"):format(lc.r or 4, table.concat(lc.targets or { "to_q", "to_k", "to_v", "to_out.0" }, "/"))
  end
  local px = t.width and ("%dx%d"):format(t.width, t.resolution) or tostring(t.resolution)
  return ("%s, micro-batch %d x %spx, %s%s, %s %s%s%s%s%s"):format(v, t.micro_batch, px,
    t.precision, lora, t.optimizer, t.optimizer_impl, t.checkpointing and ", checkpointing" or "",
    t.ema and ", EMA" or "", extra,
    cfg.allocator.conf ~= "" and (", " .. cfg.allocator.conf) or "")
end

return M
