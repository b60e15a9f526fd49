#!/bin/sh
# test_recipes.sh: `vrsim CONFIG.yaml`, a trainer's config file simulated as it is
# (lua/recipes/, docs/recipes.md). For each format, a config in tests/data/recipes/ must give the
# same peak and step time as the scenario written by hand beside it (their --json outputs
# compared); --print-scenario's text must run as a scenario with the same figures; the keys that
# would change the run but are not modelled are exit 2 naming the key with file:line; hostile
# YAML (deep nesting, an alias bomb, a merge key, a duplicate key, a foreign tag, a FIFO, an
# oversized file) is refused with a clear message.
#
#   VRSIM=./vrsim sh tests/test_recipes.sh      (make test runs it for each build)
set -u

VRSIM=${VRSIM:-./vrsim}
case "$VRSIM" in /*) ;; */*) VRSIM="$(pwd)/$VRSIM" ;; esac
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_recipes: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-recipes.XXXXXX") || exit 1
KEEP=""
trap 'rm -rf "$TMP" $KEEP' EXIT
trap 'exit 130' INT TERM

PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# run_check NAME RC WANT -- CMD...: CMD (120 s at most) must exit RC and say the extended regex WANT
run_check() {
  _n=$1 _rc=$2 _want=$3
  shift 4
  timeout 120 "$@" >"$TMP/out" 2>&1
  _got=$?
  if [ "$_got" -eq 124 ]; then fail "$_n: still running after 120 s"; return; fi
  if [ "$_got" -ge 128 ]; then fail "$_n: exit $_got (crash)" "$(tail -n 5 "$TMP/out")"; return; fi
  if [ "$_got" -ne "$_rc" ]; then fail "$_n: exit $_got, expected $_rc" "$(head -n 4 "$TMP/out")"; return; fi
  if [ -n "$_want" ] && ! grep -Eq -- "$_want" "$TMP/out"; then
    fail "$_n: the output does not say /$_want/" "$(head -n 6 "$TMP/out")"; return
  fi
  ok "$_n: exit $_rc, $(grep -v '^$' "$TMP/out" | head -n 1 | cut -c1-110)"
}
check() { _a=$1 _b=$2 _c=$3; shift 4; run_check "$_a" "$_b" "$_c" -- "$VRSIM" "$@"; }

# figures FILE: peak reserved, peak allocated, step time and fits of a --json summary
figures() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["peak_reserved_bytes"], d["peak_allocated_bytes"], d["step_time_ms"], d["fits"])' "$1" 2>/dev/null ||
    sed -n 's/.*"peak_reserved_bytes": *\([0-9]*\).*"step_time_ms": *\([0-9.e+-]*\).*/\1 \2/p' "$1"
}

# same NAME SCENARIO -- CONFIG ARGS...: the config run as it is and the hand-written scenario give
# the same figures (and both run: exit 0)
same() {
  _n=$1 _scn=$2
  shift 3
  "$VRSIM" "$_scn" --json --no-files >"$TMP/a.json" 2>"$TMP/a.err"; _ra=$?
  "$VRSIM" "$@" --json --no-files >"$TMP/b.json" 2>"$TMP/b.err"; _rb=$?
  if [ "$_ra" -ne 0 ] || [ "$_rb" -ne 0 ]; then
    fail "$_n: exit $_ra (scenario), $_rb (config)" "$(cat "$TMP/a.err" "$TMP/b.err" | head -n 4)"; return
  fi
  _fa=$(figures "$TMP/a.json"); _fb=$(figures "$TMP/b.json")
  if [ -z "$_fa" ] || [ "$_fa" != "$_fb" ]; then fail "$_n: scenario [$_fa], config [$_fb]"; return; fi
  ok "$_n: the same peak and step time [$_fb]"
}

# paged_figures FILE: figures and the paged optimizer state's bytes of a --json summary
paged_figures() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["peak_reserved_bytes"], d["peak_allocated_bytes"], d["step_time_ms"], d["fits"], d["paged_state"]["bytes"])' "$1" 2>/dev/null
}

# same_paged NAME OPTIMIZER SCENARIO [ARGS...] -- CONFIG ARGS...: the config (which names the
# optimizer its own way) and the scenario run with training.optimizer = OPTIMIZER give the same
# figures and the same paged optimizer state
same_paged() {
  _n=$1 _o=$2
  shift 2
  set -- "$@" :: # the end of the config's words
  _scn=""
  while [ "$1" != "--" ]; do _scn="$_scn $1"; shift; done
  shift
  # shellcheck disable=SC2086 # the scenario's words, split on purpose
  "$VRSIM" $_scn --set training.optimizer="$_o" --json --no-files >"$TMP/a.json" 2>"$TMP/a.err"; _ra=$?
  _cfg=""
  while [ "$1" != "::" ]; do _cfg="$_cfg $1"; shift; done
  shift
  # shellcheck disable=SC2086
  "$VRSIM" $_cfg --json --no-files >"$TMP/b.json" 2>"$TMP/b.err"; _rb=$?
  if [ "$_ra" -ne 0 ] || [ "$_rb" -ne 0 ]; then
    fail "$_n: exit $_ra (scenario), $_rb (config)" "$(cat "$TMP/a.err" "$TMP/b.err" | head -n 4)"; return
  fi
  _fa=$(paged_figures "$TMP/a.json"); _fb=$(paged_figures "$TMP/b.json")
  if [ -z "$_fa" ] || [ "$_fa" != "$_fb" ]; then fail "$_n: scenario [$_fa], config [$_fb]"; return; fi
  ok "$_n: the same peak, step time and paged state [$_fb]"
}

D=tests/data/recipes
M=$D/llama-3.2-1b/config.json

# ---- each format: the config as it is = the scenario written by hand --------------------------
same "axolotl QLoRA (nf4, all-linear, 8-bit AdamW, flash attention)" $D/axolotl_qlora.lua -- \
  $D/axolotl_qlora.yml --gpu rtx4090
sed 's#^sample_packing: false#sample_packing: true#' $D/axolotl_qlora.yml >"$TMP/packed.yml"
same "axolotl sample_packing with flash attention (one row of micro_batch_size x sequence_len a micro-batch)" \
  $D/axolotl_qlora_packed.lua -- "$TMP/packed.yml" --gpu rtx4090
python3 -c "import random; random.seed(1); print('\n'.join(str(random.randint(1, 3000)) for _ in range(2500)))" >"$TMP/lens.txt"
# flex_attention packs as flash does (axolotl's ATTN_IMPLS_SUPPORTING_PACKING): the fullest bin,
# two sequences of 2048 in one row of 4096, its BlockMask each sequence's causal blocks
sed -e 's#^sample_packing: false#sample_packing: true#' -e 's#^flash_attention: true#flex_attention: true#' \
  $D/axolotl_qlora.yml >"$TMP/packedflex.yml"
check "axolotl sample_packing with flex attention: one packed row, FlexAttention over its sequences" 0 \
  "BlockMask keeps 32 partial and 240 full blocks" -- "$TMP/packedflex.yml" --gpu rtx4090 --no-files --no-suggest
# sdpa packs real batches (multipack_real_batches by default where the attention does not pack):
# micro_batch_size rows of sequence_len, each sequence attended alone by axolotl's sdpa_varlen
# patch (PyTorch's varlen_attn); sdpa_varlen false (stock SDPA on a block-diagonal mask) and eager
# are refused by name
sed -e 's#^sample_packing: false#sample_packing: true#' -e 's#^flash_attention: true#sdp_attention: true#' \
  $D/axolotl_qlora.yml >"$TMP/packedsdpa.yml"
check "axolotl sample_packing with sdpa: micro_batch_size packed rows under axolotl's sdpa_varlen" 0 \
  "micro-batch 2 packed bins \([0-9]+ sequences and paddings, axolotl's sdpa_varlen\), 2 x seq 2048" -- \
  "$TMP/packedsdpa.yml" --gpu rtx4090 --no-files --no-suggest
"$VRSIM" "$TMP/packedsdpa.yml" --gpu rtx4090 --print-scenario >"$TMP/packedsdpa.lua" 2>/dev/null
if grep -q 'real_batches = true' "$TMP/packedsdpa.lua" && grep -q 'pack_length = 2048' "$TMP/packedsdpa.lua" \
   && grep -q 'micro_batch = 2' "$TMP/packedsdpa.lua"; then
  ok "axolotl sample_packing with sdpa: training.data real_batches, bins of sequence_len, micro_batch micro_batch_size"
else fail "axolotl sample_packing with sdpa: scenario" "$(sed -n '/data = {/,/}/p' "$TMP/packedsdpa.lua")"; fi
printf 'sdpa_varlen: false\n' >>"$TMP/packedsdpa.yml"
check "axolotl sample_packing with sdpa_varlen: false: refused by name" 2 "sdpa_varlen.*block-diagonal mask" -- \
  "$TMP/packedsdpa.yml" --gpu rtx4090 --no-files --no-suggest
sed -e 's#^sample_packing: false#sample_packing: true#' -e 's#^flash_attention: true#eager_attention: true#' \
  $D/axolotl_qlora.yml >"$TMP/packedeager.yml"
check "axolotl sample_packing with eager attention: the packed rows on transformers' block-causal mask" 0 \
  "micro-batch 2 packed bins \([0-9]+ sequences and paddings\), 2 x seq 2048, .*attention eager" -- \
  "$TMP/packedeager.yml" --gpu rtx4090 --no-files --no-suggest
check "axolotl sample_packing with the data set's lengths: axolotl's bins" 0 \
  "1656 sequences \(844 longer than 2048 dropped\) packed first-fit in a shuffled order" -- \
  "$TMP/packed.yml" --gpu rtx4090 --set training.data.lengths="$TMP/lens.txt" --no-files --no-suggest
# the packing keys as training.data's: curriculum_sampling (SequentialSampler) the given order,
# excess_length_strategy too_long, sample_packing_group_size group_size; pad_to_sequence_len false
# pads nothing (the row as long as its tokens, noted)
sed -e 's/^sample_packing: false/sample_packing: true\ncurriculum_sampling: true\nexcess_length_strategy: raise\nsample_packing_group_size: 5000/' \
    -e 's/^pad_to_sequence_len: true/pad_to_sequence_len: false/' $D/axolotl_qlora.yml >"$TMP/packed2.yml"
"$VRSIM" "$TMP/packed2.yml" --gpu rtx4090 --print-scenario >"$TMP/packed2.lua" 2>"$TMP/packed2.err"
if grep -q 'order = "given"' "$TMP/packed2.lua" && grep -q 'too_long = "raise"' "$TMP/packed2.lua" \
   && grep -q 'group_size = 5000' "$TMP/packed2.lua" && ! grep -q 'pad_to_multiple_of' "$TMP/packed2.lua" \
   && grep -q "pad_to_sequence_len: false with sample_packing: each packed row as long as its tokens" "$TMP/packed2.lua"; then
  ok "axolotl packing keys: curriculum_sampling, excess_length_strategy, sample_packing_group_size, pad_to_sequence_len false"
else fail "axolotl packing keys" "$(sed -n '/data = {/,/}/p' "$TMP/packed2.lua"; head -c 300 "$TMP/packed2.err")"; fi
same "axolotl LoRA bf16 on 2 GPUs (DDP, sdp_attention, adamw_torch)" $D/axolotl_lora_ddp.lua -- \
  $D/axolotl_lora_ddp.yml --gpu h100 --gpus 2
same "axolotl full fine-tuning under its DeepSpeed ZeRO-2 JSON" $D/axolotl_full_zero2.lua -- \
  $D/axolotl_full_zero2.yml --gpu h100 --gpus 4
same "axolotl full fine-tuning under FSDP2 (fsdp_version 2, fsdp_config)" $D/axolotl_fsdp2.lua -- \
  $D/axolotl_fsdp2.yml --gpu h100 --gpus 8
same "accelerate FSDP2 config with the script's model and batch" $D/accelerate_fsdp2.lua -- \
  $D/accelerate_fsdp2.yaml --gpu h100 --set model.config=$M --set micro_batch=4 --set seq=2048
