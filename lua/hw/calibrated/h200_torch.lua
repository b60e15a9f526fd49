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
  -- --out validation/results/ckpt_region_h200_b.json, 2026-12-01, on the host and in the call
  -- of the ckpt_fwd / ckpt_bwd figures below; 135.2 on 2026-11-30, ckpt_region_h200.json).
  -- host_kernel_ckpt_us above carries 2 % of it (16 regions in its 98.6 ms).
  host_ckpt_region_us = 112.5,
  -- What a checkpointed region's forward op adds per tensor it saves for backward: the region's
  -- pack hook runs once per SavedVariable (a holder, a weak reference, the tensor's metadata for
  -- the determinism check), and an op that saves nothing runs none. Timed in place, on the SDXL
  -- UNet whole (validation/harness/measure_ckpt_parts.py, its two 64 px calls on this host,
  -- 2026-12-01, ckpt_parts_h200.jsonl): checkpointing added 68.86 and 67.00 ms to the forward,
  -- whose 86 regions save 3,926 tensors: (67.93 - 86 x 112.5 us) / 3926 = 14.84 us a tensor.
  -- Chains of tiny ops in a tight loop give half that (measure_ckpt_saves.py, one H100 host,
  -- 2026-12-07, ckpt_saves_h100_*.json: 4.7-5.0 us a saved tensor, 0.9-1.5 us an op that saves
  -- none, 0.66 of this host's class chains there): the hook's Python runs cold in a model.
  -- In a region's forward this replaces the classes' ckpt_fwd and host_kernel_ckpt_us, which
  -- charged every op alike (docs/step-time.md, "Checkpointing per saved tensor").
  host_ckpt_saved_us = 14.84,
  -- A torch.compile graph's host time (sim/engine.c): what its generated code spends a kernel
  -- (Inductor's Triton launcher, an extern GEMM's aten call, its buffers), forward (its
  -- recomputation too) and backward, and what calling the graph adds (dynamo's guards,
  -- AOTAutograd's runtime wrapper; in backward its node), in place of a bare launch a kernel.
  -- Least squares over 4 and 16 blocks of 1..8 units of Linear(64, 64) + GELU, each block
  -- compiled alone (python3 validation/harness/measure_compiled_call.py --out
  -- validation/results/compiled_call_h100.jsonl, 2026-12-06, one H100 80GB HBM3, torch
  -- 2.11.0+cu130): a unit is one extern GEMM and one Triton kernel forward (24.02 us), two GEMMs
  -- and one Triton kernel backward with its two parameters' AccumulateGrad (46.18 us); a
  -- compiled block's call took 107.22 / 165.16 us where the eager block's took 6.70 / 54.65.
  -- Carried to this host by the class chains timed on that machine just before, 0.660 of this host's
  -- (the mean of the four runs' host_class_bench ratios, host_calls_h100_r*.json):
  -- 12.01 / 0.660 and 15.39 / 0.660 a kernel, (107.22 - 6.70) / 0.660 and (165.16 - 54.65) / 0.660 a call.
  host_compiled_kernel_fwd_us = 18.20,
  host_compiled_kernel_bwd_us = 23.32,
  host_compiled_call_fwd_us = 152.3,
  host_compiled_call_bwd_us = 167.4,
  -- Host dispatch by op class, in us: what the Python thread spends issuing one op of the class
  -- with autograd recording (fwd, its launches included) and what the autograd engine spends on
  -- its backward node (bwd, its AccumulateGrad nodes included). Chains of 400 ops on tiny
  -- tensors, each position with its own module or weight, medians of 9 interleaved repeats, the
  -- mean of three runs on H200 hosts (mul_scalar and dropout: the third alone; cast: one of
  -- x.to(fp32).to(bf16)'s two casts) (cd validation/harness && python3 measure_host_classes.py
  -- --out ../results/host_classes_h200.json, again into host_classes_h200_rep.json, and with
  -- --no-reference into host_classes_h200_c.json on another day's host, 2026-12-01, torch
  -- 2.11.0+cu130). The first host ran measure_module_dispatch.py's blocks at 41.5 and 26.8 us a
  -- kernel in its two runs (host_kernel_us above: 34.1): a host's speed moves by that much.
  -- ckpt_fwd, ckpt_bwd: what torch.utils.checkpoint(use_reentrant=False) adds inside a region,
  -- to the op and to its backward node (the recomputation's hooks included; the recomputation
  -- itself costs fwd): the same chains as regions of 8 ops (--ckpt-region 8), less the plain
  -- chains of the same call, less host_ckpt_region_us / 8 in forward and the recomputation's
  -- forward in backward; 0 where that is negative (a region that saves nothing is not
  -- recomputed); the mean of two calls on one host (host_classes_h200_d.json with
  -- host_classes_ckpt8_h200_d.json, host_classes_h200_e.json with host_classes_ckpt8_h200_e.json,
  -- 2026-12-01; cast: per cast of the chain's two). The same host ran the whole UNet
  -- (validation/harness/measure_ckpt_parts.py, validation/results/ckpt_parts_h200.jsonl): what
  -- checkpointing added there is what these figures add in vrsim within 10 % (docs/step-time.md).
  -- The first measurement (host_classes_ckpt8_h200.json, 2026-12-01) gave about half of them;
  -- the UNet's checkpointed steps measured on other hosts (the truth run's own trace,
  -- validation/results/profile_sdxl_h200.jsonl) add as much as these do, not as much as it.
  -- linear_frozen: a bias-free Linear whose weight needs no gradient while its input does (LoRA's
  -- base layers, the frozen rest of a LoRA model): its backward node runs one GEMM (grad_input)
  -- and no AccumulateGrad. Timed beside linear_nobias in four calls (host_classes_h200_f1, _f2,
  -- _g1, _g2.json and their host_classes_ckpt8_h200_* pairs, 2026-12-01); each column is
  -- linear_nobias's here times the mean of the four calls' frozen / linear_nobias ratios (0.99,
  -- 0.36, 0.69, 0.78), so that the host's speed in those calls cancels. With it, peft's LoRA layer
  -- priced op by op (the frozen base, its two casts, A, B, the scaling, the add) is within 1 us of
  -- the whole layer timed in forward and within 31 us in backward (lora_linear in _g1, _g2).
  -- A frozen Linear with a bias is not measured: it keeps linear's figures.
  host_class_us = {
    linear        = { fwd = 34.7, bwd = 112.0, ckpt_fwd = 34.4, ckpt_bwd = 83.5 },   -- nn.Linear with a bias (addmm)
    linear_nobias = { fwd = 32.9, bwd = 81.1,  ckpt_fwd = 40.5, ckpt_bwd = 49.2 },  -- nn.Linear(bias=False) (mm)
    linear_frozen = { fwd = 32.5, bwd = 29.3,  ckpt_fwd = 27.8, ckpt_bwd = 38.4 },  -- the same with its weight frozen (below)
    conv          = { fwd = 62.8, bwd = 113.8, ckpt_fwd = 41.5, ckpt_bwd = 52.6 },   -- nn.Conv2d, its bias and weight sides
    group_norm    = { fwd = 50.2, bwd = 105.8, ckpt_fwd = 58.2, ckpt_bwd = 85.1 },  -- nn.GroupNorm
    layer_norm    = { fwd = 28.1, bwd = 62.4,  ckpt_fwd = 57.8, ckpt_bwd = 87.3 },  -- nn.LayerNorm
    sdpa          = { fwd = 35.2, bwd = 76.9,  ckpt_fwd = 67.3, ckpt_bwd = 128.9 },  -- F.scaled_dot_product_attention
    cast          = { fwd = 14.4, bwd = 17.8,  ckpt_fwd = 6.1, ckpt_bwd = 0 },     -- x.to(dtype), autocast's casts
    activation    = { fwd = 12.8, bwd = 18.8,  ckpt_fwd = 22.7, ckpt_bwd = 32.4 },  -- F.silu / F.gelu
    add           = { fwd = 12.8, bwd = 5.6,   ckpt_fwd = 12.2, ckpt_bwd = 0 },     -- x + y (AddBackward0 passes it on)
    mul_scalar    = { fwd = 13.2, bwd = 14.6,  ckpt_fwd = 13.8, ckpt_bwd = 0 },     -- x * 0.5 (LoRA's scaling)
    dropout       = { fwd = 22.7, bwd = 17.5,  ckpt_fwd = 23.6, ckpt_bwd = 35.3 },  -- nn.Dropout (native_dropout)
    -- one aten view op (view, _unsafe_view, transpose, permute, unsqueeze, split) and its
    -- backward node (ViewBackward0, ...): no kernel, no allocation, but the dispatcher and the
    -- autograd engine run for it. Half the `view` chain's figure (x.view(4096).view(64, 64), two
    -- views an op) in the same three runs as the rows above (host_classes_h200.json, _rep, _c:
    -- 5.2 / 14.3, 7.5 / 14.6, 6.9 / 8.7 us a pair). The ops vrsim keeps as views of a tensor
    -- (nn.view) cost this where an op names them (nn.op's host_views): a Linear on an input of
    -- more than two dims folds it into rows and unfolds the result (aten::linear's view and
    -- _unsafe_view), which the 2-D linear chains above do not time. A view saves nothing:
    -- checkpointing adds nothing to it but its recomputation (fwd).
    view          = { fwd = 3.26, bwd = 6.26,  ckpt_fwd = 0, ckpt_bwd = 0 },
    -- torchao 0.18's Float8Linear (convert_to_float8_training with Float8LinearConfig.from_recipe_name,
    -- a bias-free 64 x 64 Linear, input and weight needing gradients): the whole call, its casts'
    -- ATen ops, the tensor subclass's Python and the autograd Function's backward included
    -- (strategies/float8.lua puts it on the call's GEMM and none on its other ops). Timed on an
    -- H100 host (validation/results/host_classes_h100.json: measure_host_classes.py --out ...,
    -- 2026-12-07, torch 2.11.0+cu130; tensorwise 509.1 / 938.8 us, rowwise 551.4 / 1174.6) and
    -- carried here by that same call's ratio of the classes above, forward and backward apart
    -- (the median over linear .. dropout: 0.7057 forward, 0.6533 backward). What checkpointing
    -- adds is linear_nobias's: the Function saves two tensors (input, weight), as mm does.
    float8_linear_tensorwise = { fwd = 721.5, bwd = 1436.9, ckpt_fwd = 40.5, ckpt_bwd = 49.2 },
    float8_linear_rowwise    = { fwd = 781.4, bwd = 1797.8, ckpt_fwd = 40.5, ckpt_bwd = 49.2 },
  },
  -- FSDP2's own host time per fully_shard module per step, forward and backward apart: a stack
  -- of 8..64 tiny Linear modules with and without fully_shard on a one-rank group, the slope
  -- over the module count (python3 validation/harness/measure_fsdp2_hooks.py --out
  -- validation/results/fsdp2_hooks_h200.json, 2026-12-01, torch 2.11.0+cu130). "reshard":
  -- reshard_after_forward=True; "keep": False (and the root, which keeps its parameters).
  fsdp2_hook_us = { reshard = { fwd = 326.3, bwd = 754.8 }, keep = { fwd = 304.4, bwd = 875.1 } },
}
