-- PyTorch's own kernels on NVIDIA H200, 2026-11-30, torch 2.11.0+cu130: bandwidth by access class.
-- command: python3 validation/measure/measure_torch_ops.py --gpu h200 -o /root/out/foreach_h200_rep1.lua --only foreach
-- bytes = inputs read + outputs written; ms = best of 3 means of 20 (5) back-to-back calls
return {
  torch_ops = {
    {class="foreach", op="_foreach_add_ bf16", bytes=2428600320, ms=0.72717, gbps=3339.8},
    {class="foreach_scalar", op="_foreach_mul_ bf16", bytes=1619066880, ms=0.58476, gbps=2768.8},
    {class="foreach_out", op="_foreach_sqrt bf16", bytes=1619066880, ms=0.79491, gbps=2036.8},
    {class="foreach_fp32", op="_foreach_add_ fp32", bytes=4857200640, ms=1.27754, gbps=3802.0},
    {class="foreach_scalar_fp32", op="_foreach_mul_ fp32", bytes=3238133760, ms=0.92452, gbps=3502.5},
    {class="foreach_out_fp32", op="_foreach_sqrt fp32", bytes=3238133760, ms=1.03915, gbps=3116.1},
  },
}
