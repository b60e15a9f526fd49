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
  use_linear_projection = true,
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
M.ASSUMED = {
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
M.DIFFUSERS_DEFAULT = {
  block_out_channels = { 320, 640, 1280, 1280 },
  down_block_types = { "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D" },
  up_block_types = { "UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D" },
  transformer_layers_per_block = 1, attention_head_dim = 8, cross_attention_dim = 1280,
  addition_embed_type = false, addition_time_embed_dim = false,
  projection_class_embeddings_input_dim = false, use_linear_projection = false,
}
-- keys that change no tensor vrsim simulates (names, versions, the sampling defaults)
M.NEUTRAL = {
  _class_name = 1, _diffusers_version = 1, _name_or_path = 1, sample_size = 1, flip_sin_to_cos = 1,
  freq_shift = 1, center_input_sample = 1, norm_eps = 1, mid_block_scale_factor = 1,
  resnet_out_scale_factor = 1, addition_embed_type_num_heads = 1,
}

function M.same(a, b)
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

function M.shown(v)
  if type(v) == "string" and #v > 24 then return '"' .. v:sub(1, 20) .. '..."' end
  if v == nil or v == false then return "null" end
  if type(v) == "table" then
    local r = {}
    if #v > 4 then return ("[%d values]"):format(#v) end
    for i, x in ipairs(v) do r[i] = type(x) == "string" and ('"' .. x .. '"') or M.shown(x) end
    return "[" .. table.concat(r, ", ") .. "]"
  end
  if type(v) == "string" then return '"' .. v .. '"' end
  return math.tointeger(v) and tostring(math.tointeger(v)) or tostring(v)
end

-- Keys that only size the tree (how many blocks, of which kind, how wide, how deep): a config
-- may set them otherwise, the rest of SDXL's UNet kept, and the tree is built as it says
-- (blocks/unet.lua reads them as diffusers' get_down_block / get_up_block do, and checks that
-- the lists agree). That is a cut SDXL UNet, as the oracle's captures run one
-- (validation/oracle/specs/sdxl_cut_*.json): the same block kinds, fewer or narrower.
M.SIZING = {
  block_out_channels = 1, down_block_types = 1, up_block_types = 1, layers_per_block = 1,
  transformer_layers_per_block = 1, attention_head_dim = 1,
}

-- Checks model.config (a path or a table) against the UNet vrsim builds for SDXL; raises the
-- first difference, by key, in a fixed order. Returns the UNet config to build: SDXL base's,
-- with the config's SIZING keys where it sets them, and whether any of them differs.
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
  for k in pairs(M.ASSUMED) do if M.unet_config[k] == nil then names[#names + 1] = k end end
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
    if want == nil then want = M.ASSUMED[k] end
    local v = c[k]
    local left_out = v == nil
    if left_out and M.DIFFUSERS_DEFAULT[k] ~= nil then v = M.DIFFUSERS_DEFAULT[k] end
    if not (left_out and M.DIFFUSERS_DEFAULT[k] == nil) and not M.same(want, v) and not M.SIZING[k] then
      diff[#diff + 1] = ("%s = %s%s (SDXL base: %s)"):format(k, M.shown(v), left_out and ", left out" or "", M.shown(want))
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
    if M.unet_config[k] == nil and M.ASSUMED[k] == nil and not M.NEUTRAL[k] then other[#other + 1] = tostring(k) end
  end
  table.sort(other)
  if #other > 0 then
    error(("%s; it has keys vrsim does not read: %s"):format(head, table.concat(other, ", ")), 0)
  end
  local u, cut = {}, false
  for k, v in pairs(M.unet_config) do u[k] = v end
  for k in pairs(M.SIZING) do
    local v = c[k]
    if v == nil then v = M.DIFFUSERS_DEFAULT[k] end
    if v ~= nil and not M.same(M.unet_config[k], v) then u[k], cut = v, true end
  end
  return u, cut
end

-- peft's targets in diffusers' SDXL LoRA scripts (train_text_to_image_lora_sdxl.py).
M.LORA_TARGETS = { "to_q", "to_k", "to_v", "to_out.0" }

-- The UNet's module tree (blocks/unet.lua) from a diffusers UNet config.
function M.unet(cfg)
  return U.UNet2DConditionModel(cfg or M.unet_config, "unet")
end

-- SDXL base's step for blocks/unet_step.lua: CLIP ViT-L/14 and OpenCLIP ViT-bigG/14, the
-- hidden states of the penultimate layer of both concatenated (encoder_hidden_states) and the
-- projected pooled output of the second (text_embeds), six time ids; the VAE encode in fp32
-- unless training.vae says otherwise (train_text_to_image_sdxl.py keeps SDXL's VAE in fp32,
-- which overflows in fp16).
local function family(variant, ucfg)
  return {
    name = "sdxl", unet_config = ucfg or M.unet_config, unet_alone = variant == "sdxl-base-unet",
    encoders = { { cfg = clip.configs["vit-l-14"], prefix = "text_encoder", ids = "input_ids" },
                 { cfg = clip.configs["vit-bigg-14"], prefix = "text_encoder_2", ids = "input_ids_2" } },
    encode = function(cx, outs)
      return nn.cat(cx, "prompt_embeds", { outs[1][1], outs[2][1] }, 3), outs[2][2]
    end,
    pooled_dim = 1280, time_ids = 6,
    vae_dtype = function(t, pd)
      if t.vae == "cached" then return nil end
      if t.vae == "fp32" then return "fp32" end
      return t.vae or pd
    end,
    lora_targets = M.LORA_TARGETS,
  }
end

function M.build(cx, cfg)
  local variant = cfg.model.variant or "sdxl-base-unet"
  if not M.choices.variant[variant] then
    error(("sdxl: unknown variant '%s' (sdxl-base-unet or sdxl-base)"):format(variant), 0)
  end
  local ucfg, cut
  if cfg.model.config ~= nil then ucfg, cut = M.check_config(cfg.model.config) end
  cx.model_name = cut and (variant .. " (cut UNet)") or variant
  return require("models.blocks.unet_step").build(cx, cfg, family(variant, ucfg))
end

function M.settings(cfg)
  local t = cfg.training
  local v = cfg.model.variant or "sdxl-base-unet"
  local extra = ""
  if v == "sdxl-base" then
    extra = (", text encoders %s, VAE %s"):format(t.text_encoders, t.vae)
  end
  local lora, px = require("models.blocks.unet_step").settings_parts(t, M.LORA_TARGETS)
  return ("%s, micro-batch %d x %spx, %s%s, %s %s%s%s%s%s"):format(v, t.micro_batch, px,
    t.precision, lora, t.optimizer, t.optimizer_impl, t.checkpointing and ", checkpointing" or "",
    t.ema and ", EMA" or "", extra,
    cfg.allocator.conf ~= "" and (", " .. cfg.allocator.conf) or "")
end

return M
