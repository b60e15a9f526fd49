#!/bin/sh
# test_doctor.sh: the out-of-memory doctor: a run that does not fit says what exceeds the card
# (sim/diagnose.c) and prints the changes that make it fit, each simulated (sim/variants.c), with
# --set options that reproduce it; a run that fits prints neither.
#
#   VRSIM=./vrsim sh tests/test_doctor.sh
set -u
VRSIM=${VRSIM:-./vrsim}
case "$VRSIM" in /*) ;; */*) VRSIM="$(pwd)/$VRSIM" ;; esac
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_doctor: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-doctor.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# LLaMA-2-13B full fine-tune, bf16 weights and AdamW state, 1 x 4096 on one A100-80GB: the model
# states alone (24.2 GiB of bf16 weights, as much of gradients, twice that of Adam moments) are
# over the card's 78.45 GiB, whatever the allocator does
cat >"$TMP/l13.lua" <<'EOF'
return {
  title = "LLaMA-2-13B full fine-tune on one A100-80GB",
  model = { arch = "llama2", size = "13b" },
  hardware = { gpu = "a100_80g" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", optimizer = "adamw" },
}
EOF

# suggestion FILE LABEL: the two lines after the suggestion LABEL (its verdict, its --set line)
suggestion() {
  awk -v l="  $2" '$0 == l { n = 2; next } n > 0 { print; n-- }' "$1"
}

# reproduces NAME FILE LABEL [ARGS...]: the suggestion LABEL of FILE fits, and its --set line run
# on $SCN (with the run's own ARGS) gives that verdict and that peak
reproduces() {
  _n=$1 _f=$2 _l=$3
  shift 3
  _s=$(suggestion "$_f" "$_l")
  _verdict=$(printf '%s\n' "$_s" | sed -n 1p)
  _sets=$(printf '%s\n' "$_s" | sed -n 2p)
  case "$_verdict" in
    *"fits: peak reserved"*) ;;
    *) fail "$_n: '$_l' is not among the suggestions that fit" "$(sed -n '/what would/,$p' "$_f")"; return ;;
  esac
  _peak=$(printf '%s\n' "$_verdict" | sed 's/.*peak reserved \([0-9.]*\) GiB.*/\1/')
  # shellcheck disable=SC2086
  "$VRSIM" "$SCN" --no-files --no-suggest "$@" $_sets >"$TMP/repro.out" 2>&1
  if [ $? -eq 0 ] && grep -q "^FITS: peak reserved $_peak GiB" "$TMP/repro.out"; then
    ok "$_n: '$_l' fits at $_peak GiB, and its --set line gives that"
  else
    fail "$_n: '$_l' ($_sets) does not reproduce: expected FITS at $_peak GiB" "$(head -n 8 "$TMP/repro.out")"
  fi
}

SCN="$TMP/l13.lua"
"$VRSIM" "$SCN" --no-files >"$TMP/l13.out" 2>"$TMP/l13.err"
rc=$?
[ "$rc" -eq 3 ] && ok "13B on an A100-80GB does not fit (exit 3)" || fail "13B: exit $rc, expected 3" "$(cat "$TMP/l13.err")"
if grep -q "why: the model states alone need 96.98 GiB (parameters 24.24 + gradients 24.24 +" "$TMP/l13.out" &&
   grep -q "optimizer state 48.49 GiB), more than the 78.45 GiB the allocator may use" "$TMP/l13.out" &&
   ! grep -qi "fragmentation\|expandable" "$TMP/l13.out"; then
  ok "13B: the cause named is the model states (96.98 GiB over 78.45), not fragmentation"
else fail "13B: diagnosis" "$(sed -n '/why/,/^$/p' "$TMP/l13.out")"; fi
reproduces 13B "$TMP/l13.out" "gradient checkpointing + 8-bit AdamW (bitsandbytes)"
reproduces 13B "$TMP/l13.out" "gradient checkpointing + ZeRO-2 with the optimizer state offloaded to the CPU (1 GPU)"
reproduces 13B "$TMP/l13.out" "gradient checkpointing + FSDP2 over 2 GPUs"
if grep -q "fits: peak reserved [0-9.]* GiB, step [0-9.]* ms on each of 2 GPUs" "$TMP/l13.out" &&
   suggestion "$TMP/l13.out" "LoRA on frozen bf16 weights (r=8 on q, v): changes the training" | grep -q fits; then
  ok "13B: a change of GPU count says so; LoRA is marked as changing the training"
else fail "13B: GPU counts or the LoRA mark" "$(sed -n '/what would/,$p' "$TMP/l13.out")"; fi

# --explain gives the same cause, and no longer blames fragmentation
"$VRSIM" "$SCN" --no-files --explain >"$TMP/l13x.out" 2>&1
if sed -n '/^Why it does not fit/,$p' "$TMP/l13x.out" | grep -q "the model states alone need 96.98 GiB" &&
   ! grep -q "This is fragmentation\|expandable_segments" "$TMP/l13x.out" &&
   grep -q "^what would help (each simulated):" "$TMP/l13x.out"; then
  ok "13B --explain: model states, no fragmentation, and the suggestions"
