-- quant.lua: bitsandbytes' quantized linear layers and 8-bit optimizer state, with the layouts
-- and temporaries of its source (bitsandbytes 0.50.2, the GPU records' version:
-- bitsandbytes/nn/modules.py Params4bit and Int8Params, bitsandbytes/autograd/_functions.py
-- matmul_4bit, MatMul4Bit and MatMul8bitLt, bitsandbytes/backends/cuda/ops.py gemm_4bit and
-- int8_vectorwise_quant, bitsandbytes/functional.py quantize_4bit / dequantize_4bit,
-- bitsandbytes/optim/optimizer.py Optimizer2State.init_state; docs/techniques.md gives the lines).
--
-- NF4 (load_in_4bit, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True):
--   weight      uint8, numel / 2 bytes (two 4-bit codes per byte)
--   absmax      one per 64-element block; with double quantization stored as uint8 (1 byte per
--               block) plus an fp32 absmax per 256 of those blocks, a 256-entry fp32 code and an
--               fp32 offset; without it fp32 (4 bytes per block)
--   forward     gemm_4bit: the fused kernel (output only) or dequantize + F.linear (the absmax
--               in fp32 twice and the weight in the compute dtype, temporary), as bitsandbytes'
--               table for the GPU picks (strategies/bnb_gemm4bit.lua); MatMul4Bit keeps the
--               packed weight, not the input
--   backward    the input gradient dequantizes the weight again (the fp32 absmax and the weight)
-- LLM.int8 (load_in_8bit, threshold 6.0):
--   weight      int8 CB (numel bytes) and fp32 row scales SCB (out_features x 4 bytes)
--   forward     int8_vectorwise_quant of an fp16 copy of the input: SCA fp32 (tokens), CA int8
--               (tokens x in), the fp16 abs and bool mask of the outlier test (temporary);
--               int8_linear_matmul into int32 (tokens x out x 4 bytes); int8_mm_dequant to the
--               input's dtype (tokens x out); the outlier columns' extra matmul (data-dependent)
--               is left out, with a note
-- 8-bit AdamW (bnb.optim.AdamW8bit, block_wise): per parameter with >= 4096 elements: state1
--   and state2 uint8 (numel bytes each), absmax1 and absmax2 fp32 (one per 256-element block);
--   smaller parameters keep fp32 states; one fused kernel per parameter, no temporaries.
-- Paged (is_paged=True: transformers' paged_adamw_8bit / _32bit, paged_lion_8bit / _32bit;
--   Optimizer8bit.get_state_buffer): state1 and state2 of a parameter of >= 1e5 elements come
--   from F.get_paged, cudaMallocManaged memory outside PyTorch's caching allocator, registered
--   with the GlobalPageManager; smaller ones, the absmax and the qmaps are ordinary tensors.
--   The 32-bit variants keep fp32 states for every parameter (no absmax). Lion has state1 only.
-- The step's time: one kernel and a torch.cuda.synchronize() per parameter, with the host's work
--   between them, priced from the table measured on the run's GPU where it has one
--   (strategies/bnb_optim.lua); elsewhere each kernel at its bytes, with a note.
--   The managed bytes go to cx.paged_bytes: the engine places them beside the allocator's
--   reserve and pages out what does not fit (sim/engine.c page_managed).
--
-- torchao's NF4Tensor (quant = "torchao_nf4": torchtune's QLoRA builders, LoRALinear and
-- FrozenNF4Linear with quantize_base; torchao 0.18 quantization/quantize_/workflows/nf4/nf4_tensor.py,
-- to_nf4(weight, block_size=64, scaler_block_size=256) from a bf16 weight):
--   weight      quantized_data uint8, numel / 2 bytes; quantized_scalers int8, one a 64-element
--               block; quantization_factor in the weight's dtype, one per 256 scalers; scaler_mean
--               and the 16-entry nf4 table in the weight's dtype
--   linear_nf4  LinearNF4.forward: ctx.save_for_backward(weight) (the NF4 weight alone: no input),
--               F.linear(input, weight.to(input.dtype)); backward: grad_output @ weight.to(dtype)
--   compiled    weight.to(bf16) is get_original_weight's chain (shifts, int64 indices, the table
--               lookup, the scalers' dequantization, the interleaving torch.stack), which Inductor
--               fuses into one kernel from the 4-bit tensors to the bf16 weight; the GEMM (an extern
--               kernel) reads that weight, so it is materialized. The stack decomposes to aten.cat,
--               which the partitioner does not recompute (not in its allowlist), and backward
--               reads the bf16 weight: the partition saves it, 2 bytes a weight, until the layer's
--               backward (validation/oracle/check_nf4_partition.py shows the saved weight). In a
--               checkpointed layer the recomputation makes it again and it lives until backward
--               has used it.
--   eager       get_original_weight keeps every intermediate in Python locals until it returns
--               (two int64 index tensors, 8 bytes a weight; the bf16 lookups, 2; their scaled
--               products, 2; the stacked weight, 2): 14 bytes a weight at once, 13 kernels, in
--               forward and again in LinearNF4's backward (linear_nf4_eager below). Modelled
--               where a layer runs eager under compile (transformers' checkpointing graph-breaks
--               around it); a run without compile is refused by check below.
local nn = require "vrsim.nn"

