-- peft's expert folding, torch.baddbmm(W, lhs, rhs) of a MoE's stacked experts (LoRA on
-- ParamWrapper), on NVIDIA H100 80GB HBM3: the whole call's time (the result.copy_(W) memcpy, then cuBLAS's
-- batched GEMM with beta 1 in place) over the bytes vrsim's op moves (lora.lua baddbmm_bytes:
-- W read and written twice, lhs and rhs read), class mm_baddbmm (the op's kind).
-- Source: the class baddbmm rows of validation/results/baddbmm_h100_sxm.lua (measure_torch_ops.py --only baddbmm),
-- renamed; the in-place GEMM's own rows (baddbmm_gemm) are that file's only.
return {
  torch_ops = {
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 8", bytes=3228565504, ms=1.34557, gbps=2399.4},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 16", bytes=3235905536, ms=1.34457, gbps=2406.6},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 32", bytes=3250585600, ms=1.34582, gbps=2415.3},
    {class="mm_baddbmm", op="baddbmm 128 x 1536 x 2048, r 64", bytes=3279945728, ms=1.34995, gbps=2429.7},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 8", bytes=1616379904, ms=0.67569, gbps=2392.2},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 16", bytes=1622147072, ms=0.67702, gbps=2396.0},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 32", bytes=1633681408, ms=0.67921, gbps=2405.3},
    {class="mm_baddbmm", op="baddbmm 128 x 2048 x 768, r 64", bytes=1656750080, ms=0.68457, gbps=2420.1},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 8", bytes=2957770752, ms=1.23297, gbps=2398.9},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 16", bytes=2962751488, ms=1.23214, gbps=2404.6},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 32", bytes=2972712960, ms=1.23437, gbps=2408.3},
    {class="mm_baddbmm", op="baddbmm 64 x 2816 x 2048, r 64", bytes=2992635904, ms=1.24808, gbps=2397.8},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 8", bytes=1479933952, ms=0.63102, gbps=2345.3},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 16", bytes=1483472896, ms=0.62930, gbps=2357.3},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 32", bytes=1490550784, ms=0.61951, gbps=2406.0},
    {class="mm_baddbmm", op="baddbmm 64 x 2048 x 1408, r 64", bytes=1504706560, ms=0.62355, gbps=2413.1},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 8", bytes=4251156480, ms=1.80444, gbps=2355.9},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 16", bytes=4255580160, ms=1.80164, gbps=2362.1},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 32", bytes=4264427520, ms=1.80022, gbps=2368.8},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 5760, r 64", bytes=4282122240, ms=1.80086, gbps=2377.8},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 8", bytes=2126315520, ms=0.91012, gbps=2336.3},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 16", bytes=2129264640, ms=0.90573, gbps=2350.9},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 32", bytes=2135162880, ms=0.90583, gbps=2357.1},
    {class="mm_baddbmm", op="baddbmm 32 x 2880 x 2880, r 64", bytes=2146959360, ms=0.90463, gbps=2373.3},
  },
}
