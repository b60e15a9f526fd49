-- tests/ops/test_rules.lua: unit tests of the rules outside the op library that decide memory:
-- the allocator's capacity and the cuBLAS workspace (lua/hw/memory.lua), DDP's gradient buckets
-- (lua/strategies/ddp.lua), and the op library's save and allocation rules not covered by
-- test_ops.lua (casts and autocast's weight cache, cat, copies, losses, the row-sum staging
-- buffer).
--
--   VRSIM=./vrsim sh tests/test_ops.sh     (runs every tests/ops/test_*.lua as a scenario: the
--                                           checks run as it loads; a failure is an error, exit 2)
local memory = require "hw.memory"
local gpus = require "hw.gpus"
local dp = require "strategies.dp"
local nn = require "vrsim.nn"

local checks, failures = 0, {}
local function check(ok, what)
  checks = checks + 1
  if not ok then failures[#failures + 1] = what end
end
-- f() must raise an error whose message contains `text`
local function raises(f, text, what)
  local ok, err = pcall(f)
  check(not ok and tostring(err):find(text, 1, true) ~= nil, what .. " (got: " .. tostring(err) .. ")")
end

local MiB, GiB = 2^20, 2^30

-- capacity: the card less the CUDA context, or a memory fraction of the real total --------------
do
  local total, ctx = 143155.9375 * MiB, 766.8125 * MiB -- an H200 as torch reports it, measured
  local cap, fs = memory.capacity(total, ctx, {})
  check(cap == total - ctx and fs == false, "capacity: total - context, no fraction")
  -- fit_h200.jsonl's pub-c05 caps: a fraction of the total, below total - context
  cap, fs = memory.capacity(total, ctx, { memory_fraction = 10600 * MiB / total })
  check(math.abs(cap - 10600 * MiB) <= 1 and fs == true, "capacity: the fraction's cap, fraction_set")
  -- a fraction above what the context leaves: the physical limit still holds
  cap = memory.capacity(total, ctx, { memory_fraction = 1 })
  check(cap == total - ctx, "capacity: fraction 1 is total - context")
  -- capacity_gib / _mib pretend a card of that size; the context still comes off it, and the
  -- fraction is taken of the real total
  cap = memory.capacity(total, ctx, { capacity_gib = 24 })
  check(cap == 24 * GiB - ctx, "capacity: capacity_gib less the context")
  cap = memory.capacity(total, ctx, { capacity_mib = 23521 })
  check(cap == 23521 * MiB - ctx, "capacity: capacity_mib less the context")
  cap = memory.capacity(total, ctx, { capacity_gib = 24, memory_fraction = 0.1 })
  check(cap == math.floor(0.1 * total), "capacity: the fraction of the real total under capacity_gib")
  raises(function() memory.capacity(total, ctx, { capacity_mib = 700 }) end,
         "leaves nothing for PyTorch after the CUDA context", "capacity: a card smaller than its context")
  raises(function() memory.capacity(total, ctx, { memory_fraction = 0 }) end,
         "memory_fraction must be in (0, 1]", "capacity: fraction 0")
  raises(function() memory.capacity(total, ctx, { memory_fraction = 1.5 }) end,
         "memory_fraction must be in (0, 1]", "capacity: fraction above 1")
  raises(function() memory.capacity(total, ctx, { memory_fraction = 1e-12 }) end,
         "memory_fraction = 1e-12 leaves no byte", "capacity: a fraction of no byte")
end

-- the cuBLAS workspace: 32 MiB from compute capability 9.0, 8519680 bytes before ---------------
do
  check(memory.cublas_workspace_bytes({ compute_capability = 9.0 }) == 33554432, "cuBLAS workspace on cc 9.0")
  check(memory.cublas_workspace_bytes({ compute_capability = 10.0 }) == 33554432, "cuBLAS workspace on cc 10.0")
  check(memory.cublas_workspace_bytes({ compute_capability = 8.9 }) == 8519680, "cuBLAS workspace on cc 8.9")
  check(memory.cublas_workspace_bytes({ compute_capability = 7.0 }) == 8519680, "cuBLAS workspace on cc 7.0")
  raises(function() memory.cublas_workspace_bytes({ name = "x" }) end, "has no compute_capability",
         "cuBLAS workspace without a compute capability")
  check(memory.cublas_workspace_bytes({ compute_capability = 12.0 }) == 33554432, "cuBLAS workspace on cc 12.0")
  -- PyTorch on ROCm: the hipBLASLt workspace, 76 MiB, whatever torch reports as the capability
  check(memory.cublas_workspace_bytes({ vendor = "amd", compute_capability = 9.4 }) == 76 * MiB,
        "hipBLASLt workspace on an AMD card")
  -- every catalog GPU has one (so none runs without its workspaces): 32 MiB on Hopper and
  -- Blackwell, 76 MiB (hipBLASLt) on the MI300X, 8519680 bytes on the others
  for k, g in pairs(gpus) do
    local ok, w = pcall(memory.cublas_workspace_bytes, g)
    local want = g.vendor == "amd" and 76 * MiB
      or (g.arch == "hopper" or g.arch == "blackwell") and 33554432 or 8519680
    check(ok and w == want, "cuBLAS workspace of catalog GPU " .. k)
  end
end

-- DDP's gradient buckets (c10d compute_bucket_assignment_by_size, Reducer::rebuild_buckets) -----
do
  -- parameters of n MiB each (bf16)
  local function p(name, mib, first_use)
    return { name = name, shape = { mib * MiB // 2 }, dtype = "bf16", first_use = first_use }
  end
  local function layout(buckets)
    local r = {}
    for i, b in ipairs(buckets) do
      local ns = {}
      for j, q in ipairs(b.params) do ns[j] = q.name end
      r[i] = ("%d:%s"):format(b.bytes // MiB, table.concat(ns, ","))
    end
    return table.concat(r, " | ")
  end
  -- a bucket closes once it reaches its cap, with the tensor that crossed it; the first cap is
  -- first_bucket_mb, every later one bucket_cap_mb
  local list = { p("a", 0.5 * 2, 0), p("b", 1, 0), p("c", 10, 0), p("d", 10, 0), p("e", 10, 0), p("f", 30, 0), p("g", 2, 0) }
  check(layout(dp.buckets_by_size(list, 1 * MiB, 25 * MiB)) == "1:a | 31:b,c,d,e | 30:f | 2:g",
        "buckets_by_size: first cap 1 MiB, then 25 MiB, the crossing tensor in the closing bucket: "
        .. layout(dp.buckets_by_size(list, 1 * MiB, 25 * MiB)))
  check(#dp.buckets_by_size({}, MiB, MiB) == 0, "buckets_by_size: no parameters, no bucket")
  -- after the first iteration: in the order gradients became ready, the reverse of first use in
  -- forward; a parameter never used goes last
  local trainable = { p("embed", 2, 1), p("l0", 2, 2), p("l1", 2, 3), p("unused", 2, nil), p("head", 2, 4) }
  local s = { opts = { first_bucket_mb = 1, bucket_cap_mb = 25 } }
  check(layout(dp.ddp_buckets(s, trainable)) == "2:head | 8:l1,l0,embed,unused",
        "ddp_buckets: ready order (reverse first use, unused last): " .. layout(dp.ddp_buckets(s, trainable)))
end

-- op library: casts, autocast's weight cache, cat, copies, the loss, row-sum buffers ---------------
local recorder = require "recorder" -- tests/ops/recorder.lua
local function last_op(G) return G.ops[#G.ops] end
do
  local G = recorder()
  local cx = nn.context(G, { autocast = "bf16" })
  local x = nn.new_tensor(cx, "x", { 4, 8 }, "fp32", true)
  -- x.to(dtype): the same tensor when the dtype matches, else a cast whose backward makes the
  -- input's gradient in the input's dtype and keeps nothing
  check(nn.to(cx, x, "fp32") == x and #G.ops == 0, "to: no op for the same dtype")
  local y = nn.to(cx, x, "bf16", "x_bf16")
  local o = last_op(G)
  check(y.dtype == "bf16" and o.kind == "cast_down" and o.bwd_kind == "cast_up", "cast down: its kinds")
  check(o.bytes == 4 * 8 * 4 + 4 * 8 * 2 and o.bwd_bytes == o.bytes, "cast: bytes read and written, both ways")
  check(o.grads[1].dtype == "fp32" and (o.saves == nil or #o.saves == 0), "cast: fp32 gradient, nothing kept")
  -- autocast casts an fp32 weight once per step and reuses the cast
  local w = nn.param(cx, "w", { 8, 8 }, "fp32", true)
  local n0 = #G.ops
  local w1, w2 = nn.autocast_weight(cx, w), nn.autocast_weight(cx, w)
  check(w1 == w2 and w1.dtype == "bf16" and #G.ops == n0 + 1, "autocast: one cached cast of a weight")
  check(nn.autocast_weight(cx, y) == y, "autocast: a bf16 tensor is not cast")
  local z = nn.autocast(cx, "layer_norm", { y }, 1, { names = { "y_fp32" } })[1]
  check(z.dtype == "fp32", "autocast fp32 op: its bf16 input cast up")
end
do
  local G = recorder()
  local cx = nn.context(G)
  local a = nn.new_tensor(cx, "a", { 2, 3 }, "bf16", true)
  local b = nn.new_tensor(cx, "b", { 2, 5 }, "bf16", true)
  local c = nn.new_tensor(cx, "c", { 2, 5 }, "fp32", true)
  local t = nn.cat(cx, "cat", { a, b }, 2)
  local o = last_op(G)
  check(t.shape[2] == 8 and t.dtype == "bf16", "cat: the shapes add along dim")
  check(o.grads[1].pass == 1 and o.grads[2].pass == 1 and (o.saves == nil or #o.saves == 0),
        "cat: gradients are views of the output's, nothing kept")
  local u = nn.cat(cx, "cat2", { a, c }, 2)
  o = last_op(G)
  check(u.dtype == "fp32" and o.grads[1].bytes == 2 * 3 * 2 and o.grads[2].pass == 1,
        "cat of mixed dtypes: promoted; the cast input's gradient is a new buffer of its dtype")
  nn.copy(cx, "cont", a)
  check(last_op(G).grads[1].pass == 1, "copy: the gradient flows back as a view")
  nn.copy(cx, "reshape", a, { 6 }, { grad = "new" })
  check(last_op(G).grads[1].bytes == 2 * 3 * 2, "copy with grad=new: a new gradient buffer")
  nn.div_scalar(cx, "div", a)
  o = last_op(G)
  check((o.saves == nil or #o.saves == 0) and o.grads[1].bytes == 2 * 3 * 2, "div by a scalar keeps nothing")
  local img = nn.new_tensor(cx, "img", { 1, 4, 8, 8 }, "bf16", true)
  local up = nn.upsample_nearest2x(cx, "up", img)
  check(up.shape[3] == 16 and up.shape[4] == 16 and (last_op(G).saves == nil or #last_op(G).saves == 0),
        "nearest upsampling: twice the size, nothing kept")
end
do
  local G = recorder()
  local cx = nn.context(G)
  local pred = nn.new_tensor(cx, "pred", { 2, 4, 8, 8 }, "bf16", true)
  local target = nn.new_tensor(cx, "target", { 2, 4, 8, 8 }, "bf16", false)
  local loss = nn.mse_loss(cx, "mse", pred, target)
  local o = last_op(G)
  local n = 2 * 4 * 8 * 8
  check(#loss.shape == 0 and loss.dtype == "fp32", "mse_loss: an fp32 scalar")
  check(#o.saves == 2 and o.workspace[1] == n * 4, "mse_loss keeps both fp32 inputs, with its elementwise buffer")
  local held = G.tensors[o.outputs[1]]
  check(held.persistent and held.bytes == n * 4, "mse_loss: the step buffer of the loss's size lives on")
  check(o.grads[2] == "none", "mse_loss: no gradient for the target")
end
do
  -- F.cross_entropy: log_softmax keeps its fp32 output; nll_loss keeps the labels and the
  -- log-probabilities; its backward fills a gradient of the logits' size (two kernels)
  local G = recorder()
  local cx = nn.context(G)
  local x = nn.new_tensor(cx, "logits", { 2, 16, 32 }, "fp32", true)
  local labels = nn.new_tensor(cx, "labels", { 2, 16 }, "int64", false)
  local loss = nn.cross_entropy(cx, "c1.", x, labels, { keep_input = true })
  local lsm, nll = G.ops[#G.ops - 1], G.ops[#G.ops]
  local n = 2 * 16 * 32
  check(lsm.name == "c1.log_softmax" and nll.name == "c1.nll_loss", "cross_entropy: log_softmax, then nll_loss")
  check(#lsm.saves == 1 and lsm.saves[1] == lsm.outputs[1] and lsm.bwd_bytes == 3 * n * 4, "cross_entropy: log_softmax keeps its output, three passes back")
  check(lsm.frees and #lsm.frees == 0, "cross_entropy: keep_input drops no reference of the logits")
  check(#nll.saves == 3 and nll.saves[1] == labels.id and nll.saves[2] == lsm.outputs[1]
        and nll.saves[3] == nll.outputs[2] and nll.bytes == 2 * 16 * (4 + 8),
        "cross_entropy: nll_loss keeps the labels, the log-probabilities and total_weight")
  check(nll.bwd_bytes == n * 4 and nll.bwd_kernels == 2, "cross_entropy: nll_loss's backward fills a logits-sized gradient")
  check(#loss.shape == 0 and loss.dtype == "fp32", "cross_entropy: an fp32 scalar")
end
do
  -- ATen's global reduce staging buffer, as the traces show it on an H200 (132 SMs)
  local cx = nn.context(recorder())
  cx.gpu = gpus.h200
  local function sum_bytes(m, c)
    local t = 0
    for _, b in ipairs(nn.row_sum_buffers(cx, m, c) or {}) do t = t + b end
    return t
  end
  check(sum_bytes(4096, 640) == 20 * MiB + 20, "row-sum buffers of (4096, 640): 20 MiB + 20 B")
  check(sum_bytes(4096, 4096) == 128 * MiB + 128, "row-sum buffers of (4096, 4096): 128 MiB + 128 B")
  -- the blocks a reduction may spread over follow the card's threads per SM (maxThreadsPerMultiProcessor):
  -- 1024 on a T4 (cc 7.5) against 2048 at cc 7.0 (40 SMs each), 1536 on GeForce
  -- Blackwell (cc 12.0) against 2048 on sm100
  local core = require "vrsim.core"
  local function first(m, c, sms, cc) return (core.row_sum_buffers(m, c, sms, cc) or {})[1] end
  check(first(4096, 4096, 40, 7.5) == 20 * MiB and first(4096, 4096, 40, 7.0) == 40 * MiB,
        "row-sum buffer of (4096, 4096) on 40 SMs: half the blocks at 1024 threads per SM (cc 7.5)")
  check(first(8192, 4096, 170, 12.0) == 128 * MiB and first(8192, 4096, 170, 10.0) == 170 * MiB,
        "row-sum buffer of (8192, 4096) on 170 SMs: fewer blocks at 1536 threads per SM (cc 12.0)")
end
do
  -- G:op{...} reads a plain table's fields in one pass and a table with a metatable by name
  -- (its __index's fields too): both give the op, and a bad field is an error naming it
  local G = require("vrsim.core").new_graph()
  local x = G:tensorv("x", 64, 16, "fp32")
  local y = G:tensorv("y", 64, 16, "fp32")
  local spec = { name = "plain", kind = "elementwise", phase = "fwd", inputs = { x }, outputs = { y }, bytes = 128 }
  G:op(spec)
  check(G:num_ops() == 1, "G:op{...}: a plain table gives an op")
  G:op(setmetatable({ name = "inherits" }, { __index = spec }))
  check(G:num_ops() == 2, "G:op{...}: a table with a metatable gives an op")
  raises(function() G:op { name = "bad", inputs = { x }, outputs = {}, flops = "many" } end,
         "field 'flops' must be a number", "G:op{...}: a bad field of a plain table names it")
  raises(function() G:op(setmetatable({ name = "bad" }, { __index = { inputs = { x }, flops = "many" } })) end,
         "field 'flops' must be a number", "G:op{...}: a bad field under __index names it")
  raises(function() G:op { name = "hole", inputs = { x, nil, y }, outputs = {} } end,
         "inputs[2] is nil, and inputs[3] is not", "G:op{...}: a hole within a tensor list is an error")
  raises(function() G:op { name = "bad grads", inputs = { x }, outputs = { y }, grads = { "nwe" } } end,
         "grads[1] must be", "G:op{...}: a gradient that is none of the forms is an error")
end
do
  -- core.modules_alike reads each module field's role from the roles table the Lua side gives:
  -- a field it names "layer" holds the two layers' numbers; one it does not name is a value
  local core = require "vrsim.core"
  local C = {}
  local function m(v) return { cls = C, hooks = {}, order = {}, decls = {}, children = {}, unit = v } end
  local lists = { hooks = "skip", order = "skip", decls = "skip", children = "skip" }
  local roles = { unit = "layer" }
  for k, v in pairs(lists) do roles[k] = v end
  check(core.modules_alike(m(3), m(4), 3, 4, roles), "modules_alike: a field of role layer holds la and lb")
  check(not core.modules_alike(m(3), m(4), 3, 4, lists), "modules_alike: a field of no role is compared as a value")
  raises(function() core.modules_alike(m(3), m(4), 3, 4, { unit = "layr" }) end,
         "field 'unit' has role 'layr'", "modules_alike: an unknown role is an error naming the field")
end
do
  -- every field of G:op{...} (vrsim.core.op_fields, from sim/op_fields.h) reaches the op: each is
  -- given a value other than its default and G:op_fields reads the same back; a field added to
  -- the record needs a value here
  local core = require "vrsim.core"
  local G = core.new_graph()
  local x = G:tensorv("x", 64, 16, "bf16", "activation", true)
  local w = G:tensorv("w", 64, 16, "bf16", "param", true, true, true)
  local y = G:tensorv("y", 64, 16, "bf16", "activation", true)
  G:op { name = "first", inputs = {}, outputs = {}, phase = "build" }
  local every = {
    name = "every field", kind = "mm", bwd_kind = "copy", phase = "fwd", inputs = { x, w },
    outputs = { y }, saves = { x }, frees = { x }, workspace = { 256 },
    grads = { { bytes = 64, dtype = "fp32", view = true }, "none" }, grad_order = { 2, 1 },
    workspace_first = true, bwd_workspace = { 512, 128 }, bwd_rowsum = { 4, 8 }, bwd_workspace_first = true, bwd_workspace_at = { 1, -2 }, dtype = "bf16",
    region = 3, ckpt_args = true, no_grad = true, flops = 1e6, bytes = 4096, bwd_flops = 2e6,
    bwd_bytes = 8192, kernels = 2, bwd_kernels = 3, host_us = 1.5, dispatch_us = 7,
    dispatch_ckpt_us = 2, bwd_dispatch_us = 9, bwd_dispatch_ckpt_us = 4, world = 8, per_node = 2, layer = 5,
    stream = 1, wait_stream = 5, slot = 2, slot_free_after = true, hook = 4, before_op = 0, grads_of = { w },
    free_grads = true, remap_of = { x }, drop_persistent = true, once = true, at_step = 2,
    from_step = 3, step_start = true, gmm_experts = 8, gmm_rows = 512, gmm_n = 1536, gmm_k = 2048,
    gmm_nn = true, gmm_grads = 3, moe_index = 5, moe_size = 4096, moe_dup = true, device_us = 12.5,
    sync = true, full_recompute = true, rate_at = 4, bwd_rate_at = 3.5 }
  local function same(a, b)
    if type(a) ~= "table" or type(b) ~= "table" then return a == b end
    for k, v in pairs(a) do if not same(v, b[k]) then return false end end
    for k in pairs(b) do if a[k] == nil then return false end end
    return true
  end
  -- bwd_workspace_at names one place per backward workspace, each a gradient's position
  raises(function() G:op { name = "misplaced", phase = "fwd", inputs = { x }, outputs = {}, bwd_workspace = { 8, 8 },
                           bwd_workspace_at = { 1 } } end, "bwd_workspace_at needs one place per backward workspace",
         "G:op{...}: bwd_workspace_at shorter than bwd_workspace is refused")
  raises(function() G:op { name = "misplaced", phase = "fwd", inputs = { x }, outputs = {}, bwd_workspace = { 8 },
                           bwd_workspace_at = { -2 } } end, "bwd_workspace_at needs one place per backward workspace",
         "G:op{...}: bwd_workspace_at past the op's inputs is refused")
  -- a kind names a cost curve: the longest vrsim makes (47 characters) reads back whole, and
  -- one past the buffer is refused, never cut short into another curve's name
  local long = "attention_mem_efficient_masked_unaligned_bwd"
  local k = G:op { name = "long kind", kind = long, phase = "fwd", inputs = {}, outputs = {} }
  check(G:op_fields(k).kind == long, "G:op{...}: a 44-character kind reads back whole")
  raises(function() G:op { name = "too long", kind = ("k"):rep(48), phase = "fwd", inputs = {}, outputs = {} } end,
         "op 'too long': kind longer than 47 characters", "G:op{...}: a kind longer than its buffer is refused")
  raises(function() G:op { name = "too long", bwd_kind = ("k"):rep(48), phase = "fwd", inputs = {}, outputs = {} } end,
         "op 'too long': bwd_kind longer than 47 characters", "G:op{...}: a bwd_kind longer than its buffer is refused")
  local i = G:op(every)
  local got = G:op_fields(i)
  for _, k in ipairs(core.op_fields) do
    check(every[k] ~= nil, "G:op{...}: the test gives field '" .. k .. "' a value")
    check(same(every[k], got[k]), "G:op{...}: field '" .. k .. "' reads back as given")
  end
end

if #failures > 0 then
  error(("rules: %d of %d checks failed:\n  %s"):format(#failures, checks, table.concat(failures, "\n  ")), 0)
end
print(("rules: %d checks passed"):format(checks))

return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
