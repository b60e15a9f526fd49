-- llama2.lua: Hugging Face transformers' LlamaForCausalLM (5.x), op by op as it runs in
-- training: the allocations each aten op makes, what autograd saves, and in which dtype.
-- Checked against the allocator traces in validation/traces/optrace_pub-*.csv.gz (modeling_llama.py
-- line numbers there are transformers 5.17's).
local nn = require "vrsim.nn"

local M = {}

-- Named shapes (transformers' LlamaConfig for the Llama-2 checkpoints).
M.sizes = {
  ["7b"]  = { hidden = 4096, intermediate = 11008, heads = 32, kv_heads = 32, layers = 32 },
  ["13b"] = { hidden = 5120, intermediate = 13824, heads = 40, kv_heads = 40, layers = 40 },
  ["70b"] = { hidden = 8192, intermediate = 28672, heads = 64, kv_heads = 8, layers = 80 },
}

-- Resolves "7b", "13b-l4" (the 13b shape cut to 4 layers) or explicit fields into a shape.
function M.shape(model)
  if model.config then
    local c = require("vrsim.core").read_config(model.config)
    if c.model_type and c.model_type ~= "llama" then
      error(("%s: model_type '%s' is not llama"):format(model.config, c.model_type), 0)
    end
    local function int(k) return c[k] and math.tointeger(c[k]) end
    model = { hidden = model.hidden or int("hidden_size"),
              intermediate = model.intermediate or int("intermediate_size"),
              heads = model.heads or int("num_attention_heads"),
              kv_heads = model.kv_heads or int("num_key_value_heads"),
              layers = model.layers or int("num_hidden_layers"),
              vocab = int("vocab_size") or model.vocab, size = "config" }
    M.sizes.config = model
  end
  local size = model.size or "7b"
  local base, cut = tostring(size):match("^(%w+)%-l(%d+)$")
  base = base or size
  local s = M.sizes[base]
  if not s and not model.hidden then
    local names = {}
    for k in pairs(M.sizes) do names[#names + 1] = k end
    table.sort(names)
    error(("unknown LLaMA2 size '%s' (known: %s, or NAME-lN for N layers, or give hidden, "
           .. "intermediate, heads, layers)"):format(size, table.concat(names, ", ")), 0)
  end
  s = s or {}
  local shape = {
    hidden = model.hidden or s.hidden, intermediate = model.intermediate or s.intermediate,
    heads = model.heads or s.heads, kv_heads = model.kv_heads or s.kv_heads or model.heads,
    layers = model.layers or (cut and tonumber(cut)) or s.layers, vocab = model.vocab or 32000,
  }
  for k, v in pairs(shape) do
    if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) then
      error(("model.%s must be a positive integer"):format(k), 0)
    end
  end
  if shape.hidden % shape.heads ~= 0 then error("model.hidden must be a multiple of heads", 0) end
  if shape.heads % shape.kv_heads ~= 0 then error("model.heads must be a multiple of kv_heads", 0) end
  return shape
end

-- Type promotion of two floating dtypes (PyTorch's rules for same-category tensors).
local function promote(a, b)
  if a == b then return a end
  if a == "fp32" or b == "fp32" then return "fp32" end
  return "fp32" -- bf16 with fp16 promotes to fp32
end

-- Parameters in construction order (LlamaForCausalLM.__init__), module per parameter.
local function make_params(cx, sh, pdtype, trainable, lora, quant)
  local h, kvh = sh.hidden, sh.hidden // sh.heads * sh.kv_heads
  local P = { layers = {} }
  local function param(name, shape, dt, tr)
    local tr2 = trainable
    if tr ~= nil then tr2 = tr end
    return nn.param(cx, name, shape, dt or pdtype, tr2)
  end
  -- the decoder's linear weights, quantized by bitsandbytes when asked (lm_head is skipped, as
  -- llm_int8_skip_modules defaults to it)
  local linear_param = param
  if quant ~= "none" then
    local q = require "strategies.quant"
    linear_param = function(name, shape)
      return q.param(cx, name, shape, quant, pdtype, true)
    end
  end
  cx.module = "embed"
  P.embed = param("model.embed_tokens.weight", { sh.vocab, h })
  for l = 0, sh.layers - 1 do
    cx.layer = l
    cx.module = l
    local p, L = "model.layers." .. l .. ".", {}
    L.q = linear_param(p .. "self_attn.q_proj.weight", { h, h })
    L.k = linear_param(p .. "self_attn.k_proj.weight", { kvh, h })
    L.v = linear_param(p .. "self_attn.v_proj.weight", { kvh, h })
    L.o = linear_param(p .. "self_attn.o_proj.weight", { h, h })
    L.gate = linear_param(p .. "mlp.gate_proj.weight", { sh.intermediate, h })
    L.up = linear_param(p .. "mlp.up_proj.weight", { sh.intermediate, h })
    L.down = linear_param(p .. "mlp.down_proj.weight", { h, sh.intermediate })
    L.ln1 = param(p .. "input_layernorm.weight", { h })
    L.ln2 = param(p .. "post_attention_layernorm.weight", { h })
    P.layers[l + 1] = L
  end
  cx.layer = -1
  cx.module = "norm"
  P.norm = param("model.norm.weight", { h })
  cx.module = "lm_head"
  P.lm_head = param("lm_head.weight", { sh.vocab, h })
  cx.module = nil
  if lora then
    -- peft adds adapters after the base model is built; autocast_adapter_dtype keeps them fp32
    for l = 0, sh.layers - 1 do
      local L = P.layers[l + 1]
      L.lora = {}
      for _, tgt in ipairs(lora.targets) do
        local w = L[tgt]
        local base = "base_model.model.model.layers." .. l .. ".self_attn." .. tgt .. "_proj."
        L.lora[tgt] = {
          A = param(base .. "lora_A.default.weight", { lora.r, w.shape[2] }, lora.dtype, true),
          B = param(base .. "lora_B.default.weight", { w.shape[1], lora.r }, lora.dtype, true),
        }
      end
    end
  end
  return P
end

-- A linear layer as the precision policy runs it: under autocast the input and the (cached)
-- weight are cast to the low-precision dtype first.
local function linear(cx, name, x, w)
  if w.quant then return require("strategies.quant").linear(cx, name, x, w) end
  if cx.autocast then
    local lp = cx.autocast
    local xc = nn.to(cx, x, lp, name .. ".input_cast")
    local wc = cx.cast_cache[w.id]
    if not wc and w.dtype ~= lp then
      wc = nn.cast(cx, w, lp, name .. ".weight_cast", w.name .. "." .. lp)
      cx.cast_cache[w.id] = wc
    end
    return nn.linear(cx, name, xc, wc or w)
  end
  return nn.linear(cx, name, x, w)
end

-- peft LoRA Linear.forward: base result, input cast to the adapter dtype, dropout, A, B,
-- scaling, add (promotes), cast back.
local function lora_linear(cx, name, x, w, ad, lora)
  local result = linear(cx, name, x, w)
  -- `x = self._cast_input_dtype(x, lora_A.weight.dtype)`: the cast input is forward's local `x`
  -- until it returns (fulltrace_held-lora-13b-l4-b8-ckpt: freed after the output cast)
  local xa = nn.to(cx, x, ad.A.dtype, name .. ".lora_input_cast")
  local xd = xa
  if lora.dropout > 0 then
    -- native_dropout makes its bool mask, then the output; backward needs only the mask
    local _, out = nn.op(cx, { name = name .. ".lora_dropout", inputs = { xa },
                               outs = { { name .. ".dropout_mask", xa.shape, "bool", no_grad = true },
                                        { name .. ".lora_dropout", xa.shape, xa.dtype } },
                               save_outs = { 1 }, frees = {}, flops = nn.numel(xa.shape) })
    xd = out
  end
  local a = nn.linear(cx, name .. ".lora_A", xd, ad.A)
  local b = nn.linear(cx, name .. ".lora_B", a, ad.B)
  local scaled = nn.ew(cx, name .. ".lora_scale", { b }, b.dtype)
  local sum = nn.op(cx, { name = name .. ".lora_add", inputs = { result, scaled },
                          outs = { { name .. ".lora_sum", result.shape,
                                     promote(result.dtype, scaled.dtype) } },
                          grads = { { pass = 1 }, { pass = 1 } } })
  local y = nn.to(cx, sum, result.dtype, name .. ".lora_out_cast")
  if xd ~= xa then nn.release(cx, { xa }, name .. ": lora forward returns") end
  return y
end

-- LlamaRMSNorm.forward: hidden.to(fp32); variance = pow(2).mean(-1); hidden * rsqrt(var + eps);
-- weight * hidden.to(input_dtype).
local function rmsnorm(cx, name, x, w)
  local x32 = nn.to(cx, x, "fp32", name .. ".to_fp32")
  -- PowBackward0 (grad * 2 * x) makes its two temporaries before the result
  -- (optrace_pub-c04: the third of its three allocations is the gradient kept)
  local sq = nn.op(cx, { name = name .. ".pow", inputs = { x32 },
                         outs = { { name .. ".squared", x.shape, "fp32" } }, saves = { x32 },
                         bwd_workspace = { nn.bytes(x.shape, "fp32"), nn.bytes(x.shape, "fp32") },
                         bwd_workspace_first = true })
  local rshape = {}
  for i = 1, #x.shape - 1 do rshape[i] = x.shape[i] end
  rshape[#rshape + 1] = 1
  local var = nn.op(cx, { name = name .. ".mean", kind = "reduce_rows", inputs = { sq },
                          outs = { { name .. ".variance", rshape, "fp32" } } })
  local ve = nn.ew(cx, name .. ".add_eps", { var }, "fp32")
  local rs = nn.op(cx, { name = name .. ".rsqrt", inputs = { ve },
                         outs = { { name .. ".rsqrt", rshape, "fp32" } }, save_outs = { 1 } })
  -- x32 * rs: the gradient of rs (computed first, as `other`'s) is the full product, reduced
  -- to rs's shape by the engine as the node returns; then x32's gradient
  local y = nn.op(cx, { name = name .. ".mul", kind = "broadcast_rows", inputs = { x32, rs },
                        outs = { { name .. ".normed", x.shape, "fp32" } }, saves = { x32, rs },
                        bwd_workspace = { nn.bytes(x.shape, "fp32") }, bwd_workspace_first = true })
  local yb = nn.to(cx, y, x.dtype, name .. ".to_input_dtype")
  local odt = promote(w.dtype, yb.dtype)
  -- `hidden_states` keeps y until the function returns, after the weight multiply
  local drops = { w, yb }
  if yb ~= y then drops[3] = y end
  -- weight * hidden broadcasts the weight. MulBackward0 makes hidden's gradient (grad * weight)
  -- and the full product grad * hidden, and returns; the engine then drops the incoming
  -- gradient and reduces the product to the weight's shape (InputMetadata::reduce_grad: a row
  -- sum with ATen's staging buffers) before the node's saved hidden is released
  -- (fulltrace_pub-c05: 64, 64 MiB in, 64 out, the 132 MiB staging in and out, then 64, 64 out).
  -- So the reduction is an op of its own, on the weight's side, created first (its backward runs
  -- after the product's), and it is the one that keeps hidden.
  local wv, saves = w, {}
  if w.rg and not cx.no_grad then
    local c = x.shape[#x.shape]
    wv = nn.view(cx, w, w.shape, name .. ".weight_side")
    wv.rg = true
    nn.op(cx, { name = name .. ".weight_grad", kind = "none", inputs = { w }, out_tensors = { wv },
                saves = { yb }, grads = { { dtype = w.dtype } }, bytes = 0, bwd_kind = "reduce_rows",
                bwd_workspace = nn.row_sum_buffers(cx, nn.numel(x.shape) // c, c),
                bwd_bytes = nn.bytes(x.shape, odt) + nn.bytes(w.shape, w.dtype), frees = {} })
  end
  if yb.rg then saves[1] = w end
  local out = nn.op(cx, { name = name, kind = "broadcast", inputs = { wv, yb },
                          outs = { { name, x.shape, odt } }, saves = saves,
                          grads = { { bytes = nn.bytes(x.shape, odt), dtype = odt }, { dtype = yb.dtype } },
                          grad_order = { 2, 1 }, frees = drops, flops = nn.numel(x.shape), dtype = odt })
  return out
end

-- rotate_half(x) * sin + x * cos, as apply_rotary_pos_emb runs it.
local function rotary(cx, name, x, cos, sin)
  local xc = nn.op(cx, { name = name .. ".mul_cos", kind = "strided", inputs = { x, cos },
                         outs = { { name .. ".x_cos", x.shape, promote(x.dtype, cos.dtype) } },
                         saves = { cos }, grads = { "new", "none" } })
  local half = {}
  for i = 1, #x.shape do half[i] = x.shape[i] end
  half[#half] = half[#half] // 2
  -- x1 = x[..., :d/2], x2 = x[..., d/2:] are views; backward of each slice is a full-size buffer
  local x1 = nn.view_op(cx, name .. ".x1", x, half, nil, "strided")
  local x2 = nn.view_op(cx, name .. ".x2", x, half, nil, "strided")
  local neg = nn.op(cx, { name = name .. ".neg", kind = "strided", inputs = { x2 },
                          outs = { { name .. ".neg", half, x.dtype } } })
  local rot = nn.op(cx, { name = name .. ".cat", kind = "cat_strided", inputs = { neg, x1 },
                          outs = { { name .. ".rotated", x.shape, x.dtype } },
                          grads = { { pass = 1 }, { pass = 1 } } })
  local rs = nn.op(cx, { name = name .. ".mul_sin", kind = "broadcast", inputs = { rot, sin },
                         outs = { { name .. ".rot_sin", x.shape, promote(x.dtype, sin.dtype) } },
                         saves = { sin }, grads = { "new", "none" } })
  return nn.op(cx, { name = name .. ".add", inputs = { xc, rs },
                     outs = { { name .. ".embed", x.shape, xc.dtype } },
                     grads = { { pass = 1 }, { pass = 1 } } })
end

-- Attention core: a fused SDPA kernel or eager matmul-softmax-matmul.
local function attention(cx, name, q, k, v, sh, b, s, impl)
  local hd = sh.hidden // sh.heads
  local shape = { b, sh.heads, s, hd }
  local flops = 4 * b * sh.heads * s * s * hd / 2 -- causal: half the score matrix
  if impl == "sdpa" then impl = nn.sdpa_backend(cx.arch, q.dtype) end
  local dt = q.dtype
  if impl == "mem_efficient" then
    -- memory-efficient attention saves q, k, v, the output, a logsumexp padded to a multiple of
    -- 32 rows, and its philox seed and offset
    local lse_shape = { b, sh.heads, (s + 31) // 32 * 32 }
    local out = nn.op(cx, {
      name = name .. ".sdpa_mem_efficient", kind = "attention_mem_efficient", inputs = { q, k, v },
      outs = { { name .. ".attn_out", shape, dt }, { name .. ".logsumexp", lse_shape, "fp32", no_grad = true },
               { name .. ".philox", { 2 }, "int64", no_grad = true } },
      save_outs = { 1, 2, 3 }, saves = { q, k, v },
      flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
    return out
  end
  if impl == "flash" then
    -- flash attention: the output and an fp32 logsumexp per row are saved with q, k, v (the
    -- philox state is empty without dropout); backward allocates dq, dk, dv, an fp32 dq
    -- accumulator and an fp32 row statistic (softmax_d)
    local lse_shape = { b, sh.heads, s }
    local out = nn.op(cx, {
      name = name .. ".sdpa_flash", kind = "attention_flash", inputs = { q, k, v },
      outs = { { name .. ".attn_out", shape, dt }, { name .. ".logsumexp", lse_shape, "fp32", no_grad = true } },
      save_outs = { 1, 2 }, saves = { q, k, v }, grad_order = { 1, 2, 3 },
      bwd_workspace = { nn.numel(q.shape) * 4 + nn.bytes(lse_shape, "fp32") },
      flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
    return out
  end
  if impl == "cudnn" then
    -- cuDNN fused attention: two 8-byte philox tensors, the output, an fp32 softmax statistic
    -- per row, a small workspace; backward allocates dq, dk, dv and an fp32 dq accumulator plus
    -- a row statistic (checked against validation/traces/optrace_pub-c04.csv.gz)
    local lse_shape = { b, sh.heads, s }
    local seed = nn.new_tensor(cx, name .. ".philox_seed", { 1 }, "int64", false)
    local off = nn.new_tensor(cx, name .. ".philox_offset", { 1 }, "int64", false)
    local out = nn.new_tensor(cx, name .. ".attn_out", shape, dt, not cx.no_grad)
    local lse = nn.new_tensor(cx, name .. ".softmax_stats", lse_shape, "fp32", false)
    nn.op(cx, { name = name .. ".sdpa_cudnn", kind = "attention_cudnn", inputs = { q, k, v },
                out_tensors = { seed, off, out, lse }, saves = { k, q, v, lse, out, seed, off },
                workspace = { 256 }, grad_order = { 1, 2, 3 },
                bwd_workspace = { nn.numel(q.shape) * 4 + nn.bytes(lse_shape, "fp32") + 256 },
                flops = flops, bwd_flops = 2.5 * flops, dtype = dt })
    return out
  end
  -- eager_attention_forward: scores = q @ k^T * scaling (+ mask); softmax in fp32, cast back;
  -- probs @ v; transpose(1, 2).contiguous()
  local sshape = { b, sh.heads, s, s }
  local dt = q.dtype
  -- torch.matmul folds (batch, heads) into bmm's one batch dim. q, k and v are laid out as the
  -- (b, s, heads * d) projections they came from, so with b > 1 no single batch stride exists
  -- and reshape copies each (_unsafe_view of a clone: the gradient passes straight through);
  -- bmm then saves the copies. With b = 1 the fold is a view. (fulltrace_held-eager-ckpt-b2:
  -- two 32 MiB copies before each q @ k^T, one before each probs @ v.)
  local function bmm_operand(x, what)
    if b == 1 then return x end
    return nn.op(cx, { name = name .. "." .. what .. "_bmm_copy", kind = "transpose", inputs = { x },
                       outs = { { name .. "." .. what .. "_bmm", x.shape, x.dtype } },
                       grads = { { pass = 1 } } })
  end
  q, k = bmm_operand(q, "q"), bmm_operand(k, "k")
  -- BmmBackward0 computes mat2's gradient before self's, as MmBackward0 does
  local scores = nn.op(cx, { name = name .. ".qk", kind = "mm", inputs = { q, k },
                             outs = { { name .. ".scores", sshape, dt } }, saves = { q, k }, grad_order = { 2, 1 },
                             flops = 2 * b * sh.heads * s * s * hd, dtype = dt })
  -- scores * scaling: its backward is the gradient times the same constant, as many bytes
  local scaled = nn.op(cx, { name = name .. ".scale", inputs = { scores }, outs = { { name .. ".scale", sshape, dt } },
                             flops = nn.numel(sshape), bwd_bytes = 2 * nn.bytes(sshape, dt) })
  local masked = nn.op(cx, { name = name .. ".add_mask", inputs = { scaled, cx.mask },
                             outs = { { name .. ".masked", sshape, dt } },
                             grads = { { pass = 1 }, "none" } })
  -- softmax(x, dtype=float32) on a bf16 input is input.to(float32) then _softmax (only fp16 has a
  -- fused half-to-float kernel): the cast is an autograd node of its own, so backward makes the
  -- gradient in fp32 first and casts it back
  local m32 = nn.to(cx, masked, "fp32", name .. ".scores_fp32")
  -- its CUDA backward (softmax_backward_cuda_out, aten/src/ATen/native/cuda/SoftMax.cu) first
  -- computes `Tensor tmp = grad * output;`: a temporary the size of the gradient, in its dtype
  local p32 = nn.op(cx, { name = name .. ".softmax", kind = "softmax", inputs = { m32 },
                          outs = { { name .. ".probs_fp32", sshape, "fp32" } }, save_outs = { 1 },
                          bwd_workspace = { nn.bytes(sshape, "fp32") },
                          flops = 5 * nn.numel(sshape), dtype = "fp32" })
  local pr = nn.to(cx, p32, dt, name .. ".probs_cast")
  -- `attn_weights = softmax(attn_weights, ...).to(...)`: the old value dies on reassignment
  nn.release(cx, { masked }, name .. ": attn_weights reassigned")
  v = bmm_operand(v, "v")
  -- the attention weights are also LlamaAttention's second return value, which the decoder
  -- layer binds to `_` until it returns (the caller releases them): pv drops only v
  local o = nn.op(cx, { name = name .. ".pv", kind = "mm", inputs = { pr, v },
                        outs = { { name .. ".attn_out", shape, dt } }, saves = { pr, v }, frees = { v },
                        grad_order = { 2, 1 },
                        flops = 2 * b * sh.heads * s * s * hd, dtype = dt })
  return o, pr
end

-- Builds the forward graph; returns the loss tensor. cfg is the normalized plan config.
function M.build(cx, cfg)
  local sh = M.shape(cfg.model)
  local t = cfg.training
  local b, s = t.micro_batch, t.seq
  local prec = t.precision
  local pdtype = ({ fp32 = "fp32", mp_fp32 = "fp32", amp_bf16 = "fp32", amp_fp16 = "fp32", bf16 = "bf16",
                    fp16 = "fp16", lora_bf16 = "bf16", lora_fp16 = "fp16" })[prec]
  local lora = nil
  if prec:match("^lora") or t.lora then
    local lc = t.lora or {}
    lora = { r = lc.r or 8, alpha = lc.alpha or 32, dropout = lc.dropout or 0.05,
             targets = lc.targets or { "q", "v" }, dtype = "fp32" }
  end
  if prec == "amp_bf16" then cx.autocast = "bf16" elseif prec == "amp_fp16" then cx.autocast = "fp16" end
  local h, hd = sh.hidden, sh.hidden // sh.heads
  local kvh = hd * sh.kv_heads

  -- the model as the measured runs make it: built on the GPU in fp32, then cast with .to()
  cx.phase = "build"
  local build_dtype = (t.build == "direct" or t.inference or t.quant ~= "none") and pdtype or "fp32"
  local dmap = nil
  if t.device_map == "auto" then
    if not t.inference then error("training.device_map = \"auto\" is for inference (set inference = true)", 0) end
    -- module sizes from the shapes, in the order Accelerate walks them
    dmap = require "strategies.device_map"
    local es = nn.DT_SIZE[pdtype]
    local lsize = (2 * h * h + 2 * h * kvh + 3 * h * sh.intermediate + 2 * h) * es
    local order, sizes = { "embed" }, { embed = sh.vocab * h * es }
    for l = 0, sh.layers - 1 do order[#order + 1] = l; sizes[l] = lsize end
    order[#order + 1] = "norm"; sizes.norm = h * es
    order[#order + 1] = "lm_head"; sizes.lm_head = sh.vocab * h * es
    dmap.setup(cx, cfg, order, sizes)
  end
  local P = make_params(cx, sh, build_dtype, not lora and not t.inference, lora, t.quant)
  if cx.dp and cx.dp.init_partitioned then
    for _, p in ipairs(cx.params) do if p.sharded then p.dtype = pdtype end end
  end
  if build_dtype ~= pdtype then
    -- Module._apply: every parameter of a module is converted (new tensor, old one freed)
    -- depth first, in construction order; LoRA adapters stay fp32
    for _, p in ipairs(cx.params) do
      if not (lora and p.trainable) and not (p.sharded and cx.dp.init_partitioned) then
        cx.layer = p.layer
        local keep = cx.shard_param
        cx.shard_param = nil -- the cast copy is not a new parameter to shard
        local np = nn.param(cx, p.name, p.shape, pdtype, p.trainable, nil)
        cx.shard_param = keep
        cx.params[#cx.params] = nil
        cx.G:op { name = "to(" .. pdtype .. ") " .. p.name, kind = "elementwise", phase = "build",
                  inputs = { p.id }, outputs = { np.id }, frees = { p.id },
                  bytes = nn.bytes(p.shape, "fp32") + nn.bytes(p.shape, pdtype) }
        p.id, p.dtype = np.id, pdtype
      end
    end
  end
  -- a sharding strategy (FSDP2 fully_shard, ZeRO-3) now replaces the whole parameters by shards
  if cx.dp then require("strategies.dp").after_build(cx) end
  -- the input batch is made once, after the model and optimizer, and reused every step
  local ids = { id = cx.G:tensor { name = "input_ids", bytes = b * s * 8, numel = b * s,
                                   dtype = "int64", cat = "temp", persistent = true },
                shape = { b, s }, dtype = "int64", rg = false, name = "input_ids" }
  cx.G:op { name = "input_ids", kind = "none", phase = "build", inputs = {}, outputs = { ids.id },
            frees = {} }
  cx.phase = "fwd"

  local dp = cx.dp and require "strategies.dp"
  local function gather(holder, keys, layer) if dp then dp.gather(cx, holder, keys, layer) end end
  cx.layer = -1
  cx.last_layer = sh.layers - 1

  -- one forward pass (a micro-batch); gradient accumulation calls it again
  local function forward()
    -- embedding; FSDP2's root group (embed_tokens, norm, lm_head: what fully_shard(model)
    -- holds beside the layers) is one all-gather as forward starts, kept through backward
    local root_at_once = cx.dp and cx.dp.kind == "fsdp2"
    gather(P, root_at_once and { "embed", "norm", "lm_head" } or { "embed" }, -1)
    local x
    -- device_map: the hidden state as it travels between devices (nil: not on this GPU)
    local hidden = { shape = { b, s, h }, dtype = pdtype }
    if not dmap or dmap.enter(cx, "embed", nil, hidden.shape, hidden.dtype) then
      local PE, streamed = P, nil
      if dmap then PE, streamed = dmap.stream_in(cx, "embed", P, { "embed" }) end
      x = nn.op(cx, { name = "embed_tokens", kind = "gather", inputs = { ids, PE.embed },
                      outs = { { "inputs_embeds", { b, s, h }, PE.embed.dtype } },
                      saves = { ids }, grads = { "none", { dtype = PE.embed.dtype } },
                      -- embedding_backward_cuda_kernel's fp32 partial sums, sized for the most
                      -- partial segments there can be without a device sync: numel /
                      -- NROWS_PER_THREAD (10) + min(numel, vocab) rows of h (fulltrace_pub-c04:
                      -- 147636224 bytes at 8192 tokens)
                      bwd_workspace = { (b * s // 10 + math.min(b * s, sh.vocab)) * h * 4 } })
      if dmap then dmap.stream_out(cx, "embed", streamed) end
    else
      x = nil
    end
    local embeds = x
    if x and lora and t.checkpointing then
      -- enable_input_require_grads(): a forward hook makes the embedding output require grad
      x.rg = true
    end
    -- rotary embedding: cos/sin computed in fp32 then cast to the hidden dtype
    local rshape = { 1, s, hd }
    -- create_causal_mask comes before the rotary embedding. For eager attention it builds a
    -- boolean (s, s) mask, turns it into the additive (b, 1, s, s) mask in the model's dtype and
    -- drops the boolean one (fulltrace_held-eager-ckpt-b2: 4 MiB in, 16 MiB in, 4 MiB out, then
    -- the rotary tables); SDPA needs none (is_causal)
    if t.attention == "eager" then
      local allowed = nn.op(cx, { name = "causal_mask.bool", inputs = {},
                                  outs = { { "causal_mask.bool", { 1, 1, s, s }, "bool" } } })
      cx.mask = nn.op(cx, { name = "causal_mask", inputs = { allowed },
                            outs = { { "causal_mask", { b, 1, s, s }, pdtype == "fp32" and (cx.autocast or "fp32") or pdtype } } })
    end
    -- inv_freq @ position_ids is a matmul: the first cuBLAS call of the step (workspace)
    local freqs = nn.op(cx, { name = "rotary.freqs", kind = "mm", inputs = {},
                              outs = { { "rotary.freqs", { 1, s, hd // 2 }, "fp32" } } })
    local emb = nn.op(cx, { name = "rotary.cat", inputs = { freqs },
                            outs = { { "rotary.emb", rshape, "fp32" } } })
    -- cos = emb.cos() * attention_scaling (a second tensor; the first dies at once)
    local cos32 = nn.ew(cx, "rotary.cos_scaled", { nn.ew(cx, "rotary.cos", { emb }, "fp32") }, "fp32")
    local sin32 = nn.ew(cx, "rotary.sin_scaled", { nn.ew(cx, "rotary.sin", { emb }, "fp32") }, "fp32")
    local cos = nn.to(cx, cos32, x and x.dtype or hidden.dtype, "rotary.cos_cast")
    local sin = nn.to(cx, sin32, x and x.dtype or hidden.dtype, "rotary.sin_cast")
    for l = 1, sh.layers do
      cx.layer = l - 1
      -- gradient_checkpointing_enable(use_reentrant=False): each decoder layer is a region
      -- layer scope: each decoder layer (or every k-th) is a region; attention scope: only the
      -- attention core of each layer is recomputed (selective checkpointing)
      local ck = t.checkpointing and ((l - 1) % t.checkpoint_every == 0)
      local ck_layer = ck and t.checkpoint_scope == "layer"
      local ck_attn = ck and t.checkpoint_scope == "attention"
      cx.region = ck_layer and l or nil
      local L = P.layers[l]
      local streamed = nil
      if dmap then
        local xin = dmap.enter(cx, l - 1, x, hidden.shape, hidden.dtype)
        if not xin then goto next_layer end
        if xin ~= true then x = xin end
        L, streamed = dmap.stream_in(cx, l - 1, L, { "ln1", "q", "k", "v", "o", "ln2", "gate", "up", "down" })
      end
      gather(L, { "ln1", "q", "k", "v", "o", "ln2", "gate", "up", "down" }, l - 1)
      local pre = "layers." .. (l - 1)
      -- the decoder layer's arguments: hidden_states, then (as keyword arguments in the
      -- checkpointed partial) the attention mask and position_embeddings
      if ck_layer then nn.checkpoint_args(cx, { x, cx.mask, cos, sin }) end
      local residual = x
      local hn = rmsnorm(cx, pre .. ".input_layernorm", x, L.ln1)
      local function proj(nm, w)
        if lora and L.lora and L.lora[nm] then
          return lora_linear(cx, pre .. ".self_attn." .. nm .. "_proj", hn, w, L.lora[nm], lora)
        end
        return linear(cx, pre .. ".self_attn." .. nm .. "_proj", hn, w)
      end
      -- `x_proj(hidden_states).view(hidden_shape).transpose(1, 2)` for q, then k, then v (the
      -- autograd nodes in that order); backward copies the non-contiguous gradient
      local q = proj("q", L.q)
      if ck_attn then cx.region = l end
      local qv = nn.view_op(cx, pre .. ".q_heads", q, { b, sh.heads, s, hd })
      if ck_attn then cx.region = nil end
      local k = proj("k", L.k)
      if ck_attn then cx.region = l end
      local kv = nn.view_op(cx, pre .. ".k_heads", k, { b, sh.kv_heads, s, hd })
      if ck_attn then cx.region = nil end
      local v = proj("v", L.v)
      if ck_attn then cx.region = l end
      -- v's gradient: cuDNN attention's backward makes dv with v's strides, so when v reaches
      -- it directly (no cache copy, no repeat_kv) dv transposed back is already contiguous and
      -- the view's backward copies nothing (fulltrace_pub-c05: no 64 MiB copy after each
      -- attention backward). A cache copy, repeat_kv or eager bmm hands back a contiguous
      -- (b, heads, s, d) gradient, which the view back copies.
      local attn_impl = t.attention == "sdpa" and nn.sdpa_backend(cx.arch, cx.autocast or v.dtype) or t.attention
      local cached = not t.checkpointing or t.inference
      local vv
      if attn_impl == "cudnn" and not cached and sh.kv_heads == sh.heads then
        vv = nn.view(cx, v, { b, sh.kv_heads, s, hd }, pre .. ".v_heads")
      else
        vv = nn.view_op(cx, pre .. ".v_heads", v, { b, sh.kv_heads, s, hd })
      end
      local qe = rotary(cx, pre .. ".q_rotary", qv, cos, sin)
      local ke = rotary(cx, pre .. ".k_rotary", kv, cos, sin)
      -- `query_states, key_states = apply_rotary_pos_emb(...)`: the projections die together
      nn.release(cx, { qv, kv }, pre .. ": query/key states reassigned")
      -- DynamicCache.update (use_cache defaults to True): torch.cat onto an empty cache copies
      -- the keys and values; the copies are what attention sees and saves
      -- (with checkpointing transformers turns use_cache off: no copies)
      local kc, vc = ke, vv
      if not t.checkpointing or t.inference then
        -- `key_states, value_states = past_key_values.update(...)`: both copies are made before
        -- the names are rebound and the originals go (fulltrace_dev-x2-zero1-trace)
        kc = nn.op(cx, { name = pre .. ".cache_keys", kind = "copy", inputs = { ke },
                         outs = { { pre .. ".cache.keys", ke.shape, ke.dtype } },
                         grads = { { pass = 1 } }, frees = {} })
        vc = nn.op(cx, { name = pre .. ".cache_values", kind = "transpose", inputs = { vv },
                         outs = { { pre .. ".cache.values", vv.shape, vv.dtype } },
                         grads = { { pass = 1 } }, frees = {} })
        nn.release(cx, { ke, vv }, pre .. ": key/value states rebound to the cache's")
      end
      if sh.kv_heads ~= sh.heads then
        -- repeat_kv: expand + reshape copies the keys and values to every query head
        local rep = { b, sh.heads, s, hd }
        kc = nn.op(cx, { name = pre .. ".repeat_k", inputs = { kc }, outs = { { pre .. ".k_rep", rep, kc.dtype } },
                         grads = { { dtype = kc.dtype } } })
        vc = nn.op(cx, { name = pre .. ".repeat_v", inputs = { vc }, outs = { { pre .. ".v_rep", rep, vc.dtype } },
                         grads = { { dtype = vc.dtype } } })
      end
      local qa = qe
      if cx.autocast and qe.dtype ~= cx.autocast then
        qa = nn.to(cx, qe, cx.autocast, pre .. ".q_cast")
        kc = nn.to(cx, kc, cx.autocast, pre .. ".k_cast")
        vc = nn.to(cx, vc, cx.autocast, pre .. ".v_cast")
      end
      local ao, attn_weights = attention(cx, pre .. ".self_attn", qa, kc, vc, sh, b, s, t.attention)
      local ao2
      if t.attention == "eager" then
        -- transpose(1, 2).contiguous()
        ao2 = nn.op(cx, { name = pre .. ".attn_transpose", inputs = { ao },
                          outs = { { pre .. ".attn_out_t", { b, s, h }, ao.dtype } } })
      else
        ao2 = nn.view(cx, ao, { b, s, h })
      end
      if ck_attn then cx.region = nil end
      local o = linear(cx, pre .. ".self_attn.o_proj", ao2, L.o)
      -- LlamaAttention.forward returns: its locals die; the caller's `hidden_states` (the normed
      -- input) is reassigned to the attention output
      nn.release(cx, { qa, kc, vc }, pre .. ": self_attn returns")
      nn.release(cx, { hn }, pre .. ": hidden_states reassigned")
      local h1 = nn.op(cx, { name = pre .. ".residual_add1", inputs = { residual, o },
                             outs = { { pre .. ".h1", { b, s, h }, promote(residual.dtype, o.dtype) } },
                             grads = { { pass = 1 }, { pass = 1 } } })
      local hn2 = rmsnorm(cx, pre .. ".post_attention_layernorm", h1, L.ln2)
      local g = linear(cx, pre .. ".mlp.gate_proj", hn2, L.gate)
      local act = nn.ew(cx, pre .. ".mlp.silu", { g }, g.dtype, { g })
      local u = linear(cx, pre .. ".mlp.up_proj", hn2, L.up)
      local m = nn.mul(cx, pre .. ".mlp.mul", act, u, act.dtype)
      local d = linear(cx, pre .. ".mlp.down_proj", m, L.down)
      nn.release(cx, { hn2 }, pre .. ": hidden_states reassigned")
      -- `hidden_states = residual + hidden_states`: the MLP output goes with the rebinding,
      -- the residual when the layer returns
      x = nn.op(cx, { name = pre .. ".residual_add2", inputs = { h1, d },
                      outs = { { pre .. ".out", { b, s, h }, promote(h1.dtype, d.dtype) } },
                      grads = { { pass = 1 }, { pass = 1 } }, frees = { d, h1 } })
      -- LlamaModel.forward's `hidden_states` keeps the layer's input until the layer returns;
      -- the first layer's input is also its `inputs_embeds`, alive until the model returns
      -- (fulltrace_dev-x2-zero1-trace: no 64 MiB free after layer 0)
      -- `hidden_states, _ = self.self_attn(...)`: eager attention's weights die with `_` here
      -- too (fulltrace_held-eager-ckpt-b2: a 512 MiB free after the MLP)
      local dropped = {}
      if residual ~= embeds then dropped[#dropped + 1] = residual end
      if attn_weights then dropped[#dropped + 1] = attn_weights end
      nn.release(cx, dropped, pre .. ": returns")
      if dp then dp.release(cx, l - 1) end
      if dmap then dmap.stream_out(cx, l - 1, streamed) end
      ::next_layer::
    end
    cx.layer = -1
    cx.region = nil
    if not root_at_once then gather(P, { "norm", "lm_head" }, -1) end
    local PH = P
    if dmap then
      -- final norm and head: on this GPU only if placed here (then they end the forward here)
      local xin = dmap.enter(cx, "norm", x, hidden.shape, hidden.dtype)
      if not xin or not cx.dm.on_me("lm_head") then
        if xin and xin ~= true then x = xin end
        dmap.enter(cx, "lm_head", x, hidden.shape, hidden.dtype)
        nn.end_forward(cx)
        return x
      end
      if xin ~= true then x = xin end
      local s1, s2
      PH, s1 = dmap.stream_in(cx, "norm", P, { "norm" })
      PH, s2 = dmap.stream_in(cx, "lm_head", PH, { "lm_head" })
      cx.streamed_tail = { s1, s2 }
    end
    local hf = rmsnorm(cx, "model.norm", x, PH.norm)
    nn.release(cx, { x }, "model.norm: hidden_states reassigned")
    if embeds and embeds ~= x then nn.release(cx, { embeds }, "LlamaModel.forward returns: inputs_embeds") end
    local logits = linear(cx, "lm_head", hf, PH.lm_head)
    if dmap and cx.streamed_tail then
      dmap.stream_out(cx, "norm", cx.streamed_tail[1])
      dmap.stream_out(cx, "lm_head", cx.streamed_tail[2])
    end
    nn.hold(cx, logits) -- CausalLMOutputWithPast.logits lives until the output object is dropped
    if t.inference then
      -- model(input_ids) under torch.no_grad(): no labels, no loss; the logits and the key/value
      -- cache are what the caller keeps
      if dp then dp.release(cx, -1, true) end
      nn.end_forward(cx)
      return logits
    end
    -- ForCausalLMLoss: logits.float(); labels padded and shifted; cross_entropy = log_softmax
    -- (saves its fp32 output) + nll_loss
    local lf = nn.to(cx, logits, "fp32", "logits.float")
    local labels = nn.op(cx, { name = "labels.pad", inputs = {}, outs = { { "labels_padded", { b, s + 1 }, "int64" } } })
    local shifted = nn.op(cx, { name = "labels.shift", inputs = { labels }, outs = { { "shift_labels", { b, s }, "int64" } } })
    -- What the kernels move (torch.profiler's kernel table of a real step,
    -- validation/measure/profile_tables_h200.jsonl): log_softmax's backward
    -- (cunn_SoftMaxBackward) reads the output gradient and the saved output and writes the input
    -- gradient, three passes; nll_loss reads one log-probability and one label per row (19 us
    -- for 8192 rows), and its backward fills a zero gradient the size of the logits, then
    -- writes one value per row (FillFunctor, then nll_loss_backward_reduce_cuda_kernel_2d)
    local fp32_logits = nn.bytes(lf.shape, "fp32")
    local lsm = nn.op(cx, { name = "log_softmax", kind = "softmax", inputs = { lf },
                            outs = { { "log_probs", lf.shape, "fp32" } }, save_outs = { 1 },
                            flops = 5 * nn.numel(lf.shape), bwd_bytes = 3 * fp32_logits })
    local loss = nn.op(cx, { name = "nll_loss", inputs = { lsm, shifted },
                             outs = { { "loss", {}, "fp32" }, { "total_weight", {}, "fp32", no_grad = true } },
                             saves = { shifted, lsm }, save_outs = { 2 },
                             grads = { { dtype = "fp32" }, "none" },
                             bytes = b * s * (4 + 8), bwd_bytes = fp32_logits, bwd_kernels = 2 })
  if dp then dp.release(cx, -1, true) end
    nn.end_forward(cx)
    return loss
  end

  local loss = forward()
  cx.tokens = b * s * (t.grad_accum or 1)
  return loss, P, sh, forward
end

return M
