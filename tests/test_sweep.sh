#!/bin/sh
# test_sweep.sh: the what-if commands: vrsim sweep, maxbatch and shop (quick: a one-layer 7B
# at short sequences, a few seconds in all).
#
#   VRSIM=./vrsim sh tests/test_sweep.sh
#
# Prints one line per check (ok / FAIL) and exits non-zero if any failed. A run that dies on a
# signal (exit >= 128) is always a failure.
set -u

VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_sweep: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-sweep.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
SCN=scenarios/llama7b_h200.lua
SMALL="--set model.size=7b-l1 --set seq=128"

PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# run NAME ARGS...: stdout in $TMP/NAME.out, stderr in $TMP/NAME.err, status in $RC
run() {
  _name=$1; shift
  "$VRSIM" "$@" >"$TMP/$_name.out" 2>"$TMP/$_name.err"
  RC=$?
  if [ "$RC" -ge 128 ]; then fail "$_name: exit $RC (crash)" "$(tail -n 5 "$TMP/$_name.err")"; fi
}

# expect NAME STATUS: the last run exited with STATUS
expect() {
  if [ "$RC" = "$2" ]; then ok "$1 (exit $RC)"; else fail "$1: exit $RC, expected $2" "$(head -n 5 "$TMP/$_name.err")"; fi
}

# ---- sweep -----------------------------------------------------------------------------------
run sweep sweep $SCN $SMALL --set micro_batch=1..4 --set gpu=h200,rtx3090,nope -j 2 --out "$TMP/s1"
expect "sweep: 1..4 x 3 GPUs, one unknown" 0
lines=$(wc -l < "$TMP/s1/sweep.csv" 2>/dev/null || echo 0)
[ "$lines" = 10 ] && ok "sweep.csv: header + 9 points" || fail "sweep.csv has $lines lines, expected 10"
n_err=$(grep -c ',error,' "$TMP/s1/sweep.csv")
[ "$n_err" = 3 ] && ok "sweep: the unknown GPU fails its 3 points, in their rows" || fail "sweep: $n_err error rows, expected 3"
grep -q "unknown GPU 'nope'" "$TMP/sweep.out" && ok "sweep: the table shows the error text" || fail "sweep: no error text in the table"
n_ok=$(grep -c ',ok,true,' "$TMP/s1/sweep.csv")
[ "$n_ok" = 6 ] && ok "sweep: 6 points fit" || fail "sweep: $n_ok points fit, expected 6" "$(cat "$TMP/s1/sweep.csv")"
cut -d, -f4 "$TMP/s1/sweep.csv" | sort -u | tr '\n' ' ' | grep -q '^1 2 4 micro_batch $' \
  && ok "sweep: 1..4 expands to the powers of two 1,2,4" || fail "sweep: micro_batch values $(cut -d, -f4 "$TMP/s1/sweep.csv" | sort -u | tr '\n' ' ')"
if command -v python3 >/dev/null 2>&1; then
  if python3 - "$TMP/s1/sweep.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["points_total"] == 9 and len(d["points"]) == 9, d["points_total"]
assert d["keys"] == ["model.size", "seq", "micro_batch", "gpu"], d["keys"]
p = d["points"][0]
assert p["settings"]["micro_batch"] == 1 and p["settings"]["gpu"] == "h200", p
assert p["fits"] is True and p["peak_reserved_bytes"] >= p["peak_allocated_bytes"] > 0, p
assert all(q["status"] == "error" and "nope" in q["error"] for q in d["points"] if q["settings"]["gpu"] == "nope")
EOF
  then ok "sweep.json: points, settings, fields"; else fail "sweep.json content"; fi
fi

run sweep_j1 sweep $SCN $SMALL --set micro_batch=1..4 --set gpu=h200,rtx3090,nope -j 1 --out "$TMP/s2"
cmp -s "$TMP/s1/sweep.csv" "$TMP/s2/sweep.csv" && cmp -s "$TMP/s1/sweep.json" "$TMP/s2/sweep.json" \
  && ok "sweep: -j 1 and -j 2 write the same bytes" || fail "sweep: -j 1 and -j 2 differ"

