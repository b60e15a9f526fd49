#!/bin/bash
# Host cost by op class, FSDP2's hooks, and SDXL UNet steps across batch and resolution, on one
# H200 (one device call, so every figure comes from the same host):
#   measure_host_classes.py   forward and backward host time per op of each class
#   measure_fsdp2_hooks.py    FSDP2's host time per sharded module (one-rank group)
#   profile_sdxl_step.py      1024 px with checkpointing and 512 px without, batch 1, 2, 4 (and
#                             768 px and amp at batch 2): host and GPU time per phase
#   usage: OUT=... bash validation/harness/run_host_classes.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}
mkdir -p "$OUT"
M=validation/harness
cd "$M" && OUT="$OUT" timeout 150 python3 measure_host_classes.py --out "$OUT/host_classes_h200.json" 2>&1 | grep -v -i warn | tail -20; cd - >/dev/null
timeout 120 python3 $M/measure_fsdp2_hooks.py --out "$OUT/fsdp2_hooks_h200.json" 2>&1 | grep -v -i warn | tail -12
F="$OUT/profile_sdxl_batch_h200.jsonl"
for args in "--res 1024 --mode bf16 --ckpt --batch 1" "--res 1024 --mode bf16 --ckpt --batch 2" \
            "--res 1024 --mode bf16 --ckpt --batch 4" "--res 512 --mode bf16 --batch 1" \
            "--res 512 --mode bf16 --batch 2" "--res 512 --mode bf16 --batch 4" \
            "--res 768 --mode bf16 --ckpt --batch 2" "--res 1024 --mode amp_bf16 --batch 2"; do
  echo "== $args"
  timeout 75 python3 $M/profile_sdxl_step.py $args --steps 6 --out "$F" 2>&1 | grep -v -i warn | tail -1 | cut -c1-600
done
