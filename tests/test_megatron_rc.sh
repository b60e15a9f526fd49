#!/bin/sh
# test_megatron_rc.sh: Megatron-LM's activation recompute under training.parallel.tp_impl =
# "megatron" (lua/strategies/megatron_recompute.lua): the fields; rank 0 against megatron-core's
# own captures of selective (core_attn; core_attn and mlp), full uniform 1 and full block 1 of 2; what each mode keeps
# at the forward's peak, from the simulated breakdowns; the column-parallel all-gathers a
# recomputed layer runs; and what it does not model, refused by name.
#   VRSIM=./vrsim sh tests/test_megatron_rc.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-mgrc.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
O=validation/oracle
# the captures' scenarios: Llama-3-8B's shapes, 2 layers, 512 tokens, bf16, tp 2, eager attention
B=$O/scenarios/llama3_8b_l2_bf16_megatron_tp2
P=training.parallel

# 1. the fields, their defaults and choices
"$VRSIM" fields >"$tmp/fields" 2>&1
sec=$(sed -n '/^training.parallel /,/^$/p' "$tmp/fields")
if printf '%s\n' "$sec" | grep -q '^  megatron_recompute_granularity string .*\[none\]$' \
   && printf '%s\n' "$sec" | grep -A1 '^  megatron_recompute_granularity ' | grep -q 'one of: none, selective, full' \
   && printf '%s\n' "$sec" | grep -A1 '^  megatron_recompute_method ' | grep -q 'one of: uniform, block' \
   && printf '%s\n' "$sec" | grep -q '^  megatron_recompute_num_layers integer ' \
   && printf '%s\n' "$sec" | grep -q '^  megatron_recompute_modules list '
then ok "vrsim fields lists training.parallel.megatron_recompute_granularity (none, selective, full), _method (uniform, block), _num_layers, _modules"
else bad "vrsim fields does not list the megatron_recompute fields" "$(grep megatron_recompute "$tmp/fields")"; fi

# 2. against megatron-core's own runs (capture_megatron_tp.py, committed): every allocation
#    aligned but the named divergences (the softmax kernel's temporary, as without recompute), and
#    the live bytes after the build, after step 1's forward and at its peak within 4 KiB
for k in rc_selective rc_selective_mlp rc_full_uniform rc_full_block; do
  python3 "$O/compare.py" --vrsim "$VRSIM" --expect "$O/expected/llama3_8b_l2_bf16_megatron_tp2_$k.txt" \
    "$O/captures/llama3_8b_l2_bf16_megatron_tp2_$k.jsonl.gz" "${B}_$k.lua" >"$tmp/cmp" 2>&1; rc=$?
  near=$(grep -E 'after build|after forward|step 1 peak' "$tmp/cmp" | awk '
    { d = 0; if (match($0, /\([-+]?[0-9]+ bytes\)/)) d = substr($0, RSTART + 1, RLENGTH - 8) + 0
      if (d < 0) d = -d; if (d <= 4096) n++ } END { print n + 0 }')
  if [ $rc = 0 ] && [ "$near" = 3 ]; then
    ok "oracle $k: vrsim's rank 0 matches megatron-core's capture (4 named divergences; build, forward, step 1 peak within 4 KiB)"
  else bad "oracle $k (exit $rc, $near of 3 milestones within 4 KiB)" "$(tail -14 "$tmp/cmp")"; fi
done

# 3. what each mode keeps: the activations at the peak of step 1's forward (memory.csv, the
#    simulated breakdown) fall from none to selective (the core attention's scores, softmax and
#    repeated keys and values not kept), further with the MLP recomputed too (its input kept, not
#    its intermediates), and further to full uniform (each layer only its input); block with 1 of
#    2 layers sits between none and full uniform; the parameters are the same
run() { "$VRSIM" "$@" --no-suggest --out "$tmp/o" >"$tmp/run.out" 2>&1 || bad "run $*" "$(tail -3 "$tmp/run.out")"; }
fwd_peak() { # the parameters and activations bytes at the forward's largest allocated total
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["phase"] == "forward" && $c["allocated_bytes"] + 0 > m { m = $c["allocated_bytes"] + 0
      p = $c["parameters_bytes"]; a = $c["activations_bytes"] } END { print p, a }' "$tmp/o/memory.csv"
}
run "$B.lua"; set -- $(fwd_peak); p0=$1; a0=$2
run "${B}_rc_selective.lua"; set -- $(fwd_peak); p1=$1; a1=$2
run "${B}_rc_selective_mlp.lua"; set -- $(fwd_peak); p4=$1; a4=$2
run "${B}_rc_full_block.lua"; set -- $(fwd_peak); p2=$1; a2=$2
run "${B}_rc_full_uniform.lua"; set -- $(fwd_peak); p3=$1; a3=$2
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
if [ -n "$a0" ] && [ "$p0" = "$p1" ] && [ "$p0" = "$p2" ] && [ "$p0" = "$p3" ] && [ "$p0" = "$p4" ] \
   && [ "$a1" -lt "$a0" ] && [ "$a4" -lt "$a1" ] && [ "$a3" -lt "$a4" ] && [ "$a2" -lt "$a0" ] && [ "$a3" -lt "$a2" ]; then
  ok "activations at the forward's peak: none $(mib "$a0"), selective core_attn $(mib "$a1"), core_attn and mlp $(mib "$a4"), full block 1 of 2 $(mib "$a2"), full uniform $(mib "$a3") MiB; parameters $(mib "$p0") MiB in each"
else bad "activations at the forward's peak (params $p0 $p1 $p4 $p2 $p3; activations $a0 $a1 $a4 $a2 $a3)"; fi

# 4. the header says which recompute the run simulates
"$VRSIM" "${B}_rc_full_block.lua" --no-files --no-suggest 2>&1 | grep -q "(Megatron-LM's, recompute full block 1)" \
  && "$VRSIM" "${B}_rc_selective.lua" --no-files --no-suggest 2>&1 | grep -q "(Megatron-LM's, recompute selective core_attn)" \
  && ok "the header names the recompute" || bad "the header does not name the recompute"
"$VRSIM" "${B}_rc_full_block.lua" --no-files --no-suggest 2>&1 \
  | grep -q "Megatron's activation recompute (recompute full block 1): .*torch.utils.checkpoint" \
  && ok "a note says the region's host cost is torch's checkpoint's" || bad "no note of the recompute's host cost"

# 5. the timeline of a recomputed layer (full uniform): each column-parallel linear of a layer
#    (linear_qkv, linear_fc1) all-gathers its input three times a step: in forward, in the
#    recomputation, and again inside its backward before its node; selective leaves them at two
"$VRSIM" "${B}_rc_full_uniform.lua" --no-suggest --out "$tmp/u" >/dev/null 2>&1
"$VRSIM" "${B}_rc_selective.lua" --no-suggest --out "$tmp/s" >/dev/null 2>&1
if python3 - "$tmp/u/trace.json" "$tmp/s/trace.json" <<'PY'
import json, sys
def gathers(path):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e["args"].get("step") == 1]
    n = {}
    for e in ev:
        if e["args"].get("kind") != "all_gather" or "decoder.layers." not in e["name"]:
            continue
        lin = e["name"].split(":")[0]
        if lin.endswith(("linear_qkv", "linear_fc1")):
            n.setdefault(lin, []).append(e["cat"])
    return n
