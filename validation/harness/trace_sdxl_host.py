"""Where a host-bound SDXL UNet step spends the time that neither its host issue nor its kernels
account for: per step, the host time of each phase (no synchronisation inside the step) next to
the step's CUDA-event time, Python's garbage collections during the step (generation, count,
milliseconds, from gc.callbacks), and for one steady step under torch.profiler the CUDA runtime
calls that block the host and the GPU's idle gaps. One JSON line per configuration:

  steps            per step: gpu_ms (CUDA events), host_ms per phase, gc: {gen: [count, ms]}
  runtime_calls    cudaLaunchKernel, cudaMalloc, cudaFree, cudaStreamSynchronize ... :
                   count, total and largest host microseconds (profiled step)
  gpu_idle_ms      the profiled step's time with no kernel running, and its largest gaps with
                   the top-level host op running when each gap began

  python3 validation/harness/trace_sdxl_host.py --res 1024 --ckpt --gc on --out F.jsonl
"""
import argparse
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_sdxl_step import build, phases, timed_step  # noqa: E402


class GcLog:
    """Each collection's generation and duration, via gc.callbacks."""

    def __init__(self):
        self.t0, self.rows = None, []
        gc.callbacks.append(self.cb)

    def cb(self, phase, info):
        if phase == "start":
            self.t0 = time.perf_counter()
        elif self.t0 is not None:
            self.rows.append((info["generation"], (time.perf_counter() - self.t0) * 1e3))
            self.t0 = None

    def take(self):
        out = {}
        for g, ms in self.rows:
            c = out.setdefault(str(g), [0, 0.0])
            c[0] += 1
            c[1] = round(c[1] + ms, 3)
        self.rows = []
        return out


def timed_steps(a, fwd, bwd, optim, log, n):
    rows = []
    for _ in range(n):
        torch.cuda.synchronize()
        log.take()
        r = timed_step(fwd, bwd, optim)
        r["gc"] = log.take()
        rows.append(r)
    return rows


def profiled_step(fwd, bwd, optim):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        loss = fwd(); bwd(loss); optim()
        torch.cuda.synchronize()
    calls, kernels, tops = {}, [], []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append((e.time_range.start, e.time_range.end))
        elif e.name.startswith("cuda") and not e.name.startswith("cudnn"):
            c = calls.setdefault(e.name, [0, 0.0, 0.0])
            c[0] += 1
            c[1] += e.cpu_time_total
            c[2] = max(c[2], e.cpu_time_total)
        elif e.cpu_parent is None:
            tops.append((e.time_range.start, e.time_range.end, e.name))
    kernels.sort()
    tops.sort()
    idle, gaps, end = 0.0, [], None
    for s, t in kernels:
        if end is not None and s > end:
            idle += s - end
            gaps.append((s - end, end))
        end = t if end is None else max(end, t)
    gaps.sort(reverse=True)

    def host_at(ts):
        name = ""
        for s, t, n in tops:
            if s <= ts <= t:
                name = n
            if s > ts:
                break
        return name
    return {"runtime_calls": {k: {"count": v[0], "total_us": round(v[1], 1), "max_us": round(v[2], 1)}
                              for k, v in sorted(calls.items(), key=lambda kv: -kv[1][1])},
            "gpu_span_ms": round((kernels[-1][1] - kernels[0][0]) / 1e3, 3) if kernels else 0,
            "gpu_idle_ms": round(idle / 1e3, 3),
            "largest_gaps": [{"ms": round(g / 1e3, 3), "host_op": host_at(ts)} for g, ts in gaps[:15]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mode", default="bf16", choices=["bf16", "amp_bf16"])
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--gc", default="on", choices=["on", "off"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    model, opt, inp, target, dtype = build(a)
    fwd, bwd, optim = phases(a, model, opt, inp, target)
    log = GcLog()
    if a.gc == "off":
        gc.disable()
    steps = timed_steps(a, fwd, bwd, optim, log, a.steps)
    prof = profiled_step(fwd, bwd, optim)
    rec = {"name": f"sdxl-r{a.res}-b{a.batch}-{a.mode}{'-ckpt' if a.ckpt else ''}-gc{a.gc}",
           "res": a.res, "batch": a.batch, "mode": a.mode, "ckpt": a.ckpt, "gc": a.gc,
           "gc_threshold": gc.get_threshold(), "gc_tracked_objects": len(gc.get_objects()),
           "steps": steps, **prof, "python": sys.version.split()[0], "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name()}
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: rec[k] for k in ("name", "gc_tracked_objects", "gpu_idle_ms", "gpu_span_ms")}))
    for s in steps:
        print(json.dumps(s))
    print(json.dumps(prof["runtime_calls"])[:1500])
    print(json.dumps(prof["largest_gaps"])[:1500])


if __name__ == "__main__":
    main()
