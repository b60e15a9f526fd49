#!/bin/sh
# training.transformers (lua/strategies/tf_version.lua): the causal-LM loss and the rotary tables
# of the transformers release the run used. Before 4.46 the model's forward upcasts the logits (the head's bf16
# logits are dropped at once); before 4.49 the loss copies logits[..., :-1, :] into a second fp32
# tensor, whose slice backward fills a full-size fp32 gradient; a family newer than the release
# is refused, and so is a release vrsim has not read.
#
#   VRSIM=./vrsim sh tests/test_tfversion.sh
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# Llama 3.2 1B cut to 2 layers, micro-batch 2 x 1024: the loss's (2, 1024, 128256) logits
# dominate. B, S, V below are its shapes.
B=2; S=1024; V=128256
# (the configs are copied beside the scenarios: a scenario reads a config inside its folder)
cp scenarios/configs/*.json "$tmp/"
cat > "$tmp/l.lua" <<EOS
return { hardware = { gpu = "h200" },
  model = { config = "llama-3.2-1b.json", layers = 2 },
  training = { micro_batch = 2, seq = 1024, precision = "bf16", build = "cast", steps = 2 } }
EOS
FULL32=$((B * S * V * 4)); SHIFT32=$((B * (S - 1) * V * 4)); FULL16=$((B * S * V * 2))
trace() { "$VRSIM" "$tmp/l.lua" --no-files --set training.transformers=$1 --alloc-trace "$tmp/t$1.csv" >"$tmp/o$1" 2>&1; }
# bytes of the first action $2 named $3 in trace $1 (the first step)
first() { awk -F, -v a="$2" -v n="$3" '$3 == a && $7 == n { print $5; exit }' "$tmp/t$1.csv"; }
# live bytes right after the first step's log_softmax output is allocated
at_lsm() {
  awk -F, 'NR > 1 { if ($3 == "alloc") l += $5; else if ($3 == "free_completed") l -= $5
           if ($3 == "alloc" && $7 == "log_softmax") { printf "%.0f\n", l; exit } }' "$tmp/t$1.csv"
}
for v in 5.25.0 4.48.0 4.46.0 4.45.0 4.44.2 4.36.0; do trace $v; done

# 1. 4.44.2 (the model's forward upcasts): logits.float makes the fp32 logits and frees the
#    head's bf16 ones; shift_logits.contiguous is a second fp32 copy one position shorter; the
#    slice's backward allocates a zero-filled gradient of the whole fp32 logits, the cast's
#    backward the bf16 gradient
a=$(first 4.44.2 alloc logits.float); f=$(first 4.44.2 free_completed logits.float)
c=$(first 4.44.2 alloc shift_logits.contiguous); g=$(first 4.44.2 alloc "logits[...; :-1; :].backward")
k=$(first 4.44.2 alloc logits.float.backward)
if [ "$a" = $FULL32 ] && [ "$f" = $FULL16 ] && [ "$c" = $SHIFT32 ] && [ "$g" = $FULL32 ] && [ "$k" = $FULL16 ]; then
  ok "4.44.2: fp32 logits $a B (bf16 $f B freed), shifted copy $c B, slice backward $g B, cast back $k B"
else bad "4.44.2 loss path: logits.float $a (want $FULL32), bf16 freed $f (want $FULL16), shift $c (want $SHIFT32), slice bwd $g (want $FULL32), cast bwd $k (want $FULL16)"; fi
for v in 4.36.0 4.45.0; do
  if [ "$(first $v free_completed logits.float)" = $FULL16 ] && [ "$(first $v alloc shift_logits.contiguous)" = $SHIFT32 ]; then
    ok "$v: the model upcasts (bf16 logits freed at the cast) and the loss copies the shifted logits"
  else bad "$v: not the model-side upcast with the shifted copy"; fi
done

# 2. 4.46.0 and 4.48.0 (ForCausalLMLoss with the shift): the output keeps the bf16 logits, so at
#    log_softmax the extra fp32 copy is live beside them: exactly 4 B V (S - 2) bytes more than
#    5.25's (the shifted copy, less one row of log-probabilities, less 5.25's longer labels: 8 B)
base=$(at_lsm 5.25.0)
for v in 4.46.0 4.48.0; do
  d=$(( $(at_lsm $v) - base ))
  want=$((4 * B * V * (S - 2) - 8 * B))
  if [ "$d" = $want ] && [ -z "$(first $v free_completed logits.float)" ]; then
    ok "$v: live at log_softmax $d B above 5.25's (the shifted fp32 copy, bf16 logits kept)"
  else bad "$v: live at log_softmax $d B above 5.25's, want $want (bf16 freed at the cast: $(first $v free_completed logits.float))"; fi
done
if grep -q "peak reached at op 'nll_loss' (forward)" "$tmp/o4.46.0" && grep -q "peak reached at op 'log_softmax.backward'" "$tmp/o5.25.0"; then
  ok "4.46.0's peak is the loss's forward (three fp32 copies beside the bf16 logits), 5.25's the log_softmax backward"
else bad "4.46.0 / 5.25.0 peaks not where the loss paths put them"; fi

# 3. 5.25.0 (the default): no shifted copy, and the padded labels; the default run is unchanged
#    by giving it
"$VRSIM" "$tmp/l.lua" --no-files --alloc-trace "$tmp/tdef.csv" >/dev/null 2>&1
if [ -z "$(first 5.25.0 alloc shift_logits.contiguous)" ] && [ -n "$(first 5.25.0 alloc labels.pad)" ] \
   && cmp -s "$tmp/tdef.csv" "$tmp/t5.25.0.csv"; then
  ok "5.25.0: no shifted logits copy, labels padded; the same trace as the default"
else bad "5.25.0: a shifted copy, no padded labels, or a trace unlike the default's"; fi

# 4. the run says what it follows of an older release: its rotary tables and its loss path
if grep -q "transformers 4.44.2: the rotary tables (freqs as inv_freq_expanded @ position_ids_expanded, the step's first cuBLAS call) and the causal-LM loss path" "$tmp/o4.44.2" \
   && ! grep -q "follow the release" "$tmp/o5.25.0"; then
  ok "an older release is named in a note: its rotary tables and loss path are followed"
else bad "no note naming what of transformers 4.44.2 is followed"; fi

# 5. MistralForCausalLM kept the model-side upcast through 4.47: at 4.47.0 Mistral frees its bf16
#    logits at the cast and Llama does not
cat > "$tmp/m.lua" <<EOS
return { hardware = { gpu = "h200" },
  model = { config = "mistral-7b-v0.1.json", layers = 1 },
  training = { micro_batch = 1, seq = 512, precision = "bf16", build = "cast", steps = 2 } }
EOS
"$VRSIM" "$tmp/m.lua" --no-files --set training.transformers=4.47.0 --alloc-trace "$tmp/tm.csv" >/dev/null 2>&1
"$VRSIM" "$tmp/l.lua" --no-files --set training.transformers=4.47.0 --alloc-trace "$tmp/tl.csv" >/dev/null 2>&1
mf=$(awk -F, '$3 == "free_completed" && $7 == "logits.float" { print $5; exit }' "$tmp/tm.csv")
lf=$(awk -F, '$3 == "free_completed" && $7 == "logits.float" { print $5; exit }' "$tmp/tl.csv")
if [ "$mf" = $((512 * 32000 * 2)) ] && [ -z "$lf" ]; then
  ok "4.47.0: Mistral's forward upcasts ($mf B of bf16 logits freed at the cast), Llama's loss does not"
else bad "4.47.0: Mistral frees '$mf' at the cast (want $((512 * 32000 * 2))), Llama '$lf' (want none)"; fi

# 5b. Gemma 2 before 4.46: the soft-capping runs on the bf16 logits, then the model upcasts: the
#     soft-capped bf16 logits are freed at the cast (1 x 512 tokens, vocabulary 256000)
"$VRSIM" validation/oracle/scenarios/gemma2_9b_l2_bf16_eager.lua --no-files --set training.transformers=4.44.2 \
  --alloc-trace "$tmp/tg.csv" >/dev/null 2>&1
gf=$(awk -F, '$3 == "free_completed" && $7 == "logits.float" { print $5; exit }' "$tmp/tg.csv")
gs=$(awk -F, '$3 == "alloc" && $7 == "shift_logits.contiguous" { print $5; exit }' "$tmp/tg.csv")
if [ "$gf" = $((512 * 256000 * 2)) ] && [ "$gs" = $((511 * 256000 * 4)) ]; then
  ok "4.44.2 Gemma 2: the soft-capped bf16 logits ($gf B) freed at the cast, the shifted fp32 copy $gs B"
else bad "4.44.2 Gemma 2: freed at the cast '$gf' (want $((512 * 256000 * 2))), shifted copy '$gs' (want $((511 * 256000 * 4)))"; fi

# 6. releases vrsim has not read, and strings that are no release: exit 2 naming the range
for v in 4.35.2 5.26.0 4.44 v4.44.2; do
  "$VRSIM" "$tmp/l.lua" --no-files --set training.transformers=$v >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "training.transformers = \"$v\"" "$tmp/out" \
     && { grep -q "from 4.36.0 to 5.25.x" "$tmp/out" || grep -q "not a release number" "$tmp/out"; }; then
    ok "transformers $v: exit 2 naming it"
  else bad "transformers $v: exit $rc ($(head -c 200 "$tmp/out"))"; fi
done

# 7. a family before the release that added its modeling file: exit 2 naming the first release;
#    from that release on it runs
for fv in "qwen3-8b.json qwen3 4.50.0 4.51.0" "gemma-3-4b-text.json gemma3_text 4.49.0 4.50.0" \
          "olmo-2-1124-7b.json olmo2 4.46.0 4.47.0" \
          "gemma-2-9b.json gemma2 4.41.0 4.42.0" "deepseek-v2-lite.json deepseek_v2 4.53.0 4.54.0" \
          "phi-3-mini-4k-instruct.json phi3 4.40.0 4.41.0" "qwen2.5-0.5b.json qwen2 4.36.0 4.37.0" \
          "qwen3-30b-a3b.json qwen3_moe 4.50.0 4.51.0" \
          "validation/oracle/scenarios/gpt_oss_20b_l2_bf16.lua gpt_oss 4.54.0 4.55.0" \
          "validation/oracle/scenarios/deepseek_v3_l2_bf16.lua deepseek_v3 4.50.0 4.51.0"; do
  set -- $fv
  f=$1
  case $1 in
    *.json) f="$tmp/f.lua"
            cat > "$f" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "$1", layers = 2 },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 1 } }
EOS
  esac
  "$VRSIM" "$f" --no-files --set steps=1 --set training.transformers=$3 >"$tmp/out" 2>&1; r1=$?
  "$VRSIM" "$f" --no-files --set steps=1 --set training.transformers=$4 >"$tmp/out2" 2>&1; r2=$?
  if [ $r1 = 2 ] && grep -q "model_type \"$2\" first appears in transformers $4" "$tmp/out" && [ $r2 = 0 ]; then
    ok "$2: refused under $3 (first in $4), runs under $4"
  else bad "$2 under $3: exit $r1 ($(head -c 200 "$tmp/out")); under $4: exit $r2 ($(head -c 200 "$tmp/out2"))"; fi
done

# 8. inference before 4.46 (the model returns fp32 logits) is refused; from 4.46 on an inference
#    run follows the release's rotary tables (no loss runs), and says so
"$VRSIM" "$tmp/l.lua" --no-files --set inference=true --set training.transformers=4.45.0 >"$tmp/out" 2>&1; r1=$?
"$VRSIM" "$tmp/l.lua" --no-files --set inference=true --set training.transformers=4.46.0 >"$tmp/out2" 2>&1; r2=$?
if [ $r1 = 2 ] && grep -q "training.transformers = \"4.45.0\" with inference = true is not modelled" "$tmp/out" \
   && [ $r2 = 0 ] && grep -q "transformers 4.46.0: the rotary tables (freqs as inv_freq_expanded @ position_ids_expanded, the step's first cuBLAS call) follows the release" "$tmp/out2"; then
  ok "inference: refused under 4.45.0; under 4.46.0 its rotary tables followed, no loss path named"
else bad "inference: 4.45.0 exit $r1 ($(head -c 200 "$tmp/out")); 4.46.0 exit $r2 ($(grep -o 'transformers 4.46.0[^;]*' "$tmp/out2" | head -c 200))"; fi

# 8b. the rotary tables (every family's modeling file changed in 5.19.0): before it freqs is
#     `inv_freq_expanded @ position_ids_expanded`, a matmul that makes the step's cuBLAS workspace
#     (32 MiB on an H100/H200, sim/engine.c cublas_workspace) and whose fp32 operands live until
#     the rotary returns; from 5.19.0 it is a broadcast product whose operands are freed at once,
#     and the workspace comes with the first layer's GEMM
for v in 5.18.0 5.19.0; do trace $v; done
# the first 32 MiB allocation after the rotary's freqs (the build's 32 MiB weights come before it)
wsop() { awk -F, '$7 == "rotary.freqs" { r = 1 } r && $3 == "alloc" && $5 == 33554432 { print $7; exit }' "$tmp/t$1.csv"; }
# where the (1, S, 1) fp32 position ids (4 S bytes) are freed
freed_at() { awk -F, -v b=$((4 * S)) '$3 == "free_requested" && $5 == b && $7 ~ /^rotary/ { print $7; exit }' "$tmp/t$1.csv"; }
if [ "$(wsop 5.18.0)" = "rotary.freqs" ] && [ "$(wsop 5.19.0)" = "layers.0.self_attn.q_proj" ] \
   && [ "$(freed_at 5.18.0)" = "rotary: LlamaRotaryEmbedding.forward returns" ] && [ "$(freed_at 5.19.0)" = "rotary.freqs" ]; then
  ok "rotary: 5.18.0's matmul makes the cuBLAS workspace, 5.19.0's product leaves it to q_proj and frees its operands at once"
else bad "rotary: workspace at '$(wsop 5.18.0)' / '$(wsop 5.19.0)', position ids freed at '$(freed_at 5.18.0)' / '$(freed_at 5.19.0)'"; fi

# 9. the field is listed with its default and help
if "$VRSIM" fields 2>&1 | grep -q "^  transformers  *string   the transformers release the run used, 4.36.0 to 5.25.x"; then ok "vrsim fields lists training.transformers (default 5.25.0)"
else bad "vrsim fields does not list training.transformers"; fi

echo "test_tfversion: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
