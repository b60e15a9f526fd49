#!/bin/bash
# One device call (an H200, or an H100 for its own files): the per-GPU tables vrsim reads and never carries (bitsandbytes'
# optimizer kernels, torch._grouped_mm and the MoE dispatch's index ops, the float8 layout copy),
# then as much of a measure_llama.py plan as the time left allows. Tables under $OUT, records
# staged under $STAGE (run_gen4.sh packs them).
#   usage (GPU machine, repository root, .whl carried):
#     bash validation/harness/run_gpu_tables.sh PLAN RECORDS_NAME PLAN_BUDGET_S
# (GPU in RECORDS_NAME becomes h200 or h100)
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
PLAN=$1 NAME=$2 BUDGET=$3
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then K=h100_sxm G=h100; else K=h200 G=h200; fi
NAME=${NAME//GPU/$G}
# the tables a card has already (lua/hw/calibrated/<card>_*.lua, validation/results/) are skipped
TABLES=""
[ -e lua/hw/calibrated/${K}_bnb_optim.lua ] || TABLES="$TABLES
timeout 100 python3 validation/harness/measure_bnb_optim.py --out-dir $OUT --budget-s 70 2>&1 | tail -4"
[ -e lua/hw/calibrated/${K}_grouped_mm.lua ] || TABLES="$TABLES
timeout 110 python3 validation/harness/measure_grouped_mm.py --out-dir $OUT --budget-s 80 2>&1 | tail -4"
[ -e validation/results/transpose_fp8_$K.lua ] || TABLES="$TABLES
timeout 45 python3 validation/harness/measure_torch_ops.py --gpu $K --only transpose_fp8 -o $OUT/transpose_fp8_$K.lua 2>&1 | tail -3"
# the tables' time (about 230 s) goes to the plan where there are none to take
[ -n "$TABLES" ] || BUDGET=$((BUDGET + 200))
EXTRA="$TABLES
python3 validation/harness/measure_llama.py --plan $PLAN --out $STAGE/validation/records/$NAME.jsonl \
  --trace-dir $STAGE/validation/traces --deadline-s $BUDGET 2>&1 | grep -v 'Warning\|warn' | tail -40" \
  bash validation/harness/run_gen4.sh
