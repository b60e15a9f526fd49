#!/usr/bin/env python3
"""torch.mm over the reference shapes of validation/results/hw_h200_pytorch.json, timed three ways, to
explain the gap between those figures and sim/calib's cuBLAS figures:
  single:  each product timed alone with CUDA events (the GPU idle in between), mean of 10
           after 3 warm-ups;
  batched: one event pair around 20 back-to-back products (after 3 warm-ups), per product;
  sustained: 20 back-to-back products timed after ~400 ms of the same product.
Random normal inputs; tf32 is fp32 with torch.backends.cuda.matmul.allow_tf32 = True.

  measure_torch_gemm.py --out FILE.json

With --xcheck, the protocol of sim/calib's gemm_xcheck section instead, call for call, so
torch.mm and the calibration program compare like for like on the same card: the reference's
48 shapes in its order (bf16, fp16, fp32, tf32), each on fresh torch.randn inputs, in --rounds
rounds (medians over them) of: an idle GPU (--cooldown-ms), 3 warm-ups, 25 calls each timed
alone (--calls; median: single_ms) and 20 back to back (batched_ms); SM clock, power and
temperature after, where pynvml is there. It also times
a 64x64x64 torch.mm the same two ways, whose difference is torch.mm's per-call overhead, and
(with --kernels) names the kernel each shape ran, from torch.profiler.

  measure_torch_gemm.py --xcheck [--cooldown-ms 1000] [--calls 25] [--rounds 1] [--kernels] --out FILE.json
"""
import argparse
import json
import sys
import time

SHAPES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
          (8192, 8192, 8192), (8192, 4096, 4096), (8192, 11008, 4096), (8192, 4096, 11008),
          (16384, 32000, 4096), (2048, 4096, 4096), (4096, 5120, 5120), (8192, 13824, 5120)]


def nvml_state(torch):
    """(SM MHz, watts, temperature C) of GPU 0, None where pynvml is missing"""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return (pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
    except Exception:  # pynvml absent or NVML unreadable: the timings stand without it
        return (None, None, None)


def median(v):
    v = sorted(v)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else 0.5 * (v[mid - 1] + v[mid])


def time_alone_and_batched(torch, x, y, single_n, batch_n=20):
    """median ms of single_n calls each between its own events, and ms a call of batch_n back to back"""
    for _ in range(3):
        torch.mm(x, y)
    torch.cuda.synchronize()
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    single = []
    for _ in range(single_n):
        e0.record()
        torch.mm(x, y)
        e1.record()
        e1.synchronize()
        single.append(e0.elapsed_time(e1))
    e0.record()
    for _ in range(batch_n):
        torch.mm(x, y)
    e1.record()
    e1.synchronize()
    return median(single), e0.elapsed_time(e1) / batch_n


def rounds_of(torch, x, y, a):
    """time_alone_and_batched over a.rounds rounds, each after a.cooldown_ms idle: the medians"""
    singles, batches = [], []
    for _ in range(a.rounds):
        if a.cooldown_ms:
            time.sleep(a.cooldown_ms / 1000.0)
        s, b = time_alone_and_batched(torch, x, y, a.calls)
        singles.append(s)
        batches.append(b)
    return median(singles), median(batches)


def kernel_name(torch, x, y):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.mm(x, y)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("Memset")]
    return names[0] if names else ""


def xcheck(a, torch):
    dev = torch.device("cuda", 0)
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cublas": torch.backends.cuda.preferred_blas_library().name if hasattr(torch.backends.cuda, "preferred_blas_library") else "",
           "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cooldown_ms": a.cooldown_ms,
           "calls": a.calls, "rounds": a.rounds,
           "gemm": []}
    tiny = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    s, b = time_alone_and_batched(torch, tiny, tiny, a.calls)
    res["mm64"] = {"single_ms": s, "batched_ms": b}
    print(f"torch.mm 64x64x64 bf16: alone {s * 1e3:.1f} us, back to back {b * 1e3:.1f} us", flush=True)
    for dname in ("bf16", "fp16", "fp32", "tf32"):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dname, torch.float32)
        torch.backends.cuda.matmul.allow_tf32 = dname == "tf32"
        for m, n, k in SHAPES:
            x = torch.randn(m, k, device=dev, dtype=dt)
            y = torch.randn(k, n, device=dev, dtype=dt)
            torch.cuda.synchronize()
            single, batched = rounds_of(torch, x, y, a)
            mhz, watts, temp = nvml_state(torch)
            fl = 2.0 * m * n * k
            row = {"dtype": dname, "m": m, "n": n, "k": k, "single_ms": single, "batched_ms": batched,
                   "tflops": fl / (batched * 1e-3) / 1e12, "sm_mhz": mhz, "watts": watts, "temp_c": temp}
            if a.kernels:
                row["kernel"] = kernel_name(torch, x, y)
            res["gemm"].append(row)
            print(f"torch {dname:4s} {m:6d} {n:6d} {k:6d}  single {single:9.4f} ms  batched {batched:9.4f} ms "
                  f"{row['tflops']:7.1f} TFLOP/s  {mhz} MHz {watts} W {temp} C  {row.get('kernel', '')[:90]}",
                  flush=True)
            del x, y
    torch.backends.cuda.matmul.allow_tf32 = False
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--xcheck", action="store_true", help="sim/calib gemm_xcheck's protocol")
    ap.add_argument("--cooldown-ms", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=25, help="with --xcheck: calls timed alone per round")
    ap.add_argument("--rounds", type=int, default=1, help="with --xcheck: rounds per shape, each after the cool-down")
    ap.add_argument("--kernels", action="store_true", help="with --xcheck: each shape's kernel name")
    a = ap.parse_args()
    import torch
    if a.xcheck:
        res = xcheck(a, torch)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        return 0
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
