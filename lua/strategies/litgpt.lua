-- litgpt.lua: litgpt's LoRA fine-tuning program (litgpt 0.5.13, litgpt/finetune/lora.py; the
-- precision plugin is lightning.fabric's BitsandbytesPrecision) where it keeps other tensors than
-- transformers + peft on the same weights (training.framework = "litgpt"):
--
--   head        fit() calls model(input_ids, lm_head_chunk_size=128): lm_head runs on 128-token
--               chunks of ln_f's output, and utils.chunked_cross_entropy takes the bf16 logits
--               of each chunk as they are (vrsim/lm_loss.lua litgpt_chunked);
--   quantize    --quantize bnb.nf4 (bnb.nf4-dq: training.quant_double): BitsandbytesPrecision
--               has no ignore_modules there, so every nn.Linear made under fabric.init_module,
--               lm_head too, is _NF4Linear (compress_statistics=False for bnb.nf4);
--   embedding   after the optimizer is made from model.parameters(), transformer.wte is
--               replaced by bitsandbytes.nn.StableEmbedding (its weight and LayerNorm in the
--               weights' dtype): the old embedding stays referenced by the optimizer's
--               param_groups and by main()'s old_embedding, the new one requires grad and is in no
--               optimizer, so its gradient (vocab x hidden) is made in every backward and never
--               cleared by optimizer.zero_grad(); its forward runs under the Fabric's
--               forward_context (default dtype bf16), so `emb.to(torch.get_default_dtype())` is
--               no copy and the LayerNorm runs in bf16; gradients now reach the first layer's
--               input, so its frozen projections compute input gradients too;
--   optimizer   with quantization instantiate_bnb_optimizer: bnb.optim.PagedAdamW (32-bit state
--               in unified memory); without it torch.optim.AdamW from the config.
--
--   attention   CausalSelfAttention's one qkv Linear (q, k and v stacked; SDPA keeps the whole
--               output through its v view), the query, key and value adapters one
--               LoRAQKVLinear on it (one dropout), and no KV cache in training.
--
-- Not modelled here, each named in a note of the run: the rest of litgpt's own module tree (the
-- model simulated is the transformers one of the same config: LoRAQKVLinear's lora_B spans only
-- the enabled parts, widened by zero_pad, and its RMSNorm multiplies by `weight.float()`), the
-- `logits` list that fit() keeps through backward until the next forward returns (released here
-- at the end of forward), and the validation pass and generate_example that
-- max_memory_allocated also covers (no saved activations: below the training step's peak).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

local STABLE = "stable"

-- The refusal for a run litgpt's program is not modelled for (nil when it is, or when the run
-- is not litgpt's).
function M.refusal(t, fam, count)
  if t.framework ~= "litgpt" then return nil end
  local function no(what) return "training.framework = \"litgpt\": " .. what end
  local mt = fam and fam.model_type
  if mt ~= "llama" and mt ~= "mistral" then
    return no(("litgpt's GPT is simulated as the transformers model of the same config for the Llama and "
               .. "Mistral families only, not %s"):format(tostring(mt)))
  end
  if t.precision ~= "lora_bf16" then
    return no(("precision %s: litgpt's finetune/lora.py is modelled at bf16-true (precision = \"lora_bf16\")")
              :format(tostring(t.precision)))
  end
  if not require("strategies.lora").wanted(t) then return no("finetune/lora.py needs training.lora") end
  if t.quant ~= "none" and t.quant ~= "nf4" then
    return no(("quant %s: litgpt's --quantize is modelled for bnb.nf4 and bnb.nf4-dq (quant = \"nf4\")")
              :format(tostring(t.quant)))
  end
  if (count or 1) > 1 or t.strategy ~= "none" then
    return no("litgpt on several GPUs (ModelParallelStrategy with FSDP2 and its checkpoint wrappers) is not modelled")
  end
  local want = t.quant == "nf4" and "paged_adamw" or "adamw"
  if t.optimizer ~= want then
    return no(("optimizer %s: litgpt steps %s here (%s)"):format(tostring(t.optimizer), want,
      t.quant == "nf4" and "instantiate_bnb_optimizer: bnb.optim.PagedAdamW under --quantize"
      or "instantiate_torch_optimizer: torch.optim.AdamW"))
  end
  if t.loss ~= "full" then
    return no(("loss %s: litgpt's head and loss are its own (128-token chunks, bf16 cross-entropy); leave "
               .. "training.loss unset"):format(tostring(t.loss)))
  end
  for _, k in ipairs { "checkpointing", "compile", "inference", "generate", "dpo", "float8", "data",
                       "activation_offload", "optimizer_in_backward", "parallel", "deepspeed" } do
    if t[k] then return no(("training.%s is not modelled with litgpt's program"):format(k)) end
  end
  if t.device_map ~= "none" then return no("training.device_map is not modelled with litgpt's program") end
  return nil
end

-- bitsandbytes.nn.StableEmbedding.forward under the Fabric's forward_context: F.embedding on
-- its own weight, emb.to(bf16) (no copy: the default dtype is bf16 there), self.norm(emb) in
-- bf16, .to(weight.dtype) (no copy).
local function stable_forward(cx, m, ids)
  local w = mod.weight(cx, m.p[STABLE .. ".weight"])
  local b, s = ids.shape[1], ids.shape[2]
  -- embedding_dense_backward_cuda's partial sums past 3072 indices (models/llama.lua's rule)
  local ws = {}
  if b * s > 3072 then ws[1] = (b * s // 10 + math.min(b * s, m.num)) * m.dim * 4 end
  local emb = nn.op(cx, { name = "wte (StableEmbedding)", kind = "gather", inputs = { ids, w },
                          outs = { { "wte.embedding", { b, s, m.dim }, w.dtype } },
                          saves = { ids }, grads = { "none", { dtype = w.dtype } }, bwd_workspace = ws })
  return nn.layer_norm(cx, "wte.norm", emb, mod.weight(cx, m.p[STABLE .. ".norm.weight"]),
                       mod.weight(cx, m.p[STABLE .. ".norm.bias"]))
end

-- Under --quantize: the embedding module gets StableEmbedding's parameters beside the replaced
-- one's (which stays allocated) and its forward. Returns the names of the parameters that no
-- optimizer holds.
function M.stable_embedding(root, mc)
  local e = mod.get(root, "model.embed_tokens")
  e:declare(STABLE .. ".weight", { mc.vocab, mc.hidden }, { trainable = true })
  e:declare(STABLE .. ".norm.weight", { mc.hidden }, { trainable = true })
  e:declare(STABLE .. ".norm.bias", { mc.hidden }, { trainable = true })
  e.cls = "StableEmbedding"
  e.forward = stable_forward
  local p = e.path .. "." .. STABLE
  return { [p .. ".weight"] = true, [p .. ".norm.weight"] = true, [p .. ".norm.bias"] = true }
end

-- Marks the parameters no optimizer holds (strategies/optim.lua skips them): their gradients
-- are made by every backward and stay.
function M.mark_outside_optimizer(cx, names)
  for _, p in ipairs(cx.params) do
    if names[p.name] then p.outside_optimizer = true end
  end
end

-- litgpt's LoRAQKVLinear: lora_query, lora_key and lora_value put one adapter on the fused qkv
-- Linear (the dropout, lora_A and the (b, s, q + k + v) update made once). Simulated as an
-- adapter on the whole qkv_proj: its lora_B spans q + k + v where litgpt's spans the enabled
-- parts and zero_pad widens the product to q + k + v (the same (b, s, q + k + v) tensors).
function M.fused_targets(lora)
  local out, qkv = {}, false
  for _, n in ipairs(lora.targets) do
    if n == "q_proj" or n == "k_proj" or n == "v_proj" then
      if not qkv then out[#out + 1], qkv = "qkv_proj", true end
    else
      out[#out + 1] = n
    end
  end
  lora.targets = out
end

-- The notes a litgpt run carries: what of litgpt's program is not simulated.
function M.notes(t)
  local n = {
    "training.framework = \"litgpt\": litgpt's GPT simulated as the transformers model of the same config with "
      .. "one fused qkv Linear: LoRAQKVLinear as one adapter over q + k + v (litgpt's lora_B spans the enabled "
      .. "parts, zero_pad widens it) and its RMSNorm's fp32 weight product are not its intermediates here",
    "training.framework = \"litgpt\": fit()'s `logits` list lives until the next forward returns; here it is "
      .. "released at the end of forward (the chunks' bf16 log_softmax outputs stay saved until backward)",
    "training.framework = \"litgpt\": the validation pass and generate_example, which max_memory_allocated "
      .. "also covers, are not simulated (no saved activations: below the training step's peak)",
  }
  if t.quant == "nf4" then
    n[#n + 1] = "training.framework = \"litgpt\" with quant = \"nf4\": lm_head is 4-bit too, StableEmbedding replaces "
      .. "the embedding after the optimizer is made (its bf16 gradient kept, in no optimizer), bnb.optim.PagedAdamW"
  end
  return n
end

return M
