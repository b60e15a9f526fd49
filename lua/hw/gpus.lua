-- lua/hw/gpus.lua: the GPU catalog, plain data (no functions).
--
-- Loaded with `require "hw.gpus"`; returns a table keyed by catalog name. Every entry has exactly
-- the fields below; units are in the field names or stated here.  See lua/hw/README.md.
--
--   name                 marketing name (as torch.cuda.get_device_name() prints it where known)
--   vendor               "nvidia" | "amd" (PyTorch on ROCm: the same caching allocator through
--                        HIP, its own BLAS workspaces: lua/hw/memory.lua)
--   arch                 "turing" | "volta" | "ampere" | "ada" | "hopper" | "blackwell" | "cdna3"
--   compute_capability   number, e.g. 8.6 (it also sets the cuBLAS workspace: lua/hw/memory.lua)
--   memory_bytes         datasheet capacity, "N GB" read as N GiB (N * 2^30): an 80 GB A100 shows
--                        exactly 81920 MiB in nvidia-smi, so NVIDIA's "GB" here is GiB
--   usable_bytes         what torch.cuda.get_device_properties().total_memory (= cudaMemGetInfo
--                        total, = deviceQuery "Total amount of global memory") reports; this is
--                        PyTorch's "total capacity" and the base of set_per_process_memory_fraction.
--                        It varies by a few tens of MiB with the driver version and ECC setting.
--   cuda_context_bytes   device memory used outside PyTorch's allocator during training (CUDA
--                        context, loaded kernel images, cuBLAS/cuBLASLt/cuDNN handles): measured
--                        as nvidia-smi used minus torch reserved.  The allocator can reserve at
--                        most usable_bytes - cuda_context_bytes on a real card.
--   mem_bw_bytes_per_s   datasheet DRAM bandwidth
--   peak_flops           dense (no 2:4 sparsity) datasheet peaks per second, per dtype of the
--                        tensor-core (or, for fp32, CUDA-core) path PyTorch uses: fp16/bf16/fp8
--                        with FP32 accumulation (what cuBLAS does for torch matmuls; GeForce cards
--                        run that at half their FP16-accumulate rate), int8 in ops/s.
--                        0 means no hardware path for that dtype on this GPU.
--   sm_count, l2_bytes
--   pcie                 { gen =, lanes = } of the GPU's own host link
--   nvlink               { gen =, bw_bytes_per_s = per direction, all links of one GPU together }
--                        or false; gen names the lua/hw/links.lua nvlink entry ("gen" .. gen, or
--                        gen itself when a string). bridge = true: the card is sold without NVLink
--                        and takes an optional 2-way bridge (RTX 3090/A5000/A6000, H100 PCIe); the
--                        figure is the bridge's, between the bridged pair only, and a run uses it
--                        only where the scenario says hardware.nvlink_bridge = true
--   p2p                  CUDA peer-to-peer over PCIe works (cudaDeviceCanAccessPeer); GeForce
--                        cards: false (peer access only between an NVLink-bridged 3090 pair)
--   tdp_w                board power, W
--   peak_clock_mhz       the SM clock at which the datasheet's dense peaks hold (peak = SMs x dense
--                        FLOP per SM per clock x this clock)
--   step_clock_mhz       the SM clock the GPU's GEMMs hold inside a training step, where there is
--                        evidence; omitted = peak_clock_mhz (an assumption, not a measurement).
--                        A GPU without a calibrated profile gets the H200's measured profile carried
--                        to it through peak_flops x step_clock_mhz / peak_clock_mhz, SM count and
--                        DRAM bandwidth (lua/hw/carry.lua, docs/step-time.md); boost or
--                        sparsity-doubled figures are never a peak here
--   sustained_matmul_bf16  optional: the best bf16 matmul (FLOP/s) measured on this GPU held busy
--                        back to back (ml-engineering's "Maximum Achievable Matmul FLOPS" method,
--                        validation/harness/measure_sustained_matmul.py), where one is published.
--                        Sustained load pulls a card to its power limit (the H200: 777.6 against the
--                        826.3 its GEMMs reach inside a step), so it is a lower bound on the in-step
--                        plateau: a carried bf16/fp16 GEMM curve that tops out below it is raised
--                        to it (lua/hw/carry.lua)
--   step_matmul_bf16     optional: a bf16 GEMM rate (FLOP/s) measured on this GPU inside a model's forward
--                        (its GEMMs between other kernels, as in a step), where one is published; like
--                        sustained_matmul_bf16 a lower bound on the in-step plateau, and the larger of
--                        the two raises the carried bf16/fp16 curve (lua/hw/carry.lua)
--   measured_elementwise_bw  optional: the DRAM-bound rate (bytes read + written per second) of a large
--                        contiguous elementwise op (torch add) measured on this GPU, where one is
--                        published. Where it is above the rate the reference's own best contiguous op
--                        carries to by the DRAM bandwidth ratio, every memory-bound class's ratio is
--                        raised to it (lua/hw/carry.lua), as sustained_matmul_bf16 raises the GEMMs'
--   kind                 for each figure of FIGURES below, how it was obtained:
--                          "measured"  read off the card (deviceQuery, torch, nvidia-smi; ours or a
--                                      published record, named in source),
--                          "carried"   taken from another card or a stated rule (source names which),
--                          "datasheet" the vendor's datasheet, whitepaper or product page (named in
--                                      source, with any arithmetic such as halving a sparse figure)
--                          "published" stated for this very board by its operator in a named
--                                      publication, where the vendor publishes no datasheet of it
--                        FIGURES: memory_bytes usable_bytes cuda_context_bytes mem_bw_bytes_per_s
--                        peak_flops sm_count l2_bytes nvlink tdp_w (tests/ops/test_catalog.lua)
--   fleet_only           optional: the fleet a board is found in where it is sold to no one else (a
--                        string naming it); such a card is never offered as "a larger card" to rent,
--                        and `vrsim shop` lists it only where --only names it
--   not_modelled         optional list of what vrsim does not model on this card; each is a named
--                        note in every run on it
--   source               strings naming where each figure came from (datasheet title + URL, or
--                        "measured YYYY-MM-DD"); keys match the fields (memory, bandwidth, SMs and
--                        L2 may share `memory`, anything may fall back to `spec`)
--
-- cuda_context_bytes estimates.  Only the H200 is measured (validation/records/llama_h200.jsonl: nvidia-smi used minus
-- torch reserved after training steps, torch 2.11 + CUDA 13.0, driver 580): 750.8 MiB in the fp32
-- run, 766.8 MiB in the bf16/amp runs, 768.8-770.8 MiB in SDXL (cuDNN attention).  We carry
-- 766.8125 MiB.  For other GPUs we split that figure into a part that scales with the GPU -- the
-- local-memory (stack) reservation the driver makes for every resident thread, 1 KiB default
-- stack x max threads per SM x SMs = 264 MiB on a 132-SM Hopper -- and the rest, 502.8 MiB of
-- loaded kernels, handles and driver heaps, assumed the same for every GPU:
--     context = 502.8125 MiB + sm_count * max_threads_per_sm * 1 KiB
-- (max threads per SM: 2048 on cc 7.0/8.0/9.0/10.0, 1536 on 8.6/8.9/12.0, 1024 on 7.5).  Cross-check: a bare context
-- with lazy module loading is ~256-400 MiB (256 MiB on an RTX 3090 with torch 2.7.1,
-- invoke-ai/InvokeAI#9413; "around 400MB", pytorch/pytorch#109888), and training then loads
-- cuBLAS/attention kernels on top.  These are estimates: `make calibrate` measures the real one.
return {
  rtx3090 = {
    name = "NVIDIA GeForce RTX 3090",
    vendor = "nvidia",
    arch = "ampere",
    compute_capability = 8.6,
    memory_bytes = 25769803776,          -- 24 GiB GDDR6X
    usable_bytes = 25447170048,          -- 24268 MiB (deviceQuery, CUDA 11.3-11.8 drivers)
    cuda_context_bytes = 656211968,      -- 625.8 MiB, estimate (header formula, 82 SMs x 1536)
    mem_bw_bytes_per_s = 936.2e9,        -- 19.5 Gbps x 384 bit
    peak_flops = { fp32 = 35.58e12, tf32 = 35.6e12, bf16 = 71e12, fp16 = 71e12, fp8 = 0, int8 = 284e12 },
    sm_count = 82,
    l2_bytes = 6291456,                  -- 6 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = { gen = 3, bw_bytes_per_s = 56.25e9, bridge = true },  -- optional 2-way bridge, 112.5 GB/s both ways
    p2p = false,
    tdp_w = 350,
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA Ampere GA102 GPU Architecture whitepaper v2, Appendix A (GeForce RTX 3090): "
        .. "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
      peak_flops = "GA102 whitepaper Table: FP32 35.6 TFLOPS; FP16/BF16 tensor with FP32 accumulate 71 "
        .. "(142 with FP16 accumulate, 284 sparse); TF32 35.6; INT8 284 TOPS dense; no FP8",
      memory = "24 GB GDDR6X, 19.5 Gbps, 384-bit: GA102 whitepaper; RTX 3090 product page "
        .. "https://www.nvidia.com/en-us/geforce/graphics-cards/30-series/rtx-3090-3090ti/",
      usable_bytes = "deviceQuery output '24268 MBytes (25447170048 bytes)' on RTX 3090 (public repos, CUDA 11.x)",
      nvlink = "RTX 3090 product page: NVLink bridge (2-way) 112.5 GB/s total; peer access between the bridged pair",
      p2p = "GeForce drivers do not enable PCIe peer-to-peer; only NVLink-bridged 3090 pairs report peer access",
      nvlink_default = "sold without a bridge: two cards talk over PCIe unless hardware.nvlink_bridge = true says one is fitted",
      cuda_context_bytes = "estimate from measured H200 value (header of this file), not measured on a 3090",
      compute_capability = "CUDA C++ Programming Guide, compute capabilities table (GA102 = 8.6)",
      tdp_w = "RTX 3090 product page: 350 W graphics card power",
    },
  },

  rtx4090 = {
    name = "NVIDIA GeForce RTX 4090",
    vendor = "nvidia",
    arch = "ada",
    compute_capability = 8.9,
    memory_bytes = 25769803776,          -- 24 GiB GDDR6X
    usable_bytes = 25393692672,          -- 24217 MiB
    cuda_context_bytes = 728563712,      -- 694.8 MiB, estimate (128 SMs x 1536)
    mem_bw_bytes_per_s = 1008e9,         -- 21 Gbps x 384 bit
    peak_flops = { fp32 = 82.6e12, tf32 = 82.6e12, bf16 = 165.2e12, fp16 = 165.2e12, fp8 = 330.3e12, int8 = 660.6e12 },
    sm_count = 128,
    l2_bytes = 75497472,                 -- 72 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = false,
    tdp_w = 450,
    peak_clock_mhz = 2520,               -- 165.2 TFLOP/s / (128 SMs x 512 dense FLOP/clk), the boost clock
    step_clock_mhz = 2615,               -- published: FP32 FMA 85.70 TFLOP/s / (128 SMs x 128 lanes x 2)
    sustained_matmul_bf16 = 160.11e12,   -- published: 8192^3 bf16 torch.matmul, 20 min at the 450 W limit
    measured_elementwise_bw = 920.7e9,   -- published: fp32 torch add, 91 % of 1008 GB/s
    step_matmul_bf16 = 165.0e12,         -- published: bf16 GEMMs of a LLaMA MLP forward (source below)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA Ada GPU Architecture whitepaper, Appendix A (GeForce RTX 4090): "
        .. "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
      peak_flops = "Ada whitepaper: FP32 82.6 TFLOPS; TF32 82.6; FP16/BF16 with FP32 accumulate 165.2 "
        .. "(330.3 with FP16 accumulate); FP8 with FP32 accumulate 330.3 (660.6 with FP16 accumulate); INT8 660.6 TOPS; all dense",
      memory = "24 GB GDDR6X 21 Gbps 384-bit, 1008 GB/s: Ada whitepaper; "
        .. "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/",
      usable_bytes = "torch total_memory 25393692672 on RTX 4090 (public hardware records, torch 2.4 / CUDA 12.1); "
        .. "OOM messages show '23.64-23.65 GiB total capacity' (e.g. TRI-ML/packnet-sfm#250, ali-vilab/VGen#104)",
      p2p = "no NVLink; GeForce Ada drivers report no PCIe peer access (a stated assumption, not measured here)",
      cuda_context_bytes = "estimate from measured H200 value (header of this file), not measured on a 4090",
      tdp_w = "RTX 4090 product page: 450 W total graphics power",
      peak_clock_mhz = "derived: the whitepaper's dense 165.2 TFLOP/s over 128 SMs x 512 FLOP/clk (GeForce Ada's "
        .. "half-rate FP32 accumulate) = 2520 MHz, its boost clock",
      step_clock_mhz = "published: xytpai/nvbench README (standard/single_precision_compute.cu), RTX 4090 FP32 "
        .. "85.7015 TFLOP/s = 128 SMs x 128 lanes x 2 FLOP x 2615 MHz, a lower bound on the clock of a short "
        .. "compute-bound kernel; a tensor-core kernel agrees: FlashAttention-2's published 169.28 TFLOP/s on an "
        .. "RTX 4090 (apache/tvm tl_doc/flash_perf.md) needs at least 2583 MHz. Held busy at its 450 W limit "
        .. "the card runs 2488 MHz (sustained_matmul_bf16's report); the dual-4090 throughput rows drew at most "
        .. "400 W (fsdp_qlora benchmarks_03_2024.md), below the limit",
      measured_elementwise_bw = "the sustained_matmul_bf16 report below: fp32 elementwise torch add 920.7 GB/s "
        .. "(91 % of 1008); xytpai/nvbench README (standard/global_memory_bandwidth.cu) agrees: RTX 4090 920.2-921.9 "
        .. "GB/s for float1-float16 copies. Above the 877 GB/s that the H200's best contiguous op (4177.0 of its "
        .. "4800 GB/s, 87 %) carries to by the DRAM ratio, so every memory-bound class's ratio is raised to "
        .. "920.7 / 4177.0 (lua/hw/carry.lua)",
      step_matmul_bf16 = "published: Liger-Kernel benchmark/data/all_benchmark_data.csv (liger 0.6.3, 2025-11-11; commit 2120862b), "
        .. "NVIDIA GeForce RTX 4090, tiled_swiglu, provider liger (LigerSwiGLUMLP: gate_proj, up_proj, one fused "
        .. "SiLU-mul kernel, down_proj), bf16, batch 2, hidden 2048, intermediate 4096, forward at seq T = 16384: 10.871 ms "
        .. "(triton do_bench median). Three GEMMs of 2 x 32768 x 2048 x 4096 FLOP = 1.649 TFLOP; the fused kernel "
        .. "reads two and writes one [32768, 4096] bf16 tensor (805 MB, 268 MB each, over twice the 72 MB L2), 0.875 ms "
        .. "at measured_elementwise_bw; the GEMMs 9.996 ms = 165.0 TFLOP/s. The smaller T (tensors within 2x the L2) "
        .. "give 165.1-168.3 but may read part of the fused kernel's input from L2, so are not used. Above "
        .. "sustained_matmul_bf16 (held at the 450 W limit), so the carry takes it",
      sustained_matmul_bf16 = "published RTX 4090 measurement report 'HW2.5 Metrics - Precision, Bandwidth, and the Cost of "
        .. "Attention' (GPU UUID GPU-b60240a9-31a3-126f-751f-afc1dcc1d73f, PyTorch 2.11.0+cu128, power limit 450 W, "
        .. "2026-09-10): 8192x8192x8192 bf16 torch.matmul held "
        .. "for 20 minutes, 160.11 TFLOP/s over the final five (average SM clock 2488 MHz, 449.6 W); best of 20 timed "
        .. "repetitions 164.69 at N = 8192; the same report's fp32 elementwise add 920.7 GB/s (91 % of 1008). "
        .. "Above the 127 TFLOP/s the H200's curve carried by the datasheet ratio reaches, so the bf16/fp16 carry "
        .. "is raised to it: cuBLAS's Ada kernels reach ~97 % of this card's datasheet peak where the H200's reach 77 %",
    },
  },

  a100_40g = {
    name = "NVIDIA A100-SXM4-40GB",
    vendor = "nvidia",
    arch = "ampere",
    compute_capability = 8.0,
    memory_bytes = 42949672960,          -- 40 GiB HBM2
    usable_bytes = 42505273344,          -- 40536 MiB
    cuda_context_bytes = 753729536,      -- 718.8 MiB, estimate (108 SMs x 2048)
    mem_bw_bytes_per_s = 1555e9,
    peak_flops = { fp32 = 19.5e12, tf32 = 156e12, bf16 = 312e12, fp16 = 312e12, fp8 = 0, int8 = 624e12 },
    sm_count = 108,
    l2_bytes = 41943040,                 -- 40 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = { gen = 3, bw_bytes_per_s = 300e9 },   -- 12 links x 25 GB/s; 600 GB/s both ways
    p2p = true,
    tdp_w = 400,
    peak_clock_mhz = 1410,               -- 108 SMs x 2048 dense bf16 FLOP/clk x 1.41 GHz = 312 TFLOP/s
    sustained_matmul_bf16 = 271.2e12,    -- published, MAMF v2 (source below)
    kind = { memory_bytes = "datasheet", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      sustained_matmul_bf16 = "ml-engineering, compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison table' "
        .. "(benchmark version 2: mean of 100 calls after 50 warm-up, cache reset between calls), NVIDIA A100 SXM: "
        .. "271.2 TFLOP/s (86.9 %) at 1024x10240x5120, torch 2.6.0+cu126: https://github.com/stas00/ml-"
        .. "engineering/tree/master/compute/accelerator. The table does not say 40 or 80 GB; both are GA100 with 108"
        .. " SMs at 1410 MHz and 400 W",
      peak_clock_mhz = "NVIDIA A100 Tensor Core GPU Architecture whitepaper: boost clock 1410 MHz, 108 SMs, 1024 dense "
        .. "FP16/BF16 FMA per SM per clock (312 TFLOP/s). step_clock_mhz not measured: assumed 1410. At that "
        .. "clock the H200's curve carried here would top out at 241 (77.2 % of peak, the H200's own fraction), "
        .. "below the A100's published sustained matmul (271.2; 267.9 in the table's version 1, CUDA 12.1), so the "
        .. "GEMM rate is raised to that (sustained_matmul_bf16)",
      spec = "NVIDIA A100 Tensor Core GPU datasheet (SXM column): https://www.nvidia.com/en-us/data-center/a100/ "
        .. "(nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)",
      peak_flops = "A100 datasheet: FP32 19.5 TFLOPS; TF32 156 (312 sparse); BF16/FP16 312 (624 sparse); INT8 624 TOPS; no FP8",
      memory = "A100 datasheet: 40 GB HBM2, 1,555 GB/s; NVIDIA Ampere GA100 whitepaper: 108 SMs, 40 MB L2, "
        .. "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf",
      usable_bytes = "deviceQuery '39.59 GBytes (42505273344 bytes)' on A100 40GB (A100-PCIE-40GB in public repos); "
        .. "same 40 GB framebuffer assumed for SXM4; a CUDA 12.x OOM message shows 39.50 GiB (TianheWu/CoSeR#10)",
      nvlink = "A100 datasheet: NVLink 600 GB/s (third generation, 12 links)",
      cuda_context_bytes = "estimate from measured H200 value (header of this file)",
      tdp_w = "A100 datasheet: 400 W (SXM)",
    },
  },

  a100_80g = {
    name = "NVIDIA A100-SXM4-80GB",
    vendor = "nvidia",
    arch = "ampere",
    compute_capability = 8.0,
    memory_bytes = 85899345920,          -- 80 GiB HBM2e (nvidia-smi 81920 MiB)
    usable_bytes = 84987740160,          -- 81051 MiB (driver 535 / CUDA 12.2)
    cuda_context_bytes = 753729536,      -- 718.8 MiB, estimate
    mem_bw_bytes_per_s = 2039e9,
    peak_flops = { fp32 = 19.5e12, tf32 = 156e12, bf16 = 312e12, fp16 = 312e12, fp8 = 0, int8 = 624e12 },
    sm_count = 108,
    l2_bytes = 41943040,
    pcie = { gen = 4, lanes = 16 },
    nvlink = { gen = 3, bw_bytes_per_s = 300e9 },
    p2p = true,
    tdp_w = 400,
    peak_clock_mhz = 1410,
    sustained_matmul_bf16 = 271.2e12,    -- published, MAMF v2 (source below)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      sustained_matmul_bf16 = "ml-engineering, compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS comparison table' "
        .. "(benchmark version 2: mean of 100 calls after 50 warm-up, cache reset between calls), NVIDIA A100 SXM: "
        .. "271.2 TFLOP/s (86.9 %) at 1024x10240x5120, torch 2.6.0+cu126: https://github.com/stas00/ml-"
        .. "engineering/tree/master/compute/accelerator. The table does not say 40 or 80 GB; both are GA100 with 108"
        .. " SMs at 1410 MHz and 400 W",
      peak_clock_mhz = "as a100_40g: A100 whitepaper boost 1410 MHz; step clock assumed equal; the carried curve's 241 "
        .. "at that clock is raised to the published sustained matmul, 271.2 (sustained_matmul_bf16)",
      spec = "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column): https://www.nvidia.com/en-us/data-center/a100/",
      peak_flops = "A100 datasheet: FP32 19.5; TF32 156; BF16/FP16 312; INT8 624 TOPS; dense",
      memory = "A100 datasheet: 80 GB HBM2e, 2,039 GB/s",
      usable_bytes = "deviceQuery 'NVIDIA A100-SXM4-80GB ... 81051 MBytes (84987740160 bytes)' (driver 12.2, public repo); "
        .. "older drivers report 81251 MiB = 85198045184 bytes (Kubernetes device-plugin tables in public repos)",
      nvlink = "A100 datasheet: NVLink 600 GB/s",
      cuda_context_bytes = "estimate from measured H200 value (header of this file)",
      tdp_w = "A100 datasheet: 400 W (SXM)",
    },
  },

  h100_sxm = {
    name = "NVIDIA H100 80GB HBM3",
    vendor = "nvidia",
    arch = "hopper",
    compute_capability = 9.0,
    memory_bytes = 85899345920,          -- 80 GiB HBM3 (nvidia-smi 81559 MiB)
    usable_bytes = 85017755648,          -- 81079 MiB (driver 580 / CUDA 13.0)
    cuda_context_bytes = 804061184,      -- 766.8 MiB: same die, SM count and software as the measured H200
    mem_bw_bytes_per_s = 3.35e12,
    peak_flops = { fp32 = 66.9e12, tf32 = 494.7e12, bf16 = 989.4e12, fp16 = 989.4e12, fp8 = 1978.9e12, int8 = 1978.9e12 },
    sm_count = 132,
    l2_bytes = 52428800,                 -- 50 MiB
    pcie = { gen = 5, lanes = 16 },
    nvlink = { gen = 4, bw_bytes_per_s = 450e9 },   -- 18 links x 25 GB/s; 900 GB/s both ways
    p2p = true,
    tdp_w = 700,
    peak_clock_mhz = 1830,               -- 132 SMs x 4096 dense bf16 FLOP/clk x 1.83 GHz = 989.4 TFLOP/s
    step_clock_mhz = 1980,               -- as the measured H200: same GH100 die, 132 SMs, 700 W
    sustained_matmul_bf16 = 794.5e12,    -- published, MAMF v2: below the carried plateau, so unused
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      sustained_matmul_bf16 = "ml-engineering MAMF table (benchmark version 2), NVIDIA H100 SXM: 794.5 TFLOP/s at 2048x2048x13312, "
        .. "torch 2.7.0+cu126. Below the 826.3 the H200's curve carried at 1980 MHz reaches, as the H200's own "
        .. "sustained figure (777.6) is below its in-step 826.3: the carry is not lowered to it",
      peak_clock_mhz = "989.4 TFLOP/s dense bf16 = 132 SMs x 4096 FLOP/clk x 1830 MHz (Hopper whitepaper, H100 SXM5). "
        .. "step_clock_mhz 1980: not measured on an H100; taken from the H200 (same die, SM count and 700 W limit), "
        .. "whose GEMMs inside training steps run at 1905-1980 MHz (lua/hw/calibrated/h200_gemm.lua, timed from an idle "
        .. "card, matches torch.profiler's in-step GEMMs within 3 %). Back to back for 0.4 s the same die falls to "
        .. "1440-1545 MHz (validation/results/gemm_check_h200.lua), which a step's GEMMs do not. Cross-check: best cuBLAS bf16 matmul "
        .. "measured on an H100 SXM 792.1 TFLOP/s (ml-engineering MAMF table, CUDA 12.1), GH200 821.0 (CUDA 12.5); "
        .. "the carried curve tops out at 826",
      spec = "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): "
        .. "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
      peak_flops = "H100 datasheet lists sparse figures (TF32 989, BF16/FP16 1,979, FP8/INT8 3,958); dense = half; "
        .. "FP32 67 TFLOPS. Exact dense values from the NVIDIA H100 (Hopper) architecture whitepaper, "
        .. "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper",
      memory = "H100 datasheet: 80 GB HBM3, 3.35 TB/s; Hopper whitepaper: 132 SMs, 50 MB L2",
      usable_bytes = "deviceQuery 'NVIDIA H100 80GB HBM3 ... 81079 MBytes (85017755648 bytes)' (driver 13.0, public repo); "
        .. "81090 MiB = 85028896768 with a CUDA 12.8 driver",
      nvlink = "H100 datasheet: NVLink 900 GB/s (fourth generation, 18 links); PCIe Gen5 128 GB/s",
      cuda_context_bytes = "taken from the H200 measurement (same GH100 die and SM count): validation/records/llama_h200.jsonl, file date 2026-11-30",
      tdp_w = "H100 datasheet: up to 700 W (configurable)",
    },
  },

  h100_pcie = {
    name = "NVIDIA H100 PCIe",
    vendor = "nvidia",
    arch = "hopper",
    compute_capability = 9.0,
    memory_bytes = 85899345920,          -- 80 GiB HBM2e
    usable_bytes = 85017755648,          -- estimate: same 80 GB framebuffer as H100 SXM
    cuda_context_bytes = 766312448,      -- 730.8 MiB, estimate (114 SMs x 2048)
    mem_bw_bytes_per_s = 2.0e12,
    peak_flops = { fp32 = 51.2e12, tf32 = 378e12, bf16 = 756.5e12, fp16 = 756.5e12, fp8 = 1513e12, int8 = 1513e12 },
    sm_count = 114,
    l2_bytes = 52428800,
    pcie = { gen = 5, lanes = 16 },
    nvlink = { gen = 4, bw_bytes_per_s = 300e9, bridge = true },   -- optional 2-way NVLink bridge, 600 GB/s both ways
    p2p = true,
    tdp_w = 350,
    peak_clock_mhz = 1620,               -- 756.5 TFLOP/s / (114 SMs x 4096 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      peak_clock_mhz = "derived: the datasheet's dense 756.5 TFLOP/s over 114 SMs x 4096 dense bf16 FLOP/clk; a 350 W "
        .. "card, whose step clock is not measured (assumed equal: likely optimistic)",
      spec = "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column): "
        .. "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
      peak_flops = "H100 datasheet (PCIe) sparse: TF32 756, BF16/FP16 1,513, FP8/INT8 3,026; dense = half; FP32 51 TFLOPS",
      memory = "H100 datasheet: 80 GB, 2 TB/s (2,039 GB/s from clocks: 1593 MHz x 5120 bit x 2); 114 SMs (Hopper whitepaper; "
        .. "cudaDeviceQuery 'Multiprocessors: 114' in public repo)",
      usable_bytes = "no H100 PCIe deviceQuery found; nvidia-smi shows 81559 MiB on both H100 PCIe and SXM, so the SXM "
        .. "figure is used (estimate)",
      nvlink = "H100 datasheet: NVLink bridge 600 GB/s (PCIe card, 2-way)",
      cuda_context_bytes = "estimate from measured H200 value (header of this file)",
      tdp_w = "H100 datasheet: 300-350 W (configurable)",
    },
  },

  h100_hbm2e_96g = {
    name = "NVIDIA H100 SXM5 96GB HBM2e",
    vendor = "nvidia",
    arch = "hopper",
    compute_capability = 9.0,
    memory_bytes = 103079215104,         -- 96 GiB HBM2e
    usable_bytes = 102197624832,         -- 96 GiB less the 80 GB SXM's 840.75 MiB the driver keeps
    cuda_context_bytes = 804061184,      -- 766.8 MiB: same die, SM count and software as the measured H200
    mem_bw_bytes_per_s = 2.4e12,
    peak_flops = { fp32 = 66.9e12, tf32 = 494.7e12, bf16 = 989.4e12, fp16 = 989.4e12, fp8 = 1978.9e12, int8 = 1978.9e12 },
    sm_count = 132,
    l2_bytes = 52428800,                 -- 50 MiB
    pcie = { gen = 5, lanes = 16 },
    nvlink = { gen = 4, bw_bytes_per_s = 450e9 },
    p2p = true,
    tdp_w = 500,                         -- the power limit its published runs used (700 W possible)
    peak_clock_mhz = 1830,               -- the SXM's; no step clock: at 500 W none is published
    fleet_only = "Meta's Grand Teton hosts (the board torchtitan's published H100 benchmarks ran on)",
    kind = { memory_bytes = "published", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "published", peak_flops = "carried", sm_count = "carried",
             l2_bytes = "carried", nvlink = "carried", tdp_w = "published" },
    source = {
      spec = "no NVIDIA datasheet for this board is public (the driver names PCI device 2338 'H100 SXM5 96GB'); "
        .. "its operator states its figures in torchtitan benchmarks/llama3_h100_202412_torchtitan.md, 'Hardware': "
        .. "'Each host has 8 NVIDIA H100 GPUs fully connected with NVLink', 'Each H100 GPU is equipped with 96GB "
        .. "HBM2e with 2.4 TB/sec peak memory bandwidth', 'We used the default 500W power limit, although tuning it "
        .. "up to 700W TDP can potentially provide further speedups' (the same text in "
        .. "benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md)",
      memory = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 96GB HBM2e, 2.4 TB/sec peak memory bandwidth",
      tdp_w = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 'the default 500W power limit' (the board's "
        .. "default, the limit every published run used; 700 W settable)",
      usable_bytes = "carried from h100_sxm: 96 GiB less the 840.75 MiB the 80 GB SXM's deviceQuery total leaves of "
        .. "its 80 GiB (no deviceQuery of this board found)",
      cuda_context_bytes = "carried from the H200 measurement (same GH100 die and SM count), as h100_sxm",
      peak_flops = "carried from h100_sxm (132 SMs x 4096 dense bf16 FLOP/clk x 1830 MHz = 989.4): torchtitan's "
        .. "footnote 2 says this HBM2e board's 'actual peak TFLOPs number is between SXM and NVL' (NVL: 835.5 dense "
        .. "bf16, the H100 datasheet's 1,671 sparse halved) 'and we don't know its exact value'; the SXM's is the "
        .. "top of that range. No step_clock_mhz: no clock of this board at its 500 W limit is published, so its "
        .. "GEMMs carry at 1830 MHz (the catalog's assumption where there is no evidence), 0.924 of the H200's 1980",
      sm_count = "carried from h100_sxm: the SXM5 board's 132 SMs and 50 MB L2 (Hopper whitepaper); both of the "
        .. "boards torchtitan's footnote brackets it by (SXM and NVL) have 132",
      l2_bytes = "carried from h100_sxm (Hopper whitepaper: 50 MB L2)",
      nvlink = "carried from h100_sxm (fourth-generation NVLink, 18 links, 900 GB/s both ways): torchtitan says "
        .. "'fully connected with NVLink' without a rate",
    },
  },

  h200 = {
    name = "NVIDIA H200",
    vendor = "nvidia",
    arch = "hopper",
    compute_capability = 9.0,
    memory_bytes = 151397597184,         -- 141 GiB HBM3e (nvidia-smi shows 143771 MiB)
    usable_bytes = 150109880320,         -- 143155.9375 MiB, measured
    cuda_context_bytes = 804061184,      -- 766.8125 MiB, measured (range 750.8-770.8 MiB)
    mem_bw_bytes_per_s = 4.8e12,
    peak_flops = { fp32 = 66.9e12, tf32 = 494.7e12, bf16 = 989.4e12, fp16 = 989.4e12, fp8 = 1978.9e12, int8 = 1978.9e12 },
    sm_count = 132,
    l2_bytes = 52428800,
    pcie = { gen = 5, lanes = 16 },
    nvlink = { gen = 4, bw_bytes_per_s = 450e9 },
    p2p = true,
    tdp_w = 700,
    peak_clock_mhz = 1830,               -- the datasheet's 989.4 holds at 1830 MHz, as on H100 SXM
    step_clock_mhz = 1980,               -- measured: the clock of its GEMMs inside a training step
    sustained_matmul_bf16 = 777.6e12,    -- measured 2026-12-01, MAMF v2 method; in-step plateau 826.3
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "measured",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      sustained_matmul_bf16 = "measured 2026-12-01: python3 validation/harness/measure_sustained_matmul.py "
        .. "(validation/results/sustained_matmul_h200.json): best mean 777.6 TFLOP/s at 2048x2048x13312 over 51 "
        .. "shapes, power up to 698 W of its 700 W limit, SM clock median 1770 MHz; its GEMMs inside a step reach "
        .. "826.3 at 1905-1980 MHz",
      peak_clock_mhz = "989.4 TFLOP/s dense = 132 SMs x 4096 FLOP/clk x 1830 MHz. step_clock_mhz measured 2026-11-30: "
        .. "sm_clock_khz 1980000 in lua/hw/calibrated/h200_gemm.lua, each GEMM timed from an idle card at 1905-1980 MHz "
        .. "(vrsim-calibrate --gemm-idle-ms 200), the clock that torch.profiler's in-step GEMMs match; peak at that "
        .. "clock 1070.5 TFLOP/s, the reference the carried fractions are taken of",
      spec = "NVIDIA H200 Tensor Core GPU product page / datasheet (H200 SXM column): https://www.nvidia.com/en-us/data-center/h200/",
      peak_flops = "H200 datasheet lists sparse figures equal to H100 SXM (TF32 989, BF16/FP16 1,979, FP8/INT8 3,958 TFLOPS), "
        .. "FP32 67; dense = half. Measured through PyTorch (validation/results/hw_h200_pytorch.json): best GEMM 777 TFLOP/s bf16, "
        .. "748 fp16, 381 tf32, 51.6 fp32",
      memory = "H200 datasheet: 141 GB HBM3e, 4.8 TB/s; same GH100 die as H100 (132 SMs, 50 MB L2). Measured device copy "
        .. "2.11 TB/s each way (4.22 TB/s read+write) at 4 GiB, hw_h200_pytorch.json",
      usable_bytes = "measured 2026-11-30 (file date; the truth README gives no run date): torch total 143155.9375 MiB, "
        .. "validation/records/llama_h200.jsonl total_mib; nvidia-smi 143771 MiB, driver 580.159.04",
      cuda_context_bytes = "measured 2026-11-30 (file date): nvsmi_used_minus_reserved_mib = 766.8125 in the bf16/amp LLaMA "
        .. "runs and fit_h200.jsonl, 750.8125 in the fp32 run, 768.8-770.8 in SDXL runs (torch 2.11.0+cu130)",
      nvlink = "MLCommons inference v4.1 system description H200-SXM-141GBx8: '18x 4th Gen NVLink, 900GB/s', 'PCIe Gen5 x16', "
        .. "https://github.com/mlcommons/inference_results_v4.1 (closed/NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json)",
      tdp_w = "H200 datasheet: up to 700 W; MLCommons system description 'H200 TGP 700W'",
    },
  },

  l40s = {
    name = "NVIDIA L40S",
    vendor = "nvidia",
    arch = "ada",
    compute_capability = 8.9,
    memory_bytes = 51539607552,          -- 48 GiB GDDR6 with ECC
    usable_bytes = 47576711168,          -- 45373 MiB (ECC on, driver 12.4)
    cuda_context_bytes = 750583808,      -- 715.8 MiB, estimate (142 SMs x 1536)
    mem_bw_bytes_per_s = 864e9,
    peak_flops = { fp32 = 91.6e12, tf32 = 183e12, bf16 = 362.05e12, fp16 = 362.05e12, fp8 = 733e12, int8 = 733e12 },
    sm_count = 142,
    l2_bytes = 100663296,                -- 96 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = true,
    tdp_w = 350,
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA L40S datasheet: https://www.nvidia.com/en-us/data-center/l40s/ (l40s-datasheet)",
      peak_flops = "L40S datasheet: FP32 91.6 TFLOPS; TF32 183 (366 sparse); BF16/FP16 362.05 (733 sparse); "
        .. "FP8 733 (1,466 sparse); INT8 733 TOPS (1,466 sparse)",
      memory = "L40S datasheet: 48 GB GDDR6 with ECC, 864 GB/s, PCIe Gen4 x16 64 GB/s bidirectional, no NVLink, 350 W; "
        .. "142 SMs (18,176 CUDA cores); L2 96 MB per the Ada whitepaper's AD102 (full die) -- not in the L40S datasheet",
      usable_bytes = "deviceQuery 'NVIDIA L40S ... 45373 MBytes (47576711168 bytes)' (driver 12.4, public repo); an OOM "
        .. "message shows 44.42 GiB (stepfun-ai/Step-Video-T2V#8)",
      p2p = "not stated in the datasheet; assumed true as for data-center boards (no GeForce P2P restriction) -- check "
        .. "with `make calibrate` on a multi-GPU host",
      cuda_context_bytes = "estimate from measured H200 value (header of this file)",
    },
  },

  a10g = {
    name = "NVIDIA A10G",
    vendor = "nvidia",
    arch = "ampere",
    compute_capability = 8.6,
    memory_bytes = 25769803776,          -- 24 GiB GDDR6 with ECC
    usable_bytes = 23609475072,          -- 22516 MiB, estimate from the A10 (same 24 GB ECC memory)
    cuda_context_bytes = 653066240,      -- 622.8 MiB, estimate (80 SMs x 1536)
    mem_bw_bytes_per_s = 600e9,
    peak_flops = { fp32 = 35e12, tf32 = 35e12, bf16 = 70e12, fp16 = 70e12, fp8 = 0, int8 = 280e12 },
    sm_count = 80,
    l2_bytes = 6291456,
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = true,
    tdp_w = 300,
    kind = { memory_bytes = "datasheet", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "carried", sm_count = "carried",
             l2_bytes = "carried", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "No NVIDIA datasheet exists for the A10G (an AWS-only variant of GA102). Figures: Baseten, 'NVIDIA A10 vs A10G "
        .. "for ML model inference', https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ (A10G: same "
        .. "24 GB GDDR6 and 600 GB/s as the A10, higher CUDA-core and lower tensor-core throughput); AWS EC2 G5 page "
        .. "https://aws.amazon.com/ec2/instance-types/g5/ (80 RT cores per GPU, hence 80 SMs)",
      peak_flops = "secondary/derived: FP32 35 TFLOPS (80 SMs x 128 x 2 x 1.71 GHz); FP16/BF16 tensor 70 and TF32 35 "
        .. "(GeForce-like half-rate FP32 accumulate, as Baseten's table reports); INT8 280 is derived (2x the FP16-accumulate rate, 140, as on GeForce GA102) and unverified",
      usable_bytes = "A10 deviceQuery '22516 MBytes (23609475072 bytes)' (driver 12.2, public repo); A10G reports ~22 GB "
        .. "(huggingface/local-gemma#25, NVIDIA forum 'GPU memory less than promised'); not measured on an A10G",
      p2p = "assumed true (data-center board); the g5 multi-GPU sizes have no NVLink",
      sm_count = "carried: 80 RT cores per GPU on the AWS EC2 G5 page, one per SM on GA102 (secondary)",
      l2_bytes = "carried: 6 MB, the GA102 L2 of the A10 and RTX 3090 (GA102 whitepaper), assumed the same",
      cuda_context_bytes = "estimate from measured H200 value (header of this file)",
      tdp_w = "300 W per Baseten's comparison (the A10 is 150 W) -- secondary",
    },
  },

  v100_32g = {
    name = "Tesla V100-SXM2-32GB",
    vendor = "nvidia",
    arch = "volta",
    compute_capability = 7.0,
    memory_bytes = 34359738368,          -- 32 GiB HBM2
    usable_bytes = 34089730048,          -- 32510 MiB
    cuda_context_bytes = 695009280,      -- 662.8 MiB, estimate (80 SMs x 2048)
    mem_bw_bytes_per_s = 900e9,
    -- bf16: no bf16 tensor cores; PyTorch emulates bf16 and its GEMMs run on the CUDA cores at the
    -- fp32 rate (source.peak_flops)
    peak_flops = { fp32 = 15.7e12, tf32 = 0, bf16 = 15.7e12, fp16 = 125e12, fp8 = 0, int8 = 62.8e12 },
    sm_count = 80,
    l2_bytes = 6291456,
    pcie = { gen = 3, lanes = 16 },
    nvlink = { gen = 2, bw_bytes_per_s = 150e9 },   -- 6 links x 25 GB/s; 300 GB/s both ways
    p2p = true,
    tdp_w = 300,
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA Tesla V100 datasheet (SXM2 column): https://www.nvidia.com/en-us/data-center/v100/; "
        .. "Volta whitepaper https://images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf",
      peak_flops = "V100 datasheet (SXM2): FP32 15.7 TFLOPS, tensor ('deep learning') 125 TFLOPS FP16; no TF32, BF16 or "
        .. "FP8 hardware. bf16 = the FP32 rate: PyTorch runs bf16 on sm70 by emulation "
        .. "(torch.cuda.is_bf16_supported(including_emulation=True) is True there), its bf16 GEMMs going to cuBLAS's "
        .. "non-tensor-core kernels, which convert to fp32 and use the FP32 FMA units: at most the FP32 peak; INT8 62.8 is DP4A at 4x the FP32 rate (derived, not "
        .. "in the datasheet, no INT8 tensor cores)",
      memory = "V100 datasheet: 32 GB HBM2, 900 GB/s, NVLink 300 GB/s, 300 W; Volta whitepaper: 80 SMs, 6 MB L2",
      usable_bytes = "deviceQuery 'Tesla V100-SXM2-32GB ... 32510 MBytes (34089730048 bytes)' (public repos)",
      cuda_context_bytes = "estimate from measured H200 value (header of this file); note recent PyTorch CUDA 12.8+ "
        .. "wheels no longer ship sm_70 kernels, so a V100 needs an older build",
    },
  },

  rtx_a6000 = {
    name = "NVIDIA RTX A6000",
    vendor = "nvidia",
    arch = "ampere",
    compute_capability = 8.6,
    memory_bytes = 51539607552,          -- 48 GiB GDDR6 with ECC (off by default)
    usable_bytes = 51160023040,          -- 48790 MiB (driver 12.7)
    cuda_context_bytes = 659357696,      -- 628.8 MiB, estimate (84 SMs x 1536)
    mem_bw_bytes_per_s = 768e9,
    peak_flops = { fp32 = 38.7e12, tf32 = 77.4e12, bf16 = 154.8e12, fp16 = 154.8e12, fp8 = 0, int8 = 309.7e12 },
    sm_count = 84,
    l2_bytes = 6291456,
    pcie = { gen = 4, lanes = 16 },
    nvlink = { gen = 3, bw_bytes_per_s = 56.25e9, bridge = true },  -- optional 2-way bridge, 112.5 GB/s both ways
    p2p = true,
    tdp_w = 300,
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA RTX A6000 datasheet: https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
      peak_flops = "RTX A6000 datasheet: FP32 38.7 TFLOPS, tensor 309.7 TFLOPS (FP16, with sparsity) => 154.8 dense with "
        .. "FP32 accumulate (professional GA102 boards run it at full rate; the A40 datasheet lists the same ratios: "
        .. "149.7 FP16/BF16, 74.8 TF32, 299.3 INT8 at 1740 MHz); TF32 77.4 and INT8 309.7 dense scaled likewise",
      memory = "RTX A6000 datasheet: 48 GB GDDR6 with ECC, 768 GB/s, NVLink 112.5 GB/s (bidirectional), PCIe Gen4 x16, 300 W; "
        .. "84 SMs (10,752 CUDA cores), 6 MB L2",
      usable_bytes = "deviceQuery 'NVIDIA RTX A6000 ... 48790 MBytes (51160023040 bytes)' (driver 12.7, public repo); "
        .. "48676 MiB in another listing (ECC or driver differences)",
      cuda_context_bytes = "estimate from measured H200 value (header of this file)",
    },
  },

  -- The cards below were added together; each figure's kind (kind = {...}) says whether it was
  -- read off a card (measured), taken from another card or rule (carried), or read from the
  -- vendor's datasheet/whitepaper/product page (datasheet). Dense peaks only (sparse halved).

  l4 = {
    name = "NVIDIA L4",
    vendor = "nvidia",
    arch = "ada",
    compute_capability = 8.9,
    memory_bytes = 25769803776,          -- 24 GiB GDDR6 with ECC
    usable_bytes = 23612293120,          -- 22518 MiB (ECC on, driver 12.0)
    cuda_context_bytes = 618463232,      -- 589.8 MiB, estimate (58 SMs x 1536)
    mem_bw_bytes_per_s = 300e9,
    peak_flops = { fp32 = 30.3e12, tf32 = 60e12, bf16 = 121e12, fp16 = 121e12, fp8 = 242.5e12, int8 = 242.5e12 },
    sm_count = 58,
    l2_bytes = 50331648,                 -- 48 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = true,
    tdp_w = 72,
    peak_clock_mhz = 2040,               -- 121 TFLOP/s / (58 SMs x 1024 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "measured",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA L4 Tensor Core GPU datasheet: https://www.nvidia.com/en-us/data-center/l4/ (nvidia-l4-datasheet)",
      peak_flops = "L4 datasheet (sparse figures marked *): FP32 30.3 TFLOPS; TF32 120*; BF16/FP16 242*; FP8 485*; "
        .. "INT8 485* TOPS; dense = half. Full-rate FP32 accumulate (data-center Ada, as the L40S)",
      memory = "L4 datasheet: 24 GB GDDR6, 300 GB/s, PCIe Gen4 x16, 72 W, no NVLink; L2 48 MB per the Ada whitepaper's "
        .. "AD104 (https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf)",
      sm_count = "deviceQuery '(58) Multiprocessors' on an L4 (driver 12.0, public repo)",
      usable_bytes = "deviceQuery 'NVIDIA L4 ... 22518 MBytes (23612293120 bytes)' (CUDA driver 12.0 / runtime 11.8, "
        .. "public repo): ECC takes its share of the GDDR6",
      nvlink = "L4 datasheet: no NVLink; PCIe Gen4 x16",
      p2p = "assumed true (data-center board, no GeForce P2P restriction)",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "L4 datasheet: 72 W",
      peak_clock_mhz = "derived: 121 TFLOP/s dense over 58 SMs x 1024 FLOP/clk = 2040 MHz, the L4's boost clock",
    },
  },

  t4 = {
    name = "Tesla T4",
    vendor = "nvidia",
    arch = "turing",
    compute_capability = 7.5,
    memory_bytes = 17179869184,          -- 16 GiB GDDR6 with ECC
    usable_bytes = 15843721216,          -- 15110 MiB (ECC on, driver 11.2)
    cuda_context_bytes = 569180160,      -- 542.8 MiB, estimate (40 SMs x 1024)
    mem_bw_bytes_per_s = 320e9,
    -- bf16: no bf16 tensor cores on Turing; PyTorch's bf16 matmuls run on the CUDA cores at the
    -- fp32 rate (see v100_32g)
    peak_flops = { fp32 = 8.1e12, tf32 = 0, bf16 = 8.1e12, fp16 = 65e12, fp8 = 0, int8 = 130e12 },
    sm_count = 40,
    l2_bytes = 4194304,                  -- 4 MiB
    pcie = { gen = 3, lanes = 16 },
    nvlink = false,
    p2p = true,
    tdp_w = 70,
    peak_clock_mhz = 1590,               -- 65 TFLOP/s / (40 SMs x 1024 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "measured",
             l2_bytes = "measured", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA T4 Tensor Core GPU datasheet: https://www.nvidia.com/en-us/data-center/tesla-t4/ (t4-tensor-core-datasheet)",
      peak_flops = "T4 datasheet: FP32 8.1 TFLOPS; mixed precision (FP16/FP32) 65 TFLOPS; INT8 130 TOPS; no TF32, BF16 or "
        .. "FP8 units. bf16 = the FP32 rate: PyTorch emulates bf16 on pre-Ampere GPUs "
        .. "(torch.cuda.is_bf16_supported(including_emulation=True)), its GEMMs run in cuBLAS's non-tensor-core kernels",
      memory = "T4 datasheet: 16 GB GDDR6, 320+ GB/s, PCIe Gen3 x16, 70 W",
      sm_count = "deviceQuery '(40) Multiprocessors ... GPU Max Clock rate 1590 MHz', 'L2 Cache Size 4194304 bytes' (public repos)",
      l2_bytes = "deviceQuery on a T4: L2 Cache Size 4194304 bytes (public repo)",
      usable_bytes = "deviceQuery 'Tesla T4 ... 15110 MBytes (15843721216 bytes)' (driver 11.2, public repo); others show "
        .. "15109 MiB and, on an AWS g4dn with driver 12.5, 14918 MiB (15642329088 bytes)",
      nvlink = "T4 datasheet: no NVLink; PCIe Gen3 x16",
      p2p = "assumed true (data-center board)",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file; 1024 threads per SM on cc 7.5)",
      tdp_w = "T4 datasheet: 70 W",
      peak_clock_mhz = "derived: 65 TFLOP/s over 40 SMs x 1024 FLOP/clk = 1590 MHz, deviceQuery's max clock",
    },
  },

  a10 = {
    name = "NVIDIA A10",
    vendor = "nvidia",
    arch = "ampere",
    compute_capability = 8.6,
    memory_bytes = 25769803776,          -- 24 GiB GDDR6 with ECC
    usable_bytes = 23609475072,          -- 22516 MiB (ECC on, driver 12.2)
    cuda_context_bytes = 640483328,      -- 610.8 MiB, estimate (72 SMs x 1536)
    mem_bw_bytes_per_s = 600e9,
    peak_flops = { fp32 = 31.2e12, tf32 = 62.5e12, bf16 = 125e12, fp16 = 125e12, fp8 = 0, int8 = 250e12 },
    sm_count = 72,
    l2_bytes = 6291456,
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = true,
    tdp_w = 150,
    peak_clock_mhz = 1695,               -- 125 TFLOP/s / (72 SMs x 1024 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "measured", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA A10 Tensor Core GPU datasheet: https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
      peak_flops = "A10 datasheet (sparse figures marked *): FP32 31.2 TFLOPS; TF32 62.5 (125*); BF16/FP16 125 (250*); "
        .. "INT8 250 (500*) TOPS; no FP8",
      memory = "A10 datasheet: 24 GB GDDR6, 600 GB/s, PCIe Gen4 x16, 150 W; 72 SMs (9,216 CUDA cores / 128)",
      l2_bytes = "deviceQuery on an A10: L2 Cache Size 6291456 bytes (aalanwyr/face2cuda, driver 12.2)",
      usable_bytes = "deviceQuery 'NVIDIA A10 ... 21.99 GBytes (23609475072 bytes)' (driver 12.2, aalanwyr/face2cuda)",
      nvlink = "A10 datasheet: no NVLink",
      p2p = "assumed true (data-center board)",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "A10 datasheet: 150 W",
      peak_clock_mhz = "derived: 125 TFLOP/s over 72 SMs x 1024 FLOP/clk = 1695 MHz, deviceQuery's clock",
    },
  },

  rtx4060ti_16g = {
    name = "NVIDIA GeForce RTX 4060 Ti",
    vendor = "nvidia",
    arch = "ada",
    compute_capability = 8.9,
    memory_bytes = 17179869184,          -- 16 GiB GDDR6 (the 16 GB model)
    usable_bytes = 16722821120,          -- 15948 MiB (driver 13.1)
    cuda_context_bytes = 580714496,      -- 553.8 MiB, estimate (34 SMs x 1536)
    mem_bw_bytes_per_s = 288e9,          -- 18 Gbps x 128 bit
    peak_flops = { fp32 = 22.06e12, tf32 = 22.06e12, bf16 = 44.1e12, fp16 = 44.1e12, fp8 = 88.3e12, int8 = 176.5e12 },
    sm_count = 34,
    l2_bytes = 33554432,                 -- 32 MiB
    pcie = { gen = 4, lanes = 8 },
    nvlink = false,
    p2p = false,
    tdp_w = 165,
    peak_clock_mhz = 2535,               -- 44.1 TFLOP/s / (34 SMs x 512 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "measured",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA GeForce RTX 4060 Ti product page (specs, 16GB column): "
        .. "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4060-4060ti/",
      peak_flops = "product page: 353 AI TOPS (FP8 with sparsity and FP16 accumulate) and 22 TFLOPS FP32 (4352 CUDA cores "
        .. "at 2535 MHz). Dense rates follow as in the Ada whitepaper's GeForce tables: FP8 (FP16 acc) 176.5, FP8 with "
        .. "FP32 acc 88.3, FP16/BF16 with FP32 acc 44.1 (half the FP16-accumulate rate), TF32 22.06, INT8 176.5 = "
        .. "34 SMs x 512 dense bf16 FLOP/clk x 2535 MHz",
      memory = "product page: 16 GB GDDR6, 128-bit, 18 Gbps (288 GB/s), PCIe 4.0 x8, 165 W; L2 32 MB (Ada whitepaper family table)",
      sm_count = "deviceQuery '(034) Multiprocessors, (128) CUDA Cores/MP: 4352' (driver 13.1, public repo)",
      usable_bytes = "deviceQuery 'NVIDIA GeForce RTX 4060 Ti ... 15948 MBytes (16722821120 bytes)' (driver 13.1, public repo); "
        .. "a WSL/driver 13.0 listing shows 16380 MiB, which is not what Linux drivers give",
      nvlink = "GeForce Ada: no NVLink",
      p2p = "GeForce drivers do not enable PCIe peer-to-peer",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "product page: 165 W total graphics power (16 GB)",
    },
  },

  rtx4070ti_super = {
    name = "NVIDIA GeForce RTX 4070 Ti SUPER",
    vendor = "nvidia",
    arch = "ada",
    compute_capability = 8.9,
    memory_bytes = 17179869184,          -- 16 GiB GDDR6X
    usable_bytes = 16722821120,          -- carried from the RTX 4060 Ti 16 GB
    cuda_context_bytes = 631046144,      -- 601.8 MiB, estimate (66 SMs x 1536)
    mem_bw_bytes_per_s = 672e9,          -- 21 Gbps x 256 bit
    peak_flops = { fp32 = 44.1e12, tf32 = 44.1e12, bf16 = 88.2e12, fp16 = 88.2e12, fp8 = 176.5e12, int8 = 352.9e12 },
    sm_count = 66,
    l2_bytes = 50331648,                 -- 48 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = false,
    tdp_w = 285,
    peak_clock_mhz = 2610,               -- 88.2 TFLOP/s / (66 SMs x 512 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA GeForce RTX 4070 family product page (specs, 4070 Ti SUPER column): "
        .. "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4070-family/",
      peak_flops = "product page: 706 AI TOPS (FP8, sparse, FP16 accumulate), 8448 CUDA cores (66 SMs) at 2610 MHz boost; "
        .. "dense FP16/BF16 with FP32 accumulate 88.2 = 66 x 512 x 2610 MHz (GeForce half rate, as the Ada whitepaper's "
        .. "tables), FP8 with FP32 acc 176.5, INT8 352.9, FP32 and TF32 44.1",
      memory = "product page: 16 GB GDDR6X, 256-bit, 21 Gbps (672 GB/s), 285 W; AD103 with 48 MB L2",
      usable_bytes = "carried: no deviceQuery found; the RTX 4060 Ti 16 GB's measured total (same Ada generation, same "
        .. "16 GiB framebuffer, driver 13.1)",
      nvlink = "GeForce Ada: no NVLink",
      p2p = "GeForce drivers do not enable PCIe peer-to-peer",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "product page: 285 W total graphics power",
    },
  },

  rtx4080 = {
    name = "NVIDIA GeForce RTX 4080",
    vendor = "nvidia",
    arch = "ada",
    compute_capability = 8.9,
    memory_bytes = 17179869184,          -- 16 GiB GDDR6X
    usable_bytes = 16722821120,          -- carried from the RTX 4060 Ti 16 GB
    cuda_context_bytes = 646774784,      -- 616.8 MiB, estimate (76 SMs x 1536)
    mem_bw_bytes_per_s = 716.8e9,        -- 22.4 Gbps x 256 bit
    peak_flops = { fp32 = 48.7e12, tf32 = 48.7e12, bf16 = 97.5e12, fp16 = 97.5e12, fp8 = 194.9e12, int8 = 389.9e12 },
    sm_count = 76,
    l2_bytes = 67108864,                 -- 64 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = false,
    tdp_w = 320,
    peak_clock_mhz = 2505,               -- 97.5 TFLOP/s / (76 SMs x 512 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA Ada GPU Architecture whitepaper, Appendix A (GeForce RTX 4080 16GB): "
        .. "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
      peak_flops = "Ada whitepaper: FP32 48.7 TFLOPS; FP16/BF16 with FP32 accumulate 97.5 (194.9 with FP16 accumulate); "
        .. "FP8 with FP32 accumulate 194.9; INT8 389.9 TOPS; all dense",
      memory = "Ada whitepaper: 16 GB GDDR6X, 22.4 Gbps, 256-bit, 716.8 GB/s; 76 SMs, 64 MB L2; 320 W",
      usable_bytes = "carried: no deviceQuery found; the RTX 4060 Ti 16 GB's measured total (same Ada generation, same "
        .. "16 GiB framebuffer, driver 13.1)",
      nvlink = "GeForce Ada: no NVLink",
      p2p = "GeForce drivers do not enable PCIe peer-to-peer",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "Ada whitepaper / product page: 320 W total graphics power",
    },
  },

  rtx5080 = {
    name = "NVIDIA GeForce RTX 5080",
    vendor = "nvidia",
    arch = "blackwell",
    compute_capability = 12.0,
    memory_bytes = 17179869184,          -- 16 GiB GDDR7
    usable_bytes = 16480665600,          -- carried: 16 GiB less the RTX 5090's measured reservation
    cuda_context_bytes = 659357696,      -- 628.8 MiB, estimate (84 SMs x 1536)
    mem_bw_bytes_per_s = 960e9,          -- 30 Gbps x 256 bit
    peak_flops = { fp32 = 56.3e12, tf32 = 56.3e12, bf16 = 112.6e12, fp16 = 112.6e12, fp8 = 225.1e12, int8 = 450.2e12 },
    sm_count = 84,
    l2_bytes = 67108864,                 -- 64 MiB
    pcie = { gen = 5, lanes = 16 },
    nvlink = false,
    p2p = false,
    tdp_w = 360,
    peak_clock_mhz = 2617,               -- 112.6 TFLOP/s / (84 SMs x 512 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix (GeForce RTX 5080): "
        .. "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf; "
        .. "product page https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/rtx-5080/",
      peak_flops = "product page: 1801 AI TOPS (FP4, sparse), 10752 CUDA cores (84 SMs) at 2617 MHz: FP32 56.3. Dense "
        .. "FP16/BF16 with FP32 accumulate 112.6 = 84 x 512 x 2617 MHz (half the FP16-accumulate rate, as on every "
        .. "GeForce card in the whitepapers); FP8 with FP32 accumulate 225.1 and INT8 450.2 in the same ratios as the "
        .. "RTX 4090's",
      memory = "whitepaper / product page: 16 GB GDDR7, 30 Gbps, 256-bit (960 GB/s), 64 MB L2, PCIe 5.0 x16, 360 W",
      usable_bytes = "carried: no deviceQuery found; 16 GiB less what the driver keeps on the RTX 5090 (32 GiB - "
        .. "33660534784 bytes = 667 MiB, same Blackwell generation, driver 13.0)",
      compute_capability = "12.0 (sm_120), as deviceQuery prints for GeForce RTX 50 cards",
      nvlink = "GeForce Blackwell: no NVLink",
      p2p = "GeForce drivers do not enable PCIe peer-to-peer",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file; 1536 threads per SM on sm_120)",
      tdp_w = "product page: 360 W total graphics power",
    },
  },

  rtx5090 = {
    name = "NVIDIA GeForce RTX 5090",
    vendor = "nvidia",
    arch = "blackwell",
    compute_capability = 12.0,
    memory_bytes = 34359738368,          -- 32 GiB GDDR7
    usable_bytes = 33660534784,          -- 32101 MiB (driver 13.0)
    cuda_context_bytes = 794624000,      -- 757.8 MiB, estimate (170 SMs x 1536)
    mem_bw_bytes_per_s = 1792e9,         -- 28 Gbps x 512 bit
    peak_flops = { fp32 = 104.8e12, tf32 = 104.8e12, bf16 = 209.5e12, fp16 = 209.5e12, fp8 = 419e12, int8 = 838e12 },
    sm_count = 170,
    l2_bytes = 100663296,                -- 96 MiB
    pcie = { gen = 5, lanes = 16 },
    nvlink = false,
    p2p = false,
    tdp_w = 575,
    peak_clock_mhz = 2407,               -- 209.5 TFLOP/s / (170 SMs x 512 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "measured",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix (GeForce RTX 5090): "
        .. "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf; "
        .. "product page https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/rtx-5090/",
      peak_flops = "whitepaper: FP32 104.8 TFLOPS; FP16/BF16 tensor with FP32 accumulate 209.5 dense (419 with FP16 "
        .. "accumulate); 3352 AI TOPS is FP4 with sparsity. FP8 with FP32 accumulate 419 and INT8 838 dense, the Ada "
        .. "GeForce ratios (4090: 330.3 and 660.6 to 165.2)",
      memory = "whitepaper: 32 GB GDDR7, 28 Gbps, 512-bit, 1792 GB/s; 96 MB L2; PCIe 5.0 x16; 575 W",
      sm_count = "deviceQuery '(170) Multiprocessors ... GPU Max Clock rate 2407 MHz' (driver 13.0, public repos)",
      usable_bytes = "deviceQuery 'NVIDIA GeForce RTX 5090 ... 32101 MBytes (33660534784 bytes)' (driver 13.0 / runtime "
        .. "12.8, two public repos); another card shows 32109 MiB (33668857856 bytes)",
      compute_capability = "deviceQuery 'CUDA Capability Major/Minor version number: 12.0'",
      nvlink = "GeForce Blackwell: no NVLink",
      p2p = "GeForce drivers do not enable PCIe peer-to-peer",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file; 1536 threads per SM on sm_120)",
      tdp_w = "product page: 575 W total graphics power",
    },
  },

  rtx6000_ada = {
    name = "NVIDIA RTX 6000 Ada Generation",
    vendor = "nvidia",
    arch = "ada",
    compute_capability = 8.9,
    memory_bytes = 51539607552,          -- 48 GiB GDDR6 with ECC (off by default)
    usable_bytes = 51160023040,          -- carried from the RTX A6000 (same 48 GiB framebuffer)
    cuda_context_bytes = 750583808,      -- 715.8 MiB, estimate (142 SMs x 1536)
    mem_bw_bytes_per_s = 960e9,
    peak_flops = { fp32 = 91.1e12, tf32 = 182.1e12, bf16 = 364.2e12, fp16 = 364.2e12, fp8 = 728.5e12, int8 = 728.5e12 },
    sm_count = 142,
    l2_bytes = 100663296,                -- 96 MiB
    pcie = { gen = 4, lanes = 16 },
    nvlink = false,
    p2p = true,
    tdp_w = 300,
    peak_clock_mhz = 2505,               -- 364.2 TFLOP/s / (142 SMs x 1024 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "carried", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA RTX 6000 Ada Generation datasheet: https://www.nvidia.com/en-us/design-visualization/rtx-6000/",
      peak_flops = "RTX 6000 Ada datasheet: FP32 91.1 TFLOPS; Tensor performance 1,457 TFLOPS (FP8, sparse) => FP8 728.5 "
        .. "dense; FP16/BF16 with FP32 accumulate 364.2 (professional Ada at full rate, as the L40S), TF32 182.1, INT8 728.5",
      memory = "RTX 6000 Ada datasheet: 48 GB GDDR6 with ECC, 960 GB/s, PCIe Gen4 x16, 300 W, no NVLink; 142 SMs "
        .. "(18,176 CUDA cores); 96 MB L2 (Ada whitepaper, AD102)",
      usable_bytes = "carried: no deviceQuery found (nvidia-smi shows 49140 MiB, the board, not torch's total); the RTX "
        .. "A6000's measured 48790 MiB (same 48 GiB GDDR6 framebuffer with ECC off, driver 12.7)",
      nvlink = "RTX 6000 Ada datasheet: no NVLink",
      p2p = "two RTX 6000 Ada report peer access (cuda-samples conjugateGradientMultiDeviceCG 'Device=0 CAN Access Peer "
        .. "Device=1', public repo)",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "RTX 6000 Ada datasheet: 300 W",
    },
  },

  rtx_a5000 = {
    name = "NVIDIA RTX A5000",
    vendor = "nvidia",
    arch = "ampere",
    compute_capability = 8.6,
    memory_bytes = 25769803776,          -- 24 GiB GDDR6 with ECC (off by default)
    usable_bytes = 25402343424,          -- 24226 MiB
    cuda_context_bytes = 627900416,      -- 598.8 MiB, estimate (64 SMs x 1536)
    mem_bw_bytes_per_s = 768e9,
    peak_flops = { fp32 = 27.8e12, tf32 = 55.6e12, bf16 = 111.1e12, fp16 = 111.1e12, fp8 = 0, int8 = 222.2e12 },
    sm_count = 64,
    l2_bytes = 6291456,
    pcie = { gen = 4, lanes = 16 },
    nvlink = { gen = 3, bw_bytes_per_s = 56.25e9, bridge = true },  -- optional 2-way bridge, 112.5 GB/s both ways
    p2p = true,
    tdp_w = 230,
    peak_clock_mhz = 1695,               -- 111.1 TFLOP/s / (64 SMs x 1024 FLOP/clk)
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "measured",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA RTX A5000 datasheet: https://www.nvidia.com/en-us/design-visualization/rtx-a5000/",
      peak_flops = "RTX A5000 datasheet: FP32 27.8 TFLOPS, tensor 222.2 TFLOPS (FP16, sparse) => 111.1 dense with FP32 "
        .. "accumulate (professional GA102 at full rate, as the RTX A6000); TF32 55.6 and INT8 222.2 dense scaled likewise",
      memory = "RTX A5000 datasheet: 24 GB GDDR6 with ECC, 768 GB/s, NVLink 112.5 GB/s (2-way bridge), PCIe Gen4 x16, "
        .. "230 W; 8,192 CUDA cores (64 SMs), 6 MB L2 (GA102)",
      sm_count = "device_info 'NVIDIA RTX A5000 ... 64 Multiprocessors' (public repo)",
      usable_bytes = "device_info 'NVIDIA RTX A5000 ... 24226 MBytes (25402343424 bytes)' (public repo, driver not shown)",
      nvlink = "RTX A5000 datasheet: NVLink bridge (2-way), 112.5 GB/s bidirectional; sold without one",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "RTX A5000 datasheet: 230 W",
    },
  },

  v100_16g = {
    name = "Tesla V100-SXM2-16GB",
    vendor = "nvidia",
    arch = "volta",
    compute_capability = 7.0,
    memory_bytes = 17179869184,          -- 16 GiB HBM2
    usable_bytes = 16928342016,          -- 16144 MiB (driver 12.4)
    cuda_context_bytes = 695009280,      -- 662.8 MiB, estimate (80 SMs x 2048)
    mem_bw_bytes_per_s = 900e9,
    -- bf16: no bf16 tensor cores; bf16 GEMMs run on the CUDA cores at the fp32 rate (v100_32g)
    peak_flops = { fp32 = 15.7e12, tf32 = 0, bf16 = 15.7e12, fp16 = 125e12, fp8 = 0, int8 = 62.8e12 },
    sm_count = 80,
    l2_bytes = 6291456,
    pcie = { gen = 3, lanes = 16 },
    nvlink = { gen = 2, bw_bytes_per_s = 150e9 },
    p2p = true,
    tdp_w = 300,
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "datasheet",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA Tesla V100 datasheet (SXM2 column): https://www.nvidia.com/en-us/data-center/v100/; "
        .. "Volta whitepaper https://images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf",
      peak_flops = "as v100_32g (same GV100 board): FP32 15.7, tensor FP16 125; bf16 at the FP32 rate (v100_32g says why)",
      memory = "V100 datasheet: 16 GB HBM2, 900 GB/s, NVLink 300 GB/s, 300 W; Volta whitepaper: 80 SMs, 6 MB L2",
      usable_bytes = "deviceQuery 'Tesla V100-SXM2-16GB ... 16144 MBytes (16928342016 bytes)' (driver 12.4, public repo); "
        .. "older drivers show 16160 MiB (16945512448 bytes, CUDA 9.0)",
      nvlink = "V100 datasheet: NVLink 300 GB/s (6 links)",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "V100 datasheet: 300 W (SXM2)",
    },
  },

  b200 = {
    name = "NVIDIA B200",
    vendor = "nvidia",
    arch = "blackwell",
    compute_capability = 10.0,
    memory_bytes = 193273528320,         -- 180 GiB HBM3e
    usable_bytes = 191502483456,         -- 182631 MiB (to the MiB)
    cuda_context_bytes = 837615616,      -- 798.8 MiB, estimate (148 SMs x 2048)
    mem_bw_bytes_per_s = 8e12,
    peak_flops = { fp32 = 75e12, tf32 = 1125e12, bf16 = 2250e12, fp16 = 2250e12, fp8 = 4500e12, int8 = 4500e12 },
    sm_count = 148,
    l2_bytes = 132644864,                -- 126.5 MiB
    pcie = { gen = 5, lanes = 16 },
    nvlink = { gen = 5, bw_bytes_per_s = 900e9 },   -- 18 links; 1.8 TB/s both ways
    p2p = true,
    tdp_w = 1000,
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "measured",
             l2_bytes = "measured", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "NVIDIA HGX B200 / DGX B200 datasheet (per GPU = the 8-GPU figures / 8): "
        .. "https://www.nvidia.com/en-us/data-center/hgx/ ; https://www.nvidia.com/en-us/data-center/dgx-b200/",
      peak_flops = "HGX B200 datasheet, 8 GPUs with sparsity: FP8 72 PFLOPS, INT8 72 POPS, FP16/BF16 36 PFLOPS, TF32 18 "
        .. "PFLOPS; FP32 600 TFLOPS (dense). Per GPU dense = /8 /2: FP8 4.5, INT8 4.5, BF16/FP16 2.25, TF32 1.125 PFLOPS; FP32 75",
      memory = "HGX B200 datasheet: 1.44 TB HBM3e for 8 GPUs (180 GB each), 64 TB/s (8 TB/s each); NVLink 5 1.8 TB/s per GPU; "
        .. "up to 1000 W per GPU",
      sm_count = "a CUDA device listing of an 8x B200 host: 'SM Count 148', 'L2 Cache 129536 KiB', 'Memory (VRAM) 182631 "
        .. "MiB' (public repo, gpu_sm.cu output)",
      l2_bytes = "the same listing: 129536 KiB",
      usable_bytes = "cudaDeviceProp.totalGlobalMem printed as 182631 MiB by the same listing (rounded down to the MiB; "
        .. "driver not shown)",
      nvlink = "HGX B200 datasheet: fifth-generation NVLink, 1.8 TB/s per GPU (bidirectional); NVSwitch in the baseboard",
      cuda_context_bytes = "carried: estimate from the measured H200 value (header of this file)",
      tdp_w = "HGX B200 datasheet: up to 1000 W per GPU",
    },
  },

  mi300x = {
    name = "AMD Instinct MI300X",
    vendor = "amd",
    arch = "cdna3",
    compute_capability = 9.4,            -- what torch.cuda.get_device_properties reports (gfx942)
    memory_bytes = 206158430208,         -- 192 GiB HBM3
    usable_bytes = 206141652992,         -- 196592 MiB (torch total_memory, ROCm 6.x)
    cuda_context_bytes = 1164771328,     -- 1110.8 MiB, carried by the header formula (304 CUs x 2048)
    mem_bw_bytes_per_s = 5.3e12,
    peak_flops = { fp32 = 163.4e12, tf32 = 653.7e12, bf16 = 1307.4e12, fp16 = 1307.4e12, fp8 = 2614.9e12, int8 = 2614.9e12 },
    sm_count = 304,                      -- compute units
    l2_bytes = 33554432,                 -- 4 MiB per XCD x 8 (the 256 MB Infinity Cache not counted)
    pcie = { gen = 5, lanes = 16 },
    -- Infinity Fabric (xGMI): a full mesh of the 8 OAM GPUs, 7 links of 64 GB/s a direction;
    -- the collectives take it where NVLink would be (links.lua nvlink.xgmi_mi300x)
    nvlink = { gen = "xgmi_mi300x", bw_bytes_per_s = 448e9 },
    p2p = true,
    tdp_w = 750,
    -- what vrsim does not model on this card: each a named note in the run's output
    not_modelled = {
      "ROCm's PyTorch uses the same caching allocator (HIP), but its context size is not measured: "
        .. "carried by the NVIDIA formula of lua/hw/gpus.lua",
      "which fused attention ROCm's scaled_dot_product_attention runs (AOTriton or CK flash, "
        .. "memory-efficient) and its workspace are taken as on an NVIDIA card (flash)",
      "only the hipBLASLt workspace (76 MiB a stream, the default on gfx942) is taken at each thread's "
        .. "first GEMM: a hipBLAS handle's 128 MiB workspace, made by GEMMs hipBLASLt does not take, is not",
      "the step time carries the H200's measured CUDA kernels to this card through its datasheet peaks: "
        .. "ROCm kernels are not measured",
    },
    kind = { memory_bytes = "datasheet", usable_bytes = "measured", cuda_context_bytes = "carried",
             mem_bw_bytes_per_s = "datasheet", peak_flops = "datasheet", sm_count = "measured",
             l2_bytes = "datasheet", nvlink = "datasheet", tdp_w = "datasheet" },
    source = {
      spec = "AMD Instinct MI300X accelerator data sheet: https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html "
        .. "(amd-instinct-mi300x-data-sheet.pdf)",
      peak_flops = "MI300X data sheet: FP32 (vector) 163.4 TFLOPS; TF32 653.7; FP16/BF16 1307.4; FP8 2614.9; INT8 2614.9 "
        .. "TOPS; all dense (sparsity doubles the matrix rates)",
      memory = "MI300X data sheet: 192 GB HBM3, 5.3 TB/s peak; 304 compute units; 256 MB Infinity Cache; 750 W; PCIe Gen5 x16; "
        .. "CDNA 3 whitepaper: 4 MB L2 per XCD, 8 XCDs",
      sm_count = "torch.cuda.get_device_properties: multi_processor_count=304 (ROCm/ROCm#4203, torch 2.6)",
      usable_bytes = "torch.cuda.get_device_properties: total_memory=196592MB on an MI300X (ROCm/ROCm#4203, torch 2.6 on "
        .. "ROCm 6.2.4; the same in a PyTorch 2.3 container listing)",
      compute_capability = "torch reports major=9, minor=4 (gcnArchName gfx942); used here only for the thread count per "
        .. "compute unit (2048: 32 wavefronts of 64)",
      nvlink = "MI300X data sheet: AMD Infinity Fabric, 7 links x 128 GB/s (bidirectional) = 896 GB/s peer-to-peer; "
        .. "8 GPUs fully connected on the OAM platform",
      cuda_context_bytes = "carried: the NVIDIA estimate of the header of this file, 304 CUs x 2048 threads; ROCm's "
        .. "context is not measured (a named note in every run on this card)",
      cublas_workspace = "PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp: on ROCm the hipBLASLt workspace defaults to "
        .. "76 MiB (HIPBLASLT_WORKSPACE_SIZE), the hipBLAS one to 128 MiB on gfx94x/gfx95x; ATen/Context.cpp "
        .. "blasPreferredBackend: AMD Instinct gfx90a/gfx942 prefer hipBLASLt",
      tdp_w = "MI300X data sheet: 750 W",
    },
  },
}
