"""cuBLAS kernels' own time (torch.profiler) for the GEMMs of a LoRA adapter, in fp32 (peft keeps
adapters in fp32 under a bf16 model, autocast_adapter_dtype, and PyTorch runs fp32 matmuls in
full fp32: torch.backends.cuda.matmul.allow_tf32 is False by default) and in bf16.

An adapter of rank r on a layer of width d at t tokens runs six GEMMs, C[m, n] = op(A) op(B) as
vrsim-calibrate names them: forward x A^T ("nt", t x r x d) and a B^T ("nt", t x d x r); in
backward, B's data gradient ("nn", t x r x d) and weight gradient ("tn", d x r x t), A's data
gradient ("nn", t x d x r) and weight gradient ("tn", r x d x t). Ranks 8, 16, 32, 64; widths
512-14336; 2048-16384 tokens. Each shape: 5 warm-up calls, then the median over 10 profiled
calls of a call's summed kernel time (a split-K GEMM launches two). One JSON object:
  {"rows": [{"dtype", "op", "m", "n", "k", "rank", "ms", "tflops", "gbps", "kernels"}], "torch", "gpu"}
(gbps: the operands' and the result's bytes over the time).

  python3 validation/harness/measure_lora_gemms.py --out F.json
  python3 validation/harness/measure_lora_gemms.py --from F.json --lua lua/hw/calibrated/h200_lora_gemm.lua
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_timing import median_kernel_us, save_rows, torch  # noqa: E402
if torch is not None:  # --from runs without torch
    from measure_gemm_kernels import operands  # noqa: E402  (op, m, n, k, dtype -> the call)

RANKS = (8, 16, 32, 64)
WIDTHS = (512, 2048, 4096, 8192, 14336)
TOKENS = (2048, 4096, 8192, 16384)


def shapes():
    out = set()
    for r in RANKS:
        for d in WIDTHS:
            for t in TOKENS:
                out.update({("nt", t, r, d), ("nt", t, d, r), ("nn", t, r, d), ("tn", d, r, t),
                            ("nn", t, d, r), ("tn", r, d, t)})
    return sorted(out)


def measure(out):
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default, stated
    rows = []
    for dname, dtype, size in (("fp32", torch.float32, 4), ("bf16", torch.bfloat16, 2)):
        for op, m, n, k in shapes():
            fn = operands(op, m, n, k, dtype)
            for _ in range(5):
                fn()
            us, cnt = median_kernel_us(fn, 10)
            ms = us.get("all", 0.0) / 1e3
            if ms > 0:
                rows.append({"dtype": dname, "op": op, "m": m, "n": n, "k": k, "rank": min(m, n, k),
                             "ms": round(ms, 5), "tflops": round(2 * m * n * k / (ms * 1e-3) / 1e12, 3),
                             "gbps": round((m * k + k * n + m * n) * size / (ms * 1e-3) / 1e9, 1),
                             "kernels": round(cnt.get("all", 0))})
            del fn
            torch.cuda.empty_cache()
        print(dname, len(rows), "rows", file=sys.stderr)
    save_rows(out, rows)


def gemm_of(r):
    """(gemm, tokens, width) of a row: which of the adapter's six GEMMs its shape is."""
    op, m, n, k, rank = r["op"], r["m"], r["n"], r["k"], r["rank"]
    if op == "nt":
        return ("A_fwd", m, k) if n == rank else ("B_fwd", m, n)
    if op == "nn":
        return ("B_dgrad", m, k) if n == rank else ("A_dgrad", m, n)
    return ("B_wgrad", k, m) if n == rank else ("A_wgrad", k, n)


def write_lua(src, path):
    d = json.load(open(src))
    with open(path, "w") as f:
        f.write("-- cuBLAS kernels' own time of LoRA adapters' GEMMs on %s (torch %s, torch.profiler, the\n"
                "-- median of 10 calls each), 2026-12-01, fp32 (as peft keeps its adapters; full fp32, PyTorch's\n"
                "-- default) and bf16: an adapter of rank r on a layer of width d at t tokens runs A_fwd (x A^T),\n"
                "-- B_fwd (a B^T) and each matrix's data and weight gradients, 2 t d r FLOPs each\n"
                "-- (sim/cost.h COST_LORA_*, graph.h Op.lora_rank).\n"
                "--   python3 validation/harness/measure_lora_gemms.py --out %s\n"
                "--   python3 validation/harness/measure_lora_gemms.py --from %s --lua THIS_FILE\n"
                % (d["gpu"], d["torch"], src, src))
        f.write("return {\n  lora_gemm = {\n")
        for r in d["rows"]:
            g, t, w = gemm_of(r)
            f.write('    {dtype="%s", gemm="%s", rank=%d, tokens=%d, width=%d, ms=%.5f},\n'
                    % (r["dtype"], g, r["rank"], t, w, r["ms"]))
        f.write("  },\n}\n")
    print("%d rows" % len(d["rows"]))


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--from", dest="src")
    ap.add_argument("--lua")
    a = ap.parse_args()
    if a.src and a.lua:
        return write_lua(a.src, a.lua)
    if not a.out or torch is None:
        ap.error("--out F (measure; torch and a GPU) or --from F --lua FILE (write the table)")
    measure(a.out)


if __name__ == "__main__":
    main()
