-- PyTorch's own kernels on NVIDIA H200, 2026-11-30, torch 2.11.0+cu130: bandwidth by access class.
-- command: python3 validation/measure/measure_torch_ops.py --gpu h200 -o /root/out/foreach_h200.lua --only foreach
-- bytes = inputs read + outputs written; ms = best of 3 means of 20 (5) back-to-back calls
return {
  torch_ops = {
    {class="foreach", op="_foreach_add_ bf16", bytes=2428600320, ms=0.72712, gbps=3340.0},
    {class="foreach_scalar", op="_foreach_mul_ bf16", bytes=1619066880, ms=0.58475, gbps=2768.8},
    {class="foreach_out", op="_foreach_sqrt bf16", bytes=1619066880, ms=0.79712, gbps=2031.1},
    {class="foreach_fp32", op="_foreach_add_ fp32", bytes=4857200640, ms=1.28091, gbps=3792.0},
    {class="foreach_scalar_fp32", op="_foreach_mul_ fp32", bytes=3238133760, ms=0.92986, gbps=3482.4},
    {class="foreach_out_fp32", op="_foreach_sqrt fp32", bytes=3238133760, ms=1.04244, gbps=3106.3},
  },
}
