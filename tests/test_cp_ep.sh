#!/bin/sh
# Context parallelism (lua/strategies/cp.lua): each rank runs its s/cp tokens, attention is torch's
# ring attention with its KV exchange on the timeline, FSDP2 shards over dp_shard * cp, and what
# ring attention cannot take is refused by name.
#
#   VRSIM=./vrsim sh tests/test_cp_ep.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-cpep.XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }
run() { _n=$1; shift; "$VRSIM" "$@" >"$TMP/$_n.out" 2>"$TMP/$_n.err"; RC=$?; }
expect() {
  if [ "$RC" -ge 128 ]; then fail "$1: crashed ($RC)" "$(tail -3 "$TMP/$_n.err")"; return; fi
  if [ "$RC" -eq "$2" ] && cat "$TMP/$_n.out" "$TMP/$_n.err" | grep -qE -- "$3"; then ok "$1"
  else fail "$1 (exit $RC, want $2 and /$3/)" "$(cat "$TMP/$_n.out" "$TMP/$_n.err" | head -5)"; fi
}
jf() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
# a one-layer LLaMA-2-7B (32 heads of 128, no GQA) on two H100s, its sequence split over cp 2
cat >"$TMP/cp.lua" <<'EOS'
return { hardware = { gpu = "h100", count = 2 }, model = { size = "7b-l1" },
         training = { seq = 4096, steps = 2, precision = "bf16", parallel = { cp = 2 } } }
EOS

# ---- the knob is listed ----------------------------------------------------------------------
"$VRSIM" fields | sed -n '/^training.parallel /,/^$/p' >"$TMP/fields"
if grep -q "^  cp_rotate_method .*allgather" "$TMP/fields"; then ok "vrsim fields lists training.parallel.cp_rotate_method"
else fail "vrsim fields lacks cp_rotate_method" "$(cat "$TMP/fields")"; fi

# ---- activations: each rank holds its s/cp tokens' ---------------------------------------------
# the same two GPUs as FSDP2 over dp_shard 2 (each rank the whole 8192 tokens) and as cp 2 (FSDP2
# over dp_shard * cp, each rank 4096 of them): the activations at the peak halve
"$VRSIM" "$TMP/cp.lua" --no-files --json --set seq=8192 --set parallel.cp=1 --set parallel.dp_shard=2 >"$TMP/dp.json" 2>&1
"$VRSIM" "$TMP/cp.lua" --no-files --json --set seq=8192 >"$TMP/cp2.json" 2>&1
a1=$(jf "$TMP/dp.json" 'd["breakdown_at_peak"]["activations"]'); a2=$(jf "$TMP/cp2.json" 'd["breakdown_at_peak"]["activations"]')
if python3 -c "import sys; r = $a2 / $a1; sys.exit(0 if 0.45 <= r <= 0.55 else 1)"
then ok "cp 2: activations at the peak $a2 bytes, $a1 without (about 1/cp)"
else fail "cp 2 does not halve the activations: $a2 against $a1"; fi
# tokens: the cp group shares one sequence, so each GPU's share is s/cp and the job's is one
# batch of 8192 a step
if [ "$(jf "$TMP/cp2.json" 'd["strategy"]')" = fsdp2 ] \
   && python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
want = 8192 / (d['step_time_ms'] / 1e3)
sys.exit(0 if abs(d['tokens_per_s'] - want) <= 0.01 * want else 1)" "$TMP/cp2.json"
then ok "cp 2: FSDP2 over dp_shard * cp; the job's tokens/s is one 8192-token sequence a step"
else fail "cp 2: strategy or tokens/s" "$(grep -E '"strategy"|tokens_per_s' "$TMP/cp2.json")"; fi

# ---- ring attention's KV all-gather: on the compute stream, at its size -------------------------
# k and v of the rank's 2048 tokens (32 heads x 128, bf16) are 16 MiB each: the cat is 32 MiB,
# the gathered buffer cp x 32 MiB, in forward and again in backward
"$VRSIM" "$TMP/cp.lua" --out "$TMP/o" --alloc-trace "$TMP/cp.csv" >"$TMP/o.out" 2>&1
got=$(awk -F, '$3 == "alloc" && $7 ~ /layers.0.self_attn.cp_kv_all_gather$/ { print $5; exit }' "$TMP/cp.csv")
python3 - "$TMP/o/trace.json" >"$TMP/ev" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
for e in ev:
    if 'dur' in e and e.get('name', '').startswith('layers.0.self_attn.cp_kv_all_gather'):
        print(e['name'], e.get('tid'), e['dur'])
