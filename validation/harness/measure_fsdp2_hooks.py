"""FSDP2's host time per sharded module, on one GPU (a process group of one rank): a stack of L
tiny Linear modules, each wrapped by fully_shard and the root too, as measure_multi.py wraps
LLaMA's decoder layers; a step (forward, backward) timed with and without fully_shard. The
tensors are tiny, so the GPU never limits and what differs is FSDP2's pre/post forward and
backward hooks (all-gather and reduce-scatter issue, the unshard/reshard state machine, the
autograd hooks it registers). Forward and backward are timed apart (synchronised after
each), for L = 8, 16, 32, 64; per module, the least-squares slope of (with FSDP2 - without)
over L, forward and backward.

  torchrun --nproc-per-node 1 validation/harness/measure_fsdp2_hooks.py --out F.json
  (or plain python3: it sets up a one-rank group itself)
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def stack(L, reshard):
    from torch.distributed.fsdp import fully_shard
    m = nn.Sequential(*[nn.Linear(64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(L)])
    if reshard is None:
        return m
    for layer in m:
        fully_shard(layer, reshard_after_forward=reshard)
    fully_shard(m, reshard_after_forward=reshard)
    return m


def step_s(m, reps=15):
    """Median forward and backward times of a step (synchronised after each), seconds."""
    x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for _ in range(5):
        m(x).float().sum().backward()
    fs, bs = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = m(x).float().sum()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        fs.append(t1 - t0); bs.append(time.perf_counter() - t1)
    return statistics.median(fs), statistics.median(bs)


def slope(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29513")
    dist.init_process_group("nccl", rank=int(os.environ.get("RANK", 0)),
                            world_size=int(os.environ.get("WORLD_SIZE", 1)))
    torch.cuda.set_device(0)
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
           "world_size": dist.get_world_size(), "date": time.strftime("%Y-%m-%d"), "runs": []}
    for reshard in (True, False):
        xs, yf, yb = [], [], []
        for L in (8, 16, 32, 64):
            pf, pb = step_s(stack(L, None))
            ff, fb = step_s(stack(L, reshard))
            out["runs"].append({"reshard_after_forward": reshard, "modules": L,
                                "plain_fwd_ms": round(pf * 1e3, 3), "plain_bwd_ms": round(pb * 1e3, 3),
                                "fsdp2_fwd_ms": round(ff * 1e3, 3), "fsdp2_bwd_ms": round(fb * 1e3, 3)})
            xs.append(L); yf.append((ff - pf) * 1e6); yb.append((fb - pb) * 1e6)
            print(out["runs"][-1], flush=True)
        key = "reshard_%s" % str(reshard).lower()
        out["slope_us_per_module_" + key] = {"forward": round(slope(xs, yf), 2),
                                             "backward": round(slope(xs, yb), 2)}
        print("reshard_after_forward", reshard, out["slope_us_per_module_" + key], "us per module")
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
