#!/bin/bash
# One device call of the GPU-runs plans of the new families and techniques: install the carried
# wheels (the library versions vrsim models, which the GPU image lacks or holds older), report
# the software, run measure_llama.py plans one after another, each within its own budget, then
# the command in $EXTRA (another harness), and pack the records and traces into
# $OUT/results.tar.gz.
#   usage (on the GPU machine, repository root, .whl carried):
#     bash validation/harness/run_gen4.sh PLAN:RECORDS_NAME:BUDGET_S ...
#     EXTRA="python3 validation/harness/measure_diffusers.py ... --out \$STAGE/validation/records/X.jsonl" \
#       bash validation/harness/run_gen4.sh ...
# The wheels: validation/PROVENANCE.md, "Wheels carried to the GPU machine", lists them and the
# pip download command; where a wheel does not import there, the image's own version is used and
# the record says which version ran (its `transformers` / `peft` fields).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/vrsim-out}; STAGE=${STAGE:-/tmp/vrsim-stage}
export STAGE
mkdir -p "$OUT" "$STAGE/validation/records" "$STAGE/validation/traces"
# transformers 5.25's from_pretrained kernelizes RMSNorm and rotary with hub kernels it downloads
# (integrations/hub_kernels.py); the GPU machine has no network, and every record is of the
# modeling code's own ops (the harnesses build with from_config, QLoRA's quantized load excepted)
export USE_HUB_KERNELS=NO
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
elapsed() { echo $(( $(date +%s) - T0 )); }

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | grep -v "^WARNING\|already exists" | tail -5
  export PYTHONPATH=/tmp/site
  if ! python3 -c "import transformers, peft" 2>/dev/null; then
    echo "carried transformers/peft do not import here; using the image's own"
    unset PYTHONPATH
  fi
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  python3 - <<'PY' 2>&1 | grep -v Warning
import importlib, sys
print("python", sys.version.split()[0])
for m in ("torch", "transformers", "peft", "accelerate", "diffusers", "torchao", "bitsandbytes",
          "liger_kernel", "trl", "torchtune", "triton", "huggingface_hub"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as e:
        print(m, "missing:", type(e).__name__, str(e)[:160])
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

for spec in "$@"; do
  IFS=: read -r PLAN NAME BUDGET <<<"$spec"
  echo "== [$(elapsed) s] plan $PLAN ($BUDGET s)"
  python3 validation/harness/measure_llama.py --plan "$PLAN" --out "$STAGE/validation/records/$NAME.jsonl" \
    --trace-dir "$STAGE/validation/traces" --deadline-s "$BUDGET" 2>&1 | tee -a "$OUT/log.txt" \
    | grep -v "Warning\|warnings.warn\|^  \"\"\"\|FutureWarning"
done
if [ -n "${EXTRA:-}" ]; then
  echo "== [$(elapsed) s] $EXTRA"
  bash -c "$EXTRA" 2>&1 | tee -a "$OUT/log.txt" | grep -v "Warning\|warnings.warn"
fi
echo "== [$(elapsed) s] packing"
cp "$OUT/env.txt" "$STAGE/"
tar czf "$OUT/results.tar.gz" -C "$STAGE" . && ls -la "$OUT"
echo "== done in $(elapsed) s"
