#!/bin/bash
# One device call that does what the card it lands on still lacks (run_gen4.sh packs what is staged):
#   H200: the tables the H200 has not measured (the expert fold's backward, peft's LoRA sum of two
#         dtypes, bitsandbytes' optimizer through run_gpu_tables.sh) and the four torchtune
#         combinations that need bitsandbytes and torchtune (predicted first:
#         validation/results/torchtune_combos_predictions_h200_7157ab1.jsonl);
#   H100: the eager plan (plans/plan_gen19_eager.jsonl: a padded batch and axolotl's packed rows
#         under eager attention, predicted first: validation/results/gen19_eager_predictions_h100.jsonl)
#         and profile_hf_step.py --ops of gen19's Qwen2.5-0.5B varlen run; the first H100 call
#         (2026-12-07 19:01) ran the varlen plan below and the profiles of torchtune's decoder,
#         transformers' and FlexAttention at head dim 64 (validation/results/profile_gen19_h100.jsonl).
# On an H200, after those, axolotl's sample packing under sdpa (plans/plan_gen19_varlen.jsonl:
# micro_batch_size packed rows, axolotl 0.19.0's sdpa_varlen module carried alone as
# AXOLOTL_SDPA_VARLEN; predicted first: validation/results/gen19_varlen_predictions_h200.jsonl).
#   usage (GPU machine, repository root, the carried site packages on PYTHONPATH):
#     bash validation/harness/run_gen19.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
mkdir -p "$OUT/prof" "$OUT/records" "$OUT/traces"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then G=h200; else G=h100; fi
plan() {  # PLAN NAME BUDGET_S
  echo "== $2 ($G)"
  timeout $(( $3 + 30 )) python3 validation/harness/measure_llama.py --plan validation/harness/plans/$1.jsonl \
    --out "$OUT/records/llama_${G}_$2.jsonl" --trace-dir "$OUT/traces" --deadline-s $3 2>&1 \
    | grep -v "Warning\|warn(" | grep "DONE\|FAIL\|rror" | tail -8
}
# (the H100's varlen runs and profiles are in validation/records/llama_h100_gen19_varlen.jsonl and
# results/profile_gen19_h100.jsonl: an H100 runs the eager plan, padded and packed batches under
# eager attention, predicted first in validation/results/gen19_eager_predictions_h100.jsonl, and
# the Qwen varlen run's profile instead)
if [ $G = h100 ]; then
  plan plan_gen19_eager gen19_eager 100
  timeout 100 python3 validation/harness/profile_hf_step.py --record validation/records/llama_h100_gen19_varlen.jsonl \
    --name gen19-mp-sdpa-qwen25-05b-b4 --ops --out "$OUT/prof/profile_gen19b_h100.jsonl" > "$OUT/prof/gen19-mp-qwen.log" 2>&1
  grep -A1 "^forward\|^backward\|^optimizer" "$OUT/prof/gen19-mp-qwen.log" | grep -v "^ \|^--" | head -12
else
  # (the varlen plan last: the tables and torchtune's combinations are what the H200 lacks most)
  for t in baddbmm add_mixed; do
    echo "== $t"
    timeout 90 python3 validation/harness/measure_torch_ops.py --gpu h200 --only $t -o "$OUT/${t}_h200.lua" 2>&1 | tail -3
  done
  head -4 validation/harness/plans/plan_torchtune_combos.jsonl > /tmp/p4.jsonl
  bash validation/harness/run_gpu_tables.sh /tmp/p4.jsonl llama_GPU_torchtune_combos4 150
  plan plan_gen19_varlen gen19_varlen 90
fi
