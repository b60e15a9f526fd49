"""The best sustained bf16 matmul on this GPU, measured the way ml-engineering's "Maximum
Achievable Matmul FLOPS" (MAMF, benchmark version 2) table measures other GPUs
(https://github.com/stas00/ml-engineering/tree/master/compute/accelerator, mamf-finder.py): for
each shape torch.mm(A, B.t(), out=C) in bf16, each call preceded by zeroing a 256 MiB buffer (the
cache reset) and re-randomising C, 50 warm-up calls then the mean of 100 timed by CUDA events,
after warming the card up for 10 s; the figure is the best mean over the shapes tried. The
shapes: the published best shapes of the A100 SXM, H100 SXM and GH200 rows and a grid around
them. The SM clock and power are sampled with nvidia-smi throughout.

vrsim's GEMM curve was timed from an idle card (the clock that GEMMs inside a training step hold);
this figure is the card held busy back to back, the same way the published rows were taken, so
the two say how far sustained load pulls this GPU below its in-step plateau (docs/step-time.md).

  python3 validation/harness/measure_sustained_matmul.py --out F.json
"""
import argparse
import json
import subprocess
import time

import torch

PUBLISHED_BEST = [(1024, 10240, 5120), (2048, 2048, 13312), (1024, 15360, 4096)]
GRID = [(m, n, k) for m in (1024, 2048, 4096) for n in range(4096, 16385, 4096)
        for k in range(4096, 16385, 4096)]


def mean_tflops(m, n, k, scratch):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    c_rand = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(150)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(150)]
    with torch.no_grad():
        for s, e in zip(starts, ends):
            scratch.zero_()
            c.copy_(c_rand)
            s.record()
            torch.mm(a, b, out=c)
            e.record()
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in zip(starts, ends)][50:]
    return 2.0 * m * n * k / (sum(ms) / len(ms) * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "200"], stdout=subprocess.PIPE, text=True)
    scratch = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    t_end = time.monotonic() + 10
    while time.monotonic() < t_end:
        mean_tflops(*PUBLISHED_BEST[0], scratch)
    rows = [{"m": m, "n": n, "k": k, "mean_tflops": round(mean_tflops(m, n, k, scratch), 1),
             "published_best": (m, n, k) in PUBLISHED_BEST}
            for m, n, k in PUBLISHED_BEST + GRID]
    smi.terminate()
    samples = []
    for line in smi.communicate()[0].splitlines():
        try:
            clk, pw = (float(x) for x in line.split(","))
            samples.append((clk, pw))
        except ValueError:
            pass
    best = max(rows, key=lambda r: r["mean_tflops"])
    clocks = sorted(s[0] for s in samples)
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
           "best": best, "rows": rows,
           "sm_clock_mhz": {"min": clocks[0], "median": clocks[len(clocks) // 2], "max": clocks[-1]} if clocks else None,
           "power_w_max": max(s[1] for s in samples) if samples else None}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print("best mean %.1f TFLOP/s at %dx%dx%d; SM clock %s; power max %s W" %
          (best["mean_tflops"], best["m"], best["n"], best["k"], out["sm_clock_mhz"], out["power_w_max"]))


if __name__ == "__main__":
    main()
