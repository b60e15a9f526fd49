#!/usr/bin/env python3
"""vrsim's predictions for the configurations of a measure_llama.py plan, before they are measured.

Each configuration becomes the scenario `vrsim validate` builds from a record (an H200 of
143,155.94 MiB, four steps, the steady state is step 3), run with `--json`; one line a
configuration: the plan's fields plus predicted peak allocated and reserved (MiB) and step time
(ms), and the git commit of the simulator that made them.

  predict_plan.py --plan validation/harness/plans/plan_heldout.jsonl [--vrsim ./vrsim] > PREDICTIONS.jsonl
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SCENARIO = """return {{
  hardware = {{ gpu = "h200", capacity_mib = 143155.9375 }},
  model = {{ arch = "llama2", size = "{shape}" }},
  training = {{ micro_batch = {batch}, seq = {seq}, precision = "{mode}", optimizer = "adamw",
               optimizer_impl = "{impl}", attention = "{attn}", checkpointing = {ckpt}, steps = 4 }},
  allocator = {{ conf = "{conf}" }},
}}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--vrsim", default="./vrsim")
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open(a.plan) as f:
        plan = [json.loads(line) for line in f if line.strip()]
    for cfg in plan:
        impl = cfg["optim"].replace("adamw_", "")
        src = SCENARIO.format(shape=cfg["shape"], batch=cfg["batch"], seq=cfg["seq"], mode=cfg["mode"],
                              impl=impl, attn=cfg.get("attn", "sdpa"),
                              ckpt="true" if cfg.get("ckpt") else "false", conf=cfg.get("alloc_conf", ""))
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as t:
            t.write(src)
        try:
            r = subprocess.run([a.vrsim, t.name, "--json", "--no-files"], capture_output=True, text=True)
        finally:
            os.unlink(t.name)
        if r.returncode not in (0, 3):
            print(f"predict_plan: {cfg['name']}: vrsim exit {r.returncode}: {r.stderr.strip()}", file=sys.stderr)
            return 1
        s = json.loads(r.stdout)
        out = dict(cfg)
        out.update({"vrsim_commit": commit, "fits": s["fits"],
                    "pred_peak_alloc_mib": round(s["peak_allocated_bytes"] / 2**20, 2),
                    "pred_peak_reserved_mib": round(s["peak_reserved_bytes"] / 2**20, 2),
                    "pred_step_ms": round(s["step_time_ms"], 1)})
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
