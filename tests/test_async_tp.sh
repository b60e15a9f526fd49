#!/bin/sh
# test_async_tp.sh: training.parallel.async_tp, torchtitan's async tensor parallelism (Inductor's
# micro_pipeline_tp pass, lua/strategies/tp.lua): what it needs (tp > 1 and torch.compile, as
# torchtitan's maybe_enable_async_tp), the step it shortens (the compiled layers' sequence
# all-gathers and reduce-scatters fused with their GEMMs, the peer copies beside them on symmetric
# memory's stream), and the memory it changes (no chunk cats; the gathered input still saved; the
# symmetric-memory workspace, outside the caching allocator, in a note).
#   VRSIM=./vrsim sh tests/test_async_tp.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-atp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# Llama 2 7B's shapes, 4 layers, tp 2 on one node, compiled, 2 sequences of 2048
cat > "$tmp/l.lua" <<'EOF'
return { hardware = { gpu = "h100_sxm", count = 2, gpus_per_node = 2 }, model = { arch = "llama2", size = "7b-l4" },
  training = { micro_batch = 2, seq = 2048, precision = "bf16", steps = 2, compile = true, parallel = { tp = 2 } } }
EOF

# 1. the field is listed; what it needs is refused by name (exit 2)
if "$VRSIM" fields 2>/dev/null | sed -n '/^training.parallel /,/^$/p' | grep -q "^  async_tp  *boolean"; then ok "vrsim fields lists training.parallel.async_tp"
else bad "vrsim fields does not list training.parallel.async_tp"; fi
refused() { # $1 what, $2 the message's pattern, then the --set arguments
  what=$1; pat=$2; shift 2
  "$VRSIM" "$tmp/l.lua" --no-files "$@" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$pat" "$tmp/out"; then ok "$what: exit 2, named"
  else bad "$what: exit $rc" "$(head -3 "$tmp/out")"; fi
}
refused "async_tp without tensor parallelism" "training.parallel.async_tp = true needs tensor parallelism" \
  --set training.parallel.async_tp=true --set training.parallel.tp=1 --set hardware.count=1
refused "async_tp without torch.compile" "training.parallel.async_tp = true needs training.compile" \
  --set training.parallel.async_tp=true --set training.compile=false
refused "async_tp not a boolean" "training.parallel.async_tp must be true or false" --set training.parallel.async_tp=2

# 2. time: plain tp runs each compiled layer's sequence all-gathers and reduce-scatters (and their
#    chunk cats) on the compute stream; async tp runs the peer copies beside the GEMMs that read
#    (or write) them. The step is shorter, by no more than that exposed time (it cannot beat the
#    GEMMs alone), and every peer copy overlaps a GEMM of its layer on the compute stream. (Not
#    "most of" it: the fused collectives are extern kernels, so the compiled backward's Inductor
#    kernels group around them differently from plain tp's, 0.38 ms more backward here; no
#    async-TP run has been measured to say how much of the exposed time a step gets back.)
for a in false true; do
  "$VRSIM" "$tmp/l.lua" --out "$tmp/o_$a" --set training.parallel.async_tp=$a >"$tmp/err" 2>&1 \
    || bad "run async_tp=$a" "$(head -3 "$tmp/err")"
