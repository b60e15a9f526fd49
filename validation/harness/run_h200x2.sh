#!/bin/bash
# The two-GPU measurement in one device call on kind nvidia-h200-x2: peer copies and NCCL
# collectives into lua/hw/calibrated/h200_x2_links.lua, then the multi-GPU plan under torchrun,
# then (if time is left) a single-GPU plan on GPU 0. Results are staged under $STAGE with the
# repository's layout and packed into $OUT/results.tar.gz.
#   usage: bash validation/harness/run_h200x2.sh [MULTI_PLAN] [SINGLE_PLAN]
# TRACES_ONLY=1: no calibration build, links or recheck, no single plan; only the multi plan
# (default validation/harness/plans/plan_multi_x2_traces.jsonl) with per-rank allocator traces into
# $STAGE/validation/traces and records into $STAGE/validation/records/multi_h200x2_traces.jsonl.
#   usage: TRACES_ONLY=1 bash validation/harness/run_h200x2.sh [MULTI_PLAN]
set -u
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-550}
TRACES_ONLY=${TRACES_ONLY:-0}
if [ "$TRACES_ONLY" = 1 ]; then
  MPLAN=${1:-validation/harness/plans/plan_multi_x2_traces.jsonl}
  SPLAN=
else
  MPLAN=${1:-validation/harness/plans/plan_multi_x2.jsonl}
  SPLAN=${2:-}
fi
OUT=${OUT:-/tmp/vrsim-out}
STAGE=${STAGE:-/tmp/vrsim-stage}
mkdir -p "$OUT" "$STAGE/lua/hw/calibrated" "$STAGE/validation/traces" "$STAGE/validation/records" "$STAGE/validation/results"
if [ "$TRACES_ONLY" = 1 ]; then
  MOUT="$STAGE/validation/records/multi_h200x2_traces.jsonl"
  MTRACE=(--trace-dir "$STAGE/validation/traces")
else
  MOUT="$STAGE/validation/records/multi_h200x2.jsonl"
  MTRACE=()
fi
# NVLink multicast stays off on these machines (KINDS.md)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
elapsed() { echo $(( $(date +%s) - T0 )); }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; uname -a
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv
  nvidia-smi topo -m 2>&1
  nvidia-smi nvlink -s 2>&1 | head -30
  nvcc --version | tail -2
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ "$TRACES_ONLY" != 1 ]; then
echo "== [$(elapsed) s] calibration build"
CAL=sim/calib/vrsim-calibrate
make -C sim/calib 2>&1 || CAL=.prebuilt/vrsim-calibrate
echo "== [$(elapsed) s] links"
CALCMD="$CAL --gpu h200_x2 --only peer,nccl -o lua/hw/calibrated/h200_x2_links.lua"
echo "command: $CALCMD"
timeout 150 $CALCMD > "$OUT/calibrate_links.txt" 2>&1; echo "links rc=$?"
cat "$OUT/calibrate_links.txt" | tail -40
cp lua/hw/calibrated/h200_x2_links.lua "$STAGE/lua/hw/calibrated/" 2>/dev/null
cp "$OUT/calibrate_links.txt" "$STAGE/" 2>/dev/null

echo "== [$(elapsed) s] recheck of GPU 0: single-call GEMMs, copies, host copies"
RECMD="$CAL --gpu h200 --only gemm_single,copy,host -o validation/results/recheck_h200x2_gpu0.lua"
echo "command: CUDA_VISIBLE_DEVICES=0 $RECMD"
CUDA_VISIBLE_DEVICES=0 timeout 100 $RECMD > "$OUT/recheck.txt" 2>&1; echo "recheck rc=$?"
grep -E "^single|^copy|pinned|pageable" "$OUT/recheck.txt" | head -80
cp validation/results/recheck_h200x2_gpu0.lua "$STAGE/validation/results/" 2>/dev/null
cp "$OUT/recheck.txt" "$STAGE/" 2>/dev/null
fi  # TRACES_ONLY

echo "== [$(elapsed) s] multi plan $MPLAN"
LEFT=$(( BUDGET_S - $(elapsed) ))
python3 validation/harness/measure_multi.py --plan "$MPLAN" --out "$MOUT" \
  --nproc 2 --deadline-s $LEFT ${MTRACE[@]+"${MTRACE[@]}"} 2>&1; echo "multi rc=$?"

if [ -n "$SPLAN" ]; then
  echo "== [$(elapsed) s] single plan $SPLAN on GPU 0"
  LEFT=$(( BUDGET_S - $(elapsed) ))
  CUDA_VISIBLE_DEVICES=0 python3 validation/harness/measure_llama.py --plan "$SPLAN" \
    --out "$STAGE/validation/records/llama_h200_dev.jsonl" --trace-dir "$STAGE/validation/traces" --deadline-s $LEFT 2>&1
fi
echo "== [$(elapsed) s] packing"
tar czf "$OUT/results.tar.gz" -C "$STAGE" . && ls -la "$OUT"
echo "== done in $(elapsed) s"
