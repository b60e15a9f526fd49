-- cuDNN's layout transforms around NCHW convolutions on NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130,
-- cuDNN 9.19), 2026-12-05: every 3x3 convolution of the SDXL UNet at 1024 px, batch 1 and 4,
-- bf16, forward and backward, its nchwToNhwc / nhwcToNchw kernels timed with torch.profiler
-- (1x1 convolutions launch none). Their time fitted as bytes read and written at two rates
-- plus 1.32 us a kernel, over 71 convolution-directions, largest error 43 %:
--   python3 validation/harness/measure_conv_transforms.py --res 1024 --batch B --out validation/results/conv_transforms_h100_sxm.jsonl
--   python3 validation/harness/measure_conv_transforms.py --from validation/results/conv_transforms_h100_sxm.jsonl --date 2026-12-05 --lua THIS_FILE
-- Read as profile classes by lua/vrsim/hardware.lua; priced per op by sim/cost.c (layout_ns).
return {
  torch_ops = {
    {class="layout", op="fit", bytes=16777216, ms=0.00770, gbps=2178.8},
    {class="layout_filter", op="fit", bytes=16777216, ms=0.02356, gbps=712.0},
  },
}