# Points that differ in the GPU only share a graph (a worker's child keeps it from one to the
# next, lua/vrsim/plan.lua P.rebuild): every point must still be what vrsim SCENARIO --set gives.
# The GPUs mix Hopper (cuDNN attention: another graph) and not, one by an alias (a note), and
# the strategies change the graph; SDXL's graph reads the GPU's name, so none is reused there.
check_points() { # NAME SCENARIO SETS... -- GPUS ; compares sweep.json with single runs
  _n=$1; _scn=$2; shift 2
  run "$_n" sweep "$_scn" "$@" -j 2 --out "$TMP/$_n"
  [ "$RC" = 0 ] || { fail "$_n: sweep exit $RC" "$(tail -n 3 "$TMP/$_n.err")"; return; }
  python3 - "$VRSIM" "$_scn" "$TMP/$_n/sweep.json" <<'PY'
import json, subprocess, sys
vrsim, scn, path = sys.argv[1:4]
d = json.load(open(path))
bad = []
for p in d["points"]:
    sets = [f"{k}={v if not isinstance(v, bool) else str(v).lower()}" for k, v in p["settings"].items()]
    r = subprocess.run([vrsim, scn, "--json", "--no-files", "--no-suggest"] + sum((["--set", s] for s in sets), []),
                       capture_output=True, text=True)
    if p["status"] == "error":
        if r.returncode != 2: bad.append((p["point"], "error in the sweep, exit %d alone" % r.returncode))
        continue
    j = json.loads(r.stdout)
    want = (j["fits"], j["capacity_bytes"])
    got = (p["fits"], p["capacity_bytes"])
    if p["status"] == "ok":
        want += (j["peak_allocated_bytes"], j["peak_reserved_bytes"], round(j["step_time_ms"], 6))
        got += (p["peak_allocated_bytes"], p["peak_reserved_bytes"], round(p["step_time_ms"], 6))
    if want != got: bad.append((p["point"], p["settings"], got, want))
if bad:
    print(bad[:3]); sys.exit(1)
print(len(d["points"]))
PY
  if [ $? = 0 ]; then ok "$_n: every point as vrsim SCENARIO --set gives it"; else fail "$_n: points differ from single runs"; fi
}
if command -v python3 >/dev/null 2>&1; then
  # (at 2048 tokens cuDNN's and flash attention's kernels take different times)
  check_points reuse_llama $SCN --set model.size=7b-l1 --set seq=2048 --set count=2 \
    --set strategy=ddp,zero3 --set micro_batch=1,2 \
    --set gpu=rtx3090,h200,4090,a100_80g,h100_sxm,nope
  check_points reuse_sdxl scenarios/sdxl_breakdown.lua --set resolution=64 --set gpu=rtx3090,h200,l40s
  # more graphs than the pool keeps children for (sim/points.c IDLE_PER_CHILD for each of the
  # two): the later ones are made in children that made others before (sent a job anew), the
  # two attention kernels' by turns
  check_points reuse_anew $SCN --set model.size=7b-l1 --set seq=2048 --set micro_batch=1..16 \
    --set gpu=h200,rtx3090,h100_sxm,a10g
  # the capacity and the allocator settings: the graph reads neither
  check_points reuse_capacity $SCN $SMALL --set capacity_gib=3,40 \
    --set allocator.conf=,expandable_segments:True
fi

run sweep_range sweep $SCN $SMALL --set micro_batch=3..5 --no-files --json
grep -c '"micro_batch":' "$TMP/sweep_range.out" | grep -qx 3 && ok "sweep: 3..5 is every integer (3 points)" \
  || fail "sweep: 3..5" "$(cat "$TMP/sweep_range.out")"

