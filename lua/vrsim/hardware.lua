-- hardware.lua: the run's GPU, links and host, joined from the catalogs (lua/hw/gpus.lua, links.lua,
-- hosts.lua) and the profiles measured on a GPU (lua/hw/calibrated/), or carried to it from the
-- H200's (lua/hw/carry.lua): the device table the C core runs on.
local gpus = require "hw.gpus"
local memory = require "hw.memory"
local names = require "vrsim.names"
local closest, keys = names.closest, names.keys
local fail = require("vrsim.schema").fail

local M = {}

-- Parameters per second one rank's torch.optim.AdamW steps on the CPU, from the measured points
-- (lua/hw/hosts.lua torch_cpu_adamw) for `ranks` ranks of one host with `threads` threads each.
-- Points with the most processes not above `ranks` are used; more ranks than that share the
-- measured aggregate.  Between measured thread counts the rate is interpolated linearly; below
-- the fewest it scales with the threads (each thread then streams on its own), above the most it
-- stays flat (the memory bus is the limit).
local function torch_cpu_adamw_rate(m, ranks, threads)
  if not (m and m.points) then return 0 end
  local procs = 0
  for _, p in ipairs(m.points) do
    if p.procs <= ranks and p.procs > procs then procs = p.procs end
  end
  if procs == 0 then return 0 end
  local pts = {}
  for _, p in ipairs(m.points) do
    if p.procs == procs then pts[#pts + 1] = p end
  end
  table.sort(pts, function(a, b) return a.threads < b.threads end)
  local rate
  if threads <= pts[1].threads then
    rate = pts[1].bf16_params_per_s * threads / pts[1].threads
  elseif threads >= pts[#pts].threads then
    rate = pts[#pts].bf16_params_per_s
  else
    for i = 2, #pts do
      local a, b = pts[i - 1], pts[i]
      if threads <= b.threads then
        local f = (threads - a.threads) / (b.threads - a.threads)
        rate = a.bf16_params_per_s + f * (b.bf16_params_per_s - a.bf16_params_per_s)
        break
      end
    end
  end
  return rate * procs / math.max(procs, ranks)
end

-- A GPU name as people type it ("h100", "4090", "NVIDIA A100-SXM4-80GB") -> the catalog name,
-- through lua/hw/gpu_aliases.lua; nil and a message when it is unknown or ambiguous.
local function resolve_gpu(name)
  if gpus[name] then return name end
  local key = name:lower():gsub("nvidia", ""):gsub("geforce", ""):gsub("tesla", ""):gsub("[%s%-_]", "")
  if gpus[key] then return key end
  local a = require("hw.gpu_aliases")[key]
  if type(a) == "string" and gpus[a] then return a end
  if type(a) == "table" then
    return nil, ("GPU '%s' is ambiguous: %s (vrsim gpus lists them)"):format(name, table.concat(a, " or "))
  end
  local names = keys(gpus)
  for k in pairs(require("hw.gpu_aliases")) do names[#names + 1] = k end
  table.sort(names)
  local s = closest(key, names)
  local sa = s and require("hw.gpu_aliases")[s]
  if type(sa) == "string" then s = sa elseif type(sa) == "table" then s = table.concat(sa, "' or '") end
  -- the suggestion's memory beside it: a card near in name may be far in size (a 12 GB
  -- RTX 4070 is not the catalog's 16 GB RTX 4080)
  local sg = s and gpus[s]
  local what = sg and (" (%s, %.0f GB)"):format(sg.name, sg.memory_bytes / 2^30) or ""
  return nil, ("unknown GPU '%s'%s (vrsim gpus lists them)"):format(name,
              s and ("; did you mean '" .. s .. "'" .. what .. "?") or "")
end
M.resolve_gpu = resolve_gpu

-- device_of's joined row lists, by GPU and table
local JOINED = {}

-- GPU g's NVLink as the n cards of the run have it: built in, or a 2-way bridge only where the
-- scenario says one is fitted (hardware.nvlink_bridge; cards are sold without); nil when the
-- collectives cannot take NVLink. A bridge joins two cards: with more, or on a card that takes
-- none, stating one is an error.
local function link_as_sold(g, name, n, bridge)
  if bridge then
    if not (g.nvlink and g.nvlink.bridge) then
      error(("hardware.nvlink_bridge = true: the %s takes no NVLink bridge (%s)"):format(name,
            g.nvlink and "its NVLink is built in" or "it has no NVLink"), 0)
    end
    if n ~= 2 then
      error(("hardware.nvlink_bridge = true joins two cards, and hardware.count is %d: with more, the "
             .. "collectives cross PCIe between bridged pairs (leave nvlink_bridge out)"):format(n), 0)
    end
    return g.nvlink
  end
  if g.nvlink and g.nvlink.bridge then return nil end
  return g.nvlink or nil
end

function M.device_of(cfg, ctx)
  local name, msg = resolve_gpu(cfg.hardware.gpu)
  if not name then
    if ctx.from_set then error(msg, 0) end
    fail(ctx, "gpu", "hardware", msg)
  end
  if name ~= cfg.hardware.gpu then
    cfg.notes = cfg.notes or {}
    table.insert(cfg.notes, ("GPU '%s' read as the catalog's %s"):format(cfg.hardware.gpu, name))
    cfg.hardware.gpu = name
  end
  local g = gpus[name]
  local links = require "hw.links"
  local hosts = require "hw.hosts"
  -- the GPU's host link: hardware.pcie where the slot gives it less than its own (x8, an older
  -- generation), else the card's; offload's copies and collectives over PCIe run on it
  local pcie_key = cfg.hardware.pcie or ("gen%d_x%d"):format(g.pcie.gen, g.pcie.lanes)
  if cfg.hardware.pcie and not links.pcie[pcie_key] then
    error(("hardware.pcie = '%s' is not a link of lua/hw/links.lua (one of: %s)"):format(pcie_key,
      table.concat(keys(links.pcie), ", ")), 0)
  end
  local pcie_link = links.pcie[pcie_key] or links.pcie.gen4_x16
  local n = cfg.hardware.count
  local ic = cfg.hardware.interconnect
  local nvlink = link_as_sold(g, name, n, cfg.hardware.nvlink_bridge)
  if ic == "auto" then ic = (nvlink and n > 1) and "nvlink" or "pcie" end
  local coll_bw, coll_lat
  if ic == "nvlink" then
    if not nvlink then
      error(g.nvlink and g.nvlink.bridge
        and ("%s is sold without NVLink: set hardware.nvlink_bridge = true if the two cards have a bridge fitted"):format(name)
        or ("%s has no NVLink: use hardware.interconnect = \"pcie\""):format(name), 0)
    end
    local gen = g.nvlink.gen
    local l = links.nvlink[type(gen) == "string" and gen or ("gen" .. gen)] or {}
    coll_bw, coll_lat = l.bw_bytes_per_s or g.nvlink.bw_bytes_per_s, (l.latency_s or 3e-6) * 1e9
    -- a full mesh (MI300X's Infinity Fabric): a group of n GPUs of one node uses n - 1 of each
    -- GPU's links
    if l.mesh and l.links then
      coll_bw = coll_bw * math.min(math.max(math.min(n, cfg.hardware.gpus_per_node) - 1, 1), l.links) / l.links
    end
  else
    local l = pcie_link
    coll_bw, coll_lat = l.bw_bytes_per_s, l.latency_s * 1e9
    -- without peer-to-peer (GeForce Ada) NCCL stages every transfer through host memory: the
    -- data crosses PCIe twice
    if g.p2p == false then coll_bw = coll_bw / 2 end
  end
  -- beyond one node, collectives cross the network: nics_per_node ports of hardware.network per
  -- node, rail-optimised; the C core (sim/collective.h coll_net_time_ns) gives each group the
  -- NICs of the GPUs it has in each node
  local nodes = math.ceil(n / cfg.hardware.gpus_per_node)
  local nics = cfg.hardware.nics_per_node or cfg.hardware.gpus_per_node
  if nics < 1 then error("hardware.nics_per_node must be at least 1", 0) end
  local net
  if nodes > 1 then
    net = links.network[cfg.hardware.network]
    if not net then
      local names = keys(links.network)
      local s = closest(cfg.hardware.network, names)
      error(("unknown network '%s'%s (one of: %s)"):format(cfg.hardware.network,
            s and ("; did you mean '" .. s .. "'?") or "", table.concat(names, ", ")), 0)
    end
    ic = ("%s+%dx%s"):format(ic, nics, cfg.hardware.network)
  end
  -- FSDP2 hybrid sharding (HSDP): shards over shard_group consecutive ranks, gradients all-reduced
  -- over the replicate group of one rank per shard group
  -- (over the data-parallel ranks: the mesh's, which tensor parallelism's groups divide)
  local dp_n = ctx.mesh and ctx.mesh.given and ctx.mesh.dp or n
  local shard = cfg.training.zero and cfg.training.zero.shard_group
  local replicate = shard and shard > 0 and shard < dp_n and dp_n // shard or 0
  local pl = pcie_link
  local host = cfg.hardware.host and hosts[cfg.hardware.host]
  if cfg.hardware.host and not host then
    local s = closest(cfg.hardware.host, keys(hosts))
    error(("unknown host '%s'%s"):format(cfg.hardware.host, s and ("; did you mean '" .. s .. "'?") or ""), 0)
  end
  -- a profile measured on this GPU by sim/calib (make calibrate), when there is one, and the
  -- supplements measured beside it (lua/hw/calibrated/<gpu>_<what>.lua), each nil when absent
  local function calibrated(suffix, gname)
    local ok, t = pcall(require, "hw.calibrated." .. (gname or name) .. suffix)
    return ok and type(t) == "table" and t or nil
  end
  -- The supplements joined to a card's torch_ops table, each a class measured on its own
  -- (lua/hw/calibrated/<gpu><suffix>.lua; what each is: load_profile below)
  local TORCH_OPS_SUPPLEMENTS = { "_conv_layout", "_group_norm", "_norm", "_geglu_mul", "_sinks_attention",
                                  "_baddbmm", "_add_mixed" }
  -- A list of rows followed by the `key` rows of each supplement named by suffixes that
  -- exists: the modules' own tables stay as loaded. Made once per GPU and table (JOINED): the
  -- modules' rows never change once loaded
  local function joined(rows, key, suffixes, gname)
    local memo = (gname or name) .. "/" .. key
    if JOINED[memo] then return JOINED[memo] end
    local all = {}
    for _, r in ipairs(rows) do all[#all + 1] = r end
    for _, suffix in ipairs(suffixes) do
      local extra = calibrated(suffix, gname)
      for _, r in ipairs(extra and extra[key] or {}) do all[#all + 1] = r end
    end
    JOINED[memo] = all
    return all
  end
  local function load_profile(gname)
    local prof = calibrated("", gname)
    if prof then
      prof.source = prof.source or ("lua/hw/calibrated/" .. gname .. ".lua")
      -- GEMMs timed each from an idle card (vrsim-calibrate --gemm-idle-ms): a training step's
      -- GEMMs run between memory-bound kernels, below the power limit, and torch.profiler's
      -- kernel times of real steps match these, not a grid timed back to back
      -- (validation/PROVENANCE.md, the fourth call set)
      local gp = calibrated("_gemm", gname)
      -- with the small and skinny GEMMs' kernels timed by torch.profiler
      -- (measure_gemm_kernels.py), which replace the grid's rows up to their largest problem
      -- (sim/cost.c gemm_points)
      if gp and type(gp.gemm) == "table" then
        prof.gemm = joined(gp.gemm, "gemm_kernels", { "_gemm_kernels" }, gname)
      end
      -- scaled_dot_product_attention per backend and shape (validation/harness/measure_sdpa.py):
      -- fused attention takes its time from these rather than from the GEMM curve
      -- fused attention: its kernels' own time where measured (measure_sdpa_kernels.py), else
      -- single calls timed with events (measure_sdpa.py)
      local sp = calibrated("_sdpa_kernels", gname) or calibrated("_sdpa", gname)
      if sp then prof.sdpa = sp.sdpa end
      -- LoRA adapters' skinny GEMMs by rank, tokens and width (measure_lora_gemms.py): their
      -- kernels run far below the GEMM curve's rate for their FLOPs, in fp32 on the SIMT cores.
      -- Only a run with adapters has such GEMMs; the others do not read the table's 960 rows
      local lg = require("strategies.lora").wanted(cfg.training) and calibrated("_lora_gemm", gname)
      prof.lora_gemm = lg and lg.lora_gemm or nil
      -- the rows C makes the cost model from are a function of these two alone: the process
      -- makes that model once per key (sim/bind/plan_read.c read_profile)
      prof.cost_key = gname .. (lg and "+lora_gemm" or "")
      -- the stream's dead time between back-to-back kernels (measure_kernel_gap.py)
      local kg = calibrated("_kernel_gap", gname)
      if kg then prof.kernel_gap_us = kg.kernel_gap_us end
      -- PyTorch's own dispatch cost per op on that machine (validation/harness/measure_dispatch.py)
      local torchp = calibrated("_torch", gname)
      -- per kernel of module-heavy code (nn.Module calls, hooks, views) when measured, else per op
      if torchp then
        prof.host_op_us = torchp.host_kernel_us or torchp.host_op_us
        prof.host_ckpt_op_us = torchp.host_kernel_ckpt_us
        prof.host_ckpt_region_us = torchp.host_ckpt_region_us
        prof.host_ckpt_saved_us = torchp.host_ckpt_saved_us
        -- a torch.compile graph's host time a kernel and a call (measure_compiled_call.py)
        for _, f in ipairs { "host_compiled_kernel_fwd_us", "host_compiled_kernel_bwd_us",
                             "host_compiled_call_fwd_us", "host_compiled_call_bwd_us" } do
          prof[f] = torchp[f]
        end
        -- the host dispatch of each op class, forward and backward node (measure_host_classes.py)
        prof.host_classes = torchp.host_class_us
        prof.fsdp2_hook_us = torchp.fsdp2_hook_us
        -- the optimizer's host work per parameter tensor (measure_optim_host.py)
        prof.optim_host = { step_tensor_us = torchp.optim_step_tensor_us,
                            zero_grad_tensor_us = torchp.zero_grad_tensor_us }
      end
      -- PyTorch's elementwise/copy/reduction kernels by access class (measure_torch_ops.py)
      -- with more classes, each from its own measurement: cuDNN's layout transforms around NCHW
      -- convolutions (measure_conv_transforms.py), GroupNorm's statistics kernel, one block
      -- per row (measure_group_norm.py), the norms' other kernels (measure_norm_kernels.py),
      -- GEGLU's product of a strided and a contiguous operand (measure_geglu_mul.py), the ops
      -- of gpt-oss's eager attention with sinks (sinks_attention_classes.py), peft's expert
      -- folding (baddbmm_classes.py) and peft's LoRA sum of two dtypes (measure_torch_ops.py
      -- --only add_mixed): TORCH_OPS_SUPPLEMENTS
      local ops = calibrated("_torch_ops", gname)
      if ops then
        prof.torch_ops = joined(ops.torch_ops, "torch_ops",
                                TORCH_OPS_SUPPLEMENTS, gname)
      end
    end
    return prof
  end
  -- The memory-bound kernels measured on this very GPU (validation/harness/run_gpu_classes.sh):
  -- PyTorch's kernels by access class and the supplements measure_torch_ops.py's table joins,
  -- vrsim-calibrate's streaming copy / elementwise curves and the stream's gap per kernel; nil
  -- when it has none. Over a carried profile they replace the classes carried by the DRAM ratio
  -- (sim/cost.h cost_measured_here): a kernel far below DRAM's bandwidth runs at what its SMs
  -- keep in flight, which the ratio does not know.
  local function measured_here(gname)
    local ops, streams, gap = calibrated("_torch_ops", gname), calibrated("_streams", gname),
        calibrated("_kernel_gap", gname)
    local rows = joined(ops and ops.torch_ops or {}, "torch_ops",
                        TORCH_OPS_SUPPLEMENTS, gname)
    if #rows == 0 and not streams and not gap then return nil end
    return { torch_ops = rows, copy = streams and streams.copy, elementwise = streams and streams.elementwise,
             kernel_gap_us = gap and gap.kernel_gap_us, source = "lua/hw/calibrated/" .. gname .. "_*.lua" }
  end
  -- this GPU's own profile; else the H200's, carried to it op class by op class (lua/hw/carry.lua),
  -- with the memory-bound kernels this GPU measured itself in place of their carried classes
  local carry_mod = require "hw.carry"
  local prof, carry, here, sdpa_here = load_profile(name), nil, nil, nil
  if prof then
    prof.basis = "measured on this GPU: lua/hw/calibrated/" .. name .. "*.lua"
    -- attention rows this GPU's table has none of (an unaligned mask, flex attention): the H100
    -- SXM's (carry.lua sdpa_borrowed_rows; named in a note by the attention that uses them)
    sdpa_here = carry_mod.sdpa_borrowed_rows(name, g, gpus, calibrated, prof.sdpa)
  elseif gpus[carry_mod.REFERENCE] then
    prof = load_profile(carry_mod.REFERENCE)
    if prof then
      local basis
      -- the classes the second GPU measured as well carry split into their DRAM and SM parts
      -- (not on that GPU itself, whose own measurements replace them all)
      local second = name ~= carry_mod.SECOND and gpus[carry_mod.SECOND] and measured_here(carry_mod.SECOND)
      local split = second and carry_mod.split_classes(prof.torch_ops, second.torch_ops,
                                                       gpus[carry_mod.REFERENCE], gpus[carry_mod.SECOND])
      carry, basis = carry_mod.carry(g, gpus[carry_mod.REFERENCE], carry_mod.best_bf16(prof), nil, split)
      here = measured_here(name)
      prof.basis = here and (basis .. "; memory-bound kernels measured on this GPU (" .. here.source .. ")") or basis
      -- fused attention from this GPU's own kernel table, or the H100 SXM's carried to a board of
      -- its architecture (lua/hw/carry.lua sdpa_rows says which and why), in place of the H200's
      sdpa_here = carry_mod.sdpa_rows(name, g, gpus, calibrated)
      if sdpa_here then
        prof.basis = prof.basis .. (sdpa_here.from == name and "; fused attention measured on this GPU (%s)"
          or "; fused attention from %s x%.3f"):format(sdpa_here.source, sdpa_here.rate)
      end
    end
  end
  -- float8 GEMMs from this GPU's own fp8 rows, or the H100 SXM's carried to a GPU of its
  -- architecture, the H200 included (lua/hw/carry.lua gemm_rows says which and why); else the
  -- roofline, as without a profile
  local gemm_here = prof and carry_mod.gemm_rows(name, g, gpus, calibrated) or nil
  -- (named in the basis only where the run has float8 GEMMs to price)
  if gemm_here and cfg.training and cfg.training.float8 then
    prof.basis = (prof.basis or "") .. (gemm_here.from == name and "; float8 GEMMs measured on this GPU (%s)"
      or "; float8 GEMMs from %s x%.3f"):format(gemm_here.source, gemm_here.rate)
  end
  if cfg.training and cfg.training.float8 then
    local rc = type(cfg.training.float8) == "table" and cfg.training.float8.recipe or "tensorwise"
    local note
    if not gemm_here then
      note = ("float8 GEMMs on %s at the roofline (dense fp8 peak x %.2f): no fp8 GEMM measured on it or on a "
        .. "GPU of its architecture"):format(g.name, g.eff_compute or 0.75)
    elseif rc ~= "tensorwise" then
      -- the C core prices a GEMM by dtype and FLOPs only: a rowwise curve would need the recipe on the op
      note = ("float8 recipe %s: its GEMMs at the tensorwise rows of %s (no GEMM curve per scaling; rowwise "
        .. "measured 0.90 of tensorwise over the large shapes there, validation/results/fp8_gemm_h100_sxm.json)")
        :format(rc, gemm_here.source)
    end
    cfg.notes = cfg.notes or {}
    local seen = false
    for _, n in ipairs(cfg.notes) do seen = seen or n == note end
    if note and not seen then table.insert(cfg.notes, note) end
  end
  -- the host costs carried to the run's host (hardware.host_dispatch_scale, and the classes
  -- hardware.host_classes and hardware.host_optim measured there: lua/hw/host_speed.lua)
  prof = require("hw.host_speed").scaled(prof, cfg.hardware.host_dispatch_scale, cfg.hardware.host_classes,
                                         cfg.hardware.host_optim)
  -- compute kernels slowed beside a collective: this very card's figure (measured by
  -- measure_contention.py, or published, the file's header says which and where), never one
  -- carried from another card, since how much an NCCL kernel takes from a GEMM is a matter of the
  -- card's SMs and memory; none without one. Set on every run, the profile table being shared
  -- by the runs of one process
  if prof then
    local ct = cfg.hardware.contention ~= false and calibrated("_contention") or nil
    prof.contention = ct and ct.contention or nil
    if ct then
      local c = ct.contention
      prof.basis = (prof.basis or "") .. ("; beside a collective compute-bound kernels +%.0f %%, memory-bound "
        .. "+%.0f %% (%s_contention.lua, %s)"):format(100 * (c.compute or 0), 100 * (c.memory or 0), name,
          ct.source or "measure_contention.py")
    end
  end
  -- bitsandbytes' optimizer steps measured on this GPU (measure_bnb_optim.py,
  -- strategies/bnb_optim.lua): its own only, never carried from another GPU's, since the host's
  -- work and synchronize per parameter are a machine's, not a fraction of a peak
  local bnb = calibrated("_bnb_optim")
  local bnb_optim = bnb and type(bnb.bnb_optim) == "table"
      and { table = bnb.bnb_optim, source = "lua/hw/calibrated/" .. name .. "_bnb_optim.lua" } or nil
  -- a mixture of experts' grouped GEMMs and dispatch index ops measured on this very GPU
  -- (validation/harness/measure_grouped_mm.py); never carried from another GPU: without it they
  -- are priced as above (sim/bind/plan_read.c read_moe)
  local gmm = prof and calibrated("_grouped_mm")
  if gmm then gmm.source = gmm.source or ("lua/hw/calibrated/" .. name .. "_grouped_mm.lua") end
  -- NCCL collectives measured between GPUs of this kind over NVLink (make calibrate on a
  -- machine with several), used when the collectives run on NVLink
  local nccl, nccl_ranks
  local lk = calibrated("_x2_links")
  if lk and ic == "nvlink" and nodes == 1 then nccl, nccl_ranks = lk.nccl, lk.nccl_ranks end
  return {
    nccl = nccl, nccl_ranks = nccl_ranks,
    profile = prof, carry = carry, measured_here = here, sdpa_measured = sdpa_here, gemm_measured = gemm_here,
    grouped_mm = gmm or nil, bnb_optim = bnb_optim,
    world = n, coll_bw = coll_bw, coll_latency_ns = coll_lat, interconnect = ic,
    gpus_per_node = cfg.hardware.gpus_per_node, nics_per_node = nics, replicate = replicate,
    nic_bw = net and net.bw_bytes_per_s or 0, nic_latency_ns = net and net.latency_s * 1e9 or 0,
    host_bw = pl.bw_bytes_per_s, host_latency_ns = pl.latency_s * 1e9,
    cpu_adam_rate = (hosts.cpu_adam and hosts.cpu_adam.params_per_s or 0) / math.max(1, math.min(n, 8)),
    cpu_torch_adamw_rate = torch_cpu_adamw_rate(hosts.torch_cpu_adamw, math.min(n, cfg.hardware.gpus_per_node),
                                                cfg.training.cpu_threads),
    host = host,
    key = name, name = g.name,
    total_bytes = g.usable_bytes or g.memory_bytes,
    context_bytes = g.cuda_context_bytes or 0,
    cublas_workspace_bytes = memory.cublas_workspace_bytes(g),
    peak_flops = g.peak_flops, mem_bw = g.mem_bw_bytes_per_s,
    -- efficiencies: without a calibrated profile, large GEMMs are taken to reach 75 % of the
    -- datasheet dense rate and streaming kernels 85 % of HBM bandwidth (H200 through PyTorch:
    -- 777/989 TFLOP/s bf16 and 4.22/4.8 TB/s, validation/results/hw_h200_pytorch.json)
    eff_compute = g.eff_compute or 0.75, eff_memory = g.eff_memory or 0.85,
    launch_ns = g.launch_ns or 5000,
    -- what sizes a row sum's staging buffers on this GPU (sim/device.c device_row_sum_buffers)
    sm_count = g.sm_count, compute_capability = g.compute_capability,
  }, g
end

return M
