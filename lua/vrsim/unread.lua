-- unread.lua: fields the scenario or --set gave that this run does not read: a size the model
-- does not take is an error, any other such field a note in the report, never silently ignored.
local schema = require "vrsim.schema"
local names = require "vrsim.names"
local shown, ordered_keys = names.shown, names.ordered_keys
local SCHEMA, schema_of, fail_given = schema.SCHEMA, schema.schema_of, schema.fail_given

local M = {}

-- The size a search or sweep moves must be one the model reads: given to the other kind of
-- model (an image size to a language model, a token count to SDXL), it is an error.
function M.check_size_read(cfg, ctx, sets)
  local t, sdxl = cfg.training, schema.diffusion(cfg.model.arch)
  for _, e in ipairs { { "resolution", not sdxl, "an image size, for diffusion models (a language model's length is training.seq)" },
                       { "seq", sdxl, "its text encoders take 77 tokens (its size is training.resolution)" } } do
    local f, unread, why = e[1], e[2], e[3]
    if ctx.given["training." .. f] and unread and t[f] ~= SCHEMA.training[f][2] then
      fail_given(ctx, sets, { f, "training." .. f }, f, "training",
                 ("training.%s = %s: %s does not read it: %s"):format(f, shown(t[f]), cfg.model.arch, why))
    end
  end
end

-- Whether a decoder run reads training.build: weights whose dtype is not fp32, built for training
-- in full precision (vrsim/causal_lm.lua: inference and bitsandbytes weights are built in their
-- dtype whatever it says).
local function build_read(t)
  local low = { bf16 = 1, fp16 = 1, lora_bf16 = 1, lora_fp16 = 1 }
  return low[t.precision] ~= nil and not t.inference and t.quant == "none"
end

