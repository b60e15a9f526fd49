-- recipes/diffusers.lua: diffusers' SDXL training scripts run from their launch command, saved in
-- a text file (`accelerate launch train_text_to_image_lora_sdxl.py --resolution=1024 ...`, read
-- by recipes/cmdline.lua), into a vrsim scenario of model.arch sdxl.
--
-- From diffusers' examples/text_to_image (main, August 2026): train_text_to_image_lora_sdxl.py
-- (the UNet frozen in the weight dtype, peft LoRA of rank --rank on to_k, to_q, to_v, to_out.0
-- with lora_alpha = rank, the adapters cast to fp32 under fp16 only; both text encoders in the
-- weight dtype, run each step without gradients; the VAE in fp32 unless
-- --pretrained_vae_model_name_or_path, encoding each step) and train_text_to_image_sdxl.py (the
-- UNet trained in fp32 under accelerate's autocast; the prompt embeddings and VAE latents
-- computed for the whole data set before training, then the text encoders and the VAE deleted;
-- --use_ema an fp32 copy). The model's shapes are SDXL base's (model.variant sdxl-base): a
-- --pretrained_model_name_or_path other than it is said in a note, not read.
local D = {}

local TOOL = "diffusers"

local SCRIPTS = { ["train_text_to_image_lora_sdxl.py"] = "lora", ["train_text_to_image_sdxl.py"] = "full" }

D.command = true -- read from a launch command (recipes/cmdline.lua), not a file of keys

function D.detect(doc)
  local s = doc["(script)"]
  return type(s) == "string" and (SCRIPTS[s] ~= nil or s:match("sdxl") ~= nil)
end

-- Flags with no effect on memory or step time (data, paths, logging, hub, learning rate, seeds,
-- checkpoint saving), both scripts'.
local NOT_READ = {
  "pretrained_model_name_or_path", "revision", "variant", "dataset_name", "dataset_config_name",
  "train_data_dir", "image_column", "caption_column", "max_train_samples", "output_dir", "cache_dir",
  "seed", "center_crop", "random_flip", "num_train_epochs", "max_train_steps", "checkpointing_steps",
  "checkpoints_total_limit", "resume_from_checkpoint", "learning_rate", "scale_lr", "lr_scheduler",
  "lr_warmup_steps", "snr_gamma", "allow_tf32", "dataloader_num_workers", "adam_beta1", "adam_beta2",
  "adam_weight_decay", "adam_epsilon", "max_grad_norm", "push_to_hub", "hub_token", "prediction_type",
  "hub_model_id", "logging_dir", "report_to", "local_rank", "noise_offset", "debug_loss",
  "image_interpolation_mode", "num_validation_images", "validation_epochs", "proportion_empty_prompts",
  "timestep_bias_strategy", "timestep_bias_multiplier", "timestep_bias_begin", "timestep_bias_end",
  "timestep_bias_portion", "tracker_project_name",
}

-- accelerate launch's options read (the rest are refused by name, or listed as not read)
local LAUNCH_NOT_READ = { "main_process_port", "main_process_ip", "machine_rank", "same_network",
                          "rdzv_backend", "dynamo_backend", "u" }

-- The integer a flag's text names (argparse's type=int), or an error naming it.
local function int(r, d, k, default)
  local v = r:get(d, k, { "string", "boolean" }, nil)
  if v == nil then return default end
  local n = type(v) == "string" and math.tointeger(tonumber(v)) or nil
  if not n then r:fail(d, k, ("'%s' is not an integer (argparse's type=int)"):format(tostring(v)), "--") end
  return n
end

-- A store_true flag: true when given, an error when given a value.
local function flag(r, d, k)
  local v = r:get(d, k, { "boolean", "string" }, false)
  if type(v) == "string" then
    r:fail(d, k, ("takes no value ('%s': argparse's store_true would refuse the word after it)"):format(v), "--")
  end
  return v
end