same "accelerate DeepSpeed ZeRO-3 config (inline, optimizer offload)" $D/accelerate_zero3.lua -- \
  $D/accelerate_zero3.yaml --gpu a100_80g --set model.config=$M --set micro_batch=2 --set seq=4096
same "TRL SFT config (trl sft --config): LoRA, SFTConfig's defaults" $D/trl_sft_lora.lua -- \
  $D/trl_sft_lora.yaml --gpu h100
same "TRL SFT config launched by an accelerate FSDP2 config (--accelerate): ranks, plugin, bf16 in both" \
  $D/trl_sft_full_fsdp2.lua -- $D/trl_sft_full.yaml --accelerate $D/accelerate_fsdp2.yaml --gpu h100
same "TrainingArguments as JSON with the script's model and rows, DeepSpeed ZeRO-2" $D/trainer_args_zero2.lua -- \
  $D/trainer_args_zero2.json --gpu a100_80g --gpus 4 --set model.config=$M --set seq=1024
same "LLaMA-Factory QLoRA SFT (quantization_bit 4, lora_target all)" $D/llamafactory_qlora.lua -- \
  $D/llamafactory_qlora.yaml --gpu rtx4090
same "LLaMA-Factory full SFT under its DeepSpeed ZeRO-2 JSON" $D/llamafactory_full_ds.lua -- \
  $D/llamafactory_full_ds.yaml --gpu h100 --gpus 4
# bitsandbytes' paged optimizers by their TrainingArguments.optim names (OptimizerNames): each
# reader's config gives the scenario's run with training.optimizer set
sed 's#^optimizer: adamw_bnb_8bit#optimizer: paged_adamw_8bit#' $D/axolotl_qlora.yml >"$TMP/apaged.yml"
same_paged "axolotl optimizer: paged_adamw_8bit" paged_adamw_8bit $D/axolotl_qlora.lua -- \
  "$TMP/apaged.yml" --gpu rtx4090
sed -e 's/"optim": "adamw_torch"/"optim": "paged_adamw_32bit"/' -e 's/"torch_compile": false,/"torch_compile": false/' \
  -e '/"deepspeed"/d' $D/trainer_args_zero2.json >"$TMP/tpaged.json"
sed -e 's/optimizer = "adamw", optimizer_impl = "foreach",/optimizer = "paged_adamw_32bit",/' -e '/deepspeed = /d' \
  -e 's/count = 4/count = 1/' $D/trainer_args_zero2.lua >"$TMP/tpaged.lua"
same_paged "TrainingArguments JSON optim: paged_adamw_32bit (one GPU, no DeepSpeed)" paged_adamw_32bit \
  "$TMP/tpaged.lua" --set model.config=$M -- "$TMP/tpaged.json" --gpu a100_80g --set model.config=$M --set seq=1024
{ cat $D/trl_sft_lora.yaml; printf 'optim: paged_lion_32bit\n'; } >"$TMP/trlpaged.yaml"
same_paged "TRL SFT optim: paged_lion_32bit" paged_lion_32bit $D/trl_sft_lora.lua -- "$TMP/trlpaged.yaml" --gpu h100
{ cat $D/llamafactory_qlora.yaml; printf 'optim: paged_lion_8bit\n'; } >"$TMP/lfpaged.yaml"
same_paged "LLaMA-Factory optim: paged_lion_8bit" paged_lion_8bit $D/llamafactory_qlora.lua -- \
  "$TMP/lfpaged.yaml" --gpu rtx4090
# torchtune names bitsandbytes' class: its full single-device config, stepped after backward
sed 's/^optimizer_in_bwd: True/optimizer_in_bwd: False/' $D/torchtune_1B_full_single_device.yaml >"$TMP/ttpaged.yaml"
same_paged "torchtune bitsandbytes.optim.PagedAdamW8bit" paged_adamw_8bit $D/torchtune_1B_full_single_device.lua \
  --set training.optimizer_in_backward=false -- "$TMP/ttpaged.yaml" --gpu h100
sed -e 's/^optimizer_in_bwd: True/optimizer_in_bwd: False/' \
  -e 's/^  _component_: bitsandbytes.optim.PagedAdamW8bit/  _component_: bitsandbytes.optim.PagedLion/' \
  $D/torchtune_1B_full_single_device.yaml >"$TMP/ttlion.yaml"
same_paged "torchtune bitsandbytes.optim.PagedLion (optim_bits 32)" paged_lion_32bit $D/torchtune_1B_full_single_device.lua \
  --set training.optimizer_in_backward=false -- "$TMP/ttlion.yaml" --gpu h100
same "torchtune lora_finetune_single_device (its llama3_2/1B config)" $D/torchtune_1B_lora_single_device.lua -- \
  $D/torchtune_1B_lora_single_device.yaml --gpu rtx4090
# its full_finetune_single_device config with torch's fused AdamW for bitsandbytes' paged one
sed 's/^  _component_: bitsandbytes.optim.PagedAdamW8bit/  _component_: torch.optim.AdamW\n  fused: True/' \
  $D/torchtune_1B_full_single_device.yaml >"$TMP/ttfull.yaml"
same "torchtune full_finetune_single_device (optimizer in backward)" $D/torchtune_1B_full_single_device.lua -- \
  "$TMP/ttfull.yaml" --gpu h100
sed 's/^compile: False/compile: True/' $D/torchtune_1B_lora_single_device.yaml >"$TMP/ttcompile.yaml"
same "torchtune compile: True: the decoder layers compiled (training.compile)" $D/torchtune_1B_lora_compile.lua -- \
  "$TMP/ttcompile.yaml" --gpu rtx4090
sed 's/^compile: False/compile: True/' $D/torchtune_1B_full_distributed.yaml >"$TMP/ttcompile_fsdp.yaml"
check "torchtune compile: True under FSDP2: each decoder layer compiled inside fully_shard's hooks" 0 \
  "torch\.compile: the partitioner saves" -- \
  "$TMP/ttcompile_fsdp.yaml" --gpu h100 --gpus 8 --no-files
same "torchtitan TOML: llama3 8B flavor, FSDP over 8 GPUs, per-op selective checkpointing" $D/torchtitan_llama3_8b.lua -- \
  $D/torchtitan_llama3_8b.toml --gpu h100 --gpus 8
same "torchtitan TOML, 2-D: tensor parallelism 2 x FSDP over the rest, bf16 parameters" $D/torchtitan_llama3_8b_tp.lua -- \
  $D/torchtitan_llama3_8b_tp.toml --gpu h100 --gpus 8
same "torchtitan TOML, 3-D: pipeline 2 (1F1B, 4 micro-batches) x FSDP 2 x TP 2" $D/torchtitan_llama3_8b_pp.lua -- \
  $D/torchtitan_llama3_8b_pp.toml --gpu h100 --gpus 8
same "torchtune full_finetune_distributed on 4 GPUs (FSDP2, reshard_after_forward off)" $D/torchtune_1B_full_distributed.lua -- \
  $D/torchtune_1B_full_distributed.yaml --gpu h100 --gpus 4
sed 's/^fsdp_cpu_offload: False/fsdp_cpu_offload: True/' $D/torchtune_1B_full_distributed.yaml >"$TMP/ttoff.yaml"
"$VRSIM" "$TMP/ttoff.yaml" --gpu h100 --gpus 4 --json --no-files >"$TMP/off.json" 2>&1
"$VRSIM" $D/torchtune_1B_full_distributed.yaml --gpu h100 --gpus 4 --set zero.offload_param=cpu \
  --set zero.offload_optimizer=cpu --json --no-files >"$TMP/set.json" 2>&1
_fo=$(figures "$TMP/off.json"); _fs=$(figures "$TMP/set.json"); _fn=$(figures "$TMP/b.json")
if [ -n "$_fo" ] && [ "$_fo" = "$_fs" ] && [ "$_fo" != "$_fn" ]; then
  ok "torchtune fsdp_cpu_offload: FSDP2's CPUOffloadPolicy (zero.offload_param, offload_optimizer = cpu) [$_fo]"
else
  fail "torchtune fsdp_cpu_offload: [$_fo], with --set [$_fs], without [$_fn]"
fi
same "diffusers train_text_to_image_lora_sdxl.py launch command (its README's)" $D/diffusers_lora_sdxl.lua -- \
  $D/diffusers_lora_sdxl.sh --gpu rtx4090
same "diffusers train_text_to_image_sdxl.py launch command (autocast, EMA, 8-bit Adam)" $D/diffusers_full_sdxl.lua -- \
  $D/diffusers_full_sdxl.sh --gpu h100
same "--from axolotl on a config that names no format by extension alone" $D/axolotl_qlora.lua -- \
  $D/axolotl_qlora.yml --gpu rtx4090 --from axolotl

# what the reader read is said: the notes name the keys not read and the approximations
check "axolotl notes: keys not read, flash_attention_2 as SDPA's flash" 0 \
  "keys not read.*learning_rate.*output_dir.*wandb_project" -- $D/axolotl_qlora.yml --gpu rtx4090 --no-files
grep -q "flash_attention_2 (the flash-attn package) simulated as SDPA's flash backend" "$TMP/out" &&
  ok "  ... and the attention note" || fail "no flash_attention_2 note" "$(tail -n 3 "$TMP/out")"

# --print-scenario: a scenario a user can keep; run from the folder the config's paths are read
# from, it gives the config's own figures
P=$(mktemp ./.vrsim-recipe-XXXXXX) && mv "$P" "$P.lua" && KEEP="$P.lua"
if "$VRSIM" $D/axolotl_qlora.yml --gpu rtx4090 --print-scenario >"$P.lua" 2>"$TMP/p.err"; then
  same "--print-scenario's text runs as a scenario with the config's figures" "$P.lua" -- \
    $D/axolotl_qlora.yml --gpu rtx4090
  grep -q 'quant_storage = "bf16"' "$P.lua" && ok "  ... it says quant_storage = \"bf16\" (axolotl's)" ||
    fail "--print-scenario lacks quant_storage" "$(head -n 30 "$P.lua")"
else
  fail "--print-scenario: exit $?" "$(cat "$TMP/p.err")"
fi
rm -f "$P.lua"

# ---- vrsim sweep and vrsim maxbatch take the config as vrsim CONFIG does -------------------------
# both_say NAME -- ARGS_SCENARIO -- ARGS_CONFIG: the two commands print the same result lines
both_say() {
  _n=$1; shift 2
  _a=""; while [ "$1" != "--" ]; do _a="$_a $1"; shift; done; shift
  # shellcheck disable=SC2086
  timeout 120 "$VRSIM" $_a >"$TMP/s.out" 2>&1; _ra=$?
  timeout 120 "$VRSIM" "$@" >"$TMP/c.out" 2>&1; _rb=$?
  if [ "$_ra" -ne 0 ] || [ "$_rb" -ne 0 ]; then
    fail "$_n: exit $_ra (scenario), $_rb (config)" "$(tail -n 3 "$TMP/s.out" "$TMP/c.out")"; return
  fi
  # the rows and the answer, without the timing of the run itself
  grep -E '^ +[0-9]+  |^answer' "$TMP/s.out" >"$TMP/s.rows"; grep -E '^ +[0-9]+  |^answer' "$TMP/c.out" >"$TMP/c.rows"
  if [ ! -s "$TMP/c.rows" ] || ! cmp -s "$TMP/s.rows" "$TMP/c.rows"; then
    fail "$_n: the config's rows differ from the scenario's" "$(diff "$TMP/s.rows" "$TMP/c.rows" | head -n 6)"; return
  fi
  ok "$_n: the same $(wc -l <"$TMP/c.rows") result lines as the scenario"
}
both_say "vrsim maxbatch CONFIG --gpu --gpus" -- maxbatch $D/axolotl_lora_ddp.lua --max 16 -- \
  maxbatch $D/axolotl_lora_ddp.yml --gpu h100 --gpus 2 --max 16
