-- moe.lua: a sparse mixture-of-experts block as transformers 5.x runs it in training (5.25:
-- models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock and MixtralTopKRouter, the experts
-- by integrations/moe.py grouped_mm_experts_forward). The families that use it (mixtral.lua,
-- qwen3_moe.lua) put it where their decoder layer has its MLP; GPT-OSS (gpt_oss.lua) builds its
-- own experts from its pieces, and DeepSeek (deepseek_v3.lua) its own router around
-- experts_forward.
--
--   gate: a TopKRouter (weight (E, hidden); not an nn.Linear, so bitsandbytes leaves it alone,
--         and peft reaches it by target_parameters only, "all-linear" converted to them:
--         strategies/lora.lua): logits = F.linear(x, weight); softmax in fp32; top-k;
--         the k weights renormalised to sum to 1 (norm_topk_prob)
--   experts: gate_up_proj (E, 2 * intermediate, hidden) and down_proj (E, hidden, intermediate),
--         3-D parameters (again not nn.Linear). The model's _experts_implementation defaults to
--         "grouped_mm" (modeling_utils get_correct_experts_implementation) for a class decorated
--         with @use_experts_implementation: the token-expert pairs (S = tokens x k) sorted by
--         expert, gathered, through torch's grouped GEMM for every expert at once, gated,
--         through the second grouped GEMM, weighted by the router (Mixtral's fp32 weights
--         promote the bf16 product to fp32; Qwen3-MoE's router hands back bf16 weights), put
--         back in token order, summed over k, then cast back.
-- Every tensor's size depends on S alone, not on which expert a token goes to: the routing
-- changes the time of the grouped GEMMs (taken here as balanced, each expert S / E rows), never
-- the memory. Not modelled (an error where configured): the eager per-expert loop
-- (experts_implementation = "eager"), router jitter noise, the load-balancing loss
-- (output_router_logits). LoRA on the experts' 3-D parameters (peft's target_parameters,
-- lora.ParamWrapper) folds each adapter into a whole copy of the expert stack per forward
-- (strategies/lora.lua param_proxies, param_weight).
local nn = require "vrsim.nn"
local mod = require "vrsim.module"

local M = {}

local W = mod.weight

-- The router's F.linear, under autocast with its weight cast like a Linear's.
-- (LoRA on its weight, peft's target_parameters "gate.weight", folds the adapter in first:
-- strategies/lora.lua param_wrap_2d)
local function router_forward(cx, m, x)
  return require("strategies.lora").param_wrap_2d(cx, m, "weight", function()
    return require("models.llama").linear_forward(cx, m, x)
  end)
end

-- The dispatch's index ops a GPU's measured grouped GEMM table times (sim/cost.h COST_MOE_*,
-- validation/harness/measure_grouped_mm.py): an op marked with one (Op.moe_index, of moe_size
-- elements) takes that table's time where the GPU has one, else its kind's.
local MOE_INDEX = { sort = 1, histc = 2, cumsum = 3, index_put = 4, gather = 5 }
M.MOE_INDEX = MOE_INDEX

-- The dispatch's ops that torch.compile's partitioner never recomputes (aten.sort, histc, cumsum,
-- index_put: not in its recomputable allowlist, get_default_op_list) and Inductor does not fuse
-- into a pointwise kernel: a compiled layer saves what backward reads of their outputs
-- (compile_extern, strategies/compile.lua). perm // k, the int cast and arange are pointwise.
local NOT_RECOMPUTED = { sort = true, histc = true, cumsum = true, index_put = true }

