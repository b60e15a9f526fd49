-- litgpt.lua: litgpt's LoRA fine-tuning program (litgpt 0.5.13, litgpt/finetune/lora.py; the
-- precision plugin is lightning.fabric's BitsandbytesPrecision) where it keeps other tensors than
-- transformers + peft on the same weights (training.framework = "litgpt"):
--
--   head        fit() calls model(input_ids, lm_head_chunk_size=128): lm_head runs on 128-token
--               chunks of ln_f's output; the Fabric wrapper's convert_output hands fit() fp32
--               copies of the chunks, and utils.chunked_cross_entropy takes those as they are
--               (vrsim/lm_loss.lua litgpt_chunked);
--   quantize    --quantize bnb.nf4 (bnb.nf4-dq: training.quant_double): BitsandbytesPrecision
--               has no ignore_modules there, so every nn.Linear made under fabric.init_module,
--               lm_head too, is _NF4Linear (compress_statistics=False for bnb.nf4), quantized
--               from `weight.to(torch.half)`: its fp16 QuantState makes MatMul4Bit dequantize to
--               fp16 and copy to bf16 (strategies/quant.lua, cx.quant_from_dtype);
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
--               output through its v view) with LoRAQKVLinear on it: one dropout, lora_A over the
--               enabled parts, lora_B as conv1d, zero_pad's (b, s, q + k + v) tensor, whose
--               index_copy_ keeps conv1d's output for its backward; grouped
--               keys and values repeat_interleave'd to every query head; no KV cache in training;
--   norms       litgpt's RMSNorm: fp32 through the weight product;
--   logits      fit()'s `logits` list bound until the next forward returns.
--
-- Not modelled here, each named in a note of the run: the rest of litgpt's own module tree (the
-- model simulated is the transformers one of the same config: litgpt's apply_rope multiplies by
-- fp32 cos and sin, its MLP and block are transformers' ops of the same shapes), and the
-- validation pass and generate_example that max_memory_allocated also covers (no saved
-- activations: below the training step's peak), and under --quantize the layers GPT's
-- construction builds, quantizes and replaces, which stay on the GPU until CPython's cyclic
-- collector runs (M.notes says why).
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
  if type(t.lora) == "table" and t.lora.dtype and t.lora.dtype ~= "bf16" then
    return no(("training.lora.dtype = %s: litgpt makes its adapters under fabric.init_module in the precision's dtype "
               .. "(bf16-true: bf16); leave it unset"):format(tostring(t.lora.dtype)))
  end
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
    return no(("loss %s: litgpt's head and loss are its own (128-token chunks, an fp32 cross-entropy on "
               .. "convert_output's copies); leave training.loss unset"):format(tostring(t.loss)))
  end
  for _, k in ipairs { "checkpointing", "compile", "compile_loss", "inference", "generate", "dpo", "float8", "data",
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
-- Linear. Records which parts are enabled on the LoRA settings (lora.litgpt_qkv) and targets
-- qkv_proj in their place; the adapters are made in the precision's dtype (fabric.init_module
-- under bf16-true), not peft's fp32.
function M.fused_targets(lora)
  local out, on = {}, {}
  for _, n in ipairs(lora.targets) do
    if n == "q_proj" or n == "k_proj" or n == "v_proj" then
      if not next(on) then out[#out + 1] = "qkv_proj" end
      on[n:sub(1, 1)] = true
    else
      out[#out + 1] = n
    end
  end
  lora.targets = out
  lora.litgpt_qkv = next(on) and on or nil
  lora.dtype = "bf16"
end

-- LoRAQKVLinear.forward (litgpt/lora.py), its lora_A (r x enabled parts, in) and lora_B
-- (the enabled parts' widths, r):
--   pretrained = self.linear(x)
--   after_A = F.linear(self.lora_dropout(x), self.lora_A)
--   after_B = self.conv1d(after_A.transpose(-2, -1), self.lora_B.unsqueeze(-1)).transpose(-2, -1)
--   lora = self.zero_pad(after_B) * self.scaling
--   return pretrained + lora
-- conv1d is one grouped conv1d where n_head == n_query_groups, else one conv1d per enabled part
-- on input.chunk / lora_B.split, then torch.cat. zero_pad (where a part is not enabled):
-- x.new_zeros(..., out_features).index_copy_(-1, self.lora_ind, after_B), lora_ind a clone of
-- the index buffer the first call registers. IndexCopyBackward0 keeps the index and the source
-- too (derivatives.yaml's source gradient is grad.index_select(dim, index).expand_as(source):
-- the whole tensor is saved, not its sizes), so after_B, a view of conv1d's output (of
-- torch.cat's where the parts differ), holds that (b, width, t) storage until the layer's
-- backward. pretrained, after_A, after_B and lora are locals until the function returns.
local function qkv_forward(cx, m, x)
  local ad = m.lora
  local s, on, q = ad.cfg, ad.cfg.litgpt_qkv, m.litgpt_qkv
  local name = m.opname
  local b, t = x.shape[1], x.shape[2]
  local pretrained = ad.base(cx, m, x)
  local A, B = mod.weight(cx, ad.A), mod.weight(cx, ad.B)
  local xd = x
  if s.dropout > 0 then
    -- native_dropout: its bool mask (kept for backward), then the output
    local _, out = nn.op(cx, { name = name .. ".lora_dropout", inputs = { x },
                               outs = { { name .. ".dropout_mask", x.shape, "bool", no_grad = true },
                                        { name .. ".lora_dropout", x.shape, x.dtype } },
                               save_outs = { 1 }, frees = {}, flops = nn.numel(x.shape), host = "dropout" })
    xd = out
  end
  local a = nn.linear(cx, name .. ".lora_A", xd, A, nil, { lora = { s.r, "A" } })
  local rn, width = s.r * #q.sizes, q.width
  local at = nn.view(cx, a, { b, rn, t }, name .. ".after_A.T")
  local function conv(cname, inp, w, n)
    return nn.op(cx, { name = cname, kind = "mm", inputs = { inp, w }, outs = { { cname, { b, n, t }, x.dtype } },
                       saves = { inp, w }, frees = {}, flops = 2 * b * t * n * s.r, host = "conv" })
  end
  local conv_out
  if q.grouped then
    conv_out = conv(name .. ".lora_B (conv1d)", at, B, width)
  else
    local parts, off = {}, 0
    for k, n in ipairs(q.sizes) do
      local ink = nn.view(cx, at, { b, s.r, t }, ("%s.after_A.chunk%d"):format(name, k))
      local wk = nn.view(cx, B, { n, s.r }, ("%s.lora_B.split%d"):format(name, k))
      parts[k] = conv(("%s.lora_B%d (conv1d)"):format(name, k), ink, wk, n)
      off = off + n
    end
    conv_out = nn.op(cx, { name = name .. ".lora_B.cat", kind = "copy", inputs = parts,
                           outs = { { name .. ".after_B", { b, width, t }, x.dtype } } })
  end
  local after_B = nn.view(cx, conv_out, { b, t, width }, name .. ".after_B")
  local padded = after_B
  local zeros, ind
  if width ~= m.out_features then
    -- self.lora_ind: the buffer registered by the first call, cloned by every call
    if not q.buffer then
      q.buffer = { id = cx.G:tensor { name = name .. "._lora_ind", bytes = width * 8, numel = width, dtype = "int64",
                                      cat = "temp", persistent = true }, shape = { width }, dtype = "int64" }
      cx.G:op { name = name .. ".register_buffer(_lora_ind)", kind = "none", phase = cx.phase, inputs = {},
                outputs = { q.buffer.id }, frees = {}, once = true }
    end
    ind = nn.op(cx, { name = name .. ".lora_ind.clone", kind = "copy", inputs = { q.buffer }, frees = {},
                      outs = { { name .. ".lora_ind", { width }, "int64" } } })
    zeros = nn.op(cx, { name = name .. ".new_zeros", inputs = {},
                        outs = { { name .. ".zero_pad", { b, t, m.out_features }, x.dtype } } })
    -- index_copy_ writes into `result` in place: the output is that storage, now with history
    padded = { id = cx.G:tensorv(name .. ".zero_pad", 0, nn.numel(zeros.shape), x.dtype, nil, true, nil, nil, nil,
                                 nil, zeros.id), shape = zeros.shape, dtype = x.dtype, rg = true, base = zeros }
    nn.op(cx, { name = name .. ".index_copy_", kind = "strided", inputs = { zeros, after_B, ind }, out_tensors = { padded },
                saves = { ind, after_B }, grads = { "none", { dtype = x.dtype }, "none" }, frees = { zeros, ind },
                bytes = 2 * nn.bytes(after_B.shape, x.dtype) })
  end
  local lora = nn.op(cx, { name = name .. ".lora_scale", inputs = { padded }, frees = zeros and { padded } or {},
                           outs = { { name .. ".lora", { b, t, m.out_features }, x.dtype } },
                           flops = b * t * m.out_features, host = "mul_scalar" })
  local y = nn.op(cx, { name = name .. ".lora_add", inputs = { pretrained, lora }, frees = {},
                        outs = { { name .. ".lora_sum", pretrained.shape, x.dtype } },
                        grads = { { pass = 1 }, { pass = 1 } }, host = "add" })
  nn.release(cx, { pretrained, a, conv_out, lora, x }, name .. ": LoRAQKVLinear.forward returns")
  return y
end

-- After peft-style adapters are applied (strategies/lora.lua apply), the fused qkv's becomes
-- litgpt's LoRAQKVLinear: its lora_A and lora_B shapes and its forward.
function M.qkv_adapters(hit, mc)
  for _, m in ipairs(hit) do
    local on = m.lora and m.lora.cfg.litgpt_qkv
    if on and m.path:match("qkv_proj$") then
      local qd, kvd = mc.heads * mc.head_dim, mc.kv_heads * mc.head_dim
      local sizes = {}
      if on.q then sizes[#sizes + 1] = qd end
      if on.k then sizes[#sizes + 1] = kvd end
      if on.v then sizes[#sizes + 1] = kvd end
      local width = 0
      for _, n in ipairs(sizes) do width = width + n end
      m.litgpt_qkv = { sizes = sizes, width = width, grouped = mc.heads == mc.kv_heads }
      local r = m.lora.cfg.r
      m.lora.shape_A = { r * #sizes, m.in_features }
      m.lora.shape_B = { width, r }
      m.cls = "LoRAQKVLinear"
      m.forward = qkv_forward
    end
  end
end

-- litgpt's RMSNorm.forward (litgpt/model.py):
--   dtype = x.dtype; x = x.float(); norm_x = torch.mean(x * x, dim=-1, keepdim=True)
--   x_normed = x * torch.rsqrt(norm_x + self.eps)
--   return (x_normed * weight.float()).to(dtype=dtype)
-- Every intermediate is fp32, the weight product too. What autograd keeps: x * x (MulBackward0,
-- self and other the same tensor) and x * rsqrt keep the fp32 x, rsqrt keeps its result, and
-- x_normed * weight.float() keeps the fp32 weight copy for x_normed's gradient; x_normed itself
-- only where the weight trains (mark_only_lora_as_trainable freezes it under LoRA). So the saved
-- bytes are those of transformers' LlamaRMSNorm; the fp32 x_normed, the fp32 product and its
-- bf16 cast are the forward's transients, and backward's gradients are fp32 up to x.float().
local function rmsnorm_forward(cx, m, x)
  local w = mod.weight(cx, m.p.weight)
  local name = m.opname
  local x32 = nn.to(cx, x, "fp32", name .. ".float")
  -- x * x: the two products of MulBackward0 (grad * other, grad * self) land in one input
  -- buffer, the second added into the first and dropped
  local sq = nn.op(cx, { name = name .. ".x_mul_x", inputs = { x32 }, outs = { { name .. ".x_sq", x.shape, "fp32" } },
                         saves = { x32 }, grads = { { dtype = "fp32" } },
                         bwd_workspace = { nn.bytes(x.shape, "fp32") }, flops = nn.numel(x.shape) })
  local rshape = {}
  for i = 1, #x.shape - 1 do rshape[i] = x.shape[i] end
  rshape[#rshape + 1] = 1
  local var = nn.op(cx, { name = name .. ".mean", kind = "reduce_rows", inputs = { sq },
                          outs = { { name .. ".norm_x", rshape, "fp32" } } })
  local ve = nn.ew(cx, name .. ".add_eps", { var }, "fp32", nil, { { pass = 1 } })
  -- RsqrtBackward0: -0.5 * grad * result.pow(3), two temporaries before the gradient
  local rs = nn.op(cx, { name = name .. ".rsqrt", inputs = { ve }, outs = { { name .. ".rsqrt", rshape, "fp32" } },
                         save_outs = { 1 }, bwd_workspace = { nn.bytes(rshape, "fp32"), nn.bytes(rshape, "fp32") },
                         bwd_workspace_first = true, bwd_kernels = 3 })
  -- x * rsqrt: rsqrt's gradient is the full product, reduced to its shape as the node returns
  local xn = nn.mul(cx, name .. ".x_normed", x32, rs, "fp32", { bwd_workspace = { nn.bytes(x.shape, "fp32") },
                                                                bwd_workspace_first = true })
  local w32 = nn.to(cx, w, "fp32", name .. ".weight_float")
  local y = nn.mul(cx, name .. ".mul_weight", xn, w32, "fp32")
  return nn.to(cx, y, x.dtype, name)
end

-- litgpt's GPT norms in place of transformers' (the same weights, litgpt's forward).
function M.rmsnorms(root)
  mod.walk(root, function(m)
    if m.cls and m.cls:match("RMSNorm$") then
      m.cls = "RMSNorm"
      m.forward = rmsnorm_forward
    end
  end)
end

-- fit()'s `logits`: the list `model(input_ids, lm_head_chunk_size=128)` returned stays bound
-- through chunked_cross_entropy, backward, the optimizer step and the next iteration's forward,
-- until that forward returns and `logits = ...` drops it. Called once this micro-batch's
-- chunks exist: drops the previous list and keeps this one. Within a step a list is dropped by
-- the next micro-batch; the last micro-batch's list crosses into the next step, so once its
-- backward is done (cx.after_backward, run by vrsim/plan.lua) its chunks pass to persistent
-- tensors of the same sizes (allocated as they are freed: the allocator reuses the freed
-- blocks), which the next step's first forward drops as its own chunks exist (in the first step
-- there is nothing yet to drop).
function M.rebind_logits(cx, chunks)
  local c = cx.litgpt_logits
  if not c then
    c = { carried = {} }
    cx.litgpt_logits = c
    for k, t in ipairs(chunks) do
      c.carried[k] = { id = cx.G:tensor { name = ("fit(): logits[%d] of the last iteration"):format(k - 1),
                                          bytes = nn.bytes(t.shape, t.dtype), numel = nn.numel(t.shape),
                                          dtype = t.dtype, cat = "activation", persistent = true } }
    end
    cx.after_backward = cx.after_backward or {}
    cx.after_backward[#cx.after_backward + 1] = function()
      local ids, prev = {}, {}
      for k, t in ipairs(c.carried) do ids[k], prev[k] = t.id, c.prev[k].id end
      cx.G:op { name = "fit(): the last micro-batch's logits after its backward", kind = "none", phase = "optim",
                inputs = {}, outputs = {}, frees = prev }
      cx.G:op { name = "fit(): logits kept into the next step", kind = "none", phase = "optim", inputs = {},
                outputs = ids, frees = {} }
    end
  end
  if c.prev then
    nn.release(cx, c.prev, "fit(): logits = model(...) drops the last micro-batch's list")
  else
    local ids = {}
    for k, t in ipairs(c.carried) do ids[k] = t.id end
    cx.G:op { name = "fit(): logits = model(...) drops the last step's list", kind = "none", phase = cx.phase,
              inputs = {}, outputs = {}, frees = ids, drop_persistent = true }
  end
  c.prev = chunks
end

-- The notes a litgpt run carries: what of litgpt's program is not simulated.
function M.notes(t)
  local n = {
    "training.framework = \"litgpt\": litgpt's GPT simulated as the transformers model of the same config with "
      .. "its fused qkv Linear (LoRAQKVLinear), its RMSNorm and fit()'s logits list; its apply_rope (products with fp32 "
      .. "cos and sin) is transformers' rotary here",
    "training.framework = \"litgpt\": the validation pass and generate_example, which max_memory_allocated "
      .. "also covers, are not simulated (no saved activations: below the training step's peak)",
  }
  if t.quant == "nf4" then
    n[#n + 1] = "training.framework = \"litgpt\" with quant = \"nf4\": lm_head is 4-bit too, StableEmbedding replaces "
      .. "the embedding after the optimizer is made (its bf16 gradient kept, in no optimizer), bnb.optim.PagedAdamW"
    -- lora.Block.__init__ runs BaseBlock's, which builds an attention and an MLP, then replaces
    -- both; lora.CausalSelfAttention replaces the base qkv and proj the same way. Under
    -- BitsandbytesPrecision each replaced Linear was already quantized on the GPU, and the module
    -- is in reference cycles: Lightning's _Linear4bit registers a load_state_dict pre-hook
    -- partial(_quantize_on_load_hook, self.quantize_) (a bound method of itself), and bnb's
    -- Linear4bit holds Params4bit(..., module=self), which holds the module back. It is freed only
    -- when CPython's cyclic collector reaches its generation.
    n[#n + 1] = "training.framework = \"litgpt\" with quant = \"nf4\": the layers GPT's construction builds and "
      .. "replaces (lora.Block replaces BaseBlock's attention and MLP, lora.CausalSelfAttention the base qkv and "
      .. "proj) are quantized before they are replaced, and each is in reference cycles (Lightning's _Linear4bit "
      .. "keeps a load_state_dict pre-hook bound to itself; bitsandbytes' Params4bit keeps module=self): their "
      .. "4-bit weights and absmax stay on the GPU until CPython's cyclic collector runs, which follows the "
      .. "interpreter's own allocation counts and is not simulated "
      .. "(measured, Llama-2-7B on an H100: 6 replaced MLPs, 435 MiB, still held at the first step's peak, 3 "
      .. "(218 MiB) at the later steps')"
  end
  return n
end

return M
