#!/bin/bash
# The GEMM cross-check against validation/results/hw_h200_pytorch.json, on one H200: sim/calib's
# gemm_xcheck section and torch.mm (measure_torch_gemm.py --xcheck) under the same protocol,
# interleaved, so the run shows how the calibration program agrees with PyTorch on the same card,
# and how far the same measurement moves with the card's state.
#   PASSES="NAME:COOLDOWN_MS:CALLS[:ROUNDS] ..." bash validation/harness/run_gemm_xcheck.sh   (into $OUT)
# Device call 1 of the third call set: PASSES="a:1000:25 b:1000:25" (each shape from an idle GPU).
# Device call 2: PASSES="hot25:0:25 hot100:0:100" (shapes back to back, as the reference ran).
# Device call 3: KERNELS=0 PASSES="r5:300:11:5" (five rounds a shape, each from an idle GPU; medians).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/vrsim-out}
PASSES=${PASSES:-"a:1000:25 b:1000:25"}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
elapsed() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit,temperature.gpu --format=csv
python3 -c "import pynvml" 2>/dev/null && echo "pynvml: yes" || echo "pynvml: no"
CAL=sim/calib/vrsim-calibrate
make -C sim/calib 2>&1 | tail -1
first=1
for p in $PASSES; do
  IFS=: read -r name cool calls rounds <<< "$p"
  rounds=${rounds:-1}
  echo "== [$(elapsed) s] pass $name: cuBLAS (vrsim-calibrate gemm_xcheck), cool-down $cool ms, $calls calls, $rounds rounds"
  CMD="$CAL --gpu h200 --only gemm_xcheck --cooldown-ms $cool --xcheck-calls $calls --xcheck-rounds $rounds -o $OUT/gemm_xcheck_h200_$name.lua"
  echo "command: $CMD"
  timeout 280 $CMD > "$OUT/gemm_xcheck_cublas_$name.txt" 2>&1; echo "rc=$?"
  tail -2 "$OUT/gemm_xcheck_cublas_$name.txt"
  echo "== [$(elapsed) s] pass $name: torch.mm (measure_torch_gemm.py --xcheck)"
  K=""; [ $first = 1 ] && [ "${KERNELS:-1}" = 1 ] && K="--kernels"; first=0
  timeout 280 python3 validation/harness/measure_torch_gemm.py --xcheck $K --cooldown-ms "$cool" --calls "$calls" --rounds "$rounds" \
    --out "$OUT/torch_gemm_xcheck_h200_$name.json" > "$OUT/gemm_xcheck_torch_$name.txt" 2>&1; echo "rc=$?"
  head -1 "$OUT/gemm_xcheck_torch_$name.txt"; tail -1 "$OUT/gemm_xcheck_torch_$name.txt"
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv
echo "== done in $(elapsed) s"
