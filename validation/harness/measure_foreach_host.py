"""Host time of torch's _foreach_ ops and of AdamW's foreach step against the size of the tensors
in their lists: what multi_tensor_apply (ATen/native/cuda/MultiTensorApply.cuh) does on the host
for every 65,536-element chunk (one block of a launch: its tensor and chunk indices written into
the launch's TensorListMetadata) and for every launch (a kernel whose argument block is that
metadata, some kilobytes), beside the per-tensor checks that measure_optim_host.py times on tiny
tensors. A model of large tensors (SDXL's UNet: 2.6 billion elements in 1,680 tensors, about
40,000 chunks per list) pays the per-chunk and per-launch parts on every _foreach_ call.

Each call is timed on the host alone (synchronize, then perf_counter around the call, no
synchronization inside; a call's launches stay far below the launch queue's depth), best and
median of REPS. One JSON line per (op, dtype, tensors, numel), then per (op, dtype) a
least-squares fit host_us = a + b * tensors + c * launches + d * chunks, the launches counted as
lua/strategies/optim.lua's foreach_launches counts them.

  python3 validation/harness/measure_foreach_host.py --out validation/results/foreach_host_h100.jsonl
"""
import argparse
import json
import statistics
import time

import torch

MAX_TENSORS = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}
SIZES = (256, 16384, 65536, 262144, 1048576, 4194304)
COUNTS = (32, 128)
REPS = 9


def launches(numels, depth):
    """multi_tensor_apply's kernel launches (the same count as optim.lua's foreach_launches)."""
    n_launch, tensors, blocks = 0, 0, 0
    for n in numels:
        if n <= 0:
            continue
        tensors += 1
        chunks = (n + 65535) // 65536
        c = 0
        while c < chunks:
            take = min(chunks - c, 320 - blocks)
            blocks += take
            c += take
            last = c == chunks
            if blocks == 320 or (tensors == MAX_TENSORS[depth] and last):
                n_launch += 1
                blocks = 0
                tensors = 0 if last else 1
    return n_launch + (1 if blocks > 0 else 0)


def ops(lists):
    """(name, depth, call) for the _foreach_ calls of AdamW's foreach step (torch/optim/adamw.py
    _multi_tensor_adamw in torch 2.x: lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_)."""
    a, b, c = lists
    return [
        ("_foreach_mul_ scalar", 1, lambda: torch._foreach_mul_(a, 0.999)),
        ("_foreach_lerp_ scalar", 2, lambda: torch._foreach_lerp_(a, b, 0.1)),
        ("_foreach_add_ list", 2, lambda: torch._foreach_add_(a, b)),
        ("_foreach_sqrt", 2, lambda: torch._foreach_sqrt(a)),
        ("_foreach_addcmul_", 3, lambda: torch._foreach_addcmul_(a, b, c, value=0.001)),
        ("_foreach_addcdiv_", 3, lambda: torch._foreach_addcdiv_(a, b, c, value=-0.001)),
    ]


def time_call(fn):
    host = []
    for r in range(REPS + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        del out
        if r >= 2:
            host.append((t1 - t0) * 1e6)
    torch.cuda.synchronize()
    return min(host), statistics.median(host)


def adamw_step_us(params):
    opt = torch.optim.AdamW(params, lr=1e-5, foreach=True)
    for p in params:
        p.grad = torch.ones_like(p)
    host = []
    for r in range(REPS + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        if r >= 2:
            host.append((t1 - t0) * 1e6)
    torch.cuda.synchronize()
    return min(host), statistics.median(host)


def lstsq(rows, keys, y="host_us_best"):
    """Least squares of rows' y on [1] + keys, by the normal equations (no numpy needed); also
    measure_compiled_call.py's fit."""
    xs = [[1.0] + [float(r[k]) for k in keys] for r in rows]
    ys = [r[y] for r in rows]
    m = len(xs[0])
    ata = [[sum(x[i] * x[j] for x in xs) for j in range(m)] for i in range(m)]
    aty = [sum(x[i] * v for x, v in zip(xs, ys)) for i in range(m)]
    # Gaussian elimination with partial pivoting
    for i in range(m):
        p = max(range(i, m), key=lambda r: abs(ata[r][i]))
        ata[i], ata[p] = ata[p], ata[i]
        aty[i], aty[p] = aty[p], aty[i]
        for r in range(i + 1, m):
            f = ata[r][i] / ata[i][i]
            for j in range(i, m):
                ata[r][j] -= f * ata[i][j]
            aty[r] -= f * aty[i]
    coef = [0.0] * m
    for i in reversed(range(m)):
        coef[i] = (aty[i] - sum(ata[i][j] * coef[j] for j in range(i + 1, m))) / ata[i][i]
    return coef


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=120)
    a = ap.parse_args()
    t_start = time.time()
    env = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    with open(a.out, "a") as f:
        def emit(rec):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(json.dumps(rec), flush=True)
        for dtype in (torch.bfloat16, torch.float32):
            dt = str(dtype).replace("torch.", "")
            by_op = {}
            for n in COUNTS:
                for s in SIZES:
                    if time.time() - t_start > a.budget_s:
                        break
                    lists = [[torch.randn(s, device="cuda", dtype=dtype).abs_() + 1 for _ in range(n)]
                             for _ in range(3)]
                    numels = [s] * n
                    chunks = n * ((s + 65535) // 65536)
                    for name, depth, fn in ops(lists):
                        best, med = time_call(fn)
                        rec = {"op": name, "dtype": dt, "tensors": n, "numel": s, "depth": depth,
                               "chunks": chunks, "launches": launches(numels, depth),
                               "host_us_best": round(best, 2), "host_us_median": round(med, 2)}
                        by_op.setdefault(name, []).append(rec)
                        emit(rec)
                    params = [torch.nn.Parameter(t) for t in lists[0]]
                    best, med = adamw_step_us(params)
                    emit({"op": "AdamW.step foreach", "dtype": dt, "tensors": n, "numel": s,
                          "chunks": chunks, "launches_by_depth": {d: launches(numels, d) for d in (1, 2, 3)},
                          "host_us_best": round(best, 2), "host_us_median": round(med, 2)})
                    del lists, params
                    torch.cuda.empty_cache()
            for name, rows in by_op.items():
                if len(rows) < 5:
                    continue
                c = lstsq(rows, ("tensors", "launches", "chunks"))
                emit({"op": name, "dtype": dt, "fit": True, "intercept_us": round(c[0], 3),
                      "per_tensor_us": round(c[1], 4), "per_launch_us": round(c[2], 4),
                      "per_chunk_us": round(c[3], 5), **env})


if __name__ == "__main__":
    main()
