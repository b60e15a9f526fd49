#!/bin/sh
# Compute slowed by collectives beside it (EngineConfig.contention): the card's own figure,
# lua/hw/calibrated/<gpu>_contention.lua (the H100 SXM's is published: pytorch/pytorch#179937),
# never carried to another card; hardware.contention = false runs the same step without it.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
SCN=scenarios/llama70b_fsdp2_16x8_h100.lua

# run NAME SETS...: the run's JSON in $tmp/NAME.json
run() {
  n=$1; shift
  args=""; for s in "$@"; do args="$args --set $s"; done
  # shellcheck disable=SC2086
  "$VRSIM" "$SCN" $args --json --no-files >"$tmp/$n.json" 2>"$tmp/$n.err" || bad "$n: vrsim failed: $(tail -1 "$tmp/$n.err")"
}
get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$tmp/$1.json" "$2"; }

# 1. FSDP2 on 8 H100 SXM of one node (Llama-2-7B cut to 8 layers): its all-gathers and
#    reduce-scatters run beside the GEMMs, which take 35 % longer for the overlapped time
FSDP="gpu=h100_sxm count=8 size=7b-l8"
# shellcheck disable=SC2086
run h100_on $FSDP
# shellcheck disable=SC2086
run h100_off $FSDP hardware.contention=false
on=$(get h100_on 'd["step_time_ms"]'); off=$(get h100_off 'd["step_time_ms"]')
comm=$(get h100_on 'd["time_ms"]["communication"]')
if python3 -c "import sys; on, off, c = map(float, sys.argv[1:]); sys.exit(not (on > off and on - off <= 0.35 * c + 1e-9))" "$on" "$off" "$comm"; then
  ok "H100 SXM FSDP2 x8: $off ms without the figure, $on ms with it (no more than 0.35 x the $comm ms of collectives)"
else bad "H100 SXM FSDP2 x8: $on ms with the figure, $off ms without (collectives $comm ms): not slower, or by more than 0.35 x the collectives"; fi
basis=$(get h100_on 'd["step_time_basis"]')
case "$basis" in
  *"h100_sxm_contention.lua, published, pytorch/pytorch#179937"*) ok "the step time's basis names the figure and its source" ;;
  *) bad "the basis does not name the contention source: $basis" ;;
esac
case "$(get h100_off 'd["step_time_basis"]')" in
  *contention*) bad "hardware.contention = false still names the figure in the basis" ;;
  *) ok "hardware.contention = false: the basis names no figure" ;;
esac

# 2. One GPU runs no collective: the same step time to the last digit, with or without
run one_on gpu=h100_sxm count=1 size=7b-l8 micro_batch=1
run one_off gpu=h100_sxm count=1 size=7b-l8 micro_batch=1 hardware.contention=false
a=$(get one_on 'repr(d["step_time_ms"])'); b=$(get one_off 'repr(d["step_time_ms"])')
if [ "$a" = "$b" ]; then ok "H100 SXM, one GPU: step time $a ms either way"
else bad "H100 SXM, one GPU: $a ms with the figure, $b ms without"; fi

# 3. A card without a figure of its own gets none carried from another (the H200's profile is
#    carried to the H100, never the H100's contention to the H200)
run h200_on gpu=h200 count=8 size=7b-l8
run h200_off gpu=h200 count=8 size=7b-l8 hardware.contention=false
a=$(get h200_on 'repr(d["step_time_ms"])'); b=$(get h200_off 'repr(d["step_time_ms"])')
if [ "$a" = "$b" ]; then ok "H200 FSDP2 x8 (no figure): step time $a ms either way"
else bad "H200 FSDP2 x8 (no figure): $a ms by default, $b ms with hardware.contention = false"; fi
case "$(get h200_on 'd["step_time_basis"]')" in
  *contention*) bad "the H200's basis names a contention figure it does not have" ;;
  *) ok "the H200's basis names no contention figure" ;;
esac

# 4. the field is declared
if "$VRSIM" fields | grep -q "^  contention "; then ok "vrsim fields lists hardware.contention"
else bad "vrsim fields does not list hardware.contention"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
