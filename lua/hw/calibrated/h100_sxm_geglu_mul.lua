-- GEGLU's product of a strided half-view and a contiguous tensor on NVIDIA H100 80GB HBM3, torch
-- 2.11.0+cu130, bf16, torch.profiler kernel time, 2026-12-05: the bytes vrsim's op counts
-- (forward: both operands and the output; backward: twice that) over the MulFunctor
-- kernels' time, 16 points at the SDXL UNet's feed-forward shapes; classes
-- "strided_mixed" (forward) and "strided_mixed_bwd".
--   python3 validation/harness/measure_geglu_mul.py --out validation/results/geglu_mul_h100_sxm.json
--   python3 validation/harness/measure_geglu_mul.py --from validation/results/geglu_mul_h100_sxm.json --date 2026-12-05 --lua THIS_FILE
return {
  torch_ops = {
    {class="strided_mixed", op="hidden * gelu(gate) 256x2560", bytes=3932160, ms=0.00291, gbps=1351.3},
    {class="strided_mixed", op="hidden * gelu(gate) 256x5120", bytes=7864320, ms=0.00464, gbps=1694.9},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 256x2560", bytes=7864320, ms=0.00458, gbps=1717.1},
    {class="strided_mixed", op="hidden * gelu(gate) 1024x2560", bytes=15728640, ms=0.00733, gbps=2145.8},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 256x5120", bytes=15728640, ms=0.00650, gbps=2419.8},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 1024x2560", bytes=31457280, ms=0.01657, gbps=1898.4},
    {class="strided_mixed", op="hidden * gelu(gate) 1024x5120", bytes=31457280, ms=0.01376, gbps=2286.1},
    {class="strided_mixed", op="hidden * gelu(gate) 4096x2560", bytes=62914560, ms=0.03286, gbps=1914.6},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 1024x5120", bytes=62914560, ms=0.03056, gbps=2058.7},
    {class="strided_mixed", op="hidden * gelu(gate) 4096x5120", bytes=125829120, ms=0.06288, gbps=2001.1},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 4096x2560", bytes=125829120, ms=0.05379, gbps=2339.3},
    {class="strided_mixed", op="hidden * gelu(gate) 16384x2560", bytes=251658240, ms=0.12294, gbps=2047.0},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 4096x5120", bytes=251658240, ms=0.10356, gbps=2430.1},
    {class="strided_mixed", op="hidden * gelu(gate) 16384x5120", bytes=503316480, ms=0.24287, gbps=2072.4},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 16384x2560", bytes=503316480, ms=0.20451, gbps=2461.1},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 16384x5120", bytes=1006632960, ms=0.40504, gbps=2485.3},
  },
}
