"""The device's dead time between back-to-back kernels of one stream, as torch.profiler counts
kernel time: a stream of N identical kernels, queued far ahead of the GPU, is timed with CUDA
events (wall) and under the profiler (the sum of its kernel durations, busy); (wall - busy) / N is
the gap each kernel adds. Several kernel sizes, so a gap that depends on the kernel shows.

  python3 validation/measure/measure_kernel_gap.py --out validation/measure/kernel_gap_h200.json
"""
import argparse, json, statistics
import torch
from torch.profiler import profile, ProfilerActivity


def run(x, n, op):
    for _ in range(n):
        op(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="kernels per timed stream")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ops = {"add_": lambda t: t.add_(1.0), "mul_": lambda t: t.mul_(1.0001)}
    rows = []
    for mib in (1, 8, 64, 256):
        x = torch.randn(mib * 2**20 // 2, device="cuda", dtype=torch.bfloat16)
        for name, op in ops.items():
            run(x, 50, op)
            torch.cuda.synchronize()
            walls = []
            for _ in range(a.reps):
                # a long kernel first, so the host queues the whole stream before the GPU reaches it
                torch.cuda._sleep(200_000_000)
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record(); run(x, a.n, op); e1.record(); torch.cuda.synchronize()
                walls.append(e0.elapsed_time(e1))
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.cuda._sleep(200_000_000)
                run(x, a.n, op); torch.cuda.synchronize()
            durs = [e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
                    for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                    and not any(s in e.name.lower() for s in ("sleep", "spin"))]
            busy_ms = sum(durs) / 1e3
            wall_ms = statistics.median(walls)
            row = {"op": name, "mib": mib, "kernels": len(durs), "n": a.n,
                   "kernel_us": round(busy_ms * 1e3 / max(1, len(durs)), 3),
                   "wall_ms": round(wall_ms, 4), "busy_ms": round(busy_ms, 4),
                   "gap_us": round((wall_ms - busy_ms) * 1e3 / a.n, 3)}
            rows.append(row)
            print(json.dumps(row))
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
           "gap_us_median": statistics.median(r["gap_us"] for r in rows)}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("gap_us_median", res["gap_us_median"])


if __name__ == "__main__":
    main()
