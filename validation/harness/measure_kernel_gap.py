"""The device's dead time between back-to-back kernels of one stream, as torch.profiler counts
kernel time: a stream of N identical kernels, queued far ahead of the GPU, is timed with CUDA
events (wall) and under the profiler (the sum of its kernel durations, busy); (wall - busy) / N is
the gap each kernel adds. Several kernel sizes, so a gap that depends on the kernel shows.

  python3 validation/harness/measure_kernel_gap.py --out validation/results/kernel_gap_h200.json \
      --lua lua/hw/calibrated/h200_kernel_gap.lua --gpu h200
  python3 validation/harness/measure_kernel_gap.py --from validation/results/kernel_gap_h200.json \
      --lua lua/hw/calibrated/h200_kernel_gap.lua --gpu h200     # the Lua file again, no GPU

The Lua supplement's kernel_gap_us is the mean over kernels of at least MIN_KERNEL_US: shorter
ones run at the host's launch rate, so their streams measure the host, not the device.
"""
import argparse, json, statistics

MIN_KERNEL_US = 20.0


def lua_supplement(res, gpu, command, src=None):
    rows = [r for r in res["rows"] if r["kernel_us"] >= MIN_KERNEL_US]
    if not rows:
        raise SystemExit(f"measure_kernel_gap: no row with kernels of {MIN_KERNEL_US} us or more")
    gap = statistics.mean(r["gap_us"] for r in rows)
    lo, hi = min(r["gap_us"] for r in rows), max(r["gap_us"] for r in rows)
    return (f"-- The device's dead time between back-to-back kernels of one stream on {res['gpu']}, as\n"
            f"-- torch.profiler counts kernel time (torch {res['torch']}).\n"
            f"-- command: {command}\n"
            + (f"-- (the rows of {src}, measured earlier by this script with --out)\n" if src else "") +
            f"-- {rows[0]['n']} identical add_/mul_ kernels queued behind a long sleep kernel, timed with CUDA\n"
            f"-- events (wall) and under the profiler (busy): gap = (wall - busy) / kernels. Kernels of\n"
            f"-- {MIN_KERNEL_US:g} us or more ({len(rows)} rows): {lo:.2f}-{hi:.2f} us; shorter ones run at the host's\n"
            f"-- launch rate and are left out.\n"
            f"return {{\n  gpu = \"{gpu}\",\n  kernel_gap_us = {gap:.3f},\n}}\n")


def run(x, n, op):
    for _ in range(n):
        op(x)


def main():
    import sys
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="kernels per timed stream")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", help="the measured rows (JSON)")
    ap.add_argument("--from", dest="src", help="rebuild --lua from rows measured before (no GPU)")
    ap.add_argument("--lua", help="write the Lua supplement (lua/hw/calibrated/<gpu>_kernel_gap.lua)")
    ap.add_argument("--gpu", default="h200", help="catalog name for the supplement")
    a = ap.parse_args()
    command = "python3 validation/harness/measure_kernel_gap.py " + " ".join(sys.argv[1:])
    if a.src:
        with open(a.src) as f:
            res = json.load(f)
    else:
        if not a.out:
            ap.error("--out is required when measuring")
        res = measure(a)
    if a.lua:
        with open(a.lua, "w") as f:
            f.write(lua_supplement(res, a.gpu, command, a.src))


def measure(a):
    import torch
    from torch.profiler import profile, ProfilerActivity
    from profile_llama_step import device_ms
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
            durs = [device_ms(e) * 1e3
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
    return res


if __name__ == "__main__":
    main()
