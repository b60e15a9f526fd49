"""Does an SDXL UNet step's host time depend on the resolution? Two UNets of the same config in
one process, one fed latents of --res-a, the other of --res-b, their steps interleaved (A, B,
A, B ...) so that the host's own drift falls on both alike; Python's collector off. Per
resolution: each step's host time per phase (no synchronisation inside the step) and CUDA-event
time, then one torch.profiler step each, summed per top-level host op (self CPU microseconds,
count), to show which ops' host time moves with the resolution.

  python3 validation/harness/interleave_sdxl_host.py --res-a 64 --res-b 1024 --ckpt --out F.jsonl
"""
import argparse
import gc
import json
import os
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_sdxl_step import build, phases, timed_step  # noqa: E402


def step(fns):
    """One step's GPU and per-phase host milliseconds (profile_sdxl_step.timed_step)."""
    r = timed_step(*fns)
    del r["wait_ms"]
    return r


def op_table(fns):
    from torch.profiler import ProfilerActivity, profile
    fwd, bwd, optim = fns
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = fwd(); bwd(loss); optim()
        torch.cuda.synchronize()
    t = {}
    for e in prof.key_averages():
        t[e.key] = [e.count, round(e.self_cpu_time_total, 1)]
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res-a", type=int, default=64)
    ap.add_argument("--res-b", type=int, default=1024)
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--mode", default="bf16")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    runs = {}
    for res in (a.res_a, a.res_b):
        cfg = SimpleNamespace(res=res, batch=1, mode=a.mode, ckpt=a.ckpt)
        model, opt, inp, target, _ = build(cfg)
        runs[res] = (phases(cfg, model, opt, inp, target), (model, opt, inp, target))
    gc.disable()
    for res in runs:  # warm-up: optimizer state, cuDNN plans
        step(runs[res][0]); step(runs[res][0])
    rows = {res: [] for res in runs}
    for _ in range(a.steps):
        for res in runs:
            rows[res].append(step(runs[res][0]))
    tables = {res: op_table(runs[res][0]) for res in runs}
    rec = {"name": f"sdxl-interleave-r{a.res_a}-r{a.res_b}{'-ckpt' if a.ckpt else ''}",
           "ckpt": a.ckpt, "mode": a.mode, "steps": {str(r): v for r, v in rows.items()},
           "host_ops": {str(r): v for r, v in tables.items()}, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name()}
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    for res, v in rows.items():
        hs = sorted(sum(s["host_ms"].values()) for s in v)
        gs = sorted(s["gpu_ms"] for s in v)
        print(res, "host median %.1f min %.1f max %.1f" % (hs[len(hs) // 2], hs[0], hs[-1]),
              "step median %.1f min %.1f" % (gs[len(gs) // 2], gs[0]))
    ta, tb = tables[a.res_a], tables[a.res_b]
    diff = sorted(((tb.get(k, [0, 0])[1] - ta.get(k, [0, 0])[1], k) for k in set(ta) | set(tb)), reverse=True)
    for d, k in diff[:25]:
        print("%10.1f us  %s  a=%s b=%s" % (d, k, ta.get(k), tb.get(k)))


if __name__ == "__main__":
    main()