for i in 1 2 3; do run "shard$i" sweep $SCN $SMALL --set micro_batch=1..5 --shard $i/3 -j 1 --out "$TMP/sh"; done
files=$(ls "$TMP"/sh/sweep.shard-*-of-3.csv 2>/dev/null | wc -l)
merged=$(tail -q -n +2 "$TMP"/sh/sweep.shard-*-of-3.csv 2>/dev/null | cut -d, -f1 | sort -n | tr '\n' ' ')
[ "$files" = 3 ] && [ "$merged" = "0 1 2 3 4 " ] && ok "sweep --shard i/3: 3 files, every point once" \
  || fail "sweep --shard: $files files, points '$merged'"

run noset sweep $SCN;                                    expect "sweep without --set" 2
run badkey sweep $SCN --set micro_btach=1,2;             expect "sweep with an unknown key" 2
grep -q "did you mean 'micro_batch'" "$TMP/badkey.err" && ok "sweep: unknown key suggests the field" || fail "sweep: no suggestion" "$(cat "$TMP/badkey.err")"
run badshard sweep $SCN --set micro_batch=1 --shard 4/3; expect "sweep --shard 4/3" 2
run badrange sweep $SCN --set micro_batch=8..2;          expect "sweep with an empty range" 2
run noscn sweep "$TMP/none.lua" --set micro_batch=1;     expect "sweep of a missing scenario" 2
run help sweep --help;                                   expect "sweep --help" 0
grep -q 'SLURM_ARRAY_TASK_ID' "$TMP/help.out" && grep -q 'parallel' "$TMP/help.out" \
  && ok "sweep --help documents Slurm arrays and GNU parallel" || fail "sweep --help lacks Slurm/parallel"

# ---- maxbatch --------------------------------------------------------------------------------
CAP="--set capacity_gib=6"
run maxbatch maxbatch $SCN $SMALL $CAP
expect "maxbatch on a 6 GiB card" 0
ans=$(sed -n 's/^answer: micro_batch = \([0-9]*\) fits.*/\1/p' "$TMP/maxbatch.out")
if [ -n "$ans" ]; then
  run mb_at $SCN $SMALL $CAP --no-files --set micro_batch="$ans"
  a=$RC
  run mb_above $SCN $SMALL $CAP --no-files --set micro_batch=$((ans + 1))
  [ "$a" = 0 ] && [ "$RC" = 3 ] && ok "maxbatch: $ans fits and $((ans + 1)) does not (vrsim SCENARIO agrees)" \
    || fail "maxbatch: answer $ans, but vrsim SCENARIO exits $a at it and $RC above it"
  probes=$(grep -c '^ *[0-9][0-9]*  [0-9]' "$TMP/maxbatch.out")
  [ "$probes" -le 16 ] && ok "maxbatch: $probes probes (doubling then bisection)" || fail "maxbatch: $probes probes"
else
  fail "maxbatch: no answer line" "$(cat "$TMP/maxbatch.out" "$TMP/maxbatch.err")"
fi
# the reserve maxbatch gives is the verdict's: the worst step's, as the run's FITS line says it
# (DeepSeek-V2-Lite at 6 x 4096 on an H100: step 0 reserves 74.52 GiB, the steady steps 71.98)
DS=scenarios/deepseek_v2_lite_lora_h100.lua
run mb_ds maxbatch $DS
run mb_ds_at $DS --no-files --set micro_batch=6
mb=$(sed -n 's/^answer: micro_batch = 6 fits (peak reserved \([0-9.]*\) GiB.*/\1/p' "$TMP/mb_ds.out")
at=$(sed -n 's/^FITS: peak reserved \([0-9.]*\) GiB.*/\1/p' "$TMP/mb_ds_at.out")
[ -n "$mb" ] && [ "$mb" = "$at" ] && ok "maxbatch: the answer's reserve is the verdict's worst step ($mb GiB)" \
  || fail "maxbatch: answer's reserve '$mb' GiB, the run's FITS line '$at' GiB" "$(tail -n 3 "$TMP/mb_ds.out")"
