"""What torch.utils.checkpoint(use_reentrant=False) adds to the host time of an op in its forward,
by how many tensors the op saves for backward. Its pack hook runs once per saved tensor (a Python
call that makes a holder and records the tensor's shape, dtype and device); an op that saves none
should cost inside a region what it costs outside. Three chains of tiny ops (the GPU never
limits), each with every input needing a gradient:

  saves0   x = x + y        AddBackward0 saves nothing
  saves1   x = x.sin()      SinBackward0 saves its input
  saves2   x = x * y        MulBackward0 saves both inputs

each run as 256 ops in R regions of K ops (R x K = 8 x 32 and 32 x 8) and plain, the variants
interleaved round by round in one process, the forward's host time (perf_counter, from an idle
GPU) and backward's (the recomputation included). From the two region sizes: what a region costs
(the difference over 24 regions) and what each op adds beyond its region's share.

  python3 validation/harness/measure_ckpt_saves.py --out F.json
"""
import argparse
import gc
import json
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint

OPS = {
    "saves0": lambda x, y: x + y,
    "saves1": lambda x, y: x.sin(),
    "saves2": lambda x, y: x * y,
}
SHAPES = ((8, 32), (32, 8))


def step(kind, regions, k, ckpt, x0, y, gpu):
    op = OPS[kind]

    def region(x):
        for _ in range(k):
            x = op(x, y)
        return x

    if gpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    x = x0
    for _ in range(regions):
        x = checkpoint(region, x, use_reentrant=False) if ckpt else region(x)
    loss = x.sum()
    t1 = time.perf_counter()
    if gpu:
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    loss.backward()
    t3 = time.perf_counter()
    if gpu:
        torch.cuda.synchronize()
    return (t1 - t0) * 1e6, (t3 - t2) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (checks the path; timings meaningless)")
    args = ap.parse_args()
    dev = "cpu" if args.cpu else "cuda"
    gpu = dev == "cuda"
    x0 = torch.randn(256, device=dev, requires_grad=True)
    y = torch.randn(256, device=dev, requires_grad=True)
    variants = [(kind, r, k, c) for kind in OPS for (r, k) in SHAPES for c in (False, True)]
    times = {v: ([], []) for v in variants}
    gc.disable()
    for n in range(args.rounds + 3):
        for j in range(len(variants)):
            v = variants[(j + n) % len(variants)]
            f, b = step(*v, x0, y, gpu)
            x0.grad = y.grad = None
            if n >= 3:
                times[v][0].append(f), times[v][1].append(b)
    gc.enable()
    med = {v: (statistics.median(f), statistics.median(b)) for v, (f, b) in times.items()}
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if gpu else "cpu",
           "ops": 256, "rounds": args.rounds, "runs": [], "per_kind": {}}
    for v, (f, b) in med.items():
        out["runs"].append({"kind": v[0], "regions": v[1], "ops_per_region": v[2], "ckpt": v[3],
                            "fwd_us": round(f, 2), "bwd_us": round(b, 2)})
    for kind in OPS:
        res = {}
        for ph in (0, 1):
            extra = {rk: med[(kind, *rk, True)][ph] - med[(kind, *rk, False)][ph] for rk in SHAPES}
            region = (extra[(32, 8)] - extra[(8, 32)]) / 24
            per_op = (extra[(8, 32)] - 8 * region) / 256
            plain = statistics.mean(med[(kind, *rk, False)][ph] for rk in SHAPES) / 256
            name = ("fwd", "bwd")[ph]
            res[name] = {"plain_per_op_us": round(plain, 3), "ckpt_region_us": round(region, 2),
                         "ckpt_per_op_us": round(per_op, 3)}
        out["per_kind"][kind] = res
        print(kind, json.dumps(res), flush=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
