-- The device's dead time between back-to-back kernels of one stream on NVIDIA H200, as
-- torch.profiler counts kernel time, measured 2026-11-30 with torch 2.11.0+cu130:
-- command: python3 validation/measure/measure_kernel_gap.py --out validation/measure/kernel_gap_h200.json
-- 2000 identical bf16 add_/mul_ kernels queued behind a long sleep kernel, timed with CUDA events
-- (wall) and under the profiler (busy): gap = (wall - busy) / 2000. Over 64 and 256 MiB tensors
-- (kernels of 33 and 127 us) it is 1.59-1.73 us; the 1 and 8 MiB rows are left out, as their
-- streams run at the host's launch rate (3.3-4.6 us a kernel), not the device's.
return {
  gpu = "h200",
  kernel_gap_us = 1.665,  -- mean of the four 64 and 256 MiB rows
}
