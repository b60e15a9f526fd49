#!/bin/bash
# SDXL's step time by resolution and batch, as the accuracy issue's protocol asks: each
# configuration a fresh process of measure_sdxl_steps.py (3 warm-up steps, 30 steady ones, the
# host's dispatch benchmark before and after), appended to $OUT/sdxl_steps_<h200|h100>.jsonl.
#   usage (on the GPU machine, repository root): bash validation/harness/run_sdxl_steps.sh [BUDGET_S]
# No configuration starts after BUDGET_S seconds; the grid runs cheapest first within each block.
# CLASS_EVERY=K: the host's class chains one repeat before the steady steps and one after every K
# of them (measure_sdxl_steps.py --class-every), instead of five repeats after them all.
# OPTIM_BENCH=1: the optimizer's per-tensor host work timed after the steps (--optim-bench).
set -u
T0=$(date +%s); BUDGET_S=${1:-440}
OUT=${OUT:-/tmp/vrsim-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then G=h100; else G=h200; fi
REC="$OUT/sdxl_steps_$G.jsonl"
run() {  # res batch [--ckpt]
  local left=$(( BUDGET_S - ($(date +%s) - T0) ))
  if [ $left -lt 30 ]; then echo "SKIP r$1 b$2 $3: budget"; return; fi
  echo "== [$(( $(date +%s) - T0 )) s] r$1 b$2 $3"
  timeout $left python3 validation/harness/measure_sdxl_steps.py --res $1 --batch $2 $3 --steps 30 ${OPTIM_BENCH:+--optim-bench} \
    ${CLASS_EVERY:+--class-every $CLASS_EVERY} --out "$REC" 2>&1 | grep -v Warning | tail -3
}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for rb in "512 1" "768 1" "1024 1" "512 4" "1024 2" "768 4" "512 8" "1024 4"; do run $rb ""; done
for rb in "1024 1" "1024 4"; do run $rb --ckpt; done
echo "== done in $(( $(date +%s) - T0 )) s"; wc -l "$REC"
