#!/bin/bash
# One device call: the kernels of the two torchao NF4 runs of llama_h100_torchtune_combos.jsonl
# (compiled layers without checkpointing, and under transformers' checkpointing, whose layers run
# eager), profiled as run (profile_hf_step.py: each kernel's launches and ms, per phase), to put
# vrsim's ops beside them (compare_kernels.py --kernels). About 3 minutes on an H100.
#   usage (GPU machine, repository root, .whl carried): bash validation/harness/run_nf4_profile.sh
#          bash validation/harness/run_nf4_profile.sh --dry-run   # no GPU: the records are reproduced
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/vrsim-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 USE_HUB_KERNELS=NO
elapsed() { echo $(( $(date +%s) - T0 )); }
CHECK=""
[ "${1:-}" = "--dry-run" ] && CHECK="--check"
if [ -z "$CHECK" ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | grep -v "^WARNING\|already exists" | tail -3
  export PYTHONPATH=/tmp/site
fi
REC=validation/records/llama_h100_torchtune_combos.jsonl
for n in ttc-torchao-nf4-compile ttc-torchao-nf4-compile-ckpt; do
  echo "== [$(elapsed) s] profile $n"
  timeout 240 python3 validation/harness/profile_hf_step.py --record $REC --name $n $CHECK \
    --out "$OUT/kernels_nf4_h100.jsonl" 2>&1 | grep -v "Warning\|warn\|Failed to load" | tail -30
done
ls -la "$OUT"
echo "== done in $(elapsed) s"
