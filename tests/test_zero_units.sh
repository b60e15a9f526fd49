#!/bin/sh
# FSDP2 units of their own for modules outside the decoder layers (training.zero.units, torchtune's
# custom_sharded_layers; lua/strategies/shard.lua extra_units, docs/parallelism.md): the head run
# once per output chunk is gathered per chunk in forward and again in backward, none of those
# gathers prefetched, the chunks' gradients summed in autograd's input buffer and reduce-scattered
# once, by the first chunk's post-backward (as the oracle capture
# llama2_7b_l2_fsdp2_w2_bf16_chunked_units shows); the embedding once each way; the published 70B
# full fine-tune's peak; and what is not modelled refused by name.
#
#   VRSIM=./vrsim sh tests/test_zero_units.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-units.XXXXXX") || exit 1
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
peak() { sed -n 's/^  peak  *\([0-9.]*\) MiB.*/\1/p' "$TMP/$1.out" | head -1; }
# Llama 3 8B cut to two layers on four H100s, torchtune's chunked output (8 chunks), two micro-batches
L8="$TMP/l8.lua"
cat >"$L8" <<'EOS'
return { hardware = { gpu = "h100", count = 4 }, model = { layers = 2 },
         training = { micro_batch = 1, seq = 2048, precision = "bf16", optimizer = "adamw", strategy = "fsdp2",
                      steps = 2, loss = "chunked", grad_accum = 2 } }
EOS
C8=model.config=scenarios/configs/llama-3-8b.json
UNITS=zero.units=model.embed_tokens,lm_head

# ---- the knob is listed ------------------------------------------------------------------------
"$VRSIM" fields >"$TMP/fields"
if grep -qE "^  units +list of strings .*custom_sharded_layers" "$TMP/fields" && grep -A1 -E "^  units " "$TMP/fields" | grep -q "read by: fsdp2"; then
  ok "vrsim fields lists training.zero.units (read by fsdp2)"
else fail "vrsim fields lacks training.zero.units" "$(grep -A1 units "$TMP/fields")"; fi

# ---- the gathers and reduce-scatters, per call ------------------------------------------------
"$VRSIM" "$L8" --set $C8 --set $UNITS --out "$TMP/u" >"$TMP/u.out" 2>&1
"$VRSIM" "$L8" --set $C8 --out "$TMP/r" >"$TMP/r.out" 2>&1
# (2 steps x 2 micro-batches; trace.json: one event a line)
cnt() { grep -cE "\"name\":\"$2\"" "$TMP/$1/trace.json"; }
a=$(cnt u 'all_gather lm_head call [1-8]'); b=$(cnt u 'all_gather lm_head call [1-8], backward')
c=$(cnt u 'reduce_scatter lm_head call [1-8]'); d=$(cnt u 'all_gather model.embed_tokens')
e=$(cnt u 'all_gather model.embed_tokens, backward'); f=$(cnt u 'reduce_scatter model.embed_tokens')
g=$(cnt u 'add lm_head call [1-7] gradients into the input buffer')
if [ "$a $b $c $d $e $f $g" = "32 32 4 4 4 4 28" ]; then
  ok "lm_head over 8 chunks: 8 all-gathers in forward, 8 in backward, 7 chunks' gradients added into the 8th's, 1 reduce-scatter a micro-batch; the embedding 1 each"
else fail "per-call collectives: got $a $b $c $d $e $f $g, want 32 32 4 4 4 4 28"; fi
if [ "$(cnt r 'all_gather lm_head.*')" = 0 ] && [ "$(cnt r 'all_gather layer -1')" = 4 ]; then
  ok "without zero.units the head is the root's: gathered once a micro-batch with it"
else fail "the root's unit without zero.units"; fi
# each chunk's backward: its gather (never prefetched by the chunk before), its gradient added,
# its reshard; the one reduce-scatter after the first chunk's (one micro-batch's events in op order)
grep -noE '"name":"(all_gather lm_head call [0-9], backward|add lm_head call [0-9] gradients into the input buffer|reduce_scatter lm_head call [0-9])"' \
  "$TMP/u/trace.json" | sed 's/"name":"//; s/"$//' | head -16 | cut -d: -f2 >"$TMP/order"
want=$( (printf 'all_gather lm_head call 8, backward\n'
         for k in 7 6 5 4 3 2 1; do printf 'add lm_head call %s gradients into the input buffer\nall_gather lm_head call %s, backward\n' $((k + 1)) $k; done) \
       | grep -v 'add lm_head call 8' ; printf 'add lm_head call 1 gradients into the input buffer\nreduce_scatter lm_head call 1\n')
