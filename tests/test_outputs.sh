#!/bin/sh
# test_outputs.sh: what vrsim writes, and what it prints, under hostile or careless use. Each case
# failed before its fix: an output option replaced whatever was at its path, a killed run left
# its temporary folder behind, a full disk left an empty journal, long paths and values were cut
# to fit a buffer, a sweep's resume took stale or another sweep's points, sweep, maxbatch and
# shop ignored PYTORCH_CUDA_ALLOC_CONF, and a few messages were empty, raw or nonsense.
#
#   VRSIM=./vrsim sh tests/test_outputs.sh      (make test runs it for each build)
#
# The scenarios are in tests/hostile/outputs/; links, FIFOs and long folders are made here.
set -u

VRSIM=${VRSIM:-./vrsim}
case "$VRSIM" in /*) ;; */*) VRSIM="$(pwd)/$VRSIM" ;; esac
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_outputs: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-outputs.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
unset PYTORCH_CUDA_ALLOC_CONF

PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# check NAME RC WANT -- ARGS...: runs $VRSIM ARGS (120 s at most) in $TMP/w; the exit status must
# be RC and the output (stdout and stderr, in $TMP/out) must match the extended regex WANT ("" =
# no check).
check() {
  _n=$1 _rc=$2 _want=$3
  shift 4
  (cd "$TMP/w" && timeout 120 "$VRSIM" "$@") >"$TMP/out" 2>&1
  _got=$?
  if [ "$_got" -eq 124 ]; then fail "$_n: still running after 120 s"; return 1; fi
  if [ "$_got" -ne "$_rc" ]; then fail "$_n: exit $_got, expected $_rc" "$(head -n 4 "$TMP/out")"; return 1; fi
  if [ -n "$_want" ] && ! grep -Eq -- "$_want" "$TMP/out"; then
    fail "$_n: the output does not say /$_want/" "$(head -n 4 "$TMP/out")"; return 1
  fi
  ok "$_n: exit $_rc"
}

# a pid that ran and is gone: what a killed run's temporaries carry
sh -c 'exit 0' & DEAD=$!
wait $DEAD

