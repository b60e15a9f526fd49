#!/bin/bash
# One device call: the kernels of the variable-length rows of llama_h100_gen5_dpovar.jsonl
# (padded, packed, packed with checkpointing) from torch.profiler per phase and op, and the
# masked SDPA kernels at head_dim 64; on an H200 also its per-GPU tables (PROVENANCE.md,
# "Planned, not yet run"). Each result goes to $OUT; the log to stdout.
#   usage (GPU machine, repository root, transformers on PYTHONPATH):
#     bash validation/harness/run_varlen_profile.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}
mkdir -p "$OUT"
H=validation/harness
REC=validation/records/llama_h100_gen5_dpovar.jsonl
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $GPU; $(date -u +%Y-%m-%dT%H:%M:%SZ)"
for n in gen5-varlen-packed-ckpt gen5-varlen-packed gen5-varlen-pad; do
  timeout 150 python3 $H/profile_hf_step.py --record $REC --name $n --ops --out "$OUT/profile_gen5_varlen.jsonl" 2>&1 | grep -v Warning
done
timeout 150 python3 $H/measure_sdpa_kernels.py --masked-only --out "$OUT/sdpa_kernels_masked.json"
case "$GPU" in
  *H200*)
    timeout 100 python3 $H/measure_torch_ops.py --gpu h200 --only baddbmm -o "$OUT/baddbmm_h200.lua"
    timeout 100 python3 $H/measure_torch_ops.py --gpu h200 --only add_mixed -o "$OUT/add_mixed_h200.lua"
    timeout 120 python3 $H/measure_bnb_optim.py --out-dir "$OUT" --budget-s 60 ;;
esac
echo "done: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
