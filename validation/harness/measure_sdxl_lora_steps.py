"""Step-to-step spread of SDXL UNet steps, LoRA and trained whole, and what Python's cyclic
garbage collector takes of it: the measured record pub-s01 (the held-out sdxl_h200_gen2.jsonl,
LoRA r 8 at 512 px, batch 1, host-bound) has steps 1-3 of 307, 403 and 366 ms.

Two UNets of sdxl_unet.py in one process, bf16, no checkpointing, built as
measure_sdxl_lora_host.py builds them (its lora_run) (the LoRA one frozen with peft adapters as pub-s01's). Each
runs --steps steps with the collector on, as the records' runs leave it, then --steps with it off
(gc.disable(), after a gc.collect()). Every step is timed as the records time theirs (CUDA events
around it, from a synchronized device: profile_sdxl_step.timed_step), and gc.callbacks times each
collection inside it (its generation and wall milliseconds). One JSON line: per variant and
setting, every step's gpu_ms and collector milliseconds, and their medians.

  python3 validation/harness/measure_sdxl_lora_steps.py --res 512 --steps 16 --out F.jsonl

--as-record runs the LoRA UNet alone as a record's run does: a fresh process, steps 0 to
--steps - 1 with no warm-up, the collector on (run it several times).
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
from measure_sdxl_lora_host import lora_run  # noqa: E402
from profile_sdxl_step import build, phases, timed_step  # noqa: E402


class Collections:
    """Wall time of each collection of Python's collector, by generation (gc.callbacks)."""

    def __init__(self):
        self.t0 = None
        self.log = []
        gc.callbacks.append(self.on)

    def on(self, phase, info):
        if phase == "start":
            self.t0 = time.perf_counter()
        elif self.t0 is not None:
            self.log.append((info["generation"], (time.perf_counter() - self.t0) * 1e3))
            self.t0 = None

    def take(self):
        out, self.log = self.log, []
        return out


def run_steps(run, n, coll):
    steps = []
    for _ in range(n):
        coll.take()
        s = timed_step(*run)
        c = coll.take()
        steps.append({"gpu_ms": s["gpu_ms"], "gc_ms": round(sum(ms for _, ms in c), 3),
                      "gc_gens": [g for g, _ in c]})
    return steps


def summary(steps):
    return {"median_gpu_ms": round(statistics.median(s["gpu_ms"] for s in steps), 3),
            "min_gpu_ms": round(min(s["gpu_ms"] for s in steps), 3),
            "max_gpu_ms": round(max(s["gpu_ms"] for s in steps), 3),
            "steps_with_gen2": sum(1 for s in steps if 2 in s["gc_gens"]),
            "median_gc_ms": round(statistics.median(s["gc_ms"] for s in steps), 3),
            "steps": steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--as-record", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    a.mode, a.ckpt = "bf16", False
    runs = {}
    if not a.as_record:
        full = build(a)
        runs["full"] = phases(a, *full[:4])
    runs["lora"], _ = lora_run(a)
    coll = Collections()
    rec = {"res": a.res, "batch": a.batch, "rank": a.rank, "steps": a.steps, "as_record": a.as_record,
           "gc_threshold": list(gc.get_threshold()), "python_objects": len(gc.get_objects()),
           "torch": torch.__version__, "python": sys.version.split()[0],
           "gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "variants": {}}
    for name, run in runs.items():
        if a.as_record:
            rec["variants"][name] = {"gc_on": summary(run_steps(run, a.steps, coll))}
            break
        for _ in range(2):  # optimizer state, cuDNN plans
            timed_step(*run)
        v = {"gc_on": summary(run_steps(run, a.steps, coll))}
        gc.collect()
        gc.disable()
        v["gc_off"] = summary(run_steps(run, a.steps, coll))
        gc.enable()
        rec["variants"][name] = v
    for name, v in rec["variants"].items():
        print(name, {k: {x: y for x, y in s.items() if x != "steps"} for k, s in v.items()},
              file=sys.stderr)
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