W=$TMP/w
mkdir -p "$W"
cp tests/hostile/tiny.lua tests/hostile/outputs/* "$W/"
# the inputs: none may change
( cd "$W" && cksum tiny.lua cfg.lua cfg.json ) >"$TMP/inputs.sum"

# ---- --alloc-trace: created as --out is, never over what vrsim did not write ----------------
ln -s tiny.lua "$W/link.csv"
check "--alloc-trace over a symbolic link is refused" 2 "symbolic link" -- tiny.lua --no-files --alloc-trace link.csv
[ -L "$W/link.csv" ] && ok "  ... the link is still a link" || fail "  ... the link was replaced"
check "--alloc-trace over the scenario itself is refused" 2 "an input of this run" -- tiny.lua --no-files --alloc-trace tiny.lua
if mkfifo "$W/fifo.csv" 2>/dev/null; then
  check "--alloc-trace over a FIFO is refused" 2 "not a regular file" -- tiny.lua --no-files --alloc-trace fifo.csv
  [ -p "$W/fifo.csv" ] && ok "  ... the FIFO is still there" || fail "  ... the FIFO was replaced"
fi
printf 'precious notes\n' >"$W/notes.csv"
check "--alloc-trace over a file vrsim did not write is refused" 2 "vrsim did not write" -- tiny.lua --no-files --alloc-trace notes.csv
grep -q 'precious notes' "$W/notes.csv" && ok "  ... the file is untouched" || fail "  ... the file was replaced"
check "--alloc-trace to a new file" 0 "" -- tiny.lua --no-files --alloc-trace trace.csv
check "--alloc-trace over its own earlier trace" 0 "" -- tiny.lua --no-files --alloc-trace trace.csv
head -n 1 "$W/trace.csv" | grep -q '^seq,time_us,action,addr,size,stream,frames$' \
  && ok "  ... the trace is there" || fail "  ... no trace" "$(head -n 2 "$W/trace.csv")"
( cd "$W" && cksum tiny.lua cfg.lua cfg.json ) | cmp -s - "$TMP/inputs.sum" \
  && ok "  ... no input changed" || fail "  ... an input changed"
mkdir -p "$W/set"
ln -s set "$W/setlink"
check "--out through a symbolic link is refused" 2 "symbolic link" -- tiny.lua --out setlink --no-suggest
[ -L "$W/setlink" ] && ok "  ... the link is still a link" || fail "  ... the link was replaced"

cp tests/hostile/tiny.lua "$W/" # (a build without the checks above replaced it)

# ---- what a killed run leaves: its temporaries carry its pid, and the next run removes them ---
mkdir -p "$W/o/r.tmp-$DEAD-abcdef"
printf '{}\n' >"$W/o/r.tmp-$DEAD-abcdef/summary.json"
printf 'x\n' >"$W/trace.csv.tmp-$DEAD-ghijkl"
mkdir -p "$W/o/r.tmp-$$-mnopqr" # this shell still runs: not stale
check "a run after a killed one" 0 "" -- tiny.lua --out o/r --no-suggest --alloc-trace trace.csv
[ ! -e "$W/o/r.tmp-$DEAD-abcdef" ] && ok "  ... the dead run's folder is gone" \
  || fail "  ... the dead run's folder is left" "$(ls "$W/o")"
[ ! -e "$W/trace.csv.tmp-$DEAD-ghijkl" ] && ok "  ... the dead run's trace temporary is gone" \
  || fail "  ... the dead run's trace temporary is left"
[ -d "$W/o/r.tmp-$$-mnopqr" ] && ok "  ... a live process's folder stays" || fail "  ... a live process's folder was removed"
rmdir "$W/o/r.tmp-$$-mnopqr"
# SIGKILL at random moments: whatever was left is gone after the next run
for i in 1 2 3 4 5 6 7 8; do
  (cd "$W" && exec "$VRSIM" tiny.lua --out o/k >/dev/null 2>&1) & p=$!
  sleep "0.0$i"; kill -9 $p 2>/dev/null; wait $p 2>/dev/null
done
check "a run after eight killed ones" 0 "" -- tiny.lua --out o/k --no-suggest
left=$(ls "$W/o" | grep -c 'tmp')
[ "$left" -eq 0 ] && ok "  ... no temporary folder left" || fail "  ... $left left" "$(ls "$W/o")"

# ---- a sweep on a full disk (a file size limit of 0 stands in) leaves no empty journal -------
(cd "$W" && trap '' XFSZ && ulimit -f 0 && exec "$VRSIM" sweep tiny.lua --set seq=8,16 -j 1 --out full) >"$TMP/out" 2>&1
rc=$?
[ "$rc" -ne 0 ] && ok "sweep on a full disk: exit $rc" || fail "sweep on a full disk: exit 0"
if [ -e "$W/full/sweep.journal" ] && [ ! -s "$W/full/sweep.journal" ]; then
  fail "  ... an empty sweep.journal is left"
else
  ok "  ... no empty sweep.journal"
fi
ls "$W/full" 2>/dev/null | grep -q 'tmp' && fail "  ... a temporary is left" "$(ls "$W/full")" || ok "  ... no temporary left"

# ---- no path or value cut to fit a buffer --------------------------------------------------
LONG="$W/$(printf 'a%.0s' $(seq 250))/$(printf 'b%.0s' $(seq 250))/$(printf 'c%.0s' $(seq 250))/$(printf 'd%.0s' $(seq 250))/$(printf 'e%.0s' $(seq 100))"
mkdir -p "$LONG"
cp "$W/cfg.lua" "$W/cfg.json" "$LONG/"
# the truncated folder (the first 1023 characters) gets a config of its own that must not be read
CUT=$(printf '%s' "$LONG/cfg.lua" | cut -c1-1023)
CUT=${CUT%/*}
mkdir -p "$CUT"
printf '{"hidden_size": 1}\n' >"$CUT/cfg.json"
check "sweep: a scenario path of ${#LONG} characters" 0 "2 fit" -- sweep "$LONG/cfg.lua" --set seq=8,16 --no-files -j 1
check "maxbatch: a scenario path of ${#LONG} characters" 0 "answer: micro_batch = 4" -- maxbatch "$LONG/cfg.lua" --max 4
check "shop: a scenario path of ${#LONG} characters" 0 "h200 " -- shop "$LONG/cfg.lua" --tokens 1e6 --only h200
check "sweep --out of ${#LONG} characters" 0 "" -- sweep tiny.lua --set seq=8,16 -j 1 --out "$LONG/sw"
[ -s "$LONG/sw/sweep.csv" ] && ok "  ... sweep.csv is at the full path" || fail "  ... no sweep.csv at the full path"
CONF="max_split_size_mb:128$(printf ',max_split_size_mb:128%.0s' $(seq 40)),max_split_size_mb:12800000,expandable_segments:True"
check "sweep --alloc-conf of ${#CONF} characters" 0 "" -- sweep tiny.lua --set seq=8 -j 1 --alloc-conf "$CONF" --out long_conf
check "sweep --alloc-conf short form" 0 "" -- sweep tiny.lua --set seq=8 -j 1 --alloc-conf "max_split_size_mb:12800000,expandable_segments:True" --out short_conf
a=$(cut -d, -f6 "$W/long_conf/sweep.csv" | tail -n 1); b=$(cut -d, -f6 "$W/short_conf/sweep.csv" | tail -n 1)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "  ... the whole setting is in force (peak reserved $a)" \
  || fail "  ... peak reserved $a against the short form's $b"
# one value (its commas written \, as sweep's lists want), the setting that matters at its end
VAL=$(printf 'max_split_size_mb:128\\,%.0s' $(seq 60))expandable_segments:True
check "sweep --set of a value of ${#VAL} characters" 0 " 1 fit" -- sweep tiny.lua --set "allocator.conf=$VAL" -j 1 --out long_set
a=$(tail -n 1 "$W/long_set/sweep.csv" | awk -F, '{print $(NF-4)}') # the value is quoted, with commas
"$VRSIM" "$W/tiny.lua" --no-files --json --alloc-conf expandable_segments:True >"$TMP/exp.json" 2>&1
EXP=$(grep -m1 '"peak_reserved_bytes"' "$TMP/exp.json" | tr -dc 0-9)
[ -n "$a" ] && [ "$a" = "$EXP" ] && ok "  ... the value is read whole (peak reserved $a, as expandable segments give)" \
  || fail "  ... peak reserved $a, expandable segments give $EXP"

# ---- the sweep journal: keyed by everything the answer depends on, one per sweep -------------
mkdir -p "$W/j/sweep.csv"
check "sweep into an --out whose sweep.csv is a folder" 2 "not a regular file" -- sweep cfg.lua --set micro_batch=1,2,3,4,5 -j 1 --out j
[ ! -e "$W/j/sweep.journal" ] && ok "  ... refused before any point ran" || fail "  ... a journal was written"
rmdir "$W/j/sweep.csv"
# an interrupted sweep: a file size limit of one block lets the journal and sweep.csv through
# but not sweep.json, and the journal stays for --resume
(cd "$W" && trap '' XFSZ && ulimit -f 1 && exec "$VRSIM" sweep cfg.lua --set micro_batch=1,2,3,4,5 -j 1 --out j) >"$TMP/out" 2>&1
rc=$?
[ $rc -eq 1 ] && [ -s "$W/j/sweep.journal" ] && ok "an interrupted sweep leaves its journal (exit 1)" \
  || fail "an interrupted sweep: exit $rc, journal: $(ls "$W/j")" "$(cat "$TMP/out")"
cp "$W/j/sweep.journal" "$TMP/cfg.journal"
sed -i 's/"num_hidden_layers": 1/"num_hidden_layers": 3/' "$W/cfg.json"
check "sweep --resume after the config.json it reads was edited" 0 "changed since" -- sweep cfg.lua --set micro_batch=1,2,3,4,5 -j 1 --out j --resume
check "the same sweep, fresh" 0 "" -- sweep cfg.lua --set micro_batch=1,2,3,4,5 -j 1 --out j_fresh
cmp -s "$W/j/sweep.csv" "$W/j_fresh/sweep.csv" && ok "  ... its points are computed again: sweep.csv as a fresh sweep's" \
  || fail "  ... sweep.csv differs from a fresh sweep's" "$(diff "$W/j/sweep.csv" "$W/j_fresh/sweep.csv")"
sed -i 's/"num_hidden_layers": 3/"num_hidden_layers": 1/' "$W/cfg.json"
# a config typed on the command line, as an axis: edited between a sweep and its resume
cp "$W/cfg.json" "$W/cfg2.json"
rm -rf "$W/j2"
(cd "$W" && trap '' XFSZ && ulimit -f 1 && exec "$VRSIM" sweep cfg.lua --set model.config=cfg2.json --set micro_batch=1,2,3,4,5 -j 1 --out j2) >"$TMP/out" 2>&1
[ -s "$W/j2/sweep.journal" ] && ok "an interrupted sweep over --set model.config" || fail "an interrupted sweep over --set model.config: no journal" "$(cat "$TMP/out")"
sed -i 's/"num_hidden_layers": 1/"num_hidden_layers": 2/' "$W/cfg2.json"
check "sweep --resume after the config.json an axis names was edited" 0 "changed since" -- sweep cfg.lua --set model.config=cfg2.json --set micro_batch=1,2,3,4,5 -j 1 --out j2 --resume
# another sweep into the folder of an interrupted one
cp "$TMP/cfg.journal" "$W/j/sweep.journal"
check "another sweep into the folder of an interrupted one is refused" 2 "is from another sweep" -- sweep cfg.lua --set micro_batch=1,2,3 -j 1 --out j
# a journal holding nan or inf: its lines are not taken
head -n 1 "$TMP/cfg.journal" >"$W/j/sweep.journal"
printf '0\t0\t1\tnan\tinf\t1\t1\t1\t\n1\t0\t1\t1e999\t1\t1\t1\t1\t\n' >>"$W/j/sweep.journal"
check "sweep --resume from a journal holding nan and inf" 0 "" -- sweep cfg.lua --set micro_batch=1,2,3,4,5 -j 1 --out j --resume
grep -Eiq 'nan|inf' "$W/j/sweep.csv" && fail "  ... nan or inf in sweep.csv" "$(cat "$W/j/sweep.csv")" \
  || ok "  ... no nan or inf in sweep.csv"
# PYTORCH_CUDA_ALLOC_CONF changed between a sweep and its resume
cp "$TMP/cfg.journal" "$W/j/sweep.journal"
(cd "$W" && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 "$VRSIM" sweep cfg.lua --set micro_batch=1,2,3,4,5 -j 1 --out j --resume) >"$TMP/out" 2>&1
grep -q 'changed since' "$TMP/out" && ok "sweep --resume under another PYTORCH_CUDA_ALLOC_CONF computes again" \
  || fail "sweep --resume under another PYTORCH_CUDA_ALLOC_CONF took the old points" "$(cat "$TMP/out")"
# two sweeps into one --out at once: the second is refused while the first runs
(cd "$W" && exec "$VRSIM" sweep tiny.lua --set micro_batch=1..500 --set seq=8..64 -j 1 --out busy >/dev/null 2>&1) & p=$!
n=0
while [ ! -s "$W/busy/sweep.journal" ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
check "a second sweep into the --out of a running one is refused" 2 "another sweep \(process [0-9]+\) is writing" -- sweep tiny.lua --set seq=8,16 -j 1 --out busy
kill $p 2>/dev/null; wait $p 2>/dev/null

# ---- sweep, maxbatch and shop read PYTORCH_CUDA_ALLOC_CONF as a run does ----------------------
for cmd in "sweep tiny.lua --set seq=8 -j 1 --no-files" "maxbatch tiny.lua --max 2" "shop tiny.lua --tokens 1e6 --only h200"; do
  (cd "$W" && PYTORCH_CUDA_ALLOC_CONF=garbage timeout 120 "$VRSIM" $cmd) >"$TMP/out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q 'PYTORCH_CUDA_ALLOC_CONF in the environment' "$TMP/out" \
    && ok "${cmd%% *}: a garbage PYTORCH_CUDA_ALLOC_CONF is refused (exit 2)" \
    || fail "${cmd%% *}: a garbage PYTORCH_CUDA_ALLOC_CONF: exit $rc" "$(head -n 3 "$TMP/out")"
done
(cd "$W" && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$VRSIM" sweep tiny.lua --set seq=8 -j 1 --out env_sweep) >/dev/null 2>&1
a=$(cut -d, -f6 "$W/env_sweep/sweep.csv" | tail -n 1)
[ -n "$a" ] && [ "$a" = "$EXP" ] && ok "sweep: the point under PYTORCH_CUDA_ALLOC_CONF is the run's (peak reserved $a)" \
  || fail "sweep: peak reserved $a under PYTORCH_CUDA_ALLOC_CONF, a run gives $EXP"

# ---- shop: a fleet-only board (lua/hw/gpus.lua fleet_only) is in no one's shop ---------------
(cd "$W" && timeout 120 "$VRSIM" shop tiny.lua --tokens 1e6) >"$TMP/out" 2>&1
if grep -q "^  h200 " "$TMP/out" && ! grep -q "h100_hbm2e_96g" "$TMP/out"; then
  ok "shop: every card but the fleet-only h100_hbm2e_96g"
else fail "shop: the fleet-only board listed, or h200 missing" "$(grep -E "h200|hbm2e" "$TMP/out" | head -n 3)"; fi
check "shop --only names a fleet-only board" 0 "^  h100_hbm2e_96g " -- shop tiny.lua --tokens 1e6 --only h100_hbm2e_96g

# ---- messages --------------------------------------------------------------------------------
check "one allocation past 4 TiB is named" 2 "model.layers.0.mlp.gate_proj.weight' needs one allocation of 8.0 TiB" -- huge_request.lua --no-files
check "ZeRO-2 contiguous_gradients = \"auto\" (a boolean DeepSpeed validates)" 2 "contiguous_gradients = \"auto\": .*DeepSpeed rejects the string" -- ds_cg_auto.lua --no-files
grep -q 'contiguous_gradients.*unused' "$TMP/out" && fail "  ... still called unused" || ok "  ... not called unused"
ESC=$(printf '\033')
check "a title with terminal escapes" 0 'x1b\]0;pwned' -- esc_title.lua --out esc --no-suggest
grep -q "$ESC" "$TMP/out" && fail "  ... a raw escape reached the terminal" || ok "  ... no raw escape in the terminal output"
od -An -tx1 "$W/esc/summary.json" | tr -s ' \n' ' ' | grep -q ' ef bf bd ' \
  && ! od -An -tx1 "$W/esc/summary.json" | grep -Eq '(^| )ff( |$)' \
  && ok "  ... summary.json has U+FFFD for the byte that is not UTF-8" || fail "  ... summary.json is not valid UTF-8"
check "a value with terminal escapes in a sweep's table" 0 'h200.x1b\[31m' -- sweep tiny.lua --set "gpu=h200${ESC}[31m,h200" -j 1 --no-files
grep -q "$ESC" "$TMP/out" && fail "  ... a raw escape reached the terminal" || ok "  ... no raw escape in the table"
BAD="bad${ESC}[31mname.lua"
printf 'return {\n' >"$W/$BAD"
check "a scenario whose name holds an escape, with a syntax error" 2 'bad.x1b\[31mname' -- "$BAD" --no-files
grep -q "$ESC" "$TMP/out" && fail "  ... a raw escape reached the terminal" || ok "  ... the chunk name is escaped"
check "shop --tokens inf" 2 "finite" -- shop tiny.lua --tokens inf
check "sweep --shard 1/4294967297" 2 "whole numbers" -- sweep tiny.lua --set seq=8,16 --shard 1/4294967297 --no-files

echo "test_outputs: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
