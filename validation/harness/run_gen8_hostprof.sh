#!/bin/bash
# One device call: where the host's time goes in compiled SD 3.5 and SDXL blocks against eager
# (plan_gen8_hostprof.jsonl: gen7's SD 3.5 Medium cut to 4 blocks and SDXL's UNet cut to 1/2/2
# transformer layers, LoRA at 1024 px, eager and with the repeated blocks compiled; after each
# run's steps, measure_diffusers.py's host_profile: the host's time by phase of 10 steady steps,
# each repeated block's forward call, cProfile over 3 forwards and 3 steps). run_gen7_dcompile.sh
# with this plan, and a line per record of what host_profile found before its table.
#   usage (GPU machine, repository root, .whl carried): DEADLINE_S=480 bash validation/harness/run_gen8_hostprof.sh
AFTER='python3 - "$REC" <<'"'"'PY'"'"'
import json, sys, os
if os.path.exists(sys.argv[1]):
    for line in open(sys.argv[1]):
        r = json.loads(line); h = r.get("host_profile") or {}
        g = (h.get("step") or {}).get("groups", {})
        print("%-44s host ms %s; block forward us %s; profiled step %s ms; own ms %s" % (r["name"], h.get("median_host_ms"),
              h.get("block_fwd_us"), (h.get("step") or {}).get("profiled_wall_ms"), {k: v["own_ms"] for k, v in sorted(g.items())}))
PY' PLAN=gen8_hostprof exec bash "$(dirname "$0")/run_gen7_dcompile.sh"
