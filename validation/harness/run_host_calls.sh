#!/bin/bash
# One device call: the SDXL UNet's forward and optimizer host time call by call
# (profile_sdxl_host_calls.py at 512 px batch 1, 1024 px batch 1 and 4, and 1024 px batch 1
# checkpointed, each a fresh process, into $OUT/host_calls_r<res>_b<batch>[_ckpt].json), then the
# host cost of calling a compiled block (measure_compiled_call.py, $OUT/compiled_call.jsonl).
#   usage (GPU machine, repository root): bash validation/harness/run_host_calls.sh [BUDGET_S]
set -u
T0=$(date +%s); BUDGET_S=${1:-540}
OUT=${OUT:-/tmp/vrsim-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
for cfg in "512 1" "1024 1" "1024 1 --ckpt" "1024 4"; do
  set -- $cfg
  name="host_calls_r$1_b$2${3:+_ckpt}"
  if [ "$(left)" -lt 200 ]; then echo "SKIP $name: budget"; continue; fi
  echo "== [$(( $(date +%s) - T0 )) s] $name"
  timeout $(( $(left) - 150 )) python3 validation/harness/profile_sdxl_host_calls.py --res $1 --batch $2 ${3:-} \
    --out "$OUT/$name.json" 2>&1 | grep -v Warning | tail -3
done
echo "== [$(( $(date +%s) - T0 )) s] compiled call"
timeout $(( $(left) - 5 )) python3 validation/harness/measure_compiled_call.py --out "$OUT/compiled_call.jsonl" \
  --budget-s $(( $(left) - 20 )) 2>&1 | grep -v Warning | tail -12
echo "== done in $(( $(date +%s) - T0 )) s"
