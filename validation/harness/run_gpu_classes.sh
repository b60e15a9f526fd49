#!/bin/bash
# One device call: the memory-bound kernels of a training step measured on the GPU itself, so
# that a GPU with no profile of its own prices them from its own figures rather than from the
# H200's carried by the DRAM ratio (lua/vrsim/hardware.lua, own classes over a carried profile).
# PyTorch's kernels by access class (measure_torch_ops.py), the norms' kernels, GroupNorm's
# statistics kernel, GEGLU's strided product, cuDNN's layout transforms, the stream's gap per
# kernel, and the streaming copy / elementwise curves of vrsim-calibrate. Each step has its own
# time limit; whatever finished is staged under $STAGE with the repository's layout and packed
# into $OUT/results.tar.gz.
#   usage (on the GPU machine, repository root): bash validation/harness/run_gpu_classes.sh GPU
#   GPU: the catalog key the files are named after (h100_sxm for an H100 SXM 80GB)
set -u
GPU=${1:?usage: run_gpu_classes.sh GPU (a key of lua/hw/gpus.lua)}
T0=$(date +%s)
OUT=${OUT:-/tmp/vrsim-out}; STAGE=${STAGE:-/tmp/vrsim-stage}
CAL="$STAGE/lua/hw/calibrated"; RES="$STAGE/validation/results"
mkdir -p "$OUT" "$CAL" "$RES"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
elapsed() { echo $(( $(date +%s) - T0 )); }
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "== [$(elapsed) s] $name: $*"
  timeout "$limit" "$@" 2>&1 | grep -v "Warning\|warnings.warn" | tail -40
  echo "$name rc=${PIPESTATUS[0]}"
}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
H=validation/harness
step torch_ops 150 python3 $H/measure_torch_ops.py --gpu "$GPU" -o "$CAL/${GPU}_torch_ops.lua"
step norm 90 python3 $H/measure_norm_kernels.py --out "$RES/norm_kernels_$GPU.json"
step group_norm 90 python3 $H/measure_group_norm.py --out "$RES/group_norm_$GPU.json"
step geglu_mul 60 python3 $H/measure_geglu_mul.py --out "$RES/geglu_mul_$GPU.json"
for b in 1 4; do
  step "conv_transforms b$b" 60 python3 $H/measure_conv_transforms.py --res 1024 --batch $b \
    --out "$RES/conv_transforms_$GPU.jsonl"
done
step kernel_gap 60 python3 $H/measure_kernel_gap.py --out "$RES/kernel_gap_$GPU.json" --gpu "$GPU"
if make -C sim/calib >/dev/null 2>&1; then
  step calibrate_streams 60 sim/calib/vrsim-calibrate --gpu "$GPU" --only copy,elementwise,reduce \
    -o "$RES/${GPU}_streams.lua"
else
  echo "vrsim-calibrate did not build here"
fi
echo "== [$(elapsed) s] packing"
cp "$OUT/env.txt" "$STAGE/"
tar czf "$OUT/results.tar.gz" -C "$STAGE" . && ls -la "$OUT"
echo "== done in $(elapsed) s"
