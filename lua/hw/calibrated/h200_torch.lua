-- PyTorch host dispatch cost per op on NVIDIA H200, measured 2026-11-30 with torch 2.11.0+cu130
-- command: python3 validation/harness/measure_dispatch.py --gpu h200 -o lua/hw/calibrated/h200_torch.lua
-- tiny tensors (64x64) so the GPU never limits: best of 5 runs of thousands of ops
return {
  eager_inplace_add_us = 10.610,
  eager_linear_us = 24.552,
  eager_mixed_us = 16.969,
  autograd_fwd_bwd_us = 19.191,
  foreach_per_tensor_us = 0.546,
  host_op_us = 19.191,  -- autograd forward+backward, per op
  host_kernel_us = 34.105,  -- module-heavy fwd+bwd (measure_module_dispatch.py): 1433 kernels per step, CPU time per kernel
  host_kernel_ckpt_us = 55.253,  -- the same blocks under torch.utils.checkpoint(use_reentrant=False):
                                 -- 1785 kernels (recompute included), 98.6 ms a step
                                 -- (python3 validation/harness/measure_module_dispatch.py --ckpt)
  -- torch.optim host work per parameter tensor, by implementation and parameter dtype, and
  -- zero_grad(set_to_none=True)'s: least-squares slopes over 64..2048 tensors of 256 elements
  -- (python3 validation/harness/measure_optim_host.py --out validation/results/optim_host_h200.jsonl,
  -- 2026-11-30 on GPU 0 of the two-H200 machine, torch 2.11.0+cu130)
  optim_step_tensor_us = { foreach = { bf16 = 9.554, fp32 = 9.368 },
                           fused = { bf16 = 2.924, fp32 = 4.601 },
                           forloop = { bf16 = 65.43, fp32 = 72.94 } },
  zero_grad_tensor_us = 0.242,
  -- torch.utils.checkpoint(use_reentrant=False)'s own host time per region, forward and its
  -- recomputation together: least squares over 16..128 regions of 1..8 tiny ops, with and
  -- without checkpointing, mean of 25 steps (python3 validation/harness/measure_ckpt_region.py
  -- --out validation/results/ckpt_region_h200.json, 2026-11-30). host_kernel_ckpt_us above
  -- carries 2 % of it (16 regions in its 98.6 ms).
  host_ckpt_region_us = 135.2,
}
