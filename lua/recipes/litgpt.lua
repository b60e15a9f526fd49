-- recipes/litgpt.lua: a litgpt fine-tuning config (`litgpt finetune lora --config FILE`, the
-- config_hub/finetune/<model>/lora.yaml and qlora.yaml files) read as litgpt 0.5.13 reads it
-- (litgpt/finetune/lora.py setup: its arguments and defaults; litgpt/args.py TrainArgs and
-- EvalArgs), into a vrsim scenario with training.framework = "litgpt" (strategies/litgpt.lua:
-- what of litgpt's program vrsim simulates, on the transformers model of the checkpoint's
-- config.json).
local T = {}

local H = require "recipes.hf_args"
local TOOL = "litgpt"

-- finetune/lora.py's own keys: checkpoint_dir and a train section with the batch sizes
function T.detect(doc)
  return type(doc.checkpoint_dir) == "string" and type(doc.train) == "table"
end

-- litgpt's LoRA switches -> the transformers modules they put adapters on (litgpt's fused qkv's
-- query, key and value parts; LLaMAMLP's fc_1, fc_2 and proj)
local SWITCHES = {
  { "lora_query", true, { "q_proj" } }, { "lora_key", false, { "k_proj" } },
  { "lora_value", true, { "v_proj" } }, { "lora_projection", false, { "o_proj" } },
  { "lora_mlp", false, { "gate_proj", "up_proj", "down_proj" } },
}

-- --quantize values -> double quantization (BitsandbytesPrecision's _NF4Linear: compress_statistics
-- False; _NF4DQLinear: True)
local QUANTIZE = { ["bnb.nf4"] = false, ["bnb.nf4-dq"] = true }

local NOT_READ = { "out_dir", "logger_name", "seed", "access_token", "log", "eval" }
local TRAIN_NOT_READ = { "save_interval", "log_interval", "lr_warmup_steps", "lr_warmup_fraction", "epochs",
                         "max_tokens", "max_steps", "min_lr", "max_time" }

-- The optimizer: a name ("AdamW") or { class_path, init_args }. Returns vrsim's optimizer and
-- implementation.
local function read_optimizer(r, d, quantized)
  local o = r:get(d, "optimizer", { "string", "table" }, "AdamW")
  local cls, args = o, nil
  if type(o) == "table" then
    cls = r:get(o, "class_path", "string", nil, "optimizer.")
    if not cls then r:fail(o, "class_path", "missing", "optimizer.") end
    args = r:get(o, "init_args", "table", nil, "optimizer.") or {}
  end
  if quantized then
    -- instantiate_bnb_optimizer: any class whose name has AdamW becomes bnb.optim.PagedAdamW with
    -- the init_args PagedAdamW takes; another is litgpt's ValueError
    if not cls:find("AdamW", 1, true) then
      r:fail(d, "optimizer", ("'%s': litgpt's --quantize only supports AdamW (instantiate_bnb_optimizer)"):format(cls))
    end
    if args and r:get(args, "amsgrad", "boolean", false, "optimizer.init_args.") then
      r:fail(args, "amsgrad", "not modelled", "optimizer.init_args.")
    end
    if args then
      -- (keys PagedAdamW does not take are dropped by instantiate_bnb_optimizer)
      r:not_read(args, { "lr", "weight_decay", "betas", "eps", "fused", "foreach", "capturable", "maximize" },
                 "optimizer.init_args.")
      r:finish(args, TOOL, "optimizer.init_args.")
      r:finish(o, TOOL, "optimizer.")
    end
    return "paged_adamw", "foreach"
  end
  if cls ~= "AdamW" and cls ~= "torch.optim.AdamW" then
    r:fail(type(o) == "table" and o or d, type(o) == "table" and "class_path" or "optimizer",
           ("'%s' is not modelled with litgpt (read: AdamW, torch.optim.AdamW)"):format(cls),
           type(o) == "table" and "optimizer." or nil)
  end
  local impl = "foreach"
  if args then
    for _, k in ipairs { "amsgrad", "capturable", "differentiable" } do
      if r:get(args, k, "boolean", false, "optimizer.init_args.") then r:fail(args, k, "not modelled", "optimizer.init_args.") end
    end
    if r:get(args, "fused", "boolean", false, "optimizer.init_args.") then impl = "fused" end
    if r:get(args, "foreach", "boolean", nil, "optimizer.init_args.") == false and impl ~= "fused" then
      r:fail(args, "foreach", "the for-loop AdamW is not modelled (vrsim's is foreach or fused)", "optimizer.init_args.")
    end
    r:not_read(args, { "lr", "weight_decay", "betas", "eps", "maximize" }, "optimizer.init_args.")
    r:finish(args, TOOL, "optimizer.init_args.")
    r:finish(o, TOOL, "optimizer.")
  end
  return "adamw", impl
end