both_say "vrsim sweep CONFIG --gpu, a model.config constant" -- \
  sweep $D/accelerate_fsdp2.lua --set micro_batch=1,4 --set seq=1024,2048 --no-files -j 2 -- \
  sweep $D/accelerate_fsdp2.yaml --gpu h100 --set model.config=$M --set micro_batch=1,4 --set seq=1024,2048 --no-files -j 2
both_say "vrsim sweep CONFIG --accelerate FILE" -- \
  sweep $D/trl_sft_full_fsdp2.lua --set micro_batch=1,4 --no-files -j 2 -- \
  sweep $D/trl_sft_full.yaml --accelerate $D/accelerate_fsdp2.yaml --gpu h100 --set micro_batch=1,4 --no-files -j 2
both_say "vrsim maxbatch CONFIG --accelerate FILE" -- maxbatch $D/trl_sft_full_fsdp2.lua --max 16 -- \
  maxbatch $D/trl_sft_full.yaml --accelerate $D/accelerate_fsdp2.yaml --gpu h100 --max 16
sed -e 's#^sample_packing: false#sample_packing: true\nsdpa_varlen: false#' -e 's#^flash_attention: true#sdp_attention: true#' \
  $D/axolotl_qlora.yml >"$TMP/spacking.yml"
check "vrsim sweep CONFIG: the config's refusals come first" 2 "vrsim sweep: .*spacking\.yml:25: sdpa_varlen" -- \
  sweep "$TMP/spacking.yml" --gpu rtx4090 --set micro_batch=1,2 --no-files
check "vrsim maxbatch CONFIG without --gpu" 2 "vrsim maxbatch: .*does not name the GPU" -- maxbatch $D/axolotl_qlora.yml
check "vrsim sweep --gpu on a scenario" 2 "--gpu and --gpus are for a trainer config" -- \
  sweep $D/axolotl_qlora.lua --gpu h100 --set micro_batch=1,2 --no-files

# ---- the hardware and the model are not in the file ---------------------------------------------
check "no --gpu: an error naming --gpu" 2 "does not name the GPU: give --gpu NAME" -- $D/axolotl_qlora.yml --no-files
check "--gpu unknown" 2 "--gpu: unknown GPU 'rtx9999'" -- $D/axolotl_qlora.yml --gpu rtx9999 --no-files
check "--gpu on a scenario: refused" 2 "for a trainer config" -- $D/axolotl_qlora.lua --gpu h100 --no-files
check "--from an unknown format" 2 "--from megatron: not a format vrsim reads" -- $D/axolotl_qlora.yml --gpu h100 --from megatron --no-files
check "--from torchtune on an axolotl config: its missing model section named" 2 \
  "axolotl_qlora\.yml:[0-9]+: model: missing: a torchtune recipe's model section" -- $D/axolotl_qlora.yml --gpu h100 --from torchtune --no-files
check "accelerate config without the model" 2 "names no model: give .*--set model.config=PATH" -- $D/accelerate_fsdp2.yaml --gpu h100 --no-files

# ---- a trainer config and its launcher's (--accelerate): the precedence of each key -----------
# scn_has NAME REGEX -- ARGS: --print-scenario of ARGS says the extended regex REGEX
scn_has() { _n=$1 _w=$2; shift 3; run_check "$_n" 0 "$_w" -- "$VRSIM" "$@" --print-scenario; }
A=$D/accelerate_fsdp2.yaml
scn_has "--accelerate: the launcher's num_processes gives the ranks" "count = 8," -- $D/trl_sft_full.yaml --accelerate $A --gpu h100
scn_has "--accelerate: --gpus wins over num_processes (accelerate launch --num_processes)" "count = 4," -- \
  $D/trl_sft_full.yaml --accelerate $A --gpu h100 --gpus 4
sed 's/^bf16: true/bf16: false/' $D/trl_sft_full.yaml >"$TMP/nobf16.yaml"
scn_has "--accelerate: bf16 off in the trainer's file, the launcher's mixed_precision bf16 holds" \
  'precision = "mp_fp32"' -- "$TMP/nobf16.yaml" --accelerate $A --gpu h100
sed 's/^mixed_precision: bf16/mixed_precision: '"'no'"'/' $A >"$TMP/mpno.yaml"
scn_has "--accelerate: the trainer's bf16 wins over the launcher's mixed_precision no" \
  'precision = "mp_fp32"' -- $D/trl_sft_full.yaml --accelerate "$TMP/mpno.yaml" --gpu h100
scn_has "--accelerate: bf16 off in both: fp32" 'precision = "fp32"' -- "$TMP/nobf16.yaml" --accelerate "$TMP/mpno.yaml" --gpu h100
sed '/^gradient_checkpointing: false/d' $D/trl_sft_full.yaml >"$TMP/tckpt.yaml"
check "--accelerate: SFTConfig's checkpointing beside FSDP's, both files named" 2 \
  "tckpt\.yaml: gradient_checkpointing and .*accelerate_fsdp2\.yaml:8: fsdp_config\.fsdp_activation_checkpointing: both on.*SFTConfig's default" -- \
  "$TMP/tckpt.yaml" --accelerate $A --gpu h100 --no-files
printf 'fsdp: full_shard auto_wrap\n' | cat $D/trl_sft_full.yaml - >"$TMP/tfsdp.yaml"
check "--accelerate: the trainer's fsdp beside the launcher's FSDP, both lines named" 2 \
  "tfsdp\.yaml:22: fsdp and .*accelerate_fsdp2\.yaml:4: distributed_type: the Trainer builds its own FSDP plugin" -- \
  "$TMP/tfsdp.yaml" --accelerate $A --gpu h100 --no-files
check "--accelerate: LoRA under the launcher's FSDP2 refused" 2 "trl_sft_lora\.yaml:[0-9]+: use_peft: LoRA under FSDP2" -- \
  $D/trl_sft_lora.yaml --accelerate $A --gpu h100 --no-files
check "--accelerate with an axolotl config" 2 "pairs with a TRL or TrainingArguments config, not an axolotl one" -- \
  $D/axolotl_qlora.yml --accelerate $A --gpu h100 --no-files
check "--accelerate naming a TRL config" 2 "not an accelerate config" -- \
  $D/trl_sft_full.yaml --accelerate $D/trl_sft_lora.yaml --gpu h100 --no-files
check "--accelerate on a scenario" 2 "vrsim: --accelerate is for a TRL or TrainingArguments config \(CONFIG\.yaml\), not a scenario" -- \
  $D/trl_sft_full_fsdp2.lua --accelerate $A --no-files
check "vrsim sweep --accelerate on a scenario" 2 "vrsim sweep: --accelerate is for a TRL" -- \
  sweep $D/trl_sft_full_fsdp2.lua --accelerate $A --set micro_batch=1,2 --no-files
check "--accelerate naming no file" 2 "no such file" -- $D/trl_sft_full.yaml --accelerate "$TMP/none.yaml" --gpu h100 --no-files

same "--accelerate: the launcher's DeepSpeed ZeRO-3 plugin (optimizer offload) under a TRL config" \
  $D/trl_sft_full_zero3.lua -- $D/trl_sft_full.yaml --accelerate $D/accelerate_zero3.yaml --gpu a100_80g
sed 's/^gradient_accumulation_steps: 2/gradient_accumulation_steps: 4/' $D/trl_sft_full.yaml >"$TMP/tga.yaml"
check "--accelerate: gradient accumulation differing in the two files, both lines named" 2 \
  "tga\.yaml:13: gradient_accumulation_steps and .*accelerate_zero3\.yaml:[0-9]+: deepspeed_config\.gradient_accumulation_steps: the Trainer's 4 and the DeepSpeed plugin's 2" -- \
  "$TMP/tga.yaml" --accelerate $D/accelerate_zero3.yaml --gpu a100_80g --no-files
printf 'torch_compile: true\n' | cat $D/trl_sft_full.yaml - >"$TMP/tcompile.yaml"
same "--accelerate: torch_compile under the launcher's regional compilation is training.compile" \
  $D/trl_sft_full_ddp_compile.lua -- "$TMP/tcompile.yaml" --accelerate $D/accelerate_ddp_compile.yaml --gpu h100
sed -n '/^dynamo_config:/,/^machine_rank/p' $D/accelerate_ddp_compile.yaml | sed '$d' | cat $A - >"$TMP/fsdpdyn.yaml"
check "--accelerate: torch_compile under FSDP2 is training.compile, each layer inside fully_shard's hooks" 0 \
  "torch\.compile: the partitioner saves" -- \
  "$TMP/tcompile.yaml" --accelerate "$TMP/fsdpdyn.yaml" --gpu h100 --no-files
check "accelerate FSDP2 with regional compilation is training.compile" 0 \
  "torch\.compile: the partitioner saves" -- \
  "$TMP/fsdpdyn.yaml" --gpu h100 --set model.config=$M --no-files
sed 's/^  dynamo_use_regional_compilation: true/  dynamo_use_regional_compilation: false/' $D/accelerate_ddp_compile.yaml >"$TMP/dynwhole.yaml"
check "accelerate dynamo_config without regional compilation: the whole model (scope model), its fp32 weights under autocast refused, naming the key" 2 \
  "dynwhole\.yaml:5: dynamo_config: training\.compile\.scope = \"model\" \(torch\.compile of the whole model\) with precision amp_bf16 is not modelled" -- \
  "$TMP/dynwhole.yaml" --gpu h100 --set model.config=$M --no-files

# variant NAME SED: the QLoRA config edited by SED, as $TMP/NAME.yml
variant() { sed "$2" $D/axolotl_qlora.yml >"$TMP/$1.yml"; }
variant hub 's#^base_model: .*#base_model: meta-llama/Llama-3.2-1B#'
check "a Hugging Face Hub id: download config.json (vrsim never reaches the network)" 2 \
  "hub\.yml:3: base_model: 'meta-llama/Llama-3.2-1B' is not a local folder holding config.json.*download" -- \
  "$TMP/hub.yml" --gpu rtx4090 --no-files
check "... or --set model.config=PATH stands in for it" 0 "FITS" -- "$TMP/hub.yml" --gpu rtx4090 --set model.config=$M --no-files

# ---- keys that would change the run and are not modelled: exit 2, key and file:line ------------
variant packing 's#^sample_packing: false#sample_packing: true\nmultipack_real_batches: false#;s#^flash_attention: true#sdp_attention: true#'
check "multipack_real_batches: false under sdpa (one bin of micro_batch_size x sequence_len on the patched attention)" 2 \
  "packing\.yml:25: multipack_real_batches: false with sdpa attention .* not modelled" -- \
  "$TMP/packing.yml" --gpu rtx4090 --no-files
variant realbatches 's#^sample_packing: false#sample_packing: true\nmultipack_real_batches: true#'
check "multipack_real_batches: true" 2 "realbatches\.yml:25: multipack_real_batches: true with flash attention \(micro_batch_size bins of sequence_len a batch there\) is not modelled" -- \
  "$TMP/realbatches.yml" --gpu rtx4090 --no-files
variant paged 's#^optimizer: adamw_bnb_8bit#optimizer: paged_ademamix_8bit#'
check "a paged optimizer vrsim does not model (bitsandbytes' paged AdEMAMix)" 2 \
  "paged\.yml:33: optimizer: 'paged_ademamix_8bit' is not modelled \(no paged optimizer of that name" -- "$TMP/paged.yml" --gpu rtx4090 --no-files
variant unknown 's#^lora_dropout: 0.05#lora_dropout: 0.05\nlora_modules_to_save: [embed_tokens, lm_head]#'
check "a key the reader does not know (lora_modules_to_save)" 2 \
  "unknown\.yml:14: lora_modules_to_save: not modelled" -- "$TMP/unknown.yml" --gpu rtx4090 --no-files
variant offload 's#^gradient_checkpointing: true#gradient_checkpointing: offload#'
check "gradient_checkpointing: offload" 2 "gradient_checkpointing: 'offload' \(activations offloaded\) is not modelled" -- \
  "$TMP/offload.yml" --gpu rtx4090 --no-files
