#!/usr/bin/env python3
"""float8 GEMMs as torchao's Float8Linear runs them (torch._scaled_mm, e4m3 operands, bf16 out), over
the shapes of the bf16 grid vrsim reads (lua/hw/calibrated/h200_gemm.lua), timed by the grid's
protocol (vrsim-calibrate --gemm-idle-ms): each shape from an idle card (--idle-ms), 3 warm-ups,
then --calls calls each timed alone with CUDA events, the median. A training step's GEMMs run
between memory-bound kernels, below the power limit; a grid timed back to back runs power-capped
(docs/gpus.md, "Clocks under the power limit").

_scaled_mm takes the first operand row-major and the second column-major: every Float8Linear
GEMM (forward, grad_input, grad_weight) is that `nt` product after its layout copies, which
strategies/float8.lua prices apart. Two scalings: tensorwise (one fp32 scale an operand) and
rowwise (a scale per row of A and per column of B), and the same product in bf16 (torch.mm, the
card's bf16 rate in the same run), each a row of the JSON; --lua writes the tensorwise rows as
vrsim's `gemm` rows of dtype fp8.

  measure_fp8_gemm.py --out F.json [--lua F.lua] [--idle-ms 200] [--calls 10]
  measure_fp8_gemm.py --from F.json --lua F.lua      (convert only; no GPU)
"""
import argparse
import json
import re
import statistics
import time


def grid_shapes(path="lua/hw/calibrated/h200_gemm.lua"):
    rows = re.findall(r'\{dtype="bf16", op="\w+", m=(\d+), n=(\d+), k=(\d+),[^}]*tag="(\w+)"\}', open(path).read())
    seen, out = set(), []
    for m, n, k, tag in rows:
        key = (int(m), int(n), int(k))
        # _scaled_mm needs every dimension a multiple of 16
        if key in seen or any(d % 16 for d in key):
            continue
        seen.add(key)
        out.append(key + (tag,))
    return out


def write_lua(res, path, source):
    L = ["-- float8 (e4m3) GEMMs, torch._scaled_mm with tensorwise scales and bf16 output, as torchao's",
         "-- Float8Linear runs them; each shape from an idle card (%d ms), median of %d calls timed alone" % (
             res["idle_ms"], res["calls"]),
         "-- with CUDA events. GPU %s, torch %s, measured %s." % (res["gpu"], res["torch"], res["measured"]),
         "-- Made by python3 validation/harness/measure_fp8_gemm.py --from %s --lua %s" % (source, path),
         "-- (validation/PROVENANCE.md). op nt: A[m,k] row-major times B[k,n] column-major.",
         "return {", "  gemm = {"]
    for r in res["rows"]:
        if r["scaling"] != "tensorwise" or "ms" not in r:
            continue
        L.append('    {dtype="fp8", op="nt", m=%d, n=%d, k=%d, ms=%.5f, tflops=%.2f, tag="%s"},' % (
            r["m"], r["n"], r["k"], r["ms"], r["tflops"], r["tag"]))
    L += ["  },", "}"]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def measure(a):
    import torch
    dev = torch.device("cuda", 0)
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "measured": time.strftime("%Y-%m-%d"), "idle_ms": a.idle_ms, "calls": a.calls, "rows": []}
    f8 = torch.float8_e4m3fn
    for m, n, k, tag in grid_shapes():
        A = torch.randn(m, k, device=dev).to(f8)
        B = torch.randn(n, k, device=dev).to(f8).t()          # column-major k x n
        scales = {"tensorwise": (torch.ones((), device=dev), torch.ones((), device=dev)),
                  "rowwise": (torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev))}
        Ab, Bb = torch.randn(m, k, device=dev, dtype=torch.bfloat16), torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        for name, (sa, sb) in list(scales.items()) + [("bf16_mm", (None, None))]:
            row = {"m": m, "n": n, "k": k, "tag": tag, "scaling": name}
            try:
                if name == "bf16_mm":   # the same product in bf16 (torch.mm, nt), beside the card's bf16 grid
                    fn = lambda: torch.mm(Ab, Bb.t())
                else:
                    fn = lambda: torch._scaled_mm(A, B, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                torch.cuda.synchronize()
                time.sleep(a.idle_ms / 1e3)
                for _ in range(3):
                    fn()
                ts = []
                for _ in range(a.calls):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record(); fn(); e1.record(); e1.synchronize()
                    ts.append(e0.elapsed_time(e1))
                ms = statistics.median(ts)
                row.update(ms=round(ms, 5), tflops=round(2.0 * m * n * k / (ms * 1e-3) / 1e12, 2))
            except Exception as ex:
                row["error"] = repr(ex)[:160]
            res["rows"].append(row)
            print(m, n, k, name, row.get("tflops", row.get("error")), flush=True)
        del A, B, Ab, Bb
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--from", dest="src")
    ap.add_argument("--lua")
    ap.add_argument("--idle-ms", type=int, default=200)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    if a.src:
        write_lua(json.load(open(a.src)), a.lua, a.src)
        return
    if not a.out:
        ap.error("--out is required to measure")
    res = measure(a)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    if a.lua:
        write_lua(res, a.lua, a.out)


if __name__ == "__main__":
    main()
