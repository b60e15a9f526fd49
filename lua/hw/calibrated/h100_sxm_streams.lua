-- vrsim calibration profile: measured on a real GPU by sim/calib (vrsim-calibrate).
-- GPU: NVIDIA H100 80GB HBM3 x1 (compute capability 9.0, 132 SMs, 85017493504 bytes, L2 52428800 bytes)
-- driver 580.159.04, CUDA runtime 13.0, driver API 13.0, cuBLAS 130100
-- date 2026-12-05T21:28:17Z; 0 s of measuring
-- command: sim/calib/vrsim-calibrate --gpu h100_sxm --only copy,elementwise,reduce -o /root/out/stage/validation/results/h100_sxm_streams.lua
-- Units: ms per operation (median of timed batches after warm-up, CUDA events),
-- tflops = 2*m*n*k/time (per batch entry summed), gbps = 1e9 bytes/s as each table says.
-- gemm op: row-major C[m,n] = op(A) op(B); nn = A[m,k]B[k,n]; nt = A B^T (Linear forward);
-- tn = A^T B (weight gradient). cuBLAS (cublasGemmEx) with a 32 MiB workspace, fp32 accumulate.
return {
  gpu = "h100_sxm",
  name = "NVIDIA H100 80GB HBM3",
  measured = "2026-12-05",
  driver = "580.159.04",
  cuda_runtime = "13.0",
  cublas_version = 130100,
  gpus = 1,
  compute_capability = "9.0",
  sm_count = 132,
  memory_bytes = 85017493504,
  free_bytes_at_start = 84462993408,
  l2_bytes = 52428800,
  sm_clock_khz = 1980000,
  mem_clock_khz = 2619000,
  mem_bus_bits = 5120,
  copy = {  -- cudaMemcpyAsync device to device; gbps counts bytes read + written
    {bytes=1048576, ms=0.00288, gbps=729.3},
    {bytes=4194304, ms=0.00306, gbps=2745.3},
    {bytes=16777216, ms=0.00889, gbps=3772.4},
    {bytes=67108864, ms=0.04733, gbps=2835.8},
    {bytes=268435456, ms=0.17891, gbps=3000.8},
    {bytes=1073741824, ms=0.70995, gbps=3024.8},
    {bytes=4294967296, ms=2.81968, gbps=3046.4},
  },
  elementwise = {  -- bytes = one input tensor; gbps counts all bytes read + written
    {op="scale_bf16", bytes=1048576, ms=0.00250, gbps=839.6},
    {op="scale_bf16", bytes=4194304, ms=0.00297, gbps=2824.7},
    {op="scale_bf16", bytes=16777216, ms=0.00893, gbps=3756.8},
    {op="scale_bf16", bytes=67108864, ms=0.04800, gbps=2796.3},
    {op="scale_bf16", bytes=268435456, ms=0.18523, gbps=2898.4},
    {op="scale_bf16", bytes=1073741824, ms=0.74128, gbps=2897.0},
    {op="scale_bf16", bytes=4294967296, ms=2.96541, gbps=2896.7},
    {op="scale_fp32", bytes=1048576, ms=0.00244, gbps=860.8},
    {op="scale_fp32", bytes=4194304, ms=0.00301, gbps=2788.4},
    {op="scale_fp32", bytes=16777216, ms=0.00899, gbps=3733.8},
    {op="scale_fp32", bytes=67108864, ms=0.04802, gbps=2794.9},
    {op="scale_fp32", bytes=268435456, ms=0.18512, gbps=2900.1},
    {op="scale_fp32", bytes=1073741824, ms=0.73901, gbps=2905.9},
    {op="scale_fp32", bytes=4294967296, ms=2.96570, gbps=2896.4},
    {op="add_bf16", bytes=1048576, ms=0.00244, gbps=1291.4},
    {op="add_bf16", bytes=4194304, ms=0.00332, gbps=3788.6},
    {op="add_bf16", bytes=16777216, ms=0.01805, gbps=2787.9},
    {op="add_bf16", bytes=67108864, ms=0.06888, gbps=2922.9},
    {op="add_bf16", bytes=268435456, ms=0.26945, gbps=2988.7},
    {op="add_bf16", bytes=1073741824, ms=1.08112, gbps=2979.5},
    {op="add_bf16", bytes=4294967296, ms=4.32541, gbps=2978.9},
  },
  reduce = {  -- fp32 sum of a vector; gbps counts bytes read
    {bytes=1048576, ms=0.00363, gbps=289.0},
    {bytes=4194304, ms=0.00426, gbps=983.9},
    {bytes=16777216, ms=0.00599, gbps=2799.5},
    {bytes=67108864, ms=0.02555, gbps=2626.2},
    {bytes=268435456, ms=0.08917, gbps=3010.3},
    {bytes=1073741824, ms=0.34232, gbps=3136.7},
    {bytes=4294967296, ms=1.35088, gbps=3179.4},
  },
}
