#!/bin/bash
# SDXL UNet step profiles on one H200 (one device call): the three configurations of
# validation/records/sdxl_h200.jsonl at their resolution, with and without Python's garbage collector,
# then the same steps at 64 px, where the GPU never limits and what is measured is the host's
# dispatch of the step.
#   usage: OUT=... bash validation/harness/run_sdxl_profile.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}
mkdir -p "$OUT"
F="$OUT/profile_sdxl_h200.jsonl"
P=validation/harness/profile_sdxl_step.py
for args in "--res 1024 --mode bf16 --ckpt --steps 8" "--res 1024 --mode bf16 --ckpt --steps 8 --gc off" \
            "--res 512 --mode bf16 --steps 8" "--res 1024 --mode amp_bf16 --steps 8" \
            "--res 64 --mode bf16 --ckpt --steps 8" "--res 64 --mode bf16 --ckpt --steps 8 --gc off" \
            "--res 64 --mode bf16" "--res 64 --mode amp_bf16"; do
  echo "== $args"
  timeout 150 python3 $P $args --out "$F" 2>&1 | grep -v -i warn | tail -3
done