done
got=$(python3 - "$tmp/o_false" "$tmp/o_true" <<'EOF'
import json, sys
def load(d):
    ev = [e for e in json.load(open(d + "/trace.json"))["traceEvents"] if e.get("ph") == "X" and e["args"]["step"] == 1]
    return ev, json.load(open(d + "/summary.json"))["step_time_ms"]
plain, tp = load(sys.argv[1])
fused, ta = load(sys.argv[2])
# the fusable collectives of plain tp: the layers' attention and MLP input all-gathers and their
# o_proj / down_proj reduce-scatters, with their chunk cats, forward (us)
def fusable(e):
    n = e["name"]
    return e["cat"] == "forward" and n.startswith("layers.") and (": all_gather input" in n or ": reduce_scatter" in n)
exposed = sum(e["dur"] for e in plain if fusable(e)) / 1e3
saved = tp - ta
# the peer copies (stream 5) each overlap a GEMM of the compute stream
gemms = [e for e in fused if e["tid"] == 0 and e["args"]["kind"] == "mm"]
peers = [e for e in fused if e["tid"] == 5]
overlap = all(any(g["ts"] < p["ts"] + p["dur"] and p["ts"] < g["ts"] + g["dur"] for g in gemms) for p in peers)
print(f"{tp:.3f} {ta:.3f} {exposed:.3f} {saved:.3f} {len(peers)} {overlap}")
EOF
)
set -- $got
if python3 -c "import sys; tp,ta,ex,sv=map(float,sys.argv[1:5]); sys.exit(not (0 < sv <= ex))" "$@" && [ "$5" -gt 0 ] && [ "$6" = True ]; then
  ok "async tp: step $2 ms against plain tp's $1 ms, shorter by $4 ms of the $3 ms the fusable collectives and chunk cats took; $5 peer copies, each beside a GEMM"
else bad "async tp: (plain step, async step, exposed, saved, peer copies, each beside a GEMM) $*"; fi

# 3. memory: the fused ops make no chunk cats (the gathered input is A_flat's view, the
#    reduce-scatter's partials the GEMM's output); the partitioner saves what it saved (it chose on
#    the unfused graph: the gathered input stays saved); the workspace is two (b, s/tp, h) bf16
#    chunks (2 x 2 x 1024 x 4096 x 2 bytes), said in a note, outside the peaks
got=$(python3 - "$tmp/o_false" "$tmp/o_true" <<'EOF'
import json, sys, re
def load(d):
    ev = [e for e in json.load(open(d + "/trace.json"))["traceEvents"] if e.get("ph") == "X" and e["args"]["step"] == 1]
    s = json.load(open(d + "/summary.json"))
    cats = sum(1 for e in ev if e["cat"] == "forward" and e["name"].startswith("layers.") and "chunk cat" in e["name"])
    part = [n for n in s["notes"] if n.startswith("torch.compile: the partitioner saves")][0]
    ws = [n for n in s["notes"] if "symmetric-memory workspace" in n]
    ws = int(re.search(r"\((\d+) bytes\)", ws[0]).group(1)) if ws else 0
    return cats, re.search(r"([0-9.]+ MiB)", part).group(1), "fused_all_gather_matmul input [2x2048x4096]" in part, ws
print(*load(sys.argv[1]), *load(sys.argv[2]))
EOF
)
set -- $got
if [ "$1" -gt 0 ] && [ "$5" = 0 ] && [ "$6" = 0 ] && [ "$2 $3" = "$7 $8" ] && [ "$9" = True ] && [ "${10}" = 33554432 ]; then
  ok "async tp memory: no forward chunk cats ($1 without), the same saved set ($2 $3), the gathered input saved, a 32 MiB symmetric-memory workspace noted"
else bad "async tp memory: (chunk cats, saved MiB, gathered saved, workspace) plain then async: $*"; fi

# 4. a checkpointed compiled layer saves only its input (the partitioner's MUST_RECOMPUTE), fused
#    or not: forward ends holding the same activations
endfwd() {
  "$VRSIM" "$tmp/l.lua" --out "$tmp/c_$1" --set checkpointing=true --set training.checkpoint_impl=wrapper \
    --set training.parallel.async_tp=$1 >"$tmp/err" 2>&1 || { echo "exit $?"; return; }
  python3 -c 'import csv, sys
f = [r for r in csv.DictReader(open(sys.argv[1])) if r["phase"] == "forward"]
print(f[-1]["activations_bytes"])' "$tmp/c_$1/memory.csv"
}
a=$(endfwd false); b=$(endfwd true)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "checkpointed: forward ends holding $a bytes of activations, fused or not"
else bad "checkpointed: forward ends holding $a bytes unfused, $b fused"; fi

echo "test_async_tp: $pass passed, $fail failed"
[ $fail = 0 ]
