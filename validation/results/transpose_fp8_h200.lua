-- PyTorch's own kernels on NVIDIA H200, 2026-12-06, torch 2.11.0+cu130: bandwidth by access class.
-- command: python3 validation/harness/measure_torch_ops.py --gpu h200 -o /root/out/transpose_fp8_h200.lua --only transpose_fp8
-- bytes = inputs read + outputs written; ms = best of 3 means of 20 (5) back-to-back calls
return {
  torch_ops = {
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=16777216, ms=0.04700, gbps=357.0},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=67108864, ms=0.18708, gbps=358.7},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=20971520, ms=0.06318, gbps=331.9},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=83886080, ms=0.24488, gbps=342.6},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=41943040, ms=0.12653, gbps=331.5},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=234881024, ms=0.67527, gbps=347.8},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=117440512, ms=0.34380, gbps=341.6},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=117440512, ms=0.34207, gbps=343.3},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=8388608, ms=0.02557, gbps=328.1},
  },
}