-- Fields the scenario or --set gave that nothing in this run reads, each with why: a knob that
-- only some runs use (checkpointing's, device_map's, the network's between nodes, ...) is noted
-- where it has no effect, so that setting it is never silently an answer that ignores it. (A
-- field given its default value is not: it asks for nothing.)
function M.inert_given(cfg, ctx)
  local t, hw = cfg.training, cfg.hardware
  local diffusion = schema.diffusion(cfg.model.arch)
  local zero = t.zero or {}
  local sharded = t.strategy == "zero3" or t.strategy == "fsdp2"
  local offload_opt = zero.offload_optimizer == "cpu" and (sharded or t.strategy == "zero2")
  local offload = offload_opt or (zero.offload_param == "cpu" and sharded)
  local nodes = math.ceil(hw.count / hw.gpus_per_node)
  local impl_unread = t.inference and "inference has no optimizer step"
    or (t.optimizer == "adamw8bit" or t.optimizer:match("^paged_")) and "bitsandbytes' optimizers have one implementation"
    or t.strategy == "zero2" and "ZeRO-2's step is DeepSpeed's FusedAdam"
    or offload_opt and "the optimizer steps on the CPU"
  -- { field, read by this run, why not }
  local rules = {
    { "training.checkpoint_every", t.checkpointing and not t.inference, "checkpointing is off" },
    { "training.checkpoint_scope", t.checkpointing and not t.inference, "checkpointing is off" },
    { "training.checkpoint_reentrant", t.checkpointing and not t.inference, "checkpointing is off" },
    { "hardware.max_memory_gib", t.device_map == "auto", "device_map is not \"auto\"" },
    { "hardware.network", nodes > 1, "the run's GPUs are in one node" },
    { "hardware.nics_per_node", nodes > 1, "the run's GPUs are in one node" },
    { "hardware.interconnect", hw.count > 1, "one GPU runs no collectives" },
    { "hardware.contention", hw.count > 1, "one GPU runs no collectives" },
    { "hardware.nvlink_bridge", hw.interconnect ~= "pcie",
      "hardware.interconnect = \"pcie\" runs the collectives on PCIe" },
    { "hardware.rank", t.strategy == "zero1" or t.device_map == "auto",
      "every rank is alike (only ZeRO-1's partitions and a device map differ by rank)" },
    { "training.optimizer_impl", not impl_unread, impl_unread },
    { "training.cpu_threads", t.strategy == "fsdp2" and offload_opt,
      "only FSDP2's CPU-offloaded torch AdamW step runs on those threads" },
    { "hardware.host", offload, "nothing is offloaded to host memory" },
    { "hardware.pcie", offload or hw.count > 1, "one GPU with nothing offloaded copies nothing over PCIe" },
    { "model.size", cfg.model.config == nil and not diffusion,
      cfg.model.arch == "sdxl" and "SDXL's shapes are its variant's"
      or cfg.model.arch == "sd" and "the UNet's shapes are model.config's"
      or (cfg.model.arch == "flux" or cfg.model.arch == "sd3") and "the transformer's shapes are model.config's"
      or "model.config gives the shape" },
    { "model.variant", cfg.model.arch == "sdxl", "only sdxl has variants" },
    { "training.quant_storage", t.quant == "nf4", "only 4-bit (nf4) weights are packed into a storage dtype" },
    { "training.bitsandbytes", t.quant == "nf4" or t.quant == "int8" or t.optimizer == "adamw8bit"
      or t.optimizer:match("^paged_.*_8bit$") ~= nil,
      "nothing of bitsandbytes that changed between its releases runs: no 4-bit or 8-bit weights, no 8-bit optimizer" },
    { "training.transformers", not diffusion and (t.framework or "transformers") == "transformers",
      "litgpt's own model and the diffusion models run no transformers decoder, which is what vrsim "
      .. "follows of a release (its causal-LM loss and rotary tables)" },
    { "model.hub_kernels", not diffusion and cfg.model.code ~= "torchtune",
      diffusion and "transformers' hub kernels replace the decoder families' layers"
      or "model.code is torchtune: transformers kernelizes its own models only" },
    { "training.torchtune", cfg.model.code == "torchtune", "model.code is not torchtune: no torchtune module runs" },
  }
  for _, f in ipairs { "hidden", "intermediate", "heads", "kv_heads", "layers", "vocab" } do
    rules[#rules + 1] = { "model." .. f, not diffusion, cfg.model.arch == "sd"
      and "the UNet's shapes are model.config's" or (cfg.model.arch == "flux" or cfg.model.arch == "sd3")
      and "the transformer's shapes are model.config's" or "SDXL's shapes are its variant's" }
  end
  if not diffusion then
    rules[#rules + 1] = { "training.build", build_read(t),
      "the weights are built in their own dtype (fp32 weights, inference or bitsandbytes)" }
  end
  if cfg.model.arch == "sdxl" then
    local full = cfg.model.variant == "sdxl-base"
    rules[#rules + 1] = { "training.text_encoders", full, "the sdxl-base-unet variant runs the UNet alone" }
    rules[#rules + 1] = { "training.vae", full, "the sdxl-base-unet variant runs the UNet alone" }
    rules[#rules + 1] = { "training.build", false, "SDXL's models are built in their dtype (diffusers' from_pretrained)" }
  end
  if cfg.model.arch == "sd" or cfg.model.arch == "flux" or cfg.model.arch == "sd3" then
    rules[#rules + 1] = { "training.build", false, "the models are built in their dtype (diffusers' from_pretrained)" }
  end
  local schema = schema_of(diffusion and cfg.model.arch or "llama2")
  local out = {}
  for _, r in ipairs(rules) do
    local sec, f = r[1]:match("^(%a+)%.(.*)$")
    local v, spec = cfg[sec][f], schema[sec][f]
    if ctx.given[r[1]] and not r[2] and not (spec and v == spec[2]) then
      out[#out + 1] = ("%s = %s has no effect on this run: %s"):format(r[1], shown(v), r[3])
    end
  end
  if t.strategy == "none" then
    for _, k in ipairs(ordered_keys(zero)) do
      out[#out + 1] = ("training.zero.%s has no effect: strategy is none (one GPU, no data parallelism)"):format(k)
    end
  end
  return out
end

M.build_read = build_read

return M
