"""Host time of torch.optim's AdamW step and zero_grad against the number of parameter tensors,
on tensors so small that the GPU never limits: the Python and dispatch work the optimizer does per
tensor (grouping by device and dtype, the CPU step counters, the bias-correction lists, each
_foreach_ op's per-tensor checks, set_to_none), which a model with many tensors (SDXL: 1,680)
pays on every step. Prints one JSON line per (impl, dtype, tensors) and a least-squares line
(intercept and per-tensor slope) per (impl, dtype).

  python3 validation/harness/measure_optim_host.py --out validation/results/optim_host_h200.jsonl
"""
import argparse
import json
import time

import torch

COUNTS = (64, 256, 1024, 2048)


def host_ms(impl, dtype, n, reps=7, dev="cuda"):
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    params = [torch.nn.Parameter(torch.randn(256, device=dev, dtype=dtype)) for _ in range(n)]
    grads = [torch.randn_like(p) for p in params]
    kw = {"foreach": dict(foreach=True), "fused": dict(fused=True), "forloop": dict(foreach=False)}[impl]
    opt = torch.optim.AdamW(params, lr=1e-5, **kw)
    best_step, best_zero = float("inf"), float("inf")
    for r in range(reps + 2):
        for p, g in zip(params, grads):
            p.grad = g
        sync()
        t0 = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        sync()
        if r >= 2:  # the first steps create the state
            best_step, best_zero = min(best_step, t1 - t0), min(best_zero, t2 - t1)
    return best_step * 1e3, best_zero * 1e3


def fit(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def per_tensor_us(impl="foreach", dtype=torch.bfloat16, dev="cuda", counts=COUNTS):
    """The least-squares per-tensor slopes of the step and of zero_grad, us: the host's own
    figures for lua/hw/calibrated/<gpu>_torch.lua's optim_step_tensor_us and zero_grad_tensor_us
    (vrsim's hardware.host_optim)."""
    rows = [(n, *host_ms(impl, dtype, n, dev=dev)) for n in counts]
    _, m = fit([r[0] for r in rows], [r[1] for r in rows])
    _, mz = fit([r[0] for r in rows], [r[2] for r in rows])
    return round(m * 1e3, 4), round(mz * 1e3, 4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.out, "a") as f:
        for impl in ("foreach", "fused", "forloop"):
            for dtype in (torch.bfloat16, torch.float32):
                rows = []
                for n in COUNTS:
                    s, z = host_ms(impl, dtype, n)
                    rows.append((n, s, z))
                    rec = {"impl": impl, "dtype": str(dtype).replace("torch.", ""), "tensors": n,
                           "step_host_ms": round(s, 4), "zero_grad_host_ms": round(z, 4)}
                    f.write(json.dumps(rec) + "\n")
                    print(json.dumps(rec))
                b, m = fit([r[0] for r in rows], [r[1] for r in rows])
                bz, mz = fit([r[0] for r in rows], [r[2] for r in rows])
                rec = {"impl": impl, "dtype": str(dtype).replace("torch.", ""), "fit": True,
                       "step_intercept_us": round(b * 1e3, 2), "step_per_tensor_us": round(m * 1e3, 4),
                       "zero_grad_intercept_us": round(bz * 1e3, 2), "zero_grad_per_tensor_us": round(mz * 1e3, 4),
                       "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
                f.write(json.dumps(rec) + "\n")
                print(json.dumps(rec))


if __name__ == "__main__":
    main()
