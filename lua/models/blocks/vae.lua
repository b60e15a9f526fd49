-- blocks/vae.lua: diffusers' AutoencoderKL (models/autoencoders/autoencoder_kl.py, vae.py
-- Encoder/Decoder) as a module tree: encoder, decoder, quant_conv, post_quant_conv, named as in
-- its state dict; the encoder's forward (training scripts encode the image batch under no_grad;
-- the decoder is loaded but not run). Two configs: SD / SDXL's 4-channel VAE (83,653,863
-- parameters) and the 16-channel VAE of Flux.1 and SD 3 / 3.5 (latent_channels 16, no
-- quant_conv / post_quant_conv: 83,819,683 parameters).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local U = require "models.blocks.unet"

local call = mod.call

local V = {}

V.config = { block_out = { 128, 256, 512, 512 }, layers_per_block = 2, latent = 4, in_ch = 3,
             quant_conv = true }
-- black-forest-labs/FLUX.1-dev and stabilityai/stable-diffusion-3.5-* vae/config.json:
-- latent_channels 16, use_quant_conv and use_post_quant_conv false, a shift_factor (the training
-- scripts subtract it before scaling the latents: shift)
V.config16 = { block_out = { 128, 256, 512, 512 }, layers_per_block = 2, latent = 16, in_ch = 3,
               quant_conv = false, shift = true }

-- Attention(c, heads=1, dim_head=c, residual_connection=True, group_norm) of the VAE's mid
-- block: group norm, the (b, hw, c) view, q, k, v (bmm on the non-contiguous view, which they
-- keep), one-head SDPA, to_out[0], the copy back to NCHW, the residual, / rescale.
local function vae_attention_forward(cx, m, x)
  local name, C = m.opname, m.children
  local b, c, h, w = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
  local g = call(cx, C.group_norm, x)
  local gv = nn.view(cx, g, { b, h * w, c }, name .. ".nlc_view")
  local q = call(cx, C.to_q, gv, { keep_input = true, noncontig = true })
  local k = call(cx, C.to_k, gv, { keep_input = true, noncontig = true })
  local v = call(cx, C.to_v, gv, { noncontig = true })
  local qh = nn.view(cx, q, { b, 1, h * w, c })
  local kh = nn.view(cx, k, { b, 1, h * w, c })
  local vh = nn.view(cx, v, { b, 1, h * w, c })
  local ao = nn.sdpa(cx, name, qh, kh, vh)
  local a2 = nn.view(cx, ao, { b, h * w, c })
  local o = call(cx, C.to_out.children["0"], a2)
  -- transpose(-1, -2).reshape(b, c, h, w): a view (the hw dimension splits), left strided as
  -- (b, hw, c); the residual sum and the rescale keep that layout (TensorIterator follows the
  -- first operand), and the next group norm makes the contiguous copy (see mid_forward)
  o = nn.view(cx, o, { b, c, h, w }, name .. ".to_nchw")
  local s = nn.add(cx, name .. ".residual", o, x)
  local y = nn.div_scalar(cx, name .. ".rescale", s)
  -- (AttnProcessor2_0's `residual` and the caller's hidden_states hold x until the return)
  nn.release(cx, { x }, name .. ".return")
  return y
end

local function attention(c)
  local m = mod.new("Attention", vae_attention_forward, { heads = 1, dim = c })
  m:add("group_norm", U.GroupNorm(32, c))
  m:add("to_q", U.Linear(c, c))
  m:add("to_k", U.Linear(c, c))
  m:add("to_v", U.Linear(c, c))
  m:add("to_out", U.ModuleList { U.Linear(c, c) })
  return m
end

