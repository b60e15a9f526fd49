#!/bin/sh
# Mixture-of-experts layers (lua/models/moe.lua) as transformers 5.25 runs them: Mixtral from its
# config.json with the exact parameter count, the router and the grouped-GEMM experts allocating
# what the real forward allocates, peft's and bitsandbytes' reach (Linear modules only), and the
# configurations that are refused.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp scenarios/configs/mixtral-8x7b.json "$tmp/"
field() { python3 -c "import sys,json; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
scn() { # name [model fields] [training fields]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "mixtral-8x7b.json", $2 },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2, $3 } }
EOS
}

# 1. Mixtral-8x7B's parameters as transformers counts them (AutoModelForCausalLM.from_config on
#    the meta device, transformers 5.25): 46,702,792,704
scn full ""
got=$("$VRSIM" "$tmp/full.lua" --json --no-files | field 'sum(d["parameters"].values())')
if [ "$got" = 46702792704 ]; then ok "Mixtral-8x7B: 46702792704 parameters, as transformers counts"
else bad "Mixtral-8x7B: $got parameters, transformers counts 46702792704"; fi

# 2. one MoE block's forward allocations, in order, as transformers' MixtralSparseMoeBlock with
#    grouped_mm_experts_forward allocates them at 1 x 256 tokens (bf16; captured under
#    FakeTensorMode, each aten op's new storages): router mm, fp32 copy, softmax, topk (values,
#    indices), the sum and the clone the in-place division keeps, sort (values, permutation),
#    perm // k, the gathered hidden states and weights, the int32 ids, histc, cumsum, the
#    gate_up grouped GEMM, silu, mul, the down grouped GEMM, the fp32 weighted product, the
#    inverse permutation and its arange, the reordered rows, the fp32 sum over k, the bf16 copy
want="4096 8192 8192 2048 4096 1024 2048 4096 4096 4096 4194304 2048 2048 32 32 29360128 14680064 14680064 4194304 8388608 4096 4096 8388608 4194304 2097152"
scn one "layers = 1"
"$VRSIM" "$tmp/one.lua" --no-files --alloc-trace "$tmp/one.csv" >/dev/null 2>"$tmp/err"
# (the first step's forward: up to the block's first backward op)
got=$(awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp/ { printf "%s ", $5 }' "$tmp/one.csv" | sed 's/ $//')
if [ "$got" = "$want" ]; then ok "MoE block forward: the 25 allocations of transformers' grouped_mm path, in order"
else bad "MoE block forward allocates: $got (transformers: $want)"; fi

# 3. all-linear LoRA reaches the attention's Linears only (the router and experts are not
#    nn.Linear): r 16 on q, k, v, o of 2 layers is 851,968 parameters; QLoRA leaves the experts in
#    bf16 and says so
scn lora "layers = 2" 'precision = "lora_bf16", quant = "nf4", lora = { r = 16, targets = "all-linear" }'
"$VRSIM" "$tmp/lora.lua" --json --no-files > "$tmp/lora.json" 2>"$tmp/err"
n=$(field 'd["n_trainable"]' < "$tmp/lora.json")
note=$(field '" ".join(d["notes"])' < "$tmp/lora.json")
case "$n $note" in
  "851968 "*"experts' 3-D weights"*"stay in bf16"*) ok "MoE QLoRA: all-linear LoRA on q/k/v/o only (851968), experts noted as bf16" ;;
  *) bad "MoE QLoRA: $n trainable, notes: $note" ;;
esac

# 4. refused by name: LoRA on the experts, the load-balancing loss, router noise, the eager loop
scn tgt "layers = 2" 'precision = "lora_bf16", lora = { targets = { "experts" } }'
"$VRSIM" "$tmp/tgt.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "'experts' is a MixtralExperts, not a Linear" "$tmp/out"; then ok "LoRA on the experts: exit 2 naming it"
else bad "LoRA on the experts: exit $rc: $(cat "$tmp/out")"; fi
for kv in '"output_router_logits": true|output_router_logits' '"router_jitter_noise": 0.01|router_jitter_noise' \
          '"experts_implementation": "eager"|experts_implementation'; do
  key=${kv#*|}; entry=${kv%|*}
  # (the key's own line, where the config has one, goes: a key given twice is refused as such)
  sed -e "/\"$key\":/d" -e "s/\"vocab_size\": 32000/\"vocab_size\": 32000, $entry/" scenarios/configs/mixtral-8x7b.json > "$tmp/mixtral-8x7b.json"
  scn refuse "layers = 2"
  "$VRSIM" "$tmp/refuse.lua" --no-files >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$key.*not modelled" "$tmp/out"; then ok "$key: exit 2 naming it"
  else bad "$key: exit $rc: $(cat "$tmp/out")"; fi
done

echo "test_moe: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
