-- blocks/rmsnorm.lua: the RMSNorms that multiply by their weight in fp32 and only then cast back,
-- where LlamaRMSNorm (models/llama.lua) casts the normalized input back first and multiplies in
-- the input's dtype. Two families write it (transformers 5.25):
--   Gemma2RMSNorm / Gemma3RMSNorm: output = _norm(x.float()); output * (1.0 + weight.float());
--     output.type_as(x)                                              (module field one_plus = true)
--   Olmo2RMSNorm: x.to(float32), normalized; (weight * x).to(input_dtype)   (one_plus absent)
-- and torchtune's RMSNorm (torchtune/modules/rms_norm.py, 0.6.1) writes it through PyTorch:
--   F.rms_norm(x.float(), normalized_shape, weight=self.scale, eps).to(x.dtype)  (composite = true)
--   Its fp32 input and the model-dtype scale differ in dtype, so ATen takes rms_norm's composite
--   path on CUDA too (layer_norm.cpp: "Mismatch dtype ... Cannot dispatch to fused"): pow, mean,
--   add_ of eps in place, rsqrt, x * rsqrt, * scale, as C++ temporaries (the squares and the mean
--   go once rsqrt is made, the normalized input once the scale product is); the product is
--   `normed * scale`, so the scale's side of its gradient is made first.
-- The normalization is LlamaRMSNorm's ops (pow, mean, + eps, rsqrt, x * rsqrt, in fp32). The
-- product is a (..., hidden) fp32 tensor: MulBackward0 keeps the fp32 normalized input where the
-- weight is trained (Llama keeps it in the input's dtype), and the cast back is one more tensor.
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local R = {}

function R.forward(cx, m, x)
  local w = mod.weight(cx, m.p.weight)
  local name = m.opname
  local x32 = nn.to(cx, x, "fp32", name .. ".float")
  local rshape = nn.copy_shape(x.shape)
  rshape[#rshape] = 1
  local c = x.shape[#x.shape]
  -- PowBackward0 makes its two temporaries before the result (as llama.lua's norm)
  local sq = nn.op(cx, { name = name .. ".pow", inputs = { x32 },
                         outs = { { name .. ".squared", x.shape, "fp32" } }, saves = { x32 },
                         bwd_workspace = { nn.bytes(x.shape, "fp32"), nn.bytes(x.shape, "fp32") },
                         bwd_workspace_first = true })
  local var = nn.op(cx, { name = name .. ".mean", kind = "reduce_rows", inputs = { sq },
                          outs = { { name .. ".variance", rshape, "fp32" } }, frees = m.composite and {} or nil })
  -- variance + eps: AddBackward1 (a scalar add) passes the gradient on. The composite adds in
  -- place (add_): no tensor, and rsqrt reads the mean
  local ve = var
  if not m.composite then ve = nn.ew(cx, name .. ".add_eps", { var }, "fp32", nil, { { pass = 1 } }) end
  -- RsqrtBackward0 is `-0.5 * grad * result.pow(3)` (derivatives.yaml): result.pow(3) and
  -- -0.5 * grad are temporaries made before their product, the gradient: three kernels
  local rs = nn.op(cx, { name = name .. ".rsqrt", inputs = { ve },
                         outs = { { name .. ".rsqrt", rshape, "fp32" } }, save_outs = { 1 },
                         bwd_workspace = { nn.bytes(rshape, "fp32"), nn.bytes(rshape, "fp32") },
                         bwd_workspace_first = true, bwd_kernels = 3, frees = m.composite and { var, sq } or nil })
  -- `x * torch.rsqrt(...)`: the rsqrt, a temporary, goes as the expression ends, then the fp32
  -- copy with the rebinding (OLMo-2's and GPT-OSS's) or as _norm returns (Gemma's)
  local n = nn.op(cx, { name = name .. ".mul", kind = "broadcast_rows", inputs = { x32, rs },
                        outs = { { name .. ".normed", x.shape, "fp32" } }, saves = { x32, rs },
                        bwd_workspace = { nn.bytes(x.shape, "fp32") }, bwd_workspace_first = true,
                        frees = { rs, x32 } })
  local wf = w
  if m.one_plus then
    -- 1.0 + self.weight.float(): a (hidden,) fp32 copy of a bf16 weight, then the sum
    -- (AddBackward passes the gradient through; ToCopyBackward casts it back to the weight's dtype)
    local w32 = nn.to(cx, w, "fp32", name .. ".weight_float")
    wf = nn.op(cx, { name = name .. ".one_plus_weight", inputs = { w32 },
                     outs = { { name .. ".one_plus_weight", w.shape, "fp32" } },
                     grads = { { pass = 1 } }, flops = nn.numel(w.shape) })
  end
  -- the product: MulBackward0 makes the normalized input's gradient (grad * weight) and the full
  -- fp32 product grad * normed, reduced to the weight's shape as the node returns (a row sum with
  -- ATen's staging buffers): as in llama.lua's norm, that reduction is an op of its own on the
  -- weight's side, made first, and it keeps the normalized input. (Olmo2's bf16 weight: the sum
  -- is made in fp32, the product's dtype, and cast to bf16 as autograd hands it back: the
  -- (hidden,) fp32 sum is a temporary made before the gradient, freed after it; the oracle's
  -- olmo2_7b_l2_bf16 shows it, sum.dim_IntList then _to_copy, at every norm.)
  local wv, saves = wf, {}
  if wf.rg and not cx.no_grad then
    wv = nn.view(cx, wf, wf.shape, name .. ".weight_side")
    wv.rg = true
    nn.op(cx, { name = name .. ".weight_grad", kind = "none", inputs = { wf }, out_tensors = { wv },
                saves = { n }, grads = { { dtype = wf.dtype } }, bytes = 0, bwd_kind = "reduce_rows",
                bwd_rowsum = { nn.numel(x.shape) // c, c },
                bwd_workspace = wf.dtype ~= "fp32" and { nn.bytes(w.shape, "fp32") } or nil,
                bwd_workspace_first = wf.dtype ~= "fp32" or nil,
                bwd_bytes = nn.bytes(x.shape, "fp32") + nn.bytes(w.shape, wf.dtype), frees = {} })
  end
  if n.rg then saves[1] = wf end
  if m.composite then
    -- `normed * scale`: MulBackward0 makes `other`'s (the scale's full product) first; the
    -- normalized input goes with the product (unless saved); the fp32 product, the composite's
    -- result, goes once torchtune's .to(x.dtype) has cast it
    local out = nn.op(cx, { name = name .. ".mul_weight", kind = "broadcast", inputs = { n, wv },
                            outs = { { name .. ".scaled", x.shape, "fp32" } }, saves = saves,
                            grads = { { dtype = "fp32" }, { bytes = nn.bytes(x.shape, "fp32"), dtype = "fp32" } },
                            grad_order = { 2, 1 }, frees = { wf, n }, flops = nn.numel(x.shape), dtype = "fp32" })
    return nn.to(cx, out, x.dtype, name)
  end
  -- Gemma's `output = output * (...)` drops the normalized input with the rebinding; OLMo-2's and
  -- GPT-OSS's `return (self.weight * hidden_states).to(input_dtype)` keeps it, and `variance`, as
  -- named locals until the forward returns, after the product is cast back
  -- (fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr: both freed after the cast)
  local out = nn.op(cx, { name = name .. ".mul_weight", kind = "broadcast", inputs = { wv, n },
                          outs = { { name .. ".scaled", x.shape, "fp32" } }, saves = saves,
                          grads = { { bytes = nn.bytes(x.shape, "fp32"), dtype = "fp32" }, { dtype = "fp32" } },
                          grad_order = { 2, 1 }, frees = m.one_plus and { wf, n } or { wf },
                          flops = nn.numel(x.shape), dtype = "fp32" })
  -- .type_as(x) / .to(input_dtype): the fp32 product cast back (dropped once cast)
  local y = nn.to(cx, out, x.dtype, name)
  if not m.one_plus then nn.release(cx, { n, var }, name .. ": returns") end
  return y
end

return R
