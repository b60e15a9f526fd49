#!/bin/sh
# test_streams.sh: data-parallel timing on the side streams, read from trace.json.
#
#   VRSIM=./vrsim sh tests/test_streams.sh
#
# - DDP's all-reduce and ZeRO-2's reduce-scatter wait for the copy that fills their bucket on
#   the compute stream (the CUDA event the frameworks record), in every step;
# - FSDP2's CPU optimizer step takes longer with fewer CPU threads per rank (training.cpu_threads)
#   and the trace shows it.
# Prints one line per check and exits non-zero if any failed.
set -u

VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_streams: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-streams.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

cat >"$TMP/dp.lua" <<'EOF'
return {
  hardware = { gpu = "h200", count = 2, interconnect = "nvlink" },
  model = { arch = "llama2", size = "7b-l2" },
  training = { micro_batch = 1, seq = 512, precision = "bf16", strategy = "ddp", steps = 3 },
}
EOF

# bucket_waits STRATEGY COPY_PREFIX COLLECTIVE_PREFIX: every collective starts after the copy
# that precedes it (same bucket, same step) has ended
bucket_waits() {
  out=$TMP/$1
  "$VRSIM" "$TMP/dp.lua" --set "training.strategy=$1" --out "$out" >"$TMP/$1.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then fail "$1: exit $rc" "$(tail -n 5 "$TMP/$1.log")"; return; fi
  msg=$(python3 - "$out/trace.json" "$2" "$3" <<'PY' 2>&1
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
copy, coll = sys.argv[2], sys.argv[3]
copies = sorted((e for e in ev if e["name"].startswith(copy)), key=lambda e: e["ts"])
colls = sorted((e for e in ev if e["name"].startswith(coll)), key=lambda e: e["ts"])
if not colls or len(colls) != len(copies):
    print("%d collectives, %d copies" % (len(colls), len(copies))); sys.exit(1)
bad = [(c["name"], c["ts"], k["ts"] + k["dur"]) for c, k in zip(colls, copies)
       if c["ts"] + 1e-3 < k["ts"] + k["dur"]]
if bad:
    print("starts before its bucket is filled: %s at %.1f us, copy ends %.1f us" % bad[0]); sys.exit(1)
print(len(colls))
PY
)
  if [ $? -eq 0 ]; then ok "$1: $msg collectives each start after their bucket's copy ends"
  else fail "$1: collective ordering" "$msg"; fi
}
bucket_waits ddp "copy grads into bucket" "all_reduce bucket"
bucket_waits zero2 "copy grads of layer" "reduce_scatter layer"

# FSDP2 CPU offload: the CPU AdamW step scales with the threads each rank has
cpu_step_ms() {
  "$VRSIM" "$TMP/dp.lua" --set training.strategy=fsdp2 --set zero.offload_param=cpu --set zero.offload_optimizer=cpu \
    --set "training.cpu_threads=$1" --out "$TMP/fsdp$1" >"$TMP/fsdp$1.log" 2>&1 || { echo "exit $?"; return 1; }
  python3 - "$TMP/fsdp$1/trace.json" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
      if e.get("ph") == "X" and e["name"].startswith("torch AdamW step on CPU")]
print("%.3f" % (max(e["dur"] for e in ev) / 1e3) if ev else "none")
PY
}
t4=$(cpu_step_ms 4); t8=$(cpu_step_ms 8); t16=$(cpu_step_ms 16)
if python3 -c 'import sys; a, b, c = map(float, sys.argv[1:]); sys.exit(0 if a > b > c > 0 else 1)' "$t4" "$t8" "$t16" 2>/dev/null
then ok "fsdp2 offload: CPU AdamW step $t4 / $t8 / $t16 ms at 4 / 8 / 16 threads per rank"
else fail "fsdp2 offload: CPU AdamW step at 4 / 8 / 16 threads: $t4 / $t8 / $t16 ms (expected decreasing)"; fi

echo "test_streams: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
