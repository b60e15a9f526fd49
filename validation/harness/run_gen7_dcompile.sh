#!/bin/bash
# One device call: compiled diffusion against eager (plan_gen7_dcompile.jsonl: Flux.1-dev cut to
# 2 + 4 blocks, SD 3.5 Medium cut to 4 blocks, SDXL's UNet cut to 1/2/2 transformer layers, LoRA
# at 1024 px; each configuration eager, then with its repeated blocks compiled, 3 warm-up steps
# and 22 timed ones). The carried wheels installed by run_gen4.sh; the plan runs within what is
# left of DEADLINE_S seconds from this script's start (pip install, Inductor's compilation and
# the packing included), records staged under $STAGE (inside $OUT, so that a cut-off call still
# returns what it finished). Last, one line per configuration: name, peak allocated and reserved
# of the last step (MiB), the timed steps' median GPU milliseconds.
#   usage (GPU machine, repository root, .whl carried): DEADLINE_S=530 bash validation/harness/run_gen7_dcompile.sh
# PLAN=NAME runs validation/harness/plans/plan_NAME.jsonl into diffusion_<gpu>_NAME.jsonl instead
# (run_gen8_hostprof.sh); AFTER=COMMAND runs before the table (the records' path in $REC).
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
export T_START=$(date +%s) DEADLINE_S=${DEADLINE_S:-530}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then G=h100; else G=h200; fi
PLAN=${PLAN:-gen7_dcompile}
export REC=$STAGE/validation/records/diffusion_${G}_$PLAN.jsonl
# the plan's budget: what is left after the setup, less 20 s for the packing and the table
EXTRA="python3 validation/harness/measure_diffusers.py --plan validation/harness/plans/plan_$PLAN.jsonl \
  --out $REC --trace-dir $STAGE/validation/traces \
  --deadline-s \$(( DEADLINE_S - (\$(date +%s) - T_START) - 20 )) 2>&1 | grep -v 'Warning\|warn\|float32: \[\]'" \
  bash validation/harness/run_gen4.sh
if [ -n "${AFTER:-}" ]; then bash -c "$AFTER"; fi
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
