-- lua/hw/links.lua: interconnect catalog, plain data.  A transfer of S bytes costs
-- latency_s + S / bw_bytes_per_s.  bw_bytes_per_s is the typical achieved unidirectional rate
-- (what to simulate with); theoretical_bw_bytes_per_s is the signalling-rate ceiling.  NVLink and
-- NVSwitch figures are per GPU, all its links together, one direction.  Calibrated profiles
-- (lua/hw/calibrated/<gpu>.lua) override these for the GPU they were measured on.
return {
  pcie = {
    gen3_x16 = {
      gen = 3, lanes = 16,
      theoretical_bw_bytes_per_s = 15.75e9,   -- 8 GT/s x 16 x 128b/130b / 8
      bw_bytes_per_s = 12.5e9,                -- pinned host<->device, typical
      pageable_bw_bytes_per_s = 6e9,
      latency_s = 10e-6,
      source = "PCI Express Base Specification 3.0 (PCI-SIG): 8 GT/s, 128b/130b. Typical pinned ~80% of theoretical "
        .. "is an assumption (TLP/DLLP overhead with 128-256 B payloads caps ~84-91%); pageable and latency assumed",
    },
    gen4_x8 = {
      gen = 4, lanes = 8,
      theoretical_bw_bytes_per_s = 15.75e9,   -- 16 GT/s x 8 lanes: the signalling rate of gen3 x16
      bw_bytes_per_s = 12.5e9,
      pageable_bw_bytes_per_s = 6e9,
      latency_s = 8e-6,
      source = "PCI Express Base Specification 4.0 (PCI-SIG): 16 GT/s, 8 lanes (the RTX 4060 Ti's link). Achieved and "
        .. "pageable figures taken as gen3 x16's (the same signalling rate); latency as gen4 x16's: assumptions",
    },
    gen4_x16 = {
      gen = 4, lanes = 16,
      theoretical_bw_bytes_per_s = 31.5e9,    -- 16 GT/s
      bw_bytes_per_s = 25e9,
      pageable_bw_bytes_per_s = 10e9,
      latency_s = 8e-6,
      source = "PCI Express Base Specification 4.0 (PCI-SIG): 16 GT/s; NVIDIA datasheets quote 'PCIe Gen4 x16: 64GB/s "
        .. "bidirectional' (L40S, A100). Typical pinned ~80% of theoretical and pageable/latency are assumptions",
    },
    gen5_x16 = {
      gen = 5, lanes = 16,
      theoretical_bw_bytes_per_s = 63.0e9,    -- 32 GT/s
      bw_bytes_per_s = 55.4e9,                -- measured, pinned H2D (D2H 55.3e9)
      pageable_bw_bytes_per_s = 19.1e9,       -- measured H2D (D2H 15.5e9)
      latency_s = 6.5e-6,                     -- measured: 1 MiB pinned copy 25.4 us minus 1 MiB / 55.4 GB/s
      source = "measured 2026-11-30 (file date) on the H200 host: validation/results/hw_h200_pytorch.json, torch copies of "
        .. "1 MiB-4 GiB (pinned H2D 55.45 GB/s, D2H 55.30 GB/s; pageable 19.1 / 15.5 GB/s); theoretical from PCI "
        .. "Express Base Specification 5.0 (32 GT/s), H100 datasheet 'PCIe Gen5 128 GB/s' (bidirectional)",
    },
  },

  nvlink = {
    -- per GPU, one direction, all links; latency_s is a per-transfer/p2p-copy cost (assumed)
    gen2 = { links = 6, bw_per_link_bytes_per_s = 25e9, theoretical_bw_bytes_per_s = 150e9, bw_bytes_per_s = 130e9,
      latency_s = 3e-6,
      source = "NVIDIA Tesla V100 datasheet: NVLink 300 GB/s (bidirectional, 6 links). Achieved ~87% is an assumption" },
    gen3 = { links = 12, bw_per_link_bytes_per_s = 25e9, theoretical_bw_bytes_per_s = 300e9, bw_bytes_per_s = 260e9,
      latency_s = 3e-6,
      source = "NVIDIA A100 datasheet: NVLink 600 GB/s (third generation, 12 links). Achieved ~87% is an assumption" },
    gen4 = { links = 18, bw_per_link_bytes_per_s = 25e9, theoretical_bw_bytes_per_s = 450e9, bw_bytes_per_s = 390e9,
      latency_s = 3e-6,
      source = "NVIDIA H100 datasheet: NVLink 900 GB/s (fourth generation, 18 links). Achieved ~87% is an assumption" },
    gen5 = { links = 18, bw_per_link_bytes_per_s = 50e9, theoretical_bw_bytes_per_s = 900e9, bw_bytes_per_s = 780e9,
      latency_s = 3e-6,
      source = "NVIDIA HGX B200 datasheet: fifth-generation NVLink, 1.8 TB/s per GPU (bidirectional, 18 links). Achieved "
        .. "~87% is an assumption, as for the earlier generations" },
    -- AMD Infinity Fabric (xGMI) between the 8 MI300X of an OAM platform: a full mesh, each GPU
    -- one link to each of the 7 others. A collective among n of them uses n - 1 links of each GPU
    -- (mesh = true: lua/vrsim/hardware.lua scales the figures by (n - 1) / links)
    xgmi_mi300x = { links = 7, bw_per_link_bytes_per_s = 64e9, theoretical_bw_bytes_per_s = 448e9,
      bw_bytes_per_s = 390e9, latency_s = 3e-6, mesh = true,
      source = "AMD Instinct MI300X data sheet: Infinity Fabric 7 links, 128 GB/s each bidirectional (896 GB/s "
        .. "aggregate). Achieved ~87% is an assumption taken from the NVLink entries; not measured" },
    bridge_ampere = { links = 4, theoretical_bw_bytes_per_s = 56.25e9, bw_bytes_per_s = 50e9, latency_s = 3e-6,
      source = "NVIDIA RTX A6000 datasheet: NVLink 112.5 GB/s (bidirectional), 2-way bridge; RTX 3090 uses the same "
        .. "bridge. Achieved figure assumed" },
    bridge_h100_pcie = { theoretical_bw_bytes_per_s = 300e9, bw_bytes_per_s = 260e9, latency_s = 3e-6,
      source = "NVIDIA H100 datasheet (PCIe): NVLink bridge 600 GB/s bidirectional. Achieved figure assumed" },
  },

  nvswitch = {
    -- all-to-all at the full per-GPU NVLink rate among the GPUs of one node
    gen1 = { nvlink = "gen2", gpus = 16, bw_bytes_per_s = 130e9, latency_s = 3e-6, in_switch_reduction = false,
      source = "NVIDIA DGX-2 datasheet: 16 V100 32GB, 12 NVSwitches, 300 GB/s per GPU bidirectional" },
    gen2 = { nvlink = "gen3", gpus = 8, bw_bytes_per_s = 260e9, latency_s = 3e-6, in_switch_reduction = false,
      source = "NVIDIA DGX A100 datasheet/user guide: 6 NVSwitches, 600 GB/s per GPU bidirectional" },
    gen3 = { nvlink = "gen4", gpus = 8, bw_bytes_per_s = 390e9, latency_s = 3e-6, in_switch_reduction = true,
      source = "NVIDIA DGX H100 datasheet: 4 NVSwitches, 900 GB/s per GPU bidirectional; NVLink SHARP (NCCL NVLS) "
        .. "reductions in the switch" },
  },

  network = {
    -- per port (one NIC), one direction; DGX/HGX nodes have one compute NIC per GPU
    ib_edr = { gbit_per_s = 100, theoretical_bw_bytes_per_s = 12.5e9, bw_bytes_per_s = 11.5e9, latency_s = 1.5e-6,
      source = "InfiniBand Trade Association EDR 100 Gb/s; NVIDIA ConnectX-5 product brief. Achieved ~92% and end-to-end "
        .. "latency (NIC + one switch hop + software) are assumptions" },
    ib_hdr = { gbit_per_s = 200, theoretical_bw_bytes_per_s = 25e9, bw_bytes_per_s = 23.5e9, latency_s = 1.5e-6,
      source = "InfiniBand HDR 200 Gb/s; NVIDIA ConnectX-6 VPI product brief (200 Gb/s, sub-microsecond port-to-port "
        .. "latency). Achieved ~94% and end-to-end latency assumed" },
    ib_ndr = { gbit_per_s = 400, theoretical_bw_bytes_per_s = 50e9, bw_bytes_per_s = 47e9, latency_s = 1.5e-6,
      source = "InfiniBand NDR 400 Gb/s; NVIDIA ConnectX-7 product brief; DGX H100 datasheet (8x 400 Gb/s). Achieved and "
        .. "latency assumed" },
    roce_100g = { gbit_per_s = 100, theoretical_bw_bytes_per_s = 12.5e9, bw_bytes_per_s = 11e9, latency_s = 3e-6,
      source = "IEEE 802.3 100GbE with RoCEv2 (ConnectX-5/6 Ethernet mode). Achieved ~88% and latency assumed" },
    roce_200g = { gbit_per_s = 200, theoretical_bw_bytes_per_s = 25e9, bw_bytes_per_s = 22e9, latency_s = 3e-6,
      source = "IEEE 802.3 200GbE with RoCEv2 (ConnectX-6 Dx). Achieved and latency assumed" },
    roce_400g = { gbit_per_s = 400, theoretical_bw_bytes_per_s = 50e9, bw_bytes_per_s = 44e9, latency_s = 3e-6,
      source = "IEEE 802.3 400GbE with RoCEv2 (ConnectX-7, BlueField-3). Achieved and latency assumed" },
  },
}