variant nobf16 's#^bf16: auto#bf16: false#'
check "LoRA on fp32 weights (bf16: false)" 2 "nobf16\.yml:[0-9]+: adapter: LoRA on fp32 weights is not modelled" -- \
  "$TMP/nobf16.yml" --gpu rtx4090 --no-files
variant typo 's#^micro_batch_size: 2#micro_batch_size: two#'
check "a value of the wrong type" 2 "typo\.yml:31: micro_batch_size: must be an integer, not 'two'" -- \
  "$TMP/typo.yml" --gpu rtx4090 --no-files
variant zero 's#^sequence_len: 2048#sequence_len: 0#'
check "a value out of the field's range names the key and line" 2 \
  "zero\.yml:23: sequence_len: training\.seq = 0 is out of range" -- "$TMP/zero.yml" --gpu rtx4090 --no-files
variant off 's#^load_in_8bit: false#load_in_8bit: false\nxformers_attention: false#'
check "an unknown key left false is listed as not read, not refused" 0 "FITS" -- "$TMP/off.yml" --gpu rtx4090 --no-files
sed 's/^fsdp_version: 2/fsdp_version: 1/' $D/axolotl_fsdp2.yml >"$TMP/afsdp1.yml"
check "axolotl FSDP1" 2 "afsdp1\.yml:11: fsdp_version: 1: FSDP1 \(FullyShardedDataParallel\) is not modelled" -- \
  "$TMP/afsdp1.yml" --gpu h100 --gpus 8 --no-files
sed 's/^bf16: true/bf16: true\nadapter: lora/' $D/axolotl_fsdp2.yml >"$TMP/afsdplora.yml"
check "axolotl LoRA under FSDP2" 2 "afsdplora\.yml:8: adapter: LoRA under FSDP2 is not modelled" -- \
  "$TMP/afsdplora.yml" --gpu h100 --gpus 8 --no-files
sed 's/^  fsdp_version: 2/  fsdp_version: 1/' $D/accelerate_fsdp2.yaml >"$TMP/fsdp1.yaml"
check "accelerate FSDP1" 2 "fsdp1\.yaml:[0-9]+: fsdp_config\.fsdp_version: 1 \(FSDP1, FullyShardedDataParallel\) is not modelled" -- \
  "$TMP/fsdp1.yaml" --gpu h100 --set model.config=$M --no-files
sed 's/^  fsdp_state_dict_type: SHARDED_STATE_DICT/  fsdp_state_dict_type: SHARDED_STATE_DICT\n  fsdp_offload_policy: x/' \
  $D/accelerate_fsdp2.yaml >"$TMP/fsdpx.yaml"
check "accelerate: an unknown fsdp_config key" 2 "fsdpx\.yaml:14: fsdp_config\.fsdp_offload_policy: not modelled" -- \
  "$TMP/fsdpx.yaml" --gpu h100 --set model.config=$M --no-files

sed 's/^  zero3_init_flag: true/  zero3_init_flag: false/' $D/accelerate_zero3.yaml >"$TMP/noinit.yaml"
check "accelerate ZeRO-3 without zero.Init" 2 "noinit\.yaml:10: deepspeed_config\.zero3_init_flag: false with zero_stage 3" -- \
  "$TMP/noinit.yaml" --gpu a100_80g --set model.config=$M --no-files

# TRL and TrainingArguments: what is not modelled, named with its line (JSON's too)
# packing: true (packing_strategy bfd): TRL packs the data set's sequences into rows of max_length,
# training.data's bfd batching, whose lengths the config does not hold: without them exit 2
# saying how to give them; with them the packed rows, flattened four a micro-batch
sed 's/^packing: false/packing: true/' $D/trl_sft_lora.yaml >"$TMP/tpack.yaml"
check "trl packing: true without the data set's lengths" 2 "tpack\.yaml:.*training\.data\.lengths: the data set's sequence lengths that TRL's packing packs.*--set training\.data\.lengths=FILE" -- \
  "$TMP/tpack.yaml" --gpu h100 --no-files
awk 'BEGIN { for (i = 1; i <= 300; i++) print 100 + (i * 37) % 1900 }' >"$TMP/tpack_lengths.txt"
check "trl packing: true with --set training.data.lengths: TRL's bfd packing into rows of max_length (2048)" 0 \
  "packed best-fit decreasing, each cut to the row length, into [0-9]+ rows of at most 2048 tokens \(TRL's packing" -- \
  "$TMP/tpack.yaml" --gpu h100 --no-files --set training.data.lengths="$TMP/tpack_lengths.txt"
printf 'packing_strategy: wrapped\n' | cat "$TMP/tpack.yaml" - >"$TMP/twrap.yaml"
check "trl packing_strategy: wrapped: rows of max_length across sequence boundaries, the fixed-length run" 0 \
  "trl packing \(wrapped\): the tokens cut into rows of max_length \(2048 tokens\)" -- "$TMP/twrap.yaml" --gpu h100 --no-files
printf 'shuffle_dataset: true\n' | cat "$TMP/tpack.yaml" - >"$TMP/tshuf.yaml"
check "trl packing after shuffle_dataset: refused by name" 2 "tshuf\.yaml:[0-9]+: shuffle_dataset: shuffled before packing" -- \
  "$TMP/tshuf.yaml" --gpu h100 --no-files --set training.data.lengths="$TMP/tpack_lengths.txt"
# padding_free: true without packing: each micro-batch's sequences in one row under TRL's collator
# (no per-layer cu_seqlens under flash attention), the lengths as the data gives them
printf 'padding_free: true\n' | cat $D/trl_sft_lora.yaml - >"$TMP/tpf.yaml"
check "trl padding_free without the data set's lengths" 2 "training\.data\.lengths: the data set's sequence lengths, which a trainer's config does not hold" -- \
  "$TMP/tpf.yaml" --gpu h100 --no-files
check "trl padding_free with --set training.data.lengths: micro-batches of 4 flattened into one row" 0 \
  "micro-batches of 4 flattened into one row each" -- \
  "$TMP/tpf.yaml" --gpu h100 --no-files --set training.data.lengths="$TMP/tpack_lengths.txt"
sed 's/^attn_implementation: sdpa/attn_implementation: flash_attention_2/' "$TMP/tpf.yaml" >"$TMP/tpff.yaml"
"$VRSIM" "$TMP/tpff.yaml" --gpu h100 --no-files --set training.data.lengths="$TMP/tpack_lengths.txt" --alloc-trace "$TMP/tpff.csv" >/dev/null 2>&1
if [ "$(grep -c ',cu_seq_lens_[qk]$' "$TMP/tpff.csv")" = 2 ] && [ "$(grep -c position_starts "$TMP/tpff.csv")" = 0 ]; then
  ok "trl padding_free under flash attention: TRL's collator's cu_seq_lens, none made a layer"
else fail "trl padding_free under flash attention: cu_seq_lens $(grep -c ',cu_seq_lens_[qk]$' "$TMP/tpff.csv"), position_starts $(grep -c position_starts "$TMP/tpff.csv")"; fi
# attn_implementation: flex_attention: transformers' flex attention, its BlockMask over the
# flattened row's sequences (training.data, padding_free)
sed 's/^attn_implementation: sdpa/attn_implementation: flex_attention/' "$TMP/tpf.yaml" >"$TMP/tpfx.yaml"
check "trl padding_free under flex attention: the BlockMask over the row's sequences" 0 \
  "training.data under flex attention: the batch's BlockMask keeps [0-9]+ partial and [0-9]+ full blocks" -- \
  "$TMP/tpfx.yaml" --gpu h100 --no-files --no-suggest --set training.data.lengths="$TMP/tpack_lengths.txt"
printf 'pad_to_multiple_of: 64\n' | cat "$TMP/tpf.yaml" - >"$TMP/tpfm.yaml"
check "trl padding_free with pad_to_multiple_of: refused by name" 2 "tpfm\.yaml:[0-9]+: pad_to_multiple_of: the flattened row padded" -- \
  "$TMP/tpfm.yaml" --gpu h100 --no-files --set training.data.lengths="$TMP/tpack_lengths.txt"
sed 's/^use_peft: true/use_peft: true\nload_in_4bit: true/' $D/trl_sft_lora.yaml >"$TMP/tq.yaml"
check "trl QLoRA without nested quantization (TRL's default)" 2 \
  "tq\.yaml:9: load_in_4bit: NF4 without use_bnb_nested_quant .* is not modelled" -- "$TMP/tq.yaml" --gpu h100 --no-files
printf 'use_bnb_nested_quant: true\n' >>"$TMP/tq.yaml"
check "... with it: simulated" 0 "FITS" -- "$TMP/tq.yaml" --gpu h100 --no-files
printf 'beta: 0.1\n' >>"$TMP/tq.yaml"
check "trl: a DPO key (beta) in an SFT config" 2 "tq\.yaml:28: beta: not modelled: vrsim's trl reader" -- \
  "$TMP/tq.yaml" --gpu h100 --no-files
sed 's/^dtype: bfloat16/dtype: float32/' $D/trl_sft_lora.yaml >"$TMP/tfp32.yaml"
check "trl LoRA on fp32 weights" 2 "tfp32\.yaml:6: dtype: LoRA on fp32 weights is not modelled" -- \
  "$TMP/tfp32.yaml" --gpu h100 --no-files
sed 's/"optim": "adamw_torch"/"optim": "paged_adamw"/' $D/trainer_args_zero2.json >"$TMP/paged.json"
check "TrainingArguments JSON: paged_adamw (bitsandbytes' class, no OptimizerNames value), with its JSON line" 2 \
  "paged\.json:8: optim: 'paged_adamw' is not modelled" -- "$TMP/paged.json" --gpu h100 --set model.config=$M --no-files
sed 's/"torch_compile": false/"torch_compile": true/' $D/trainer_args_zero2.json >"$TMP/compile.json"
check "TrainingArguments JSON: torch_compile without regional compilation: the whole model, under DeepSpeed's ZeRO-2 refused at the key's line" 2 \
  "compile\.json:18: torch_compile: training\.compile\.scope = \"model\" \(torch\.compile of the whole model\) with strategy zero2 is not modelled" -- \
  "$TMP/compile.json" --gpu h100 --set model.config=$M --no-files
# torch_compile with gradient_checkpointing (bf16 weights, one GPU): the whole model compiled,
# each decoder layer eager and checkpointed, its SDPA taking the traced 4-D mask
sed -e 's/^dtype: float32/dtype: bfloat16/' -e 's/^gradient_checkpointing: false/gradient_checkpointing: true/' \
  "$TMP/tcompile.yaml" >"$TMP/tcckpt.yaml"
check "trl: torch_compile with gradient_checkpointing: the whole model compiled, its layers eager" 0 \
  "torch\.compile\(model\) under gradient checkpointing: every decoder layer runs eager" -- \
  "$TMP/tcckpt.yaml" --gpu h100 --no-files
# torch_compile alone (bf16 weights, no checkpointing, one GPU): TorchDynamoPlugin compiles the
# whole model, and the Trainer has set config.use_cache = False, so the model graph's SDPA takes
# create_causal_mask's 4-D mask, not captured: refused, naming the key and why
sed -e 's/^dtype: float32/dtype: bfloat16/' "$TMP/tcompile.yaml" >"$TMP/tcmodel.yaml"
check "trl: torch_compile without the launcher's regional compilation: the whole model under the Trainer's use_cache = False, refused by name" 2 \
  "tcmodel\.yaml:[0-9]+: torch_compile: training\.compile\.scope = \"model\" \(torch\.compile of the whole model\) under the HF Trainer with use_cache false is not modelled: the Trainer sets model\.config\.use_cache" -- \
  "$TMP/tcmodel.yaml" --gpu h100 --no-files
