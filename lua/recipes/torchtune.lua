-- recipes/torchtune.lua: a torchtune recipe config (`tune run RECIPE --config FILE`) read as
-- torchtune 0.6.1 reads it (recipes/lora_finetune_single_device.py and
-- full_finetune_single_device.py; torchtune/models/*/_model_builders.py for the builders' LoRA
-- arguments and defaults; torchtune/training/checkpointing for FullModelHFCheckpointer), into a
-- vrsim scenario.
--
-- What is simulated: the single-device recipes (LoRA and full fine-tuning), on the model of the
-- checkpoint's config.json (checkpointer.checkpoint_dir, which `tune download` fills from the
-- Hub), with torchtune's own techniques as vrsim models them: the chunked output and
-- CEWithChunkedOutputLoss (training.loss = "chunked"), activation offloading, the optimizer in
-- backward. Llama, Mistral and Qwen2 run torchtune's own TransformerDecoder (model.code = "torchtune");
-- the other families run the transformers layers of the same weights and operations (a note
-- says so), with torchtune's key/value expansion where their attention is Llama's.
local T = {}

local H = require "recipes.hf_args"
local TOOL = "torchtune"

function T.detect(doc)
  local m = doc.model
  return type(m) == "table" and type(m._component_) == "string" and m._component_:match("^torchtune%.") ~= nil
end

-- torchtune.models.<family> -> the config.json model_type its builders make
local FAMILIES = { llama2 = "llama", llama3 = "llama", llama3_1 = "llama", llama3_2 = "llama",
                   llama3_3 = "llama", qwen2 = "qwen2", qwen2_5 = "qwen2", qwen3 = "qwen3",
                   mistral = "mistral", gemma = "gemma", gemma2 = "gemma2", phi3 = "phi3" }

-- the families whose torchtune decoder vrsim runs as torchtune's own modules (model.code =
-- "torchtune": its RMSNorm, RotaryPositionalEmbeddings and key/value expansion), and those whose
-- attention it runs as transformers' with model.repeat_kv (causal_lm.lua's list)
local OWN_CODE = { llama = true, mistral = true, qwen2 = true }
local REPEAT_KV = { llama = true, qwen2 = true, qwen3 = true, mistral = true }

-- torchtune's module names -> transformers' (lora_attn_modules; apply_lora_to_mlp: w1, w2, w3)
local ATTN = { q_proj = "q_proj", k_proj = "k_proj", v_proj = "v_proj", output_proj = "o_proj" }
local MLP = { "gate_proj", "down_proj", "up_proj" }

-- the optimizer _component_ -> vrsim's optimizer (torch's AdamW runs foreach unless fused);
-- bitsandbytes' paged classes by their default optim_bits (PagedAdamW and PagedLion: 32)
local OPTIMIZERS = {
  ["torch.optim.AdamW"] = "adamw", ["torch.optim.SGD"] = "sgd",
  ["bitsandbytes.optim.AdamW8bit"] = "adamw8bit",
  ["bitsandbytes.optim.PagedAdamW8bit"] = "paged_adamw_8bit",
  ["bitsandbytes.optim.PagedAdamW32bit"] = "paged_adamw_32bit",
  ["bitsandbytes.optim.PagedAdamW"] = "paged_adamw",
  ["bitsandbytes.optim.PagedLion8bit"] = "paged_lion_8bit",
  ["bitsandbytes.optim.PagedLion32bit"] = "paged_lion_32bit",
  ["bitsandbytes.optim.PagedLion"] = "paged_lion_32bit",
}

-- Top-level keys with no effect on memory or time; whole sections (their keys not read either)
local NOT_READ = {
  "output_dir", "seed", "shuffle", "epochs", "max_steps_per_epoch", "resume_from_checkpoint",
  "save_adapter_weights_only", "metric_logger", "log_every_n_steps", "log_peak_memory_stats",
  "log_level", "lr_scheduler", "clip_grad_norm", "run_val_every_n_steps", "dataset_val",
  "batch_size_val", "tokenizer", "profiler",
}

-- The model section: the builder, its LoRA arguments. Returns the LoRA table (nil: full).
local function read_model(r, d, m, notes)
  local P = "model."
  local comp = r:get(m, "_component_", "string", nil, P)
  if not comp then r:fail(m, "_component_", "missing: the model builder", P) end
  local family, builder = comp:match("^torchtune%.models%.([%w_]+)%.([%w_]+)$")
  if not family or not FAMILIES[family] then
    r:fail(m, "_component_", ("'%s' is not a builder vrsim reads (torchtune.models.FAMILY.BUILDER, FAMILY one of "
           .. "llama2, llama3, llama3_1, llama3_2, llama3_3, qwen2, qwen2_5, qwen3, mistral, gemma, gemma2, phi3)"):format(comp), P)
  end
  -- QLoRA builders (qlora_*: lora_* with quantize_base=True) quantize every Linear of the decoder
  -- layers to torchao's NF4Tensor: vrsim's quant = "torchao_nf4", modelled in compiled layers
  -- (T.scenario refuses it at this line without compile: get_original_weight's eager
  -- intermediates, 14 bytes a weight, are not modelled)
  local qlora = builder:match("^qlora_") ~= nil
  local lora = nil
  if builder:match("^lora_") or qlora then
    local attn = r:get(m, "lora_attn_modules", "table", nil, P)
    if not attn then r:fail(m, "_component_", "a LoRA builder needs lora_attn_modules", P) end
    local targets = {}
    for i, name in ipairs(attn) do
      if not ATTN[name] then
        r:fail(m, "lora_attn_modules", ("item %d, '%s', is not one of q_proj, k_proj, v_proj, output_proj"):format(i, tostring(name)), P)
      end
      targets[#targets + 1] = ATTN[name]
    end
    if r:get(m, "apply_lora_to_mlp", "boolean", false, P) then
      for _, n in ipairs(MLP) do targets[#targets + 1] = n end
    end
    if r:get(m, "apply_lora_to_output", "boolean", false, P) then
      r:fail(m, "apply_lora_to_output", "LoRA on the output projection is not modelled", P)
    end
    if r:get(m, "use_dora", "boolean", false, P) then r:fail(m, "use_dora", "DoRA is not modelled", P) end
    if r:get(m, "quantize_base", "boolean", false, P) then qlora = true end
    -- the builders' defaults: rank 8, alpha 16, dropout 0.0; every parameter in the recipe's
    -- dtype (the model is built under set_default_dtype), adapters too
    lora = { r = r:get(m, "lora_rank", "integer", 8, P), alpha = r:get(m, "lora_alpha", { "integer", "number" }, 16, P),
             dropout = r:get(m, "lora_dropout", "number", 0.0, P), targets = targets, dtype = "bf16" }
    r:not_read(m, { "tie_word_embeddings" }, P)
  end
  r:finish(m, TOOL, P)
  -- (validation/oracle/check_torchtune_saved.py: eager, torchtune's llama3 layer saves what the
  -- transformers layer with the expanded keys and values saves, plus 2 bf16 rows of the hidden
  -- size where the norms' scales train: its RMSNorm's fp32 normalized input; model.code runs it)
  if OWN_CODE[FAMILIES[family]] then
    notes[#notes + 1] = ("torchtune's %s simulated as torchtune's own TransformerDecoder (model.code = \"torchtune\": "
                         .. "its RMSNorm, RoPE cache and rotation, key/value expansion) on the checkpoint's "
                         .. "config.json"):format(comp)
  else
    notes[#notes + 1] = ("torchtune's %s simulated as the transformers model of the checkpoint's config.json: "
                         .. "the same weights and operations per layer, transformers' intermediates (an eager "
                         .. "torchtune layer saves 2 bf16 rows of the hidden size more where its norms train, "
                         .. "about 2 %% of its saved bytes)"):format(comp)
  end
  return lora, FAMILIES[family], comp, qlora
end

-- The distributed recipes' keys. One GPU: the single-device recipe, which does not read them (a
-- note says so where they are set). More (tune run --nproc_per_node N: --gpus N):
-- full_finetune_distributed (0.6.1), FSDP2 as training.shard_model applies it: fully_shard on
-- each decoder layer and on the custom_sharded_layers (training.zero.units), then on the root with
-- reshard_after_forward=False; no MixedPrecisionPolicy (the parameters are in the recipe's
-- dtype); fsdp_cpu_offload is CPUOffloadPolicy. A LoRA builder: lora_finetune_distributed,
-- which shards the same way (the model built on the meta device with its adapters, only they
-- trainable: set_trainable_params before shard_model); its QLoRA builders' NF4Tensor weights under
-- FSDP2 are refused where the scenario is checked (strategies/quant.lua check_torchao).
local DIST_KEYS = { "fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers",
                    "tensor_parallel_dim", "tensor_parallel_plan", "ac_mode", "ac_option",
                    "enable_async_checkpointing" }

-- torchtune's module names (TransformerDecoder) -> the transformers model's paths vrsim builds
local CUSTOM_SHARDED = { tok_embeddings = "model.embed_tokens", output = "lm_head" }

local function read_distributed(r, d, scn, lora, notes)
  local n = scn.hardware.count
  if n == 1 then
    local set = {}
    for _, k in ipairs(DIST_KEYS) do if d[k] ~= nil then set[#set + 1] = k end end
    r:not_read(d, DIST_KEYS)
    if #set > 0 then
      notes[#notes + 1] = ("torchtune read as its single-device recipe (one GPU), which does not read %s: "
          .. "give --gpus N for the distributed recipe"):format(table.concat(set, ", "))
    end
    return
  end
  local t = scn.training
  t.strategy = "fsdp2"
  t.zero = {}
  if r:get(d, "fsdp_cpu_offload", "boolean", false) then t.zero.offload_param, t.zero.offload_optimizer = "cpu", "cpu" end
  if not r:get(d, "fsdp_reshard_after_forward", "boolean", true) then t.zero.raf = false end
  if next(t.zero) == nil then t.zero = nil end
  local tp = r:get(d, "tensor_parallel_dim", "integer", 1)
  if tp ~= 1 then r:fail(d, "tensor_parallel_dim", "torchtune's tensor parallelism (its own plan) is not modelled") end
  r:not_read(d, { "tensor_parallel_plan", "enable_async_checkpointing" })
  for _, k in ipairs { "ac_mode", "ac_option" } do
    if r:get(d, k, { "string", "integer" }) ~= nil then
      r:fail(d, k, "torchtune's selective activation checkpointing is not modelled (enable_activation_checkpointing is)")
    end
  end
  -- custom_sharded_layers: shard_model's fully_shard on each module whose name ends with one of
  -- them, before the root's (training.zero.units); torchtune's names on the transformers tree
  local csl = r:get(d, "custom_sharded_layers", "table")
  if csl and #csl > 0 then
    local units = {}
    for i, name in ipairs(csl) do
      local path = CUSTOM_SHARDED[name]
      if not path then
        r:fail(d, "custom_sharded_layers", ("item %d, '%s': not a module vrsim maps (read: tok_embeddings, output)"):format(
               i, tostring(name)))
      end
      units[#units + 1] = path
    end
    t.zero = t.zero or {}
    t.zero.units = units
  end
end

function T.scenario(r, opts)
  local d = r.doc
  local notes = {}
  -- (torchtune's TransformerDecoder keeps no KV cache in training: setup_caches is generation's)
  local scn = { hardware = { gpu = opts.gpu, count = opts.count or 1 }, model = { use_cache = false }, training = {} }
  local t = scn.training

  local m = r:get(d, "model", "table")
  if not m then r:fail(d, "model", "missing: a torchtune recipe's model section names its builder (_component_)") end
  local lora, model_type, comp, qlora = read_model(r, d, m, notes)
  -- torchtune's MultiHeadAttention expands grouped keys and values to every query head before
  -- attention (k.unsqueeze(2).expand(...).flatten(1, 2), a copy), SDPA's and FlexAttention's alike:
  -- model.repeat_kv, for the families whose attention is Llama's (Gemma's and Phi-3's: a note)
  if OWN_CODE[model_type] then
    -- torchtune's TransformerDecoder itself (blocks/torchtune.lua), its expansion included
    scn.model.code = "torchtune"
  elseif REPEAT_KV[model_type] then
    scn.model.repeat_kv = true
  else
    notes[#notes + 1] = ("torchtune expands grouped keys and values to every query head before attention; %s's "
                         .. "attention here takes them as transformers hands them"):format(model_type)
  end
  read_distributed(r, d, scn, lora, notes)

  -- the model's config.json: the HF checkpoint's folder
  local ck = r:get(d, "checkpointer", "table")
  if not opts.model_config then
    if not ck then r:fail(d, "checkpointer", "missing: the checkpoint's folder holds the model's config.json") end
    local cc = r:get(ck, "_component_", "string", nil, "checkpointer.")
    if cc ~= "torchtune.training.FullModelHFCheckpointer" then
      r:fail(ck, "_component_", ("'%s': vrsim reads the model's config.json from a FullModelHFCheckpointer's "
             .. "checkpoint_dir; give --set model.config=PATH"):format(tostring(cc)), "checkpointer.")
    end
    local dir = r:get(ck, "checkpoint_dir", "string", nil, "checkpointer.")
    if not dir then r:fail(ck, "checkpoint_dir", "missing", "checkpointer.") end
    scn.model.config = H.model_config(r, ck, "checkpoint_dir", dir, "checkpointer.")
    local ok, c = pcall(require("vrsim.core").read_config, scn.model.config)
    if ok and c.model_type ~= model_type then
      r:fail(d.model, "_component_", ("%s builds a %s model; checkpoint_dir's config.json is %s"):format(comp,
             model_type, tostring(c.model_type)), "model.")
    end
  end

  -- dtype: bf16 or fp32 (torchtune refuses fp16); every parameter in it, no autocast
  local dt = r:get(d, "dtype", "string", "bf16")
  if dt ~= "bf16" and dt ~= "fp32" then r:fail(d, "dtype", ("'%s' is not modelled (read: bf16, fp32)"):format(dt)) end
  if lora then
    if dt ~= "bf16" then r:fail(d, "dtype", "LoRA on fp32 weights is not modelled: dtype: bf16") end
    t.precision, t.lora = "lora_bf16", lora
  else
    t.precision = dt
  end
  t.build = "direct" -- built under set_default_dtype, the checkpoint loaded into it
  local dev = r:get(d, "device", "string", "cuda")
  if dev ~= "cuda" then r:fail(d, "device", ("'%s': vrsim simulates a CUDA GPU"):format(dev)) end

  -- batch, rows
  t.micro_batch = r:field(d, "batch_size", "training", "micro_batch", r:get(d, "batch_size", "integer", 1))
  t.grad_accum = r:field(d, "gradient_accumulation_steps", "training", "grad_accum",
                         r:get(d, "gradient_accumulation_steps", "integer", 1))
  local tok = r:get(d, "tokenizer", "table") or {}
  local msl = r:get(tok, "max_seq_len", "integer", nil, "tokenizer.")
  -- dataset.packed: the data set built as torchtune's PackedDataset (packs of max_seq_len, in the
  -- data set's order; the text-completion builders cut a sequence across packs), collated by
  -- padded_collate_packed, whose document BlockMask torchtune's attention hands to FlexAttention
  -- wherever it runs (sm75 and up): training.data's batching torchtune
  local ds = r:get(d, "dataset", "table") or {}
  local dss = (ds[1] ~= nil) and ds or { ds }
  local packed
  for i, one in ipairs(dss) do
    if type(one) == "table" and one.packed then
      if #dss > 1 then
        r:fail(one, "packed", ("packed data set %d of a list (ConcatDataset of packs) is not modelled"):format(i), "dataset.")
      end
      packed = one
    end
  end
  if packed then
    if not msl then
      r:fail(tok, "max_seq_len", "null with dataset.packed: torchtune's PackedDataset packs rows of max_seq_len", "tokenizer.")
    end
    local comp = type(packed._component_) == "string" and packed._component_ or ""
    local text = comp == "torchtune.datasets.text_completion_dataset" or comp:match("^torchtune%.datasets%.wikitext") ~= nil
    local split = r:get(packed, "split_across_pack", "boolean", nil, "dataset.")
    if split ~= nil and not text then
      r:fail(packed, "split_across_pack", ("'%s' does not take it (text_completion_dataset does)"):format(comp), "dataset.")
    end
    if split == nil then split = text end
    t.data = { batching = "torchtune", pack_length = msl, split_across_pack = split or nil,
               -- (the recipe's StatefulDistributedSampler shuffles the packs unless shuffle: False)
               order = r:get(d, "shuffle", "boolean", true) == false and "given" or nil }
    t.attention = "flex"
    notes[#notes + 1] = ("torchtune packed data set: packs of %d tokens (tokenizer.max_seq_len), batch_size of them a "
        .. "micro-batch, FlexAttention over each batch's document BlockMask; --set training.data.lengths=FILE gives "
        .. "the data set's sequence lengths, which decide the attention's blocks"):format(msl)
  elseif msl then
    t.seq = r:field(tok, "max_seq_len", "training", "seq", msl, "tokenizer.")
    notes[#notes + 1] = ("torchtune rows simulated at tokenizer.max_seq_len (%d tokens), the longest a batch can be: "
                         .. "the collator pads each batch to its longest row"):format(t.seq)
  else
    notes[#notes + 1] = "torchtune tokenizer.max_seq_len is null (no truncation): the rows are the data's, so "
        .. "the sequence is vrsim's default unless --set seq=N gives it"
  end

  -- the techniques
  t.checkpointing = r:get(d, "enable_activation_checkpointing", "boolean", false)
  -- set_activation_checkpointing wraps each layer in a CheckpointWrapper before compile_model
  if t.checkpointing then t.checkpoint_impl = "wrapper" end
  if r:get(d, "enable_activation_offloading", "boolean", false) then t.activation_offload = true end
  if r:get(d, "optimizer_in_bwd", "boolean", false) then t.optimizer_in_backward = true end
  -- compile: True (training.compile_model: each TransformerSelfAttentionLayer compiled on its own,
  -- mode "default"): vrsim's training.compile of scope "layer", where it accepts the run (below)
  local compile = r:get(d, "compile", "boolean", false)

  -- the optimizer
  local o = r:get(d, "optimizer", "table")
  if not o then r:fail(d, "optimizer", "missing") end
  local oc = r:get(o, "_component_", "string", nil, "optimizer.")
  local name = OPTIMIZERS[oc]
  if not name then
    local read = {}
    for k in pairs(OPTIMIZERS) do read[#read + 1] = k end
    table.sort(read)
    r:fail(o, "_component_", ("'%s' is not modelled (read: %s)"):format(tostring(oc), table.concat(read, ", ")),
           "optimizer.")
  end
  t.optimizer = name
  if name == "adamw" then
    t.optimizer_impl = r:get(o, "fused", "boolean", false, "optimizer.") and "fused" or "foreach"
    if r:get(o, "foreach", "boolean", nil, "optimizer.") == false and t.optimizer_impl ~= "fused" then
      r:fail(o, "foreach", "the for-loop AdamW is not modelled (vrsim's is foreach or fused)", "optimizer.")
    end
  end
  for _, k in ipairs({ "amsgrad", "capturable", "differentiable" }) do
    if r:get(o, k, "boolean", nil, "optimizer.") then r:fail(o, k, "not modelled", "optimizer.") end
  end
  r:not_read(o, { "lr", "weight_decay", "betas", "eps", "momentum", "nesterov", "dampening", "maximize" }, "optimizer.")
  r:finish(o, TOOL, "optimizer.")

  -- the loss: CEWithChunkedOutputLoss with the model's chunked output
  local l = r:get(d, "loss", "table")
  local lc = l and r:get(l, "_component_", "string", nil, "loss.")
  if lc ~= "torchtune.modules.loss.CEWithChunkedOutputLoss" then
    r:fail(l or d, l and "_component_" or "loss", ("'%s' is not modelled (read: "
           .. "torchtune.modules.loss.CEWithChunkedOutputLoss; torchtune 0.7's LinearCrossEntropyLoss is not)")
           :format(tostring(lc)), l and "loss." or nil)
  end
  r:not_read(l, { "num_output_chunks", "ignore_index" }, "loss.")
  if l.num_output_chunks and l.num_output_chunks ~= 8 then
    r:fail(l, "num_output_chunks", "vrsim's chunked loss has torchtune's 8 chunks", "loss.")
  end
  r:finish(l, TOOL, "loss.")
  t.loss = "chunked"
  -- torchtune's attention: F.scaled_dot_product_attention, or FlexAttention on a packed batch
  t.attention = t.attention or "sdpa"
  if qlora then
    if not compile then
      r:fail(m, "_component_", "QLoRA (torchao's NF4Tensor base weights) without compile: True is not modelled "
             .. "(eager get_original_weight keeps its int64 indices and bf16 intermediates, 14 bytes a "
             .. "weight, until it returns); with compile: True its dequantization is one fused kernel, and is", "model.")
    end
    t.quant = "torchao_nf4"
  end
  if compile then
    local why = require("recipes.hf_args").compile_refusal(t)
    if why then r:fail(d, "compile", why) end
    t.compile = true
    notes[#notes + 1] = "torchtune compile: the decoder layers compiled (training.compile), and the loss's "
        .. "compute_cross_entropy (torchtune.training.compile_loss over CEWithChunkedOutputLoss) as its own graph"
  end

  if ck then
    r:not_read(ck, { "_component_", "checkpoint_dir", "checkpoint_files", "recipe_checkpoint", "output_dir",
                     "model_type", "adapter_checkpoint", "safe_serialization", "should_load_recipe_state" }, "checkpointer.")
    r:finish(ck, TOOL, "checkpointer.")
  end
  r:not_read(d, NOT_READ)
  r:finish(d, TOOL)
  return scn, notes
end

return T
