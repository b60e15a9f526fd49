"""The host time of an SDXL UNet step with LoRA against the same UNet trained whole, on one host:
two UNets of sdxl_unet.py in one process, bf16, no checkpointing; one trained whole, the other
frozen with peft adapters (LoraConfig(r, lora_alpha=r, lora_dropout=0, target_modules to_q,
to_k, to_v, to_out.0), inject_adapter_in_model), as the held-out sdxl_h200_gen2.jsonl's pub-s01.
Steps alternate between the two, Python's collector off; the host time per phase (forward,
backward, optimizer; no synchronisation inside the step), medians over the rounds. One JSON line.

  python3 validation/harness/measure_sdxl_lora_host.py --res 512 --rounds 10 --out F.jsonl
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_sdxl_step import build, phases, timed_step  # noqa: E402


def lora_run(a):
    """The UNet frozen with pub-s01's adapters (LoraConfig(r, lora_alpha=r, lora_dropout=0, to_q,
    to_k, to_v, to_out.0), inject_adapter_in_model) and AdamW foreach over them: (its phases, the
    adapter tensors)."""
    from peft import LoraConfig, inject_adapter_in_model
    model, _, inp, target, _ = build(a)
    model.requires_grad_(False)
    cfg = LoraConfig(r=a.rank, lora_alpha=a.rank, lora_dropout=0.0,
                     target_modules=["to_q", "to_k", "to_v", "to_out.0"])
    model = inject_adapter_in_model(cfg, model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-5, foreach=True)
    return phases(a, model, opt, inp, target), trainable


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    a.mode, a.ckpt = "bf16", False
    runs = {}
    full = build(a)
    runs["full"] = phases(a, *full[:4])
    runs["lora"], trainable = lora_run(a)
    rec = {"res": a.res, "batch": a.batch, "rank": a.rank, "rounds": a.rounds,
           "lora_tensors": len(trainable), "torch": torch.__version__,
           "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d")}
    for name in runs:  # warm-up: optimizer state, cuDNN plans
        for _ in range(2):
            timed_step(*runs[name])
    gc.collect()
    gc.disable()
    rows = {k: [] for k in runs}
    for r in range(a.rounds):
        for name in (("full", "lora") if r % 2 == 0 else ("lora", "full")):
            rows[name].append(timed_step(*runs[name]))
    gc.enable()
    rec["variants"] = {
        name: {"host_ms": {p: round(statistics.median(s["host_ms"][p] for s in steps), 3)
                           for p in ("forward", "backward", "optimizer")},
               "gpu_ms": round(statistics.median(s["gpu_ms"] for s in steps), 3), "steps": steps}
        for name, steps in rows.items()}
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: v["host_ms"] for k, v in rec["variants"].items()}), "lora tensors",
          rec["lora_tensors"])


if __name__ == "__main__":
    main()