# with use_cache: true the Trainer puts True on the config: the whole model is one graph with its
# DynamicCache, as a scenario's training.compile = { scope = "model" } runs it
printf 'use_cache: true\n' | cat "$TMP/tcmodel.yaml" - >"$TMP/tcmodelc.yaml"
check "trl: torch_compile with use_cache: true: the whole model compiled, modelled" 0 \
  "torch\.compile" -- "$TMP/tcmodelc.yaml" --gpu h100 --no-files
# the Trainer's use_cache (False by default) is the model config's: a forward without
# checkpointing makes no DynamicCache, so no layer's keys and values are copied into one; with
# use_cache: true each layer's are
sed -e 's/^dtype: float32/dtype: bfloat16/' $D/trl_sft_full.yaml >"$TMP/nocache.yaml"
printf 'use_cache: true\n' | cat "$TMP/nocache.yaml" - >"$TMP/cache.yaml"
"$VRSIM" "$TMP/nocache.yaml" --gpu h100 --no-files --alloc-trace "$TMP/nocache.csv" >/dev/null 2>&1
"$VRSIM" "$TMP/cache.yaml" --gpu h100 --no-files --alloc-trace "$TMP/cache.csv" >/dev/null 2>&1
n0=$(grep -c "cache_keys\|cache_values" "$TMP/nocache.csv"); n1=$(grep -c "cache_keys\|cache_values" "$TMP/cache.csv")
"$VRSIM" "$TMP/nocache.yaml" --gpu h100 --print-scenario >"$TMP/nocache.lua" 2>/dev/null
if [ "$n0" = 0 ] && [ "$n1" -gt 0 ] && grep -q "use_cache = false" "$TMP/nocache.lua"; then
  ok "trl: the Trainer's use_cache (False by default) leaves out the KV cache's copies; use_cache: true makes them ($n1 trace events)"
else fail "trl: use_cache: cache copies $n0 without, $n1 with; scenario: $(grep -c use_cache "$TMP/nocache.lua")"; fi
check "TrainingArguments JSON without the model" 2 "trainer_args_zero2\.json:3: per_device_train_batch_size: a TrainingArguments file names no model" -- \
  $D/trainer_args_zero2.json --gpu h100 --no-files
printf '{"per_device_train_batch_size": 2,\n "per_device_train_batch_size": 4}\n' >"$TMP/dup.json"
check "TrainingArguments JSON with a key twice" 2 "dup\.json': key 'per_device_train_batch_size' appears twice" -- \
  "$TMP/dup.json" --gpu h100 --no-files
printf '{"per_device_train_batch_size": 2,\n' >"$TMP/cut.json"
check "a JSON config cut short" 2 "cut\.json': not valid JSON" -- "$TMP/cut.json" --gpu h100 --no-files

# LLaMA-Factory: what is not modelled, named with its line
sed '/^use_reentrant_gc: false/d' $D/llamafactory_qlora.yaml >"$TMP/lfre.yaml"
check "LLaMA-Factory's default reentrant checkpointing" 2 \
  "lfre\.yaml:[0-9]+: disable_gradient_checkpointing: LLaMA-Factory's default reentrant gradient checkpointing" -- \
  "$TMP/lfre.yaml" --gpu rtx4090 --no-files
# a DeepSpeed JSON the config names that is not there: the scenario's error, not the loader's
sed 's#^deepspeed: .*#deepspeed: missing_zero2.json#' $D/axolotl_full_zero2.yml >"$TMP/dsmiss.yml"
check "axolotl deepspeed: a JSON that is not there (exit 2, named, no vrsim source path)" 2 \
  "dsmiss\.yml:[0-9?]+: training\.deepspeed: config 'missing_zero2\.json' not found" -- \
  "$TMP/dsmiss.yml" --gpu h100 --gpus 4 --no-files
sed 's/^stage: sft/stage: dpo/' $D/llamafactory_qlora.yaml >"$TMP/lfdpo.yaml"
check "LLaMA-Factory stage: dpo" 2 "lfdpo\.yaml:13: stage: 'dpo' is not modelled" -- "$TMP/lfdpo.yaml" --gpu rtx4090 --no-files
# LLaMA-Factory's packing without neat_packing: rows of cutoff_len whose attention_mask is all
# ones, the fixed-length run; pt packs by default (blocks of cutoff_len), cutoff_len - 1 where
# packing: true is written (data_args.py), which the collator pads to 1024 with a padded mask
sed 's/^### method/packing: true\n### method/' $D/llamafactory_qlora.yaml >"$TMP/lfpack.yaml"
same "LLaMA-Factory sft packing: true (rows of cutoff_len, one causal sequence each)" $D/llamafactory_qlora.lua -- \
  "$TMP/lfpack.yaml" --gpu rtx4090
check "LLaMA-Factory sft packing: the note says how the rows are made and attended" 0 \
  "llamafactory packing: sequences packed whole \(greedy knapsack\) into rows padded to 1024; the attention_mask is all ones" -- \
  "$TMP/lfpack.yaml" --gpu rtx4090 --no-files --no-suggest
sed 's/^stage: sft/stage: pt/' $D/llamafactory_qlora.yaml >"$TMP/lfpt.yaml"
check "LLaMA-Factory stage: pt (packing by default: blocks of cutoff_len)" 0 \
  "llamafactory packing: the texts concatenated and cut into blocks of 1024" -- "$TMP/lfpt.yaml" --gpu rtx4090 --no-files --no-suggest
sed 's/^stage: sft/stage: pt\npacking: true/' $D/llamafactory_qlora.yaml >"$TMP/lfpt2.yaml"
check "LLaMA-Factory stage: pt with packing: true written (blocks of cutoff_len - 1, padded)" 2 \
  "lfpt2\.yaml:[0-9]+: cutoff_len: packed rows of 1023 tokens, which the collator pads to a multiple of 8" -- \
  "$TMP/lfpt2.yaml" --gpu rtx4090 --no-files
# neat_packing (sft): under sdpa the collator's (b, 1, L, L) block-diagonal bf16 mask rides with
# the batch (training.attention_mask = block_diagonal); under fa2 one row a micro-batch (the
# collator asserts it), unpadded to cutoff_len - 1 at most; outside sft LLaMA-Factory raises
sed 's/^### method/neat_packing: true\n### method/' $D/llamafactory_qlora.yaml >"$TMP/lfneat.yaml"
sed 's/attention = "sdpa",/attention = "sdpa", attention_mask = "block_diagonal",/' $D/llamafactory_qlora.lua >"$TMP/lfneat.lua"
cp -r $D/llama-3.2-1b "$TMP/" 2>/dev/null
same "LLaMA-Factory neat_packing under sdpa (rows of cutoff_len, the collator's 4-D mask)" "$TMP/lfneat.lua" -- \
  "$TMP/lfneat.yaml" --gpu rtx4090
check "LLaMA-Factory neat_packing: the note names the mask" 0 \
  "llamafactory neat_packing: sequences packed whole \(greedy knapsack\) into rows padded to 1024; the collator's \(2, 1, 1024, 1024\) block-diagonal mask" -- \
  "$TMP/lfneat.yaml" --gpu rtx4090 --no-files --no-suggest
sed 's/^### method/neat_packing: true\nflash_attn: fa2\n### method/' $D/llamafactory_qlora.yaml >"$TMP/lfneatfa.yaml"
check "LLaMA-Factory neat_packing under fa2 with two rows a micro-batch (the collator asserts one)" 2 \
  "lfneatfa\.yaml:[0-9]+: per_device_train_batch_size: 2 with neat_packing under fa2: LLaMA-Factory's collator asserts one row" -- \
  "$TMP/lfneatfa.yaml" --gpu rtx4090 --no-files
sed 's/^per_device_train_batch_size: 2/per_device_train_batch_size: 1/' "$TMP/lfneatfa.yaml" >"$TMP/lfneatfa1.yaml"
check "LLaMA-Factory neat_packing under fa2: one unpadded row of cutoff_len - 1" 0 "seq = 1023," -- \
  "$TMP/lfneatfa1.yaml" --gpu rtx4090 --print-scenario
sed 's/^stage: sft/stage: pt\nneat_packing: true/' $D/llamafactory_qlora.yaml >"$TMP/lfneatpt.yaml"
check "LLaMA-Factory neat_packing outside sft" 2 "lfneatpt\.yaml:[0-9]+: neat_packing: true outside stage sft" -- \
  "$TMP/lfneatpt.yaml" --gpu rtx4090 --no-files
sed 's/^finetuning_type: lora/finetuning_type: freeze/' $D/llamafactory_qlora.yaml >"$TMP/lffreeze.yaml"
check "LLaMA-Factory finetuning_type: freeze" 2 "lffreeze\.yaml:15: finetuning_type: 'freeze' is not modelled" -- \
  "$TMP/lffreeze.yaml" --gpu rtx4090 --no-files
sed 's/^lora_target: all/lora_target: all\nuse_galore: true/' $D/llamafactory_qlora.yaml >"$TMP/lfgalore.yaml"
check "LLaMA-Factory: a key the reader does not know (use_galore)" 2 "lfgalore\.yaml:18: use_galore: not modelled: vrsim's llamafactory reader" -- \
  "$TMP/lfgalore.yaml" --gpu rtx4090 --no-files
sed 's/^quantization_bit: 4/quantization_bit: 4\ndouble_quantization: false/' $D/llamafactory_qlora.yaml >"$TMP/lfdq.yaml"
check "LLaMA-Factory NF4 without double quantization" 2 "lfdq\.yaml:8: double_quantization: false is not modelled" -- \
  "$TMP/lfdq.yaml" --gpu rtx4090 --no-files

# its full single-device config as it is: bitsandbytes' PagedAdamW8bit stepped in backward
same_paged "torchtune bitsandbytes.optim.PagedAdamW8bit with optimizer_in_bwd: True" paged_adamw_8bit \
  $D/torchtune_1B_full_single_device.lua -- $D/torchtune_1B_full_single_device.yaml --gpu h100

# torchtune: what is not modelled, named with its line
sed 's/^  _component_: bitsandbytes.optim.PagedAdamW8bit/  _component_: bitsandbytes.optim.PagedAdEMAMix8bit/' \
  $D/torchtune_1B_full_single_device.yaml >"$TMP/ttademamix.yaml"
check "torchtune: bitsandbytes' PagedAdEMAMix8bit" 2 \
  "ttademamix\.yaml:32: optimizer\._component_: 'bitsandbytes\.optim\.PagedAdEMAMix8bit' is not modelled" -- \
  "$TMP/ttademamix.yaml" --gpu h100 --no-files
sed 's/^  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss/  _component_: torchtune.modules.loss.LinearCrossEntropyLoss/' \
  $D/torchtune_1B_lora_single_device.yaml >"$TMP/ttlin.yaml"
check "torchtune 0.7's LinearCrossEntropyLoss" 2 "ttlin\.yaml:[0-9]+: loss\._component_: 'torchtune\.modules\.loss\.LinearCrossEntropyLoss' is not modelled" -- \
  "$TMP/ttlin.yaml" --gpu rtx4090 --no-files
sed 's/^  _component_: torchtune.models.llama3_2.lora_llama3_2_1b/  _component_: torchtune.models.llama3_2.qlora_llama3_2_1b/' \
  $D/torchtune_1B_lora_single_device.yaml >"$TMP/ttq.yaml"
check "torchtune QLoRA (torchao's NF4Tensor) eager" 2 "ttq\.yaml:[0-9]+: model\._component_: QLoRA \(torchao's NF4Tensor base weights\) without compile: True is not modelled" -- \
  "$TMP/ttq.yaml" --gpu rtx4090 --no-files
sed 's/^compile: False/compile: True/' "$TMP/ttq.yaml" >"$TMP/ttqc.yaml"
same "torchtune QLoRA compiled: quant = torchao_nf4 in compiled layers" $D/torchtune_1B_qlora_compile.lua -- \
  "$TMP/ttqc.yaml" --gpu rtx4090
