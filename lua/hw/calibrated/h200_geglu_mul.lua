-- GEGLU's product of a strided half-view and a contiguous tensor on NVIDIA H200, torch
-- 2.11.0+cu130, bf16, torch.profiler kernel time, 2026-12-01: the bytes vrsim's op counts
-- (forward: both operands and the output; backward: twice that) over the MulFunctor
-- kernels' time, 16 points at the SDXL UNet's feed-forward shapes; classes
-- "strided_mixed" (forward) and "strided_mixed_bwd".
--   python3 validation/harness/measure_geglu_mul.py --out validation/results/geglu_mul_h200.json
--   python3 validation/harness/measure_geglu_mul.py --from validation/results/geglu_mul_h200.json --lua THIS_FILE
return {
  torch_ops = {
    {class="strided_mixed", op="hidden * gelu(gate) 256x2560", bytes=3932160, ms=0.00282, gbps=1394.4},
    {class="strided_mixed", op="hidden * gelu(gate) 256x5120", bytes=7864320, ms=0.00448, gbps=1755.4},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 256x2560", bytes=7864320, ms=0.00432, gbps=1820.4},
    {class="strided_mixed", op="hidden * gelu(gate) 1024x2560", bytes=15728640, ms=0.00755, gbps=2083.3},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 256x5120", bytes=15728640, ms=0.00643, gbps=2446.1},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 1024x2560", bytes=31457280, ms=0.01334, gbps=2358.1},
    {class="strided_mixed", op="hidden * gelu(gate) 1024x5120", bytes=31457280, ms=0.01296, gbps=2427.3},
    {class="strided_mixed", op="hidden * gelu(gate) 4096x2560", bytes=62914560, ms=0.02998, gbps=2098.6},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 1024x5120", bytes=62914560, ms=0.02694, gbps=2335.4},
    {class="strided_mixed", op="hidden * gelu(gate) 4096x5120", bytes=125829120, ms=0.05801, gbps=2169.1},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 4096x2560", bytes=125829120, ms=0.04646, gbps=2708.3},
    {class="strided_mixed", op="hidden * gelu(gate) 16384x2560", bytes=251658240, ms=0.11328, gbps=2221.6},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 4096x5120", bytes=251658240, ms=0.08637, gbps=2913.7},
    {class="strided_mixed", op="hidden * gelu(gate) 16384x5120", bytes=503316480, ms=0.22374, gbps=2249.6},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 16384x2560", bytes=503316480, ms=0.17171, gbps=2931.2},
    {class="strided_mixed_bwd", op="hidden * gelu(gate) 16384x5120", bytes=1006632960, ms=0.33650, gbps=2991.5},
  },
}
