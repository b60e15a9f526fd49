#!/bin/sh
# FSDP2 units of their own for modules outside the decoder layers (training.zero.units, torchtune's
# custom_sharded_layers; lua/strategies/shard.lua extra_units, docs/parallelism.md): the head run
# once per output chunk is gathered per chunk in forward and again in backward, each chunk's
# gradient reduce-scattered on its own, none of those gathers prefetched; the embedding once each
# way; the published 70B full fine-tune's peak; and what is not modelled refused by name.
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
if [ "$a $b $c $d $e $f" = "32 32 32 4 4 4" ]; then
  ok "lm_head over 8 chunks: 8 all-gathers in forward, 8 in backward, 8 reduce-scatters a micro-batch; the embedding 1 each"
else fail "per-call collectives: got $a $b $c $d $e $f, want 32 32 32 4 4 4"; fi
if [ "$(cnt r 'all_gather lm_head.*')" = 0 ] && [ "$(cnt r 'all_gather layer -1')" = 4 ]; then
  ok "without zero.units the head is the root's: gathered once a micro-batch with it"
else fail "the root's unit without zero.units"; fi
# no chunk's backward gather is prefetched: chunk k's comes after chunk k+1's reduce-scatter
# (one micro-batch's events in op order)
grep -noE '"name":"(all_gather lm_head call [0-9], backward|reduce_scatter lm_head call [0-9])"' "$TMP/u/trace.json" \
  | sed 's/"name":"//; s/"$//' | head -16 | cut -d: -f2 >"$TMP/order"
want=$(for k in 8 7 6 5 4 3 2 1; do printf 'all_gather lm_head call %s, backward\nreduce_scatter lm_head call %s\n' $k $k; done)
if [ "$(cat "$TMP/order")" = "$want" ]; then ok "each chunk's backward: gather, then its own reduce-scatter, before the next chunk's gather"
else fail "backward order of the head's gathers and reduce-scatters" "$(cat "$TMP/order")"; fi
# the peak: the head's gathered weight, its gradient and the reduce-scatter input the chunk after
# it kept, at the last chunk's backward (each 1002 MiB: 128256 x 4096 bf16)
if grep -q "peak reached at op 'lm_head.chunk1.backward'" "$TMP/u.out" \
   && grep -qE "1002.0 MiB +temporaries +reduce-scatter input \(lm_head call 2\)" "$TMP/u.out" \
   && grep -qE "1002.0 MiB +parameters +lm_head.weight \(gathered for backward\)" "$TMP/u.out"; then
  ok "peak at the head's last chunk's backward: its weight, its gradient, the chunk after it's reduce-scatter input"
else fail "the peak with zero.units" "$(sed -n '/breakdown/,/^$/p;/largest/,/^$/p' "$TMP/u.out")"; fi
# the sharded gradient: one a step, each later reduce-scatter added into it (15 a step)
"$VRSIM" "$L8" --set $C8 --set $UNITS --no-files --alloc-trace "$TMP/u.csv" >/dev/null 2>&1
n=$(grep -c ',free_completed,.*accumulate gradient shard lm_head call' "$TMP/u.csv")
if [ "$n" = 30 ]; then ok "the head's gradient shard: 15 reduce-scatters a step added into the one its first makes"
else fail "accumulated head gradient shards: $n, want 30"; fi

# ---- the published row ----------------------------------------------------------------------
P=tests/data/published_memory_70b_full.lua
run p70 "$P" --set model.config=scenarios/configs/llama-3-70b.json --no-files
run p70r "$P" --set model.config=scenarios/configs/llama-3-70b.json --set zero.units= --no-files
if [ "$(peak p70)" = "13170.6" ] && [ "$(peak p70r)" = "18014.4" ]; then
  ok "torchtune 70B full, CPU offload, 8 A100s: 13170.6 MiB with its custom_sharded_layers as units (published 13.9 GiB), 18014.4 in the root's"
else fail "70B full peaks: $(peak p70) and $(peak p70r) MiB, want 13170.6 and 18014.4"; fi

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
run ns "$L8" --set $C8 --set $UNITS --set zero.sync_every_micro_batch=false --no-files
expect "a module run per chunk without gradient sync over micro-batches refused" 2 "sync_every_micro_batch = false"
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