sed 's/^  packed: False/  packed: True/' $D/torchtune_1B_lora_single_device.yaml >"$TMP/ttpack.yaml"
same "torchtune packed dataset: packs of max_seq_len, FlexAttention over their BlockMask" \
  $D/torchtune_1B_lora_packed.lua -- "$TMP/ttpack.yaml" --gpu rtx4090
# with the data set's lengths: PackedDataset's packs (in order; the instruct data sets' tokenizer
# truncates a sequence to max_seq_len (844 of these 2500 are longer), and one that does not fit
# the open pack starts the next)
check "torchtune packed dataset with the data set's lengths" 0 \
  "2500 sequences \([0-9]+ tokens, 844 sequences truncated to 2048 by the tokenizer\) packed in order into [0-9]+ packs of 2048 tokens" -- \
  "$TMP/ttpack.yaml" --gpu rtx4090 --set training.data.lengths="$TMP/lens.txt" --no-files --no-suggest
sed 's/^  packed: False/  packed: True/; s/^compile: False/compile: True/' $D/torchtune_1B_lora_single_device.yaml >"$TMP/ttpackc.yaml"
check "torchtune packed dataset with compile: True: two graphs a layer around FlexAttention" 0 \
  "each decoder layer is two graphs \(its FlexAttention call, under torch.compiler.disable" -- \
  "$TMP/ttpackc.yaml" --gpu rtx4090 --no-files --no-suggest
same "torchtune LoRA on 2 GPUs (lora_finetune_distributed: FSDP2 on each layer and the root)" \
  $D/torchtune_1B_lora_distributed.lua -- $D/torchtune_1B_lora_single_device.yaml --gpu h100 --gpus 2
# its QLoRA builders shard torchao's NF4Tensor, which the scenario's check refuses by name
check "torchtune QLoRA on 2 GPUs" 2 "torchao_nf4.? under strategy fsdp2 is not modelled" -- \
  "$TMP/ttqc.yaml" --gpu h100 --gpus 2 --no-files
check "torchtune's distributed config on one GPU: the single-device recipe, its FSDP keys said not read" 0 \
  "single-device recipe \(one GPU\), which does not read fsdp_cpu_offload, fsdp_reshard_after_forward" -- \
  $D/torchtune_1B_full_distributed.yaml --gpu h100 --no-files
sed 's/^fsdp_reshard_after_forward: False/fsdp_reshard_after_forward: False\ncustom_sharded_layers: [tok_embeddings, output]/' \
  $D/torchtune_1B_full_distributed.yaml >"$TMP/ttcsl.yaml"
check "torchtune custom_sharded_layers: units of their own (zero.units), refused on the 1B's tied head" 2 \
  "training.zero.units: 'model.embed_tokens' shares its weight with another module \(tied embeddings\)" -- \
  "$TMP/ttcsl.yaml" --gpu h100 --gpus 4 --no-files
sed 's/^fsdp_reshard_after_forward: False/fsdp_reshard_after_forward: False\ntensor_parallel_dim: 2/' \
  $D/torchtune_1B_full_distributed.yaml >"$TMP/tttp.yaml"
check "torchtune tensor_parallel_dim" 2 "tttp\.yaml:46: tensor_parallel_dim: torchtune's tensor parallelism" -- \
  "$TMP/tttp.yaml" --gpu h100 --gpus 4 --no-files
check "torchtune notes: torchtune's own decoder, the keys not read" 0 \
  "lora_llama3_2_1b simulated as torchtune's own TransformerDecoder.*keys not read.*metric_logger.*profiler" -- \
  $D/torchtune_1B_lora_single_device.yaml --gpu rtx4090 --no-files

# a Qwen2.5 builder: torchtune's own decoder too (model.code), its chunked loss not called the
# transformers model's
sed 's/torchtune.models.llama3_2.lora_llama3_2_1b/torchtune.models.qwen2_5.lora_qwen2_5_0_5b/' \
  $D/torchtune_1B_lora_single_device.yaml >"$TMP/ttq25.yaml"
"$VRSIM" "$TMP/ttq25.yaml" --gpu rtx4090 --set model.config=scenarios/configs/qwen2.5-0.5b.json --no-files >"$TMP/ttq25.out" 2>&1
if grep -q "lora_qwen2_5_0_5b simulated as torchtune's own TransformerDecoder" "$TMP/ttq25.out" \
   && ! grep -q "on the transformers model\|hub_kernels" "$TMP/ttq25.out"; then
  ok "torchtune qwen2_5 builder: torchtune's own decoder, no transformers-model or hub-kernel note"
else fail "torchtune qwen2_5 builder" "$(grep -i notes "$TMP/ttq25.out" | head -c 600)"; fi
# torchtune's construction order, the allocation order of one device's parameters: the RoPE
# cache first, every decoder layer, then the embedding, the output projection and the final norm
# (the H100 trace fulltrace_gen17-tt-8b-l4-b2-s4096: its first segments, 2 and 20 MiB, then the
# layers', the two 1002 MiB ones after them)
"$VRSIM" $D/torchtune_1B_full_single_device.yaml --gpu h100 --no-files --alloc-trace "$TMP/ttorder.csv" >/dev/null 2>&1
order=$(awk -F, '$3 == "alloc" && $7 ~ /^(rope\.cache|construct )/ { sub(/construct /, "", $7); sub(/\.layers\.[0-9]+\..*/, ".layers", $7); print $7 }' \
        "$TMP/ttorder.csv" | uniq | tr '\n' ' ')
if [ "$order" = "rope.cache model.layers model.embed_tokens model.norm " ]; then
  ok "torchtune: parameters allocated in its construction order (RoPE cache, layers, embedding, norm; the tied head has no weight)"
else fail "torchtune construction order: '$order'"; fi
# training.torchtune: the releases modelled, and read only with torchtune's own decoder
check "training.torchtune 0.3.0" 2 "training\.torchtune = \"0\.3\.0\": the releases modelled are 0\.4\.0 to 0\.6\.1" -- \
  $D/torchtune_1B_full_single_device.yaml --gpu h100 --set training.torchtune=0.3.0 --no-files
check "training.torchtune without model.code torchtune: a note" 0 \
  "training\.torchtune = 0\.4\.0 has no effect on this run: model\.code is not torchtune" -- \
  scenarios/llama7b_h200.lua --set training.torchtune=0.4.0 --no-files
# model.code = "torchtune" (torchtune's own decoder; op by op against the oracle's captures
# llama3_8b_l2_bf16_torchtune and llama2_7b_l2_bf16_torchtune): what it is not modelled with
check "model.code torchtune on a Phi-3 model" 2 \
  "phi3_mini_lora_4090\.lua:[0-9]+: model\.code = \"torchtune\" with the family phi3 .* is not modelled" -- \
  scenarios/phi3_mini_lora_4090.lua --set model.code=torchtune --no-files
# the rotation's torch.stack along the new last dim: two direct copies into the interleaved
# output, priced as strided copies (torch.profiler, validation/results/profile_gen19_h100.jsonl:
# 2 launches a stack), not the batched cat kernel
"$VRSIM" scenarios/llama7b_h200.lua --set model.code=torchtune --set model.layers=1 --out "$TMP/ttout" >/dev/null 2>&1
if python3 - "$TMP/ttout/trace.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); ev = d["traceEvents"] if isinstance(d, dict) else d
st = [e for e in ev if e.get("ph") == "X" and e["name"].endswith("_rope.stack")]
assert st and all(e["args"].get("kind") == "strided" and e["args"].get("kernels") == 2 for e in st), st[:2]
PY
then ok "model.code torchtune: each RoPE stack is two strided copies"; else fail "model.code torchtune: the RoPE stack's kind and launches"; fi
check "model.code torchtune under tensor parallelism" 2 \
  "model\.code = \"torchtune\" with tensor, context or pipeline parallelism is not modelled" -- \
  scenarios/llama3_70b_tp8.lua --set model.code=torchtune --no-files

# torchtitan: what is not modelled, named with its key and line; the mesh's refusals by the TOML key
T=$D/torchtitan_llama3_8b.toml
tvariant() { sed "$2" $T >"$TMP/$1.toml"; }
# float8 training (model.converters): the mid-2025 spelling ([float8], training.compile) of
# torchtitan's Llama 3.1 8B H200 benchmark, and the 238fa99 spelling ([quantize.linear.float8],
# [compile]) of the same run, against the scenario by hand
F8=$D/torchtitan_llama3_8b_float8.toml
same "torchtitan float8 (converter \"float8\", [float8], training.compile): training.float8 tensorwise with the float8 all-gather" \
  $D/torchtitan_llama3_8b_float8.lua -- $F8 --gpu h200 --gpus 32
check "... the converter's reading, precompute and force_recompute noted" 0 \
  "model\.converters 'float8' \(\[float8\]\): training\.float8 = \{ recipe = \"tensorwise\", fsdp_float8_all_gather = true \}.*" -- \
  $F8 --gpu h200 --gpus 32 --no-files
for want in "float8\.precompute_float8_dynamic_scale_for_fsdp: vrsim prices the shards' cast to float8 before each all-gather, not the amaxes" \
            "float8\.force_recompute_fp8_weight_in_bwd: torchao's Float8LinearConfig says it \"is deprecated and currently has no effect\"" \
            "torchtitan compile: each TransformerBlock compiled \(training\.compile\) and the loss_fn" \
            "training\.compile is torchtitan's spelling before 238fa99 .* --set attention=flash --set model\.repeat_kv=true runs it as that torchtitan did"; do
  grep -Eq -- "$want" "$TMP/out" || fail "torchtitan float8 notes: the output does not say /$want/"
done
# the older torchtitan's attention, as the note gives it: SDPA's flash kernel on every head, the
# step tests/data/published_throughput.tsv's tt-l31-8b-compile-f8-h200x32 row holds to the benchmark
check "torchtitan's pre-238fa99 attention through the note's --set: the published row's run" 0 "" -- \
  $F8 --gpu h200 --gpus 32 --set attention=flash --set model.repeat_kv=true --set hardware.network=ib_ndr \
  --json --no-files
"$VRSIM" scenarios/llama70b_fsdp2_16x8_h100.lua --json --no-files $(grep '^tt-l31-8b-compile-f8-h200x32' \
  "$D/../published_throughput.tsv" | cut -f5 | sed 's/[^ ]*/--set &/g') >"$TMP/f8row.json" 2>"$TMP/f8row.err" || fail "the published row does not run"
python3 - "$TMP/out" "$TMP/f8row.json" <<'PY' || fail "the config as the older torchtitan ran it differs from the published row's run"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("step_time_ms", "peak_reserved_bytes"):
    assert abs(a[k] / b[k] - 1) < 1e-9, (k, a[k], b[k])
PY
tvariant f8new 's/^local_batch_size = 1/local_batch_size = 2/; /^\[compile\]/,/^\[/ s/^enable = false/enable = true/; s/^hf_assets_path = .*/&\nconverters = ["quantize.linear.float8"]/; s/^enable_fsdp_float8_all_gather = false/enable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true/'
same "torchtitan float8 (converter \"quantize.linear.float8\", [quantize.linear.float8], [compile]): the same run" \
  $D/torchtitan_llama3_8b_float8.lua -- "$TMP/f8new.toml" --gpu h200 --gpus 32
sed 's/^precompute_float8_dynamic_scale_for_fsdp = true//' "$TMP/f8new.toml" >"$TMP/f8nopre.toml"
check "torchtitan float8 all-gather without precompute: the per-weight amax all-reduces named as not priced" 0 \
  "enable_fsdp_float8_all_gather: vrsim prices the shards' cast to float8 before each all-gather, not the amax of each shard and its all-reduce" -- \
  "$TMP/f8nopre.toml" --gpu h200 --gpus 32 --no-files
# what torchtitan refuses or vrsim does not model, by key and line
sed 's/^force_recompute_fp8_weight_in_bwd = true/&\nemulate = true/' $F8 >"$TMP/f8em.toml"
check "torchtitan float8.emulate" 2 "f8em\.toml:68: float8\.emulate: torchao's emulated float8 GEMMs .* not modelled" -- \
  "$TMP/f8em.toml" --gpu h200 --gpus 32 --no-files
