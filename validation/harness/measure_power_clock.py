#!/usr/bin/env python3
"""The SM clock a GPU holds under sustained load at its own power limit: a bf16 GEMM, a float8
GEMM (torch._scaled_mm, sm89+) and a 1 GiB device copy, each run for a few seconds while
nvidia-smi is sampled every 0.5 s (power draw, SM and memory clocks, temperature, and whether
the software power cap or a hardware slowdown is throttling the clock).

  python3 validation/harness/measure_power_clock.py      (GPU machine; prints, writes nothing)

Changes no setting: it reads the limit the board has. What it answers is what a power-capped
kernel runs at, which vrsim's measured kernel tables already contain for the card they were
measured on, and which a board at another power limit would change."""
import subprocess
import threading
import time

import torch

QUERY = ("power.draw,clocks.sm,clocks.mem,temperature.gpu,clocks_event_reasons.sw_power_cap,"
         "clocks_event_reasons.hw_slowdown,power.limit")


def sample(stop, out):
    while not stop.is_set():
        q = subprocess.run(["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv,noheader,nounits"],
                           capture_output=True, text=True).stdout.strip()
        out.append(q)
        time.sleep(0.5)


def run(tag, fn, secs=12):
    """fn repeated for secs seconds; returns the last batch's milliseconds per call."""
    out, stop = [], threading.Event()
    fn()
    torch.cuda.synchronize()
    th = threading.Thread(target=sample, args=(stop, out))
    th.start()
    t0, last = time.time(), None
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while time.time() - t0 < secs:
        e0.record()
        for _ in range(20):
            fn()
        e1.record()
        torch.cuda.synchronize()
        last = e0.elapsed_time(e1) / 20
    stop.set()
    th.join()
    print(tag, "last ms/op %.3f" % last, "samples(%s):" % QUERY, out[-6:], flush=True)
    return last


def main():
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    t = run("bf16_gemm_8192", lambda: a @ b)
    print("bf16 TFLOP/s %.0f" % (2 * m ** 3 / t / 1e9))
    try:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.tensor(1.0, device="cuda")
        t8 = run("fp8_gemm_8192", lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                            out_dtype=torch.bfloat16))
        print("fp8 TFLOP/s %.0f" % (2 * m ** 3 / t8 / 1e9))
    except Exception as e:  # a card below sm89 has no float8 GEMM
        print("fp8 failed", e)
    x = torch.empty(2 ** 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    tc = run("copy_1GiB", lambda: y.copy_(x), 6)
    print("copy GB/s %.0f" % (2 * 2 ** 30 / tc / 1e6))


if __name__ == "__main__":
    main()
