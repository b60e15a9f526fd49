"""cuBLAS GEMM kernels' own time (torch.profiler) for the small and skinny GEMMs of real steps,
where vrsim-calibrate's grid (CUDA events around back-to-back calls) measures the launch rate
instead: every one of its GEMMs under about 10 us takes 8.3-9 us there, whatever its size.

Shapes: every nn.Linear of sdxl_unet.SDXLUNet at 512 and 1024 px, batch 1 and 4 (input shape
from a forward pre-hook on the meta device), forward (x w^T: "nt"), data gradient (g w: "nn")
and weight gradient (g^T x: "tn"); LoRA's adapters on a 4096-wide layer (rank 8, 16, 64 at
2048-8192 tokens), and squares of 256-2048. bf16, fp32 accumulate, as torch calls cuBLAS.

Each shape: 5 calls to warm up, then 10 calls each under torch.profiler; the median of a call's
summed kernel time (a split-K GEMM launches two). One JSON object:
  {"rows": [{"dtype", "op", "m", "n", "k", "ms", "tflops", "kernels"}], "torch", "gpu"}

  python3 validation/harness/measure_gemm_kernels.py --out F.json
  python3 validation/harness/measure_gemm_kernels.py --from F.json --lua lua/hw/calibrated/h200_gemm_kernels.lua
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_timing import measure_or_write, median_kernel_us, save_rows, torch  # noqa: E402

if torch is not None:  # --from runs without torch
    import torch.nn as nn
    from sdxl_unet import record_calls


def sdxl_linears(res, batch):
    """(tokens, in_features, out_features) of every nn.Linear call of one forward."""
    seen = []
    record_calls(nn.Linear, res, batch, lambda m, x: seen.append(
        (x.numel() // x.shape[-1], m.in_features, m.out_features)))
    return seen


LORA_RANKS = (8, 16, 64)
# The grid's rows are launch-bound under about 10 us (8.3-9 us each) and within 5 % of the
# kernels of real steps from about 20 us up (compare_kernels.py --gemm-grid): the kernel rows
# written are those under 15 us, so they replace the grid only where it timed the launch.
GRID_LAUNCH_BOUND_MS = 0.015


def shapes():
    """(op, m, n, k): C[m, n] = op(A) op(B), as vrsim-calibrate names them."""
    out = set()
    lin = set()
    for res in (512, 1024):
        for b in (1, 4):
            lin.update(sdxl_linears(res, b))
    for t in (2048, 4096, 8192):
        for r in LORA_RANKS:
            lin.add((t, 4096, r))      # lora_A
            lin.add((t, r, 4096))      # lora_B
    for tokens, fin, fout in lin:
        out.add(("nt", tokens, fout, fin))   # forward: x[t, in] w[out, in]^T
        out.add(("nn", tokens, fin, fout))   # data gradient: g[t, out] w[out, in]
        out.add(("tn", fout, fin, tokens))   # weight gradient: g^T[out, t] x[t, in]
    for s in (256, 384, 512, 768, 1024, 1536, 2048):
        out.add(("nn", s, s, s))
    return sorted(out)


def operands(op, m, n, k, dtype=None):
    """A call computing C[m, n] = op(A) op(B) on random operands (bf16 unless dtype)."""
    kw = dict(device="cuda", dtype=dtype or torch.bfloat16)
    if op == "nt":
        a, b = torch.randn(m, k, **kw), torch.randn(n, k, **kw)
        return lambda: a @ b.t()
    if op == "tn":
        a, b = torch.randn(k, m, **kw), torch.randn(k, n, **kw)
        return lambda: a.t() @ b
    a, b = torch.randn(m, k, **kw), torch.randn(k, n, **kw)
    return lambda: a @ b


def kernel_time(fn, calls=10):
    """After 5 warm-up calls, the median over `calls` of one call's summed kernel time (ms) and
    its kernel count (kernel_timing.median_kernel_us)."""
    for _ in range(5):
        fn()
    us, n = median_kernel_us(fn, calls)
    return us.get("all", 0.0) / 1e3, round(n.get("all", 0))


def measure(a):
    rows = []
    for op, m, n, k in shapes():
        ms, kernels = kernel_time(operands(op, m, n, k))
        if ms:
            rows.append({"dtype": "bf16", "op": op, "m": m, "n": n, "k": k, "ms": round(ms, 5),
                         "tflops": round(2 * m * n * k / (ms * 1e-3) / 1e12, 2), "kernels": kernels})
            print(json.dumps(rows[-1]))
        torch.cuda.empty_cache()
    save_rows(a.out, rows)


def write_lua(src, path):
    d = json.load(open(src))
    with open(path, "w") as f:
        f.write("-- cuBLAS GEMM kernels' own time on NVIDIA H200 (torch 2.11.0+cu130, torch.profiler, the\n"
                "-- median of 10 calls each), 2026-12-01: the Linear shapes of the SDXL UNet at 512 and\n"
                "-- 1024 px, batch 1 and 4, forward and both gradients, LoRA adapters of a 4096-wide layer,\n"
                "-- and squares of 256-2048; those whose kernels take under 15 us. Below the largest of\n"
                "-- these problems they replace the grid of h200_gemm.lua (sim/cost.c gemm_points), whose\n"
                "-- single timed calls measure the launch there (8.3-9 us for every GEMM under about 10 us).\n"
                "--   python3 validation/harness/measure_gemm_kernels.py --out validation/results/gemm_kernels_h200.json\n"
                "--   python3 validation/harness/measure_gemm_kernels.py --from validation/results/gemm_kernels_h200.json --lua THIS_FILE\n")
        f.write("-- LoRA's adapter GEMMs (rank 8-64 against 4096) are measured but left out here: their time\n"
                "-- is their bytes' (13.6-16.9 us for 4096x4096x8, a 32 MiB output), and vrsim prices a GEMM\n"
                "-- by its bytes where those take longer than its FLOPs; on this FLOP curve they would set the\n"
                "-- rate of square GEMMs of the same FLOPs (4-5 times faster) too.\n")
        f.write("return {\n  gemm_kernels = {\n")
        for r in d["rows"]:
            if min(r["m"], r["n"], r["k"]) in LORA_RANKS or r["ms"] >= GRID_LAUNCH_BOUND_MS:
                continue
            f.write('    {dtype="%s", op="%s", m=%d, n=%d, k=%d, ms=%.5f, tflops=%.2f, kernel_time=true},\n'
                    % (r["dtype"], r["op"], r["m"], r["n"], r["k"], r["ms"], r["tflops"]))
        f.write("  },\n}\n")
    print("%d rows" % len(d["rows"]))


def main():
    measure_or_write(__doc__, measure, write_lua)


if __name__ == "__main__":
    main()