for cv in mx quantize.linear.mx; do
  sed "s/^converters = \[\"float8\"\]/converters = [\"$cv\"]/" $F8 >"$TMP/f8mx.toml"
  check "torchtitan model.converters $cv" 2 "f8mx\.toml:27: model\.converters: '$cv': torchao's MX \(mxfp8\) training .* not modelled" -- \
    "$TMP/f8mx.toml" --gpu h200 --gpus 32 --no-files
done
sed 's/^converters = \["float8"\]/converters = ["quantize.grouped_mm.float8"]/' $F8 >"$TMP/f8gmm.toml"
check "torchtitan model.converters quantize.grouped_mm.float8" 2 \
  "f8gmm\.toml:27: model\.converters: 'quantize\.grouped_mm\.float8': float8 grouped GEMMs of the MoE experts .* not modelled" -- \
  "$TMP/f8gmm.toml" --gpu h200 --gpus 32 --no-files
sed 's/^filter_fqns = \["output"\]/&\nrecipe_name = "rowwise"/; s/^force_recompute_fp8_weight_in_bwd = true/force_recompute_fp8_weight_in_bwd = false/' $F8 >"$TMP/f8rw.toml"
check "torchtitan float8 recipe_name rowwise with enable_fsdp_float8_all_gather: torchtitan's assertion" 2 \
  "f8rw\.toml:65: float8\.enable_fsdp_float8_all_gather: torchtitan asserts .*together with .float8_config\.recipe_name. is not supported" -- \
  "$TMP/f8rw.toml" --gpu h200 --gpus 32 --no-files
sed 's/^enable_fsdp_float8_all_gather = true/enable_fsdp_float8_all_gather = false/' "$TMP/f8rw.toml" >"$TMP/f8rw2.toml"
check "... rowwise alone: training.float8 rowwise" 0 "training\.float8 = \{ recipe = \"rowwise\", fsdp_float8_all_gather = false \}" -- \
  "$TMP/f8rw2.toml" --gpu h200 --gpus 32 --no-files
sed '/^filter_fqns = \["output"\]/d' $F8 >"$TMP/f8nof.toml"
check "torchtitan float8 without filter_fqns: the output layer converted, refused" 2 \
  "f8nof\.toml:27: model\.converters: 'float8' converts the output layer \(128256 x 4096, both divisible by 16\)" -- \
  "$TMP/f8nof.toml" --gpu h200 --gpus 32 --no-files
sed 's/^filter_fqns = \["output"\]/filter_fqns = ["output", "attention.wq"]/' $F8 >"$TMP/f8fq.toml"
check "torchtitan float8 filter_fqns of a decoder layer's Linear" 2 \
  "f8fq\.toml:68: float8\.filter_fqns: 'attention\.wq' keeps layers\.0\.attention\.wq in high precision" -- \
  "$TMP/f8fq.toml" --gpu h200 --gpus 32 --no-files
check "torchtitan float8 below sm89: refused at the converter's key and line" 2 \
  "float8\.toml:27: model\.converters: 'float8': training\.float8 on NVIDIA A100.*Failed to swap to Float8Linear because float8 is only supported on SM89 or later" -- \
  $F8 --gpu a100_80g --gpus 32 --no-files
sed 's/^precompute_float8_dynamic_scale_for_fsdp = true/&\nforce_recompute_fp8_weight_in_bwd = true/' "$TMP/f8new.toml" >"$TMP/f8newfr.toml"
check "torchtitan quantize.linear.float8.force_recompute_fp8_weight_in_bwd: not a key of 238fa99" 2 \
  "f8newfr\.toml:63: quantize\.linear\.float8\.force_recompute_fp8_weight_in_bwd: not a key" -- \
  "$TMP/f8newfr.toml" --gpu h200 --gpus 32 --no-files
printf '\n[float8]\nfilter_fqns = ["output"]\n' | cat "$TMP/f8new.toml" - >"$TMP/f8both.toml"
check "torchtitan [float8] beside converter quantize.linear.float8" 2 "f8both\.toml:69: float8: the table of torchtitan's older converter" -- \
  "$TMP/f8both.toml" --gpu h200 --gpus 32 --no-files
sed 's/^tensor_parallel_degree = 1/tensor_parallel_degree = 2/' "$TMP/f8new.toml" >"$TMP/f8tp.toml"
check "torchtitan quantize.linear.float8 under TP (238fa99's apply_tp runs the plain styles)" 2 \
  "f8tp\.toml:22: model\.converters: 'quantize\.linear\.float8' with tensor_parallel_degree 2: .*only for a converter named \"float8\"" -- \
  "$TMP/f8tp.toml" --gpu h200 --gpus 32 --no-files
printf '\n[compile]\nenable = true\n' | cat $F8 - >"$TMP/f8c2.toml"
check "torchtitan training.compile beside compile.enable" 2 "f8c2\.toml:42: training\.compile: torchtitan's older spelling of compile\.enable" -- \
  "$TMP/f8c2.toml" --gpu h200 --gpus 32 --no-files
tvariant cp 's/^context_parallel_degree = 1/context_parallel_degree = 2/'
check "torchtitan context parallelism reaches the mesh (cp 2 under torchtitan's fp32 parameters with bf16 compute)" 0 \
  "device mesh \[pp 1, dp_replicate 1, dp_shard 4, cp 2, tp 1\].*context parallelism over 2 ranks" -- \
  "$TMP/cp.toml" --gpu h100 --gpus 8 --no-files
tvariant ep 's/^context_parallel_degree = 1/&\nexpert_parallel_degree = 2/'
check "torchtitan expert parallelism reaches the mesh (refused there on a dense model)" 2 "training\.parallel\.ep = 2: the model has no mixture-of-experts layers" -- \
  "$TMP/ep.toml" --gpu h100 --gpus 8 --no-files
tvariant atp 's/^context_parallel_degree = 1/&\nenable_async_tensor_parallel = true/; s/^tensor_parallel_degree = 1/tensor_parallel_degree = 2/'
check "torchtitan async tensor parallelism without compile: refused as torchtitan's maybe_enable_async_tp does" 2 \
  "atp\.toml:45: parallelism\.enable_async_tensor_parallel: async TP requires 'model' in --compile\.components and --compile\.enable" -- \
  "$TMP/atp.toml" --gpu h100 --gpus 8 --no-files
tvariant atp1 's/^context_parallel_degree = 1/&\nenable_async_tensor_parallel = true/'
check "torchtitan async tensor parallelism with tensor_parallel_degree = 1: no effect, said" 0 \
  "enable_async_tensor_parallel has no effect with tensor_parallel_degree = 1" -- \
  "$TMP/atp1.toml" --gpu h100 --gpus 8 --no-files
tvariant comp '/^\[compile\]/,/^\[/ s/^enable = false/enable = true/'
check "torchtitan compile.enable beside per-op selective checkpointing: each block compiled with its checkpoint, the policy's saved set" 0 \
  "torch\.compile: the partitioner saves .*self_attn\.q_proj.*self_attn\.v_proj.*mlp\.gate_proj" -- "$TMP/comp.toml" --gpu h100 --gpus 8 --no-files
tvariant tc 's/^mode = "selective"/mode = "full"/; /^\[compile\]/,/^\[/ s/^enable = false/enable = true/'
same "torchtitan compile.enable (components model and loss): training.compile and compile_loss" \
  $D/torchtitan_llama3_8b_compile.lua -- "$TMP/tc.toml" --gpu h100 --gpus 8
check "... noted" 0 "torchtitan compile: each TransformerBlock compiled \(training\.compile\) and the loss_fn \(training\.compile_loss\)" -- \
  "$TMP/tc.toml" --gpu h100 --gpus 8 --print-scenario
sed 's/^components = \["model", "loss"\]/components = ["loss"]/' "$TMP/tc.toml" >"$TMP/tcl.toml"
check "torchtitan compile.components = [\"loss\"]: the loss alone compiled" 0 \
  "compile_loss = true" -- "$TMP/tcl.toml" --gpu h100 --gpus 8 --print-scenario
if grep -q "compile = true" "$TMP/out"; then fail "torchtitan compile.components = [\"loss\"]: the model compiled too"; fi
sed 's/^components = \["model", "loss"\]/components = ["model"]/' "$TMP/tc.toml" >"$TMP/tcm.toml"
check "torchtitan compile.components = [\"model\"]: the blocks alone compiled" 0 \
  "compile = true" -- "$TMP/tcm.toml" --gpu h100 --gpus 8 --print-scenario
if grep -q "compile_loss" "$TMP/out"; then fail "torchtitan compile.components = [\"model\"]: the loss compiled too"; fi
sed 's/^components = \["model", "loss"\]/&\nbackend = "aot_eager"/' "$TMP/tc.toml" >"$TMP/tcb.toml"
check "torchtitan compile.backend other than inductor" 2 "tcb\.toml:54: compile\.backend: 'aot_eager' is not modelled" -- \
  "$TMP/tcb.toml" --gpu h100 --gpus 8 --no-files
sed 's/^components = \["model", "loss"\]/components = ["model", "optimizer"]/' "$TMP/tc.toml" >"$TMP/tco.toml"
check "torchtitan compile.components names what torchtitan does not compile" 2 \
  "tco\.toml:53: compile\.components: 'optimizer' is not a component" -- "$TMP/tco.toml" --gpu h100 --gpus 8 --no-files
# the 2-D config (bf16 parameters, tensor parallelism 2, full checkpointing) compiled
printf '\n[compile]\nenable = true\ncomponents = ["model", "loss"]\n' | cat $D/torchtitan_llama3_8b_tp.toml - >"$TMP/tctp.toml"
check "torchtitan compiled loss under tensor parallelism (loss parallel): refused" 2 \
  "tctp\.toml:28: compile\.components: 'loss' under tensor parallelism" -- "$TMP/tctp.toml" --gpu h100 --gpus 8 --no-files
sed 's/^components = \["model", "loss"\]/components = ["model"]/' "$TMP/tctp.toml" >"$TMP/tctpm.toml"
check "... the blocks alone compiled under tensor parallelism" 0 "torch\.compile: the partitioner saves" -- \
  "$TMP/tctpm.toml" --gpu h100 --gpus 8 --no-files
sed 's/^tensor_parallel_degree = 2/&\nenable_async_tensor_parallel = true/' "$TMP/tctpm.toml" >"$TMP/tcatp.toml"
check "torchtitan async tensor parallelism with the blocks compiled" 0 "async tensor parallelism over 2 ranks" -- \
  "$TMP/tcatp.toml" --gpu h100 --gpus 8 --no-files
sed 's/^components = \["model"\]/components = ["loss"]/' "$TMP/tcatp.toml" >"$TMP/tcatpl.toml"
check "torchtitan async tensor parallelism with only the loss compiled: refused as torchtitan does" 2 \
  "tcatpl\.toml:22: parallelism\.enable_async_tensor_parallel: async TP requires 'model' in --compile\.components" -- \
  "$TMP/tcatpl.toml" --gpu h100 --gpus 8 --no-files
tvariant mb 's/^mode = "selective"/mode = "memory_budget"/'
check "torchtitan activation_checkpoint.mode memory_budget" 2 "mb\.toml:56: activation_checkpoint\.mode: 'memory_budget' is not modelled" -- \
  "$TMP/mb.toml" --gpu h100 --gpus 8 --no-files
tvariant flex 's/^flavor = "8B"/flavor = "8B_flex"/'
same "torchtitan flavor 8B_flex: FlexAttention (block_causal) over the text stream's rows" \
  $D/torchtitan_llama3_8b_flex.lua -- "$TMP/flex.toml" --gpu h100 --gpus 8
tvariant varlen 's/^flavor = "8B"/flavor = "8B_varlen"/'
check "torchtitan flavor with varlen attention" 2 "varlen\.toml:20: model\.flavor: '8B_varlen': the varlen attention flavors" -- \
  "$TMP/varlen.toml" --gpu h100 --gpus 8 --no-files
