"""What torch.utils.checkpoint(use_reentrant=False) costs the host on the SDXL UNet's own blocks.
For one BasicTransformerBlock (640 channels, 10 heads, cross-attention on 77 tokens) and one
ResnetBlock2D (640 channels) of sdxl_unet.py, on inputs small enough that the GPU idles (64
tokens, 8x8 pixels): the host time of forward and backward, plain and checkpointed, the four
interleaved over many repeats (median each), and the tensors the block saves for backward
(counted with saved_tensors_hooks). Python's collector off. One JSON object per block.

  python3 validation/harness/measure_ckpt_blocks.py --out F.jsonl
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdxl_unet import BasicTransformerBlock, ResnetBlock2D  # noqa: E402


def saved_count(fn):
    n = [0]

    def pack(t):
        n[0] += 1
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    out.float().sum().backward()
    return n[0]


def timed(fn, ckpt):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = checkpoint(fn, use_reentrant=False) if ckpt else fn()
    t1 = time.perf_counter()
    out.backward(torch.ones_like(out))
    t2 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6


def measure(name, fn, reps):
    for _ in range(10):
        timed(fn, False), timed(fn, True)
    res = {"plain": ([], []), "ckpt": ([], [])}
    for _ in range(reps):
        for mode in ("plain", "ckpt"):
            f, b = timed(fn, mode == "ckpt")
            res[mode][0].append(f)
            res[mode][1].append(b)
    rec = {"block": name, "saved_tensors": saved_count(fn), "reps": reps}
    for mode, (f, b) in res.items():
        rec[mode] = {"fwd_us": round(statistics.median(f), 1), "bwd_us": round(statistics.median(b), 1)}
    rec["ckpt_extra_us"] = {"fwd": round(rec["ckpt"]["fwd_us"] - rec["plain"]["fwd_us"], 1),
                            "bwd": round(rec["ckpt"]["bwd_us"] - rec["plain"]["bwd_us"], 1)}
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    gc.disable()
    torch.manual_seed(0)
    dt = torch.bfloat16
    with torch.device("cuda"):
        torch.set_default_dtype(dt)
        tb = BasicTransformerBlock(640, 10, 2048)
        rn = ResnetBlock2D(640, 640, 1280)
        torch.set_default_dtype(torch.float32)
    h = torch.randn(1, 64, 640, device="cuda", dtype=dt, requires_grad=True)
    ctx = torch.randn(1, 77, 2048, device="cuda", dtype=dt)
    x = torch.randn(1, 640, 8, 8, device="cuda", dtype=dt, requires_grad=True)
    emb = torch.randn(1, 1280, device="cuda", dtype=dt)
    recs = [measure("BasicTransformerBlock(640, 10 heads)", lambda: tb(h, ctx), a.reps),
            measure("ResnetBlock2D(640)", lambda: rn(x, emb), a.reps)]
    with open(a.out, "a") as f:
        for r in recs:
            r.update(torch=torch.__version__, gpu=torch.cuda.get_device_name())
            f.write(json.dumps(r) + "\n")
            print(json.dumps(r))


if __name__ == "__main__":
    main()
