#!/bin/sh
# training.kbit_prepare (lua/strategies/kbit.lua): the QLoRA programs' casts of a 4-bit model's
# other parameters, and the dtypes every later tensor takes from them in the simulation. The
# model: Llama 3 8B's shapes (vocabulary 128256, hidden 4096, MLP 14336) cut to 2 layers, NF4,
# LoRA r 32 on every Linear, batch 1 x 1024 tokens, checkpointing, under each mode.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { python3 -c "import sys,json; d=json.load(open(sys.argv[2])); print(eval(sys.argv[1]))" "$1" "$2"; }

cp scenarios/configs/llama-3-8b.json "$tmp/llama-3-8b.json"
cat > "$tmp/q.lua" <<'EOS'
return { hardware = { gpu = "a100_80g" },
  model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 1, seq = 1024, precision = "lora_bf16", quant = "nf4", optimizer = "adamw",
               attention = "flash", checkpointing = true, loss = "full", bitsandbytes = "0.45.0",
               lora = { r = 32, alpha = 32, targets = "all-linear" } } }
EOS
for m in none peft trl_0.13 trl axolotl; do
  "$VRSIM" "$tmp/q.lua" --no-files --set training.kbit_prepare=$m --json --alloc-trace "$tmp/$m.csv" >"$tmp/$m.json" 2>"$tmp/$m.err" \
    || bad "kbit_prepare=$m: exit $? ($(head -c 300 "$tmp/$m.err"))"
done
# the bytes allocated by the op named $2 in trace $1 (its first allocation)
bytes() { awk -F, -v op="$2" '$3 == "alloc" && $7 == op { print $5; exit }' "$1"; }
E=$((128256 * 4096))     # the embedding's and lm_head's elements
T=$((1024 * 4096))       # a (1, 1024, 4096) hidden state's

# 1. prepare_model_for_kbit_training: the embedding and lm_head become fp32 at load (a new fp32
#    tensor each, the bf16 one freed), the norms too; the 4-bit weights are not touched
a=$(bytes "$tmp/peft.csv" "prepare_model_for_kbit_training: model.embed_tokens.weight.to(fp32)")
b=$(bytes "$tmp/peft.csv" "prepare_model_for_kbit_training: lm_head.weight.to(fp32)")
n=$(grep -c ',alloc,.*prepare_model_for_kbit_training: .*proj' "$tmp/peft.csv")
if [ "$a" = $((E * 4)) ] && [ "$b" = $((E * 4)) ] && [ "$n" = 0 ]; then
  ok "peft: embed_tokens and lm_head cast to fp32 at load ($a bytes each), no 4-bit weight cast"
else bad "peft: embed_tokens $a, lm_head $b bytes (want $((E * 4)) each), 4-bit casts $n"; fi
pn=$(field 'd["breakdown_at_peak"]["parameters"]' "$tmp/none.json")
pp=$(field 'd["breakdown_at_peak"]["parameters"]' "$tmp/peft.json")
want=$((2 * E * 2 + 5 * 4096 * 2))
if [ $((pp - pn)) = $want ]; then ok "peft: parameters +$want bytes (embedding and lm_head doubled, 5 norms)"
else bad "peft: parameters moved by $((pp - pn)), want $want"; fi

# 1b. peft 0.21 empties the cache after its casts (auto_clear_cache); the peft of TRL 0.13's time did not
"$VRSIM" "$tmp/q.lua" --set training.kbit_prepare=peft --out "$tmp/op" >/dev/null 2>&1
"$VRSIM" "$tmp/q.lua" --set training.kbit_prepare=trl_0.13 --out "$tmp/ot" >/dev/null 2>&1
if grep -q "prepare_model_for_kbit_training: torch.cuda.empty_cache()" "$tmp/op/memory.csv" \
   && ! grep -q "empty_cache" "$tmp/ot/memory.csv"; then ok "peft: torch.cuda.empty_cache() after the casts; trl_0.13: none"
else bad "peft / trl_0.13: empty_cache after the casts not as peft 0.21 / 0.14 call it"; fi

# 2. the fp32 embedding makes the residual stream fp32: each layer's input and output, the norms'
#    outputs; Linear4bit copies its fp32 input into bf16 and its product back to fp32
for l in 0 1; do
  r=$(bytes "$tmp/peft.csv" "layers.$l.residual_add2"); r0=$(bytes "$tmp/none.csv" "layers.$l.residual_add2")
  if [ "$r" = $((T * 4)) ] && [ "$r0" = $((T * 2)) ]; then ok "peft: layer $l's output fp32 ($r bytes; $r0 without the casts)"
  else bad "peft: layer $l's output $r bytes (want $((T * 4))), without the casts $r0"; fi
