"""Host time of torch.utils.checkpoint (use_reentrant=False) per region and per op, on tensors so
small that the GPU never limits: R regions of k tiny ops each (x = x * 1.0001 + 0.0001, two
kernels), forward + backward, with and without checkpointing. A least-squares fit of
t = a + b*R + c*R*k gives, for each mode, the cost per region (b) and per op (c); the
difference of b between modes is what one checkpointed region costs on the host beyond its ops
(the RNG state, the saved-tensor hooks, the recomputation's set-up), the difference of c what each
op costs more inside one.

  python3 validation/harness/measure_ckpt_region.py --out validation/results/ckpt_region_h200.json
"""
import argparse
import json
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint

GRID = [(16, 1), (16, 8), (64, 1), (64, 8), (128, 2), (128, 4)]


def block(k):
    def f(x):
        for _ in range(k):
            x = x * 1.0001 + 0.0001
        return x
    return f


def step_ms(R, k, ckpt, reps=25):
    x0 = torch.randn(64, 64, device="cuda", requires_grad=True)
    f = block(k)

    def run():
        x = x0
        for _ in range(R):
            x = checkpoint(f, x, use_reentrant=False) if ckpt else f(x)
        x.sum().backward()
    for _ in range(3):
        run()
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter(); run(); torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.fmean(ts), min(ts)


def lstsq(rows):
    """t = a + b*R + c*R*k by normal equations (3x3)."""
    X = [[1.0, R, R * k] for R, k, _ in rows]
    y = [t for _, _, t in rows]
    XtX = [[sum(X[n][i] * X[n][j] for n in range(len(X))) for j in range(3)] for i in range(3)]
    Xty = [sum(X[n][i] * y[n] for n in range(len(X))) for i in range(3)]
    # Gaussian elimination
    A = [XtX[i] + [Xty[i]] for i in range(3)]
    for i in range(3):
        p = max(range(i, 3), key=lambda r: abs(A[r][i]))
        A[i], A[p] = A[p], A[i]
        for r in range(3):
            if r != i:
                f = A[r][i] / A[i][i]
                A[r] = [A[r][j] - f * A[i][j] for j in range(4)]
    return [A[i][3] / A[i][i] for i in range(3)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": []}
    for ckpt in (False, True):
        rows_mean, rows_best = [], []
        for R, k in GRID:
            mean, best = step_ms(R, k, ckpt)
            res["rows"].append({"ckpt": ckpt, "regions": R, "ops_per_region": k,
                                "mean_ms": round(mean, 4), "best_ms": round(best, 4)})
            rows_mean.append((R, k, mean)); rows_best.append((R, k, best))
            print(res["rows"][-1])
        for name, rows in (("mean", rows_mean), ("best", rows_best)):
            a0, b, c = lstsq(rows)
            res[f"{'ckpt' if ckpt else 'plain'}_{name}"] = {"intercept_ms": round(a0, 4),
                                                         "per_region_us": round(b * 1e3, 3),
                                                         "per_op_us": round(c * 1e3, 3)}
    for name in ("mean", "best"):
        p, c = res[f"plain_{name}"], res[f"ckpt_{name}"]
        res[f"region_overhead_us_{name}"] = round(c["per_region_us"] - p["per_region_us"], 3)
        res[f"op_overhead_us_{name}"] = round(c["per_op_us"] - p["per_op_us"], 3)
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}, indent=1))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
