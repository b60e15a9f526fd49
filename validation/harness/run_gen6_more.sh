#!/bin/bash
# One device call: generate with the host's benchmark beside it (plan_gen6_hostbound_llama.jsonl),
# the kernels of two MoE runs as measured (profile_hf_step.py: torch._grouped_mm and the dispatch's
# index ops against vrsim's prices), then what is left of a plan (PLAN:NAME:BUDGET_S, optional).
#   usage (GPU machine, repository root, .whl carried): bash validation/harness/run_gen6_more.sh [PLAN:NAME:BUDGET_S]
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then G=h100; else G=h200; fi
REC=validation/records/llama_h200_gen4_families.jsonl
EXTRA="mkdir -p $STAGE/validation/results
for n in gen4-qwen3moe-l4-b2 gen4-dsv2lite-l4-b1-eager; do
  timeout 120 python3 validation/harness/profile_hf_step.py --record $REC --name \$n \
    --out $STAGE/validation/results/kernels_moe_$G.jsonl 2>&1 | grep -v 'Warning\|warn' | tail -4
done" \
  bash validation/harness/run_gen4.sh validation/harness/plans/plan_gen6_hostbound_llama.jsonl:llama_${G}_gen6_generate:100 "$@"