done
c=$(bytes "$tmp/peft.csv" "layers.0.self_attn.q_proj.to_compute_dtype"); o=$(bytes "$tmp/peft.csv" "layers.0.self_attn.q_proj.to_inp_dtype")
c0=$(grep -c "to_compute_dtype\|to_inp_dtype" "$tmp/none.csv")
if [ "$c" = $((T * 2)) ] && [ "$o" = $((T * 4)) ] && [ "$c0" = 0 ]; then
  ok "peft: Linear4bit's x.to(compute_dtype) ($c bytes) and .to(inp_dtype) ($o bytes); none without the casts"
else bad "peft: Linear4bit's casts $c / $o bytes (want $((T * 2)) / $((T * 4))), $c0 without the casts"; fi

# 3. under the Trainer's bf16 autocast lm_head's fp32 weight is copied to bf16 (saved for its
#    backward) and the logits are bf16
w=$(bytes "$tmp/peft.csv" "lm_head.weight_cast"); lg=$(bytes "$tmp/peft.csv" "lm_head")
if [ "$w" = $((E * 2)) ] && [ "$lg" = $((1024 * 128256 * 2)) ]; then ok "peft: lm_head's bf16 weight copy ($w bytes), bf16 logits"
else bad "peft: lm_head's weight copy $w bytes (want $((E * 2))), logits $lg"; fi

# 4. the peak (log_softmax's backward) moves by what those tensors explain: the fp32 embedding
#    and head (+2 x E x 2), the head's bf16 copy (E x 2), the two fp32 checkpointed layer inputs
#    (+2 x T x 2), within 4 MiB
an=$(field 'd["peak_allocated_bytes"]' "$tmp/none.json"); ap=$(field 'd["peak_allocated_bytes"]' "$tmp/peft.json")
if python3 -c "import sys; a,b,E,T=map(int,sys.argv[1:]); d=b-a-(2*E*2+E*2+2*T*2); sys.exit(abs(d) > 4*2**20)" "$an" "$ap" "$E" "$T"; then
  ok "peft: peak allocated $an -> $ap bytes, the fp32 embedding and head, the head's bf16 copy and fp32 layer inputs"
else bad "peft: peak allocated $an -> $ap bytes, not what the tensors explain ($((2 * E * 2 + E * 2 + 2 * T * 2)))"; fi

# 5. TRL 0.13: peft_module_casting_to_bf16 puts the embedding and lm_head back in bf16, the norms
#    stay fp32: layer 0's first residual add is bf16 (the bf16 embedding + the bf16 attention
#    output), its second fp32 (+ the fp32 MLP output), and every later one fp32
e=$(bytes "$tmp/trl_0.13.csv" "peft_module_casting_to_bf16: model.embed_tokens.weight.to(bf16)")
r1=$(bytes "$tmp/trl_0.13.csv" "layers.0.residual_add1"); r2=$(bytes "$tmp/trl_0.13.csv" "layers.0.residual_add2")
r3=$(bytes "$tmp/trl_0.13.csv" "layers.1.residual_add1")
if [ "$e" = $((E * 2)) ] && [ "$r1" = $((T * 2)) ] && [ "$r2" = $((T * 4)) ] && [ "$r3" = $((T * 4)) ]; then
  ok "trl_0.13: embedding back in bf16; residual bf16 until layer 0's MLP output, fp32 after"
else bad "trl_0.13: embedding $e, residuals $r1 / $r2 / $r3 bytes"; fi

# 6. TRL 1.16: no fp32 cast; the adapters (2 x 2,621,440 elements) in bf16, so AdamW's two states too
s=$(field 'd["breakdown_at_peak"]["optimizer_state"]' "$tmp/trl.json")
n=$(grep -c ',alloc,.*to(fp32)' "$tmp/trl.csv")
if [ "$s" = $((2 * 2 * 2621440 * 2)) ] && [ "$n" = 0 ]; then ok "trl: bf16 adapters, AdamW state $s bytes, no fp32 cast"
else bad "trl: AdamW state $s bytes (want $((2 * 2 * 2621440 * 2))), fp32 casts $n"; fi

# 7. axolotl: embeddings and norms to fp32 and back at load: the step's tensors as without the casts
e1=$(bytes "$tmp/axolotl.csv" "_configure_embedding_dtypes: model.embed_tokens.weight.to(fp32)")
r=$(bytes "$tmp/axolotl.csv" "layers.1.residual_add2")
if [ "$e1" = $((E * 4)) ] && grep -q "_configure_embedding_dtypes: lm_head.weight.to(bf16)" "$tmp/axolotl.csv" && [ "$r" = $((T * 2)) ]; then
  ok "axolotl: embedding to fp32 and back at load, a bf16 residual stream"
else bad "axolotl: embedding cast $e1 bytes, residual $r bytes"; fi

# 7b. under the Trainer's autocast peft's lora.bnb forward does not cast its input to the fp32
#     adapters' dtype (requires_conversion = not torch.is_autocast_enabled()): lora_A's F.linear
#     casts its arguments to bf16 instead; without autocast each adapter's input is copied to fp32
na=$(grep -c ',alloc,.*lora_input_cast$' "$tmp/axolotl.csv"); nn0=$(grep -c ',alloc,.*lora_input_cast$' "$tmp/none.csv")
if [ "$na" = 0 ] && [ "$nn0" -gt 0 ]; then ok "axolotl: no fp32 copy of the adapters' inputs under autocast ($nn0 without it)"
else bad "axolotl: $na fp32 copies of the adapters' inputs under autocast ($nn0 without)"; fi

