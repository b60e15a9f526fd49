"""Where the GPU waits in one steady training step of a record's run (built as
profile_hf_step.py builds it): the step timed with CUDA events as the records time theirs, then
the same step under torch.profiler (CPU and CUDA), its kernels' busy time (the union of their
intervals) and the gaps between them, by phase (forward, backward, optimizer and zero_grad, marked
with record_function) and by the innermost CPU op running when each gap began: what the device
waited for. One JSON line per record.

  python3 validation/harness/profile_gpu_idle.py --record validation/records/llama_h200_gen_families.jsonl \\
      --name gen-mistral-l4-b4 --out F.jsonl
"""
import collections
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_hf_step import built_from_args  # noqa: E402

PHASES = ("forward", "backward", "optimizer")
GAP_US = 2.0  # shorter gaps are the stream's own spacing between kernels


def step(fwd, opt, mark):
    with mark("forward"):
        loss = fwd()
    with mark("backward"):
        loss.backward()
    with mark("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)


def timed(fwd, opt, n=5):
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step(fwd, opt, lambda _n: torch.profiler.record_function("x"))
        e.record()
        torch.cuda.synchronize()
        out.append(round(s.elapsed_time(e), 3))
    return out


def main():
    a, _, fwd, opt = built_from_args(__doc__)
    step_ms = timed(fwd, opt)
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(fwd, opt, record_function)
        torch.cuda.synchronize()
    ev = prof.events()
    kernels = sorted((e.time_range.start, e.time_range.end) for e in ev
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    cpu = [e for e in ev if e.device_type == torch.autograd.DeviceType.CPU]
    marks = {e.name: (e.time_range.start, e.time_range.end) for e in cpu if e.name in PHASES}
    # busy intervals, and the gaps between them from the first kernel to the last
    busy, gaps = [], []
    for s, e in kernels:
        if busy and s <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], e)
        else:
            if busy and s - busy[-1][1] > GAP_US:
                gaps.append((busy[-1][1], s))
            busy.append([s, e])
    busy_us = sum(e - s for s, e in busy)
    by_phase = collections.Counter()
    by_op = collections.Counter()
    n_by_op = collections.Counter()
    for g0, g1 in gaps:
        ph = next((p for p, (s, e) in marks.items() if s <= g0 < e), "between")
        by_phase[ph] += g1 - g0
        # the innermost CPU op (not a phase mark) running as the gap began
        inner = [e for e in cpu if e.time_range.start <= g0 < e.time_range.end and e.name not in PHASES]
        name = min(inner, key=lambda e: e.time_range.end - e.time_range.start).name if inner else "(none)"
        by_op[name] += g1 - g0
        n_by_op[name] += 1
    span_us = (kernels[-1][1] - kernels[0][0]) if kernels else 0
    out = {"name": a.name, "step_ms": step_ms, "profiled_span_ms": round(span_us / 1e3, 3),
           "kernel_busy_ms": round(busy_us / 1e3, 3), "kernels": len(kernels),
           "gaps_over_us": GAP_US, "gap_ms": round(sum(g1 - g0 for g0, g1 in gaps) / 1e3, 3),
           "gap_ms_by_phase": {k: round(v / 1e3, 3) for k, v in by_phase.items()},
           "gap_ms_by_cpu_op": [[k, round(v / 1e3, 3), n_by_op[k]] for k, v in by_op.most_common(25)],
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    with open(a.out, "a") as f:
        f.write(json.dumps(out) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "gap_ms_by_cpu_op"}))
    for k, ms, n in out["gap_ms_by_cpu_op"][:12]:
        print("  %8.3f ms %5d  %s" % (ms, n, k[:100]))


if __name__ == "__main__":
    main()
