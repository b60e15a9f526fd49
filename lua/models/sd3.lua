-- sd3.lua: Stable Diffusion 3 / 3.5: an SD3Transformer2DModel read from its diffusers
-- transformer/config.json (model.config; blocks/dit_sd3.lua builds it), CLIP ViT-L/14 and
-- OpenCLIP ViT-bigG/14 with their projections (penultimate hidden states concatenated to 2048
-- and zero-padded to T5's 4096; the projected pooled outputs concatenated: 2048) and T5 v1.1
-- XXL's encoder (max_sequence_length tokens, 77 by default as in the script), the 16-channel
-- VAE, trained as diffusers' examples/dreambooth/train_dreambooth_lora_sd3.py trains it; the
-- step itself is blocks/unet_step.lua's, shared with the UNet families.
--
-- What the script does, as modelled here:
--   - the transformer and the three text encoders are moved to weight_dtype (bf16 under
--     mixed_precision bf16), the VAE kept in fp32; LoRA (rank 4 by default, --rank) on to_k,
--     to_q, to_v, to_out.0 of the frozen transformer (attn2 too, where a block has it: peft
--     matches the names), the adapters in weight_dtype (fp32 under fp16); the transformer's
--     forward runs under Accelerate's autocast (precision = "lora_bf16");
--   - text embeddings: precomputed once and the encoders deleted (text_encoders = "cached": an
--     --instance_prompt for every image) or computed every step without autograd ("frozen");
--     --train_text_encoder is not modelled (exit 2);
--   - latents: the fp32 VAE encodes every step, (sample - shift_factor) * scaling_factor, cast to
--     weight_dtype (vae = "fp32"), or cached (--cache_latents: vae = "cached");
--   - flow matching: noise, the sigmas of the sampled timesteps (the weighting scheme samples
--     u on the CPU), sigma noise + (1 - sigma) x, the transformer, the preconditioned output
--     model_pred * (-sigma) + noisy (--precondition_outputs, on by default) against target =
--     latents (else target = noise - latents), the weighting (ones for logit_normal, mode and
--     none; sigma ** -2 for sigma_sqrt; 2 / (pi (1 - 2 sigma + 2 sigma^2)) for cosmap), the fp32
--     weighted mean-squared loss;
--   - --gradient_checkpointing: every JointTransformerBlock a checkpointed unit.
local unet_step = require "models.blocks.unet_step"
local dit_script = require "models.blocks.dit_script"
local clip = require "models.blocks.clip"
local t5 = require "models.blocks.t5"
local vae = require "models.blocks.vae"
local nn = require "vrsim.nn"
local mod = require "vrsim.module"
local sdxl = require "models.sdxl"

local M = {}

M.CONFIG_CLASS = "SD3Transformer2DModel"

M.schema = {
  training = {
    text_encoders = { "string", "cached", "sd3: cached (prompt embeddings precomputed, the encoders deleted) or frozen (CLIP-L, CLIP-G and T5-XXL run every step under no_grad)" },
    vae = { "string", "fp32", "sd3: VAE encode dtype fp32 (the script's), bf16, fp16, weight (weight_dtype), or cached (--cache_latents)" },
    width = { "integer", nil, "image width in pixels for a non-square image (resolution is then the height)" },
    max_sequence_length = { "integer", 77, "sd3: T5 prompt tokens (--max_sequence_length)" },
    weighting_scheme = { "string", "logit_normal", "sd3: --weighting_scheme: logit_normal, mode, none, sigma_sqrt, cosmap" },
    precondition_outputs = { "boolean", true, "sd3: --precondition_outputs (model_pred * -sigma + noisy against the latents)" },
  },
}

M.choices = {
  text_encoders = { frozen = 1, cached = 1 },
  vae = { weight = 1, fp32 = 1, bf16 = 1, fp16 = 1, cached = 1 },
  weighting_scheme = { logit_normal = 1, mode = 1, none = 1, sigma_sqrt = 1, cosmap = 1 },
}

-- SD3Transformer2DModel.__init__'s defaults, for a key the config leaves out.
M.READ = {
  sample_size = 128, patch_size = 2, in_channels = 16, num_layers = 18, attention_head_dim = 64,
  num_attention_heads = 18, joint_attention_dim = 4096, caption_projection_dim = 1152,
  pooled_projection_dim = 2048, out_channels = 16, pos_embed_max_size = 96,
  dual_attention_layers = {}, qk_norm = false,
}
-- keys that change no tensor vrsim simulates (sample_size sizes nothing once pos_embed_max_size
-- is set: the table is pos_embed_max_size squared)
M.NEUTRAL = { _class_name = 1, _diffusers_version = 1, _name_or_path = 1 }

-- peft's default targets in train_dreambooth_lora_sd3.py (--lora_layers unset).
M.LORA_TARGETS = { "to_k", "to_q", "to_v", "to_out.0" }

local function is_int(v) return math.type(v) == "integer" or (type(v) == "number" and v == math.floor(v) and v > 0) end

-- Reads model.config (a path or a table): the SD3Transformer2DModel config, key by key; a key
-- vrsim does not read, or a value it does not model, is an error naming it.
function M.read_config(src)
  if src == nil then
    error("sd3: arch sd3 needs model.config, a diffusers transformer/config.json "
          .. "(scenarios/configs/sd35-large-transformer.json, sd35-medium-transformer.json)", 0)
  end
  local c = require("models.hf").read(src)
  local where = type(src) == "string" and src or "model.config"
  local head = where .. ": arch sd3 reads an SD3Transformer2DModel config"
  if c._class_name ~= M.CONFIG_CLASS then
    local what = c._class_name and ("a diffusers %s config"):format(tostring(c._class_name))
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
    u[k] = v
  end
  for _, k in ipairs { "sample_size", "patch_size", "in_channels", "num_layers", "attention_head_dim",
                       "num_attention_heads", "joint_attention_dim", "caption_projection_dim",
                       "pooled_projection_dim", "out_channels", "pos_embed_max_size" } do
    if not is_int(u[k]) then
      error(("%s; %s must be a positive integer (got %s)"):format(head, k, sdxl.shown(u[k])), 0)
    end
    u[k] = math.tointeger(u[k])
  end
  if u.qk_norm == false then
    u.qk_norm = nil
  elseif u.qk_norm ~= "rms_norm" then
    error(("%s; qk_norm = %s: only null and \"rms_norm\" are modelled"):format(head, sdxl.shown(u.qk_norm)), 0)
  end
  if u.caption_projection_dim ~= u.num_attention_heads * u.attention_head_dim then
    error(("%s; caption_projection_dim %d is not num_attention_heads * attention_head_dim %d: the "
           .. "blocks' context projections take the inner width"):format(head, u.caption_projection_dim,
           u.num_attention_heads * u.attention_head_dim), 0)
  end
  if u.in_channels ~= vae.config16.latent or u.out_channels ~= u.in_channels then
    error(("%s; in_channels = %d, out_channels = %d: the 16-channel VAE's latents are 16 channels "
           .. "in and out"):format(head, u.in_channels, u.out_channels), 0)
  end
  if type(u.dual_attention_layers) ~= "table" then
    error(("%s; dual_attention_layers must be a list of block indices"):format(head), 0)
  end
  local dual = {}
  for _, i in ipairs(u.dual_attention_layers) do
    if math.type(i) ~= "integer" and not (type(i) == "number" and i == math.floor(i)) or i < 0 or i >= u.num_layers then
      error(("%s; dual_attention_layers = %s: every entry must be a block index 0 to %d"):format(
            head, sdxl.shown(u.dual_attention_layers), u.num_layers - 1), 0)
    end
    dual[math.tointeger(i)] = true
  end
  u.dual_attention_layers = dual
  u.name = c._name_or_path
  return u
end

-- The encoders the published pipelines pair with an SD3 transformer: pooled CLIP-L (768) +
-- CLIP-G (1280) projections, T5-XXL (4096).
local function check_encoders(u, t)
  if t.text_encoders == "cached" then return end
  if u.joint_attention_dim ~= t5.configs["t5-v1_1-xxl"].d_model or u.pooled_projection_dim ~= 768 + 1280 then
    error(("sd3: text_encoders = \"%s\" runs CLIP-L, CLIP-G (pooled 2048) and T5-XXL (4096), and this "
           .. "transformer takes joint_attention_dim %d, pooled_projection_dim %d (text_encoders = "
           .. "\"cached\" takes them as given)"):format(t.text_encoders, u.joint_attention_dim,
           u.pooled_projection_dim), 0)
  end
end

-- The training loop's flow-matching part: noise, the timesteps (u drawn on the CPU by the
-- weighting scheme, indexed into the scheduler's timesteps and moved to the GPU), get_sigmas,
-- the noisy input.
local function noise(cx, inp)
  local lat = inp.latents
  local n = lat.shape[1]
  local dt = lat.dtype
  local z = nn.op_sized(cx, { name = "noise", inputs = {}, outs = { { "noise", lat.shape, dt } } })
  local ts = nn.op_sized(cx, { name = "timesteps.to_device", inputs = {}, outs = { { "timesteps", { n }, "fp32" } } })
  local all = nn.op_sized(cx, { name = "get_sigmas.sigmas", inputs = {}, outs = { { "scheduler.sigmas", { 1000 }, dt } } })
  local st = nn.op_sized(cx, { name = "get_sigmas.timesteps", inputs = {}, outs = { { "scheduler.timesteps", { 1000 }, "fp32" } } })
  local idx = nn.op_sized(cx, { name = "get_sigmas.step_indices", inputs = { st, ts },
                                outs = { { "step_indices", { n }, "int64" } } })
  local sigma = nn.op_sized(cx, { name = "get_sigmas.index", inputs = { all, idx },
                                  outs = { { "sigmas", { n, 1, 1, 1 }, dt } } })
  -- sigmas * noise + (1.0 - sigmas) * model_input
  local b = nn.mul(cx, "flow.scaled_noise", sigma, z, dt)
  local om = nn.ew(cx, "flow.one_minus_sigma", { sigma }, dt)
  local a = nn.mul(cx, "flow.scaled_latents", om, lat, dt)
  inp.sample = nn.add(cx, "noisy_model_input", b, a)
  inp.noise = z
  inp.timestep = ts
  inp.sigmas = sigma
end

-- transformer(hidden_states=noisy, timestep, encoder_hidden_states, pooled_projections)[0]: the
-- unpatchify's einsum is a copy (its backward copies the gradient back).
local function call(cx, tr, inp)
  local lat = inp.latents
  local pred = mod.call(cx, tr, inp.sample, inp.context, inp.text_embeds, inp.timestep)
  return nn.copy(cx, "unpatchify", pred, lat.shape, { grad = "new" })
end

-- Preconditioning, target, weighting, loss: mean((weighting.float() * (model_pred.float() -
-- target.float()) ** 2).reshape(n, -1), 1).mean().
local function loss(cx, pred, inp, t)
  local sig = inp.sigmas
  local target
  if t.precondition_outputs then
    -- model_pred * (-sigmas) + noisy_model_input; target = model_input
    local ns = nn.ew(cx, "precondition.neg_sigma", { sig }, sig.dtype)
    local p = nn.mul(cx, "precondition.scaled", pred, ns, pred.dtype)
    pred = nn.add(cx, "precondition.add_noisy", p, inp.sample)
    target = inp.latents
  else
    target = nn.op_sized(cx, { name = "target", inputs = { inp.noise, inp.latents },
                               outs = { { "target", pred.shape, inp.latents.dtype } } })
  end
  local pf = nn.to(cx, pred, "fp32", "loss.pred_float")
  local tf = nn.to(cx, target, "fp32", "loss.target_float")
  local diff = nn.op_sized(cx, { name = "loss.sub", inputs = { pf, tf },
                                 outs = { { "loss.diff", pred.shape, "fp32" } }, grads = { { pass = 1 }, "none" } })
  local sq = nn.op_sized(cx, { name = "loss.pow", inputs = { diff }, outs = { { "loss.squared", pred.shape, "fp32" } },
                               saves = { diff }, bwd_workspace = { nn.bytes(pred.shape, "fp32"), nn.bytes(pred.shape, "fp32") },
                               bwd_workspace_first = true })
  -- compute_loss_weighting_for_sd3: sigma ** -2.0, the cosmap's four ops, or ones_like; .float()
  local w
  local ops = ({ sigma_sqrt = { "pow" }, cosmap = { "two_sigma", "two_sigma_sq", "bot", "div" } })[t.weighting_scheme]
              or { "ones_like" }
  w = sig
  for _, o in ipairs(ops) do
    w = nn.op_sized(cx, { name = "loss.weighting." .. o, inputs = { w },
                          outs = { { "loss.weighting." .. o, sig.shape, sig.dtype } }, grads = { "none" } })
  end
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
  local clip_tokens = clip.configs["vit-l-14-proj"].positions
  return {
    name = "sd3", unet_config = { cross_attention_dim = u.joint_attention_dim }, unet_alone = false,
    denoiser = function() return require("models.blocks.dit_sd3").SD3Transformer2DModel(u, "transformer") end,
    latent_channels = vae.config16.latent, vae_config = vae.config16,
    -- CLIPTextModelWithProjection (L, then G: hidden_states[-2] and text_embeds), T5EncoderModel
    -- encode_prompt (custom prompts: compute_text_embeddings every step): each CLIP's
    -- hidden_states[-2] `.to(dtype)` (a no-op) and `.repeat(1, 1, 1)` (a copy), kept in a list
    -- with its text_embeds; after CLIP-G, clip_prompt_embeds = cat(L, G, -1) and pooled =
    -- cat(L pooled, G pooled, -1), before T5 runs; the lists live to encode_prompt's return
    encoders = {
      { cfg = clip.configs["vit-l-14-proj"], prefix = "text_encoder", ids = "input_ids",
        after = function(cx, _, pe, pooled) return nn.copy(cx, "text_encoder.prompt_embeds.repeat", pe, pe.shape), pooled end },
      { cfg = clip.configs["vit-bigg-14"], prefix = "text_encoder_2", ids = "input_ids_2",
        after = function(cx, outs, pe, pooled)
          pe = nn.copy(cx, "text_encoder_2.prompt_embeds.repeat", pe, pe.shape)
          local lpe, lpooled = outs[1][1], outs[1][2]
          local c = nn.cat(cx, "clip_prompt_embeds", { lpe, pe }, 3)
          local p = nn.cat(cx, "pooled_prompt_embeds", { lpooled, pooled }, 2)
          return c, p, { lpe, pe, lpooled, pooled }
        end },
      { build = function() return t5.T5EncoderModel(T5, "text_encoder_3") end, prefix = "text_encoder_3",
        ids = "input_ids_3", tokens = seq },
    },
    -- then T5's output repeated (a copy); F.pad of the CLIP embeddings to T5's width (a new
    -- tensor); prompt_embeds = cat(clip, t5, -2)
    encode = function(cx, outs)
      local c, pooled, lists = outs[2][1], outs[2][2], outs[2][3]
      local n = c.shape[1]
      local t5o = nn.copy(cx, "text_encoder_3.prompt_embeds.repeat", outs[3][1], outs[3][1].shape)
      c = nn.op_sized(cx, { name = "clip_prompt_embeds.pad", inputs = { c },
                            outs = { { "clip_prompt_embeds.padded", { n, clip_tokens, T5.d_model }, c.dtype } } })
      local pe = nn.cat(cx, "prompt_embeds", { c, t5o }, 2)
      nn.release(cx, lists, "encode_prompt's lists dropped")
      return pe, pooled
    end,
    cached_text = function(cx, inp, n, dt)
      inp.context = nn.input(cx, "prompt_embeds", { n, clip_tokens + seq, u.joint_attention_dim }, dt)
      inp.text_embeds = nn.input(cx, "pooled_prompt_embeds", { n, u.pooled_projection_dim }, dt)
    end,
    vae_dtype = function(tt, pd, ac)
      if tt.vae == "cached" then return nil end
      if tt.vae == "weight" then return pd == "fp32" and (ac or pd) or pd end
      return tt.vae
    end,
    autocast = function(tt, _, ac)
      return ac or ({ lora_bf16 = "bf16", lora_fp16 = "fp16" })[tt.precision]
    end,
    lora_targets = M.LORA_TARGETS,
    encoders_autocast = false,
    -- the prompts encoded before the VAE runs, the ids moved to the GPU in the step, the
    -- collate_fn's fp32 pixel_values cast to the VAE's dtype (`.to(dtype=vae.dtype)`)
    text_first = true, ids_per_step = true, pixels_dtype = "fp32",
    noise = noise, call = call, loss = function(cx, pred, inp) return loss(cx, pred, inp, t) end,
  }
end

function M.build(cx, cfg)
  local t = cfg.training
  local u = M.read_config(cfg.model.config)
  dit_script.refuse("sd3", t, { encoders = "CLIP-L and CLIP-G", no_ema = "diffusers' SD3 LoRA script keeps no EMA copy" })
  if not M.choices.weighting_scheme[t.weighting_scheme] then
    error(("sd3: training.weighting_scheme = \"%s\": logit_normal, mode, none, sigma_sqrt or cosmap")
          :format(tostring(t.weighting_scheme)), 0)
  end
  check_encoders(u, t)
  cx.model_name = u.name or (u.dual_attention_layers[0] and "sd3.5-medium" or "sd3")
  dit_script.notes("sd3", t, cfg, "train_dreambooth_sd3.py")
  return unet_step.build(cx, cfg, family(u, t))
end

function M.settings(cfg)
  local t = cfg.training
  local lora, px = unet_step.settings_parts(t, M.LORA_TARGETS)
  return ("sd3, micro-batch %d x %spx, %s%s, %s %s%s, text encoders %s (%d T5 tokens), VAE %s, weighting %s%s"):format(
    t.micro_batch, px, t.precision, lora, t.optimizer, t.optimizer_impl,
    t.checkpointing and ", checkpointing" or "", t.text_encoders, t.max_sequence_length, t.vae,
    t.weighting_scheme, cfg.allocator.conf ~= "" and (", " .. cfg.allocator.conf) or "")
end

return M
