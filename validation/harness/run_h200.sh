#!/bin/bash
# The whole single-GPU measurement in one device call: build and run the calibration
# program, measure SDPA backends, then the LLaMA plan. Results are staged under $STAGE with the
# repository's layout and packed into $OUT/results.tar.gz; the log goes to $OUT/log.
#   usage (on the GPU machine, repository root): bash validation/harness/run_h200.sh [PLAN]
# Budget: the LLaMA plan starts no configuration after BUDGET_S seconds from this script's start.
set -u
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
PLAN=${1:-validation/harness/plans/plan_h200_dev.jsonl}
OUT=${OUT:-/tmp/vrsim-out}
STAGE=${STAGE:-/tmp/vrsim-stage}
mkdir -p "$OUT" "$STAGE/lua/hw/calibrated" "$STAGE/validation/traces" "$STAGE/validation/records" "$STAGE/validation/results"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
elapsed() { echo $(( $(date +%s) - T0 )); }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit --format=csv
  nvidia-smi topo -m 2>/dev/null
  nvcc --version | tail -2
  python3 - <<'PY'
import importlib, sys
print("python", sys.version.split()[0])
for m in ("torch", "transformers", "peft", "accelerate"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "missing", e)
import torch
print("cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpus", torch.cuda.device_count())
print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== [$(elapsed) s] calibration build"
CAL=sim/calib/vrsim-calibrate
if ! make -C sim/calib 2>&1; then
  echo "build failed here; using the carried prebuilt binary"
  CAL=.prebuilt/vrsim-calibrate
fi
echo "== [$(elapsed) s] calibration run"
CALCMD="$CAL --gpu h200 --skip peer,nccl -o lua/hw/calibrated/h200.lua"
echo "command: $CALCMD"
timeout 200 $CALCMD > "$OUT/calibrate.txt" 2>&1; echo "calibrate rc=$?"
tail -5 "$OUT/calibrate.txt"
cp lua/hw/calibrated/h200.lua "$STAGE/lua/hw/calibrated/" 2>/dev/null

echo "== [$(elapsed) s] sdpa"
timeout 120 python3 validation/harness/measure_sdpa.py --out "$STAGE/validation/results/sdpa_h200_dev.json" \
  --lua "$STAGE/lua/hw/calibrated/h200_sdpa.lua" 2>&1; echo "sdpa rc=$?"

echo "== [$(elapsed) s] llama plan $PLAN"
LEFT=$(( BUDGET_S - $(elapsed) ))
python3 validation/harness/measure_llama.py --plan "$PLAN" --out "$STAGE/validation/records/llama_h200_dev.jsonl" \
  --trace-dir "$STAGE/validation/traces" --deadline-s $LEFT 2>&1; echo "llama rc=$?"

echo "== [$(elapsed) s] packing"
cp "$OUT/calibrate.txt" "$STAGE/" 2>/dev/null
tar czf "$OUT/results.tar.gz" -C "$STAGE" . && ls -la "$OUT"
python3 - "$STAGE/validation/records/llama_h200_dev.jsonl" <<'PY'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1])]
except FileNotFoundError:
    rows = []
print(f"{'name':26s} {'peak_alloc':>12s} {'peak_res':>9s} {'gpu_ms':>8s} {'after_build':>12s}")
for r in rows:
    s = r["steps"][-1] if r["steps"] else {}
    print(f"{r['name']:26s} {s.get('peak_alloc_mib', 0):12.4f} {s.get('peak_reserved_mib', 0):9.0f} "
          f"{s.get('gpu_ms', 0):8.1f} {r['after_build_alloc_mib']:12.4f}" + (f" OOM@{r['oom_at_step']}" if 'oom_at_step' in r else ""))
PY
echo "== done in $(elapsed) s"
