#!/bin/bash
# One device call of the GPU-runs plans of the new families and techniques: install the carried
# wheels (the library versions vrsim models, which the GPU image lacks or holds older), report
# the software, run a measure_llama.py plan (and, if given, a second harness command), pack the
# records and traces into $OUT/results.tar.gz.
#   usage (on the GPU machine, repository root, .whl carried):
#     bash validation/harness/run_gen4.sh PLAN RECORDS_NAME [BUDGET_S]
# The wheels: validation/PROVENANCE.md, "Wheels carried to the GPU machine", lists them and the
# pip download command; where a wheel does not import there, the image's own version is used and
# the record says which version ran (its `transformers` / `peft` fields).
set -u
T0=$(date +%s)
PLAN=$1; NAME=$2; BUDGET_S=${3:-520}
OUT=${OUT:-/tmp/vrsim-out}; STAGE=${STAGE:-/tmp/vrsim-stage}
mkdir -p "$OUT" "$STAGE/validation/records" "$STAGE/validation/traces"
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
  python3 - <<'PY'
import importlib, sys
print("python", sys.version.split()[0])
for m in ("torch", "transformers", "peft", "accelerate", "diffusers", "torchao", "bitsandbytes",
          "liger_kernel", "trl", "triton", "huggingface_hub"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as e:
        print(m, "missing:", type(e).__name__, str(e)[:160])
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== [$(elapsed) s] plan $PLAN"
python3 validation/harness/measure_llama.py --plan "$PLAN" --out "$STAGE/validation/records/$NAME.jsonl" \
  --trace-dir "$STAGE/validation/traces" --deadline-s $(( BUDGET_S - $(elapsed) )) 2>&1 | tee "$OUT/log.txt"
echo "== [$(elapsed) s] packing"
cp "$OUT/env.txt" "$STAGE/"
tar czf "$OUT/results.tar.gz" -C "$STAGE" . && ls -la "$OUT"
echo "== done in $(elapsed) s"