# 8. the dtypes against the real code's (validation/oracle/captures/kbit_dtypes.json: peft, TRL 0.13
#    and TRL 1.16 on a tiny Llama of real bitsandbytes Linear4bit, check_kbit_dtypes.py --capture)
if python3 validation/oracle/check_kbit_dtypes.py --compare "$VRSIM" >"$tmp/dt" 2>&1; then
  ok "the layer inputs', norms', Linear4bit outputs', logits' dtypes and lm_head's saved weight as the real code's ($(grep -c '^  ok' "$tmp/dt") of them)"
else bad "dtypes unlike the real code's: $(grep -v '^  ok' "$tmp/dt" | head -5 | tr '\n' ';')"; fi

# 8b. the readers: TRL's SFTTrainer (1.16) on a 4-bit model with use_peft sets "trl"; axolotl's
#     qlora sets "axolotl" (tests/data/recipes/axolotl_qlora.yml)
cp -r tests/data/recipes/llama-3.2-1b "$tmp/"
cat > "$tmp/trl_qlora.yaml" <<EOS
model_name_or_path: llama-3.2-1b
dtype: bfloat16
use_peft: true
load_in_4bit: true
use_bnb_nested_quant: true
max_length: 1024
EOS
# (a config's paths are read from the folder vrsim runs in)
V=$VRSIM; case "$V" in /*) ;; *) V="$(pwd)/$V" ;; esac
(cd "$tmp" && "$V" trl_qlora.yaml --gpu a100_80g --print-scenario) >"$tmp/trl.scn" 2>&1
"$VRSIM" tests/data/recipes/axolotl_qlora.yml --gpu a100_80g --print-scenario >"$tmp/axo.scn" 2>&1
if grep -q 'kbit_prepare = "trl"' "$tmp/trl.scn" && grep -q 'kbit_prepare = "axolotl"' "$tmp/axo.scn" \
   && ! grep -q "not simulated: the load may reserve" "$tmp/trl.scn" "$tmp/axo.scn"; then
  ok "readers: TRL's 4-bit use_peft reads as kbit_prepare = trl, axolotl's qlora as axolotl, without the old notes"
else bad "readers: $(grep -h 'kbit_prepare\|casts' "$tmp/trl.scn" "$tmp/axo.scn" | head -3)"; fi

# 8c. peft's and TRL 0.13's checkpointing is reentrant (gradient_checkpointing_kwargs = {}): a note
#     where the scenario simulates the non-reentrant one
if grep -q "runs reentrant" "$tmp/peft.json" && grep -q "runs reentrant" "$tmp/trl_0.13.json" && ! grep -q "runs reentrant" "$tmp/trl.json"; then
  ok "peft, trl_0.13: a note that their checkpoint runs reentrant"
else bad "peft / trl_0.13: no note of their reentrant checkpoint (or trl has one)"; fi

# 9. refusals: a mode outside a bf16 QLoRA, peft's function without checkpointing, an unknown mode,
#    a sharded, inference, compiled or litgpt run
check() {
  _n=$1; _msg=$2; shift 2
  "$VRSIM" "$@" --no-files >"$tmp/o" 2>&1; _rc=$?
  if [ $_rc = 2 ] && grep -q "$_msg" "$tmp/o"; then ok "$_n"; else bad "$_n: exit $_rc, $(head -c 300 "$tmp/o")"; fi
}
check "refused without quant = nf4" 'needs training.quant = "nf4"' "$tmp/q.lua" --set quant=none --set training.kbit_prepare=peft
check "peft refused without checkpointing" "turns gradient checkpointing on" "$tmp/q.lua" --set checkpointing=false --set training.kbit_prepare=peft
check "an unknown mode refused" "kbit_prepare" "$tmp/q.lua" --set training.kbit_prepare=trl2
check "refused under FSDP2, naming the strategy" 'kbit_prepare = "trl" under fsdp2 is not modelled' "$tmp/q.lua" \
  --set training.kbit_prepare=trl --set strategy=fsdp2 --set hardware.count=2
check "refused with inference, naming it" 'kbit_prepare = "trl" with inference = true is not modelled' "$tmp/q.lua" \
  --set training.kbit_prepare=trl --set inference=true
check "refused with compile, naming what is modelled" 'kbit_prepare = "trl" with training.compile is not modelled (the casts are modelled in eager layers' \
  "$tmp/q.lua" --set training.kbit_prepare=trl --set compile=true
check "refused under litgpt, naming what is modelled" 'modelled with framework = "transformers"' "$tmp/q.lua" \
  --set training.kbit_prepare=trl --set training.framework=litgpt

echo "test_kbit: $pass passed, $fail failed"
[ "$fail" = 0 ]