local M = {}

local function tensor(cx, name, bytes, dtype, cat, persistent)
  return cx.G:tensor { name = name, bytes = bytes, numel = bytes // nn.DT_SIZE[dtype],
                       dtype = dtype, cat = cat, persistent = persistent,
                       param = cat == "param" }
end

-- A quantized weight's packed codes: `bytes` of `dtype`, counted in the reports' parameter
-- counts (summary.json's per-module `parameters`) as the `n` weights they encode, not as the
-- elements of their storage.
local function packed(cx, name, bytes, dtype, n)
  return cx.G:tensor { name = name, bytes = bytes, numel = n, dtype = dtype, cat = "param",
                       persistent = true, param = true }
end

-- A quantized weight's state (absmax, scales, codebook): bytes on the GPU beside the weight, no
-- parameters of their own (a count of 0: the number of blocks is not a number of weights).
local function qstate(cx, name, bytes, dtype)
  return cx.G:tensor { name = name, bytes = bytes, numel = 0, dtype = dtype, cat = "param",
                       persistent = true, param = true }
end

-- The dtype the packed 4-bit codes are stored in (bnb_4bit_quant_storage): `given` is the scenario's
-- choice; "auto" follows the FSDP-QLoRA and ZeRO-3 QLoRA recipes (peft's docs, bitsandbytes'
-- fsdp_qlora guide, axolotl), which set it to the model's dtype so that the sharding strategy
-- sees a floating parameter, and transformers' BitsAndBytesConfig default (uint8) otherwise.
function M.storage(given, strategy, param_dtype)
  if given ~= "auto" then return given end
  if strategy == "fsdp2" or strategy == "zero3" then return param_dtype end
  return "uint8"
end

-- A quantized, frozen weight of `shape` (out, in). Returns a parameter table whose parts are
-- persistent tensors; p.id is the packed weight.
--
-- NF4 packs two codes a byte into `storage` (quantize_4bit: ((n + 1) // (2 * itemsize), 1)
-- elements of the quant storage dtype). Under fsdp2 or zero3 (cx.shard_param) a packed weight in
-- a floating storage is a frozen parameter like any other, so it is sharded, gathered per unit
-- and offloaded with offload_param; in uint8 accelerate leaves it out of fully_shard
-- (fsdp2_prepare_model: non-floating frozen Params4bit go to ignored_params), so every rank keeps
-- it whole. The quantization state (absmax, the nested absmax and code) is a QuantState held on
-- the Params4bit and on the module (Linear4bit.quant_state), not a parameter: no strategy shards
-- or offloads it, every rank keeps it whole.
function M.param(cx, name, shape, kind, compute_dtype, double_quant)
  local n = nn.numel(shape)
  local p = { shape = shape, dtype = compute_dtype, rg = false, trainable = false, name = name,
              param = true, quant = kind, layer = cx.layer, parts = {} }
  if kind == "nf4" then
    local blocks = (n + 63) // 64
    local storage = cx.quant_storage or "uint8"
    local size = nn.DT_SIZE[storage]
    local elems = (n + 1) // (2 * size)
    p.storage, p.nb, p.blocks, p.double_quant = storage, elems * size, blocks, double_quant
    -- the dtype of the tensor quantize_4bit was given (QuantState.dtype: what dequantize_4bit
    -- writes): the weight's own, or cx.quant_from_dtype where the framework quantizes a copy
    -- (Lightning's BitsandbytesPrecision: weight.to(torch.half))
    p.qdtype = cx.quant_from_dtype or compute_dtype
    local whole = p.nb
    if cx.shard_param and storage ~= "uint8" and cx.shard_param(cx, p) then
      p.sharded = true
      -- partitioned at construction (rank-0 loading, zero.Init): never whole on this GPU
      if cx.dp.init_partitioned then whole = 0 end
    end
    p.id = packed(cx, name, whole, storage, n)
    if double_quant then
      p.parts[1] = qstate(cx, name .. ".absmax (uint8)", blocks, "uint8")
      p.parts[2] = qstate(cx, name .. ".absmax2", ((blocks + 255) // 256) * 4, "fp32")
      p.parts[3] = qstate(cx, name .. ".code", 256 * 4, "fp32")
      p.parts[4] = qstate(cx, name .. ".offset", 4, "fp32")
    else
      p.parts[1] = qstate(cx, name .. ".absmax", blocks * 4, "fp32")
    end
  elseif kind == "torchao_nf4" then
    -- NF4Tensor.from_tensor: the inner tensors (__tensor_flatten__), all persistent on the GPU;
    -- double_quantize_scalers asserts that the 64-weight blocks' scalers fill 256-scaler blocks
    if n % (64 * 256) ~= 0 then
      error(("%s: torchao's to_nf4 needs a multiple of 64 x 256 weights (block_size 64, "
             .. "scaler_block_size 256); this one has %d"):format(name, n), 0)
    end
    local dsz = nn.DT_SIZE[compute_dtype]
    p.storage, p.nb, p.blocks = "uint8", n // 2, n // 64
    p.id = packed(cx, name .. ".quantized_data", p.nb, "uint8", n)
    p.parts[1] = qstate(cx, name .. ".quantized_scalers", n // 64, "int8")
    p.parts[2] = qstate(cx, name .. ".quantization_factor", (n // (64 * 256)) * dsz, compute_dtype)
    p.parts[3] = qstate(cx, name .. ".scaler_mean", dsz, compute_dtype)
    p.parts[4] = qstate(cx, name .. ".nf4", 16 * dsz, compute_dtype)
  elseif kind == "int8" then
    p.id = packed(cx, name, n, "int8", n)
    p.parts[1] = qstate(cx, name .. ".SCB", shape[1] * 4, "fp32")
    p.dtype = "fp16"
  else
    error("unknown quantization '" .. tostring(kind) .. "' (nf4 or int8)", 0)
  end
  -- numel for parameter counts in reports: the logical weight
  cx.params[#cx.params + 1] = p
  return p
end

-- Adds `text` to the run's notes unless it is there already.
local function note_once(cx, text)
  cx.notes = cx.notes or {}
  for _, t in ipairs(cx.notes) do
    if t == text then return end
  end
  cx.notes[#cx.notes + 1] = text
end

-- get_original_weight as eager PyTorch runs it (torchao 0.18 nf4_tensor.py), one kernel a line,
-- for a weight of n elements (h = n / 2 codes, b = n / 64 scalers) in dtype dt: each step's
-- label, memory-access class, output (elements, dtype; nil: none kept) and bytes moved.
-- fulltrace_ttc-torchao-nf4-compile-ckpt allocates them in this order for every eager
-- dequantization of an MLP weight (n = 58,720,256): 29,360,128 and 234,881,024 bytes twice (the
-- uint8 code and its int64 copy, the code freed at once), 58,720,256 twice (the table lookups),
-- 1,835,008 twice (the scalers), 58,720,256 four times (each repeated.flatten() copy and its
-- product, the copy freed at once), then the 117,440,512-byte weight; the rest when it returns.
local function nf4_eager_steps(n, dt)
  local h, b, s = n // 2, n // 64, nn.DT_SIZE[dt]
  return {
    { "quantized_data >> 4", "elementwise", h, "uint8", 2 * h },
    { "first.to(long)", "cast_up", h, "int64", 9 * h, drop = 1 },
    { "quantized_data & 0b1111", "elementwise", h, "uint8", 2 * h },
    { "second.to(long)", "cast_up", h, "int64", 9 * h, drop = 3 },
    { "nf4[first]", "gather", h, dt, (8 + s) * h },
    { "nf4[second]", "gather", h, dt, (8 + s) * h },
    { "scalers / quantization_factor", "broadcast_rows", b, dt, (1 + s) * b },
    { "+ scaler_mean", "elementwise", b, dt, 2 * s * b, drop = 7 },
    { "repeated.flatten() (first)", "copy", h, dt, s * (b + h) },
    { "scaled_first", "elementwise", h, dt, 3 * s * h, drop = 9 },
    { "repeated.flatten() (second)", "copy", h, dt, s * (b + h) },
    { "scaled_second", "elementwise", h, dt, 3 * s * h, drop = 11 },
    { "torch.stack", "cat_strided", n, dt, 4 * s * h },
  }
end

-- linear_nf4 in a layer that runs eager (under compile, a layer transformers' checkpointing
-- makes dynamo graph-break around: strategies/compile.lua eager_layer). LinearNF4.forward runs
-- get_original_weight (nf4_eager_steps), F.linear on its result, and saves the NF4 weight alone:
-- the bf16 weight is gone when forward returns, and LinearNF4.backward runs get_original_weight
-- again before grad_output @ weight (the trace above dequantizes each MLP weight three times a
-- step: forward, recomputation, backward). That backward chain is declared as pass-through ops
-- after the GEMM, one a kernel, whose backward nodes run in the chain's order just before the
-- GEMM's: each passes the gradient on and costs its kernel; the last (the stack) holds the
-- chain's 14 bytes a weight (int64 codes, lookups, products, the weight) while it runs, and the
-- GEMM's backward holds the weight it reads.
local function linear_nf4_eager(cx, name, x, w, shape, flops)
  local n = w.shape[1] * w.shape[2]
  local dt = x.dtype
  local steps = nf4_eager_steps(n, dt)
  local src = { id = w.id, shape = { w.nb }, dtype = "uint8", rg = false }
  local outs, held = {}, {}
  local pre = name .. ".get_original_weight."
  for i, st in ipairs(steps) do
    local inputs = i == 1 and { src } or { outs[i - 1] }
    outs[i] = nn.op(cx, { name = pre .. st[1], kind = st[2], inputs = inputs,
                          outs = { { pre .. st[1], i == #steps and { w.shape[1], w.shape[2] } or { st[3] }, st[4] } },
                          bytes = st[5] })
    if st.drop then nn.release(cx, { outs[st.drop] }, pre .. st[1]) end
  end
  -- the locals get_original_weight keeps until it returns, before F.linear runs
  for _, k in ipairs { 2, 4, 5, 6, 8, 10, 12 } do held[#held + 1] = outs[k] end
  nn.release(cx, held, pre .. "returns")
  local wd = outs[#steps]
  local y = nn.op(cx, { name = name, kind = "mm", inputs = { x, wd }, outs = { { name, shape, dt } },
                        saves = { src }, grads = { { dtype = dt }, "none" }, bwd_workspace = { n * nn.DT_SIZE[dt] },
                        bwd_workspace_first = true, flops = flops, bwd_flops = flops, dtype = dt,
                        bytes = nn.bytes(x.shape, dt) + n * nn.DT_SIZE[dt] + nn.bytes(shape, dt) })
  -- LinearNF4.backward's get_original_weight: declared last step first, so that backward runs it
  -- first step first
  local live = {}
  for _, k in ipairs { 2, 4, 5, 6, 10, 12, 13 } do
    local st = steps[k]
    live[#live + 1] = st[3] * nn.DT_SIZE[st[4]]
  end
  for i = #steps, 1, -1 do
    local st = steps[i]
    local v = nn.view(cx, y, shape, name)
    nn.op(cx, { name = name .. ".backward: get_original_weight." .. st[1], kind = "none", inputs = { y },
                out_tensors = { v }, grads = { { pass = 1 } }, bytes = 0, bwd_kind = st[2],
                bwd_bytes = st[5], bwd_workspace = i == #steps and live or nil })
    y = v
  end
  return y
end

-- x @ w.T through the quantized weight. Returns the output tensor.
function M.linear(cx, name, x, w)
  local n = nn.numel(w.shape)
  local shape = {}
  for i = 1, #x.shape - 1 do shape[i] = x.shape[i] end
  shape[#shape + 1] = w.shape[1]
  local tokens = nn.numel(x.shape) // x.shape[#x.shape]
  local flops = 2 * tokens * w.shape[1] * w.shape[2]
  local era = cx.bnb or require("strategies.bnb_version").era()
  local cast = w.quant == "nf4" and w.qdtype and w.qdtype ~= w.dtype and w.qdtype ~= x.dtype
  if w.quant == "nf4" and (cast or not era.gemm_4bit) then
    -- MatMul4Bit.forward before bitsandbytes 0.50 (every release: the dequantize and F.linear),
    -- or where the weight was quantized from another dtype:
    -- `F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t())`. dequantize_4bit makes,
    -- for a double-quantized weight, the absmax in fp32 (the offset added in place), then the
    -- weight in QuantState.dtype; where that is not A's, `.to` copies it into A's dtype and the
    -- first copy goes as it returns. The GEMM reads the weight, dropped when F.linear returns.
    -- Backward makes the same again for the input gradient, before its output. What the op
    -- keeps: `ctx.tensors = (A, B)` before 0.43.2, the input alive until backward although
    -- backward reads only B; `(None, B)` from 0.43.2 (strategies/bnb_version.lua).
    -- In a region of the non-reentrant checkpoint the kept A escapes it: ctx.tensors is a plain
    -- attribute, not save_for_backward, so the saved-tensor hooks never see it and every such
    -- input stays alive until backward reaches the region (bitsandbytes #1270's "high memory
    -- usage"), held here with the region's arguments until its backward is done, the op's own
    -- node going a little earlier. Under the reentrant one the forward runs under no_grad and
    -- keeps nothing; the recomputation keeps A as the saves below do.
    local keeps = era.keeps_input and x.rg
    if keeps and cx.region and not cx.ckpt_reentrant then nn.checkpoint_args(cx, { x }) end
    local q = { id = w.id, shape = { w.nb }, dtype = "uint8", rg = false }
    local qdt = w.qdtype or x.dtype
    local first = n * nn.DT_SIZE[qdt]
    local ins = { q }
    if w.double_quant then
      ins[2] = nn.op(cx, { name = name .. ".dequantize_blockwise", inputs = { q }, frees = {},
                           outs = { { name .. ".absmax_fp32", { w.blocks }, "fp32" } },
                           flops = w.blocks, bytes = w.blocks * 5 })
    end
    local wd = nn.op(cx, { name = name .. ".dequantize_4bit", inputs = ins, frees = { ins[2] },
                           outs = { { name .. ".weight_dequantized", { w.shape[1], w.shape[2] }, qdt } },
                           flops = 2 * n, bytes = n / 2 + first })
    if cast then
      wd = nn.op(cx, { name = name .. ".weight_dequantized.to(" .. x.dtype .. ")", inputs = { wd },
                       outs = { { name .. ".weight_cast", { w.shape[1], w.shape[2] }, x.dtype } },
                       flops = n, bytes = first + n * nn.DT_SIZE[x.dtype] })
    end
    -- backward: the absmax, the weight in QuantState.dtype (and its copy in A's), then grad_A
    local bws = w.double_quant and { w.blocks * 4, first } or { first }
    if cast then bws[#bws + 1] = n * nn.DT_SIZE[x.dtype] end
    return nn.op(cx, { name = name, kind = "mm", inputs = { x, wd }, outs = { { name, shape, x.dtype } },
                       bwd_workspace = bws, bwd_workspace_first = true,
                       saves = keeps and { x } or nil, grads = { { dtype = x.dtype }, "none" },
                       flops = flops, bwd_flops = flops, dtype = x.dtype,
                       bytes = nn.bytes(x.shape, x.dtype) + n * nn.DT_SIZE[x.dtype] + nn.bytes(shape, x.dtype) })
  end
  if w.quant == "nf4" then
    -- matmul_4bit (bitsandbytes 0.50's autograd/_functions.py): with an input that needs no gradient
    -- gemm_4bit runs directly, outside autograd; otherwise MatMul4Bit.apply, whose forward runs
    -- the same gemm_4bit and keeps `ctx.tensors = (None, B)`: the packed weight, never the
    -- input A, which backward does not read (grad_A = grad_output @ dequantize_4bit(B)). So the
    -- op saves nothing of its own, compiled or eager (in a compiled layer dynamo traces
    -- MatMul4Bit into the joint graph as the opaque bitsandbytes::gemm_4bit, and the partition
    -- saves nothing for it either: validation/oracle/check_compile_bnb.py).
    -- gemm_4bit's temporaries: the fused kernel allocates only the output; the fallback
    -- (_dequant_linear_fallback) first makes, for a double-quantized weight, the absmax in fp32
    -- and absmax + offset (4 bytes a 64-weight block each), then the whole weight in the input's
    -- dtype, all live until F.linear returns, its output made after them (as
    -- fulltrace_gen4-tt-qlora allocates them). Which runs is bitsandbytes' table for the GPU
    -- (strategies/bnb_gemm4bit.lua).
    local dsz = nn.DT_SIZE[x.dtype]
    local fused, why = require("strategies.bnb_gemm4bit").fused(cx.gpu, x.dtype, tokens, w.shape[1], w.shape[2])
    if why then note_once(cx, why) end
    local ws = {}
    if not fused then
      if w.double_quant then ws = { w.blocks * 4, w.blocks * 4 } end
      ws[#ws + 1] = n * dsz
    end
    -- backward's F.dequantize_4bit(B, ctx.state): the nested absmax to fp32 (one tensor, the
    -- offset added in place), then the weight in its own dtype (quant_state.dtype, the
    -- model's: .to(grad_output.dtype) copies nothing where they match), made before the
    -- matmul's output and freed after it
    local bwd_ws = w.double_quant and { w.blocks * 4, n * dsz } or { n * dsz }
    local bytes = nn.bytes(x.shape, x.dtype) + n / 2 + nn.bytes(shape, x.dtype)
    if not fused then bytes = bytes + 2 * n * dsz end  -- the dequantized weight written and read
    return nn.op(cx, { name = name, kind = "mm", inputs = { x, { id = w.id, shape = { w.nb }, dtype = "uint8", rg = false } },
                       outs = { { name, shape, x.dtype } }, workspace = ws, workspace_first = not fused,
                       bwd_workspace = bwd_ws, bwd_workspace_first = true,
                       grads = { { dtype = x.dtype }, "none" },
                       flops = flops, bwd_flops = flops, dtype = x.dtype, bytes = bytes })
  end
  if w.quant == "torchao_nf4" and not cx.compiling then
    return linear_nf4_eager(cx, name, x, w, shape, flops)
  end
  if w.quant == "torchao_nf4" then
    -- linear_nf4 compiled (see the head of this file): weight.to(bf16), one fused kernel from the
    -- 4-bit tensors whose last op is the interleaving stack (aten.cat: not in the partitioner's
    -- recompute allowlist), then the GEMM reading it; LinearNF4's backward needs the bf16 weight
    -- again, and the partitioner saves it rather than recompute past the cat
    local q = n // 2 + n // 64
    local wd = nn.op(cx, { name = name .. ".weight.to(" .. x.dtype .. ")", kind = "cat_strided",
                           inputs = { { id = w.id, shape = { w.nb }, dtype = "uint8", rg = false } },
                           outs = { { name .. ".weight_dequantized", { w.shape[1], w.shape[2] }, x.dtype } },
                           flops = 4 * n, bytes = q + n * nn.DT_SIZE[x.dtype] })
    return nn.op(cx, { name = name, kind = "mm", inputs = { x, wd }, outs = { { name, shape, x.dtype } },
                       saves = { wd }, grads = { { dtype = x.dtype }, "none" },
                       flops = flops, bwd_flops = flops, dtype = x.dtype,
                       bytes = nn.bytes(x.shape, x.dtype) + nn.bytes(wd.shape, wd.dtype) + nn.bytes(shape, x.dtype) })
  end
  -- LLM.int8 (inference only: causal_lm refuses training over it): bnb.matmul ->
  -- MatMul8bitLt.forward (bitsandbytes/autograd/_functions.py), weight frozen so the fast path:
  -- F.int8_vectorwise_quant(A.to(torch.float16), threshold=6.0), whose fp16 copy of the input
  -- dies when it returns. The CUDA kernel (backends/cuda/ops.py) allocates SCA (fp32, a row) and
  -- CA (int8, the input's shape), then, with a threshold, `outliers = A.abs() >= threshold`: the
  -- fp16 abs and the bool mask are both live at the comparison (the mask until it returns; the
  -- one-element outliers.any() beside it is left out). int8_mixed_scaled_mm then runs
  -- int8_scaled_mm: int8_linear_matmul into int32 and int8_mm_dequant to the output, in the
  -- input's dtype (dtype=A.dtype). Where a column holds an |x| >= 6, it also copies those
  -- columns of A (subA) and returns output.addmm(subA, subB), a second output-sized tensor: data
  -- the simulation does not see, so a note says what it leaves out. With an input that needs a
  -- gradient, ctx.tensors = (CAt, subA, A) would keep the input: not built (no training).
  local xin = nn.to(cx, x, "fp16", name .. ".input_fp16")
  local ca = nn.new_tensor(cx, name .. ".CA", x.shape, "int8", false, "temp")
  local sca = nn.new_tensor(cx, name .. ".SCA", { tokens }, "fp32", false, "temp")
  local elems = nn.numel(x.shape)
  nn.op(cx, { name = name .. ".int8_vectorwise_quant", inputs = { xin }, out_tensors = { sca, ca },
              workspace = { elems * 2, elems } })
  note_once(cx, "LLM.int8's outlier columns (an input column with |x| >= 6.0) are data the simulation "
                .. "does not see: where there are any, each int8 matmul also copies those columns of its "
                .. "input and adds them back through a second output-sized tensor (output.addmm(subA, subB)), "
                .. "not modelled")
  local o32 = nn.new_tensor(cx, name .. ".out_int32", shape, "int32", false, "temp")
  nn.op(cx, { name = name .. ".int8_linear_matmul", kind = "mm",
              inputs = { ca, { id = w.id, shape = { n }, dtype = "int8", rg = false } },
              out_tensors = { o32 }, flops = flops, dtype = "int8" })
  return nn.op(cx, { name = name .. ".int8_mm_dequant", inputs = { o32, sca },
                     outs = { { name, shape, x.dtype } } })
end

-- bitsandbytes' replace_with_bnb_linear as transformers' quantizer applies it: every Linear but
-- the ones llm_int8_skip_modules names (the output layer, `skip`) becomes Linear4bit or
-- Linear8bitLt, its weight declared quantized. Returns the modules replaced.
function M.apply(root, kind, skip)
  if kind ~= "nf4" and kind ~= "int8" and kind ~= "torchao_nf4" then
    error("unknown quantization '" .. tostring(kind) .. "' (nf4, int8 or torchao_nf4)", 0)
  end
  local mod = require "vrsim.module"
  local hit = {}
  mod.walk(root, function(m)
    if m.cls == "Linear" and m.path ~= skip then
      -- (torchtune's QLoRA builders: every Linear of the decoder layers a FrozenNF4Linear, or the
      -- base of a LoRALinear with quantize_base; the output projection stays nn.Linear)
      m.cls = kind == "nf4" and "Linear4bit" or kind == "torchao_nf4" and "FrozenNF4Linear" or "Linear8bitLt"
      for _, d in ipairs(m.decls) do
        if d.key == "weight" then d.quant = kind end
      end
      local base = m.forward
      m.forward = function(cx, self, x)
        local w = mod.weight(cx, self.p.weight)
        if self.p.bias then
          error(self.path .. ": a quantized Linear with a bias is not modelled", 0)
        end
        if kind == "nf4" and x.dtype ~= w.dtype then
          -- Linear4bit.forward (bitsandbytes nn/modules.py): `inp_dtype = x.dtype; x =
          -- x.to(self.compute_dtype)`, then `matmul_4bit(x, ...).to(inp_dtype)`: an input in
          -- another dtype than the compute dtype (an fp32 residual stream after
          -- prepare_model_for_kbit_training, strategies/kbit.lua) is copied into it, and the
          -- product copied back. The copy is forward's local `x` until it returns, past the
          -- product's cast back.
          local name = self.opname
          local xc = nn.to(cx, x, w.dtype, name .. ".to_compute_dtype")
          cx.G:op { name = name .. ": x held", kind = "none", phase = cx.phase, inputs = { xc.id }, outputs = {},
                    frees = {}, layer = cx.layer, region = cx.region }
          local y = nn.to(cx, M.linear(cx, name, xc, w), x.dtype, name .. ".to_inp_dtype")
          nn.release(cx, { xc }, name .. ": Linear4bit.forward returns")
          return y
        end
        return M.linear(cx, self.opname, x, w)
      end
      m.base_forward = base
      hit[#hit + 1] = m
    end
  end)
  return hit
end

-- The error for a run torchao's NF4 is not modelled for (nil when it is): compiled layers on one
-- GPU, as torchtune's QLoRA recipes run them (lora_finetune_single_device).
function M.check_torchao(t)
  if t.quant ~= "torchao_nf4" then return nil end
  if t.inference then
    return "training.quant = \"torchao_nf4\" for inference is not modelled (the forward runs eager, and "
           .. "eager get_original_weight keeps its int64 indices and bf16 intermediates until it returns)"
  end
  if not t.compile then
    return "training.quant = \"torchao_nf4\" without compile is not modelled (every layer eager: eager "
           .. "get_original_weight, 14 bytes a weight until it returns, is checked only in the layers "
           .. "compile leaves eager under transformers' checkpointing); with training.compile it is"
  end
  if t.strategy ~= "none" then
    return ("training.quant = \"torchao_nf4\" under strategy %s is not modelled (NF4Tensor's FSDP2 "
            .. "all-gather of its inner tensors is not built)"):format(t.strategy)
  end
  return nil
end

-- 8-bit AdamW state for the parameters of `updates` ({param=, grad=}), first step only, and
-- its fused update. Returns nothing; zero_grad is the caller's.
M.PAGED_MIN_NUMEL = 1e5   -- get_state_buffer: `p.numel() < 1e5` stays in the allocator

-- The note of a step priced at its kernels' bytes: what the measured table lacks.
local function unpriced_note(cx, label, missing)
  local m = cx.bnb_optim
  local why = m and ("%s has no rows for %s"):format(m.source, missing)
      or ("no measured table for this GPU (lua/hw/calibrated/<gpu>_bnb_optim.lua, "
          .. "validation/harness/measure_bnb_optim.py)")
  return ("bitsandbytes' %s step priced at its kernels' bytes, without the synchronize and the host's "
          .. "work after each parameter's kernel: %s"):format(label, why)
end

-- The state of bitsandbytes' Optimizer2State / Optimizer1State for `updates`. opts: bits (8 or
-- 32), states (2 for Adam, 1 for Lion), paged, label (the op names). Returns the parameters'
-- bytes and the host's zero_grad time for them (microseconds; 0 without a measured table).
function M.bnb_state(cx, updates, opts)
  local step_op = require("strategies.optim").step_op
  local total, zero_us = 0, 0
  -- the 256-entry maps are the optimizer's (Optimizer8bit.name2qmap, filled and moved to the
  -- device at its first 8-bit state): torchtune's optimizer_in_bwd makes one optimizer per
  -- parameter, and this is called once for each
  local qmap_made = false
  local label, n_states = opts.label or "adamw8bit", opts.states or 2
  local family = n_states == 2 and "adamw" or "lion"
  local unpriced = nil
  for _, u in ipairs(updates) do
    local p = u.param
    local n = nn.numel(p.shape)
    local outs = {}
    local name = p.name
    local function state(i, bytes, dtype)
      if opts.paged and n >= M.PAGED_MIN_NUMEL then
        cx.paged_bytes = (cx.paged_bytes or 0) + bytes
      else
        outs[#outs + 1] = tensor(cx, name .. ".state" .. i, bytes, dtype, "optstate", true)
      end
    end
    local eight = opts.bits == 8 and n >= 4096
    if not eight then
      for i = 1, n_states do state(i, n * 4, "fp32") end
    else
      if not qmap_made then
        outs[#outs + 1] = tensor(cx, "qmap dynamic", 256 * 4, "fp32", "optstate", true)
        if n_states == 2 then outs[#outs + 1] = tensor(cx, "qmap udynamic", 256 * 4, "fp32", "optstate", true) end
        qmap_made = true
      end
      -- Optimizer2State.init_state: one fp32 absmax a block of `blocksize = 256` elements
      -- (bitsandbytes 0.44.0 on; 2048 before: strategies/bnb_version.lua)
      local bs = (cx.bnb or require("strategies.bnb_version").era()).optim_block
      local blocks = (n + bs - 1) // bs
      for i = 1, n_states do state(i, n, "uint8") end
      for i = 1, n_states do outs[#outs + 1] = tensor(cx, name .. ".absmax" .. i, blocks * 4, "fp32", "optstate", true) end
    end
    -- (through optim.step_op: in backward, with optimizer_in_backward, as the parameter's
    -- post-accumulate-grad hook)
    step_op(cx, { name = label .. ".init " .. name, kind = "none", phase = "optim", inputs = {},
                  outputs = outs, frees = {}, once = true })
    total = total + nn.bytes(p.shape, p.dtype)
    -- read param, grad and the states; write param and states
    local sb = (eight and 1 or 4) * n * n_states
    local spec = { name = label .. ".update " .. name, kind = "elementwise", phase = "optim",
                   inputs = {}, outputs = {}, frees = {}, bytes = 3 * nn.bytes(p.shape, p.dtype) + 2 * sb }
    -- the kernel's measured time, the host's work for the parameter (its launch included), and
    -- the synchronize after it
    local cost, missing = nil, "any row"
    if cx.bnb_optim then
      cost, missing = require("strategies.bnb_optim").param_cost(cx.bnb_optim.table, family,
        eight and 8 or 32, opts.paged and n >= M.PAGED_MIN_NUMEL, p.dtype, n)
    end
    if cost then
      spec.device_us, spec.dispatch_us, spec.sync = cost.device_us, cost.host_us, true
      zero_us = zero_us + cost.zero_grad_us
    else
      unpriced = unpriced or missing
    end
    step_op(cx, spec)
  end
  if unpriced then
    cx.notes = cx.notes or {}
    cx.notes[#cx.notes + 1] = unpriced_note(cx, label, unpriced)
  end
  return total, zero_us
end

function M.adamw8bit(cx, updates)
  return M.bnb_state(cx, updates, { bits = 8, states = 2, label = "adamw8bit" })
end

-- transformers' paged optim names (trainer_optimizer.py: is_paged = "paged" in optim_name,
-- optim_bits = 8 if "8bit" in optim_name else 32) and bitsandbytes' PagedAdamW (optim_bits=32)
M.PAGED = {
  paged_adamw_8bit = { bits = 8, states = 2, label = "PagedAdamW8bit" },
  paged_adamw_32bit = { bits = 32, states = 2, label = "PagedAdamW32bit" },
  paged_adamw = { bits = 32, states = 2, label = "PagedAdamW" },
  paged_lion_8bit = { bits = 8, states = 1, label = "PagedLion8bit" },
  paged_lion_32bit = { bits = 32, states = 1, label = "PagedLion32bit" },
}

function M.paged(cx, updates, kind)
  local o = M.PAGED[kind]
  return M.bnb_state(cx, updates, { bits = o.bits, states = o.states, label = o.label, paged = true })
end

return M