run mb_none maxbatch $SCN $SMALL --set capacity_gib=2;   expect "maxbatch when even 1 does not fit" 3
run mb_field maxbatch $SCN --field heads;                 expect "maxbatch --field heads" 2
run mb_set maxbatch $SCN --set micro_batch=2;             expect "maxbatch with the searched field set" 2
run mb_max maxbatch $SCN $SMALL --max 4
grep -q 'answer: micro_batch = 4 fits.*--max 4 reached' "$TMP/mb_max.out" && ok "maxbatch --max 4: stops at 4 and says so" \
  || fail "maxbatch --max 4" "$(cat "$TMP/mb_max.out")"

# ---- shop ------------------------------------------------------------------------------------
run shop shop $SCN $SMALL --tokens 1e7 --only h200,rtx3090,a100_80g,v100_32g --gpus 1,2
expect "shop --tokens 1e7 over 4 GPUs" 0
rows=$(grep -cE '^  (h200|rtx3090|a100_80g|v100_32g) ' "$TMP/shop.out")
[ "$rows" = 8 ] && ok "shop: one row per GPU and count asked for" || fail "shop: $rows rows" "$(cat "$TMP/shop.out")"
grep -qE '^  h200 +2 (ddp|zero2|zero3) +yes' "$TMP/shop.out" && ok "shop: 2 GPUs run data-parallel with a named strategy" \
  || fail "shop: no data-parallel row for 2 x h200" "$(cat "$TMP/shop.out")"
if command -v python3 >/dev/null 2>&1; then
  if python3 - "$TMP/shop.out" <<'EOF'
import re, sys
costs = []
for line in open(sys.argv[1]):
    m = re.match(r"^  (\w+)\s+(\d+) \S+\s+yes\s+\S+\s+\S+\s+(\S+)\s+(\d+)\s+([\d.]+) (min|h|days)\s+([\d.]+)  ([\d.]+);", line)
    if not m:
        continue
    n, tok_s, amount, unit, usd, price = int(m[2]), float(m[4]), float(m[5]), m[6], float(m[7]), float(m[8])
    hours = 1e7 / tok_s / 3600
    shown = amount / 60 if unit == "min" else amount * 24 if unit == "days" else amount
    assert abs(shown - hours) <= 0.051 * max(hours, 1 / 60), (line, hours)
    assert abs(usd - hours * n * price) <= 0.01 + 0.01 * usd, (line, hours * n * price)
    costs.append(usd)
assert len(costs) >= 2, costs
assert costs == sorted(costs), costs
EOF
  then ok "shop: job hours = tokens / (tokens/s), cost = hours x GPUs x price, cheapest first"; else fail "shop: arithmetic or order" "$(cat "$TMP/shop.out")"; fi
  # the rows share graphs between GPUs (points_set_reuse): each is still what vrsim SCENARIO gives
  if python3 - "$VRSIM" "$SCN" "$TMP/shop.out" $SMALL <<'EOF'
import json, re, subprocess, sys
vrsim, scn, out = sys.argv[1:4]
small = sys.argv[4:]
n_rows = 0
for line in open(out):
    m = re.match(r"^  (\w+)\s+(\d+) (\S+)\s+(yes|NO)\s+([\d.]+)\s+[\d.]+\s+(\S+)", line)
    if not m:
        continue
    gpu, n, dp, fits, resvd, step = m[1], int(m[2]), m[3], m[4] == "yes", float(m[5]), m[6]
    sets = small + ["--set", "gpu=" + gpu, "--set", "count=%d" % n] + (["--set", "strategy=" + dp] if n > 1 else [])
    r = subprocess.run([vrsim, scn, "--json", "--no-files", "--no-suggest"] + sets, capture_output=True, text=True)
    j = json.loads(r.stdout)
    assert j["fits"] == fits, (line, j["fits"])
    assert abs(j["peak_reserved_bytes"] / 2**30 - resvd) < 0.006, (line, j["peak_reserved_bytes"])
    if fits:
        assert abs(j["step_time_ms"] - float(step)) < 0.051, (line, j["step_time_ms"])
    n_rows += 1
