-- A synthetic grouped GEMM table (the layout of measure_grouped_mm.py's <gpu>_grouped_mm.lua),
-- not a measurement: round figures for Mixtral-8x7B's experts at 1 x 256 tokens (top-2: 512
-- token-expert pairs), so tests/test_moe.sh can check that each op takes exactly its row's time.
return {
  gpu = "h100_sxm",
  grouped_mm = {
    {gemm="fwd", layout="nt", routing="balanced", experts=8, rows=512, n=28672, k=4096, max_rows=64, ms=0.30000, tflops=0.0},
    {gemm="dgrad", layout="nt", routing="balanced", experts=8, rows=512, n=28672, k=4096, max_rows=64, ms=0.25000, tflops=0.0},
    {gemm="wgrad", layout="nt", routing="balanced", experts=8, rows=512, n=28672, k=4096, max_rows=64, ms=0.35000, tflops=0.0},
    {gemm="bwd", layout="nt", routing="balanced", experts=8, rows=512, n=28672, k=4096, max_rows=64, ms=9.00000, tflops=0.0},
    {gemm="fwd", layout="nt", routing="record:synthetic", experts=8, rows=512, n=28672, k=4096, max_rows=90, ms=9.00000, tflops=0.0},
    {gemm="fwd", layout="nt", routing="balanced", experts=8, rows=512, n=4096, k=14336, max_rows=64, ms=0.15000, tflops=0.0},
    {gemm="dgrad", layout="nt", routing="balanced", experts=8, rows=512, n=4096, k=14336, max_rows=64, ms=0.12000, tflops=0.0},
    {gemm="wgrad", layout="nt", routing="balanced", experts=8, rows=512, n=4096, k=14336, max_rows=64, ms=0.18000, tflops=0.0},
  },
  moe_index = {
    {op="sort", n=512, src_rows=0, width=0, bins=0, ms=0.01200},
    {op="histc", n=512, src_rows=0, width=0, bins=8, ms=0.00800},
    {op="cumsum", n=8, src_rows=0, width=0, bins=0, ms=0.00600},
    {op="index_put", n=512, src_rows=0, width=0, bins=0, ms=0.00700},
    {op="index_fwd", n=512, src_rows=256, width=4096, bins=0, ms=0.02000},
    {op="index_bwd", n=512, src_rows=256, width=4096, bins=0, ms=0.04500},
    {op="index_fwd", n=512, src_rows=512, width=4096, bins=0, ms=0.01500},
    {op="index_bwd", n=512, src_rows=512, width=4096, bins=0, ms=0.03000},
    {op="index_fwd", n=512, src_rows=512, width=1, bins=0, ms=0.00650},
    {op="index_bwd", n=512, src_rows=512, width=1, bins=0, ms=0.00900},
  },
}
