#!/bin/bash
# A short single-GPU call: GEMM throughput three ways through cuBLAS (sim/calib) and through
# torch.mm, to settle the cross-check against validation/results/hw_h200_pytorch.json, and the final
# measure_llama.py on pub-c04 and pub-c13 again, to check it reproduces every field.
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/vrsim-out}
STAGE=${STAGE:-/tmp/vrsim-stage}
mkdir -p "$OUT" "$STAGE/validation/harness"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
elapsed() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
CAL=sim/calib/vrsim-calibrate
make -C sim/calib 2>&1 | tail -1 || CAL=.prebuilt/vrsim-calibrate
[ -x "$CAL" ] || CAL=.prebuilt/vrsim-calibrate
echo "== [$(elapsed) s] cuBLAS GEMM: batched, single, sustained"
CMD="$CAL --gpu h200 --only gemm,gemm_single,gemm_sustained -o validation/harness/gemm_check_h200.lua"
echo "command: $CMD"
timeout 150 $CMD > "$OUT/gemm_check.txt" 2>&1; echo "rc=$?"
grep -E "^(sustained|single)|section" "$OUT/gemm_check.txt"
cp validation/harness/gemm_check_h200.lua "$STAGE/validation/harness/" 2>/dev/null
echo "== [$(elapsed) s] torch.mm"
timeout 120 python3 validation/harness/measure_torch_gemm.py --out "$STAGE/validation/results/torch_gemm_h200.json" 2>&1
echo "== [$(elapsed) s] llama check"
timeout 100 python3 validation/harness/measure_llama.py --plan validation/harness/plans/plan_check.jsonl \
  --out "$STAGE/validation/harness/check_h200.jsonl" --trace-dir /tmp --deadline-s 90 2>&1
cp "$OUT/gemm_check.txt" "$STAGE/" 2>/dev/null
tar czf "$OUT/results.tar.gz" -C "$STAGE" .
echo "== done in $(elapsed) s"
