#!/bin/sh
# outputs_identical.sh: every output vrsim writes, saved once and compared after a change that
# must not alter any of them (a refactoring): each scenario's --json, its text (the table,
# --explain and the suggestions) and its files (summary.json, memory.csv, trace.json,
# report.html), vrsim validate, a sweep (table, sweep.csv, sweep.json), maxbatch, shop and gpus.
#
#   VRSIM=./vrsim sh tests/outputs_identical.sh save DIR    write the outputs under DIR
#   VRSIM=./vrsim sh tests/outputs_identical.sh check DIR   compare them with DIR's
#
# check prints each file that differs and exits 1 if any does; exit statuses are compared too.
set -u

VRSIM=${VRSIM:-./vrsim}
[ $# -eq 2 ] || { echo "usage: outputs_identical.sh save|check DIR" >&2; exit 2; }
MODE=$1
BASE=$2
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "outputs_identical: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
case $MODE in
  save) rm -rf "$BASE"; OUT=$BASE ;;
  check) [ -d "$BASE" ] || { echo "outputs_identical: no baseline $BASE" >&2; exit 1; }
         OUT=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-ident.XXXXXX") || exit 1
         trap 'rm -rf "$OUT"' EXIT INT TERM ;;
  *) echo "usage: outputs_identical.sh save|check DIR" >&2; exit 2 ;;
esac
mkdir -p "$OUT"

# run NAME ARGS...: stdout, stderr and exit status of one command under $OUT/NAME.*; the
# output directory's name is replaced by a fixed one so runs in different places compare
run() {
  _n=$1; shift
  "$VRSIM" "$@" >"$OUT/$_n.out" 2>"$OUT/$_n.err"
  echo $? >"$OUT/$_n.rc"
}

for s in scenarios/*.lua scenarios/claims/*.lua; do
  n=$(echo "$s" | sed 's|^scenarios/||; s|/|_|g; s|\.lua$||')
  run "$n.json" "$s" --json --no-files
  run "$n.text" "$s" --explain --out "$OUT/files/$n"
done
run validate validate
run validate.json validate --json
SMALL="--set model.size=7b-l1 --set seq=128"
run sweep sweep scenarios/llama7b_h200.lua $SMALL --set micro_batch=1..4 \
  --set gpu=h200,rtx3090,nope -j 2 --out "$OUT/files/sweep"
run sweep.json sweep scenarios/llama7b_h200.lua $SMALL --set micro_batch=1,2 \
  --set checkpointing=none,full -j 2 --json --no-files
run maxbatch maxbatch scenarios/llama7b_h200.lua $SMALL
run maxbatch.seq maxbatch scenarios/llama7b_lora_rtx4090.lua --field seq
run shop shop scenarios/llama7b_lora_rtx4090.lua --tokens 1e9 --gpus 1,2
run gpus gpus
run gpus.sources gpus --sources
run shop.only shop scenarios/qwen25_05b_full_4090.lua --tokens 2.5e10 --only rtx4090,h100_sxm,a100_80g

# the files' paths name the output directory: make them relative to it; a sweep's wall-clock
# time and rate are the one thing that changes from run to run
find "$OUT" -type f \( -name '*.out' -o -name '*.err' -o -name '*.json' -o -name '*.html' \) \
  -exec sed -i "s|$OUT|@OUT@|g" {} +
sed -i 's|; [0-9.]* s with \([0-9]*\) workers\? ([0-9]* points/s)|; @T@ s with \1 workers|' "$OUT"/sweep*.out

[ "$MODE" = save ] && { echo "outputs_identical: saved $(find "$OUT" -type f | wc -l) files in $BASE"; exit 0; }

rc=0
if ! diff -rq "$BASE" "$OUT" >"$OUT.diff" 2>&1; then
  rc=1
  sed "s|$OUT|NEW|g" "$OUT.diff"
fi
rm -f "$OUT.diff"
[ $rc -eq 0 ] && echo "outputs_identical: all $(find "$OUT" -type f | wc -l) files identical to $BASE"
exit $rc
