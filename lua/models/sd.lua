-- sd.lua: Stable Diffusion 1.x and 2.x: a UNet2DConditionModel read from its diffusers
-- unet/config.json (model.config), one CLIP text encoder, the SD VAE, trained as diffusers'
-- examples/text_to_image/train_text_to_image.py (full) and train_text_to_image_lora.py (LoRA)
-- train them; the step itself is blocks/unet_step.lua's, shared with SDXL.
--
-- The config decides the UNet: SD 1.x (cross_attention_dim 768, attention_head_dim 8, which
-- diffusers reads as 8 heads in every block, 1x1 convolutions as the transformers' proj_in and
-- proj_out) and SD 2.x (cross_attention_dim 1024, attention_head_dim [5, 10, 20, 20] heads,
-- linear projections, upcast_attention in 2.x-v) are two configs of one model. The text encoder
-- follows cross_attention_dim, as the published pipelines pair them: 768, CLIP ViT-L/14
-- (openai/clip-vit-large-patch14, SD 1.x's text_encoder); 1024, OpenCLIP ViT-H/14's text tower
-- as SD 2.x ships it (23 layers). Both scripts encode with text_encoder(input_ids)[0], the last
-- hidden state.
--
-- What the scripts do that differs from SDXL's: the VAE and the text encoder are moved to
-- weight_dtype (bf16 / fp16 under mixed precision, fp32 otherwise: training.vae = "weight", the
-- default here); LoRA trains rank 4 (--rank) on to_k, to_q, to_v, to_out.0 of a UNet moved to
-- weight_dtype, as SDXL's LoRA script does.
local unet_step = require "models.blocks.unet_step"
local clip = require "models.blocks.clip"
local sdxl = require "models.sdxl"

local M = {}

M.schema = {
  training = {
    text_encoders = { "string", "frozen", "frozen (no_grad forward), cached (not loaded), trained" },
    vae = { "string", "weight", "VAE encode dtype: weight (train_text_to_image.py's weight_dtype: bf16 or fp16 under mixed precision, else fp32), fp32, bf16, fp16, or cached (not loaded)" },
    ema = { "boolean", false, "keep an EMA copy of the trained UNet (fp32 under amp, else param dtype)" },
    width = { "integer", nil, "image width in pixels for a non-square aspect bucket (resolution is then the height)" },
  },
}

M.choices = {
  text_encoders = { frozen = 1, cached = 1, trained = 1 },
  vae = { weight = 1, fp32 = 1, bf16 = 1, fp16 = 1, cached = 1 },
}

-- The text encoder each published cross_attention_dim goes with.
M.TEXT_ENCODERS = {
  [768] = { key = "vit-l-14", what = "CLIP ViT-L/14 (SD 1.x)" },
  [1024] = { key = "vit-h-14-sd2", what = "OpenCLIP ViT-H/14, 23 layers (SD 2.x)" },
}

-- Keys of the config the tree is built from (blocks/unet.lua), with diffusers' defaults
-- (UNet2DConditionModel.__init__) for a key left out.
local READ = {
  in_channels = 4, out_channels = 4, block_out_channels = { 320, 640, 1280, 1280 },
  down_block_types = { "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D" },
  mid_block_type = "UNetMidBlock2DCrossAttn",
  up_block_types = { "UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D" },
  layers_per_block = 2, transformer_layers_per_block = 1, attention_head_dim = 8,
  num_attention_heads = false, cross_attention_dim = 1280, norm_num_groups = 32,
  use_linear_projection = false, upcast_attention = false,
}
-- keys that must be null or false here, beyond SDXL's ASSUMED list: the added embedding is SDXL's
local NULL_HERE = { addition_embed_type = false, addition_time_embed_dim = false,
                    projection_class_embeddings_input_dim = false }

local function is_int(v) return math.type(v) == "integer" or (type(v) == "number" and v == math.floor(v) and v > 0) end

-- Reads model.config (a path or a table): the UNet config blocks/unet.lua builds, checked key by
-- key; anything that would change a tensor and is not modelled is an error naming it.
function M.read_config(src)
  if src == nil then
    error("sd: arch sd needs model.config, a diffusers unet/config.json (scenarios/configs/"
          .. "sd15-unet.json, sd21-unet.json)", 0)
  end
  local c, where = require("models.hf").read(src)
  where = type(src) == "string" and src or "model.config"
  local head = where .. ": arch sd reads a Stable Diffusion 1.x / 2.x UNet2DConditionModel config"
  if c._class_name ~= sdxl.CONFIG_CLASS then
    local nm = require("vrsim.unmodelled").what(tostring(c._class_name))
    local what = c._class_name == "FluxTransformer2DModel"
                   and "a diffusers FluxTransformer2DModel config (Flux.1's transformer: arch flux reads it)"
                 or c._class_name == "SD3Transformer2DModel"
                   and "a diffusers SD3Transformer2DModel config (Stable Diffusion 3's transformer: arch sd3 reads it)"
                 or nm and ("a diffusers %s config, and vrsim does not model %s (%s)"):format(
                   tostring(c._class_name), nm, require("vrsim.unmodelled").WHERE)
                 or c._class_name and ("a diffusers %s config"):format(tostring(c._class_name))
                 or (c.architectures or c.model_type) and ("a transformers %s config"):format(
                   tostring(type(c.architectures) == "table" and c.architectures[1] or c.model_type))
                 or "not a diffusers UNet config (no _class_name)"
    error(("%s; this is %s"):format(head, what), 0)
  end
  if c.addition_embed_type == "text_time" then
    error(("%s; addition_embed_type \"text_time\" is SDXL's UNet (arch sdxl)"):format(head), 0)
  end
  local bad = {}
  local function check(k, want)
    local v = c[k]
    if v ~= nil and not sdxl.same(want, v) then
      bad[#bad + 1] = ("%s = %s (modelled: %s)"):format(k, sdxl.shown(v), sdxl.shown(want))
    end
  end
  local names = {}
  for k in pairs(sdxl.ASSUMED) do if READ[k] == nil then names[#names + 1] = k end end
  for k in pairs(NULL_HERE) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local want = NULL_HERE[k]
    if want == nil then want = sdxl.ASSUMED[k] end
    check(k, want)
  end
  check("num_attention_heads", false)
  if #bad > 0 then
    error(("%s; this UNet differs from what is modelled: %s"):format(head, table.concat(bad, "; ")), 0)
  end
  local other = {}
  for k in pairs(c) do
    if READ[k] == nil and sdxl.ASSUMED[k] == nil and NULL_HERE[k] == nil and not sdxl.NEUTRAL[k] then
      other[#other + 1] = tostring(k)
    end
  end
  table.sort(other)
  if #other > 0 then
    error(("%s; it has keys vrsim does not read: %s"):format(head, table.concat(other, ", ")), 0)
  end
  local u = {}
  for k, def in pairs(READ) do
    local v = c[k]
    if v == nil then v = def end
    if v ~= false then u[k] = v end
  end
  for _, k in ipairs { "in_channels", "out_channels", "layers_per_block", "cross_attention_dim", "norm_num_groups" } do
    if not is_int(u[k]) then
      error(("%s; %s must be a positive integer (got %s)"):format(head, k, sdxl.shown(u[k])), 0)
    end
  end
  if u.in_channels ~= 4 or u.out_channels ~= 4 then
    error(("%s; in_channels %s / out_channels %s: only the 4-channel latent UNet is modelled (an "
           .. "inpainting or depth UNet takes its extra channels from inputs the text-to-image "
           .. "scripts do not make)"):format(head, sdxl.shown(u.in_channels), sdxl.shown(u.out_channels)), 0)
  end
  if not M.TEXT_ENCODERS[math.tointeger(u.cross_attention_dim)] then
    error(("%s; cross_attention_dim = %s: no Stable Diffusion text encoder of that width is modelled "
           .. "(768: CLIP ViT-L/14, SD 1.x; 1024: OpenCLIP ViT-H/14, SD 2.x)"):format(head,
           sdxl.shown(u.cross_attention_dim)), 0)
  end
  for _, k in ipairs { "block_out_channels", "down_block_types", "up_block_types" } do
    if type(u[k]) ~= "table" or #u[k] == 0 then
      error(("%s; %s must be a list"):format(head, k), 0)
    end
  end
  u.name = c._name_or_path
  return u
end

local function family(ucfg, te)
  return {
    name = "sd", unet_config = ucfg, unet_alone = false,
    encoders = { { cfg = clip.configs[te.key], prefix = "text_encoder", ids = "input_ids", output = "last" } },
    encode = function(_, outs) return outs[1][1], nil end,
    vae_dtype = function(t, pd, ac)
      if t.vae == "cached" then return nil end
      if t.vae == "weight" then return ac or pd end
      return t.vae
    end,
    lora_targets = sdxl.LORA_TARGETS,
    -- latents = vae.encode(pixel_values.to(weight_dtype)).latent_dist.sample(): the noise and the
    -- noisy latents are made in the VAE's dtype; the frozen text encoder is called in the
    -- training loop outside any autocast region (Accelerate autocasts the forwards of the models
    -- it prepares: the UNet)
    latents_as_encoded = true, encoders_autocast = false,
  }
end

function M.build(cx, cfg)
  local t = cfg.training
  local ucfg = M.read_config(cfg.model.config)
  if ucfg.upcast_attention and t.attention == "eager" then
    error("sd: upcast_attention (SD 2.x-v's UNet) with training.attention = \"eager\" is not "
          .. "modelled: AttnProcessor's fp32 scores; SDPA (AttnProcessor2_0) does not read it", 0)
  end
  local te = M.TEXT_ENCODERS[math.tointeger(ucfg.cross_attention_dim)]
  cx.model_name = ucfg.cross_attention_dim == 768 and "sd1" or "sd2"
  return unet_step.build(cx, cfg, family(ucfg, te))
end

function M.settings(cfg)
  local t = cfg.training
  local lora, px = unet_step.settings_parts(t, sdxl.LORA_TARGETS)
  return ("sd, micro-batch %d x %spx, %s%s, %s %s%s%s, text encoder %s, VAE %s%s"):format(
    t.micro_batch, px, t.precision, lora, t.optimizer, t.optimizer_impl,
    t.checkpointing and ", checkpointing" or "", t.ema and ", EMA" or "", t.text_encoders, t.vae,
    cfg.allocator.conf ~= "" and (", " .. cfg.allocator.conf) or "")
end

return M