else fail "13B --explain" "$(sed -n '/^Why it does not fit/,$p' "$TMP/l13x.out" | head -n 20)"; fi

# --no-suggest: the cause, without the search
"$VRSIM" "$SCN" --no-files --no-suggest >"$TMP/l13n.out" 2>&1
if grep -q "why: the model states alone" "$TMP/l13n.out" && ! grep -q "what would help" "$TMP/l13n.out"; then
  ok "--no-suggest skips the search"
else fail "--no-suggest" "$(tail -n 12 "$TMP/l13n.out")"; fi

# A run that is fragmentation: LLaMA2-13B ZeRO-2 on 8 GPUs of 55 GiB holds at most 53.40 GiB
# (the ideal allocator), under the 54.30 GiB usable, but the caching allocator's free blocks
# cannot take a 1000 MiB request: expandable segments fit it
SCN=scenarios/llama13b_zero2.lua
"$VRSIM" "$SCN" --set capacity_gib=55 --no-files >"$TMP/frag.out" 2>&1
if grep -q "why: fragmentation: the run never holds more than 53.40 GiB" "$TMP/frag.out" &&
   grep -q "expandable_segments:True (--alloc-conf) lets segments grow instead" "$TMP/frag.out"; then
  ok "fragmentation: named as the cause, with expandable segments"
else fail "fragmentation: diagnosis" "$(sed -n '/why/,$p' "$TMP/frag.out")"; fi
reproduces fragmentation "$TMP/frag.out" "expandable segments" --set capacity_gib=55

# the model-states case's suggestions never offer expandable segments (it fits nothing there)
if ! grep -q "expandable segments" "$TMP/l13.out"; then ok "13B: expandable segments not suggested"
else fail "13B: expandable segments suggested for a model-states case"; fi

# the other causes, each named alone. Activations: LLaMA2-7B at micro-batch 16 x 2048 on an H200
# holds 37.65 GiB of model states and 187.04 GiB of activations at the loss's backward
"$VRSIM" scenarios/llama7b_h200.lua --set micro_batch=16 --no-files --no-suggest >"$TMP/act.out" 2>&1
if grep -q "why: activations: at op 'nll_loss.backward' (backward) the step needs 228.66 GiB," "$TMP/act.out" &&
   grep -q "model states 37.65 GiB and activations 187.04 GiB, more than the 139.05 GiB" "$TMP/act.out" &&
   ! grep -q "why: fragmentation\|model states alone need" "$TMP/act.out"; then
  ok "activations: named as the cause, with the states beside them"
else fail "activations: diagnosis" "$(sed -n '/why/,$p' "$TMP/act.out")"; fi
# A temporary: four layers of LLaMA2-7B on 10,800 MiB: the states (7.98 GiB) fit, AdamW's foreach
# sqrt makes 2 GiB of temporaries on top
"$VRSIM" scenarios/llama7b_h200.lua --set size=7b-l4 --set steps=2 --set capacity_mib=10800 --no-files \
  --no-suggest >"$TMP/tmp.out" 2>&1
if grep -q "why: a temporary: at op 'adamw._foreach_sqrt' (optimizer) the step needs 10.04 GiB;" "$TMP/tmp.out" &&
   grep -q "the 2.00 GiB of temporaries alive there take it over" "$TMP/tmp.out" &&
   ! grep -q "why: fragmentation\|why: activations" "$TMP/tmp.out"; then
  ok "a temporary: named as the cause (AdamW's foreach temporaries)"
else fail "a temporary: diagnosis" "$(sed -n '/why/,$p' "$TMP/tmp.out")"; fi
# Building: LLaMA2-7B LoRA built in fp32 (build = "cast") holds 24.87 GiB before .to(bf16), over
# 15.30 GiB usable, while its steps need 12.61 GiB of model states: built as from_pretrained
# loads it, it fits
SCN=scenarios/llama7b_lora_saving.lua
"$VRSIM" "$SCN" --set capacity_gib=16 --set build=cast --no-files >"$TMP/build.out" 2>&1
if grep -q "why: building the model: at op 'to(bf16) model.embed_tokens.weight' (build) it holds 24.87 GiB" "$TMP/build.out"; then
  ok "building: named as the cause"
else fail "building: diagnosis" "$(sed -n '/why/,$p' "$TMP/build.out")"; fi
reproduces building "$TMP/build.out" "build in the training dtype (from_pretrained(torch_dtype=...))" --set capacity_gib=16 --set build=cast

# a run that fits prints no doctor section
"$VRSIM" scenarios/llama7b_h200.lua --set size=7b-l2 --set steps=2 --no-files >"$TMP/fit.out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && ! grep -q "why:\|what would" "$TMP/fit.out"; then ok "a run that fits prints no doctor section"
else fail "a fitting run: exit $rc" "$(tail -n 12 "$TMP/fit.out")"; fi

echo "test_doctor: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
