-- PyTorch's own kernels on NVIDIA H100 80GB HBM3, 2026-12-05, torch 2.11.0+cu130: bandwidth by access class.
-- command: python3 validation/harness/measure_torch_ops.py --gpu h100_sxm -o /root/out/transpose_fp8_h100_sxm.lua --only transpose_fp8
-- bytes = inputs read + outputs written; ms = best of 3 means of 20 (5) back-to-back calls
return {
  torch_ops = {
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=16777216, ms=0.05753, gbps=291.6},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=67108864, ms=0.23621, gbps=284.1},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=20971520, ms=0.07083, gbps=296.1},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=83886080, ms=0.29384, gbps=285.5},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=41943040, ms=0.14531, gbps=288.7},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=234881024, ms=0.79713, gbps=294.7},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=117440512, ms=0.40291, gbps=291.5},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=117440512, ms=0.40423, gbps=290.5},
    {class="transpose_fp8", op="float8 t().contiguous()", bytes=8388608, ms=0.03262, gbps=257.2},
  },
}
