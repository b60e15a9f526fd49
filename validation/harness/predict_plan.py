#!/usr/bin/env python3
"""vrsim's predictions for the configurations of a measure_llama.py plan, before they are measured.

Each configuration is handed to `vrsim validate --json` as the record measure_llama.py would
write for it (the plan's fields, the H200 of 143,155.94 MiB and four steps), with placeholder
measurements; validate builds its scenario exactly as it will for the measured record (family
from hf_config or the named shape, LoRA, accumulation, optimizer, attention, allocator settings)
and its "predicted" side is the prediction. One line a configuration: the plan's fields plus
predicted peak allocated and reserved (MiB), step time (ms), parameter counts and the git commit
of the simulator that made them. A configuration validate skips is reported and left out.

  predict_plan.py --plan validation/harness/plans/plan_gen3.jsonl [--vrsim ./vrsim] [--gpu h100] > PREDICTIONS.jsonl
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

H200_MIB = 143155.9375
# the cards a plan may run on: the name torch reports and its total memory (MiB)
GPUS = {"h200": ("NVIDIA H200", H200_MIB), "h100": ("NVIDIA H100 80GB HBM3", 81079.0)}
# what measure_llama.py adds to a plan line: its software, the card, and per-step figures
RECORD = {"torch": "2.11.0+cu130", "gpu": "NVIDIA H200", "transformers": "5.17.0", "peft": "0.21.0",
          "total_mib": H200_MIB, "n_params": 1, "n_trainable": 1}
# plan fields that steer the harness only
HARNESS_ONLY = ("timeout_s", "trace", "retry_blocking", "host_bench", "warmup")
# vrsim's steps after the optimizer's first are alike (sim/cmd_validate.c): a plan of many timed
# steps is predicted from its fourth, not simulated step by step
PREDICT_STEPS = 4


def placeholder(cfg, gpu="h200"):
    if cfg.get("model") in ("flux", "sd3", "sd", "sdxl-base-unet"):
        # a measure_diffusers.py line: its record reads and cuts the config file the line names
        import measure_diffusers
        rec = measure_diffusers.record_fields(cfg)
    else:
        rec = {k: v for k, v in cfg.items() if k not in HARNESS_ONLY}
    rec.update(RECORD)
    rec["gpu"], rec["total_mib"] = GPUS[gpu]
    rec["steps"] = [{"step": i, "wall_ms": 1.0, "gpu_ms": 1.0, "peak_alloc_mib": 1.0,
                     "peak_reserved_mib": 1.0, "end_alloc_mib": 1.0, "end_reserved_mib": 1.0,
                     "num_alloc_retries": 0} for i in range(min(cfg.get("steps", 4), PREDICT_STEPS))]
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--vrsim", default="./vrsim")
    ap.add_argument("--gpu", choices=sorted(GPUS), default="h200", help="the card the plan will run on")
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open(a.plan) as f:
        plan = [json.loads(line) for line in f if line.strip()]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as t:
        for cfg in plan:
            t.write(json.dumps(placeholder(cfg, a.gpu)) + "\n")
    try:
        r = subprocess.run([a.vrsim, "validate", "--json", t.name], capture_output=True, text=True)
    finally:
        os.unlink(t.name)
    if r.returncode not in (0, 1) or not r.stdout.strip():
        print(f"predict_plan: vrsim validate exit {r.returncode}: {r.stderr.strip()}", file=sys.stderr)
        return 1
    pred = {}
    for row in json.loads(r.stdout):
        # a capped configuration's rows are named NAME@capMIB
        pred.setdefault(row["config"].split("@cap")[0], {})[row["metric"]] = row["predicted"]
    for cfg in plan:
        p = pred.get(cfg["name"])
        if not p:
            print(f"predict_plan: {cfg['name']}: skipped by vrsim validate ({r.stderr.strip()})", file=sys.stderr)
            continue
        out = dict(cfg)
        out.update({"vrsim_commit": commit,
                    "pred_n_params": p.get("n_params"), "pred_n_trainable": p.get("n_trainable")})
        if "fits" in p:  # a capped configuration: the verdict; an out-of-memory has no peaks
            out["pred_fits"] = bool(p["fits"])
        if "peak_allocated" in p:
            out.update({"pred_peak_alloc_mib": round(p["peak_allocated"] / 2**20, 2),
                        "pred_peak_reserved_mib": round(p["peak_reserved"] / 2**20, 2),
                        "pred_step_ms": round(p["step_time"], 1)})
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