assert n_rows == 8, n_rows
EOF
  then ok "shop: every row as vrsim SCENARIO --set gives it"; else fail "shop: rows differ from single runs"; fi
fi
# a catalog GPU without a price (no dated source for one: lua/hw/prices.lua) still gets its row,
# with no cost and a note saying why, beside a priced one
run shop_noprice shop $SCN $SMALL --tokens 1e7 --only t4,rtx4090 --gpus 1
expect "shop with a GPU that has no price" 0
if grep -qE '^  t4 +1 +- +yes .* - +no price in lua/hw/prices.lua$' "$TMP/shop_noprice.out" &&
   grep -qE '^  rtx4090 +1 +- +yes .* [0-9]+\.[0-9]+; ' "$TMP/shop_noprice.out"; then
  ok "shop: a GPU without a price gets its row, no cost and a note"
else fail "shop: a GPU without a price" "$(cat "$TMP/shop_noprice.out" "$TMP/shop_noprice.err")"; fi
run shop_none shop $SCN --gpus 1;                        expect "shop without --tokens" 2
run shop_gpu shop $SCN --tokens 1e9 --set gpu=h200;      expect "shop with --set gpu=" 2

# ---- --explain (vrsim SCENARIO --explain; the walk through phases needs the timeline) ------------
run explain $SCN $SMALL --explain --out "$TMP/ex"
expect "--explain on a step that fits" 0
for want in "Before the first step" "phase by phase" "  forward (" "  backward (" "  optimizer (" \
            "The largest single allocations" "Why the peak is where it is" "Allocator slack"; do
  grep -qF "$want" "$TMP/explain.out" && ok "--explain: '$want'" || fail "--explain: no '$want'" "$(tail -n 30 "$TMP/explain.out")"
done
run explain_oom $SCN $SMALL --set capacity_gib=4.3 --explain --out "$TMP/ex2"
expect "--explain on a step that does not fit" 3
grep -qF "Why it does not fit" "$TMP/explain_oom.out" && ok "--explain: the OOM explained" \
  || fail "--explain: no OOM explanation" "$(tail -n 20 "$TMP/explain_oom.out")"

# ---- per-point timeout: a point past --point-timeout is stopped and reported; the run goes on --
BUSY=tests/scenarios/slow/busy.lua
run timeout sweep $BUSY --set micro_batch=1,2 -j 2 --point-timeout 0.1 --no-files
expect "sweep: every point past --point-timeout" 0
[ "$(grep -c 'timed out' "$TMP/timeout.out")" = 2 ] && ok "sweep: both points reported timed out" \
  || fail "sweep: timed-out points not reported" "$(cat "$TMP/timeout.out")"
grep -q "0 fit, 0 do not fit, 2 failed" "$TMP/timeout.out" && ok "sweep: timed-out points counted as failed" \
  || fail "sweep: failed count" "$(tail -n 3 "$TMP/timeout.out")"
run timeout_shop shop $BUSY --tokens 1e6 --only h200,a100_80g --point-timeout 0.1
expect "shop: a scenario that cannot load within --point-timeout" 1
grep -q "timed out: still running after 0.1 s" "$TMP/timeout_shop.err" && ok "shop: says it timed out" \
  || fail "shop: timeout message" "$(cat "$TMP/timeout_shop.err")"
