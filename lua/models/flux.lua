-- flux.lua: Flux.1 (dev / schnell): a FluxTransformer2DModel read from its diffusers
-- transformer/config.json (model.config; blocks/dit_flux.lua builds it), CLIP ViT-L/14 for the
-- pooled prompt embedding and T5 v1.1 XXL's encoder for the prompt embeddings
-- (max_sequence_length tokens, 512 by default), the 16-channel VAE, trained as diffusers'
-- examples/dreambooth/train_dreambooth_lora_flux.py (LoRA) and train_dreambooth_flux.py (full)
-- train it; the step itself is blocks/unet_step.lua's, shared with the UNet families.
--
-- What the scripts do, as modelled here:
--   - the VAE, the transformer and both text encoders are moved to weight_dtype (bf16 under
--     mixed_precision bf16); LoRA (rank 4 by default, --rank) on to_k, to_q, to_v, to_out.0 of the
--     frozen transformer, the adapters in weight_dtype (cast to fp32 only under fp16); the
--     transformer's forward runs under Accelerate's autocast, so precision = "lora_bf16" is bf16
--     weights with bf16 autocast (layer norms in fp32);
--   - text embeddings: precomputed once and the encoders deleted (text_encoders = "cached": an
--     --instance_prompt for every image) or computed every step without autograd ("frozen":
--     custom prompts per image); training the CLIP text encoder (--train_text_encoder) is not
--     modelled (exit 2);
--   - latents: VAE-encoded every step (vae = "weight": in weight_dtype), or cached (--cache_latents:
--     vae = "cached", the VAE deleted; the cached latent distributions of the whole dataset,
--     which the script keeps on the GPU, are not counted: a named note);
--   - flow matching: noise, sigmas, (1 - sigma) x + sigma noise, the 2x2 packing of the latents
--     to (n, h/2 * w/2, 64), the guidance value (dev), the transformer, the unpacking, target =
--     noise - latents, the fp32 weighted mean-squared loss;
--   - --gradient_checkpointing: enable_gradient_checkpointing on the transformer (every double and
--     single block a checkpointed unit).
local unet_step = require "models.blocks.unet_step"
local dit_script = require "models.blocks.dit_script"
local clip = require "models.blocks.clip"
local t5 = require "models.blocks.t5"
local vae = require "models.blocks.vae"
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local sdxl = require "models.sdxl"

local M = {}

M.CONFIG_CLASS = "FluxTransformer2DModel"

M.schema = {
  training = {
    text_encoders = { "string", "cached", "flux: cached (prompt embeddings precomputed, the encoders deleted) or frozen (CLIP-L and T5-XXL run every step under no_grad)" },
    vae = { "string", "weight", "flux: VAE encode dtype weight (the script's weight_dtype), fp32, bf16, fp16, or cached (--cache_latents)" },
    width = { "integer", nil, "image width in pixels for a non-square image (resolution is then the height)" },
    max_sequence_length = { "integer", 512, "flux: T5 prompt tokens (--max_sequence_length)" },
  },
}

M.choices = {
  text_encoders = { frozen = 1, cached = 1 },
  vae = { weight = 1, fp32 = 1, bf16 = 1, fp16 = 1, cached = 1 },
}

-- FluxTransformer2DModel.__init__'s defaults, for a key the config leaves out.
M.READ = {
  patch_size = 1, in_channels = 64, out_channels = false, num_layers = 19, num_single_layers = 38,
  attention_head_dim = 128, num_attention_heads = 24, joint_attention_dim = 4096,
  pooled_projection_dim = 768, guidance_embeds = false, axes_dims_rope = { 16, 56, 56 },
}
-- keys that change no tensor vrsim simulates
M.NEUTRAL = { _class_name = 1, _diffusers_version = 1, _name_or_path = 1 }

-- peft's targets in train_dreambooth_lora_flux.py.
M.LORA_TARGETS = { "to_k", "to_q", "to_v", "to_out.0" }

