-- peft's expert folding, torch.baddbmm(W, lhs, rhs) of a MoE's stacked experts (LoRA on
-- ParamWrapper), on NVIDIA H200: the whole call's time (the result.copy_(W) memcpy, then cuBLAS's
-- batched GEMM with beta 1 in place) over the bytes vrsim's op moves (lora.lua baddbmm_bytes: W
-- read and written twice, lhs and rhs read), class mm_baddbmm (the op's kind). Source: the class
-- baddbmm rows of validation/results/baddbmm_h200.lua (measure_torch_ops.py --only baddbmm),
-- renamed by validation/harness/baddbmm_classes.py; the in-place GEMM's own rows (baddbmm_gemm)
-- are that file's only.
return {
  torch_ops = {
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 8", bytes=3228565504, ms=1.02445, gbps=3151.5},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 16", bytes=3235905536, ms=1.02374, gbps=3160.9},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 32", bytes=3250585600, ms=1.02142, gbps=3182.4},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 64", bytes=3279945728, ms=1.02630, gbps=3195.9},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 8", bytes=1616379904, ms=0.51565, gbps=3134.6},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 16", bytes=1622147072, ms=0.51501, gbps=3149.7},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 32", bytes=1633681408, ms=0.51332, gbps=3182.6},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 64", bytes=1656750080, ms=0.51664, gbps=3206.8},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 8", bytes=2957770752, ms=0.93793, gbps=3153.5},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 16", bytes=2962751488, ms=0.93702, gbps=3161.9},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 32", bytes=2972712960, ms=0.93729, gbps=3171.6},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 64", bytes=2992635904, ms=0.93816, gbps=3189.9},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 8", bytes=1479933952, ms=0.47244, gbps=3132.5},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 16", bytes=1483472896, ms=0.46965, gbps=3158.7},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 32", bytes=1490550784, ms=0.47143, gbps=3161.8},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 64", bytes=1504706560, ms=0.47005, gbps=3201.2},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 8", bytes=4251156480, ms=1.37809, gbps=3084.8},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 16", bytes=4255580160, ms=1.37509, gbps=3094.8},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 32", bytes=4264427520, ms=1.37464, gbps=3102.2},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 64", bytes=4282122240, ms=1.37503, gbps=3114.2},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 8", bytes=2126315520, ms=0.69938, gbps=3040.3},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 16", bytes=2129264640, ms=0.69369, gbps=3069.5},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 32", bytes=2135162880, ms=0.69233, gbps=3084.0},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 64", bytes=2146959360, ms=0.69232, gbps=3101.1},
  },
}
