"""How the host time of a launch-bound step is spread, on the module-heavy blocks of
measure_module_dispatch.py (diffusers-style ResNet and transformer blocks at sizes where the GPU
never limits):

  1. per kernel: best, median and mean over many steps, with Python's garbage collector on (as
     training scripts run) and off, plain and under torch.utils.checkpoint(use_reentrant=False):
     a single step is one draw from this distribution, and the collector's pauses land in some
     steps and not others;
  2. autocast: the same blocks with fp32 parameters under torch.autocast(bf16) against bf16
     parameters: the extra host time per extra kernel is what each cast autocast inserts (and its
     ToCopyBackward0) costs on the host.

  python3 validation/harness/measure_host_stats.py --out validation/results/host_stats_h200.json
"""
import argparse
import gc
import json
import statistics
import sys
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_module_dispatch import Resnet, Transformer  # noqa: E402


def make(dtype, ckpt, autocast):
    torch.manual_seed(0)
    c, t, ctx = 64, 64, 32
    blocks = nn.ModuleList([m for _ in range(8) for m in (Resnet(c, t), Transformer(c, ctx))]).to("cuda", dtype)
    x0 = torch.randn(1, c, 8, 8, device="cuda", dtype=dtype, requires_grad=True)
    temb = torch.randn(1, t, device="cuda", dtype=dtype)
    cond = torch.randn(1, 8, ctx, device="cuda", dtype=dtype)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            x = x0
            for m in blocks:
                arg = temb if isinstance(m, Resnet) else cond
                x = checkpoint(m, x, arg, use_reentrant=False) if ckpt else m(x, arg)
        F.mse_loss(x.float(), torch.zeros_like(x, dtype=torch.float32)).backward()
    return step


def kernels_of(step):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(); torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def times_ms(step, n, gc_on):
    (gc.enable if gc_on else gc.disable)()
    out = []
    for _ in range(n):
        torch.cuda.synchronize(); t0 = time.perf_counter(); step(); torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    gc.enable()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "steps": a.steps, "runs": []}
    for name, dtype, ckpt, ac in (("bf16", torch.bfloat16, False, False), ("bf16-ckpt", torch.bfloat16, True, False),
                                  ("amp", torch.float32, False, True), ("amp-ckpt", torch.float32, True, True)):
        step = make(dtype, ckpt, ac)
        for _ in range(5): step()
        k = kernels_of(step)
        for gc_on in (True, False):
            ts = times_ms(step, a.steps, gc_on)
            row = {"config": name, "gc": gc_on, "kernels": k,
                   "best_us_per_kernel": round(min(ts) / k * 1e3, 3),
                   "median_us_per_kernel": round(statistics.median(ts) / k * 1e3, 3),
                   "mean_us_per_kernel": round(statistics.fmean(ts) / k * 1e3, 3),
                   "step_ms": {"best": round(min(ts), 3), "median": round(statistics.median(ts), 3),
                               "mean": round(statistics.fmean(ts), 3), "max": round(max(ts), 3)}}
            res["runs"].append(row)
            print(json.dumps(row))
    by = {(r["config"], r["gc"]): r for r in res["runs"]}
    for base, amp in (("bf16", "amp"), ("bf16-ckpt", "amp-ckpt")):
        b, m = by[(base, False)], by[(amp, False)]
        extra_k = m["kernels"] - b["kernels"]
        extra_ms = m["step_ms"]["median"] - b["step_ms"]["median"]
        res["autocast_" + base] = {"extra_kernels": extra_k, "extra_ms": round(extra_ms, 3),
                                   "us_per_extra_kernel": round(extra_ms / extra_k * 1e3, 3) if extra_k else None}
        print(base, res["autocast_" + base])
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