P
if [ "$got" = 67108864 ] && grep -q "^layers.0.self_attn.cp_kv_all_gather 0 " "$TMP/ev" \
   && grep -q "^layers.0.self_attn.cp_kv_all_gather (backward).backward 0 " "$TMP/ev"
then ok "the KV all-gather: 67108864 bytes gathered, on the compute stream's timeline in forward and backward"
else fail "the KV all-gather: $got bytes" "$(cat "$TMP/ev")"; fi
grep -q "context parallelism over 2 ranks (torch's ring attention, rotate method allgather" "$TMP/o.out" \
  && ok "the notes state context parallelism and its rotate method" \
  || fail "no context-parallelism note" "$(grep notes "$TMP/o.out")"
# alltoall: no all-gather, the k, v passed on cp - 1 times (cp 4: three sends a layer)
"$VRSIM" "$TMP/cp.lua" --set count=4 --set parallel.cp=4 --set parallel.cp_rotate_method=alltoall \
  --out "$TMP/a" >"$TMP/a.out" 2>&1
n=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
names = {e['name'] for e in ev if 'dur' in e}
print(sum(1 for k in names if k.startswith('layers.0.self_attn.cp_kv_send_step')),
      sum(1 for k in names if 'all_gather' in k and 'self_attn.cp' in k))" "$TMP/a/trace.json")
if [ "$n" = "3 0" ]; then ok "cp_rotate_method alltoall at cp 4: three k, v sends a layer, no all-gather"
else fail "alltoall at cp 4: (sends, all-gathers) = $n"; fi

# ---- with tensor parallelism: attention on heads/tp, the sequence s/cp/tp between blocks --------
"$VRSIM" "$TMP/cp.lua" --no-files --json --set count=4 --set parallel.tp=2 >"$TMP/tpcp.json" 2>"$TMP/tpcp.err"
if python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
want = 4096 / (d['step_time_ms'] / 1e3)
sys.exit(0 if d['fits'] and abs(d['tokens_per_s'] - want) <= 0.01 * want else 1)" "$TMP/tpcp.json"
then ok "tp 2 x cp 2: runs; the job's tokens/s is one 4096-token sequence a step"
else fail "tp 2 x cp 2" "$(head -3 "$TMP/tpcp.err")"; fi

# ---- refused by name ---------------------------------------------------------------------------
run eager "$TMP/cp.lua" --no-files --set attention=eager
expect "cp with eager attention: exit 2 naming it" 2 'training.parallel.cp = 2 with attention = "eager": ring attention replaces F.scaled_dot_product_attention'
run odd "$TMP/cp.lua" --no-files --set seq=4098
expect "a sequence the head-tail balancer cannot cut: exit 2" 2 "training.seq = 4098 is not a multiple of 2 \\* cp = 4"
run rot "$TMP/cp.lua" --no-files --set parallel.cp_rotate_method=ring
expect "an unknown rotate method: exit 2" 2 "unknown rotate method 'ring' \\(one of: allgather, alltoall\\)"
run ddp "$TMP/cp.lua" --no-files --set strategy=ddp
expect "cp beside DDP: exit 2 (torchtitan folds cp into FSDP)" 2 'training.strategy = "ddp" does not match training.parallel'
run inert "$TMP/cp.lua" --no-files --set parallel.cp=1 --set parallel.cp_rotate_method=alltoall
expect "cp_rotate_method without cp: a named note" 0 "training.parallel.cp_rotate_method = alltoall has no effect on this run: cp = 1"
run pp "$TMP/cp.lua" --no-files --set count=4 --set parallel.pp=2 --set layers=4
expect "cp beside a pipeline: exit 2" 2 "cp > 1 with pipeline parallelism is not modelled"

echo "test_cp_ep: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
