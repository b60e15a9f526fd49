-- blocks/unet_step.lua: one training step of a diffusers denoiser as diffusers' text-to-image
-- scripts run it (examples/text_to_image/train_text_to_image.py, train_text_to_image_lora.py and
-- their _sdxl versions; for the transformer denoisers examples/dreambooth/
-- train_dreambooth_lora_flux.py and train_dreambooth_flux.py), op by op as PyTorch runs it: the models built directly in their dtype
-- on the GPU, the VAE encode of the image batch without autograd (or cached latents), the text
-- encoders (frozen without autograd, trained, or cached), noise, the UNet forward and backward,
-- the MSE loss. The families differ only in their UNet config and in what conditions it: a
-- family (models/sdxl.lua, models/sd.lua) hands build a table
--   name           the arch, in error messages
--   unet_config    the diffusers UNet config (blocks/unet.lua reads it)
--   unet_alone     true: the UNet's inputs given (latents, noise, text embeddings), nothing else run
--   encoders       { { cfg = clip config, prefix = "text_encoder", ids = "input_ids",
--                      output = nil | "last" }, ... } in build order
--   encode(cx, outs)   the encoders' outputs (each encoder's return values, a list) to the
--                  UNet's encoder_hidden_states and its added text embeddings (or nil), and
--                  the text ids where the family makes them with the embeddings (or nil)
--   encoders[i].after(cx, outs, ...)   what the script does with encoder i's outputs (...)
--                  before the next encoder runs, outs the earlier encoders' (returns them)
--   ids_per_step   true: the token ids are moved to the GPU in the step (tokenized per step)
--   pooled_dim     the added text embedding's width (nil: the UNet takes none)
--   time_ids       the added time ids' count (nil: none)
--   vae_dtype(t, pd, ac)   the VAE's dtype for training.vae (nil: cached latents)
--   latents_as_encoded     true: the latents keep the VAE's dtype (train_text_to_image.py);
--                  otherwise they are cast to the UNet's parameter dtype
--   text_first             true: the step encodes the prompts before the pixels (the Flux script)
--   pixels_dtype           the dataloader's pixel dtype, cast to the VAE's each step (default:
--                          the VAE's own)
--   encoders_autocast      false: frozen text encoders run outside autocast (Accelerate
--                  autocasts the forwards of the models it prepares: the UNet, and a trained
--                  text encoder)
--   lora_targets   peft's target_modules in the family's LoRA script
-- and, where the denoiser is not a UNet2DConditionModel trained on DDPM noise (models/flux.lua):
--   denoiser()     its module tree (default: blocks/unet.lua's UNet from unet_config)
--   latent_channels   the VAE's latent channels (default: unet_config.in_channels)
--   vae_config     blocks/vae.lua's config of its VAE (default: the 4-channel SD VAE)
--   autocast(t, pd, ac)   the autocast dtype of the step (default: training.precision's)
--   cached_text(cx, inp, n, dtype)   the precomputed text embeddings (default: 77 tokens of
--                  cross_attention_dim, and the pooled embedding where pooled_dim is set)
--   noise(cx, inp) the noised input and the target, set on inp (default: DDPM's add_noise)
--   call(cx, denoiser, inp)   the denoiser's prediction (default: the UNet's call)
--   loss(cx, pred, inp)       the scalar loss (default: F.mse_loss)
-- An encoder entry may name its own tree (build(e)) and token count (tokens, default 77).
-- Parameters are named as in diffusers' state dicts ("unet.down_blocks...", "text_encoder...",
-- "vae.encoder..."), so the report groups them by model.
local nn = require "vrsim.nn"
local clip = require "models.blocks.clip"
local vae = require "models.blocks.vae"
local mod = require "vrsim.module"
local U = require "models.blocks.unet"

local S = {}

-- The parameter dtype and the autocast dtype of training.precision.
function S.precision(name, t)
  local p = t.precision
  local pd = ({ fp32 = "fp32", amp_bf16 = "fp32", amp_fp16 = "fp32", bf16 = "bf16", fp16 = "fp16",
                lora_bf16 = "bf16", lora_fp16 = "fp16" })[p]
  if not pd then error(name .. ": unknown precision '" .. tostring(p) .. "'", 0) end
  local ac = (p == "amp_bf16" and "bf16") or (p == "amp_fp16" and "fp16") or nil
  return pd, ac
end

-- What the step cannot do, as a clear error (exit 2) rather than a silently wrong answer.
local function check_supported(fam, cfg)
  local t, name = cfg.training, fam.name
  local full = not fam.unet_alone
  if t.device_map ~= "none" then
    error(name .. ": training.device_map = \"" .. t.device_map .. "\" (Accelerate's placement of a "
          .. "transformers model's layers across devices) is not modelled for a diffusers denoiser", 0)
  end
  if t.quant ~= "none" then
    error(name .. ": training.quant = \"" .. t.quant .. "\" (bitsandbytes base weights) is not modelled "
          .. "for a diffusers denoiser: vrsim quantizes the decoder families' Linear layers only", 0)
  end
  if t.checkpoint_every ~= 1 or t.checkpoint_scope ~= "layer" then
    error(name .. ": training.checkpoint_every / checkpoint_scope are transformers' per-layer options; "
          .. "diffusers' enable_gradient_checkpointing checkpoints every ResNet and transformer "
          .. "block (set checkpointing = true alone)", 0)
  end
  local sharded = t.strategy == "zero3" or t.strategy == "fsdp2"
  if sharded and full and t.text_encoders == "trained" then
    error(name .. ": strategy " .. t.strategy .. " with text_encoders = \"trained\" is not modelled: "
          .. "only the UNet is sharded (diffusers' scripts keep the text encoders out of "
          .. "zero.Init and accelerator.prepare)", 0)
  end
  if sharded and t.ema then
    error(name .. ": an EMA copy of a " .. t.strategy .. "-sharded UNet is not modelled", 0)
  end
  local refused = require("strategies.techniques").check_other(t, name, cfg.notes)
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
    -- persistent floating-point buffers (PatchEmbed's pos_embed) travel with the parameters
    -- (.to(device, dtype)), after the module's children as Module._apply moves them: GPU bytes
    -- in the model's dtype, never trained, not parameters
    for _, b in ipairs(m.buffer_decls or {}) do
      local name = m.path .. "." .. b.key
      local t = { shape = b.shape, dtype = dtype, rg = false, name = name, param = true,
                  trainable = false, layer = cx.layer }
      t.id = cx.G:tensorv(name, nn.bytes(b.shape, dtype), 0, dtype, "param", false, false, true, true)
      m.p[b.key] = t
    end
  end
  walk(root, -1)
  cx.layer = -1
end

-- Puts the parameters materialize made from index `from` on in the tree's registration order
-- (a module's reg_order, where set, else its order; depth first: model.parameters(), the
-- optimizer's order), where a constructor made them in another (init_order).
local function registration_order(cx, root, from)
  local rank, n = {}, 0
  local function walk(m)
    for _, d in ipairs(m.decls) do n = n + 1; rank[m.path .. "." .. d.key] = n end
    for _, k in ipairs(m.reg_order or m.order) do walk(m.children[k]) end
  end
  walk(root)
  local made = {}
  for i = from, #cx.params do made[#made + 1] = cx.params[i] end
  table.sort(made, function(x, y) return (rank[x.name] or 0) < (rank[y.name] or 0) end)
  for i, p in ipairs(made) do cx.params[from + i - 1] = p end
end

local register = mod.register

-- DDPMScheduler.add_noise(original_samples, noise, timesteps) as diffusers runs it: alphas_cumprod
-- (num_train_timesteps 1000, fp32) moved to the GPU on the first call, which the scheduler keeps;
-- its dtype cast for other samples (a temporary every call); the (n,) coefficients
-- sqrt_alpha_prod = alphas_cumprod[timesteps] ** 0.5 and sqrt_one_minus_alpha_prod =
-- (1 - alphas_cumprod[timesteps]) ** 0.5 (their flatten and unsqueeze are views); then
-- sqrt_alpha_prod * original_samples + sqrt_one_minus_alpha_prod * noise. The step's latents
-- are released with it.
function S.add_noise(cx, x, noise, t)
  local n, dt = x.shape[1], x.dtype
  if not cx.alphas_cumprod then
    cx.alphas_cumprod = cx.G:tensor { name = "noise_scheduler.alphas_cumprod", bytes = 4000, numel = 1000,
                                      dtype = "fp32", cat = "temp", persistent = true }
    cx.G:op { name = "noise_scheduler.alphas_cumprod.to(device)", kind = "copy", phase = "fwd",
              inputs = {}, outputs = { cx.alphas_cumprod }, frees = {}, once = true, bytes = 8000 }
  end
  local ac = { id = cx.alphas_cumprod, shape = { 1000 }, dtype = "fp32", rg = false,
               name = "noise_scheduler.alphas_cumprod" }
  local acd = ac
  if dt ~= "fp32" then acd = nn.op_sized(cx, { name = "add_noise.alphas_cumprod.to", inputs = { ac }, frees = {},
                                               outs = { { "add_noise.alphas_cumprod", { 1000 }, dt } } }) end
  local function coef(nm, steps)
    local c = nn.op_sized(cx, { name = "add_noise." .. nm .. ".index", inputs = { acd, t }, frees = {},
                                outs = { { "add_noise." .. nm, { n }, dt } } })
    for _, st in ipairs(steps) do
      c = nn.op_sized(cx, { name = "add_noise." .. nm .. "." .. st, inputs = { c },
                            outs = { { "add_noise." .. nm, { n }, dt } } })
    end
    return c
  end
  local sa = coef("sqrt_alpha_prod", { "pow" })
  local sb = coef("sqrt_one_minus_alpha_prod", { "rsub", "pow" })
  local a = nn.op_sized(cx, { name = "add_noise.mul_samples", inputs = { sa, x }, frees = {},
                              outs = { { "add_noise.scaled_samples", x.shape, dt } } })
  local b = nn.op_sized(cx, { name = "add_noise.mul_noise", inputs = { sb, noise }, frees = {},
                              outs = { { "add_noise.scaled_noise", x.shape, dt } } })
  -- (the function's locals, the cast alphas_cumprod among them, go when it returns)
  return nn.op_sized(cx, { name = "add_noise", inputs = { a, b }, outs = { { "noisy_latents", x.shape, dt } },
                           frees = { a, b, sa, sb, x, acd ~= ac and acd or nil } })
end

-- What the families' settings lines (M.settings) say alike: the LoRA phrase (", LoRA r=R on
-- a/b/c" with the scripts' rank, 4 by default, and the family's default targets unless
-- training.lora names its own; "" without LoRA) and the image size in pixels (width x height, or
-- the square's side).
function S.settings_parts(t, targets)
  local lora = ""
  if require("strategies.lora").wanted(t) then
    local lc = t.lora or {}
    lora = (", LoRA r=%d on %s"):format(lc.r or 4, table.concat(lc.targets or targets, "/"))
  end
  return lora, t.width and ("%dx%d"):format(t.width, t.resolution) or tostring(t.resolution)
end

-- Builds the step's graph up to the loss; returns the loss and the UNet.
function S.build(cx, cfg, fam)
  local t = cfg.training
  local full = not fam.unet_alone
  check_supported(fam, cfg)
  local pd, ac = S.precision(fam.name, t)
  if fam.autocast then ac = fam.autocast(t, pd, ac) end
  cx.autocast = ac
  cx.gpu = require("hw.gpus")[cfg.hardware.gpu]
  cx.attention = t.attention
  -- kernel launches per op as torch.profiler measured them for this UNet (nn.KERNELS)
  cx.measured_launches = true
  cx.arch = cx.arch or (cx.gpu and cx.gpu.arch)
  local n = t.micro_batch
  local width = t.width or t.resolution
  if t.resolution % 64 ~= 0 or width % 64 ~= 0 then
    error(("%s: training.resolution and training.width must be multiples of 64 (got %d x %d)")
          :format(fam.name, t.resolution, width), 0)
  end
  local lat, latw = t.resolution // 8, width // 8
  local ucfg = fam.unet_config
  local lat_c = fam.latent_channels or ucfg.in_channels or 4

  local unet = fam.denoiser and fam.denoiser() or U.UNet2DConditionModel(ucfg, "unet")
  -- peft's unet.add_adapter(LoraConfig(...)): the targeted Linears wrapped (lora.lua)
  local lora, lora_hit
  if require("strategies.lora").wanted(t) then
    local L = require "strategies.lora"
    -- adapters in the UNet's dtype: add_adapter (peft's inject_adapter_in_model) makes them
    -- on the base layer's device and dtype (BaseTunerLayer._move_adapter_to_device_of_base_layer;
    -- no PeftModel, so no autocast_adapter_dtype upcast), and diffusers' LoRA scripts cast them
    -- to fp32 (cast_training_params) only for fp16 (pub-s01's build: 11,612,160 adapter
    -- parameters, 22.15 MiB: two bytes each)
    lora = L.settings(t.lora, { r = 4, dropout = 0.0, targets = fam.lora_targets,
                                dtype = pd == "fp16" and "fp32" or pd })
    lora_hit = L.apply(unet, lora, nil)
  end

  -- build: the models directly in their dtype on the GPU, parameters in construction order
  cx.phase = "build"
  local te_mode = t.text_encoders
  local vdt = full and fam.vae_dtype(t, pd, ac) or nil
  local TE, V = {}, nil
  -- the text encoders and the VAE are not sharded (diffusers' scripts load them outside
  -- zero.Init and do not prepare them: only the UNet is wrapped)
  local shard_param = cx.shard_param
  cx.shard_param = nil
  if full and te_mode ~= "cached" then
    -- frozen text encoders are moved to the compute dtype (diffusers' weight_dtype: bf16/fp16
    -- under mixed precision); trained ones keep the parameter dtype
    local tr = te_mode == "trained"
    local tdt = tr and pd or (ac or pd)
    for i, e in ipairs(fam.encoders) do
      TE[i] = e.build and e.build(e) or clip.CLIPTextModel(e.cfg, e.prefix, e.output)
    end
    for i = 1, #TE do materialize(cx, TE[i], tdt, tr) end
  end
  if vdt then
    V = vae.AutoencoderKL(fam.vae_config or vae.config, "vae")
    materialize(cx, V, vdt, false)
  end
  cx.shard_param = shard_param
  local first = #cx.params + 1
  materialize(cx, unet, pd, not lora)
  registration_order(cx, unet, first)
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
  local ctx_dim = ucfg.cross_attention_dim
  if full then
    if vdt then
      inp.pixels = nn.input(cx, "pixel_values", { n, 3, t.resolution, width }, fam.pixels_dtype or vdt)
    else
      inp.latents = nn.input(cx, "latents", { n, lat_c, lat, latw }, act)
    end
    if te_mode == "cached" and fam.cached_text then
      fam.cached_text(cx, inp, n, act)
    elseif te_mode == "cached" then
      inp.context = nn.input(cx, "prompt_embeds", { n, 77, ctx_dim }, act)
      if fam.pooled_dim then
        inp.text_embeds = nn.input(cx, "pooled_prompt_embeds", { n, fam.pooled_dim }, act)
      end
    elseif not fam.ids_per_step then
      inp.ids = {}
      for i, e in ipairs(fam.encoders) do inp.ids[i] = nn.input(cx, e.ids, { n, e.tokens or 77 }, "int64") end
    end
    if fam.time_ids then inp.time_ids = nn.input(cx, "add_time_ids", { n, fam.time_ids }, act) end
  else
    inp.sample = nn.input(cx, "latents", { n, lat_c, lat, latw }, act)
    inp.target = nn.input(cx, "noise", { n, lat_c, lat, latw }, act)
    inp.context = nn.input(cx, "encoder_hidden_states", { n, 77, ctx_dim }, act)
    if fam.pooled_dim then inp.text_embeds = nn.input(cx, "text_embeds", { n, fam.pooled_dim }, act) end
    if fam.time_ids then inp.time_ids = nn.input(cx, "time_ids", { n, fam.time_ids }, act) end
  end
  -- (a family with its own noising draws its timesteps there)
  if not (full and fam.noise) then inp.timesteps = nn.input(cx, "timesteps", { n }, "int64") end
  cx.phase = "fwd"

  -- the passes' hooks on the UNet, outermost first: checkpoint regions, then sharding
  local ckpt_hooks
  if t.checkpointing and not t.inference then
    ckpt_hooks = require("strategies.checkpoint").module_hooks(unet, unet.checkpoint_classes,
                                                                unet.checkpoint_holds_args)
    register(ckpt_hooks, "first")
  end
  if cx.dp and cx.shard_params then
    register(require("strategies.shard").hooks(cx, unet, cx.dp.kind))
  end
  -- diffusers' compile_repeated_blocks: each repeated block compiled, inside the checkpoint
  -- that diffusers' eager forward wraps around block.__call__ (strategies/compile.lua)
  if t.compile and not t.inference then
    register(require("strategies.compile").block_hooks(unet, require("strategies.compile").REPEATED_BLOCKS[fam.name], t), "first")
  end
  if ckpt_hooks then register(ckpt_hooks, "last") end

  if full then
    -- latents = vae.encode(pixels).latent_dist.sample() * scaling_factor (no_grad)
    local function encode_latents()
      if not vdt then return end
      cx.no_grad = true
      local saved_ac = cx.autocast
      cx.autocast = nil
      local px = inp.pixels
      if px.dtype ~= vdt then px = nn.to(cx, px, vdt, "pixel_values.to_vae_dtype") end
      local l = mod.call(cx, V, px)
      cx.autocast = saved_ac
      if not fam.latents_as_encoded then l = nn.to(cx, l, act, "latents.to_unet_dtype") end
      cx.no_grad = false
      inp.latents = l
    end
    -- the text encoders, then what the family makes of their outputs
    local function encode_text()
      if te_mode == "cached" then return end
      local frozen = te_mode == "frozen"
      cx.no_grad = frozen
      local saved_ac = cx.autocast
      if fam.encoders_autocast == false and frozen then cx.autocast = nil end
      local outs = {}
      for i = 1, #TE do
        local ids = inp.ids and inp.ids[i]
        if not ids then
          -- the prompts tokenized on the CPU this step, the ids moved to the GPU
          local e = fam.encoders[i]
          ids = nn.op_sized(cx, { name = e.ids .. ".to_device", inputs = {},
                                  outs = { { e.ids, { n, e.tokens or 77 }, "int64" } } })
        end
        outs[i] = { mod.call(cx, TE[i], ids) }
        -- (the moved ids are the call's argument: alive until the encoder returns)
        if not (inp.ids and inp.ids[i]) then nn.release(cx, { ids }, fam.encoders[i].ids .. " dropped") end
        if fam.encoders[i].after then outs[i] = { fam.encoders[i].after(cx, outs, table.unpack(outs[i])) } end
      end
      inp.context, inp.text_embeds, inp.txt_ids = fam.encode(cx, outs)
      cx.autocast = saved_ac
      cx.no_grad = false
    end
    if fam.text_first then
      encode_text()
      encode_latents()
    else
      encode_latents()
      encode_text()
    end
    if fam.noise then
      fam.noise(cx, inp)
    else
      -- noise = randn_like(latents); timesteps; noisy = scheduler.add_noise(latents, noise, t)
      local ldt = inp.latents.dtype
      inp.target = nn.op_sized(cx, { name = "noise", inputs = {}, outs = { { "noise", inp.latents.shape, ldt } } })
      inp.sample = S.add_noise(cx, inp.latents, inp.target, inp.timesteps)
    end
  end

  -- cuBLASLt workspaces of the forward thread's handle (first addmm) and of the autograd
  -- thread's (its first GEMM comes in backward; kept from the end of forward here)
  cx.lt_workspace_pending = nn.lt_workspace(cx, "cublasLt workspace (forward)")
  cx.late_outputs = { nn.lt_workspace(cx, "cublasLt workspace (backward)") }
  local pred
  if fam.call then
    pred = fam.call(cx, unet, inp)
  else
    local added = fam.time_ids and { text_embeds = inp.text_embeds, time_ids = inp.time_ids } or nil
    pred = mod.call(cx, unet, inp.sample, inp.timesteps, inp.context, added)
  end
  local loss = fam.loss and fam.loss(cx, pred, inp) or nn.mse_loss(cx, "mse_loss", pred, inp.target)
  nn.end_forward(cx)
  cx.tokens = 0
  return loss, unet
end

return S
