#!/bin/bash
# One device call: where the host's time goes in compiled SD 3.5 and SDXL blocks against eager
# (plan_gen8_hostprof.jsonl: gen7's SD 3.5 Medium cut to 4 blocks and SDXL's UNet cut to 1/2/2
# transformer layers, LoRA at 1024 px, eager and with the repeated blocks compiled; after each
# run's steps, host_profile: the host's time by phase of 10 steady steps and cProfile over 3).
# Otherwise as run_gen7_dcompile.sh.
#   usage (GPU machine, repository root, .whl carried): DEADLINE_S=480 bash validation/harness/run_gen8_hostprof.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
export T_START=$(date +%s) DEADLINE_S=${DEADLINE_S:-530}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then G=h100; else G=h200; fi
REC=$STAGE/validation/records/diffusion_${G}_gen8_hostprof.jsonl
# the plan's budget: what is left after the setup, less 20 s for the packing and the table
EXTRA="python3 validation/harness/measure_diffusers.py --plan validation/harness/plans/plan_gen8_hostprof.jsonl \
  --out $REC --trace-dir $STAGE/validation/traces \
  --deadline-s \$(( DEADLINE_S - (\$(date +%s) - T_START) - 20 )) 2>&1 | grep -v 'Warning\|warn\|float32: \[\]'" \
  bash validation/harness/run_gen4.sh
python3 - "$REC" <<'PY'
import json, sys, os
if os.path.exists(sys.argv[1]):
    for line in open(sys.argv[1]):
        r = json.loads(line); h = r.get("host_profile") or {}
        g = (h.get("step") or {}).get("groups", {})
        print("%-44s host ms %s; block forward us %s; profiled step %s ms; own ms %s" % (r["name"], h.get("median_host_ms"),
              h.get("block_fwd_us"), (h.get("step") or {}).get("profiled_wall_ms"), {k: v["own_ms"] for k, v in sorted(g.items())}))
PY
echo "== configurations (last step's peak allocated / reserved MiB, timed steps' median GPU ms)"
python3 - "$REC" <<'PY'
import json, sys, os
if not os.path.exists(sys.argv[1]):
    sys.exit("no records")
for line in open(sys.argv[1]):
    r = json.loads(line)
    s = r["steps"][-1] if r["steps"] else {}
    t = r.get("timed") or {}
    dy = r.get("dynamo_end", {})
    d = dy.get("stats", {}).get("unique_graphs")
    gb = sum(dy.get("graph_break", {}).values())
    if d is not None and r.get("dynamo_warmup", {}).get("stats", {}).get("unique_graphs") != d:
        d = "%s (new in timed steps)" % d
    print("%-46s alloc %9.2f  reserved %7.0f  median %7.2f ms  (p10 %.2f p90 %.2f, warm-up %.1f s%s)" % (
        r["name"], s.get("peak_alloc_mib", float("nan")), s.get("peak_reserved_mib", float("nan")),
        t.get("median_gpu_ms", float("nan")), t.get("p10_gpu_ms", float("nan")), t.get("p90_gpu_ms", float("nan")),
        t.get("warmup_wall_s", float("nan")), "" if d is None else ", %s graphs, %d breaks" % (d, gb)))
PY
echo "== total $(( $(date +%s) - T_START )) s"
