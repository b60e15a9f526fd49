-- blocks/vae.lua: diffusers' AutoencoderKL with the SDXL VAE config (83,653,863 parameters):
-- encoder, quant_conv, post_quant_conv, decoder, named as in its state dict; the encoder's
-- forward (training scripts encode the image batch under no_grad; the decoder is loaded but not
-- run).
local nn = require "vrsim.nn"
local O = require "models.blocks.ops"
local U = require "models.blocks.unet"

local V = {}

V.config = { block_out = { 128, 256, 512, 512 }, layers_per_block = 2, latent = 4, in_ch = 3 }

local function gn_params(mk, p, c)
  return { w = mk(p .. "weight", { c }), b = mk(p .. "bias", { c }) }
end

local function attn_params(mk, p, c)
  local A = { gn = gn_params(mk, p .. "group_norm.", c) }
  A.q = U.linear_params(mk, p .. "to_q.", c, c)
  A.k = U.linear_params(mk, p .. "to_k.", c, c)
  A.v = U.linear_params(mk, p .. "to_v.", c, c)
  A.o = U.linear_params(mk, p .. "to_out.0.", c, c)
  return A
end

local function mid_params(mk, p, c)
  return { r1 = U.resnet_params(mk, p .. "resnets.0.", c, c, nil),
           attn = attn_params(mk, p .. "attentions.0.", c),
           r2 = U.resnet_params(mk, p .. "resnets.1.", c, c, nil) }
end

