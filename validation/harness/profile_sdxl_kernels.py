"""The GPU kernels of an SDXL UNet training step by name: total device time and count per phase
(forward, backward with its recomputation, optimizer), from torch.profiler, for the plain-PyTorch
UNet and the step of profile_sdxl_step.py. Compare with vrsim's trace.json summed by op kind.

  python3 validation/harness/profile_sdxl_kernels.py --res 1024 --batch 4 --ckpt --out F.jsonl
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_sdxl_step import build, phases  # noqa: E402


def kernels_of(fn, *args):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = fn(*args)
        torch.cuda.synchronize()
    table = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            row = table.setdefault(e.name, [0, 0.0])
            row[0] += 1
            row[1] += getattr(e, "device_time_total", 0.0) / 1e3
    return out, {k: {"count": v[0], "ms": round(v[1], 4)} for k, v in table.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mode", default="bf16", choices=["bf16", "amp_bf16"])
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    model, opt, inp, target, _ = build(a)
    fwd, bwd, optim = phases(a, model, opt, inp, target)
    for _ in range(3):
        loss = fwd(); bwd(loss); optim(); del loss
    torch.cuda.synchronize()
    loss, kf = kernels_of(fwd)
    _, kb = kernels_of(bwd, loss)
    _, ko = kernels_of(optim)
    rec = {"name": f"sdxl-r{a.res}-b{a.batch}-{a.mode}{'-ckpt' if a.ckpt else ''}", "res": a.res,
           "batch": a.batch, "mode": a.mode, "ckpt": a.ckpt,
           "kernels": {"forward": kf, "backward": kb, "optimizer": ko},
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    for ph, t in rec["kernels"].items():
        print(ph, round(sum(v["ms"] for v in t.values()), 2), "ms in", sum(v["count"] for v in t.values()), "kernels")


if __name__ == "__main__":
    main()
