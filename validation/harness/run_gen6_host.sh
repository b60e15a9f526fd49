#!/bin/bash
# One device call: the host-bound runs measured with the host's own benchmark beside them. The
# SDXL steady-step grid (run_sdxl_steps.sh, host_class_bench in each record) for SDXL_S seconds,
# then the SD 1.5 and SD 3.5 re-runs (plan_gen6_hostbound_diffusion.jsonl, no allocation stacks
# recorded, host_bench) for DIFF_S seconds; records staged under $STAGE.
#   usage (GPU machine, repository root, .whl carried): SDXL_S=360 DIFF_S=120 bash validation/harness/run_gen6_host.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
EXTRA="OUT=$STAGE/validation/records bash validation/harness/run_sdxl_steps.sh ${SDXL_S:-360}
python3 validation/harness/measure_diffusers.py --plan validation/harness/plans/plan_gen6_hostbound_diffusion.jsonl \
  --out $STAGE/validation/records/diffusion_gen6_hostbound.jsonl --trace-dir $STAGE/validation/traces \
  --deadline-s ${DIFF_S:-120} 2>&1 | grep -v 'Warning\|warn' | tail -20" \
  bash validation/harness/run_gen4.sh