function T.scenario(r, opts)
  local d = r.doc
  local notes = {}
  local scn = { hardware = { gpu = opts.gpu, count = opts.count or 1 }, model = {}, training = {} }
  local t = scn.training
  t.framework = "litgpt"

  -- the base model: checkpoint_dir holds litgpt's model_config.yaml and the Hub's config.json
  local dir = r:get(d, "checkpoint_dir", "string")
  if not opts.model_config then scn.model.config = H.model_config(r, d, "checkpoint_dir", dir) end

  -- one GPU: litgpt refuses --quantize on several, and its multi-GPU LoRA (ModelParallelStrategy)
  -- is not modelled
  local devices = r:get(d, "devices", { "integer", "string" }, 1)
  if devices ~= 1 then
    r:fail(d, "devices", ("%s: litgpt on several GPUs (ModelParallelStrategy, FSDP2) is not modelled"):format(tostring(devices)))
  end
  if r:get(d, "num_nodes", "integer", 1) ~= 1 then r:fail(d, "num_nodes", "several nodes are not modelled") end

  -- precision: bf16-true (every parameter bf16, no autocast)
  local prec = r:get(d, "precision", "string", nil)
  if prec == nil then
    r:fail(d, "precision", "null: litgpt picks bf16-true where the GPU supports it (get_default_supported_precision); "
           .. "vrsim needs it stated: precision: bf16-true")
  end
  if prec ~= "bf16-true" then r:fail(d, "precision", ("'%s' is not modelled (read: bf16-true)"):format(prec)) end
  t.precision = "lora_bf16"
  t.build = "direct"

  local q = r:get(d, "quantize", "string", nil)
  t.quant = "none"
  if q ~= nil then
    if QUANTIZE[q] == nil then
      r:fail(d, "quantize", ("'%s' is not modelled (read: bnb.nf4, bnb.nf4-dq)"):format(q))
    end
    t.quant, t.quant_double = "nf4", QUANTIZE[q]
  end

  -- the adapters: finetune/lora.py's defaults (r 8, alpha 16, dropout 0.05, query and value)
  local targets = {}
  for _, sw in ipairs(SWITCHES) do
    if r:get(d, sw[1], "boolean", sw[2]) then
      for _, n in ipairs(sw[3]) do targets[#targets + 1] = n end
    end
  end
  if r:get(d, "lora_head", "boolean", false) then
    r:fail(d, "lora_head", "LoRA on lm_head is not modelled with litgpt's program")
  end
  if #targets == 0 then r:fail(d, "lora_query", "every lora_* switch is off: litgpt trains nothing") end
  t.lora = { r = r:get(d, "lora_r", "integer", 8), alpha = r:get(d, "lora_alpha", { "integer", "number" }, 16),
             dropout = r:get(d, "lora_dropout", "number", 0.05), targets = targets }
  if t.lora.r < 1 then r:fail(d, "lora_r", "must be at least 1 (lora_r 0 trains nothing)") end

  -- the batch: micro_batch_size rows, global_batch_size / micro_batch_size micro-batches a step
  -- (TrainArgs.gradient_accumulation_iters), each padded to its longest row, at most
  -- max_seq_length tokens
  local tr = r:get(d, "train", "table")
  local P = "train."
  local mb = r:get(tr, "micro_batch_size", "integer", 4, P)
  t.micro_batch = r:field(tr, "micro_batch_size", "training", "micro_batch", mb, P)
  local gb = r:get(tr, "global_batch_size", "integer", 128, P)
  if gb % mb ~= 0 then
    r:fail(tr, "global_batch_size", ("%d is not a multiple of micro_batch_size %d"):format(gb, mb), P)
  end
  t.grad_accum = r:field(tr, "global_batch_size", "training", "grad_accum", gb // mb, P)
  local msl = r:get(tr, "max_seq_length", "integer", nil, P)
  if msl then
    t.seq = r:field(tr, "max_seq_length", "training", "seq", msl, P)
    notes[#notes + 1] = ("litgpt rows simulated at train.max_seq_length (%d tokens), the longest a batch can be: "
                         .. "its collator pads each batch to its longest row"):format(msl)
  else
    notes[#notes + 1] = "litgpt train.max_seq_length is null (no truncation): the rows are the data's, so the "
        .. "sequence is vrsim's default unless --set seq=N gives it"
  end
  -- validate_args: finetune/lora.py refuses these
  for _, k in ipairs { "max_norm", "tie_embeddings" } do
    if r:get(tr, k, { "number", "boolean" }, nil, P) ~= nil then
      r:fail(tr, k, "finetune/lora.py doesn't support it (validate_args)", P)
    end
  end
  r:not_read(tr, TRAIN_NOT_READ, P)
  r:finish(tr, TOOL, P)

  -- the data module changes which rows come, not how long they may be (train.max_seq_length)
  local data = r:get(d, "data", "table")
  if data then
    r:get(data, "class_path", "string", nil, "data.")
    r:not_read(data, { "init_args" }, "data.")
    r:finish(data, TOOL, "data.")
  end

  t.optimizer, t.optimizer_impl = read_optimizer(r, d, t.quant == "nf4")
  r:not_read(d, NOT_READ)
  r:finish(d, TOOL)
  return scn, notes
end

return T