u, s = gathers(sys.argv[1]), gathers(sys.argv[2])
print({k: v for k, v in u.items()}, {k: len(v) for k, v in s.items()})
ok = len(u) == 4 and all(sorted(v) == ["backward", "forward", "recompute"] for v in u.values()) \
    and len(s) == 4 and all(sorted(v) == ["backward", "forward"] for v in s.values())
sys.exit(0 if ok else 1)
PY
then ok "full recompute: each layer's linear_qkv and linear_fc1 all-gather in forward, in the recomputation and in backward; selective: forward and backward"
else bad "the column-parallel all-gathers under recompute"; fi

# 6. what is not modelled or not Megatron's: exit 2 naming the field
refused() { # $1 what, $2 the message's pattern, then arguments
  what=$1; pat=$2; shift 2
  "$VRSIM" "$B.lua" --no-files "$@" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$pat" "$tmp/out"; then ok "$what: exit 2, named"
  else bad "$what: exit $rc" "$(head -3 "$tmp/out")"; fi
}
G=parallel.megatron_recompute_granularity
refused "training.checkpointing under megatron points to the field" \
  "training.checkpointing (torch.utils.checkpoint; .*set $P.megatron_recompute_granularity" --set checkpointing=true
refused "recompute under DTensor's tp" "$P.megatron_recompute_granularity is Megatron's activation recompute: it needs $P.tp_impl" \
  --set parallel.tp_impl=dtensor --set $G=full
refused "full without a method" "$P.megatron_recompute_method is required with megatron_recompute_granularity = \"full\"" \
  --set $G=full --set parallel.megatron_recompute_num_layers=1
refused "full without num_layers" "$P.megatron_recompute_num_layers is required" --set $G=full --set parallel.megatron_recompute_method=block
refused "selective with num_layers" "megatron_recompute_num_layers with megatron_recompute_granularity = \"selective\"" \
  --set $G=selective --set parallel.megatron_recompute_num_layers=1
refused "num_layers past the model's layers" "megatron_recompute_num_layers = 3: must be between 1 and the 2 layers" \
  --set $G=full --set parallel.megatron_recompute_method=block --set parallel.megatron_recompute_num_layers=3
refused "uniform chunks that do not divide the layers" "megatron_recompute_num_layers = 2 with method \"uniform\" does not divide the 3 layers" \
  --set model.layers=3 --set $G=full --set parallel.megatron_recompute_method=uniform --set parallel.megatron_recompute_num_layers=2
refused "recompute_modules moe_act" "megatron_recompute_modules: 'moe_act' is not modelled" --set $G=selective --set parallel.megatron_recompute_modules=core_attn,moe_act
refused "recompute_modules layernorm" "megatron_recompute_modules: 'layernorm' is not modelled" --set $G=selective --set parallel.megatron_recompute_modules=layernorm
refused "a module Megatron does not know" "'attn' is not a module Megatron recomputes" --set $G=selective --set parallel.megatron_recompute_modules=attn
refused "an unknown granularity" "$P.megatron_recompute_granularity: 'partial' is not one of: none, selective, full" --set $G=partial
refused "a method without full recompute" "$P.megatron_recompute_method has no effect on this run" --set parallel.megatron_recompute_method=block

echo "test_megatron_rc: $pass passed, $fail failed"
[ "$fail" = 0 ]
