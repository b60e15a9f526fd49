"""Where a Hugging Face training step's host time goes: one steady step of a record's run (built as
profile_hf_step.py builds it) under torch.profiler with the host's activity, the forward, backward
and optimizer issued back to back as a training loop issues them. For each phase: its host time,
each ATen op's own host time and calls, and every CUDA runtime call that can block the host
(stream and device synchronizations, device-to-host copies, event waits) with the ATen op that
made it. A step the GPU outruns has no blocking calls; one that waits on the GPU shows where.

  python3 validation/harness/profile_hf_host.py --record validation/harness/plans/plan_gen10_fulldepth.jsonl \\
      --name gen10-qwen3-30b-a3b-lora-b1-ckpt --out F.jsonl

DETAIL_OP=IndexBackward0 also lists that op's first three calls child by child (each child's host
time), to see where its own time goes.
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_hf_step import built_from_args  # noqa: E402

# CUDA runtime calls that can hold the host until the device has caught up
BLOCKING = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
            "cudaMemcpy", "cudaMemcpyAsync", "cudaStreamWaitEvent", "cudaMalloc", "cudaFree")


def aten_parent(e):
    """The nearest enclosing ATen (or autograd node) op of a profiler event, by name."""
    p = getattr(e, "cpu_parent", None)
    while p is not None:
        if p.name.startswith("aten::") or "Backward" in p.name:
            return p.name
        p = getattr(p, "cpu_parent", None)
    return "(none)"


def phase_table(prof):
    """(own host us by ATen op, blocking runtime calls by (call, enclosing op))."""
    ops, blocking = {}, {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        if e.name.startswith("aten::") or "Backward" in e.name:
            row = ops.setdefault(e.name, [0, 0.0])
            row[0] += 1
            row[1] += e.self_cpu_time_total
        elif e.name.startswith(BLOCKING):
            row = blocking.setdefault(e.name + " <- " + aten_parent(e), [0, 0.0])
            row[0] += 1
            row[1] += e.cpu_time_total
    top = sorted(ops.items(), key=lambda kv: -kv[1][1])[:40]
    return ({k: {"calls": c, "self_us": round(us, 1)} for k, (c, us) in top},
            {k: {"calls": c, "us": round(us, 1)} for k, (c, us) in sorted(blocking.items(), key=lambda kv: -kv[1][1])})


def detail(prof, name, first=3):
    """The first calls of op `name`: each one's host time and its direct children (ATen ops, CUDA
    runtime calls) with theirs, in order; what its own host time is spent between."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CPU and e.name == name:
            kids = [{"name": c.name, "us": round(c.cpu_time_total, 1)} for c in e.cpu_children]
            out.append({"us": round(e.cpu_time_total, 1), "self_us": round(e.self_cpu_time_total, 1),
                        "children": kids})
            if len(out) == first:
                break
    return out


def main():
    detail_of = os.environ.get("DETAIL_OP")  # an op whose first calls are listed child by child
    a, rec, fwd, opt = built_from_args(__doc__)
    from torch.profiler import ProfilerActivity, profile
    out = {"name": a.name, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "phases": {}}
    torch.cuda.synchronize()
    holder = {}
    phases = (("forward", lambda: holder.__setitem__("loss", fwd())),
              ("backward", lambda: holder.pop("loss").backward()),
              ("optimizer", lambda: (opt.step(), opt.zero_grad(set_to_none=True))))
    t_step = time.perf_counter()
    for name, fn in phases:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            fn()
            host_ms = (time.perf_counter() - t0) * 1e3
        ops, blocking = phase_table(prof)
        out["phases"][name] = {"host_ms": round(host_ms, 2), "ops": ops, "blocking": blocking}
        if detail_of:
            out["phases"][name]["detail"] = detail(prof, detail_of)
    torch.cuda.synchronize()
    out["step_ms_profiled"] = round((time.perf_counter() - t_step) * 1e3, 2)
    with open(a.out, "a") as f:
        f.write(json.dumps(out) + "\n")
    for name, ph in out["phases"].items():
        print("%s: host %.1f ms" % (name, ph["host_ms"]))
        for k, v in list(ph["blocking"].items())[:8]:
            print("   blocking %5d %10.1f us  %s" % (v["calls"], v["us"], k))
        for k, v in list(ph["ops"].items())[:12]:
            print("   op       %5d %10.1f us  %s" % (v["calls"], v["self_us"], k))


if __name__ == "__main__":
    main()
