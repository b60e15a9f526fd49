-- lua/hw/hosts.lua: typical host configurations, plain data.  gpu = catalog name in hw.gpus,
-- intra = how the node's GPUs talk (a key of hw.links: "pcie.gen4_x16", "nvswitch.gen2", ...),
-- inter = the per-GPU network between nodes (hw.links.network key) or false.
-- pinned_limit_bytes: how much page-locked host memory offload may use.  CUDA can pin almost all
-- of RAM, but the OS, the data loaders and each rank's pageable state need the rest; we assume
-- 80 % of RAM unless stated (an assumption, not a measured limit).
local GiB = 1073741824
return {
  dgx_a100 = {
    gpu = "a100_80g", gpus = 8, nodes = 1,
    cpu = "2x AMD EPYC 7742 (128 cores)", cpu_cores = 128,
    host_ram_bytes = 2048 * GiB, pinned_limit_bytes = 1638 * GiB,
    intra = "nvswitch.gen2", pcie = "pcie.gen4_x16", inter = "network.ib_hdr", nics = 8,
    source = "NVIDIA DGX A100 datasheet / user guide: 8x A100 80GB (640GB system; 8x A100 40GB with 1 TB in the 320GB "
      .. "system), 6 NVSwitches, 2x EPYC 7742, 2 TB RAM, 8x ConnectX-6 200 Gb/s HDR for compute. Pinned limit: 80 % assumption",
  },
  dgx_a100_320g = {
    gpu = "a100_40g", gpus = 8, nodes = 1, cpu_cores = 128,
    host_ram_bytes = 1024 * GiB, pinned_limit_bytes = 819 * GiB,
    intra = "nvswitch.gen2", pcie = "pcie.gen4_x16", inter = "network.ib_hdr", nics = 8,
    source = "NVIDIA DGX A100 datasheet (320GB system: 8x A100 40GB, 1 TB RAM). Pinned limit: 80 % assumption",
  },
  dgx_h100 = {
    gpu = "h100_sxm", gpus = 8, nodes = 1,
    cpu = "2x Intel Xeon Platinum 8480C (112 cores)", cpu_cores = 112,
    host_ram_bytes = 2048 * GiB, pinned_limit_bytes = 1638 * GiB,
    intra = "nvswitch.gen3", pcie = "pcie.gen5_x16", inter = "network.ib_ndr", nics = 8,
    source = "NVIDIA DGX H100 datasheet: 8x H100 80GB, 4 NVSwitches (900 GB/s per GPU), 2x Xeon Platinum 8480C, 2 TB RAM, "
      .. "8x ConnectX-7 400 Gb/s. Pinned limit: 80 % assumption",
  },
  hgx_h200 = {
    gpu = "h200", gpus = 8, nodes = 1,
    cpu = "2x Intel Xeon Platinum 8480C (56 cores each)", cpu_cores = 112,
    host_ram_bytes = 2048 * GiB, pinned_limit_bytes = 1638 * GiB,
    intra = "nvswitch.gen3", pcie = "pcie.gen5_x16", inter = "network.ib_ndr", nics = 8,
    source = "MLCommons inference v4.1, closed/NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json: 8x H200-SXM-141GB, "
      .. "'18x 4th Gen NVLink, 900GB/s', PCIe Gen5 x16, host memory 2 TB (32x 64GB), 2x Xeon Platinum 8480C, "
      .. "400 Gb/s InfiniBand. Pinned limit: 80 % assumption",
  },
  dgx1_v100 = {
    gpu = "v100_32g", gpus = 8, nodes = 1,
    cpu = "2x Intel Xeon E5-2698 v4 (40 cores)", cpu_cores = 40,
    host_ram_bytes = 512 * GiB, pinned_limit_bytes = 409 * GiB,
    intra = "nvlink.gen2", pcie = "pcie.gen3_x16", inter = "network.ib_edr", nics = 4,
    topology_note = "hybrid cube-mesh: each GPU has NVLink to 4 of the other 7, not all-to-all",
    source = "NVIDIA DGX-1 with Tesla V100 datasheet: 8x V100, NVLink hybrid cube-mesh, 2x E5-2698 v4, 512 GB RAM, "
      .. "4x IB EDR 100 Gb/s. Pinned limit: 80 % assumption",
  },
  aws_p4d = {
    gpu = "a100_40g", gpus = 8, nodes = 1,
    cpu = "Intel Xeon Platinum 8275CL, 96 vCPU", cpu_cores = 48,
    host_ram_bytes = 1152 * GiB, pinned_limit_bytes = 921 * GiB,
    intra = "nvswitch.gen2", pcie = "pcie.gen4_x16", inter = "network.roce_100g", nics = 4,
    source = "AWS EC2 P4 instance page (p4d.24xlarge: 8x A100 40GB, 96 vCPU, 1152 GiB, 400 Gbps EFA = 4x 100 Gb/s); "
      .. "Lambda blog 'Tesla A100 server total cost of ownership' lists the same (Xeon 8275CL, 1.1 TB). EFA modelled as "
      .. "RoCE-like 100G per NIC (approximation). Pinned limit: 80 % assumption",
  },
  aws_g5_48xlarge = {
    gpu = "a10g", gpus = 8, nodes = 1, cpu_cores = 96,
    host_ram_bytes = 768 * GiB, pinned_limit_bytes = 614 * GiB,
    intra = "pcie.gen4_x16", pcie = "pcie.gen4_x16", inter = false, nics = 1,
    source = "AWS EC2 G5 instance page (g5.48xlarge: 8x A10G, 192 vCPU, 768 GiB, no NVLink) -- recalled, not re-read "
      .. "against the page (2026-11-30). Pinned limit: 80 % assumption",
  },
  workstation = {
    gpu = "rtx4090", gpus = 1, max_gpus = 4, nodes = 1, cpu_cores = 16,
    host_ram_bytes = 128 * GiB, pinned_limit_bytes = 96 * GiB,
    intra = "pcie.gen4_x16", pcie = "pcie.gen4_x16", inter = false,
    lanes_note = "desktop CPUs (20-24 lanes) split two GPUs x8/x8; 3-4 GPUs at x16 need a Threadripper/Xeon-W/EPYC board",
    source = "stated assumption: a typical deep-learning workstation, 1-4 GeForce/RTX cards, 128 GiB DDR, PCIe Gen4, "
      .. "no P2P on GeForce Ada (traffic between GPUs goes through host memory); pinned limit 75 % of RAM",
  },
  workstation_4x4090 = {
    gpu = "rtx4090", gpus = 4, nodes = 1, cpu_cores = 32,
    host_ram_bytes = 256 * GiB, pinned_limit_bytes = 192 * GiB,
    intra = "pcie.gen4_x16", pcie = "pcie.gen4_x16", inter = false,
    source = "stated assumption: Threadripper-class board giving each of 4 RTX 4090s x16 Gen4, 256 GiB RAM; "
      .. "no P2P, so collectives are staged through host memory (a 13B model over 4 RTX 4090s on PCIe); pinned 75 %",
  },

  -- DeepSpeed's CPU Adam (DeepSpeedCPUAdam, AVX2/AVX-512), the optimizer step of ZeRO-Offload.
  -- The update is memory-bandwidth bound: per fp32 parameter it reads p, g, m, v (16 B) and writes
  -- p, m, v (12 B), plus a 2 B half-precision copy of p for the GPU: ~30 B per parameter.
  -- torch.optim.AdamW(foreach=True) stepping CPU tensors, as FSDP2's CPUOffloadPolicy runs it.
  -- The step is bound by host memory bandwidth, so a rank's rate depends on its intra-op threads
  -- (OMP_NUM_THREADS; torchrun sets 1 unless told otherwise) and on how many ranks of the host
  -- step at the same time.  Points: bf16 parameters per second seen by each of `procs` processes
  -- stepping 535,840,768 parameters at once (a 2-rank shard of the 1.07 B-parameter validation
  -- model), measured 2026-11-30 on the two-H200 host (32-core Xeon VM) with
  --   python3 validation/harness/measure_cpu_adamw.py --procs P --threads T --numel 535840768 --dtype bf16
  -- (log: validation/results/logs/call4_cpu_adamw_x2.txt).  The one-H200 host (16 cores) gave
  -- 1.344e9 bf16 and 9.129e8 fp32 params/s for one process with 16 threads.
  torch_cpu_adamw = {
    points = {
      { procs = 1, threads = 8,  bf16_params_per_s = 1.190e9 },
      { procs = 2, threads = 8,  bf16_params_per_s = 0.964e9 },
      { procs = 1, threads = 16, bf16_params_per_s = 1.603e9 },
      { procs = 2, threads = 16, bf16_params_per_s = 1.339e9 },
    },
    source = "measured 2026-11-30, two-H200 device host, torch 2.11.0 (validation/harness/measure_cpu_adamw.py)",
  },
  cpu_adam = {
    params_per_s = 4.0e9,             -- whole 2-socket host (DGX-2: 2x Xeon Platinum 8168, 48 cores)
    params_per_s_per_core = 8.3e7,    -- the same divided by 48 cores, to scale to other hosts
    bytes_per_param = 30,
    speedup_over_torch_cpu_adam = 6,  -- "5X-7X"
    source = "Ren et al., 'ZeRO-Offload: Democratizing Billion-Scale Model Training', USENIX ATC 2021, arXiv:2101.06840, "
      .. "Adam-latency table (CPU-Adam vs PyTorch CPU Adam on the DGX-2 host): about 0.22 s per 1 B parameters and "
      .. "2.6 s per 10 B, i.e. ~4e9 params/s -- recalled, the table not re-read (2026-11-30); verify. "
      .. "Consistent with ~30 B/param at ~120 GB/s of the host's 2x6-channel DDR4-2666. DeepSpeed ZeRO-Offload tutorial "
      .. "(https://www.deepspeed.ai/tutorials/zero-offload/): 'DeepSpeedCPUAdam is 5X-7X faster than the standard PyTorch "
      .. "implementation'. Each rank updates its own 1/N partition on the cores bound to it",
  },
}