-- The bytes cub's DeviceRadixSort::SortPairs asks of the caching allocator for n int64 keys with
-- int64 values over `bits` key bits (ATen's at::cuda::cub::radix_sort_pairs, CUB_WRAPPER): the
-- onesweep pass's AliasTemporaries, each part aligned to 256 bytes plus 255 of slack: the bins
-- (8-byte offsets, one 256-digit histogram per pass of 8 bits), the lookback (a 4-byte counter
-- per digit per tile), the keys' and values' alternate buffers (not overwrite-okay, more than one
-- pass), the pass counters. The tile, 4608 pairs, is the onesweep policy's for 8-byte keys on
-- sm90, read off two H200 traces (n = 114688 and 262144 pairs: 1877503 and 4269567 bytes at 64
-- bits, 1867263 / 4259327 at three passes, 1865215 / 4257279 at two:
-- fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr, fulltrace_gen11-qwen3-30b-a3b-lora-b8-ckpt-tr).
-- (Below one tile cub sorts in a single tile and asks for almost nothing; the onesweep figure is
-- kept there too, a few KB at most.)
local SORT_TILE = 4608
local function align256(x) return (x + 255) // 256 * 256 end
local function radix_sort_pairs_temp(n, bits)
  local passes = (bits + 7) // 8
  local portion = ((1 << 28) - 1) // SORT_TILE * SORT_TILE
  local portions = (n + portion - 1) // portion
  local blocks = (math.min(n, portion) + SORT_TILE - 1) // SORT_TILE
  local alt = passes > 1 and align256(n * 8) or 0
  return align256(portions * passes * 256 * 8) + align256(blocks * 256 * 4) + 2 * alt
         + align256(portions * passes * 8) + 255
end
M.radix_sort_pairs_temp = radix_sort_pairs_temp

-- The bits of the largest key (cub::get_num_bits: at least 1).
local function num_bits(max_key)
  local b = 1
  while max_key > 1 do max_key = max_key >> 1; b = b + 1 end
  return b
end

-- The bytes cub's DeviceScan::InclusiveScan asks of the caching allocator (ATen's
-- at::cuda::cub::inclusive_scan, CUB_WRAPPER) for torch.cumsum of the experts' counts: the
-- decoupled look-back's tile states, one 16-byte descriptor (an 8-byte accumulator and its
-- status word) per tile plus cub's 32 of padding, through AliasTemporaries (aligned to 256, plus
-- 255): 1023 bytes from one tile up to 16, allocated after the offsets and freed as cumsum
-- returns, in all four MoE traces (8, 32 and 128 experts: fulltrace_gen4-mixtral-l2-b1,
-- fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr, fulltrace_gen11-qwen3-30b-a3b-lora-b8-ckpt-tr
-- and -experts-b1-ckpt-tr). The same traces' cumsum of 4096 int64 (the attention mask's packed
-- sequence check) asks 1279, 17 to 32 tiles: a tile holds at least 128 counts, so the fewer than
-- 1024 groups grouped_mm takes are at most 8 tiles.
local SCAN_TILE_PADDING = 32
local function inclusive_scan_temp()
  return align256((1 + SCAN_TILE_PADDING) * 16) + 255
end

-- An op whose outputs need no gradient and that saves nothing: sort, histc, the index sums.
-- timed: the MOE_INDEX name of the measured op it is (its size: its first input's elements, the
-- length the harness keys it by: the pairs sorted, counted or permuted, the counts summed).
-- torch.sort of a 1-D int64 tensor longer than 4096 (SortStable.cu
-- segmented_sort_large_segments) allocates, after its outputs, the original positions (n int64)
-- and cub's temporary, and frees both as it returns; at most 4096 it sorts in place.
-- The kernels each of the dispatch's multi-kernel ATen ops launches, as torch.profiler counts them
-- per call on an H100 (torch 2.11, transformers 5.25's Qwen3-MoE at 4096 tokens, 32768 pairs;
-- validation/results/ops_gen11_experts_h100.jsonl, profile_hf_step.py --ops): aten::sort of the
-- int64 pairs, cub's onesweep radix sort over all 64 key bits (eight onesweep passes, the
-- histogram and exclusive sum, the original positions and the memsets between them): 21;
-- aten::cumsum's cub scan (its init kernel and the scan): 2; aten::_index_put_impl_ of a 1-D
-- index (index_put_with_sort over 15 key bits): 5, of rows: 9. Each launch costs the host its
-- launch and the stream its gap; the GPU's measured table, where it has one, times the whole call.
local LAUNCHES = { sort = 21, cumsum = 2, index_put = 5 }
local INDEX_PUT_ROWS_LAUNCHES = 9
M.LAUNCHES, M.INDEX_PUT_ROWS_LAUNCHES = LAUNCHES, INDEX_PUT_ROWS_LAUNCHES

local function index_op(cx, name, inputs, outs, kind, timed)
  for _, o in ipairs(outs) do o.no_grad = true end
  local ws
  local kernels = timed and LAUNCHES[timed]
  if timed == "sort" then
    local n = nn.numel(inputs[1].shape)
    if n > 4096 then ws = { n * 8, radix_sort_pairs_temp(n, 64) } else kernels = nil end
  elseif timed == "cumsum" then
    ws = { inclusive_scan_temp() }
  end
  return nn.op(cx, { name = name, kind = kind or "elementwise", inputs = inputs, outs = outs,
                     grads = { "none", "none" }, moe_index = timed and MOE_INDEX[timed] or nil,
                     moe_size = timed and nn.numel(inputs[1].shape) or nil, kernels = kernels,
                     compile_extern = timed and NOT_RECOMPUTED[timed] or nil, workspace = ws })
end

