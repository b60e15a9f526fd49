#!/bin/bash
# One device call: the kernels of measured H100 runs, profiled as run (profile_hf_step.py), and the
# H100's GEMM grid timed from an idle card as the H200's was (vrsim-calibrate --gemm-idle-ms 200),
# to trace the H100 step-time misses op class by op class. Results staged under $STAGE.
#   usage (GPU machine, repository root, .whl carried): bash validation/harness/run_h100_profile.sh
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/vrsim-out}; STAGE=${STAGE:-/tmp/vrsim-stage}
RES="$STAGE/validation/results"; mkdir -p "$OUT" "$RES"
export PYTHONUNBUFFERED=1 USE_HUB_KERNELS=NO NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
elapsed() { echo $(( $(date +%s) - T0 )); }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | grep -v "^WARNING\|already exists" | tail -3
  export PYTHONPATH=/tmp/site
fi
REC=validation/records/llama_h100_gen4_tech_model.jsonl
for n in gen4-tm-l3-8b-l4-b2-s4096-base gen4-tm-l3-8b-l4-b2-s4096-f8-tensorwise gen4-tm-l3-8b-l4-b2-s4096-f8-rowwise; do
  echo "== [$(elapsed) s] profile $n"
  timeout 120 python3 validation/harness/profile_hf_step.py --record $REC --name $n \
    --out "$RES/kernels_tech_model_h100.jsonl" 2>&1 | grep -v "Warning\|warn" | tail -30
done
echo "== [$(elapsed) s] gemm grid"
if make -C sim/calib >/dev/null 2>&1; then
  timeout 200 sim/calib/vrsim-calibrate --gpu h100_sxm --only gemm --gemm-idle-ms 200 \
    -o "$RES/h100_sxm_gemm_idle.lua" 2>&1 | tail -5
fi
echo "== [$(elapsed) s] packing"
tar czf "$OUT/results.tar.gz" -C "$STAGE" . && ls -la "$OUT"
echo "== done in $(elapsed) s"
