-- The device's dead time between back-to-back kernels of one stream on NVIDIA H100 80GB HBM3, as
-- torch.profiler counts kernel time (torch 2.11.0+cu130).
-- command: python3 validation/harness/measure_kernel_gap.py --from validation/results/kernel_gap_h100_sxm.json --lua lua/hw/calibrated/h100_sxm_kernel_gap.lua --gpu h100_sxm
-- (the rows of validation/results/kernel_gap_h100_sxm.json, measured earlier by this script with --out)
-- 2000 identical add_/mul_ kernels queued behind a long sleep kernel, timed with CUDA
-- events (wall) and under the profiler (busy): gap = (wall - busy) / kernels. Kernels of
-- 20 us or more (4 rows): 1.51-1.61 us; shorter ones run at the host's
-- launch rate and are left out.
return {
  gpu = "h100_sxm",
  kernel_gap_us = 1.558,
}