-- UNetMidBlock2D (one attention): resnets[0], attentions[0], resnets[1]; its parameters are made
-- in that order (the constructor's loop appends them alternately).
local function mid_forward(cx, m, h)
  local C = m.children
  h = call(cx, C.resnets.children["0"], h, nil)
  h = call(cx, C.attentions.children["0"], h)
  -- the attention's output is strided as (b, hw, c): native_group_norm (norm1) takes a
  -- contiguous copy of it; the resnet's residual sum keeps the strided layout, so the
  -- encoder's conv_norm_out copies again (encoder_forward)
  h = nn.copy(cx, m.opname .. ".resnets.1.contiguous", h, h.shape, { grad = "new" })
  return call(cx, C.resnets.children["1"], h, nil)
end

local function mid_block(c)
  local m = mod.new("UNetMidBlock2D", mid_forward)
  m:add("resnets", U.ModuleList { U.ResnetBlock2D(c, c, nil), U.ResnetBlock2D(c, c, nil) })
  m:add("attentions", U.ModuleList { attention(c) })
  m.init_order = { "resnets.0", "attentions.0", "resnets.1" }
  return m
end

-- Downsample2D(padding=0): F.pad(x, (0, 1, 0, 1)) then a stride-2 convolution.
local function vae_downsample_forward(cx, m, x)
  local s = x.shape
  local pre = m.opname:gsub("%.downsamplers%.0$", "")
  local e = pre:gsub("%.down_blocks%.%d+$", "")
  local padded = nn.op_sized(cx, { name = pre .. ".pad", inputs = { x },
                             outs = { { e .. ".pad", { s[1], s[2], s[3] + 1, s[4] + 1 }, x.dtype } } })
  local y = call(cx, m.children.conv, padded)
  -- (DownEncoderBlock2D's hidden_states holds x until the downsampler returns)
  nn.release(cx, { x }, m.opname .. ".return")
  return y
end

-- Encoder.forward: conv_in, the down blocks (DownEncoderBlock2D: resnets, downsampler), the mid
-- block, conv_norm_out, SiLU, conv_out.
local function encoder_forward(cx, m, x)
  local C = m.children
  -- (the encode runs under no_grad: nothing saves a block's input, and what holds it is the
  -- Python variable `sample`, reassigned only when the block returns: each down block's and the
  -- mid block's input lives through the whole block)
  local h = call(cx, C.conv_in, x)
  for _, k in ipairs(C.down_blocks.order) do
    local D = C.down_blocks.children[k].children
    local input = h
    for _, j in ipairs(D.resnets.order) do h = call(cx, D.resnets.children[j], h, nil) end
    if D.downsamplers then h = call(cx, D.downsamplers.children["0"], h) end
    nn.release(cx, { input }, m.opname .. ".down_blocks." .. k .. ".return")
  end
  local input = h
  h = call(cx, C.mid_block, h)
  nn.release(cx, { input }, m.opname .. ".mid_block.return")
  -- (the mid block's output keeps its attention's strided layout: group_norm's contiguous copy)
  h = nn.copy(cx, m.opname .. ".conv_norm_out_contiguous", h, h.shape, { grad = "new" })
  h = call(cx, C.conv_norm_out, h)
  h = nn.act(cx, m.opname .. ".conv_act", h)
  return call(cx, C.conv_out, h)
end

-- AutoencoderKL.encode(pixels).latent_dist.sample() * scaling_factor: the encoder, quant_conv
-- (where the config has one), then DiagonalGaussianDistribution: mean, logvar = chunk; logvar
-- clamp; std = exp(0.5 logvar); var = exp(logvar); sample = mean + std * randn. With a shift
-- factor (the 16-channel VAE): (sample - shift_factor) * scaling_factor. Returns the latents.
local function encode_forward(cx, m, x)
  local name = m.opname
  local h = call(cx, m.children.encoder, x)
  local moments = m.children.quant_conv and call(cx, m.children.quant_conv, h) or h
  local s = moments.shape
  local half = { s[1], s[2] // 2, s[3], s[4] }
  local lv = nn.ew(cx, name .. ".logvar_clamp", { moments }, moments.dtype, nil, nil, half)
  -- std = torch.exp(0.5 * logvar): the product is a temporary of its own
  local half_lv = nn.ew(cx, name .. ".half_logvar", { lv }, lv.dtype)
  local std = nn.ew(cx, name .. ".std", { half_lv }, lv.dtype)
  nn.ew(cx, name .. ".var", { lv }, lv.dtype) -- var = exp(logvar), unused by sample()
  local rnd = nn.op_sized(cx, { name = name .. ".randn", inputs = {}, outs = { { name .. ".randn", half, lv.dtype } } })
  local sr = nn.mul(cx, name .. ".std_x_randn", std, rnd, lv.dtype)
  local smp = nn.op_sized(cx, { name = name .. ".sample", inputs = { moments, sr },
                          outs = { { name .. ".sample", half, lv.dtype } } })
  if m.cfg.shift then smp = nn.ew(cx, name .. ".shift", { smp }, smp.dtype) end
  return nn.ew(cx, name .. ".scale", { smp }, smp.dtype)
end

-- The tree, in construction order: encoder (conv_in, down_blocks, mid_block, conv_norm_out,
-- conv_out), decoder (conv_in, mid_block, up_blocks, conv_norm_out, conv_out), quant_conv,
-- post_quant_conv. Its forward is the encode above.
function V.AutoencoderKL(cfg, prefix)
  local bo = cfg.block_out
  local root = mod.new("AutoencoderKL", encode_forward, { cfg = cfg })
  local enc = root:add("encoder", mod.new("Encoder", encoder_forward))
  enc:add("conv_in", U.Conv2d(cfg.in_ch, bo[1], 3))
  local downs = enc:add("down_blocks", mod.new("ModuleList", nil))
  local out = bo[1]
  for i = 1, #bo do
    local inp = out
    out = bo[i]
    local D = downs:add(i - 1, mod.new("DownEncoderBlock2D", nil))
    local res = {}
    for j = 1, cfg.layers_per_block do res[j] = U.ResnetBlock2D(j == 1 and inp or out, out, nil) end
    D:add("resnets", U.ModuleList(res))
    if i < #bo then
      local ds = mod.new("Downsample2D", vae_downsample_forward)
      ds:add("conv", U.Conv2d(out, out, 3, 2, 0))
      D:add("downsamplers", U.ModuleList { ds })
    end
  end
  enc:add("mid_block", mid_block(bo[#bo]))
  enc:add("conv_norm_out", U.GroupNorm(32, bo[#bo]))
  enc:add("conv_out", U.Conv2d(bo[#bo], 2 * cfg.latent, 3))
  local dec = root:add("decoder", mod.new("Decoder", nil))
  dec:add("conv_in", U.Conv2d(cfg.latent, bo[#bo], 3))
  dec:add("mid_block", mid_block(bo[#bo]))
  local ups = dec:add("up_blocks", mod.new("ModuleList", nil))
  local prev = bo[#bo]
  for i = 1, #bo do
    local o = bo[#bo - i + 1]
    local Ub = ups:add(i - 1, mod.new("UpDecoderBlock2D", nil))
    local res = {}
    for j = 1, cfg.layers_per_block + 1 do res[j] = U.ResnetBlock2D(j == 1 and prev or o, o, nil) end
    Ub:add("resnets", U.ModuleList(res))
    if i < #bo then Ub:add("upsamplers", U.ModuleList { U.Upsample2D(o) }) end
    prev = o
  end
  dec:add("conv_norm_out", U.GroupNorm(32, bo[1]))
  dec:add("conv_out", U.Conv2d(bo[1], cfg.in_ch, 3))
  if cfg.quant_conv then
    root:add("quant_conv", U.Conv2d(2 * cfg.latent, 2 * cfg.latent, 1))
    root:add("post_quant_conv", U.Conv2d(cfg.latent, cfg.latent, 1))
  end
  mod.finalize(root, prefix)
  mod.walk(root, function(x) x.opname = x.opname or x.path end)
  return root
end

return V