if [ "$(cat "$TMP/order")" = "$want" ]; then ok "each chunk's backward: its own gather after the chunk before it, one reduce-scatter after the last"
else fail "backward order of the head's gathers and reduce-scatter" "$(cat "$TMP/order")"; fi
# the embedding's token ids need no gradient: its post-backward runs in the root's final
# callback, after the root's own (its reduce-scatter after the root's)
o=$(grep -noE '"name":"reduce_scatter (layer -1|model.embed_tokens)"' "$TMP/u/trace.json" | head -2 | sed 's/.*reduce_scatter //; s/"$//' | tr '\n' ,)
if [ "$o" = "layer -1,model.embed_tokens," ]; then ok "the embedding's post-backward in the root's final callback, after the root's"
else fail "reduce-scatter order of the root and the embedding: $o"; fi
# the peak: the head's gathered weight, the input buffer's sum of chunks 8..2 and chunk 1's own
# gradient, at the last chunk's backward (each 1002 MiB: 128256 x 4096 bf16)
if grep -q "peak reached at op 'lm_head.chunk1.backward'" "$TMP/u.out" \
   && [ "$(grep -cE "1002.0 MiB +gradients +grad:lm_head.weight \(gathered\)" "$TMP/u.out")" = 2 ] \
   && grep -qE "1002.0 MiB +parameters +lm_head.weight \(gathered for backward\)" "$TMP/u.out"; then
  ok "peak at the head's last chunk's backward: its weight, the summed gradients of the chunks after it, its own"
else fail "the peak with zero.units" "$(sed -n '/breakdown/,/^$/p;/largest/,/^$/p' "$TMP/u.out")"; fi
# the sharded gradient: the second micro-batch's reduce-scatter added into the first's, once a step
"$VRSIM" "$L8" --set $C8 --set $UNITS --no-files --alloc-trace "$TMP/u.csv" >/dev/null 2>&1
n=$(grep -c ',free_completed,.*accumulate gradient shard lm_head call 1' "$TMP/u.csv")
if [ "$n" = 2 ]; then ok "the head's gradient shard: the second micro-batch's added into the first's"
else fail "accumulated head gradient shards: $n, want 2"; fi

# ---- the published row ----------------------------------------------------------------------
P=tests/data/published_memory_70b_full.lua
run p70 "$P" --set model.config=scenarios/configs/llama-3-70b.json --no-files
run p70r "$P" --set model.config=scenarios/configs/llama-3-70b.json --set zero.units= --no-files
# (torchtune's own decoder, model.code: its 4 MiB RoPE cache among the rest)
if [ "$(peak p70)" = "13173.7" ] && [ "$(peak p70r)" = "18129.5" ]; then
  ok "torchtune 70B full, CPU offload, 8 A100s: 13173.7 MiB with its custom_sharded_layers as units (published 13.9 GiB), 18129.5 in the root's"
else fail "70B full peaks: $(peak p70) and $(peak p70r) MiB, want 13173.7 and 18129.5"; fi

# ---- refusals ---------------------------------------------------------------------------------
run z3 "$L8" --set $C8 --set $UNITS --set strategy=zero3 --no-files
expect "zero.units under ZeRO-3 refused" 2 "training.zero.units .*not modelled under strategy zero3"
run nope "$L8" --set $C8 --set zero.units=model.nope --no-files
expect "a path that is no module refused" 2 "'model.nope' is not a module of the model"
run inl "$L8" --set $C8 --set zero.units=model.layers.0.mlp --no-files
expect "a module inside a decoder layer refused" 2 "'model.layers.0.mlp' is inside a decoder layer"
run holds "$L8" --set $C8 --set zero.units=model --no-files
expect "a module holding decoder layers refused" 2 "'model' holds decoder layers"
run tied "$L8" --set model.config=scenarios/configs/llama-3.2-1b.json --set zero.units=lm_head --no-files
expect "tied embeddings refused" 2 "'lm_head' shares its weight with another module \(tied embeddings\)"
run cce "$L8" --set $C8 --set $UNITS --set loss=cce --no-files
expect "a head whose weight a fused loss reads refused" 2 "'lm_head' never runs its forward"
run raf "$L8" --set $C8 --set $UNITS --set zero.raf=false --no-files
expect "a module run per chunk with raf = false refused" 2 "'lm_head' runs 8 times per forward; with raf = false"
run ns "$L8" --set $C8 --set $UNITS --set zero.sync_every_micro_batch=false --out "$TMP/ns"
if [ "$RC" = 0 ] && [ "$(cnt ns 'reduce_scatter lm_head call 1')" = 2 ] && [ "$(cnt ns 'to_accumulated_grad lm_head call 1')" = 2 ]; then
  ok "without gradient sync: the head's summed gradients kept unsharded after the first micro-batch, reduce-scattered after the last"
else fail "zero.units with sync_every_micro_batch = false (exit $RC)" "$(head -5 "$TMP/ns.err")"; fi
run one "$L8" --set $C8 --set $UNITS --set zero.raf=false --set loss=full --no-files
expect "one call per forward with raf = false runs" 0 "peak "
# torchtune's recipe: custom_sharded_layers read as zero.units; the 1B's tied head refused
D=tests/data/recipes
sed 's/^fsdp_reshard_after_forward: False/fsdp_reshard_after_forward: False\ncustom_sharded_layers: [tok_embeddings, output]/' \
  $D/torchtune_1B_full_distributed.yaml >"$TMP/ttcsl.yaml"
run tts "$TMP/ttcsl.yaml" --gpu h100 --gpus 4 --print-scenario
expect "torchtune custom_sharded_layers read as zero.units" 0 'units = \{ "model.embed_tokens", "lm_head" \}'
run ttr "$TMP/ttcsl.yaml" --gpu h100 --gpus 4 --no-files
expect "torchtune custom_sharded_layers on the tied 1B refused" 2 "shares its weight with another module \(tied embeddings\)"

echo "test_zero_units: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