-- x[idx] along dim 0 (aten::index): a new (n, ...) tensor; IndexBackward0 scatters the gradient
-- into zeros of x's shape (index_put_ with accumulate), so backward makes one buffer of x's size.
-- That scatter is no fusible kernel: under torch.compile idx is materialized in backward, which
-- bans its recomputation (the partitioner's ban_if_materialized_backward: bw_unfused).
-- timed: one of the dispatch's gathers the grouped GEMM table times (the hidden states and
-- weights into expert order, and the pairs back), of n x width elements; its indices repeat
-- where x has fewer rows than n.
-- On CUDA that index_put_ (accumulate) is index_put_with_sort_kernel (Indexing.cu): after the
-- zeros, the linear index (remainder, then times the stride: two n int64 arrays, the first freed
-- at once), the sorted indices, their original positions, an arange, and cub's temporary over
-- the bits of x's last row index; all freed as the kernel returns. The remainder, freed before
-- the sorted indices are made, is the backward of a pass-through op after the gather (whose
-- backward runs just before IndexBackward0's): its own block, made and freed, as the traces have
-- it (fulltrace_gen11-qwen3-30b-a3b-lora-experts-b1-ckpt-tr: five arrays of the pairs a gather).
local function gather_rows(cx, name, x, idx, n, timed)
  local shape = nn.copy_shape(x.shape)
  shape[1] = n
  local bws
  if x.rg then
    bws = { n * 8, n * 8, n * 8, n * 8, radix_sort_pairs_temp(n, num_bits(x.shape[1] - 1)) }
  end
  -- (its backward: the zeros, then index_put_with_sort's launches, LAUNCHES above)
  local y = nn.op(cx, { name = name, kind = "gather", inputs = { x, idx },
                     outs = { { name, shape, x.dtype } }, saves = { idx },
                     grads = { "new", "none" }, bw_unfused = true, moe_index = timed and MOE_INDEX.gather or nil,
                     moe_size = timed and nn.numel(shape) or nil, moe_dup = timed and x.shape[1] < n or nil,
                     bwd_workspace = bws,
                     bwd_kernels = bws and 1 + (#x.shape == 1 and LAUNCHES.index_put or INDEX_PUT_ROWS_LAUNCHES) or nil })
  if not (bws and y.rg) then return y end
  local v = nn.view(cx, y, y.shape, name .. ".remainder")
  v.rg = true
  nn.op(cx, { name = name .. ".remainder", kind = "none", inputs = { y }, out_tensors = { v },
              grads = { { pass = 1 } }, bytes = 0, frees = {}, bwd_workspace = { n * 8 }, host = "inside" })
  return v
end

-- The caching-allocator buffers of one bf16 torch._grouped_mm on CUTLASS's grouped kernel, which
-- _grouped_mm_cuda takes on an sm90 or sm100 NVIDIA GPU with bf16 operands (GroupedBlas.cpp
-- use_fast_path; elsewhere _grouped_mm_fallback's per-group GEMMs write into the output),
-- allocated after the output in this order and freed in reverse as the call returns
-- (GroupMM.cu bf16bf16_grouped_gemm_impl_sm90_sm100): the arguments (three pointer arrays of the
-- group count rounded up to 2, a 12-byte problem shape and three 8-byte strides per group), then
-- Gemm::get_workspace_size: the pointer-array kernel's per-SM TMA descriptors, 128 bytes each of
-- the mainloop's two inputs and the epilogue's two tensors (C and D), 512 bytes an SM. Each GEMM
-- of its backward (the input's gradient, the weight's) is another call with the same groups.
-- 7680 and 67584 bytes for Qwen3-MoE's 128 experts on an H100 (132 SMs), 1920 for GPT-OSS's 32,
-- 480 for Mixtral's 8 (fulltrace_gen11-qwen3-30b-a3b-lora-experts-b1-ckpt-tr,
-- fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr, fulltrace_gen4-mixtral-l2-b1).
local function grouped_mm_buffers(cx, ne, dtype)
  local g = cx.gpu
  if not g or g.vendor ~= "nvidia" or dtype ~= "bf16" or not g.compute_capability then return nil end
  local major = math.floor(g.compute_capability)
  if major ~= 9 and major ~= 10 then return nil end
  if not g.sm_count then
    error("torch._grouped_mm: CUTLASS's grouped GEMM sizes its workspace by the GPU's SM count, which the catalog lacks", 0)
  end
  local aligned = (ne + 1) // 2 * 2
  return { aligned * 3 * 8 + ne * 12 + ne * 3 * 8, 512 * g.sm_count }
end
M.grouped_mm_buffers = grouped_mm_buffers

-- torch grouped GEMM of the S rows of x with each expert's (out, in) matrix of w (E, out, in),
-- weight.transpose(-2, -1) a view: what it saves follows F.linear (x for the weight's gradient,
-- the weight for x's). transposed: w is laid out (E, in, out) and goes in as it is (GPT-OSS's
-- experts, is_transposed=True).
local function grouped_mm(cx, name, x, w, offsets, transposed)
  local s, cin, cout = x.shape[1], w.shape[3], w.shape[2]
  if transposed then cin, cout = w.shape[2], w.shape[3] end
  local saves = {}
  if w.rg then saves[#saves + 1] = x end
  if x.rg then saves[#saves + 1] = w end
  -- GroupedMmBackward0 keeps the offsets too (offs_): the groups' bounds both gradients split at
  if offsets then saves[#saves + 1] = offsets end
  local flops = 2 * s * cout * cin
  local bwd = flops * ((x.rg and 1 or 0) + (w.rg and 1 or 0))
  -- its shape as the GPU's grouped GEMM table keys it (sim/cost.c grouped_s); the plan notes
  -- shapes that table lacks (M.unpriced)
  local ne = w.shape[1]
  cx.grouped_mm_shapes = cx.grouped_mm_shapes or {}
  cx.grouped_mm_shapes[("%s/%d/%d/%d/%s"):format(transposed and "nn" or "nt", ne, cout, cin,
                                                  (x.rg and "d" or "") .. (w.rg and "w" or ""))] = true
  -- (the input is cast to the weight's dtype first: both are w's)
  local buf = grouped_mm_buffers(cx, ne, w.dtype)
  local bws
  if buf then
    bws = {}
    for _ = 1, (x.rg and 1 or 0) + (w.rg and 1 or 0) do
      bws[#bws + 1], bws[#bws + 2] = buf[1], buf[2]
    end
    if #bws == 0 then bws = nil end
  end
  return nn.op(cx, { name = name, kind = "mm", inputs = { x, w, offsets },
                     outs = { { name, { s, cout }, x.dtype } }, saves = saves,
                     workspace = buf, bwd_workspace = bws,
                     grads = { { dtype = x.dtype }, w.rg and { dtype = w.dtype } or "none", "none" },
                     grad_order = { 2, 1, 3 }, flops = flops, bwd_flops = bwd > 0 and bwd or nil,
                     dtype = x.dtype, gmm_experts = ne, gmm_rows = s, gmm_n = cout, gmm_k = cin,
                     gmm_nn = transposed or false, gmm_grads = (x.rg and 1 or 0) + (w.rg and 2 or 0) })
end

-- A note for the plan (lua/vrsim/plan.lua) when the graph has grouped GEMMs that the GPU's own
-- measured table (device.grouped_mm, lua/hw/calibrated/<gpu>_grouped_mm.lua) does not price:
-- those take the GEMM curve at their FLOPs, as one dense GEMM, and without a table the
-- dispatch's index ops their classes' bandwidth. nil when every one is priced from the table.
function M.unpriced(cx, dev)
  if not cx.grouped_mm_shapes then return nil end
  local t = dev.grouped_mm
  if not t then
    return ("torch._grouped_mm priced as one dense GEMM of its FLOPs, and the experts' dispatch "
            .. "(sort, histc, index gathers) by bytes: no grouped GEMM table measured on the %s "
            .. "(lua/hw/calibrated/%s_grouped_mm.lua, validation/harness/measure_grouped_mm.py)"):format(dev.name, dev.key)
  end
  local have = {}
  for _, r in ipairs(t.grouped_mm or {}) do
    if r.routing == "balanced" then have[("%s/%d/%d/%d/%s"):format(r.layout, r.experts, r.n, r.k, r.gemm)] = true end
  end
  local missing = {}
  for key in pairs(cx.grouped_mm_shapes) do
    local shape, grads = key:match("^(.*)/(%a*)$")
    local need = { "fwd" }
    if grads:find("d") then need[#need + 1] = "dgrad" end
    if grads:find("w") then need[#need + 1] = "wgrad" end
    for _, g in ipairs(need) do
      if not have[shape .. "/" .. g] then
        local layout, e, n, k = shape:match("^(%a+)/(%d+)/(%d+)/(%d+)$")
        missing[#missing + 1] = ("%s %s experts=%s n=%s k=%s"):format(g, layout, e, n, k)
      end
    end
  end
  if #missing == 0 then return nil end
  table.sort(missing)
  return ("torch._grouped_mm priced as one dense GEMM of its FLOPs where %s has no balanced rows "
          .. "of its shape: %s"):format(t.source or (dev.key .. "_grouped_mm.lua"), table.concat(missing, ", "))
end

-- grouped_mm_experts_forward(hidden_states (t, hidden), top_k_index, top_k_weights) of an experts
-- module `ex` (gate_up_proj (E, 2 * inter, hidden), down_proj (E, hidden, inter), no biases) in
-- block `pre`: e.experts, e.top_k, e.intermediate. Returns the (t, hidden) output in x_dtype.
local function experts_forward(cx, pre, ex, hs, topv, topi, e, x_dtype)
  local t, h = hs.shape[1], hs.shape[2]
  local k, ne, inter = e.top_k, e.experts, e.intermediate
  local n = t * k
  -- LoRA on the experts' parameters (peft target_parameters): the wrappers' factors first
  local lora = require "strategies.lora"
  local proxies = lora.param_proxies(cx, pre, ex)
  if proxies and cx.ep then
    error(pre .. ".experts: LoRA on the experts' parameters (training.lora.target_parameters) with expert "
          .. "parallelism is not modelled", 0)
  end
  local weights = nn.view(cx, topv, { n }, pre .. ".sample_weights")
  local ids = nn.view(cx, topi, { n }, pre .. ".expert_ids")
  local ids_sorted, perm = index_op(cx, pre .. ".sort", { ids },
    { { pre .. ".expert_ids_sorted", { n }, "int64" }, { pre .. ".perm", { n }, "int64" } }, nil, "sort")
  local rows = index_op(cx, pre .. ".perm_div_k", { perm }, { { pre .. ".token_of_pair", { n }, "int64" } })
  local selected = gather_rows(cx, pre .. ".select_hidden", hs, rows, n, true)
  local weights_g = gather_rows(cx, pre .. ".select_weights", weights, perm, n, true)
  -- histc over the sorted ids (cast to int on CUDA), then the per-expert offsets
  local ids32 = index_op(cx, pre .. ".expert_ids.int", { ids_sorted }, { { pre .. ".expert_ids_int", { n }, "int32" } })
  local counts = index_op(cx, pre .. ".histc", { ids32 }, { { pre .. ".tokens_per_expert", { ne }, "int32" } }, nil, "histc")
  local offsets = index_op(cx, pre .. ".cumsum", { counts }, { { pre .. ".offsets", { ne }, "int32" } }, nil, "cumsum")

  -- (under target_parameters the first read of a wrapped weight folds its adapter in)
  local gu = lora.param_weight(cx, proxies, "gate_up_proj", W(cx, ex.p.gate_up_proj))
  -- grouped_mm is not autocast-enabled: `input.to(weight.dtype)`
  local sel = nn.to(cx, selected, gu.dtype, pre .. ".experts.input_cast")
  -- expert parallelism (strategies/ep.lua): the sorted pairs sent to their experts' ranks, this
  -- rank's E/ep experts run on what arrives
  local ep_state
  if cx.ep then sel, offsets, ep_state = require("strategies.ep").dispatch(cx, pre, sel, counts, e) end
  local proj = grouped_mm(cx, pre .. ".experts.gate_up_proj", sel, gu, offsets)
  -- `gate, up = gate_up_out.chunk(2, dim=-1)`: two views; SplitBackward0 joins their gradients
  -- into one buffer of proj's size
  local gate = nn.view(cx, proj, { proj.shape[1], inter }, pre .. ".experts.gate")
  local up = nn.view(cx, proj, { proj.shape[1], inter }, pre .. ".experts.up")
  nn.op(cx, { name = pre .. ".experts.chunk", kind = "none", inputs = { proj }, out_tensors = { gate, up },
              grads = { { dtype = proj.dtype } }, bwd_kind = "cat_strided", bytes = 0 })
  -- The two halves are views with a row stride of twice their width, as GEGLU's
  -- (models/blocks/unet.lua): act_fn(gate) reads one through TensorIterator's non-vectorized
  -- path (the "strided" class: the H200's 4 x 4096 Qwen3 step ran silu_kernel's nocast kernel
  -- 0.275 ms a layer for 403 MB, 1.46 TB/s, results/kernels_gen11_qwen3_b4_h200.jsonl). Its
  -- backward reads the contiguous gradient and the strided half and writes a contiguous
  -- gradient, three passes: the access of GEGLU's product ("strided_mixed"; the same step's
  -- silu_backward_kernel, 0.316 ms for 604 MB). The product with the other half runs as
  -- GEGLU's product does ("strided_mixed" and "strided_mixed_bwd")
  local act = nn.op(cx, { name = pre .. ".experts.act_fn", kind = "strided", inputs = { gate },
                          outs = { { pre .. ".experts.act_fn", gate.shape, gate.dtype } }, saves = { gate },
                          bwd_kind = "strided_mixed", bwd_bytes = 3 * nn.bytes(gate.shape, gate.dtype),
                          flops = nn.numel(gate.shape), dtype = gate.dtype })
  local gated = nn.mul(cx, pre .. ".experts.mul", act, up, act.dtype,
                       { kind = "strided_mixed", bwd_kind = "strided_mixed_bwd" })
  local dp = lora.param_weight(cx, proxies, "down_proj", W(cx, ex.p.down_proj))
  local gated_in = nn.to(cx, gated, dp.dtype, pre .. ".experts.down_input_cast")
  local down = grouped_mm(cx, pre .. ".experts.down_proj", gated_in, dp, offsets)
  if ep_state then down = require("strategies.ep").combine(cx, pre, down, ep_state) end
  -- `proj_out * sample_weights_g.unsqueeze(-1)`: fp32 weights (Mixtral's) promote the product
  local wcol = nn.view(cx, weights_g, { n, 1 }, pre .. ".sample_weights_col")
  -- MulBackward0 makes the weights' gradient as the full (S, hidden) product grad * proj_out, in
  -- the product's dtype, before the engine sums it to (S, 1) (fulltrace_gen4-qwen3moe-l4-b2: a
  -- 128 MiB temporary in each block's backward, freed once the 64 KiB sum is made); with fp32
  -- weights the projection's gradient grad * weights is fp32 too, and the engine casts it to
  -- bf16 (fulltrace_gen4-dsv2lite-l4-b1-eager: two 96 MiB fp32 temporaries, then 48 MiB). The
  -- engine then makes the two outputs in order: the projection's gradient (cast), the weights'
  -- sum.
  local wdt = nn.promote(down.dtype, weights_g.dtype)
  local ws = { nn.bytes(down.shape, wdt) }
  if wdt ~= down.dtype then ws[2] = nn.bytes(down.shape, wdt) end
  -- The (S, 1) column is a stride-0 operand along the rows, so the product runs TensorIterator's
  -- non-vectorized kernel, whose unroll is set by the dtype (Loops.cuh gpu_kernel_impl_nocast:
  -- 4 elements a thread under 4 bytes, else 2). In bf16 that is the kernel of the broadcast
  -- class ("mul weight bf16", elementwise_kernel<128, 4>), not broadcast_rows' ("mul rows fp32",
  -- elementwise_kernel<128, 2>): the H200's Qwen3 4 x 4096 step ran the bf16 nocast MulFunctor
  -- 481 times in forward for 83.1 ms (results/kernels_gen11_qwen3_b4_h200.jsonl), ten a layer (the
  -- four norms' weights, the four rotary products, this product and the SwiGLU product) and the
  -- final norm, where vrsim's ten came to 69.5 ms with this one at broadcast_rows. In bf16 its
  -- backward's three kernels are priced apart: MulBackward0's grad * weights (the same kernel,
  -- the product op's own backward: grad read, gradient written), its grad * proj_out (both
  -- contiguous: the vectorized kernel, three passes) and the engine's sum of that to the
  -- column's (S, 1) (InputMetadata::reduce_grad), the last two as pass-throughs on the weights'
  -- side that allocate nothing (the product's temporary stays the product's bwd_workspace) and
  -- cost the host nothing of their own (the product's node dispatches them)
  local wkind = nn.bytes({ 1 }, wdt) < 4 and "broadcast" or "broadcast_rows"
  local wside, wspec = wcol, { kind = wkind, bwd_kind = "broadcast_rows",
                               bwd_workspace = ws, bwd_workspace_first = true, grad_order = { 1, 2 } }
  if wkind == "broadcast" and wcol.rg and not cx.no_grad then
    local prod = nn.bytes(down.shape, wdt)
    local sum_side = nn.view(cx, wcol, wcol.shape, pre .. ".experts.weights_grad_sum")
    sum_side.rg = true
    nn.op(cx, { name = pre .. ".experts.weights_grad_sum", kind = "none", inputs = { wcol },
                out_tensors = { sum_side }, grads = { { pass = 1 } }, bytes = 0, bwd_kind = "reduce_rows",
                bwd_bytes = prod + nn.bytes(wcol.shape, wdt), frees = {}, host = "inside" })
    wside = nn.view(cx, sum_side, wcol.shape, pre .. ".experts.weights_grad_product")
    wside.rg = true
    nn.op(cx, { name = pre .. ".experts.weights_grad_product", kind = "none", inputs = { sum_side },
                out_tensors = { wside }, grads = { { pass = 1 } }, bytes = 0, bwd_kind = "elementwise",
                bwd_bytes = 3 * prod, frees = {}, host = "inside" })
    wspec.bwd_kind, wspec.bwd_bytes = "broadcast", 2 * prod
  end
  local weighted = nn.mul(cx, pre .. ".experts.weighted", down, wside, wdt, wspec)
  -- inv_perm = empty_like(perm); inv_perm[perm] = arange(S)
  local arange = index_op(cx, pre .. ".arange", {}, { { pre .. ".arange", { n }, "int64" } })
  local inv = index_op(cx, pre .. ".inv_perm", { perm, arange }, { { pre .. ".inv_perm", { n }, "int64" } }, nil,
                       "index_put")
  local reordered = gather_rows(cx, pre .. ".restore_order", weighted, inv, n, true)
  -- view(tokens, k, hidden).sum(dim=1) in the product's dtype. SumBackward0 expands the gradient
  -- (a stride-0 view), and the view's backward reshapes it to (S, hidden), which cannot be a view
  -- of it: a copy of the pairs' size (the oracle's Mixtral capture: clone <- experts|view)
  local summed = nn.op(cx, { name = pre .. ".sum_top_k", kind = "reduce_rows", inputs = { reordered },
                             outs = { { pre .. ".final_hidden", { t, h }, reordered.dtype } } })
  local out = nn.to(cx, summed, x_dtype, pre .. ".final_hidden.to")
  -- grouped_mm_experts_forward returns: its locals go in their order (expert_ids_g, perm,
  -- selected_hidden_states_g, sample_weights_g, histc_input, tokens_per_expert, offsets,
  -- proj_out, weighted_out, inv_perm), which the gate_up GEMM, the weighting and the sum had
  -- read last (fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr, the same function with biases)
  nn.release(cx, { ids_sorted, perm, selected, weights_g, ids32, counts, offsets, down, reordered, inv },
             pre .. ".experts: returns")
  -- parametrize.cached() holds each folded weight until the wrappers' forward returns (what
  -- the grouped GEMM does not save, where its input needs no gradient, goes then)
  if proxies then nn.release(cx, { gu, dp }, pre .. ".experts: the parametrization cache clears") end
  return out
end

-- MixtralSparseMoeBlock.forward(hidden_states (b, s, hidden)).
local function moe_forward(cx, m, x)
  local e = m.moe
  local pre = m.opname
  local b, s, h = x.shape[1], x.shape[2], x.shape[3]
  local t, k, ne = b * s, e.top_k, e.experts
  local hs = nn.view(cx, x, { t, h }, pre .. ".hidden_flat")

  -- the router: `_, top_k_weights, top_k_index = self.gate(hidden_states)`; router_logits is
  -- bound to `_` until the block returns
  local logits = mod.call(cx, m.children.gate, hs)
  local l32 = nn.to(cx, logits, "fp32", pre .. ".router_logits.float")
  -- under torch.compile, Inductor's decomposition of the softmax reduces each row twice (its
  -- max, then the sum of the exponentials): two (t, 1) fp32 reductions the partitioner bans from
  -- recomputation (ban_if_reduction) and saves, from which backward recomputes the probabilities
  -- out of the saved logits (validation/oracle/captures/compile_moe_l1.json: amax, sum_1)
  local sm_in = { l32 }
  if cx.compiling then
    for _, stat in ipairs({ "amax", "sum_exp" }) do
      sm_in[#sm_in + 1] = nn.op(cx, { name = pre .. ".router_softmax." .. stat, kind = "reduce_rows",
                                      inputs = { l32 }, grads = { "none" },
                                      outs = { { pre .. ".router_softmax." .. stat, { t, 1 }, "fp32", no_grad = true } } })
    end
  end
  -- its CUDA backward (softmax_backward_cuda_out) first makes `grad * output`, a temporary of the
  -- gradient's size (fulltrace_gen4-qwen3moe-l4-b2: a third 2 MiB buffer in each router's backward)
  local probs = nn.op(cx, { name = pre .. ".router_softmax", kind = "softmax", inputs = sm_in,
                            outs = { { pre .. ".router_probs", { t, ne }, "fp32" } }, save_outs = { 1 },
                            grads = { { dtype = "fp32" }, "none", "none" },
                            bwd_workspace = { nn.bytes({ t, ne }, "fp32") } })
  -- TopkBackward0 keeps the indices and scatters the gradient into zeros of the input's shape.
  -- aten.topk is not in the partitioner's recomputable allowlist: a compiled layer saves both
  -- outputs where backward reads them (compile_extern)
  local topv, topi = nn.op(cx, { name = pre .. ".topk", inputs = { probs },
                                 outs = { { pre .. ".top_k_values", { t, k }, "fp32" },
                                          { pre .. ".top_k_index", { t, k }, "int64", no_grad = true } },
                                 save_outs = { 2 }, compile_extern = true })
  if e.norm_topk then
    -- `router_top_value /= router_top_value.sum(dim=-1, keepdim=True)`: in place, so the
    -- DivBackward0 node keeps a copy of the values it divided, and the divisor.
    -- SumBackward0's gradient is its output's expanded (a view): the engine's InputBuffer adds it
    -- in place into the division's gradient of the values, which reaches them first
    local sum = nn.op(cx, { name = pre .. ".topk_sum", kind = "reduce_rows", inputs = { topv },
                            outs = { { pre .. ".topk_sum", { t, 1 }, "fp32" } }, frees = {},
                            grads = { { pass = 1 } } })
    if topv.rg then
      -- DivBackward0 computes the divisor's gradient first, -grad * ((self / other) / other)
      -- (FunctionsManual div_tensor_other_backward): four (t, k) fp32 temporaries (the two
      -- quotients, the negated gradient, the product) before the values' grad / other and the
      -- product's sum to (t, 1) (the oracle's qwen3_moe_l2_lora_experts_ckpt: div, div, neg, mul,
      -- div, sum; fulltrace_gen11-qwen3-30b-a3b-lora-experts-b1-ckpt-tr: five 128 KiB blocks and
      -- one of 16 KiB a layer)
      local tk = nn.bytes({ t, k }, "fp32")
      topv = nn.op(cx, { name = pre .. ".topk_normalize", kind = "broadcast_rows", inputs = { topv, sum },
                         outs = { { pre .. ".top_k_weights", { t, k }, "fp32" } }, saves = { topv, sum },
                         bwd_workspace = { tk, tk, tk, tk }, bwd_workspace_first = true })
    else
      -- no autograd history (the router's input needs no gradient: the first layer when only the
      -- experts' parameters are adapted, or inference): the division is in place, no copy
      nn.op(cx, { name = pre .. ".topk_normalize", kind = "broadcast_rows", inputs = { topv, sum },
                  frees = { sum }, dtype = "fp32" })
    end
  end

  -- Qwen3-MoE's router hands its weights back in the logits' dtype
  -- (`router_top_value.to(router_logits.dtype)`); Mixtral's stay fp32
  if e.weights_to_logits_dtype then topv = nn.to(cx, topv, logits.dtype, pre .. ".top_k_weights.to") end

  local out = experts_forward(cx, pre, m.children.experts, hs, topv, topi, e, x.dtype)
  -- the router's logits die as the block returns
  nn.release(cx, { logits }, pre .. ": returns")
  return nn.view(cx, out, { b, s, h }, pre .. ".out")
end

-- The pieces another family's experts forward is made of (gpt_oss.lua).
M.index_op, M.gather_rows, M.grouped_mm = index_op, gather_rows, grouped_mm
M.experts_forward = experts_forward

-- The block of `cfg` for decoder layer prefix `pre`: cfg.experts, cfg.top_k,
-- cfg.moe_intermediate, cfg.norm_topk_prob, cfg.router_weights_to_logits_dtype; `classes` names
-- its router and experts classes.
function M.SparseMoeBlock(cfg, pre, classes)
  classes = classes or {}
  local m = mod.new(classes.block or "MixtralSparseMoeBlock", moe_forward,
                    { opname = pre .. ".mlp",
                      moe = { experts = cfg.experts, top_k = cfg.top_k, intermediate = cfg.moe_intermediate,
                              norm_topk = cfg.norm_topk_prob,
                              weights_to_logits_dtype = cfg.router_weights_to_logits_dtype } })
  local gate = mod.new(classes.router or "MixtralTopKRouter", router_forward,
                       { opname = pre .. ".mlp.gate", in_features = cfg.hidden, out_features = cfg.experts,
                         param_lora = { weight = true } })
  gate:declare("weight", { cfg.experts, cfg.hidden })
  m:add("gate", gate)
  -- param_lora: the parameters peft's target_parameters may wrap (strategies/lora.lua)
  local ex = mod.new(classes.experts or "MixtralExperts", nil,
                     { opname = pre .. ".mlp.experts", param_lora = { gate_up_proj = true, down_proj = true } })
  -- checkpoints hold them per expert (gate_proj / up_proj / down_proj, Mixtral's w1 / w3 / w2):
  -- transformers' weight conversion stacks them as it loads (strategies/expert_load.lua)
  ex:declare("gate_up_proj", { cfg.experts, 2 * cfg.moe_intermediate, cfg.hidden }, { load = "gate_up" })
  ex:declare("down_proj", { cfg.experts, cfg.hidden, cfg.moe_intermediate }, { load = "stack" })
  m:add("experts", ex)
  return m
end

-- The router and experts keys of a MoE family's config (H: models/hf.lua; c: the config being
-- made), with what is not modelled refused by name.
function M.config(hf, where, c, defaults)
  local H = require "models.hf"
  c.experts = H.int(hf, defaults.experts_key, defaults.experts, where)
  c.top_k = H.int(hf, "num_experts_per_tok", defaults.top_k, where)
  if c.top_k > c.experts then
    error(("%s: num_experts_per_tok (%d) exceeds the number of experts (%d)"):format(where, c.top_k, c.experts), 0)
  end
  c.moe_intermediate = defaults.intermediate_key and H.int(hf, defaults.intermediate_key, defaults.moe_intermediate, where)
                       or c.intermediate
  c.router_weights_to_logits_dtype = defaults.router_weights_to_logits_dtype
  c.norm_topk_prob = defaults.norm_topk_prob
  if defaults.norm_topk_key then c.norm_topk_prob = H.bool(hf, defaults.norm_topk_key, defaults.norm_topk_prob, where) end
  if H.bool(hf, "output_router_logits", false, where) then
    error(where .. ": output_router_logits = true (the load-balancing auxiliary loss over every layer's "
          .. "router logits) is not modelled", 0)
  end
  local jitter = hf.router_jitter_noise
  if jitter ~= nil and jitter ~= 0 then
    error(where .. ": router_jitter_noise (multiplicative noise on the hidden states in training) is not modelled", 0)
  end
  local impl = hf.experts_implementation or hf._experts_implementation
  if impl ~= nil and impl ~= "grouped_mm" then
    error(("%s: experts_implementation = %s is not modelled (vrsim models transformers' default, grouped_mm)")
          :format(where, tostring(impl)), 0)
  end
  return c
end

-- The keys M.config reads, for the family's check of unknown keys.
M.KEYS = { num_experts_per_tok = 1, output_router_logits = 1, router_aux_loss_coef = 1,
           router_jitter_noise = 1, experts_implementation = 1, _experts_implementation = 1 }

return M