run timeout_maxbatch maxbatch $BUSY --point-timeout 0.1
expect "maxbatch: the first probe past --point-timeout" 1
grep -q "timed out: still running after 0.1 s" "$TMP/timeout_maxbatch.err" && ok "maxbatch: says it timed out" \
  || fail "maxbatch: timeout message" "$(cat "$TMP/timeout_maxbatch.err")"
run timeout_bad sweep $SCN $SMALL --set micro_batch=1 --point-timeout 0
expect "sweep: --point-timeout 0 is a usage error" 2

# ---- --resume: an interrupted sweep goes on from its journal, with the same files ---------------
# (60 points: enough that the kill below lands mid-run on a fast machine too)
run full sweep $SCN --set model.size=7b-l1 --set micro_batch=1..15 --set checkpointing=false,true --set seq=128,256 -j 2 --out "$TMP/r_full"
expect "sweep: the reference for --resume" 0
[ ! -e "$TMP/r_full/sweep.journal" ] && ok "sweep: a finished sweep leaves no journal" \
  || fail "sweep: journal left after a finished sweep"
"$VRSIM" sweep $SCN --set model.size=7b-l1 --set micro_batch=1..15 --set checkpointing=false,true --set seq=128,256 -j 1 \
  --out "$TMP/r_cut" >/dev/null 2>&1 &
spid=$!
i=0
while [ $i -lt 600 ]; do
  n=$({ wc -l < "$TMP/r_cut/sweep.journal"; } 2>/dev/null || echo 0)
  [ "$n" -ge 4 ] && break
  [ -e "$TMP/r_cut/sweep.csv" ] && break
  sleep 0.05; i=$((i + 1))
done
kill -9 $spid 2>/dev/null; wait $spid 2>/dev/null
sleep 0.3
done_before=$(($({ wc -l < "$TMP/r_cut/sweep.journal"; } 2>/dev/null || echo 0) - 1))
[ ! -e "$TMP/r_cut/sweep.csv" ] && [ "$done_before" -ge 3 ] && [ "$done_before" -lt 60 ] \
  && ok "sweep: killed mid-run, $done_before points in the journal" \
  || fail "sweep: the interrupted run ($done_before points journaled)" "$(ls "$TMP/r_cut")"
run resume sweep $SCN --set model.size=7b-l1 --set micro_batch=1..15 --set checkpointing=false,true --set seq=128,256 -j 2 --out "$TMP/r_cut" --resume
expect "sweep --resume" 0
grep -q "resuming: $done_before of 60 points already done" "$TMP/resume.err" \
  && ok "sweep --resume: skips the $done_before finished points" || fail "sweep --resume: message" "$(cat "$TMP/resume.err")"
cmp -s "$TMP/r_full/sweep.csv" "$TMP/r_cut/sweep.csv" && cmp -s "$TMP/r_full/sweep.json" "$TMP/r_cut/sweep.json" \
  && ok "sweep --resume: sweep.csv and sweep.json byte-identical to an uninterrupted run" \
  || fail "sweep --resume: files differ" "$(diff "$TMP/r_full/sweep.csv" "$TMP/r_cut/sweep.csv" | head)"
[ ! -e "$TMP/r_cut/sweep.journal" ] && ok "sweep --resume: the journal is gone once the files are written" \
  || fail "sweep --resume: journal left"
printf 'vrsim sweep journal 1 0000000000000000 20 points shard 1/1\n' > "$TMP/r_cut/sweep.journal"
run resume_other sweep $SCN --set model.size=7b-l1 --set micro_batch=1..15 --set checkpointing=false,true --set seq=128,256 --out "$TMP/r_cut" --resume
expect "sweep --resume: a journal of another sweep is refused" 2
grep -q "is from another sweep" "$TMP/resume_other.err" && ok "sweep --resume: says why" || fail "sweep --resume: refusal message" "$(cat "$TMP/resume_other.err")"
run resume_nofiles sweep $SCN $SMALL --set micro_batch=1 --resume --no-files
expect "sweep --resume with --no-files" 2

echo "test_sweep: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