function D.scenario(r, opts)
  local d = r.doc
  local notes = {}
  local script = r:get(d, "(script)", "string")
  local kind = SCRIPTS[script]
  if not kind then
    r:fail(d, "(script)", ("'%s' is not a script vrsim reads (%s; train_dreambooth_lora_sdxl.py's prior "
           .. "preservation and text-encoder training are not read yet)"):format(script,
           "train_text_to_image_lora_sdxl.py, train_text_to_image_sdxl.py"))
  end

  -- the launcher: accelerate launch's --mixed_precision and --num_processes stand in for the
  -- script's where it has none (accelerate's own config file is not read)
  local lt = r:get(d, "(launcher)", "table") or {}
  local lname = lt["(name)"]
  r:get(lt, "(name)", "string")
  local lmp = r:get(lt, "mixed_precision", "string", nil, "accelerate launch --")
  local nproc = int(r, lt, "num_processes", nil) or int(r, lt, "nproc_per_node", nil)
  r:get(lt, "multi_gpu", "boolean")
  if r:get(lt, "config_file", "string", nil, "accelerate launch --") then
    r:fail(lt, "config_file", "an accelerate config file is not read here: give its settings as launch options "
           .. "(--mixed_precision, --num_processes) or run vrsim on it", "accelerate launch --")
  end
  r:not_read(lt, LAUNCH_NOT_READ, "launch --")
  r:finish(lt, TOOL, "launch --")

  local count = opts.count or nproc or 1
  local scn = { hardware = { gpu = opts.gpu, count = count },
                model = { arch = "sdxl", variant = "sdxl-base" }, training = {} }
  local t = scn.training
  if count > 1 then t.strategy = "ddp" end

  local mp = r:get(d, "mixed_precision", "string", nil, "--") or lmp
  if mp == nil then
    mp = "no"
    notes[#notes + 1] = "diffusers: no --mixed_precision on the script or on accelerate launch: accelerate's "
        .. "own default config (not read) may set one; simulated as 'no' (fp32)"
  end
  if mp ~= "no" and mp ~= "fp16" and mp ~= "bf16" then
    r:fail(d, "mixed_precision", ("'%s' is not one of no, fp16, bf16"):format(mp), "--")
  end

  t.micro_batch = r:field(d, "train_batch_size", "training", "micro_batch", int(r, d, "train_batch_size", 16), "--")
  if int(r, d, "gradient_accumulation_steps", 1) ~= 1 then
    r:fail(d, "gradient_accumulation_steps", "gradient accumulation of the SDXL UNet is not modelled", "--")
  end
  t.resolution = r:field(d, "resolution", "training", "resolution", int(r, d, "resolution", 1024), "--")
  t.checkpointing = flag(r, d, "gradient_checkpointing")
  if flag(r, d, "use_8bit_adam") then t.optimizer = "adamw8bit"
  else t.optimizer, t.optimizer_impl = "adamw", "foreach" end -- torch.optim.AdamW's default
  if flag(r, d, "enable_xformers_memory_efficient_attention") then
    r:fail(d, "enable_xformers_memory_efficient_attention", "xformers' attention kernels are not modelled "
           .. "(leave it out: diffusers then runs PyTorch's SDPA)", "--")
  end
  if flag(r, d, "enable_npu_flash_attention") then
    r:fail(d, "enable_npu_flash_attention", "vrsim simulates CUDA GPUs", "--")
  end
  local vae_path = r:get(d, "pretrained_vae_model_name_or_path", "string", nil, "--")
  if vae_path then
    notes[#notes + 1] = ("diffusers: --pretrained_vae_model_name_or_path %s read as SDXL base's VAE shapes, "
        .. "in the weight dtype"):format(vae_path)
  end
  local weight = mp == "bf16" and "bf16" or mp == "fp16" and "fp16" or "fp32"

  if kind == "lora" then
    if mp == "no" then
      r:fail(d, "mixed_precision", "LoRA on an fp32 UNet is not modelled (vrsim's SDXL LoRA is bf16 or fp16: "
             .. "--mixed_precision bf16)", "--")
    end
    t.precision = mp == "bf16" and "lora_bf16" or "lora_fp16"
    local rank = int(r, d, "rank", 4)
    t.lora = { r = rank, alpha = rank, dropout = 0.0, targets = { "to_q", "to_k", "to_v", "to_out.0" } }
    if flag(r, d, "train_text_encoder") then
      r:fail(d, "train_text_encoder", "LoRA on the text encoders is not modelled", "--")
    end
    t.text_encoders = "frozen"
    t.vae = vae_path and weight or "fp32"
  else
    t.precision = mp == "bf16" and "amp_bf16" or mp == "fp16" and "amp_fp16" or "fp32"
    t.text_encoders, t.vae = "cached", "cached"
    if flag(r, d, "use_ema") then t.ema = true end
    notes[#notes + 1] = "diffusers: train_text_to_image_sdxl.py computes the prompt embeddings and VAE latents of "
        .. "the whole data set before training, then deletes the text encoders and the VAE: that phase's peak "
        .. "is not simulated, only training's"
    r:not_read(d, { "train_text_encoder" }, "--")
  end
  t.attention = "sdpa"

  local vp = r:get(d, "validation_prompt", "string", nil, "--")
  if vp then
    notes[#notes + 1] = "diffusers: --validation_prompt: the validation images (the pipeline's inference every "
        .. "validation_epochs) are not simulated, nor their peak"
  end
  if r:get(d, "pretrained_model_name_or_path", "string", nil, "--") then
    notes[#notes + 1] = "diffusers: the model simulated is SDXL base (model.variant sdxl-base); "
        .. "--pretrained_model_name_or_path is not read"
  end
  r:not_read(d, NOT_READ, "--")
  r:finish(d, TOOL, "--")
  if lname and lname ~= "accelerate launch" and count > 1 then
    notes[#notes + 1] = ("diffusers: launched with %s on %d GPUs: DDP as accelerate prepares it"):format(lname, count)
  end
  return scn, notes
end

return D
