-- hub_kernels.lua: transformers' hub kernels (integrations/hub_kernels.py, transformers 5.25): the
-- layers kernelize() swaps for kernels downloaded from the Hugging Face Hub, as a training run
-- meets them, op for op; and model.hub_kernels ("auto", "on", "off"), which says whether a run has
-- them.
--
-- When they are active (modeling_utils.py, kernels 0.19): from_pretrained defaults to
-- use_kernels=True unless USE_HUB_KERNELS=NO, and kernelizes once the weights are loaded, in
-- INFERENCE mode (the model is in eval()) for the device the model is on (device_map's first GPU,
-- else model.device). A model loaded onto the CPU gets no kernel (the mapping has none for "cpu")
-- but is marked use_kernels; when the Trainer has moved it to the GPU, model.train() sets
-- kernels_mode to TRAINING, which kernelizes again for model.device, now cuda. Then:
--   RMSNorm (a class decorated @use_kernel_forward_from_hub("RMSNorm")) -> kernels-community/
--     liger-kernels LigerRMSNorm, TRAINING and INFERENCE, cuda and rocm;
--   apply_rotary_pos_emb (@use_kernelized_func on the attention class) -> kernels-community/
--     rotary apply_rotary_transformers, TRAINING and INFERENCE, cuda;
--   the activations (SiLU, GELU) only in INFERENCE.
-- A kernel that cannot be fetched is not a fallback: kernelize(use_fallback=ALL) falls back only
-- on FileNotFoundError, and both an offline Hub (HF_HUB_OFFLINE=1: "not available in the local
-- cache") and an unreachable one (the publisher trust check) raise ValueError from model.train().
--
-- "auto" is what the scenario's build does: every record, and training.build "direct" or "cast"
-- (from_pretrained under USE_HUB_KERNELS=NO, or from_config, which never kernelizes), runs the
-- modeling code's own ops: off. A note names the kernels a Hub-connected from_pretrained would
-- have given the family. docs/model-families.md "Hub kernels" says why, and what one H100 measured:
-- "on" keeps the bytes to the end of forward that LigerRMSNorm and the rotary kernel keep there.
local nn = require "vrsim.nn"

local M = {}

-- The layers each family's modeling file (transformers 5.25) hands to kernelize(): rmsnorm where
-- its RMSNorm class is decorated "RMSNorm", rotary where its attention class carries
-- @use_kernelized_func(apply_rotary_pos_emb). DeepSeek-V3 decorates its rotary function but no
-- attention class kernelizes it; Gemma's RMSNorm (1 + weight), OLMo-2's and gpt-oss's are not
-- decorated; Phi-3's partial rotary is not.
local FAMILIES = {
  llama = { rmsnorm = true, rotary = true },
  mistral = { rmsnorm = true, rotary = true },
  mixtral = { rmsnorm = true, rotary = true },
  qwen2 = { rmsnorm = true, rotary = true },
  qwen3 = { rmsnorm = true, rotary = true },
  qwen3_moe = { rmsnorm = true, rotary = true },
  phi3 = { rmsnorm = true },
  deepseek_v2 = { rmsnorm = true },
  deepseek_v3 = { rmsnorm = true },
  gemma2 = { rotary = true },
  gemma3_text = { rotary = true },
  gpt_oss = { rotary = true },
  olmo2 = {},
}

local function named(k)
  local s = {}
  if k.rmsnorm then s[#s + 1] = "RMSNorm -> kernels-community/liger-kernels LigerRMSNorm" end
  if k.rotary then s[#s + 1] = "apply_rotary_pos_emb -> kernels-community/rotary" end
  return table.concat(s, ", ")
end

-- The run's hub kernels: nil (the modeling code's own ops) or { rmsnorm =, rotary = }. mode is
-- model.hub_kernels; model_type the family's; t the training section; tp the tensor-parallel
-- degree; compiled whether torch.compile is on. Adds its note to notes.
function M.resolve(mode, model_type, t, tp, compiled, notes)
  mode = mode or "auto"
  local k = FAMILIES[model_type]
  if not k then
    if mode == "on" then
      error(("model.hub_kernels = \"on\": which layers transformers' hub kernels replace in %s is not modelled")
            :format(tostring(model_type)), 0)
    end
    return nil
  end
  local any = k.rmsnorm or k.rotary
  if mode == "off" then return nil end
  if mode == "auto" then
    if any and t.inference then
      -- from_pretrained kernelizes at load, for device_map's GPU, in INFERENCE mode (eval())
      notes[#notes + 1] = ("model.hub_kernels auto: off, the modeling code's own ops (every record, from_config, "
        .. "from_pretrained under USE_HUB_KERNELS=NO), where a from_pretrained onto the GPU (device_map) that "
        .. "reaches the Hub runs INFERENCE mode's kernels: %s and kernels-community/activation's, not modelled")
        :format(named(k))
    elseif any then
      notes[#notes + 1] = ("model.hub_kernels: off (the modeling code's ops); a from_pretrained that reaches "
        .. "the Hub gets %s at model.train() (= \"on\")"):format(named(k))
    end
    return nil
  end
  if not any then
    notes[#notes + 1] = ("model.hub_kernels on: %s's modeling file hands no layer to kernelize(), "
      .. "the modeling code's own ops run"):format(model_type)
    return nil
  end
  if t.inference then
    error("model.hub_kernels = \"on\" with training.inference: INFERENCE mode's kernels (the activations' "
          .. "kernels-community/activation besides RMSNorm and rotary) are not modelled", 0)
  end
  if k.rotary and model_type == "gpt_oss" then
    error("model.hub_kernels = \"on\" for gpt_oss: its apply_rotary_pos_emb (chunked halves, a position_ids "
          .. "argument) is not kernels-community/rotary's signature; what kernelize() does with it is not modelled", 0)
  end
  if model_type == "deepseek_v2" or model_type == "deepseek_v3" then
    -- kv_a_layernorm's input is a torch.split slice of kv_a_proj_with_mqa's output, which
    -- LigerRMSNormFunction's ensure_contiguous copies before the kernel and saves
    error(("model.hub_kernels = \"on\" for %s: LigerRMSNorm's contiguous copy of kv_a_layernorm's input "
           .. "(a slice of kv_a_proj_with_mqa's output) is not modelled"):format(model_type), 0)
  end
  if tp > 1 then
    error("model.hub_kernels = \"on\" with tensor parallelism: LigerRMSNorm's DTensor full_tensor() gather "
          .. "is not modelled", 0)
  end
  if compiled then
    error("model.hub_kernels = \"on\" with training.compile: the hub kernels inside a compiled layer are "
          .. "not modelled", 0)
  end
  notes[#notes + 1] = ("model.hub_kernels on: %s (kernelize in TRAINING mode)"):format(named(k))
  if k.rotary then
    notes[#notes + 1] = "model.hub_kernels on: kernels-community/rotary's apply_rotary op has no autograd "
      .. "kernel: it rotates clones of q and k in place, autograd sees only the clones, and the gradient "
      .. "reaching q_proj and k_proj is the unrotated one (PyTorch's autograd fallback warns of nothing)"
  end
  return { rmsnorm = k.rmsnorm, rotary = k.rotary }
end

-- LigerRMSNorm.forward: LigerRMSNormFunction.apply(x, weight, eps, 0, "llama", True, None)
-- (huggingface/kernels-community liger-kernels/torch-ext at 40d4194: layers.py, rms_norm.py, as
-- linkedin/Liger-Kernel's ops).
-- Forward: Y = empty(x's shape, x's dtype) and RSTD = empty(rows, fp32), one Triton kernel;
-- save_for_backward(X, W, RSTD): the input itself (a view of it), not an fp32 copy, and one fp32
-- per row. Y keeps x's dtype whatever the weight's. Backward (in_place=True): dX is written into
-- dY, no new buffer; _dW = empty((sm_count, cols), fp32) whether or not the weight trains, then
-- _dW.sum(0) (fp32) and .to(W.dtype): the weight's gradient. (Qwen3's q/k norms get their gradient
-- transposed: ensure_contiguous copies dY there, where the modeling code's view back to (b, s, n *
-- d) copies it, llama.lua heads_of: one buffer either way, left where heads_of has it.)
function M.rmsnorm(cx, name, x, w)
  local c = x.shape[#x.shape]
  local rows = nn.numel(x.shape) // c
  local sms = cx.gpu and cx.gpu.sm_count
  if not sms then error(name .. ": LigerRMSNorm's backward sizes _dW by the GPU's SM count, which the catalog lacks", 0) end
  local ws = { sms * c * 4, c * 4 }
  if w.dtype ~= "fp32" and not w.rg then ws[3] = nn.bytes({ c }, w.dtype) end
  local wgrad = "none"
  if w.rg then
    wgrad = { dtype = w.dtype }
    if w.dtype == "fp32" then ws[2] = nil end -- the sum is the gradient
  end
  local y = nn.op(cx, { name = name .. ".liger_rms_norm", kind = "reduce_rows", inputs = { x, w },
                        outs = { { name, x.shape, x.dtype }, { name .. ".rstd", { rows }, "fp32", no_grad = true } },
                        saves = { x, w }, save_outs = { 2 },
                        grads = { { pass = 1 }, wgrad },
                        bwd_workspace = ws, bwd_workspace_first = true,
                        flops = 3 * nn.numel(x.shape), dtype = x.dtype })
  return y
end

-- apply_rotary_transformers(q, k, cos, sin) (kernels-community/rotary torch-ext/rotary/
-- __init__.py, flash-attention's csrc/rotary kernel): cos and sin unsqueezed (views), q.clone()
-- and k.clone(), then ops.apply_rotary on the halves of each clone in place. The op is registered
-- for CUDA only (torch_binding.cpp), with no autograd kernel: PyTorch's fallback leaves the
-- clones' CloneBackward0 as their history, so nothing is saved and backward passes each gradient
-- through. Its TORCH_CHECK(x1.dtype() == cos.dtype()) refuses q and tables of two dtypes.
function M.apply_rotary(cx, pre, q, k, cos, sin)
  if q.dtype ~= cos.dtype or k.dtype ~= cos.dtype then
    error(("model.hub_kernels = \"on\": kernels-community/rotary's apply_rotary checks x1.dtype() == "
           .. "cos.dtype(), and %s's q is %s, the rotary tables %s (autocast over %s parameters): "
           .. "transformers raises"):format(pre, q.dtype, cos.dtype, cos.dtype), 0)
  end
  local out = {}
  for i, x in ipairs { q, k } do
    local n = pre .. "." .. (i == 1 and "q" or "k") .. "_rotary"
    out[i] = nn.op(cx, { name = n .. ".clone", kind = "copy", inputs = { x },
                         outs = { { n .. ".embed", x.shape, x.dtype } }, grads = { { pass = 1 } } })
  end
  -- the two in-place rotations: no autograd node, no allocation
  for i, x in ipairs(out) do
    nn.op(cx, { name = pre .. "." .. (i == 1 and "q" or "k") .. "_rotary.apply_rotary_", kind = "elementwise",
                inputs = { x, cos, sin }, outs = {}, grads = { "none", "none", "none" },
                bytes = 2 * nn.bytes(x.shape, x.dtype), flops = 3 * nn.numel(x.shape), dtype = x.dtype })
  end
  local qr, kr = out[1], out[2]
  return qr, kr
end

return M