tvariant qwen 's/^name = "llama3"/name = "qwen3"/'
check "torchtitan model other than llama3: --set model.config" 2 "qwen\.toml:19: model\.name: 'qwen3'.*--set model\.config=PATH" -- \
  "$TMP/qwen.toml" --gpu h100 --gpus 8 --no-files
check "... which stands in for the model" 0 "FITS" -- "$TMP/qwen.toml" --gpu h100 --gpus 8 --set model.config=$M --no-files
tvariant sel3 's/^selective_ac_option = "op"/selective_ac_option = "3"/'
check "torchtitan every 3rd layer of 32 (not the count vrsim checkpoints)" 2 \
  "sel3\.toml:57: activation_checkpoint\.selective_ac_option: every 3 layers" -- "$TMP/sel3.toml" --gpu h100 --gpus 8 --no-files
tvariant sel2 's/^selective_ac_option = "op"/selective_ac_option = "2"/'
check "torchtitan every 2nd layer of 32" 0 "checkpoints decoder layers 2, 4, \.\.\." -- "$TMP/sel2.toml" --gpu h100 --gpus 8 --no-files
tvariant val '64s/false/true/'
check "torchtitan validation.enable" 2 "val\.toml:64: validation\.enable: validation steps" -- "$TMP/val.toml" --gpu h100 --gpus 8 --no-files
tvariant unk 's/^seq_len = 8192/&\nmystery_knob = 3/'
check "torchtitan: a key the reader does not know" 2 "unk\.toml:35: training\.mystery_knob: not modelled: vrsim's torchtitan reader" -- \
  "$TMP/unk.toml" --gpu h100 --gpus 8 --no-files
check "torchtitan: the degrees must fill --gpus" 2 "torchtitan_llama3_8b_tp\.toml:20: parallelism\.data_parallel_shard_degree: -1 \(the rest\).* do not divide the 3 GPUs" -- \
  $D/torchtitan_llama3_8b_tp.toml --gpu h100 --gpus 3 --no-files
check "torchtitan notes: the keys not read, the flavor's model" 0 \
  "llama3 8B simulated as the transformers Llama model.*keys not read.*checkpoint, compile\.components.*optimizer\.lr.*quantize \(model\.converters names no converter\)" -- \
  $T --gpu h100 --gpus 8 --no-files
sed 's/^dtype = "bfloat16"/dtype = "float32"/' $D/torchtitan_llama3_8b_tp.toml >"$TMP/tpmp.toml"
check "torchtitan TP with FSDP2 mixed precision (fp32 shards): runs as mp_fp32" 0 \
  "mp_fp32, .*fsdp2 over 4 GPUs, tensor parallel over 2 GPUs" -- "$TMP/tpmp.toml" --gpu h100 --gpus 8 --no-files
P=$(mktemp ./.vrsim-recipe-XXXXXX) && mv "$P" "$P.lua" && KEEP="$P.lua"
if "$VRSIM" $D/torchtitan_llama3_8b_pp.toml --gpu h100 --gpus 8 --print-scenario >"$P.lua" 2>"$TMP/p.err"; then
  same "torchtitan --print-scenario (a pipeline) runs as a scenario with the config's figures" "$P.lua" -- \
    $D/torchtitan_llama3_8b_pp.toml --gpu h100 --gpus 8
else
  fail "torchtitan --print-scenario: exit $?" "$(cat "$TMP/p.err")"
fi
rm -f "$P.lua"

# diffusers: the launch command's flags, what is not modelled named with its line
L=$D/diffusers_lora_sdxl.sh
check "diffusers notes: validation images and the model path said, the flags not read listed" 0 \
  "validation images .* are not simulated.*pretrained_model_name_or_path is not read.*keys not read.*--learning_rate.*--seed" -- \
  $L --gpu rtx4090 --no-files
sed 's/^  --gradient_checkpointing \\$/  --gradient_checkpointing --enable_xformers_memory_efficient_attention \\/' $L >"$TMP/dx.sh"
check "diffusers xformers" 2 "dx\.sh:12: --enable_xformers_memory_efficient_attention: xformers' attention kernels are not modelled" -- \
  "$TMP/dx.sh" --gpu rtx4090 --no-files
sed 's/^  --seed=42 \\$/  --seed=42 --train_text_encoder \\/' $L >"$TMP/dte.sh"
check "diffusers LoRA on the text encoders" 2 "dte\.sh:13: --train_text_encoder: LoRA on the text encoders is not modelled" -- \
  "$TMP/dte.sh" --gpu rtx4090 --no-files
sed 's/^  --seed=42 \\$/  --seed=42 --gradient_accumulation_steps 4 \\/' $L >"$TMP/dga.sh"
check "diffusers gradient accumulation (not modelled for SDXL)" 2 "dga\.sh:13: --gradient_accumulation_steps: gradient accumulation" -- \
  "$TMP/dga.sh" --gpu rtx4090 --no-files
sed 's/^  --seed=42 \\$/  --seed=42 --mystery_flag 3 \\/' $L >"$TMP/dunk.sh"
check "diffusers: a flag the reader does not know" 2 "dunk\.sh:13: --mystery_flag: not modelled: vrsim's diffusers reader" -- \
  "$TMP/dunk.sh" --gpu rtx4090 --no-files
sed 's/^  --mixed_precision="bf16" \\$/  --mixed_precision="fp16" \\/' $L >"$TMP/dfp16.sh"
check "diffusers fp16: the adapters in fp32 (lora_fp16)" 0 "lora_fp16" -- "$TMP/dfp16.sh" --gpu rtx4090 --no-files --print-scenario
sed 's/^  --mixed_precision="bf16" \\$/  \\/' $L >"$TMP/dnomp.sh"
check "diffusers without --mixed_precision: fp32 LoRA refused, accelerate's default config said" 2 \
  "dnomp\.sh:[0-9]+: --mixed_precision: LoRA on an fp32 UNet is not modelled" -- "$TMP/dnomp.sh" --gpu rtx4090 --no-files
printf 'accelerate launch train_dreambooth_lora_sdxl.py --rank 4\n' >"$TMP/db.sh"
check "diffusers dreambooth (not read yet)" 2 "db\.sh:1: \(script\): 'train_dreambooth_lora_sdxl\.py' is not a script vrsim reads" -- \
  "$TMP/db.sh" --gpu h100 --no-files
printf 'accelerate launch train_text_to_image_lora_sdxl.py --rank $RANK\n' >"$TMP/dvar.sh"
check "a command with a shell variable" 2 "dvar\.sh:1: '[$]': variables and command substitution are not read" -- "$TMP/dvar.sh" --gpu h100 --no-files
printf 'accelerate launch train_text_to_image_lora_sdxl.py --rank 4 && echo done\n' >"$TMP/dand.sh"
check "two commands" 2 "dand\.sh:1: '&': one command per file" -- "$TMP/dand.sh" --gpu h100 --no-files
printf 'accelerate launch train_text_to_image_lora_sdxl.py --rank "4\n' >"$TMP/dq.sh"
check "an unclosed quote" 2 "dq\.sh:1: a quote .* that is not closed" -- "$TMP/dq.sh" --gpu h100 --no-files
printf 'python train_text_to_image_lora_sdxl.py --rank 4 --rank 8\n' >"$TMP/dtw.sh"
check "a flag twice" 2 "dtw\.sh:1: --rank given twice" -- "$TMP/dtw.sh" --gpu h100 --no-files
printf 'python train_text_to_image_lora_sdxl.py --mixed_precision bf16 --gradient_checkpointing yes\n' >"$TMP/dst.sh"
check "a store_true flag given a value" 2 "dst\.sh:1: --gradient_checkpointing: takes no value" -- "$TMP/dst.sh" --gpu h100 --no-files

# ---- hostile TOML (tomlc17 behind sim/tomlin.c) --------------------------------------------------
printf '[training]\nseq_len = 1\nseq_len = 2\n' >"$TMP/tdup.toml"
check "TOML: a key twice" 2 "tdup\.toml:3: not valid TOML" -- "$TMP/tdup.toml" --gpu h100 --no-files
printf '[training]\nseq_len = [1,\n' >"$TMP/tcut.toml"
check "TOML cut short" 2 "tcut\.toml:[23]: not valid TOML" -- "$TMP/tcut.toml" --gpu h100 --no-files
printf '[job]\nx = %s1%s\n' "$(printf '%.0s[' $(seq 40))" "$(printf '%.0s]' $(seq 40))" >"$TMP/tdeep.toml"
check "TOML: brackets 40 deep" 2 "tdeep\.toml:2: not valid TOML" -- "$TMP/tdeep.toml" --gpu h100 --no-files
printf '[job]\nwhen = 1979-05-27T07:32:00Z\n' >"$TMP/tdate.toml"
check "TOML: a date" 2 "tdate\.toml:2: a date or time value" -- "$TMP/tdate.toml" --gpu h100 --no-files
printf '[job]\ndescription = "a"\n\000[training]\n' >"$TMP/tnul.toml"
check "TOML: a NUL byte" 2 "tnul\.toml:3: a NUL byte" -- "$TMP/tnul.toml" --gpu h100 --no-files
python3 -c 'import sys
for t in range(101):
    sys.stdout.write("[t%d]\n" % t + "".join("k%d = %d\n" % (i, i) for i in range(1000)))' >"$TMP/tmany.toml" 2>/dev/null &&
  check "TOML: more than 100000 values" 2 "tmany\.toml:[0-9]+: more than 100000 values: refused" -- "$TMP/tmany.toml" --gpu h100 --no-files
if truncate -s 40M "$TMP/big.toml" 2>/dev/null; then
  check "a 40 MiB TOML" 2 "big\.toml' is larger than 32 MiB: refused" -- "$TMP/big.toml" --gpu h100 --no-files
fi

# ---- hostile YAML --------------------------------------------------------------------------------
H=tests/hostile
check "nesting 200 deep" 2 "yaml_deep\.yaml:66: nested deeper than 64 levels: refused" -- $H/yaml_deep.yaml --gpu h100 --no-files
check "an alias bomb (billion laughs)" 2 "yaml_alias_bomb\.yaml:3: an alias \(\*a\): aliases and merge keys are not read" -- \
  $H/yaml_alias_bomb.yaml --gpu h100 --no-files
check "a merge key" 2 "yaml_merge\.yaml:5: a merge key" -- $H/yaml_merge.yaml --gpu h100 --no-files
check "a key twice" 2 "yaml_dup_key\.yaml:5: key 'micro_batch_size' appears twice \(first on line 3\)" -- \
  $H/yaml_dup_key.yaml --gpu h100 --no-files
check "a Python object tag" 2 "yaml_tag\.yaml:2: tag 'tag:yaml.org,2002:python/object/apply:os.system' is not a core type" -- \
  $H/yaml_tag.yaml --gpu h100 --no-files
printf 'base_model: [a, b\nlora_r: 8\n' >"$TMP/syntax.yaml"
check "not valid YAML: libyaml's message with its line" 2 "syntax\.yaml:2: not valid YAML" -- "$TMP/syntax.yaml" --gpu h100 --no-files
printf -- '- a\n- b\n' >"$TMP/list.yaml"
check "a document that is a list" 2 "list\.yaml:1: the document is not a mapping" -- "$TMP/list.yaml" --gpu h100 --no-files
if mkfifo "$TMP/fifo.yaml" 2>/dev/null; then
  check "a FIFO (it would wait forever)" 2 "fifo\.yaml' is not a regular file" -- "$TMP/fifo.yaml" --gpu h100 --no-files
fi
if truncate -s 40M "$TMP/big.yaml" 2>/dev/null; then
  check "a 40 MiB config" 2 "big\.yaml' is larger than 32 MiB: refused" -- "$TMP/big.yaml" --gpu h100 --no-files
fi
check "a missing config" 2 "config '[^']*nothere\.yaml': no such file" -- "$TMP/nothere.yaml" --gpu h100 --no-files

echo "test_recipes: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
