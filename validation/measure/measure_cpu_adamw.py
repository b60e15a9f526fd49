"""torch.optim.AdamW on CPU tensors (what FSDP2's CPUOffloadPolicy runs on the host): parameters
updated per second, bf16 and fp32, foreach. torch.get_num_threads() threads.

  python3 validation/measure/measure_cpu_adamw.py
"""
import time
import torch

def rate(dtype, n=256 * 1024 * 1024, chunks=64):
    ps = [torch.zeros(n // chunks, dtype=dtype) for _ in range(chunks)]
    for p in ps: p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-5, foreach=True)
    opt.step()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter(); opt.step(); best = min(best, time.perf_counter() - t0)
    return n / best

if __name__ == "__main__":
    print("threads", torch.get_num_threads())
    for dt in (torch.bfloat16, torch.float32):
        print(dt, "%.3e params/s" % rate(dt))
