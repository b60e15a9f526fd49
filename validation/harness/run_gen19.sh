#!/bin/bash
# One device call that does what the card it lands on still lacks (run_gen4.sh packs what is staged):
#   H200: the tables the H200 has not measured (the expert fold's backward, peft's LoRA sum of two
#         dtypes, bitsandbytes' optimizer through run_gpu_tables.sh) and the four torchtune
#         combinations that need bitsandbytes and torchtune (predicted first:
#         validation/results/torchtune_combos_predictions_h200_7157ab1.jsonl);
#   H100: torch.profiler's kernels and ops of one steady step (profile_hf_step.py --ops) of
#         torchtune's decoder and transformers' on the same sizes (gen17/gen18's rows), and of
#         FlexAttention and SDPA at head dim 64 with checkpointing (gen16's), for the step time
#         they are still priced off by.
# First, on either card, axolotl's sample packing under sdpa (plans/plan_gen19_varlen.jsonl:
# micro_batch_size packed rows, axolotl 0.19.0's sdpa_varlen module carried alone as
# AXOLOTL_SDPA_VARLEN; predicted first: validation/results/gen19_varlen_predictions_<gpu>.jsonl).
#   usage (GPU machine, repository root, the carried site packages on PYTHONPATH):
#     bash validation/harness/run_gen19.sh
set -u
OUT=${OUT:-/tmp/vrsim-out}; export STAGE=${STAGE:-$OUT/stage}
mkdir -p "$OUT/prof" "$OUT/records" "$OUT/traces"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then G=h200; else G=h100; fi
echo "== varlen ($G)"
timeout 150 python3 validation/harness/measure_llama.py --plan validation/harness/plans/plan_gen19_varlen.jsonl \
  --out "$OUT/records/llama_${G}_gen19_varlen.jsonl" --trace-dir "$OUT/traces" --deadline-s 120 2>&1 \
  | grep -v "Warning\|warn(" | tail -8
if [ $G = h200 ]; then
  for t in baddbmm add_mixed; do
    echo "== $t"
    timeout 90 python3 validation/harness/measure_torch_ops.py --gpu h200 --only $t -o "$OUT/${t}_h200.lua" 2>&1 | tail -3
  done
  head -4 validation/harness/plans/plan_torchtune_combos.jsonl > /tmp/p4.jsonl
  bash validation/harness/run_gpu_tables.sh /tmp/p4.jsonl llama_GPU_torchtune_combos4 200
else
  R=validation/records
  for rn in llama_h100_gen18_torchtune:gen18-tt-8b-l4-s4096 llama_h100_gen17_torchtune:gen17-hf-8b-l4-s4096 \
            llama_h100_gen18_torchtune:gen18-tt-qwen25-05b-b4-s2048 llama_h100_gen18_torchtune:gen18-hf-qwen25-05b-b4-s2048 \
            llama_h100_gen16_flex:gen16-flex-1b-l4-s4096-ckpt llama_h100_gen16_flex:gen16-sdpa-1b-l4-s4096-ckpt; do
    echo "== ${rn#*:}"
    timeout 100 python3 validation/harness/profile_hf_step.py --record "$R/${rn%%:*}.jsonl" --name "${rn#*:}" \
      --ops --out "$OUT/prof/profile_gen19_h100.jsonl" > "$OUT/prof/${rn#*:}.log" 2>&1
    grep -A1 "^forward\|^backward\|^optimizer" "$OUT/prof/${rn#*:}.log" | grep -v "^ \|^--" | head -12
  done
fi
