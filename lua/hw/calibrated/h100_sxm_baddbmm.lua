-- peft's expert folding, torch.baddbmm(W, lhs, rhs) of a MoE's stacked experts (LoRA on
-- ParamWrapper), on NVIDIA H100 80GB HBM3: the whole call's time (the result.copy_(W) memcpy, then
-- cuBLAS's batched GEMM with beta 1 in place) over the bytes vrsim's op moves (lora.lua
-- baddbmm_bytes: W read and written twice, lhs and rhs read), class mm_baddbmm (the op's kind);
-- its backward (BaddbmmBackward0's two bmm over the stack's gradient and the factors' alpha
-- scaling) over twice the stack's bytes, class mm_baddbmm_bwd (the op's backward kind). Source:
-- the class baddbmm and baddbmm_bwd rows of validation/results/baddbmm_h100_sxm.lua
-- (measure_torch_ops.py --only baddbmm), renamed by validation/harness/baddbmm_classes.py; the
-- in-place GEMM's own rows (baddbmm_gemm) are that file's only.
return {
  torch_ops = {
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 8", bytes=3228565504, ms=1.35054, gbps=2390.6},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 1536 x 2048, r 8", bytes=1610612736, ms=0.61252, gbps=2629.5},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 16", bytes=3235905536, ms=1.35011, gbps=2396.8},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 1536 x 2048, r 16", bytes=1610612736, ms=0.60559, gbps=2659.6},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 32", bytes=3250585600, ms=1.34954, gbps=2408.7},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 1536 x 2048, r 32", bytes=1610612736, ms=0.62838, gbps=2563.1},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 64", bytes=3279945728, ms=1.35582, gbps=2419.2},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 1536 x 2048, r 64", bytes=1610612736, ms=0.66859, gbps=2409.0},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 8", bytes=1616379904, ms=0.68145, gbps=2372.0},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 2048 x 768, r 8", bytes=805306368, ms=0.30835, gbps=2611.6},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 16", bytes=1622147072, ms=0.67642, gbps=2398.2},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 2048 x 768, r 16", bytes=805306368, ms=0.31962, gbps=2519.6},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 32", bytes=1633681408, ms=0.67862, gbps=2407.4},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 2048 x 768, r 32", bytes=805306368, ms=0.33933, gbps=2373.2},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 64", bytes=1656750080, ms=0.68195, gbps=2429.4},
    {class="mm_baddbmm_bwd", op="baddbmm backward 128 x 2048 x 768, r 64", bytes=805306368, ms=0.36972, gbps=2178.1},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 8", bytes=2957770752, ms=1.23460, gbps=2395.7},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2816 x 2048, r 8", bytes=1476395008, ms=0.52749, gbps=2798.9},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 16", bytes=2962751488, ms=1.23293, gbps=2403.0},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2816 x 2048, r 16", bytes=1476395008, ms=0.54091, gbps=2729.5},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 32", bytes=2972712960, ms=1.23838, gbps=2400.5},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2816 x 2048, r 32", bytes=1476395008, ms=0.56122, gbps=2630.7},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 64", bytes=2992635904, ms=1.24193, gbps=2409.7},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2816 x 2048, r 64", bytes=1476395008, ms=0.60072, gbps=2457.7},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 8", bytes=1479933952, ms=0.62642, gbps=2362.5},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2048 x 1408, r 8", bytes=738197504, ms=0.28502, gbps=2589.9},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 16", bytes=1483472896, ms=0.62780, gbps=2363.0},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2048 x 1408, r 16", bytes=738197504, ms=0.29075, gbps=2538.9},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 32", bytes=1490550784, ms=0.62072, gbps=2401.3},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2048 x 1408, r 32", bytes=738197504, ms=0.30476, gbps=2422.3},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 64", bytes=1504706560, ms=0.62292, gbps=2415.6},
    {class="mm_baddbmm_bwd", op="baddbmm backward 64 x 2048 x 1408, r 64", bytes=738197504, ms=0.32797, gbps=2250.8},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 8", bytes=4251156480, ms=1.80381, gbps=2356.8},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 5760, r 8", bytes=2123366400, ms=0.77612, gbps=2735.9},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 16", bytes=4255580160, ms=1.80081, gbps=2363.1},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 5760, r 16", bytes=2123366400, ms=0.77868, gbps=2726.9},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 32", bytes=4264427520, ms=1.80852, gbps=2358.0},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 5760, r 32", bytes=2123366400, ms=0.78807, gbps=2694.4},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 64", bytes=4282122240, ms=1.80196, gbps=2376.4},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 5760, r 64", bytes=2123366400, ms=0.83423, gbps=2545.3},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 8", bytes=2126315520, ms=0.91405, gbps=2326.3},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 2880, r 8", bytes=1061683200, ms=0.40198, gbps=2641.2},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 16", bytes=2129264640, ms=0.90619, gbps=2349.7},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 2880, r 16", bytes=1061683200, ms=0.40266, gbps=2636.7},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 32", bytes=2135162880, ms=0.90411, gbps=2361.6},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 2880, r 32", bytes=1061683200, ms=0.42595, gbps=2492.5},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 64", bytes=2146959360, ms=0.90551, gbps=2371.0},
    {class="mm_baddbmm_bwd", op="baddbmm backward 32 x 2880 x 2880, r 64", bytes=1061683200, ms=0.43686, gbps=2430.2},
  },
}
