-- float8.lua: float8 training as torchao's convert_to_float8_training runs it (torchao 0.18:
-- float8/float8_linear.py Float8Linear and matmul_with_hp_or_float8_args,
-- float8/float8_scaling_utils.py hp_tensor_to_float8_dynamic, float8/float8_utils.py
-- tensor_to_amax / amax_to_scale / to_fp8_saturated, float8/float8_training_tensor.py
-- _ToFloat8ConstrFunc, float8/float8_ops.py preprocess_addmm / addmm_float8_unwrapped,
-- float8/config.py recipes, float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor), eager (no
-- torch.compile: every intermediate of a cast is a tensor of its own).
--
-- Which Linears: torchtitan's module_filter_fn: not the output layer (transformers' lm_head),
-- and only where in_features and out_features are both divisible by 16 (_scaled_mm's rule).
--
-- A cast of a high-precision tensor T (n elements) to float8 (hp_tensor_to_float8_dynamic):
--   amax     torch.max(torch.abs(T)) (tensorwise) or torch.amax(abs, dim, keepdim) (rowwise):
--            abs(T) a temporary in T's dtype, the amax a scalar or one per row
--   scale    finfo.max / clamp(amax.double()) .float(): a scalar or one per row, fp32
--   scaled   T.to(float32) * scale: an fp32 copy (T's own storage when T is fp32), then the fp32
--            product; clamp(-max, max) another fp32 tensor; .to(float8) the result (n bytes)
--   so 8 bytes an element at the cast's peak, 1 byte after it.
-- The autograd Function (matmul_with_hp_or_float8_args):
--   forward  saves input_hp and weight_hp_t (the high-precision tensors, in every recipe); casts
--            the input (e4m3) and the weight (e4m3; not where FSDP2 gathered it in float8), one
--            _scaled_mm in the input's dtype; the float8 copies die as forward returns
--   backward grad_input first: grad_output cast (e5m2 tensorwise, e4m3 rowwise), the weight cast
--            again (for grad_input), _scaled_mm's operand layout (preprocess_addmm: the second
--            operand column-major: the weight's float8 copy transposed into a new tensor);
--            then grad_weight: grad_output cast again and the input cast (both along the other
--            axis), both operands copied into _scaled_mm's layouts, the product in the
--            gradient's dtype. The float8 tensors made for grad_input are Python locals of
--            backward(): alive until it returns. Recipe rowwise_with_gw_hp computes grad_weight
--            in high precision (torch.mm of grad_output and the saved input: no casts, no copies).
-- Two graph ops carry the Function's backward: the product (its derived backward the
-- grad_input GEMM) and a weight-side op made before it (its derived backward the grad_weight
-- GEMM), as the bias reduction of ops/linear.lua; each one's temporaries are its backward
-- workspace, sized at the sequence's peak. Eager, the casts' kernels run on pass-through ops
-- beside them, one a kernel class (backward_kernels), which allocate nothing.
-- Under torch.compile (a compiled decoder layer, strategies/compile.lua; cx.compiling) the
-- casts are Inductor kernels: the forward casts' intermediates (abs, the fp32 copy, the product,
-- clamp) fuse away through the partition (their ops are fusible), and backward's casts each
-- become an amax reduction and one pointwise kernel that writes the float8 operand in the layout
-- _scaled_mm takes (the transposing clone fused into it): a cast reads its n elements twice and
-- writes n bytes, and leaves nothing but its float8 operand; the backward graph frees each
-- operand after its GEMM, so grad_weight's half holds nothing of grad_input's. Both halves stay
-- extern kernels to the partition (compile_extern: _scaled_mm is no fusible op). Compiled
-- without checkpointing, the partition chooses what those backward casts read of forward: they
-- read the input and the weight through fused kernels (bw_fused), so the partitioner recomputes
-- a normed input rather than save it and saves the weight (a parameter) for free; tensorwise,
-- the weight's amax and inverse scale are forward's and saved (the capture's float8 records).
-- FSDP2's float8 all-gather (enable_fsdp_float8_all_gather, tensorwise only): fsdp_pre_all_gather
-- casts each shard to float8 before the all-gather, so the gathered weight is float8 (1 byte an
-- element) and the forward and the grad_input cast skip it (tensor_already_casted_to_fp8); its
-- gradient stays in the parameter dtype (strategies/fsdp.lua reads p.float8_gather).
local nn = require "vrsim.nn"

local M = {}

-- The recipes of Float8LinearConfig.from_recipe_name: per operand, its scaling ("tensorwise",
-- "rowwise" = AXISWISE, false = DISABLED, high precision) in each GEMM it enters.
M.RECIPES = {
  tensorwise = { input = "tensorwise", weight = "tensorwise", grad_output = "tensorwise",
                 weight_for_grad_input = "tensorwise", input_for_grad_weight = "tensorwise",
                 grad_output_for_grad_weight = "tensorwise" },
  rowwise = { input = "rowwise", weight = "rowwise", grad_output = "rowwise",
              weight_for_grad_input = "rowwise", input_for_grad_weight = "rowwise",
              grad_output_for_grad_weight = "rowwise", round = true },
  rowwise_with_gw_hp = { input = "rowwise", weight = "rowwise", grad_output = "rowwise",
                         weight_for_grad_input = "tensorwise", input_for_grad_weight = false,
                         grad_output_for_grad_weight = false, round = true },
}
-- (round: the recipe's round_scales_to_power_of_2)

-- training.float8's keys, as `vrsim fields` lists them.
M.FIELDS = {
  recipe = { "string", "tensorwise", "Float8LinearConfig.from_recipe_name: tensorwise, rowwise or rowwise_with_gw_hp" },
  fsdp_float8_all_gather = { "boolean", false, "enable_fsdp_float8_all_gather (FSDP2, tensorwise): the shards cast to float8 before the all-gather" },
}

-- The settings of training.float8 (true, or a table of FIELDS), or raises the first bad key.
function M.settings(f)
  if f == true then f = {} end
  if type(f) ~= "table" then
    error("training.float8 is true or a table { recipe = ..., fsdp_float8_all_gather = ... }", 0)
  end
  local s = { recipe = "tensorwise", fsdp_float8_all_gather = false }
  for k, v in pairs(f) do
    local d = M.FIELDS[k]
    if not d then
      local names = {}
      for n in pairs(M.FIELDS) do names[#names + 1] = n end
      table.sort(names)
      error(("training.float8.%s is not a key vrsim knows (one of: %s)"):format(tostring(k), table.concat(names, ", ")), 0)
    end
    if type(v) ~= d[1] then error(("training.float8.%s must be a %s"):format(k, d[1]), 0) end
    s[k] = v
  end
  if not M.RECIPES[s.recipe] then
    error(("training.float8.recipe = \"%s\": torchao's recipes are tensorwise, rowwise and rowwise_with_gw_hp")
          :format(s.recipe), 0)
  end
  return s
end

-- The error for float8 on GPU g (its catalog entry; nil on sm89 and newer).
function M.gpu_refusal(g)
  local cc = g.compute_capability or 0
  if g.vendor ~= "nvidia" or cc < 8.9 then
    -- torchtitan's Float8LinearConverter (has_cuda_capability(8, 9)); torch._scaled_mm raises
    -- the same below sm89
    return ("training.float8 on %s (compute capability %s): \"Failed to swap to Float8Linear because "
            .. "float8 is only supported on SM89 or later\" (torchtitan; torch._scaled_mm needs sm89+)")
           :format(g.name or "this GPU", tostring(cc))
  end
end

-- The error for float8 on this run (nil when it can be simulated): t the training section, g
-- the GPU's catalog entry.
function M.refusal(t, g)
  local ok, s = pcall(M.settings, t.float8)
  if not ok then return s end
  local why = M.gpu_refusal(g)
  if why then return why end
  if s.fsdp_float8_all_gather and s.recipe ~= "tensorwise" then
    return ("training.float8.fsdp_float8_all_gather with recipe %s: torchao's Float8LinearConfig asserts "
            .. "\"enable_fsdp_float8_all_gather only supports tensorwise scaling granularity\""):format(s.recipe)
  end
  if s.fsdp_float8_all_gather and t.strategy ~= "fsdp2" then
    return ("training.float8.fsdp_float8_all_gather under strategy %s: it is FSDP2's all-gather "
            .. "(use strategy fsdp2, or leave it false)"):format(t.strategy)
  end
  if t.precision ~= "bf16" and t.precision ~= "mp_fp32" then
    return ("training.float8 with precision %s is not modelled: bf16, or mp_fp32 (FSDP2's bf16 compute over "
            .. "fp32 shards), as torchtitan runs it"):format(t.precision)
  end
  if t.quant ~= "none" or require("strategies.lora").wanted(t) then
    return "training.float8 with LoRA or bitsandbytes quantization is not modelled (torchao swaps "
           .. "nn.Linear modules; peft's and bitsandbytes' layers are not Float8Linear)"
  end
  local par = type(t.parallel) == "table" and t.parallel or {}
  if (par.tp or 1) > 1 and s.recipe ~= "tensorwise" then
    -- torchao's Float8ColwiseParallel "currently assumes tensorwise scaling" (its float8
    -- all-gather of the activations carries one scale)
    return ("training.float8 recipe %s with tensor parallelism is not modelled (torchao's float8 "
            .. "tensor-parallel styles assume tensorwise scaling)"):format(s.recipe)
  end
  if t.strategy == "zero3" or t.strategy == "zero1" or t.strategy == "zero2" then
    return ("training.float8 under DeepSpeed's %s is not modelled (torchtitan runs float8 with FSDP2)"):format(t.strategy)
  end
  return nil
end

-- torchtitan's module_filter_fn: the output layer and dims not divisible by 16 stay nn.Linear.
local function converted(m, skip)
  return m.cls == "Linear" and m.path ~= skip and m.in_features % 16 == 0 and m.out_features % 16 == 0
end

-- Bytes a cast of n elements of a `h`-byte dtype moves (abs, amax, the fp32 copy, the product,
-- clamp, the float8 write).
local function cast_traffic(n, h)
  return n * (2 * h + h + (h < 4 and (h + 4) or 0) + 8 + 8 + 5)
end

-- The class of a 2-D transposing copy of a float8 tensor (preprocess_addmm's .contiguous() and
-- .t().contiguous().t(): elementwise_kernel<128, 4> float8_copy_kernel_cuda, one byte an element
-- read along a stride of a whole row). measure_torch_ops.py measures it as class "transpose_fp8"
-- (the H100: 257-296 GB/s, lua/hw/calibrated/h100_sxm_torch_ops.lua); a GPU whose table lacks it
-- prices it as "transpose" (sim/cost.c class_curve: a dtype-suffixed class falls back to its
-- generic one), the nearest measured class (the same .contiguous() of a transposed view, on bf16
-- heads whose 128 elements stay contiguous: faster than a transpose of single bytes).
M.LAYOUT_COPY_KIND = "transpose_fp8"

-- The kernels eager PyTorch launches for one hp_tensor_to_float8_dynamic of n elements of an
-- h-byte dtype, in order, each { what, kind (memory-access class), bytes, kernels }. axis:
-- "tensor" (one scale), "rows" (an amax per row, along the contiguous dim) or "cols" (an amax
-- per column, across rows); s the scale's elements; round: round_scales_to_power_of_2 (the
-- rowwise recipes). As torch.profiler shows them in the H100 step
-- (validation/results/kernels_tech_model_h100.jsonl):
--   abs                 vectorized_elementwise_kernel AbsFunctor: contiguous
--   max / amax          reduce_kernel; a whole-tensor or a column reduction splits the reduced
--                       dim over blocks and first memsets their semaphores (a Memset each), a
--                       row reduction (one block a row) does not
--   amax_to_scale       .to(float64), clamp, reciprocal, the finfo.max product, .to(float32):
--                       five kernels on s elements, five ops; rounding adds log2, floor, exp2
--   .to(float32)        unrolled_elementwise_kernel direct_copy: class cast_up
--   * scale             an fp32 product with any broadcast scale (0-d, (rows, 1) or (1, cols)):
--                       a stride-0 operand leaves TensorIterator's vectorized path, so all run
--                       its non-vectorized elementwise_kernel<128, 2> BinaryFunctor<float>, class
--                       broadcast_rows (the profile's rowwise backward launches 168 of them and no
--                       vectorized fp32 product for its 84 per-column casts; class broadcast is
--                       the bf16 weight product of RMSNorm, elementwise_kernel<128, 4>)
--   clamp               vectorized clamp_scalar: contiguous
--   .to(float8)         vectorized float8_copy_kernel_cuda: class cast_down
local function cast_kernels(n, h, axis, s, round)
  local ks = {
    { "abs", "elementwise", 2 * h * n, 1 },
    { "amax", axis == "rows" and "reduce_rows" or axis == "cols" and "reduce_cols" or "reduce_rows",
      h * n + h * s, axis == "rows" and 1 or 2 },
  }
  -- amax_to_scale, one ATen op a kernel (each its own dispatch on the host): .to(float64),
  -- clamp, reciprocal, the finfo.max product, .to(float32); rounding's log2, floor, exp2
  local scale_ops = { { "amax_float64", (h + 8) * s }, { "amax_clamp", 16 * s }, { "amax_reciprocal", 16 * s },
                      { "scale_float64", 16 * s }, { "scale", 12 * s } }
  if round then
    for _, o in ipairs({ "scale_log2", "scale_floor", "scale_exp2" }) do scale_ops[#scale_ops + 1] = { o, 8 * s } end
  end
  for _, o in ipairs(scale_ops) do ks[#ks + 1] = { o[1], "elementwise", o[2], 1 } end
  if h < 4 then ks[#ks + 1] = { "to_fp32", "cast_up", (h + 4) * n, 1 } end
  ks[#ks + 1] = { "mul_scale", "broadcast_rows", 8 * n + 4 * s, 1 }
  ks[#ks + 1] = { "clamp", "elementwise", 8 * n, 1 }
  ks[#ks + 1] = { "to_float8", "cast_down", 5 * n, 1 }
  return ks
end

-- Appends to list `into` the kernels of a cast named `what` (cast_kernels), each labelled.
local function add_cast(into, what, n, h, axis, s, round)
  for _, k in ipairs(cast_kernels(n, h, axis, s, round)) do
    into[#into + 1] = { what .. "." .. k[1], k[2], k[3], k[4] }
  end
end

-- Pass-through ops after tensor t whose backwards launch the kernels of list ks, in the order
-- listed (the first listed runs first in backward: the ops are made in the reverse order); each
-- one op of its kernel's class, so that each is priced at its own class's rate. They allocate
-- nothing: what the casts hold is the backward workspace of the GEMM op beside them. Returns
-- the last view (the tensor the layer goes on with). keep: t's reference is not dropped (a
-- view of a parameter, as the weight side's), else each op drops its input's, as one op would.
local function backward_kernels(cx, name, t, ks, keep)
  local v = t
  for i = #ks, 1, -1 do
    local k = ks[i]
    local nv = nn.view(cx, v, v.shape, name .. "." .. k[1])
    nv.rg = true
    nn.op(cx, { name = name .. "." .. k[1], kind = "none", inputs = { v }, out_tensors = { nv },
                grads = { { pass = 1 } }, bytes = 0, bwd_kind = k[2], bwd_bytes = math.max(k[3], 1),
                bwd_kernels = k[4], frees = keep and {} or nil })
    v = nv
  end
  return v
end

-- hp_tensor_to_float8_dynamic of t, as ops under no_grad (their output is no autograd
-- history: the Function's backward is its own). rows: the axiswise scale's length (nil:
-- tensorwise). Returns the float8 tensor.
-- round: round_scales_to_power_of_2 (the rowwise recipes: log2, floor and exp2 of the scale,
-- three more ops, each an s-element fp32 tensor).
local function cast(cx, name, t, rows, round)
  local keep = cx.no_grad
  -- eager launches (cast_kernels): a whole-tensor max memsets its blocks' semaphores first; the
  -- rounding's log2, floor, exp2 follow the scale's .to(float32). Compiled, Inductor's kernels.
  local eager = not cx.compiling
  cx.no_grad = true
  local sshape = rows and { rows, 1 } or { 1 }
  -- (t is consumed by the ops below: each use drops one of its references, as each op's input)
  local ab = nn.op(cx, { name = name .. ".abs", inputs = { t }, outs = { { name .. ".abs", t.shape, t.dtype } },
                         frees = {} })
  -- tensor_to_amax: max (or amax along the axis) in t's dtype; amax_to_scale: .to(float64),
  -- clamp(min=EPS), finfo.max / amax (reciprocal, then the product), .to(float32) (the float64
  -- scalars are made as 8-byte int64 tensors: the graph's dtypes have no float64, and only their
  -- bytes matter here)
  local amax = nn.op(cx, { name = name .. ".amax", kind = "reduce_rows", inputs = { ab },
                           outs = { { name .. ".amax", sshape, t.dtype } },
                           kernels = eager and not rows and 2 or nil })
  local a64 = nn.op(cx, { name = name .. ".amax_float64", inputs = { amax }, outs = { { name .. ".amax_float64", sshape, "int64" } } })
  local cl = nn.op(cx, { name = name .. ".amax_clamp", inputs = { a64 }, outs = { { name .. ".amax_clamp", sshape, "int64" } } })
  local rc = nn.op(cx, { name = name .. ".amax_reciprocal", inputs = { cl }, outs = { { name .. ".amax_reciprocal", sshape, "int64" } } })
  local sc = nn.op(cx, { name = name .. ".scale_float64", inputs = { rc }, outs = { { name .. ".scale_float64", sshape, "int64" } } })
  local scale = nn.op(cx, { name = name .. ".scale", inputs = { sc }, outs = { { name .. ".scale", sshape, "fp32" } } })
  if round then
    -- _round_scale_down_to_power_of_2: exp2(floor(log2(scale))), three ATen ops, each an
    -- s-element fp32 tensor (the capture's log2, floor, exp2)
    local lg = nn.op(cx, { name = name .. ".scale_log2", inputs = { scale },
                           outs = { { name .. ".scale_log2", sshape, "fp32" } } })
    local fl = nn.op(cx, { name = name .. ".scale_floor", inputs = { lg },
                           outs = { { name .. ".scale_floor", sshape, "fp32" } } })
    scale = nn.op(cx, { name = name .. ".scale_exp2", inputs = { fl },
                        outs = { { name .. ".scale_exp2", sshape, "fp32" } } })
  end
  local src = t
  if t.dtype ~= "fp32" then
    src = nn.op(cx, { name = name .. ".to_fp32", kind = "cast_up", inputs = { t },
                      outs = { { name .. ".fp32", t.shape, "fp32" } }, frees = {} })
  end
  local scaled = nn.op(cx, { name = name .. ".mul_scale", kind = "broadcast_rows", inputs = { src, scale },
                             outs = { { name .. ".scaled", t.shape, "fp32" } },
                             frees = src ~= t and { src, scale } or { scale } })
  local clamped = nn.op(cx, { name = name .. ".clamp", inputs = { scaled },
                              outs = { { name .. ".saturated", t.shape, "fp32" } } })
  local q = nn.op(cx, { name = name .. ".to_float8", kind = "cast_down", inputs = { clamped },
                        outs = { { name .. ".float8", t.shape, "fp8" } } })
  cx.no_grad = keep
  return q, scale, amax
end

-- The inverse of a cast's scale (scale.reciprocal(): _scaled_mm takes the inverse scales,
-- float8_ops.py addmm_float8_unwrapped), under no_grad; frees nothing (the scale is read again).
local function inverse(cx, name, scale)
  local keep = cx.no_grad
  cx.no_grad = true
  local inv = nn.op(cx, { name = name .. ".scale_reciprocal", inputs = { scale }, frees = {},
                          outs = { { name .. ".scale_reciprocal", scale.shape, "fp32" } } })
  cx.no_grad = keep
  return inv
end

-- hp_tensor_to_float8_dynamic (tensorwise) of an activation x that autograd carries through:
-- torchao's float8 tensor-parallel styles cast a module's input before its redistribution
-- (PrepareFloat8ModuleInput, Float8RowwiseParallel._prepare_input_fn), and the float8 tensor's
-- gradient (_ToFloat8ConstrFunc's backward) is the high-precision one passed back to x. The result
-- carries hp_dtype, the dtype the Float8Linear that reads it computes in. (On a sequence-sharded
-- DTensor the amax is a Partial reduced over the tp group: an all-reduce of one scalar, not an op.)
function M.cast_input(cx, name, x)
  local q = cast(cx, name, x, nil)
  local hp = x.hp_dtype or x.dtype
  if not (x.rg and not cx.no_grad) then q.hp_dtype = hp; return q end
  -- (a view of q that records autograd history: q itself, made under no_grad, records none)
  q.rg = true
  local v = nn.view(cx, q, q.shape, name .. ".float8")
  q.rg = false
  v.hp_dtype = hp
  nn.op(cx, { name = name .. ".float8 (autograd)", kind = "none", inputs = { x, q }, out_tensors = { v },
              grads = { { pass = 1 }, "none" }, bytes = 0 })
  return v
end

-- The peak bytes of a cast of n elements (the fp32 copy and its product, or the product and
-- its clamp, alive together), beside what it leaves: n bytes.
local function cast_peak(n) return 8 * n end

-- The axis and scale length of a cast whose scaling is `how` ("tensorwise", "rowwise"): a
-- rowwise cast reduces along `axis`, giving s scales.
local function scaling(how, axis, s)
  if how == "rowwise" then return axis, s end
  return "tensor", 1
end

-- After a GEMM whose operands' scales are per row or column (is_rowwise_scaling in
-- addmm_float8_unwrapped) and without use_fast_accum (backward's GEMMs, Float8LinearConfig's
-- defaults), torchao runs the tensorwise cuBLAS kernel with unit scales and scales the product
-- itself: post_inverse_scale = a_inv (rows, 1) * b_inv (1, cols), an fp32 rows x cols tensor
-- from two broadcast operands (elementwise_kernel<128, 2>: class broadcast_rows), then
-- output *= post_inverse_scale, a bf16 product times fp32 in place (a mixed-dtype contiguous op:
-- unrolled_elementwise_kernel, as the bf16-to-fp32 copy: class cast_up). The unit scales are
-- two new_ones(()) fills. n = rows x cols.
local function add_post_scale(into, what, n, h)
  into[#into + 1] = { what .. ".unit_scale_a", "elementwise", 4, 1 }
  into[#into + 1] = { what .. ".unit_scale_b", "elementwise", 4, 1 }
  into[#into + 1] = { what .. ".post_inverse_scale", "broadcast_rows", 4 * n, 1 }
  into[#into + 1] = { what .. ".mul_post_inverse_scale", "cast_up", (2 * h + 4) * n, 1 }
end

-- The eager kernels backward() runs for grad_input, before its GEMM, in order (the
-- matmul_with_hp_or_float8_args backward's first half): grad_output cast along its rows (axiswise
-- dim -1), the weight cast (weight_hp_t = weight.t(), axiswise dim -1: an amax per column of the
-- stored weight) unless FSDP2 gathered it in float8, the scales' reciprocals, and
-- preprocess_addmm's copy of the weight's float8 into column-major order (the cast keeps
-- weight.t()'s strides: its .t() is row-major, so .t().contiguous().t() transposes it). Rowwise
-- against a tensorwise weight (rowwise_with_gw_hp), the weight's scale repeated per column.
-- Mr x K input, N x K weight.
function M.grad_input_kernels(recipe, Mr, N, K, h, w_fp8)
  local ks = {}
  local ax, s = scaling(recipe.grad_output, "rows", Mr)
  add_cast(ks, "grad_output", Mr * N, h, ax, s, recipe.round)
  if not w_fp8 then
    ax, s = scaling(recipe.weight_for_grad_input, "cols", K)
    add_cast(ks, "weight", N * K, h, ax, s, recipe.round)
  end
  ks[#ks + 1] = { "grad_output.scale_reciprocal", "elementwise", 8, 1 }
  ks[#ks + 1] = { "weight.scale_reciprocal", "elementwise", 8, 1 }
  if recipe.grad_output ~= recipe.weight_for_grad_input then
    ks[#ks + 1] = { "weight.scale_repeat", "elementwise", 8 * K, 1 }
  end
  ks[#ks + 1] = { "weight.float8_column_major", M.LAYOUT_COPY_KIND, 2 * N * K, 1 }
  return ks
end

-- The eager kernels between the grad_input GEMM and the grad_weight GEMM, in order: grad_input's
-- post-scaling where its scales are per row (add_post_scale), then for a float8 grad_weight
-- grad_output cast along its columns (axiswise dim 0) and the input likewise, the scales'
-- reciprocals, and preprocess_addmm's layouts: grad_output.t() is not row-major (.contiguous():
-- a transposing copy) and the row-major input is made column-major (.t().contiguous().t()).
-- Rowwise, grad_weight's own post-scaling, which runs after its GEMM, is listed last here (an
-- op's place in this list moves its time, not the step's).
function M.grad_weight_kernels(recipe, Mr, N, K, h)
  local ks = {}
  local rowwise_gi = recipe.grad_output == "rowwise" or recipe.weight_for_grad_input == "rowwise"
  if rowwise_gi then add_post_scale(ks, "grad_input", Mr * K, h) end
  if recipe.input_for_grad_weight ~= false then
    local ax, s = scaling(recipe.grad_output_for_grad_weight, "cols", N)
    add_cast(ks, "grad_output_t", Mr * N, h, ax, s, recipe.round)
    ax, s = scaling(recipe.input_for_grad_weight, "cols", K)
    add_cast(ks, "input_t", Mr * K, h, ax, s, recipe.round)
    ks[#ks + 1] = { "grad_output_t.scale_reciprocal", "elementwise", 8, 1 }
    ks[#ks + 1] = { "input_t.scale_reciprocal", "elementwise", 8, 1 }
    ks[#ks + 1] = { "grad_output_t.float8_row_major", M.LAYOUT_COPY_KIND, 2 * Mr * N, 1 }
    ks[#ks + 1] = { "input_t.float8_column_major", M.LAYOUT_COPY_KIND, 2 * Mr * K, 1 }
    if recipe.grad_output_for_grad_weight == "rowwise" then add_post_scale(ks, "grad_weight", N * K, h) end
  end
  return ks
end

-- Float8Linear.forward for x (..., K) and weight w (N, K) (a gathered float8 copy where FSDP2
-- gathered it so), no bias (torchtitan's Llama and transformers' decoders have none on the
-- converted Linears). recipe: a row of M.RECIPES. tp: a Linear of torchao's float8 tensor-parallel
-- plan (Float8ColwiseParallel / Float8RowwiseParallel): its input reaches it as float8 (cast
-- before the all-gather, or here for a Rowwise one), so forward casts only the weight and saves
-- the float8 input, which grad_weight's GEMM reads as it is; and its output's gradient is cast
-- once, at the output (NoopFwToFloat8BwDynamic), for both GEMMs of backward.
-- host_class: the profile's host class of the whole call (host_class_us float8_linear_<recipe>,
-- measured as a call), or nil: the call's ops are then priced one by one.
function M.linear(cx, name, x, w, recipe, tp, host_class)
  if tp and x.dtype ~= "fp8" then x = M.cast_input(cx, name .. ".input", x) end
  local x_fp8 = x.dtype == "fp8"
  local K, N = x.shape[#x.shape], w.shape[1]
  local Mr = nn.numel(x.shape) // K
  local MN, NK, MK = Mr * N, N * K, Mr * K
  local flops = 2 * Mr * N * K
  local w_fp8 = w.dtype == "fp8"
  -- the high-precision dtype: the input's (the product and both gradients are made in it)
  local hp = x.hp_dtype or x.dtype
  local h = nn.DT_SIZE[hp]
  local rg = (x.rg or w.rg) and not cx.no_grad
  local shape = nn.copy_shape(x.shape)
  shape[#shape] = N
  local gw_fp8 = recipe.input_for_grad_weight ~= false
  local fused = cx.compiling
  -- eager, the call as it was timed (both operands cast here, a 2-D or folded input): its host
  -- time is the class's, forward and backward node, on the GEMM op; every other op of the call
  -- (the casts, the scales' reciprocals, the pass-throughs whose backwards launch the recasts)
  -- is inside it. Compiled, Inductor's generated code issues the casts (sim/engine.c).
  local whole = host_class and not fused and not tp and w.dtype ~= "fp8" and cx.host_classes
                and cx.host_classes[host_class] and host_class or nil
  local inside_was = cx.host_inside
  if whole then cx.host_inside = true end
  -- compiled without checkpointing, the partitioner chooses what backward's casts read of
  -- forward (validation/oracle/captures/compile_llama2_7b_l1.json, float8_tensorwise and
  -- float8_rowwise): the recasts read the input and the weight through fused kernels
  -- (bw_fused: recomputable, so the partitioner recomputes a cheap input rather than save it;
  -- the weight, a parameter, is saved for free); tensorwise, grad_input's _scaled_mm reads the
  -- weight's inverse scale and its recast the weight's amax, both from forward. With
  -- rowwise_with_gw_hp grad_weight's torch.mm reads the input itself, an extern kernel: the input
  -- is saved (the capture's float8_rowwise_with_gw_hp)
  local graph_saves = fused and not cx.compile_checkpointed
  -- a fused cast's traffic: two reads of the input (the amax and the cast), the float8 write
  local function traffic_of(n) return n * (2 * h + 1) end
  -- the weight side: grad_weight's GEMM and the casts before it (made first: its backward runs
  -- after the grad_input GEMM's)
  local wv = w
  if w.rg and not cx.no_grad then
    -- held from the grad_input half: grad_output's float8 copy, the weight's (unless gathered in float8)
    local held = fused and 0 or MN + (w_fp8 and 0 or NK)
    local ws = held
    local traffic = 0
    if gw_fp8 and tp then
      -- grad_output's float8 copy (the output's) and the saved float8 input, each copied into
      -- _scaled_mm's layout (preprocess_addmm): no cast
      ws = held + MN + MK
      traffic = 2 * MN + 2 * MK
    elseif gw_fp8 and fused then
      -- grad_output's and the input's float8 operands, each written in _scaled_mm's layout
      ws = held + MN + MK
      traffic = traffic_of(MN) + traffic_of(MK)
    elseif gw_fp8 then
      ws = held + math.max(cast_peak(MN), MN + cast_peak(MK), 2 * MN + 2 * MK)
      traffic = cast_traffic(MN, h) + cast_traffic(MK, h) + 2 * MN + 2 * MK
    end
    -- eager: the kernels between the grad_input GEMM and the grad_weight GEMM, in the order
    -- they run (grad_weight_kernels)
    local ks = not fused and M.grad_weight_kernels(recipe, Mr, N, K, h) or nil
    local ws_side = nn.view(cx, w, w.shape, name .. ".float8_weight_side")
    ws_side.rg = true
    nn.op(cx, { name = name .. ".float8_grad_weight", kind = "none", inputs = { w }, out_tensors = { ws_side },
                saves = { x }, bw_fused = graph_saves and gw_fp8 and not x_fp8 and { [x.id] = true } or nil,
                grads = { { bytes = nn.bytes(w.shape, hp), dtype = hp } }, bytes = 0,
                bwd_kind = "mm", bwd_flops = flops, dtype = gw_fp8 and "fp8" or hp,
                bwd_workspace = { ws }, bwd_workspace_first = true, frees = {}, compile_extern = true })
    if fused then
      -- the casts grad_weight's GEMM needs, a pass-through whose backward is their traffic
      wv = nn.view(cx, ws_side, w.shape, name .. ".float8_weight_side.casts")
      wv.rg = true
      nn.op(cx, { name = name .. ".float8_grad_weight_casts", kind = "none", inputs = { ws_side },
                  out_tensors = { wv }, grads = { { pass = 1 } }, bytes = 0, bwd_kind = "elementwise",
                  bwd_bytes = math.max(traffic, 1), frees = {}, compile_extern = true })
    else
      wv = backward_kernels(cx, name .. ".float8_grad_weight_casts", ws_side, ks, true)
    end
  end
  -- forward: the input's cast, then the weight's (weight_hp_t, axiswise along out_features)
  local rows_in = recipe.input == "rowwise" and Mr or nil
  local xq = x_fp8 and x or cast(cx, name .. ".input", x, rows_in, recipe.round)
  local wq, wscale, wamax = w, nil, nil
  if not w_fp8 then
    wq, wscale, wamax = cast(cx, name .. ".weight", w, recipe.weight == "rowwise" and N or nil, recipe.round)
  end
  local saves, bw_fused, winv = {}, nil, nil
  if x.rg then saves[1] = w end
  if graph_saves and x.rg and wscale and recipe.weight_for_grad_input == recipe.weight
     and recipe.weight == "tensorwise" then
    -- grad_input's recast of the weight has the forward's scaling: its amax is forward's
    winv = inverse(cx, name .. ".weight", wscale)
    saves[2], saves[3], bw_fused = winv, wamax, { [wamax.id] = true }
  end
  local out = nn.new_tensor(cx, name, shape, hp, rg)
  -- the grad_input half's temporaries: grad_output's cast, the weight's again, the weight's
  -- float8 copy transposed for _scaled_mm
  local ws_main = fused and MN + NK
                  or math.max(cast_peak(MN), MN + (w_fp8 and 0 or cast_peak(NK)), MN + 2 * NK - (w_fp8 and NK or 0))
  local inputs = { x, wv }
  local grads = { x.rg and { bytes = nn.bytes(x.shape, hp), dtype = hp } or "none", { pass = 1 } }
  local frees = { x, wv }
  if xq ~= x then inputs[#inputs + 1], grads[#grads + 1], frees[#frees + 1] = xq, "none", xq end
  if wq ~= w then inputs[#inputs + 1], grads[#grads + 1], frees[#frees + 1] = wq, "none", wq end
  if winv then inputs[#inputs + 1], grads[#grads + 1], frees[#frees + 1] = winv, "none", winv end
  -- eager, addmm_float8_unwrapped's a_scale.reciprocal() and b_scale.reciprocal() launch before
  -- the GEMM
  nn.op(cx, { name = name, kind = "mm", inputs = inputs, out_tensors = { out }, saves = saves,
              kernels = not fused and 3 or nil,
              grads = grads, grad_order = { 1, 2 }, flops = flops, bwd_flops = flops, dtype = "fp8",
              bytes = MK + (w_fp8 and NK or NK) + MN * h, bwd_bytes = MN * h + 2 * NK + MN + MK * h,
              bwd_workspace = { ws_main }, bwd_workspace_first = true, bw_fused = bw_fused,
              frees = frees, host = whole })
  if not rg then cx.host_inside = inside_was; return out end
  -- grad_output's cast and the weight's for the grad_input GEMM, after the product: their
  -- backwards run first. Eager, each kernel an op of its class (grad_input_kernels)
  if not fused then
    local y = backward_kernels(cx, name .. ".float8_grad_input_casts", out,
                               M.grad_input_kernels(recipe, Mr, N, K, h, w_fp8))
    cx.host_inside = inside_was
    return y
  end
  local y = nn.view(cx, out, shape, name .. ".float8_out")
  y.rg = true
  nn.op(cx, { name = name .. ".float8_grad_input_casts", kind = "none", inputs = { out }, out_tensors = { y },
              grads = { { pass = 1 } }, bytes = 0, bwd_kind = "elementwise",
              bwd_bytes = fused and traffic_of(MN) + (w_fp8 and 2 * NK or traffic_of(NK))
                          or cast_traffic(MN, h) + (w_fp8 and 0 or cast_traffic(NK, h)) + 2 * NK,
              compile_extern = true })
  return y
end

-- Swaps the Linears torchtitan converts for Float8Linear's forward (bias-free ones: a converted
-- Linear with a bias is refused). Returns the converted modules and those left as nn.Linear.
function M.apply(root, s, skip)
  local mod = require "vrsim.module"
  local recipe = M.RECIPES[s.recipe]
  local hit, left = {}, {}
  mod.walk(root, function(m)
    if m.cls ~= "Linear" then return end
    if not converted(m, skip) then left[#left + 1] = m; return end
    if m.p.bias or (function() for _, d in ipairs(m.decls) do if d.key == "bias" then return true end end end)() then
      error(("training.float8: %s has a bias; a Float8Linear with a bias (output + bias) is not modelled")
            :format(m.path), 0)
    end
    m.cls = "Float8Linear"
    m.float8 = s
    m.forward = function(cx, self, x)
      local w = mod.weight(cx, self.p.weight)
      return M.linear(cx, self.opname, x, w, recipe, self.float8_tp, "float8_linear_" .. s.recipe)
    end
    hit[#hit + 1] = m
  end)
  return hit, left
end

-- After the parameters are made: the weights FSDP2 gathers in float8.
function M.mark_params(hit, s)
  if not s.fsdp_float8_all_gather then return end
  for _, m in ipairs(hit) do m.p.weight.float8_gather = true end
end

return M
