"""torch.optim.AdamW on CPU tensors (what FSDP2's CPUOffloadPolicy runs on the host): parameters
updated per second, bf16 and fp32, foreach.

  python3 validation/harness/measure_cpu_adamw.py                 # one process, torch's default threads
  python3 validation/harness/measure_cpu_adamw.py --procs 2 --threads 8 --numel 535840768 --dtype bf16

--procs N runs N processes at once, each with --threads intra-op threads, as N ranks of a
torchrun job with OMP_NUM_THREADS=threads do; they share the host's cores and memory bandwidth,
so the per-process rate is what one rank sees.
"""
import argparse
import multiprocessing as mp
import time
import torch

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def rate(dtype, n, chunks=64, barrier=None):
    ps = [torch.zeros(n // chunks, dtype=dtype) for _ in range(chunks)]
    for p in ps: p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-5, foreach=True)
    opt.step()
    best = float("inf")
    for _ in range(3):
        if barrier is not None: barrier.wait()
        t0 = time.perf_counter(); opt.step(); best = min(best, time.perf_counter() - t0)
    return n / best


def worker(threads, dtype, n, barrier, q):
    if threads: torch.set_num_threads(threads)
    q.put((torch.get_num_threads(), rate(DTYPES[dtype], n, barrier=barrier)))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads per process (0: torch's default)")
    ap.add_argument("--numel", type=int, default=256 * 1024 * 1024)
    ap.add_argument("--dtype", choices=sorted(DTYPES), nargs="*", default=["bf16", "fp32"])
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    for dt in a.dtype:
        barrier, q = ctx.Barrier(a.procs), ctx.Queue()
        ps = [ctx.Process(target=worker, args=(a.threads, dt, a.numel, barrier, q)) for _ in range(a.procs)]
        for p in ps: p.start()
        res = [q.get() for _ in ps]
        for p in ps: p.join()
        for threads, r in res:
            print(f"{dt} procs {a.procs} threads {threads} numel {a.numel}: {r:.3e} params/s")
