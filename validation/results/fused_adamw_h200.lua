-- PyTorch's own kernels on NVIDIA H200, 2026-12-02, torch 2.11.0+cu130: bandwidth by access class.
-- command: python3 validation/harness/measure_torch_ops.py --gpu h200 -o /root/out/fused_adamw_h200.lua --only fused_adamw
-- bytes = inputs read + outputs written; ms = best of 3 means of 20 (5) back-to-back calls
return {
  torch_ops = {
    {class="fused_adamw", op="_fused_adamw_ bf16 x1", bytes=5666734080, ms=2.07953, gbps=2725.0},
    {class="fused_adamw", op="_fused_adamw_ bf16 x3", bytes=17000202240, ms=6.24182, gbps=2723.6},
    {class="fused_adamw_fp32", op="_fused_adamw_ fp32 x1", bytes=11333468160, ms=3.23314, gbps=3505.4},
    {class="fused_adamw_fp32", op="_fused_adamw_ fp32 x3", bytes=34000404480, ms=9.62243, gbps=3533.5},
  },
}
