#!/bin/bash
# One device call on whichever one-GPU card is lent: the compiled, checkpointed Llama plan
# (plan_gen5_compile_ckpt.jsonl; predictions for both cards committed before), the float8 layout
# copy's class (measure_torch_ops.py --only transpose_fp8) and the hub kernels' saved bytes with a
# warm-up step first (measure_hub_kernels.py).
#   usage (GPU machine, repository root, .whl carried): bash validation/harness/run_gen5_cc.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then G=h200; K=h200; else G=h100; K=h100_sxm; fi
export STAGE=${STAGE:-$OUT/stage}
EXTRA="python3 validation/harness/measure_torch_ops.py --gpu $K --only transpose_fp8 -o \$OUT/transpose_fp8_$K.lua; python3 validation/harness/measure_hub_kernels.py --out \$OUT/hub_kernels_${G}_warm.json" \
  bash validation/harness/run_gen4.sh validation/harness/plans/plan_gen5_compile_ckpt.jsonl:llama_${G}_gen5_compile_ckpt:220
