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
local O = require "models.blocks.ops"
local U = require "models.blocks.unet"
local clip = require "models.blocks.clip"
local vae = require "models.blocks.vae"

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

-- The SDXL base UNet config (diffusers' stabilityai/stable-diffusion-xl-base-1.0 unet/config.json).
M.unet_config = {
  block_out = { 320, 640, 1280 },
  depth = { 0, 2, 10 },            -- transformer layers per block (0: DownBlock2D / UpBlock2D)
  heads = { 5, 10, 20 },           -- attention_head_dim in the config is the head count (dim 64)
  layers_per_block = 2,
  temb = 1280, time_proj = 320, add_time_proj = 256, add_in = 2816, cross = 2048,
}

local function precision(t)
  local p = t.precision
  local pd = ({ fp32 = "fp32", amp_bf16 = "fp32", amp_fp16 = "fp32", bf16 = "bf16", fp16 = "fp16",
                lora_bf16 = "bf16", lora_fp16 = "fp16" })[p]
  if not pd then error("sdxl: unknown precision '" .. tostring(p) .. "'", 0) end
  local ac = (p == "amp_bf16" and "bf16") or (p == "amp_fp16" and "fp16") or nil
  return pd, ac
end

-- UNet parameters in the order the measured model constructs them (the trace of its build
-- shows it): conv_in, time and add embeddings, each down block (its resnets, then its
-- attentions, then the downsampler), the mid block, each up block, conv_norm_out, conv_out.
function M.unet_params(mk, cfg)
  local c = cfg or M.unet_config
  local P = { down = {}, up = {} }
  local bo = c.block_out
  P.conv_in = U.conv_params(mk, "unet.conv_in.", 4, bo[1], 3)
  P.time1 = U.linear_params(mk, "unet.time_embedding.linear_1.", c.time_proj, c.temb)
  P.time2 = U.linear_params(mk, "unet.time_embedding.linear_2.", c.temb, c.temb)
  P.add1 = U.linear_params(mk, "unet.add_embedding.linear_1.", c.add_in, c.temb)
  P.add2 = U.linear_params(mk, "unet.add_embedding.linear_2.", c.temb, c.temb)
  local out = bo[1]
  for i = 1, #bo do
    local inp = out
    out = bo[i]
    local p = "unet.down_blocks." .. (i - 1) .. "."
    local D = { resnets = {}, attentions = {}, depth = c.depth[i], heads = c.heads[i] }
    for j = 1, c.layers_per_block do
      D.resnets[j] = U.resnet_params(mk, p .. "resnets." .. (j - 1) .. ".", j == 1 and inp or out, out, c.temb)
    end
    if c.depth[i] > 0 then
      for j = 1, c.layers_per_block do
        D.attentions[j] = U.transformer_params(mk, p .. "attentions." .. (j - 1) .. ".", out, c.depth[i], c.cross)
      end
    end
    if i < #bo then D.down = U.conv_params(mk, p .. "downsamplers.0.conv.", out, out, 3) end
    P.down[i] = D
  end
  local top = bo[#bo]
  P.mid = { resnets = {}, heads = c.heads[#bo] }
  P.mid.resnets[1] = U.resnet_params(mk, "unet.mid_block.resnets.0.", top, top, c.temb)
  P.mid.resnets[2] = U.resnet_params(mk, "unet.mid_block.resnets.1.", top, top, c.temb)
  P.mid.attn = U.transformer_params(mk, "unet.mid_block.attentions.0.", top, c.depth[#bo], c.cross)
  local rev, rdepth, rheads = {}, {}, {}
  for i = #bo, 1, -1 do
    rev[#rev + 1] = bo[i]; rdepth[#rdepth + 1] = c.depth[i]; rheads[#rheads + 1] = c.heads[i]
  end
  local prev = rev[1]
  for i = 1, #rev do
    local o = rev[i]
    local inp = rev[math.min(i + 1, #rev)]
    local p = "unet.up_blocks." .. (i - 1) .. "."
    local Ub = { resnets = {}, attentions = {}, depth = rdepth[i], heads = rheads[i] }
    local n = c.layers_per_block + 1
    for j = 1, n do
      local skip = (j == n) and inp or o
      local rin = (j == 1) and prev or o
      Ub.resnets[j] = U.resnet_params(mk, p .. "resnets." .. (j - 1) .. ".", rin + skip, o, c.temb)
    end
    if rdepth[i] > 0 then
      for j = 1, n do
        Ub.attentions[j] = U.transformer_params(mk, p .. "attentions." .. (j - 1) .. ".", o, rdepth[i], c.cross)
      end
    end
    if i < #rev then Ub.up = U.conv_params(mk, p .. "upsamplers.0.conv.", o, o, 3) end
    P.up[i] = Ub
    prev = o
  end
  P.norm_out_w = mk("unet.conv_norm_out.weight", { bo[1] })
  P.norm_out_b = mk("unet.conv_norm_out.bias", { bo[1] })
  P.conv_out = U.conv_params(mk, "unet.conv_out.", bo[1], 4, 3)
  return P
end

-- UNet2DConditionModel.forward with diffusers' gradient checkpointing when ckpt is set: every
-- ResnetBlock2D and every BasicTransformerBlock is a region, except the mid block's first
-- ResNet (UNetMidBlock2DCrossAttn calls it outside the checkpoint).
function M.unet_forward(cx, P, inp, ckpt, cfg)
  local c = cfg or M.unet_config
  local n = inp.sample.shape[1]
  -- 1. time: sinusoidal projection, cast to the sample dtype, TimestepEmbedding
  local tp = U.timestep_embedding(cx, "unet.time_proj", inp.timesteps, n, c.time_proj)
  local t_emb = O.to(cx, tp, inp.sample.dtype, "unet.time_proj.to_sample_dtype")
  local emb = U.timestep_mlp(cx, "unet.time_embedding", P.time1, P.time2, t_emb)
  -- text_time: add_time_proj(time_ids.flatten()), concat with text_embeds, add_embedding
  local nt = inp.time_ids.shape[2]
  local ti = U.timestep_embedding(cx, "unet.add_time_proj", inp.time_ids, n * nt, c.add_time_proj)
  local tiv = nn.view(cx, ti, { n, nt * c.add_time_proj }, "unet.time_embeds")
  local add = O.cat(cx, "unet.add_embeds", { inp.text_embeds, tiv }, 2)
  local add_c = O.to(cx, add, emb.dtype, "unet.add_embeds.to_emb_dtype")
  local aug = U.timestep_mlp(cx, "unet.add_embedding", P.add1, P.add2, add_c)
  emb = O.add(cx, "unet.emb_add", emb, aug)
  -- 2. conv_in
  local h = O.conv2d(cx, "unet.conv_in", inp.sample, P.conv_in.w, P.conv_in.b)
  local skips = { h }
  -- 3. down
  for i, D in ipairs(P.down) do
    local p = "unet.down_blocks." .. (i - 1)
    cx.layer = i - 1
    for j, R in ipairs(D.resnets) do
      h = U.resnet(cx, p .. ".resnets." .. (j - 1), R, h, emb, ckpt)
      if D.attentions[j] then
        h = U.transformer2d(cx, p .. ".attentions." .. (j - 1), D.attentions[j], h, inp.context, D.heads, ckpt)
      end
      skips[#skips + 1] = h
    end
    if D.down then
      h = U.downsample(cx, p .. ".downsamplers.0", D.down, h)
      skips[#skips + 1] = h
    end
  end
  -- 4. mid (its first ResNet is not checkpointed)
  cx.layer = #P.down
  h = U.resnet(cx, "unet.mid_block.resnets.0", P.mid.resnets[1], h, emb, false)
  h = U.transformer2d(cx, "unet.mid_block.attentions.0", P.mid.attn, h, inp.context, P.mid.heads, ckpt)
  h = U.resnet(cx, "unet.mid_block.resnets.1", P.mid.resnets[2], h, emb, ckpt)
  -- 5. up
  for i, Ub in ipairs(P.up) do
    local p = "unet.up_blocks." .. (i - 1)
    cx.layer = #P.down + i
    -- sample = upsample_block(hidden_states=sample, ...): the caller's variable keeps the
    -- block's input alive until the block returns
    local block_in = h
    for j, R in ipairs(Ub.resnets) do
      local skip = table.remove(skips)
      h = O.cat(cx, p .. ".cat." .. (j - 1), { h, skip }, 2)
      h = U.resnet(cx, p .. ".resnets." .. (j - 1), R, h, emb, ckpt)
      if Ub.attentions[j] then
        h = U.transformer2d(cx, p .. ".attentions." .. (j - 1), Ub.attentions[j], h, inp.context, Ub.heads, ckpt)
      end
    end
    if Ub.up then h = U.upsample(cx, p .. ".upsamplers.0", Ub.up, h) end
    O.release(cx, p .. ".return", { block_in })
  end
  cx.layer = -1
  -- 6. out
  h = O.group_norm(cx, "unet.conv_norm_out", h, P.norm_out_w, P.norm_out_b, 32)
  h = O.act(cx, "unet.conv_act", h)
  return O.conv2d(cx, "unet.conv_out", h, P.conv_out.w, P.conv_out.b)
end

local function vae_dtype(t, pd)
  if t.vae == "cached" then return nil end
  if t.vae == "fp32" then return "fp32" end
  return t.vae or pd
end

function M.build(cx, cfg)
  local t = cfg.training
  local variant = cfg.model.variant or "sdxl-base-unet"
  if not M.choices.variant[variant] then
    error(("sdxl: unknown variant '%s' (sdxl-base-unet or sdxl-base)"):format(variant), 0)
  end
  local full = variant == "sdxl-base"
  local pd, ac = precision(t)
  local lora
  if t.precision:match("^lora") or t.lora then
    local lc = t.lora or {}
    lora = { r = lc.r or 4, alpha = lc.alpha or lc.r or 4, dropout = lc.dropout or 0.0,
             targets = lc.targets or { "to_q", "to_k", "to_v", "to_out.0" },
             dtype = lc.dtype or "fp32" }
    cx.lora = lora
  end
  cx.autocast = ac
  cx.gpu = require("hw.gpus")[cfg.hardware.gpu]
  cx.attention = t.attention
  cx.arch = cx.arch or (cx.gpu and cx.gpu.arch)
  local n = t.micro_batch
  local width = t.width or t.resolution
  if t.resolution % 64 ~= 0 or width % 64 ~= 0 then
    error(("sdxl: training.resolution and training.width must be multiples of 64 (got %d x %d)")
          :format(t.resolution, width), 0)
  end
  local lat, latw = t.resolution // 8, width // 8
  local ckpt = t.checkpointing

  -- build: the models directly in their dtype on the GPU, parameters in construction order
  cx.phase = "build"
  local te_mode = t.text_encoders
  local vdt = full and vae_dtype(t, pd) or nil
  local function maker(dtype, trainable)
    return function(name, shape) return nn.param(cx, name, shape, dtype, trainable) end
  end
  local TE1, TE2, V
  if full and te_mode ~= "cached" then
    -- frozen text encoders are moved to the compute dtype (diffusers' weight_dtype: bf16/fp16
    -- under mixed precision); trained ones keep the parameter dtype
    local tr = te_mode == "trained"
    local tdt = tr and pd or (ac or pd)
    TE1 = clip.params(maker(tdt, tr), "text_encoder.", clip.configs["vit-l-14"])
    TE2 = clip.params(maker(tdt, tr), "text_encoder_2.", clip.configs["vit-bigg-14"])
  end
  if vdt then V = vae.params(maker(vdt, false), "vae.", vae.config) end
  U.registry = {}
  local P = M.unet_params(maker(pd, not lora))
  local attn_modules = U.registry
  U.registry = nil
  if lora then
    -- peft's add_adapter: lora_A (r, in) and lora_B (out, r) for every targeted projection, made
    -- after the base model (fp32 adapters: autocast_adapter_dtype)
    local want = {}
    for _, k in ipairs(lora.targets) do want[k] = true end
    local mk = maker(lora.dtype, true)
    for _, A in ipairs(attn_modules) do
      A.lora = {}
      for _, key in ipairs { "to_q", "to_k", "to_v", "to_out.0" } do
        if want[key] then
          local w = ({ to_q = A.q, to_k = A.k, to_v = A.v, ["to_out.0"] = A.o })[key]
          A.lora[key] = { A = mk(A.prefix .. key .. ".lora_A.default.weight", { lora.r, w.shape[2] }),
                          B = mk(A.prefix .. key .. ".lora_B.default.weight", { w.shape[1], lora.r }) }
        end
      end
    end
  end
  if t.ema then
    -- EMAModel(unet.parameters()): a copy of every trained parameter, kept in fp32 under amp
    for _, p in ipairs(cx.params) do
      if p.trainable then
        cx.G:tensor { name = "ema." .. p.name, bytes = nn.bytes(p.shape, p.dtype),
                      numel = 0, dtype = p.dtype, cat = "optstate", persistent = true }
      end
    end
  end

  -- the step's inputs, made once after the model (as the measured runs do)
  local act = pd
  local inp = {}
  if full then
    if vdt then
      inp.pixels = O.input(cx, "pixel_values", { n, 3, t.resolution, width }, vdt)
    else
      inp.latents = O.input(cx, "latents", { n, 4, lat, latw }, act)
    end
    if te_mode == "cached" then
      inp.context = O.input(cx, "prompt_embeds", { n, 77, M.unet_config.cross }, act)
      inp.text_embeds = O.input(cx, "pooled_prompt_embeds", { n, 1280 }, act)
    else
      inp.ids1 = O.input(cx, "input_ids", { n, 77 }, "int64")
      inp.ids2 = O.input(cx, "input_ids_2", { n, 77 }, "int64")
    end
    inp.time_ids = O.input(cx, "add_time_ids", { n, 6 }, act)
  else
    inp.sample = O.input(cx, "latents", { n, 4, lat, latw }, act)
    inp.target = O.input(cx, "noise", { n, 4, lat, latw }, act)
    inp.context = O.input(cx, "encoder_hidden_states", { n, 77, M.unet_config.cross }, act)
    inp.text_embeds = O.input(cx, "text_embeds", { n, 1280 }, act)
    inp.time_ids = O.input(cx, "time_ids", { n, 6 }, act)
  end
  inp.timesteps = O.input(cx, "timesteps", { n }, "int64")
  cx.phase = "fwd"

  if full then
    -- latents = vae.encode(pixels).latent_dist.sample() * scaling_factor (no_grad)
    if vdt then
      cx.no_grad = true
      local saved_ac = cx.autocast
      cx.autocast = nil
      local l = vae.encode(cx, "vae", V, inp.pixels)
      cx.autocast = saved_ac
      l = O.to(cx, l, act, "latents.to_unet_dtype")
      cx.no_grad = false
      inp.latents = l
    end
    -- text encoders: hidden states of the penultimate layer of both, concatenated; pooled
    -- (projected) output of the second
    if te_mode ~= "cached" then
      local frozen = te_mode == "frozen"
      cx.no_grad = frozen
      local h1 = clip.forward(cx, "text_encoder", TE1, clip.configs["vit-l-14"], inp.ids1)
      local h2, pooled = clip.forward(cx, "text_encoder_2", TE2, clip.configs["vit-bigg-14"], inp.ids2)
      inp.context = O.cat(cx, "prompt_embeds", { h1, h2 }, 3)
      inp.text_embeds = pooled
      cx.no_grad = false
    end
    -- noise = randn_like(latents); timesteps; noisy = scheduler.add_noise(latents, noise, t)
    inp.target = O.op(cx, { name = "noise", inputs = {}, outs = { { "noise", inp.latents.shape, act } } })
    inp.sample = O.op(cx, { name = "add_noise", inputs = { inp.latents, inp.target },
                             outs = { { "noisy_latents", inp.latents.shape, act } },
                             frees = { inp.latents } })
  end

  -- cuBLASLt workspaces of the forward thread's handle (first addmm) and of the autograd
  -- thread's (its first GEMM comes in backward; kept from the end of forward here)
  cx.lt_workspace_pending = O.lt_workspace(cx, "cublasLt workspace (forward)")
  cx.late_outputs = { O.lt_workspace(cx, "cublasLt workspace (backward)") }
  local pred = M.unet_forward(cx, P, inp, ckpt)
  local loss = O.mse_loss(cx, "mse_loss", pred, inp.target)
  nn.end_forward(cx)
  cx.tokens = 0
  return loss, P
end

function M.settings(cfg)
  local t = cfg.training
  local v = cfg.model.variant or "sdxl-base-unet"
  local extra = ""
  if v == "sdxl-base" then
    extra = (", text encoders %s, VAE %s"):format(t.text_encoders, t.vae)
  end
  local lora = ""
  if t.precision:match("^lora") or t.lora then
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
