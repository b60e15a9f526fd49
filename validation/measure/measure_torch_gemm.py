#!/usr/bin/env python3
"""torch.mm over the reference shapes of validation/hw_h200_pytorch.json, timed three ways, to
explain the gap between those figures and sim/calib's cuBLAS figures:
  single:  each product timed alone with CUDA events (the GPU idle in between), mean of 10
           after 3 warm-ups;
  batched: one event pair around 20 back-to-back products (after 3 warm-ups), per product;
  sustained: 20 back-to-back products timed after ~400 ms of the same product.
Random normal inputs; tf32 is fp32 with torch.backends.cuda.matmul.allow_tf32 = True.

  measure_torch_gemm.py --out FILE.json
"""
import argparse
import json
import sys
import time

SHAPES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
          (8192, 8192, 8192), (8192, 4096, 4096), (8192, 11008, 4096), (8192, 4096, 11008),
          (16384, 32000, 4096), (2048, 4096, 4096), (4096, 5120, 5120), (8192, 13824, 5120)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    dev = torch.device("cuda", 0)
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "measured": time.strftime("%Y-%m-%d", time.gmtime()), "gemm": []}
    for dname in ("bf16", "fp16", "tf32", "fp32"):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dname, torch.float32)
        torch.backends.cuda.matmul.allow_tf32 = dname == "tf32"
        for m, n, k in SHAPES:
            if dname in ("fp32",) and m * n * k > 8192 * 8192 * 8192:
                continue
            x = torch.randn(m, k, device=dev, dtype=dt)
            y = torch.randn(k, n, device=dev, dtype=dt)
            for _ in range(3):
                torch.mm(x, y)
            torch.cuda.synchronize()
            single = []
            for _ in range(10):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                torch.mm(x, y)
                e1.record()
                torch.cuda.synchronize()
                single.append(e0.elapsed_time(e1))
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20):
                torch.mm(x, y)
            e1.record()
            torch.cuda.synchronize()
            batched = e0.elapsed_time(e1) / 20
            reps = max(1, int(400.0 / max(batched, 1e-3)))
            for _ in range(reps):
                torch.mm(x, y)
            e0.record()
            for _ in range(20):
                torch.mm(x, y)
            e1.record()
            torch.cuda.synchronize()
            sustained = e0.elapsed_time(e1) / 20
            fl = 2.0 * m * n * k
            row = {"dtype": dname, "m": m, "n": n, "k": k,
                   "single_ms": sum(single) / len(single), "batched_ms": batched, "sustained_ms": sustained}
            for key in ("single", "batched", "sustained"):
                row[key + "_tflops"] = fl / (row[key + "_ms"] * 1e-3) / 1e12
            res["gemm"].append(row)
            print(f"torch {dname:4s} {m:6d} {n:6d} {k:6d}  single {row['single_tflops']:7.1f}  batched "
                  f"{row['batched_tflops']:7.1f}  sustained {row['sustained_tflops']:7.1f} TFLOP/s", flush=True)
            del x, y
    torch.backends.cuda.matmul.allow_tf32 = False
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
