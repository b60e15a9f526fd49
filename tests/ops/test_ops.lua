-- tests/ops/test_ops.lua: unit tests of the op library (lua/vrsim/nn.lua, lua/vrsim/ops/*.lua):
-- what each op allocates, what its backward node keeps, its launches and casts, checked on the
-- specs it hands the core (a recording graph stands in for vrsim.core's).
--
--   VRSIM=./vrsim sh tests/test_ops.sh     (runs this file as a scenario: the checks run as it
--                                           loads; a failure is an error, exit 2)
local nn = require "vrsim.nn"

local checks, failures = 0, {}
local function check(ok, what)
  checks = checks + 1
  if not ok then failures[#failures + 1] = what end
end

-- A graph that records what the op library declares (tests/ops/recorder.lua).
local recorder = require "recorder"

local function context(opts)
  local G = recorder()
  local cx = nn.context(G)
  for k, v in pairs(opts or {}) do cx[k] = v end
  return cx, G
end

local function names(G, ids)
  local r = {}
  for i, id in ipairs(ids or {}) do r[i] = G.tensors[id].name end
  return table.concat(r, ",")
end

local function op_named(G, name)
  for _, o in ipairs(G.ops) do if o.name == name then return o end end
  return nil
end

local function param(cx, name, shape, dtype, trainable)
  return nn.param(cx, name, shape, dtype or "bf16", trainable)
end

local function act(cx, name, shape, dtype, rg)
  return nn.new_tensor(cx, name, shape, dtype or "bf16", rg)
end

-- ConvolutionBackward0 keeps input and weight whenever the node exists ------------------------
do
  local cx, G = context()
  local w, b = param(cx, "w", { 8, 4, 3, 3 }, "bf16", false), param(cx, "b", { 8 }, "bf16", false)
  local x = act(cx, "x", { 1, 4, 16, 16 }, "bf16", true)
  nn.conv2d(cx, "frozen_conv", x, w, b)
  local o = op_named(G, "frozen_conv")
  check(o and names(G, o.saves) == "x,w", "frozen conv on an input needing grad keeps input and weight (got "
        .. (o and names(G, o.saves) or "no op") .. ")")
  check(op_named(G, "frozen_conv.weight_grad") == nil, "frozen conv has no weight-side op")
end
do
  local cx, G = context()
  local w, b = param(cx, "w", { 8, 4, 3, 3 }, "bf16", true), param(cx, "b", { 8 }, "bf16", true)
  local x = act(cx, "x", { 1, 4, 16, 16 }, "bf16", true)
  nn.conv2d(cx, "conv", x, w, b)
  check(names(G, op_named(G, "conv.weight_grad").saves) == "x", "trained conv: the weight side keeps the input")
  check(names(G, op_named(G, "conv").saves) == "w", "trained conv: the convolution keeps the weight")
  check(op_named(G, "conv.bias_grad").bwd_kind == "reduce_rows", "conv bias gradient is a row reduction")
  -- created in reverse of their backward order: bias side, weight side, then the convolution
  check(G.ops[1].name == "conv.bias_grad" and G.ops[2].name == "conv.weight_grad" and G.ops[3].name == "conv",
        "conv ops in the order bias side, weight side, convolution")
end
do
  local cx, G = context()
  local w, b = param(cx, "w", { 8, 4, 3, 3 }, "bf16", false), param(cx, "b", { 8 }, "bf16", false)
  nn.conv2d(cx, "nograd_conv", act(cx, "x", { 1, 4, 16, 16 }, "bf16", false), w, b)
  check(op_named(G, "nograd_conv").saves == nil, "a conv with nothing needing grad records no backward node")
end
do
  -- measured workspaces (H200 table) and the estimate for shapes outside it
  local cx, G = context()
  local w, b = param(cx, "w", { 320, 320, 3, 3 }, "bf16", true), param(cx, "b", { 320 }, "bf16", true)
  nn.conv2d(cx, "ws_conv", act(cx, "x", { 1, 320, 64, 64 }, "bf16", true), w, b)
  local o = op_named(G, "ws_conv")
  check(o.workspace and o.workspace[1] == 7086096 and o.bwd_workspace[1] == 7086096,
        "conv workspace from ops/conv_ws_h200.lua (320,320,3,1,64,64,bf16,1)")
  local e = nn.conv_ws_estimate(320, 320, 3, 1, 128, 128, "bf16", 4)
  check(e[1] and e[1] > 0, "conv workspace estimated for a shape outside the table")
end

do
  -- cuDNN's layout transforms (measure_conv_transforms.py): a 3x3 bf16 convolution moves its
  -- input, output and filter once each way in forward, the same in each backward GEMM; a 1x1
  -- convolution and an fp32 one none
  local cx, G = context()
  local w, b = param(cx, "w", { 8, 4, 3, 3 }, "bf16", true), param(cx, "b", { 8 }, "bf16", true)
  nn.conv2d(cx, "lay", act(cx, "x", { 2, 4, 16, 16 }, "bf16", true), w, b)
  local xb, yb, wb = 2 * 4 * 16 * 16 * 2, 2 * 8 * 16 * 16 * 2, 8 * 4 * 9 * 2
  local l, lw = op_named(G, "lay").layout, op_named(G, "lay.weight_grad").layout
  check(l and l[1] == 2 * (xb + yb) and l[2] == 2 * wb and l[3] == l[1] and l[4] == l[2],
        "3x3 bf16 conv: forward and data-gradient layout bytes")
  check(lw and lw[1] == 0 and lw[2] == 0 and lw[3] == 2 * (xb + yb) and lw[4] == 2 * wb,
        "3x3 bf16 conv: the filter gradient's layout bytes on the weight side's backward")
  local cx1, G1 = context()
  nn.conv2d(cx1, "one", act(cx1, "x", { 1, 4, 16, 16 }, "bf16", true),
            param(cx1, "w", { 8, 4, 1, 1 }, "bf16", true), nil)
  nn.conv2d(cx1, "f32", act(cx1, "x2", { 1, 4, 16, 16 }, "fp32", true),
            param(cx1, "w2", { 8, 4, 3, 3 }, "fp32", true), nil)
  check(op_named(G1, "one").layout == nil and op_named(G1, "f32").layout == nil,
        "1x1 and fp32 convs: no layout transforms")
end

do
  -- GroupNorm's statistics kernel: one block per (sample, group) row, the row in bf16 bytes
  local cx, G = context()
  local x = act(cx, "x", { 2, 64, 8, 8 }, "bf16", true)
  nn.group_norm(cx, "gn", x, param(cx, "gw", { 64 }, "bf16", true), param(cx, "gb", { 64 }, "bf16", true), 32)
  local r = op_named(G, "gn").rowwise
  check(r and r[1] == 64 and r[2] == 2 * 8 * 8 * 2, "group norm: 2 x 32 rows of 2 channels x 64 pixels in bf16")
  check(op_named(G, "gn").kind == "norm" and op_named(G, "gn").bwd_kind == "norm_bwd",
        "group norm: forward and backward priced by the norm classes of their direction")
end

-- F.linear: a frozen Linear keeps only what the input gradient needs -------------------------
do
  local cx, G = context()
  local w = param(cx, "w", { 16, 8 }, "bf16", false)
  local x = act(cx, "x", { 2, 8 }, "bf16", true)
  nn.linear(cx, "frozen_lin", x, w)
  local o = op_named(G, "frozen_lin")
  check(names(G, o.saves) == "w", "frozen Linear keeps the weight only")
  check(o.bwd_flops == 2 * 2 * 16 * 8, "frozen Linear's backward is one GEMM")
end
do
  -- host classes: a bias-free Linear with a frozen weight and an input that needs a gradient is
  -- linear_frozen (one GEMM, no AccumulateGrad in its backward node); trainable, linear_nobias
  local classes = { linear_nobias = { fwd = 1, bwd = 2, ckpt_fwd = 3, ckpt_bwd = 4 },
                    linear_frozen = { fwd = 5, bwd = 6, ckpt_fwd = 7, ckpt_bwd = 8 } }
  local cx, G = context({ host_classes = classes })
  local x = act(cx, "x", { 2, 8 }, "bf16", true)
  nn.linear(cx, "frozen", x, param(cx, "wf", { 16, 8 }, "bf16", false), nil, { keep_input = true })
  nn.linear(cx, "trained", x, param(cx, "wt", { 16, 8 }, "bf16", true), nil, { keep_input = true })
  nn.linear(cx, "no_grad_in", act(cx, "x0", { 2, 8 }, "bf16", false), param(cx, "wn", { 16, 8 }, "bf16", false))
  local f, t, n = op_named(G, "frozen"), op_named(G, "trained"), op_named(G, "no_grad_in")
  check(f.dispatch_us == 5 and f.bwd_dispatch_us == 6 and f.dispatch_ckpt_us == 7 and f.bwd_dispatch_ckpt_us == 8,
        "frozen bias-free Linear: host class linear_frozen, both directions")
  check(t.dispatch_us == 1 and t.bwd_dispatch_us == 2, "trainable bias-free Linear: linear_nobias")
  check(n.dispatch_us == 1, "a Linear with nothing to differentiate keeps linear_nobias")
  -- with a bias: frozen weight and bias, an input that needs a gradient (SD3's and Flux's LoRA
  -- base layers, Qwen2's q/k/v): AddmmBackward0 computes mat1's gradient alone, one GEMM, no
  -- bias reduction, no AccumulateGrad: linear_frozen; a trainable one keeps linear
  classes.linear = { fwd = 9, bwd = 10, ckpt_fwd = 11, ckpt_bwd = 12 }
  nn.linear(cx, "frozen_b", x, param(cx, "wfb", { 16, 8 }, "bf16", false), param(cx, "bfb", { 16 }, "bf16", false),
            { keep_input = true })
  nn.linear(cx, "trained_b", x, param(cx, "wtb", { 16, 8 }, "bf16", true), param(cx, "btb", { 16 }, "bf16", true),
            { keep_input = true })
  local fb, tb = op_named(G, "frozen_b"), op_named(G, "trained_b")
  check(fb.dispatch_us == 5 and fb.bwd_dispatch_us == 6 and fb.dispatch_ckpt_us == 7 and fb.bwd_dispatch_ckpt_us == 8,
        "frozen Linear with a bias: host class linear_frozen, both directions")
  check(op_named(G, "frozen_b.bias_grad") == nil and fb.bwd_flops == 2 * 2 * 16 * 8,
        "... no bias gradient and one GEMM in its backward")
  check(tb.dispatch_us == 9 and tb.bwd_dispatch_us == 10, "trainable Linear with a bias: linear")
  -- a LoRA adapter's GEMMs say so (Op.lora_rank): opts.lora on a bias-free Linear
  nn.linear(cx, "ad_A", x, param(cx, "A", { 16, 8 }, "fp32", true), nil, { keep_input = true, lora = { 16, "A" } })
  local a = op_named(G, "ad_A")
  check(a.lora and a.lora[1] == 16 and a.lora[2] == "A", "an adapter's GEMM is marked with its rank and matrix")
  check(f.lora == nil, "... and no other Linear is")
end
do
  local cx, G = context()
  local w = param(cx, "w", { 16, 8 }, "bf16", true)
  nn.linear(cx, "first_lin", act(cx, "x", { 2, 8 }, "bf16", false), w)
  local o = op_named(G, "first_lin")
  check(names(G, o.saves) == "x", "Linear whose input needs no grad keeps the input only")
  check(o.bwd_flops == 2 * 2 * 16 * 8, "... and its backward is one GEMM")
end
do
  local cx, G = context({ gpu = { sm_count = 132, compute_capability = 9.0 } })
  local w, b = param(cx, "w", { 640, 640 }, "bf16", true), param(cx, "b", { 640 }, "bf16", true)
  nn.linear(cx, "lin_b", act(cx, "x", { 4096, 640 }, "bf16", true), w, b)
  local bs = op_named(G, "lin_b.bias_grad")
  check(bs and bs.bwd_rowsum and bs.bwd_rowsum[1] == 4096 and bs.bwd_rowsum[2] == 640,
        "bias gradient of (4096, 640): its backward is a row sum of the (4096, 640) output gradient")
  local staged = nn.row_sum_buffers(cx, bs.bwd_rowsum[1], bs.bwd_rowsum[2])
  check(staged and staged[1] == 20971520 and staged[2] == 20,
        "... which stages 20 MiB + 20 B on 132 SMs (ATen's global reduce)")
  check(op_named(G, "lin_b").grad_order[1] == 1, "addmm: grad_input first")
end
do
  -- autocast: fp32 input cast per call, fp32 weight cast once per forward (the cache)
  local cx, G = context({ autocast = "bf16" })
  local w = param(cx, "w", { 16, 8 }, "fp32", true)
  local y1 = nn.linear(cx, "ac1", act(cx, "x1", { 2, 8 }, "fp32", true), w)
  nn.linear(cx, "ac2", act(cx, "x2", { 2, 8 }, "fp32", true), w)
  local casts = 0
  for _, o in ipairs(G.ops) do if o.name == "w.autocast" then casts = casts + 1 end end
  check(casts == 1, "autocast casts a weight once per forward (got " .. casts .. ")")
  check(op_named(G, "ac1.input_cast") ~= nil and y1.dtype == "bf16", "autocast Linear runs in bf16")
end

-- norms ------------------------------------------------------------------------------------
do
  local cx, G = context()
  local w, b = param(cx, "gw", { 64 }, "bf16", false), param(cx, "gb", { 64 }, "bf16", false)
  local y = nn.group_norm(cx, "gn", act(cx, "x", { 2, 64, 8, 8 }, "bf16", true), w, b, 32)
  local o = op_named(G, "gn")
  check(names(G, o.saves) == "x,gn.mean,gn.rstd,gw", "NativeGroupNormBackward0 keeps input, mean, rstd, weight")
  check(#o.workspace == 2 and o.workspace[1] == 2 * 64 * 4, "group_norm's two fp32 (N, C) temporaries")
  check(#o.bwd_workspace == 5, "group_norm's backward temporaries")
  check(y.rg == true, "a frozen norm on an input needing grad is a node")
end
do
  local cx, G = context({ autocast = "bf16" })
  local w, b = param(cx, "lw", { 64 }, "fp32", true), param(cx, "lb", { 64 }, "fp32", true)
  local y = nn.layer_norm(cx, "ln", act(cx, "x", { 2, 10, 64 }, "bf16", true), w, b)
  check(op_named(G, "ln.input_cast") ~= nil and y.dtype == "fp32", "layer_norm runs in fp32 under autocast")
  check(names(G, op_named(G, "ln").saves) == "ln.input_cast,ln.mean,ln.rstd,lw,lb",
        "NativeLayerNormBackward0 keeps input, mean, rstd, weight, bias")
end

-- scaled dot-product attention ---------------------------------------------------------------
local function qkv(cx, b, h, s, d, dtype)
  return act(cx, "q", { b, h, s, d }, dtype, true), act(cx, "k", { b, h, s, d }, dtype, true),
         act(cx, "v", { b, h, s, d }, dtype, true)
end
do
  local cx, G = context({ arch = "hopper" })
  local q, k, v = qkv(cx, 1, 4, 256, 64, "bf16")
  nn.sdpa(cx, "att", q, k, v)
  local o = op_named(G, "att.sdpa_cudnn")
  check(o ~= nil, "Hopper bf16 SDPA is cuDNN attention")
  check(o and names(G, o.saves) == "k,q,v,att.softmax_stats,att.attn_out,att.philox_seed,att.philox_offset",
        "cuDNN attention keeps k, q, v, its statistics, output and philox state")
  check(o and o.workspace[1] == 256 and o.bwd_workspace[1] == 1 * 4 * 256 * 64 * 4 + 4 * 256 * 4 + 256,
        "cuDNN attention's workspaces")
  check(o and o.kernels == nil, "launch counts off unless the model's profile measured them")
end
do
  local cx, G = context({ arch = "hopper", measured_launches = true })
  local q, k, v = qkv(cx, 1, 4, 256, 64, "bf16")
  nn.sdpa(cx, "att", q, k, v, { causal = true })
  local o = op_named(G, "att.sdpa_cudnn")
  check(o.kernels == 2 and o.bwd_kernels == 4, "measured launches: cuDNN attention 2 forward, 4 backward")
  check(o.flops == 4 * 4 * 256 * 256 * 64 / 2, "causal attention computes half the scores")
end
do
  local cx, G = context({ arch = "hopper" })
  local q, k, v = qkv(cx, 1, 4, 256, 64, "fp32")
  nn.sdpa(cx, "att", q, k, v)
  local o = op_named(G, "att.sdpa_mem_efficient")
  check(o ~= nil, "fp32 SDPA is the memory-efficient kernel")
  local lse = G.tensors[o.outputs[2]]
  check(lse.bytes == 1 * 4 * 256 * 4, "its logsumexp is padded to 32 rows")
end
do
  local cx, G = context({ arch = "ampere" })
  local q, k, v = qkv(cx, 1, 4, 100, 64, "bf16")
  local mask = act(cx, "mask", { 1, 1, 100, 100 }, "bool", false)
  nn.sdpa(cx, "att", q, k, v, { mask = mask })
  local o = op_named(G, "att.sdpa_mem_efficient")
  check(op_named(G, "att.attn_mask_to_bias") ~= nil, "a boolean mask becomes an additive bias")
  check(o and names(G, o.saves) == "q,k,v,att.attn_bias,att.attn_out,att.logsumexp,att.philox",
        "a masked call leaves flash for memory-efficient attention, which keeps the bias")
  check(o and names(G, o.frees) == "att.attn_bias", "the masked call drops its bias reference")
end

do
  -- which fused kernel SDPA takes by architecture (sdp_utils.cpp): flash and cuDNN need sm80 and
  -- above, so a V100 (Volta) runs the memory-efficient kernel; cx.arch is nn.arch_class's class
  check(nn.sdpa_backend(nn.arch_class("volta"), "bf16") == "mem_efficient", "Volta: memory-efficient attention")
  check(nn.sdpa_backend(nn.arch_class("ampere"), "bf16") == "flash", "Ampere: flash attention")
  check(nn.sdpa_backend(nn.arch_class("ada"), "fp16") == "flash", "Ada: flash attention")
  check(nn.sdpa_backend(nn.arch_class("hopper"), "bf16") == "cudnn", "Hopper: cuDNN attention")
  check(nn.arch_class("ampere") == nn.arch_class("ada"), "Ampere and Ada share a class (one graph)")
  local ok, msg = pcall(nn.sdpa_backend, nn.arch_class("volta"), "bf16", "flash")
  check(not ok and tostring(msg):match("compute capability 8%.0"), "forced flash attention on a V100 is an error")
  local cx, G = context({ arch = nn.arch_class("volta") })
  local q, k, v = qkv(cx, 1, 4, 128, 64, "bf16")
  nn.sdpa(cx, "att", q, k, v, { causal = true })
  check(op_named(G, "att.sdpa_mem_efficient") ~= nil, "a V100's SDPA op is the memory-efficient kernel's")
end

do
  -- queries and keys of one head dim, values of another (multi-head latent attention: 192 / 128):
  -- flash wants one head dim (check_head_dim_size_flash), cuDNN takes 192 / 128 on the Hopper
  -- class (check_cudnn_tensor_shapes), the memory-efficient kernel q's = k's and 8-aligned
  local mla = { qk = 192, v = 128 }
  check(nn.sdpa_backend(nn.arch_class("hopper"), "bf16", nil, mla) == "cudnn", "Hopper, 192 / 128: cuDNN attention")
  check(nn.sdpa_backend(nn.arch_class("ampere"), "bf16", nil, mla) == "mem_efficient",
        "Ampere, 192 / 128: flash refuses two head dims, the memory-efficient kernel runs")
  check(nn.sdpa_backend(nn.arch_class("hopper"), "fp32", nil, mla) == "mem_efficient", "fp32, 192 / 128: memory-efficient")
  local ok, msg = pcall(nn.sdpa_backend, nn.arch_class("hopper"), "bf16", "flash", mla)
  check(not ok and tostring(msg):match("one head dim"), "forced flash on 192 / 128 is an error")
  ok, msg = pcall(nn.sdpa_backend, nn.arch_class("ampere"), "bf16", "cudnn", mla)
  check(not ok and tostring(msg):match("cuDNN attention with a query/key head dim of 192"),
        "forced cuDNN on 192 / 128 off the Hopper class is an error")
  ok, msg = pcall(nn.sdpa_backend, nn.arch_class("hopper"), "bf16", nil, { qk = 256, v = 192 })
  check(not ok and tostring(msg):match("not modelled"), "Hopper class, 256 / 192 (sm90 and sm100 differ): refused")
  local function two_dims(arch)
    local cx, G = context({ arch = arch })
    local q, k = act(cx, "q", { 1, 4, 256, 192 }, "bf16", true), act(cx, "k", { 1, 4, 256, 192 }, "bf16", true)
    local v = act(cx, "v", { 1, 4, 256, 128 }, "bf16", true)
    local out = nn.sdpa(cx, "att", q, k, v, { causal = true })
    return G, out
  end
  local G, out = two_dims("hopper")
  local o = op_named(G, "att.sdpa_cudnn")
  check(o and table.concat(out.shape, ",") == "1,4,256,128", "the output has the values' head dim")
  check(o and o.bwd_workspace[1] == 4 * 256 * 192 * 4 + 4 * 256 * 4 + 256, "cuDNN's fp32 dq accumulator is q's size")
  check(o and o.flops == 2 * 4 * 256 * 256 * (192 + 128) / 2, "scores at q's head dim, output at v's")
  G, out = two_dims("other")
  o = op_named(G, "att.sdpa_mem_efficient")
  check(o and out.shape[4] == 128 and o.workspace and o.workspace[1] == 256 * 4 * 128 * 4,
        "memory-efficient above head dim 128: an fp32 output accumulator of (b, s, h, v)")
end

-- products, launches -------------------------------------------------------------------------
do
  local cx, G = context({ measured_launches = true })
  local a, b = act(cx, "a", { 4, 8 }, "bf16", true), act(cx, "b", { 4, 8 }, "bf16", true)
  nn.mul(cx, "m", a, b, "bf16")
  local o = op_named(G, "m")
  check(names(G, o.saves) == "b,a", "MulBackward0 keeps other before self")
  check(o.grad_order[1] == 2, "MulBackward0 computes other's gradient first")
  check(o.bwd_kernels == 2, "measured launches: MulBackward0 with both gradients launches 2")
  local c = act(cx, "c", { 4, 8 }, "bf16", false)
  nn.mul(cx, "m2", a, c, "bf16")
  check(names(G, op_named(G, "m2").saves) == "c", "a * c with c needing no grad keeps c only")
end
do
  local cx, G = context()
  local x = act(cx, "x", { 2, 3 }, "bf16", true)
  local y = nn.to(cx, x, "bf16")
  check(y == x and #G.ops == 0, "x.to(its own dtype) is x")
  nn.act(cx, "silu", x)
  check(names(G, op_named(G, "silu").saves) == "x", "SiLU keeps its input")
  local a, b = act(cx, "a", { 2, 3, 4 }, "bf16", true), act(cx, "bb", { 2, 3, 1 }, "bf16", true)
  nn.add(cx, "add", a, b)
  local o = op_named(G, "add")
  check(o.grads[1].pass == 1 and o.grads[2].bytes == 2 * 3 * 1 * 2,
        "add passes the gradient through, a broadcast input's is reduced into a new buffer")
end

if #failures > 0 then
  error(("op library: %d of %d checks failed:\n  %s"):format(#failures, checks, table.concat(failures, "\n  ")), 0)
end
print(("op library: %d checks passed"):format(checks))

-- a small scenario for the binary to run once the checks have
return {
  hardware = { gpu = "h200" },
  model = { arch = "llama2", size = "7b-l1" },
  training = { micro_batch = 1, seq = 128, steps = 1 },
}
