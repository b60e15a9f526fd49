#!/bin/bash
# Host-side costs of PyTorch on one H200 machine, all in one device call so that they come from
# the same host: checkpoint regions (measure_ckpt_region.py), module-heavy dispatch per kernel and
# autocast's casts (measure_host_stats.py), and the SDXL UNet step at 64 px where the GPU never
# limits (profile_sdxl_step.py), as the reference these figures should explain.
#   usage: OUT=... bash validation/harness/run_host_calib.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}
mkdir -p "$OUT"
M=validation/harness
timeout 120 python3 $M/measure_ckpt_region.py --out "$OUT/ckpt_region_h200.json" 2>&1 | tail -16
timeout 120 python3 $M/measure_host_stats.py --out "$OUT/host_stats_h200_b.json" 2>&1 | grep -v -i warn | tail -3
for args in "--mode bf16" "--mode bf16 --ckpt" "--mode amp_bf16"; do
  timeout 150 python3 $M/profile_sdxl_step.py --res 64 $args --steps 8 --out "$OUT/profile_sdxl_h200_b.jsonl" 2>&1 \
    | grep -v -i warn | python3 -c "import sys,json; [print({k: v for k, v in json.loads(l).items() if k in ('name','steps_gpu_ms','host_ms','kernels')}) for l in sys.stdin if l.startswith('{')]"
done