local function is_int(v) return math.type(v) == "integer" or (type(v) == "number" and v == math.floor(v) and v > 0) end

-- Reads model.config (a path or a table): the FluxTransformer2DModel config, key by key; a key
-- vrsim does not read, or a value it does not model, is an error naming it.
function M.read_config(src)
  if src == nil then
    error("flux: arch flux needs model.config, a diffusers transformer/config.json "
          .. "(scenarios/configs/flux1-dev-transformer.json, flux1-schnell-transformer.json)", 0)
  end
  local c = require("models.hf").read(src)
  local where = type(src) == "string" and src or "model.config"
  local head = where .. ": arch flux reads a FluxTransformer2DModel config"
  if c._class_name ~= M.CONFIG_CLASS then
    local what = c._class_name and ("a diffusers %s config"):format(tostring(c._class_name))
                 or (c.architectures or c.model_type) and ("a transformers %s config"):format(
                   tostring(type(c.architectures) == "table" and c.architectures[1] or c.model_type))
                 or "not a diffusers model config (no _class_name)"
    error(("%s; this is %s"):format(head, what), 0)
  end
  local other = {}
  for k in pairs(c) do
    if M.READ[k] == nil and not M.NEUTRAL[k] then other[#other + 1] = tostring(k) end
  end
  table.sort(other)
  if #other > 0 then
    error(("%s; it has keys vrsim does not read: %s"):format(head, table.concat(other, ", ")), 0)
  end
  local u = {}
  for k, def in pairs(M.READ) do
    local v = c[k]
    if v == nil then v = def end
    -- (false stands for null in READ: out_channels; guidance_embeds is a boolean)
    if v ~= false or k == "guidance_embeds" then u[k] = v end
  end
  for _, k in ipairs { "patch_size", "in_channels", "num_layers", "num_single_layers", "attention_head_dim",
                       "num_attention_heads", "joint_attention_dim", "pooled_projection_dim" } do
    if not is_int(u[k]) then
      error(("%s; %s must be a positive integer (got %s)"):format(head, k, sdxl.shown(u[k])), 0)
    end
    u[k] = math.tointeger(u[k])
  end
  if u.out_channels ~= nil and u.out_channels ~= u.in_channels then
    error(("%s; out_channels = %s: only out_channels = in_channels is modelled (the training "
           .. "scripts unpack the prediction to the latents' shape)"):format(head, sdxl.shown(u.out_channels)), 0)
  end
  if u.patch_size ~= 1 then
    error(("%s; patch_size = %d: only 1 is modelled (FluxPipeline packs the latents' 2x2 patches "
           .. "itself)"):format(head, u.patch_size), 0)
  end
  if u.in_channels ~= 4 * vae.config16.latent then
    error(("%s; in_channels = %d: the 16-channel VAE's latents packed in 2x2 patches are 64 "
           .. "channels"):format(head, u.in_channels), 0)
  end
  if type(u.guidance_embeds) ~= "boolean" then
    error(("%s; guidance_embeds must be true or false (got %s)"):format(head, sdxl.shown(u.guidance_embeds)), 0)
  end
  local axes, sum = u.axes_dims_rope, 0
  if type(axes) ~= "table" or #axes == 0 then error(("%s; axes_dims_rope must be a list"):format(head), 0) end
  for _, d in ipairs(axes) do
    if not is_int(d) or d % 2 ~= 0 then
      error(("%s; axes_dims_rope = %s: every axis must be an even integer"):format(head, sdxl.shown(axes)), 0)
    end
    sum = sum + d
  end
  if sum ~= u.attention_head_dim then
    error(("%s; axes_dims_rope = %s sums to %d, not attention_head_dim %d"):format(head, sdxl.shown(axes),
          sum, u.attention_head_dim), 0)
  end
  u.name = c._name_or_path
  return u
end

-- The text encoders the published pipelines pair with a Flux transformer: CLIP ViT-L/14 (its
-- pooled output, pooled_projection_dim 768) and T5 v1.1 XXL (joint_attention_dim 4096).
local function check_encoders(u, t)
  if t.text_encoders == "cached" then return end
  local T5 = t5.configs["t5-v1_1-xxl"]
  if u.joint_attention_dim ~= T5.d_model or u.pooled_projection_dim ~= clip.configs["vit-l-14"].hidden then
    error(("flux: text_encoders = \"%s\" runs CLIP ViT-L/14 (768) and T5-XXL (4096), and this "
           .. "transformer takes joint_attention_dim %d, pooled_projection_dim %d: no published "
           .. "encoder pair gives those (text_encoders = \"cached\" takes them as given)"):format(
           t.text_encoders, u.joint_attention_dim, u.pooled_projection_dim), 0)
  end
end

-- The step's flow-matching part (the script's training loop): latent_image_ids, noise, the sigmas
-- of the sampled timesteps, the noisy latents, their 2x2 packing, guidance, timesteps / 1000.
local function noise(cx, inp)
  local lat = inp.latents
  local n, c, hh, ww = lat.shape[1], lat.shape[2], lat.shape[3], lat.shape[4]
  local dt = lat.dtype
  local tokens = (hh // 2) * (ww // 2)
  -- FluxPipeline._prepare_latent_image_ids: zeros(h/2, w/2, 3), the row and column aranges added,
  -- reshaped to (h/2 * w/2, 3), in weight_dtype
  inp.img_ids = nn.op_sized(cx, { name = "latent_image_ids", inputs = {},
                                  outs = { { "latent_image_ids", { tokens, 3 }, dt } } })
  local z = nn.op_sized(cx, { name = "noise", inputs = {}, outs = { { "noise", lat.shape, dt } } })
  -- timesteps = scheduler.timesteps[indices].to(device) (n, fp32); get_sigmas: the scheduler's
  -- sigmas .to(device, dtype) and timesteps .to(device) (1000 each), the step indices (a list,
  -- made an index tensor on the GPU), sigma gathered and unsqueezed to (n, 1, 1, 1)
  local ts = nn.op_sized(cx, { name = "timesteps.to_device", inputs = {}, outs = { { "timesteps", { n }, "fp32" } } })
  local all = nn.op_sized(cx, { name = "get_sigmas.sigmas", inputs = {}, outs = { { "scheduler.sigmas", { 1000 }, dt } } })
  local st = nn.op_sized(cx, { name = "get_sigmas.timesteps", inputs = {}, outs = { { "scheduler.timesteps", { 1000 }, "fp32" } } })
  local idx = nn.op_sized(cx, { name = "get_sigmas.step_indices", inputs = { st, ts },
                                outs = { { "step_indices", { n }, "int64" } } })
  local sigma = nn.op_sized(cx, { name = "get_sigmas.index", inputs = { all, idx },
                                  outs = { { "sigmas", { n, 1, 1, 1 }, dt } } })
  local om = nn.ew(cx, "flow.one_minus_sigma", { sigma }, dt)
  local a = nn.mul(cx, "flow.scaled_latents", om, lat, dt)
  local b = nn.mul(cx, "flow.scaled_noise", sigma, z, dt)
  local noisy = nn.add(cx, "noisy_model_input", a, b)
  -- FluxPipeline._pack_latents: view(n, c, h/2, 2, w/2, 2).permute(0, 2, 4, 1, 3, 5).reshape: a copy
  inp.sample = nn.copy(cx, "pack_latents", noisy, { n, tokens, c * 4 })
  inp.noise = z
  if cx.flux_guidance then
    -- torch.tensor([guidance_scale], device=...).expand(n): one fp32 value
    inp.guidance = nn.op_sized(cx, { name = "guidance", inputs = {}, outs = { { "guidance", { 1 }, "fp32" } } })
    inp.guidance = nn.view(cx, inp.guidance, { n }, "guidance.expand")
  end
  inp.timestep = nn.op_sized(cx, { name = "timesteps.div_1000", inputs = { ts },
                                   outs = { { "timestep", { n }, "fp32" } } })
  if not inp.txt_ids then
    -- encode_prompt: text_ids = torch.zeros(prompt_embeds.shape[1], 3) in weight_dtype
    inp.txt_ids = nn.op_sized(cx, { name = "text_ids", inputs = {},
                                    outs = { { "text_ids", { inp.context.shape[2], 3 }, dt } } })
  end
  -- (the loss weighting is made from the sigmas: ones_like)
  inp.sigmas = sigma
end

-- transformer(hidden_states=packed, timestep, guidance, pooled_projections, encoder_hidden_states,
-- txt_ids, img_ids)[0], then FluxPipeline._unpack_latents (view, permute, reshape: a copy, whose
-- backward copies the gradient back to the packed layout).
local function call(cx, tr, inp)
  local lat = inp.latents
  local pred = mod.call(cx, tr, inp.sample, inp.context, inp.text_embeds, inp.timestep, inp.img_ids,
                        inp.txt_ids, inp.guidance)
  return nn.copy(cx, "unpack_latents", pred, lat.shape, { grad = "new" })
end

-- target = noise - model_input; loss = mean((weighting.float() * (model_pred.float() -
-- target.float()) ** 2).reshape(n, -1), 1).mean(): the fp32 casts, the difference, its square
-- (PowBackward keeps the difference; SubBackward passes the gradient on), the weighting, the
-- per-sample mean, the mean.
local function loss(cx, pred, inp)
  local target = nn.op_sized(cx, { name = "target", inputs = { inp.noise, inp.latents },
                                   outs = { { "target", pred.shape, inp.latents.dtype } } })
  local pf = nn.to(cx, pred, "fp32", "loss.pred_float")
  local tf = nn.to(cx, target, "fp32", "loss.target_float")
  local diff = nn.op_sized(cx, { name = "loss.sub", inputs = { pf, tf },
                                 outs = { { "loss.diff", pred.shape, "fp32" } }, grads = { { pass = 1 }, "none" } })
  -- PowBackward0 (grad * 2 * diff): its two temporaries before the result, as in LlamaRMSNorm
  local sq = nn.op_sized(cx, { name = "loss.pow", inputs = { diff }, outs = { { "loss.squared", pred.shape, "fp32" } },
                               saves = { diff }, bwd_workspace = { nn.bytes(pred.shape, "fp32"), nn.bytes(pred.shape, "fp32") },
                               bwd_workspace_first = true })
  -- compute_loss_weighting_for_sd3("none"): ones_like(sigmas), then .float()
  local w = nn.op_sized(cx, { name = "loss.weighting", inputs = { inp.sigmas },
                              outs = { { "loss.weighting", inp.sigmas.shape, inp.sigmas.dtype } }, grads = { "none" } })
  w = nn.to(cx, w, "fp32", "loss.weighting.float")
  local ws = nn.mul(cx, "loss.weighted", w, sq, "fp32")
  local n = pred.shape[1]
  local per = nn.op_sized(cx, { name = "loss.mean_per_sample", kind = "reduce_rows", inputs = { ws },
                                outs = { { "loss.per_sample", { n }, "fp32" } } })
  local l = nn.new_tensor(cx, "loss", {}, "fp32", true)
  local outs = { l }
  for _, e in ipairs(cx.late_outputs or {}) do outs[#outs + 1] = e end
  nn.op_sized(cx, { name = "loss.mean", kind = "reduce_rows", inputs = { per }, out_tensors = outs })
  return l
end

local function family(u, t)
  local T5 = t5.configs["t5-v1_1-xxl"]
  local seq = t.max_sequence_length
  return {
    name = "flux", unet_config = { cross_attention_dim = u.joint_attention_dim }, unet_alone = false,
    denoiser = function() return require("models.blocks.dit_flux").FluxTransformer2DModel(u, "transformer") end,
    latent_channels = vae.config16.latent, vae_config = vae.config16,
    -- CLIPTextModel's pooler_output, then T5EncoderModel's last hidden state (encode_prompt's order)
    encoders = {
      { cfg = clip.configs["vit-l-14"], prefix = "text_encoder", ids = "input_ids", output = "pooled",
        -- _encode_prompt_with_clip's pooler_output `.to(dtype)` (a no-op), `.repeat(1, 1, 1)` (a
        -- copy: num_images_per_prompt) and `.view`, before T5 runs
        after = function(cx, _, pooled) return nn.copy(cx, "pooled_prompt_embeds.repeat", pooled, pooled.shape) end },
      { build = function() return t5.T5EncoderModel(T5, "text_encoder_2") end, prefix = "text_encoder_2",
        ids = "input_ids_2", tokens = seq },
    },
    -- _encode_prompt_with_t5's tail as CLIP's (the repeat a copy); then encode_prompt's
    -- text_ids = torch.zeros(seq, 3).to(device, dtype)
    encode = function(cx, outs)
      local pooled, embeds = outs[1][1], outs[2][1]
      embeds = nn.copy(cx, "prompt_embeds.repeat", embeds, embeds.shape)
      local ids = nn.op_sized(cx, { name = "text_ids", inputs = {},
                                    outs = { { "text_ids", { seq, 3 }, embeds.dtype } } })
      return embeds, pooled, ids
    end,
    cached_text = function(cx, inp, n, dt)
      inp.context = nn.input(cx, "prompt_embeds", { n, seq, u.joint_attention_dim }, dt)
      inp.text_embeds = nn.input(cx, "pooled_prompt_embeds", { n, u.pooled_projection_dim }, dt)
      inp.txt_ids = nn.input(cx, "text_ids", { seq, 3 }, dt)
    end,
    vae_dtype = function(tt, pd, ac)
      if tt.vae == "cached" then return nil end
      if tt.vae == "weight" then return pd == "fp32" and (ac or pd) or pd end
      return tt.vae
    end,
    -- Accelerate's autocast around the prepared transformer's forward, whatever the weights' dtype
    autocast = function(tt, _, ac)
      return ac or ({ lora_bf16 = "bf16", lora_fp16 = "fp16" })[tt.precision]
    end,
    lora_targets = M.LORA_TARGETS,
    latents_as_encoded = true, encoders_autocast = false,
    -- custom prompts are encoded (compute_text_embeddings) before the VAE encodes the batch's
    -- fp32 pixel_values, cast to the VAE's dtype (`.to(dtype=vae.dtype)`)
    -- (custom prompts: tokenized every step, compute_text_embeddings moves the ids to the GPU)
    text_first = true, pixels_dtype = "fp32", ids_per_step = true,
    noise = noise, call = call, loss = loss,
  }
end

function M.build(cx, cfg)
  local t = cfg.training
  local u = M.read_config(cfg.model.config)
  dit_script.refuse("flux", t, { encoders = "CLIP ViT-L/14", no_ema = "diffusers' Flux scripts keep no EMA copy" })
  check_encoders(u, t)
  if t.resolution % 16 ~= 0 or (t.width or t.resolution) % 16 ~= 0 then
    error("flux: training.resolution and width must be multiples of 16 (8x VAE, 2x2 packing)", 0)
  end
  cx.flux_guidance = u.guidance_embeds
  cx.model_name = u.guidance_embeds and "flux-dev" or "flux-schnell"
  dit_script.notes("flux", t, cfg, "train_dreambooth_flux.py")
  return unet_step.build(cx, cfg, family(u, t))
end

function M.settings(cfg)
  local t = cfg.training
  local lora, px = unet_step.settings_parts(t, M.LORA_TARGETS)
  return ("flux, micro-batch %d x %spx, %s%s, %s %s%s, text encoders %s (%d T5 tokens), VAE %s%s"):format(
    t.micro_batch, px, t.precision, lora, t.optimizer, t.optimizer_impl,
    t.checkpointing and ", checkpointing" or "", t.text_encoders, t.max_sequence_length, t.vae,
    cfg.allocator.conf ~= "" and (", " .. cfg.allocator.conf) or "")
end

return M
