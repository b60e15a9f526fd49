#!/bin/bash
# One device call for when only one is to be had: generate and QLoRA without checkpointing with
# the host's benchmark (plan_gen6_hostbound_llama.jsonl), the SDXL steady-step grid cheapest first
# for SDXL_S seconds (run_sdxl_steps.sh, host_class_bench in each record), then torchtune's
# combinations (plan_torchtune_combos.jsonl) started within TTC_S seconds. Records staged under
# $STAGE (inside $OUT, so that a cut-off call still returns what it finished).
#   usage (GPU machine, repository root, .whl carried): LLAMA_S=150 SDXL_S=200 TTC_S=90 bash validation/harness/run_gen6_one.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then G=h100; else G=h200; fi
EXTRA="OUT=$STAGE/validation/records bash validation/harness/run_sdxl_steps.sh ${SDXL_S:-200}
python3 validation/harness/measure_llama.py --plan validation/harness/plans/plan_torchtune_combos.jsonl \
  --out $STAGE/validation/records/llama_${G}_torchtune_combos.jsonl --trace-dir $STAGE/validation/traces \
  --deadline-s ${TTC_S:-90} 2>&1 | grep -v 'Warning\|warn' | tail -30" \
  bash validation/harness/run_gen4.sh validation/harness/plans/plan_gen6_hostbound_llama.jsonl:llama_${G}_gen6_hostbound:${LLAMA_S:-150}
