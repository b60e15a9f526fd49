"""What torch.utils.checkpoint(use_reentrant=False) adds to the host time of a whole SDXL UNet step,
and which of its parts: the plain-PyTorch UNet of sdxl_unet.py (every ResNet and transformer block
checkpointed, as diffusers does), one step's host time per phase (forward, backward, optimizer;
no synchronisation inside the step), for these variants interleaved round by round in one
process, Python's collector off:

  plain         no checkpointing
  ckpt          checkpoint(..., use_reentrant=False): PyTorch's defaults
  ckpt_norng    preserve_rng_state=False: no RNG state saved per region, none restored in backward
  ckpt_nocheck  determinism_check="none": no metadata taken per saved tensor, none compared after
                the recomputation
  ckpt_bare     both

Also the step's saved tensors (counted with saved_tensors_hooks, plain forward) and
checkpointed regions (calls to checkpoint). One JSON line per resolution: medians per variant
and phase, with every round's figures.

  python3 validation/harness/measure_ckpt_parts.py --res 64 --rounds 10 --out F.jsonl
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
from torch.utils.checkpoint import checkpoint as torch_checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdxl_unet  # noqa: E402
from measure_ckpt_blocks import saved_count  # noqa: E402
from profile_sdxl_step import build, phases, timed_step  # noqa: E402

VARIANTS = {
    "plain": None,
    "ckpt": {},
    "ckpt_norng": {"preserve_rng_state": False},
    "ckpt_nocheck": {"determinism_check": "none"},
    "ckpt_bare": {"preserve_rng_state": False, "determinism_check": "none"},
}


def use_variant(model, kw, calls):
    """Sets the UNet's checkpoint call (sdxl_unet looks `checkpoint` up at each call)."""
    model.gradient_checkpointing = kw is not None
    for m in model.modules():
        if isinstance(m, sdxl_unet.Transformer2DModel):
            m.ckpt = kw is not None

    def ck(fn, *args, use_reentrant=False, **more):
        calls[0] += 1
        return torch_checkpoint(fn, *args, use_reentrant=use_reentrant, **(kw or {}), **more)
    sdxl_unet.checkpoint = ck


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    a.mode, a.ckpt = "bf16", True
    model, opt, inp, target, _ = build(a)
    fwd, bwd, optim = phases(a, model, opt, inp, target)
    calls = [0]
    rec = {"res": a.res, "batch": a.batch, "mode": a.mode, "rounds": a.rounds,
           "torch": torch.__version__, "python": sys.version.split()[0],
           "gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d")}
    use_variant(model, None, calls)
    rec["saved_tensors"] = saved_count(fwd)
    for name, kw in VARIANTS.items():  # warm-up: optimizer state, cuDNN plans, every variant once
        use_variant(model, kw, calls)
        timed_step(fwd, bwd, optim)
    use_variant(model, {}, calls)
    calls[0] = 0
    timed_step(fwd, bwd, optim)
    rec["regions"] = calls[0]
    gc.collect()
    gc.disable()
    rows = {k: [] for k in VARIANTS}
    for r in range(a.rounds):
        order = list(VARIANTS)
        order = order[r % len(order):] + order[:r % len(order)]  # each variant first in turn
        for name in order:
            use_variant(model, VARIANTS[name], calls)
            rows[name].append(timed_step(fwd, bwd, optim))
    gc.enable()
    rec["variants"] = {}
    for name, steps in rows.items():
        med = {p: round(statistics.median(s["host_ms"][p] for s in steps), 3)
               for p in ("forward", "backward", "optimizer")}
        rec["variants"][name] = {"host_ms": med,
                                 "gpu_ms": round(statistics.median(s["gpu_ms"] for s in steps), 3),
                                 "steps": steps}
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: v["host_ms"] for k, v in rec["variants"].items()}),
          "saved", rec["saved_tensors"], "regions", rec["regions"])


if __name__ == "__main__":
    main()