function V.params(mk, prefix, cfg)
  local bo, P = cfg.block_out, { enc = { down = {} }, dec = { up = {} } }
  local e = prefix .. "encoder."
  P.enc.conv_in = U.conv_params(mk, e .. "conv_in.", cfg.in_ch, bo[1], 3)
  local out = bo[1]
  for i = 1, #bo do
    local inp = out
    out = bo[i]
    local p = e .. "down_blocks." .. (i - 1) .. "."
    local D = { resnets = {} }
    for j = 1, cfg.layers_per_block do
      D.resnets[j] = U.resnet_params(mk, p .. "resnets." .. (j - 1) .. ".", j == 1 and inp or out, out, nil)
    end
    if i < #bo then D.down = U.conv_params(mk, p .. "downsamplers.0.conv.", out, out, 3) end
    P.enc.down[i] = D
  end
  P.enc.mid = mid_params(mk, e .. "mid_block.", bo[#bo])
  P.enc.norm_out = gn_params(mk, e .. "conv_norm_out.", bo[#bo])
  P.enc.conv_out = U.conv_params(mk, e .. "conv_out.", bo[#bo], 2 * cfg.latent, 3)
  local d = prefix .. "decoder."
  P.dec.conv_in = U.conv_params(mk, d .. "conv_in.", cfg.latent, bo[#bo], 3)
  P.dec.mid = mid_params(mk, d .. "mid_block.", bo[#bo])
  local prev = bo[#bo]
  for i = 1, #bo do
    local o = bo[#bo - i + 1]
    local p = d .. "up_blocks." .. (i - 1) .. "."
    local Ub = { resnets = {} }
    for j = 1, cfg.layers_per_block + 1 do
      Ub.resnets[j] = U.resnet_params(mk, p .. "resnets." .. (j - 1) .. ".", j == 1 and prev or o, o, nil)
    end
    if i < #bo then Ub.up = U.conv_params(mk, p .. "upsamplers.0.conv.", o, o, 3) end
    P.dec.up[i] = Ub
    prev = o
  end
  P.dec.norm_out = gn_params(mk, d .. "conv_norm_out.", bo[1])
  P.dec.conv_out = U.conv_params(mk, d .. "conv_out.", bo[1], cfg.in_ch, 3)
  P.quant = U.conv_params(mk, prefix .. "quant_conv.", 2 * cfg.latent, 2 * cfg.latent, 1)
  P.post_quant = U.conv_params(mk, prefix .. "post_quant_conv.", cfg.latent, cfg.latent, 1)
  return P
end

-- The VAE's mid-block attention (one head of 512 channels, group norm, residual).
local function attention(cx, name, A, x)
  local b, c, h, w = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
  local g = O.group_norm(cx, name .. ".group_norm", x, A.gn.w, A.gn.b, 32)
  local gv = nn.view(cx, g, { b, h * w, c }, name .. ".nlc_view")
  local q = O.linear(cx, name .. ".to_q", gv, A.q.w, A.q.b, { keep_input = true, noncontig = true })
  local k = O.linear(cx, name .. ".to_k", gv, A.k.w, A.k.b, { keep_input = true, noncontig = true })
  local v = O.linear(cx, name .. ".to_v", gv, A.v.w, A.v.b, { noncontig = true })
  local qh = nn.view(cx, q, { b, 1, h * w, c })
  local kh = nn.view(cx, k, { b, 1, h * w, c })
  local vh = nn.view(cx, v, { b, 1, h * w, c })
  local ao = O.sdpa(cx, name, qh, kh, vh)
  local a2 = nn.view(cx, ao, { b, h * w, c })
  local o = O.linear(cx, name .. ".to_out.0", a2, A.o.w, A.o.b)
  o = O.copy(cx, name .. ".to_nchw", o, { b, c, h, w }, { grad = "new" })
  local s = O.add(cx, name .. ".residual", o, x)
  return O.div_scalar(cx, name .. ".rescale", s)
end

-- vae.encode(pixels).latent_dist.sample() * scaling_factor: returns the latents.
function V.encode(cx, name, P, x)
  local e = name .. ".encoder"
  local h = O.conv2d(cx, e .. ".conv_in", x, P.enc.conv_in.w, P.enc.conv_in.b)
  for i, D in ipairs(P.enc.down) do
    for j, R in ipairs(D.resnets) do
      h = U.resnet(cx, e .. ".down_blocks." .. (i - 1) .. ".resnets." .. (j - 1), R, h, nil, false)
    end
    if D.down then
      -- Downsample2D(padding=0): F.pad(x, (0, 1, 0, 1)) then a stride-2 convolution
      local s = h.shape
      local padded = O.op(cx, { name = e .. ".down_blocks." .. (i - 1) .. ".pad", inputs = { h },
                                 outs = { { e .. ".pad", { s[1], s[2], s[3] + 1, s[4] + 1 }, h.dtype } } })
      h = O.conv2d(cx, e .. ".down_blocks." .. (i - 1) .. ".downsamplers.0.conv", padded, D.down.w, D.down.b,
                   { stride = 2, pad = 0 })
    end
  end
  h = U.resnet(cx, e .. ".mid_block.resnets.0", P.enc.mid.r1, h, nil, false)
  h = attention(cx, e .. ".mid_block.attentions.0", P.enc.mid.attn, h)
  h = U.resnet(cx, e .. ".mid_block.resnets.1", P.enc.mid.r2, h, nil, false)
  h = O.group_norm(cx, e .. ".conv_norm_out", h, P.enc.norm_out.w, P.enc.norm_out.b, 32)
  h = O.act(cx, e .. ".conv_act", h)
  h = O.conv2d(cx, e .. ".conv_out", h, P.enc.conv_out.w, P.enc.conv_out.b)
  local moments = O.conv2d(cx, name .. ".quant_conv", h, P.quant.w, P.quant.b)
  -- DiagonalGaussianDistribution: mean, logvar = chunk; logvar clamp; std = exp(0.5 logvar);
  -- var = exp(logvar); sample = mean + std * randn
  local s = moments.shape
  local half = { s[1], s[2] // 2, s[3], s[4] }
  local lv = nn.ew(cx, name .. ".logvar_clamp", { moments }, moments.dtype, nil, nil, half)
  local std = nn.ew(cx, name .. ".std", { lv }, lv.dtype)
  nn.ew(cx, name .. ".var", { lv }, lv.dtype) -- var = exp(logvar), unused by sample()
  local rnd = O.op(cx, { name = name .. ".randn", inputs = {}, outs = { { name .. ".randn", half, lv.dtype } } })
  local sr = O.mul(cx, name .. ".std_x_randn", std, rnd, lv.dtype)
  local smp = O.op(cx, { name = name .. ".sample", inputs = { moments, sr },
                          outs = { { name .. ".sample", half, lv.dtype } } })
  return nn.ew(cx, name .. ".scale", { smp }, smp.dtype)
end

return V
