#!/bin/sh
# Mixture-of-experts layers (lua/models/moe.lua, gpt_oss.lua) as transformers 5.25 runs them: Mixtral from its
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
#    inverse permutation and its arange, the reordered rows, the fp32 sum over k, the bf16 copy;
#    with the CUDA-only buffers the fake capture cannot show, as the H100 traces have them:
#    cumsum's cub scan temporary (1023) and each grouped GEMM's CUTLASS arguments and workspace
#    (480 for 8 experts, 512 bytes an SM: fulltrace_gen4-mixtral-l2-b1)
want="4096 8192 8192 2048 4096 1024 2048 4096 4096 4096 4194304 2048 2048 32 32 1023 29360128 480 67584 14680064 14680064 4194304 480 67584 8388608 4096 4096 8388608 4194304 2097152"
scn one "layers = 1"
"$VRSIM" "$tmp/one.lua" --no-files --alloc-trace "$tmp/one.csv" >/dev/null 2>"$tmp/err"
# (the first step's forward: up to the block's first backward op)
got=$(awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp/ { printf "%s ", $5 }' "$tmp/one.csv" | sed 's/ $//')
if [ "$got" = "$want" ]; then ok "MoE block forward: the 25 allocations of transformers' grouped_mm path and 5 of CUDA's, in order"
else bad "MoE block forward allocates: $got (transformers: $want)"; fi

# 3. LoRA on the attention's Linears: r 16 on q, k, v, o of 2 layers is 851,968 parameters;
#    QLoRA leaves the experts in bf16 and says so. "all-linear" on Mixtral: peft 0.21 resolves it
#    to the attention's Linears and the v4 MLP names (w1, w2, w3, gate), turned into
#    target_parameters on the experts and the router's gate.weight, whose wrappers refuse
#    lora_dropout != 0 (this run's 0.05): exit 2 naming it
scn lora "layers = 2" 'precision = "lora_bf16", quant = "nf4", lora = { r = 16, targets = { "q_proj", "k_proj", "v_proj", "o_proj" } }'
"$VRSIM" "$tmp/lora.lua" --json --no-files > "$tmp/lora.json" 2>"$tmp/err"
n=$(field 'd["n_trainable"]' < "$tmp/lora.json")
note=$(field '" ".join(d["notes"])' < "$tmp/lora.json")
case "$n $note" in
  "851968 "*"experts' 3-D weights"*"stay in bf16"*) ok "MoE QLoRA: LoRA on q/k/v/o (851968), experts noted as bf16" ;;
  *) bad "MoE QLoRA: $n trainable, notes: $note" ;;
esac
scn alin "layers = 2" 'precision = "lora_bf16", lora = { r = 16, dropout = 0.05, targets = "all-linear" }'
"$VRSIM" "$tmp/alin.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "turns mixtral's MLP names into target_parameters.*lora_dropout != 0" "$tmp/out"
then ok "all-linear on Mixtral with lora_dropout 0.05: exit 2 naming peft's conversion and the dropout"
else bad "all-linear on Mixtral: exit $rc: $(cat "$tmp/out")"; fi

# 4. refused by name: LoRA on the experts, the load-balancing loss, router noise, the eager loop
scn tgt "layers = 2" 'precision = "lora_bf16", lora = { targets = { "experts" } }'
"$VRSIM" "$tmp/tgt.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "'experts' is a MixtralExperts, not a Linear" "$tmp/out"; then ok "LoRA on the experts: exit 2 naming it"
else bad "LoRA on the experts: exit $rc: $(cat "$tmp/out")"; fi
for kv in 'output_router_logits=True' 'router_jitter_noise=0.01' 'experts_implementation="eager"'; do
  key=${kv%%=*}
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['$key'] = $(echo "${kv#*=}"); json.dump(d, open(sys.argv[2], 'w'))" \
    scenarios/configs/mixtral-8x7b.json "$tmp/mixtral-8x7b.json"
  scn refuse "layers = 2"
  "$VRSIM" "$tmp/refuse.lua" --no-files >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$key.*not modelled" "$tmp/out"; then ok "$key: exit 2 naming it"
  else bad "$key: exit $rc: $(cat "$tmp/out")"; fi
done

# 4b. LoRA on the experts' 3-D weights (peft 0.21 target_parameters, lora.ParamWrapper) on
#    Qwen3-30B-A3B cut to two layers, r 16 with q, k, v, o: 26,771,456 trainable, as peft counts
#    (validation/oracle/captures/qwen3_moe_l2_lora_experts: per layer gate_up lora_A (16 x 128,
#    2048), lora_B (1536, 2048), down_proj lora_A (2048, 768), lora_B (2048, 2048)); each forward
#    folds the adapter into a whole bf16 copy of the expert stack (baddbmm, 768 MiB for gate_up)
#    that the grouped GEMM saves, so layer 0's block holds one after the forward
cp scenarios/configs/qwen3-30b-a3b.json "$tmp/"
tp() { # name [lora fields] [config]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "${3:-qwen3-30b-a3b.json}", layers = 2 },
  training = { micro_batch = 1, seq = 256, precision = "lora_bf16", steps = 2, optimizer = "sgd",
    lora = { r = 16, alpha = 32, targets = { "q_proj", "k_proj", "v_proj", "o_proj" }, $2 } } }
EOS
}
tp tpok 'dropout = 0, target_parameters = { "mlp.experts.gate_up_proj", "mlp.experts.down_proj" }'
"$VRSIM" "$tmp/tpok.lua" --json --no-files --alloc-trace "$tmp/tpok.csv" > "$tmp/tpok.json" 2>"$tmp/err"
n=$(field 'd["n_trainable"]' < "$tmp/tpok.json")
if [ "$n" = 26771456 ]; then ok "Qwen3-MoE expert LoRA (target_parameters): 26771456 trainable, as peft counts"
else bad "Qwen3-MoE expert LoRA: $n trainable (peft: 26771456) $(cat "$tmp/err")"; fi
#    the wrapped weights' forward allocations in order, as peft's ParamWrapper makes them (capture):
#    down_proj's factors cast to bf16 and the parametrization's check (a whole stack, dropped),
#    then gate_up_proj's, then the folded gate_up and down stacks where the experts read them;
#    on CUDA each baddbmm also copies B's permuted factor contiguous for cuBLAS
#    (fulltrace_gen11-qwen3-30b-a3b-lora-experts-b1-ckpt-tr: after each whole stack)
want="8388608 3145728 402653184 8388608 6291456 8388608 805306368 6291456 805306368 6291456 402653184 8388608"
got=$(awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp\.experts\.[a-z_]+\.lora/ { printf "%s ", $5 }' "$tmp/tpok.csv" | sed 's/ $//')
if [ "$got" = "$want" ]; then ok "ParamWrapper forward: the factors, the check and the folded expert stacks, in peft's order"
else bad "ParamWrapper forward allocates: $got (peft: $want)"; fi
#    with the experts' parameters alone (target_modules empty) the first layer's grouped GEMM
#    input needs no gradient, so it does not save the folded gate_up stack; parametrize.cached()
#    still holds it until the wrappers' forward returns, past down_proj's fold
#    (captures/qwen3_moe_l2_lora_experts_only: freed after the down_proj baddbmm)
sed 's/targets = { "q_proj", "k_proj", "v_proj", "o_proj" }/targets = { }/' "$tmp/tpok.lua" > "$tmp/tpx.lua"
"$VRSIM" "$tmp/tpx.lua" --no-files --alloc-trace "$tmp/tpx.csv" >/dev/null 2>"$tmp/err"
got=$(awk -F, '$7 == "layers.0.mlp.experts.down_proj.lora_baddbmm" && $3 == "alloc" { d = NR }
  $7 == "layers.0.mlp.experts: the parametrization cache clears" && $3 == "free_requested" && $5 == 805306368 { f = NR }
  END { print (d && f > d) ? "after" : "before" }' "$tmp/tpx.csv")
if [ "$got" = after ]; then ok "expert LoRA alone: the unsaved folded gate_up stack lives until the wrappers return"
else bad "expert LoRA alone: the folded gate_up stack is freed $got down_proj's fold $(cat "$tmp/err")"; fi
#    under parameter sharding (FSDP2, ZeRO-3) the wrapper's parametrization and the gathered
#    weight's swap-in meet on one attribute, not modelled: exit 2 naming it; DDP runs
for st in fsdp2 zero3 ddp; do
  "$VRSIM" "$tmp/tpok.lua" --no-files --set hardware.count=2 --set strategy=$st >"$tmp/out" 2>&1; rc=$?
  case "$st:$rc" in
    ddp:0) ok "expert LoRA under ddp: runs" ;;
    fsdp2:2|zero3:2) if grep -q "target_parameters with a sharded .*not modelled" "$tmp/out"; then ok "expert LoRA under $st: exit 2 naming it"
                     else bad "expert LoRA under $st: $(cat "$tmp/out")"; fi ;;
    *) bad "expert LoRA under $st: exit $rc: $(head -n 3 "$tmp/out")" ;;
  esac
done
#    QLoRA (nf4): bitsandbytes leaves the 3-D experts in bf16 (transformers 5.25 quantizes
#    Linear4bit parameters only), so the wrappers fold the same bf16 stacks, and a note says so
sed 's/precision = "lora_bf16",/precision = "lora_bf16", quant = "nf4",/' "$tmp/tpok.lua" > "$tmp/tpq.lua"
"$VRSIM" "$tmp/tpq.lua" --json --no-files --alloc-trace "$tmp/tpq.csv" > "$tmp/tpq.json" 2>"$tmp/err"
got=$(awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp\.experts\.[a-z_]+\.lora/ { printf "%s ", $5 }' "$tmp/tpq.csv" | sed 's/ $//')
note=$(field '" ".join(d["notes"])' < "$tmp/tpq.json")
case "$got|$note" in
  "$want|"*"stay in bf16 (training.lora.target_parameters folds the adapters into them"*) ok "QLoRA with expert LoRA: the experts stay bf16 and are folded as they are, noted" ;;
  *) bad "QLoRA with expert LoRA: $got | $note $(cat "$tmp/err")" ;;
esac
#    the MLP names in targets, as peft 0.21 converts them on a transformers 5 MoE model
#    (captures/qwen3_moe_l2_lora_mlp_names): gate_proj + up_proj become target_parameters
#    gate_up_proj at twice the rank (lora_A (32 x 128, 2048)), down_proj down_proj at r: the
#    trainable count 26771456 + 2 x (4194304 + 3145728) = 41451520, noted; one half of the fused
#    pair alone, and the router's name, are refused as peft refuses them (or as not modelled)
tp tpn 'dropout = 0, targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" }'
sed -i 's/targets = { "q_proj", "k_proj", "v_proj", "o_proj" }, dropout/dropout/' "$tmp/tpn.lua"
"$VRSIM" "$tmp/tpn.lua" --json --no-files > "$tmp/tpn.json" 2>"$tmp/err"
n=$(field 'd["n_trainable"]' < "$tmp/tpn.json")
note=$(field '" ".join(d["notes"])' < "$tmp/tpn.json")
case "$n $note" in
  "41451520 "*"turns qwen3_moe's MLP names into target_parameters"*) ok "MLP names on Qwen3-MoE: peft's conversion to target_parameters (41451520 trainable), noted" ;;
  *) bad "MLP names on Qwen3-MoE: $n trainable (peft: 41451520), notes: $note $(cat "$tmp/err")" ;;
esac
#    "all-linear" adds the router (gate.weight: a 2-D wrapper, W + B @ A): 41,521,152 trainable,
#    peft's count (captures/qwen3_moe_l2_lora_all_linear)
tp tpa 'dropout = 0, targets = "all-linear"'
sed -i 's/targets = { "q_proj", "k_proj", "v_proj", "o_proj" }, dropout/dropout/' "$tmp/tpa.lua"
n=$("$VRSIM" "$tmp/tpa.lua" --json --no-files 2>"$tmp/err" | field 'd["n_trainable"]')
if [ "$n" = 41521152 ]; then ok "all-linear on Qwen3-MoE: attention, router and experts (41521152 trainable), as peft"
else bad "all-linear on Qwen3-MoE: $n trainable (peft: 41521152) $(cat "$tmp/err")"; fi
#    the same under 4-bit loading: the attention's Linear4bit layers are still "all-linear"
sed 's/precision = "lora_bf16",/precision = "lora_bf16", quant = "nf4",/' "$tmp/tpa.lua" > "$tmp/tpa4.lua"
n=$("$VRSIM" "$tmp/tpa4.lua" --json --no-files 2>"$tmp/err" | field 'd["n_trainable"]')
if [ "$n" = 41521152 ]; then ok "all-linear on Qwen3-MoE under nf4: the same 41521152 trainable"
else bad "all-linear on Qwen3-MoE under nf4: $n trainable (want 41521152) $(cat "$tmp/err")"; fi
for kv in 'targets = { "q_proj", "gate_proj", "down_proj" }|cannot convert .gate_proj. without .up_proj.' \
          'targets = { "q_proj", "up_proj", "gate_proj" }, dropout = 0.05|does not work with lora_dropout != 0'; do
  tp tpm "${kv%%|*}"
  sed -i 's/targets = { "q_proj", "k_proj", "v_proj", "o_proj" }, //' "$tmp/tpm.lua"
  "$VRSIM" "$tmp/tpm.lua" --no-files >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "${kv#*|}" "$tmp/out"; then ok "Qwen3-MoE ${kv%%|*}: exit 2 naming it"
  else bad "Qwen3-MoE ${kv%%|*}: exit $rc: $(cat "$tmp/out")"; fi
done
for kv in 'target_parameters = { "mlp.experts.gate_up_proj" }|does not work with lora_dropout != 0' \
          'dropout = 0, target_parameters = { "mlp.experts.w1" }|matches no parameter' \
          'dropout = 0, target_parameters = { "input_layernorm.weight" }|modelled on the 3-D experts'; do
  tp tpbad "${kv%%|*}"
  "$VRSIM" "$tmp/tpbad.lua" --no-files >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "${kv#*|}" "$tmp/out"; then ok "target_parameters ${kv%%|*}: exit 2 naming it"
  else bad "target_parameters ${kv%%|*}: exit $rc: $(cat "$tmp/out")"; fi
done

#    docs/model-families.md's MoE worked example prints what vrsim makes of the block: its awk
#    listing, run on the scenario's trace, is the output the guide shows
"$VRSIM" scenarios/qwen3_30b_a3b_lora_experts_h100.lua --no-files --alloc-trace "$tmp/doc.csv" >/dev/null 2>"$tmp/err"
awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp/ { printf "%.1f %s\n", $5 / 1048576, $7 }' "$tmp/doc.csv" > "$tmp/doc.got"
sed -n '/^### Running a mixture-of-experts model/,/^- \*\*router/p' docs/model-families.md \
  | sed -n '/^\$ awk/,/^```/p' | sed '1d;$d' > "$tmp/doc.want"
if [ -s "$tmp/doc.want" ] && cmp -s "$tmp/doc.got" "$tmp/doc.want"; then ok "docs/model-families.md's MoE block listing is vrsim's output ($(wc -l < "$tmp/doc.want") lines)"
else bad "docs/model-families.md's MoE block listing differs from vrsim's: $(diff "$tmp/doc.want" "$tmp/doc.got" | head -5)"; fi

# 5. Qwen3-MoE: Qwen3-30B-A3B's parameters as transformers counts them (30,532,122,624); its
#    router hands the weights back in bf16, so the weighting, reorder and sum are bf16 (Mixtral's
#    fp32): transformers' forward allocations at 1 x 256 tokens, in order (fake tensors, 5.25)
cp scenarios/configs/qwen3-30b-a3b.json "$tmp/"
q3() { # name [model fields] [training fields]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "${3:-qwen3-30b-a3b.json}", $2 },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2 } }
EOS
}
q3 qfull ""
got=$("$VRSIM" "$tmp/qfull.lua" --json --no-files | field 'sum(v for k, v in d["parameters"].items())')
if [ "$got" = 30532122624 ]; then ok "Qwen3-30B-A3B: 30532122624 parameters, as transformers counts"
else bad "Qwen3-30B-A3B: $got parameters, transformers counts 30532122624"; fi
# (with the CUDA-only cub scan temporary and the grouped GEMMs' CUTLASS buffers: 7680 for 128 experts)
want="65536 131072 131072 8192 16384 1024 8192 4096 16384 16384 16384 8388608 4096 8192 512 512 1023 6291456 7680 67584 3145728 3145728 8388608 7680 67584 8388608 16384 16384 8388608 1048576"
q3 qone "layers = 1"
"$VRSIM" "$tmp/qone.lua" --no-files --alloc-trace "$tmp/qone.csv" >/dev/null 2>"$tmp/err"
got=$(awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp/ { printf "%s ", $5 }' "$tmp/qone.csv" | sed 's/ $//')
if [ "$got" = "$want" ]; then ok "Qwen3-MoE block forward: transformers' allocations in order, the weighting in bf16"
else bad "Qwen3-MoE block forward allocates: $got (transformers: $want)"; fi
#    dense layers where Qwen3MoeDecoderLayer keeps them: 4 layers, decoder_sparse_step 2,
#    mlp_only_layers [1]: layers 0, 1, 2 dense, 3 sparse; transformers counts 1,415,334,912
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d.update(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[1]); json.dump(d, open(sys.argv[2], 'w'))" \
  scenarios/configs/qwen3-30b-a3b.json "$tmp/q4.json"
q3 qsparse "" q4.json
got=$("$VRSIM" "$tmp/qsparse.lua" --json --no-files | field 'sum(v for k, v in d["parameters"].items())')
if [ "$got" = 1415334912 ]; then ok "Qwen3-MoE decoder_sparse_step and mlp_only_layers: dense layers where transformers has them"
else bad "Qwen3-MoE sparse step: $got parameters, transformers counts 1415334912"; fi

# 6. GPT-OSS (models/gpt_oss.lua): gpt-oss-20b's and gpt-oss-120b's parameters as transformers counts
#    them (meta device, 5.25): 20,914,757,184 and 116,829,156,672; the MXFP4 experts taken as
#    dequantized to bf16, with a note
cp scenarios/configs/gpt-oss-20b.json scenarios/configs/gpt-oss-120b.json "$tmp/"
go() { # name config [training fields]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "$2" },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2, optimizer = "sgd", $3 } }
EOS
}
for cn in gpt-oss-20b:20914757184 gpt-oss-120b:116829156672; do
  c=${cn%%:*}; want=${cn#*:}
  go gfull "$c.json"
  "$VRSIM" "$tmp/gfull.lua" --json --no-files > "$tmp/gfull.json" 2>"$tmp/err"
  got=$(field 'sum(d["parameters"].values())' < "$tmp/gfull.json")
  note=$(field '" ".join(d["notes"])' < "$tmp/gfull.json")
  case "$got $note" in
    "$want "*"MXFP4 weights are taken as dequantized to bf16"*) ok "$c: $want parameters, as transformers counts; MXFP4 noted as dequantized" ;;
    *) bad "$c: $got parameters (transformers: $want), notes: $note" ;;
  esac
done
#    layer 0 (sliding) of gpt-oss-20b cut to two layers at 1 x 256 tokens, as transformers' fake-CUDA
#    forward allocates (validation/oracle/captures/gpt_oss_20b_l2_bf16): the eager attention with
#    its sinks (q @ k^T, * scaling, + mask, the cat with the sinks column (b, 64, s, s + 1), the
#    row max and its int64 indices, the shifted logits, softmax, @ v, the transpose copy) and the
#    MLP (router addmm with its bias, topk, softmax over k in bf16, sort, perm // k, the gathers,
#    histc, cumsum, the gate_up bias gather and grouped GEMM, the two clamps, gate * alpha,
#    sigmoid, glu, up + 1, their product, the down bias gather and grouped GEMM, the weighting,
#    the inverse permutation, the reorder, the sum over k)
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d.update(num_hidden_layers=2, layer_types=d['layer_types'][:2]); json.dump(d, open(sys.argv[2], 'w'))" \
  scenarios/configs/gpt-oss-20b.json "$tmp/g2.json"
go gtwo g2.json
"$VRSIM" "$tmp/gtwo.lua" --no-files --alloc-trace "$tmp/g2.csv" >/dev/null 2>"$tmp/err"
want="8388608 8388608 8388608 8421376 32768 131072 8421376 8421376 2097152 2097152"
got=$(awk -F, '$7 ~ /^layers\.1\./ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.self_attn\.(qk|scale|add_mask|cat_sinks|row_max|sub_max|softmax|pv|attn_transpose)$/ { printf "%s ", $5 }' "$tmp/g2.csv" | sed 's/ $//')
if [ "$got" = "$want" ]; then ok "GPT-OSS attention with sinks: transformers' eager allocations in order"
else bad "GPT-OSS attention allocates: $got (transformers: $want)"; fi
# (with the CUDA-only cub scan temporary and the grouped GEMMs' CUTLASS buffers: 1920 for 32 experts,
# fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr)
want="16384 2048 8192 2048 8192 8192 8192 5898240 2048 4096 128 128 1023 11796480 11796480 1920 67584 5898240 5898240 5898240 5898240 5898240 5898240 5898240 5898240 5898240 1920 67584 5898240 8192 8192 5898240 1474560"
got=$(awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp/ { printf "%s ", $5 }' "$tmp/g2.csv" | sed 's/ $//')
if [ "$got" = "$want" ]; then ok "GPT-OSS MLP forward: transformers' 28 allocations and 5 of CUDA's in order (biases, clamped SwiGLU)"
else bad "GPT-OSS MLP forward allocates: $got (transformers: $want)"; fi
#    all-linear LoRA r 16 reaches q, k, v and o only (the router and experts are not nn.Linear):
#    663,552 parameters in two layers, as peft 0.21 counts; peft has no default targets for gpt_oss
go glora g2.json 'precision = "lora_bf16", lora = { r = 16, targets = "all-linear" }'
n=$("$VRSIM" "$tmp/glora.lua" --json --no-files 2>"$tmp/err" | field 'd["n_trainable"]')
if [ "$n" = 663552 ]; then ok "GPT-OSS all-linear LoRA: 663552 trainable, as peft counts"
else bad "GPT-OSS all-linear LoRA: $n trainable (peft: 663552)"; fi
#    LoRA on the experts' 3-D weights (target_parameters): GptOssExperts is_transposed (weights
#    (experts, in, out)), so peft's ParamWrapper does not swap in and out: r 8 on q, k, v, o and
#    the experts, 7,704,576 trainable in two layers as peft 0.21 counts (gate_up lora_A
#    (8 x 32, 2880), lora_B (5760, 8 x 32)); each forward casts the factors, A.T (E, in, r) and
#    B.T (E, r, out), checks the parametrization (a whole stack, dropped), outermost (down_proj)
#    first, then folds gate_up (32 x 2880 x 5760 bf16) and down where the experts read them
#    (captures/gpt_oss_20b_l2_lora_experts)
go gexp g2.json 'precision = "lora_bf16", lora = { r = 8, alpha = 16, dropout = 0, targets = { "q_proj", "k_proj", "v_proj", "o_proj" },
  target_parameters = { "mlp.experts.gate_up_proj", "mlp.experts.down_proj" } }'
"$VRSIM" "$tmp/gexp.lua" --json --no-files --alloc-trace "$tmp/gexp.csv" > "$tmp/gexp.json" 2>"$tmp/err"
n=$(field 'd["n_trainable"]' < "$tmp/gexp.json")
if [ "$n" = 7704576 ]; then ok "GPT-OSS expert LoRA (target_parameters): 7704576 trainable, as peft counts"
else bad "GPT-OSS expert LoRA: $n trainable (peft: 7704576) $(cat "$tmp/err")"; fi
# (on CUDA each baddbmm copies the transposed B factor, (E, r, out), contiguous for cuBLAS)
want="1474560 1474560 530841600 1474560 1474560 2949120 1061683200 2949120 1061683200 2949120 530841600 1474560"
got=$(awk -F, '$7 ~ /^layers\.0\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.0\.mlp\.experts\.[a-z_]+\.lora/ { printf "%s ", $5 }' "$tmp/gexp.csv" | sed 's/ $//')
if [ "$got" = "$want" ]; then ok "GPT-OSS ParamWrapper forward: the transposed factors, the checks and the folded stacks, in peft's order"
else bad "GPT-OSS ParamWrapper forward allocates: $got (peft: $want)"; fi
#    backward: each factor's gradient comes back transposed, so both reshapes copy it (A's
#    (256, 2880) fp32 included, where Qwen3-MoE's A is a plain view)
got=$(awk -F, '$3 == "alloc" && $7 == "layers.0.mlp.experts.gate_up_proj.lora_A.reshape_t.backward" { print $5; exit }' "$tmp/gexp.csv")
if [ "$got" = 2949120 ]; then ok "GPT-OSS expert LoRA backward: lora_A's reshape copies its transposed gradient"
else bad "GPT-OSS expert LoRA backward: lora_A reshape copy '$got' (want 2949120)"; fi
#    refused by name: the experts kept in MXFP4, fp16, autocast, flash attention, LoRA without targets
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['quantization_config']['dequantize'] = False; json.dump(d, open(sys.argv[2], 'w'))" \
  "$tmp/g2.json" "$tmp/gkeep.json"
go gkeep gkeep.json
"$VRSIM" "$tmp/gkeep.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "dequantize = false.*not modelled" "$tmp/out"; then ok "MXFP4 kept (dequantize false): exit 2 naming it"
else bad "MXFP4 kept: exit $rc: $(cat "$tmp/out")"; fi
for kv in 'precision = "fp16"|fp16 is not modelled' 'precision = "amp_bf16"|autocast' \
          'attention = "flash"|flash kernels' 'precision = "lora_bf16"|no default target modules for gpt_oss'; do
  go gbad g2.json "${kv%%|*}"
  "$VRSIM" "$tmp/gbad.lua" --no-files >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "${kv#*|}" "$tmp/out"; then ok "GPT-OSS ${kv%%|*}: exit 2 naming it"
  else bad "GPT-OSS ${kv%%|*}: exit $rc: $(cat "$tmp/out")"; fi
done
#    SDPA asked for (the default) runs eager, with a note
note=$("$VRSIM" "$tmp/gtwo.lua" --json --no-files 2>"$tmp/err" | field '" ".join(d["notes"])')
case "$note" in
  *"does not run SDPA"*"falls back to eager"*) ok "GPT-OSS: SDPA falls back to eager, noted" ;;
  *) bad "GPT-OSS SDPA note missing: $note" ;;
esac

# backward temporaries of the block at 1 x 256 tokens (fulltrace_gen4-qwen3moe-l4-b2,
# fulltrace_gen4-dsv2lite-l4-b1-eager): `proj_out * weights` with Mixtral's fp32 weights makes
# the weights' gradient as the full fp32 (512, 4096) product, and the projection's as an fp32
# product cast to bf16, then the (512, 1) sum; the router's softmax backward makes its gradient
# and `grad * output` (two (256, 8) fp32 buffers) (the trace of 2.)
got=$(awk -F, '$3 == "alloc" && $7 == "layers.0.mlp.experts.weighted.backward" { printf "%s ", $5; if (++n == 4) exit }' "$tmp/one.csv" | sed 's/ $//')
# (each step: one forward softmax, two 8 KiB buffers in its backward)
sm=$(awk -F, '$3 == "alloc" && $7 == "layers.0.mlp.router_softmax" { f++ }
              $3 == "alloc" && $7 == "layers.0.mlp.router_softmax.backward" && $5 == 8192 { b++ }
              END { print b / f }' "$tmp/one.csv")
if [ "$got" = "8388608 8388608 4194304 2048" ] && [ "$sm" = "2" ]; then
  ok "MoE backward: the weighting's full-size products and the router softmax's grad * output"
else bad "MoE backward: weighted '$got' (want 8388608 8388608 4194304 2048), router softmax $sm buffers a step (want 2)"; fi

# 9. a GPU's own grouped GEMM table (lua/hw/calibrated/<gpu>_grouped_mm.lua, made by
#    validation/harness/measure_grouped_mm.py): with the synthetic one of tests/data in a copy of
#    lua/ as the H100's, each grouped GEMM and dispatch index op of Mixtral's block takes its row's
#    time (us, the second step): the forward GEMMs, their backward's two gradients, sort, histc,
#    cumsum, the inverse permutation, the three gathers and their IndexBackward0 (repeating indices
#    for the hidden states). Without the table those ops are priced as before, with a note; a
#    table that lacks a shape is noted by shape; the H200 (the H100's profile is the H200's,
#    carried) does not read the H100's table.
mkdir "$tmp/g" && cp scenarios/configs/mixtral-8x7b.json "$tmp/g/"
cp -r "${VRSIM_LUA:-lua}" "$tmp/lua"
cp -r "$tmp/lua" "$tmp/lua0" && rm -f "$tmp/lua0/hw/calibrated/h100_sxm_grouped_mm.lua"   # (none)
cp tests/data/grouped_mm_synthetic.lua "$tmp/lua/hw/calibrated/h100_sxm_grouped_mm.lua"
cat > "$tmp/g/h100.lua" <<EOS
return { hardware = { gpu = "h100" }, model = { config = "mixtral-8x7b.json", layers = 1 },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2 } }
EOS
sed 's/"h100"/"h200"/' "$tmp/g/h100.lua" > "$tmp/g/h200.lua"
durs() { # trace.json -> "name=dur ..." of the block's grouped GEMMs and index ops, second step
  python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev['traceEvents'] if isinstance(ev, dict) else ev
want = ['experts.gate_up_proj', 'experts.gate_up_proj.backward', 'experts.down_proj', 'experts.down_proj.backward',
        'sort', 'histc', 'cumsum', 'inv_perm', 'select_hidden', 'select_hidden.backward', 'select_weights',
        'select_weights.backward', 'restore_order', 'restore_order.backward']
got = {e['name'][len('layers.0.mlp.'):]: e['dur'] for e in ev
       if e.get('args', {}).get('step') == 1 and e.get('name', '').startswith('layers.0.mlp.')}
print(' '.join('%s=%g' % (w, round(got.get(w, -1), 3)) for w in want))" "$1"
}
VRSIM_LUA="$tmp/lua" "$VRSIM" "$tmp/g/h100.lua" --json --out "$tmp/gt" > "$tmp/gt.json" 2>"$tmp/err"
VRSIM_LUA="$tmp/lua0" "$VRSIM" "$tmp/g/h100.lua" --json --out "$tmp/gd" > "$tmp/gd.json" 2>>"$tmp/err"
want="experts.gate_up_proj=300 experts.gate_up_proj.backward=600 experts.down_proj=150 experts.down_proj.backward=300 sort=12 histc=8 cumsum=6 inv_perm=7 select_hidden=20 select_hidden.backward=45 select_weights=6.5 select_weights.backward=9 restore_order=15 restore_order.backward=30"
got=$(durs "$tmp/gt/trace.json")
note_t=$(field '" | ".join(d["notes"])' < "$tmp/gt.json" | grep -c "_grouped_mm")
note_d=$(field '" | ".join(d["notes"])' < "$tmp/gd.json" | grep -c "no grouped GEMM table measured on the NVIDIA H100")
if [ "$got" = "$want" ] && [ "$note_t" = 0 ] && [ "$note_d" = 1 ]; then
  ok "MoE on a GPU with its own grouped GEMM table: each grouped GEMM and index op takes its row's time"
else bad "MoE with a grouped GEMM table: $got (want $want); table note $note_t (want 0), default note $note_d (want 1) $(cat "$tmp/err")"; fi
dflt=$(durs "$tmp/gd/trace.json")
case "$dflt" in *experts.gate_up_proj=300\ *) bad "MoE without a grouped GEMM table: priced as the table ($dflt)" ;;
  *) ok "MoE without a grouped GEMM table: the GEMM curve and the classes, as before" ;; esac
VRSIM_LUA="$tmp/lua" "$VRSIM" "$tmp/g/h200.lua" --no-files --json > "$tmp/h2t.json" 2>>"$tmp/err"
VRSIM_LUA="$tmp/lua0" "$VRSIM" "$tmp/g/h200.lua" --no-files --json > "$tmp/h2d.json" 2>>"$tmp/err"
a=$(field 'd["step_time_ms"]' < "$tmp/h2t.json"); b=$(field 'd["step_time_ms"]' < "$tmp/h2d.json")
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "the H100's grouped GEMM table is not read for the H200 ($a ms either way)"
else bad "the H100's grouped GEMM table changed the H200's step: $a ms against $b"; fi
grep -v 'n=4096, k=14336' tests/data/grouped_mm_synthetic.lua > "$tmp/lua/hw/calibrated/h100_sxm_grouped_mm.lua"
VRSIM_LUA="$tmp/lua" "$VRSIM" "$tmp/g/h100.lua" --no-files --json > "$tmp/gm.json" 2>>"$tmp/err"
got=$(field '" | ".join(d["notes"])' < "$tmp/gm.json" | grep -o "no balanced rows of its shape: [^|]*" | sed 's/ $//')
if [ "$got" = "no balanced rows of its shape: dgrad nt experts=8 n=4096 k=14336, fwd nt experts=8 n=4096 k=14336, wgrad nt experts=8 n=4096 k=14336" ]; then
  ok "a grouped GEMM table without a shape: the note names it"
else bad "a grouped GEMM table without the down projection's shape: note '$got'"; fi

# gpt-oss's eager attention with sinks and its LoRA o_proj in the first forward under
# checkpointing, against the allocator trace measured on an H200 (validation/traces/
# fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr.csv.gz, 7 x 4096, all-linear LoRA r8, dropout 0):
# for every layer of every step's first forward, the 69 allocations and frees from the rotary
# tables to the router are the trace's, size by size and in order: the max's (value, index)
# accumulation buffer of a reduction over more than 2^31 elements, the max's values freed before
# the cat's output, key_states and value_states freed as eager_attention_forward returns, peft's
# fp32 cast of the input kept until its forward returns (lora_dropout 0 is nn.Identity), the keys
# and values before repeat_kv freed as the attention's forward returns, and GptOssRMSNorm's
# rsqrt freed before its fp32 copy, its normalized input and variance kept until it returns
python3 - "$tmp/gptoss_b7.lua" <<'PY'
import json, sys
def lua(v):
    if isinstance(v, bool): return "true" if v else "false"
    if v is None: return "nil"
    if isinstance(v, (int, float)): return repr(v)
    if isinstance(v, str): return json.dumps(v)
    if isinstance(v, list): return "{" + ",".join(lua(x) for x in v) + "}"
    return "{" + ",".join("[%s]=%s" % (json.dumps(k), lua(x)) for k, x in v.items()) + "}"
for line in open("validation/records/llama_h200_gen11_trace.jsonl"):
    r = json.loads(line)
    if r["name"] == "gen11-gptoss-20b-lora-all-b7-ckpt-tr":
        break
open(sys.argv[1], "w").write('local s = assert(require("vrsim.record").scenario(%s, {steps=2}))\nreturn s\n' % lua(r))
PY
"$VRSIM" "$tmp/gptoss_b7.lua" --no-files --alloc-trace "$tmp/gptoss_b7.csv" >/dev/null 2>"$tmp/err"
got=$(python3 - validation/traces/fulltrace_gen11-gptoss-20b-lora-all-b7-ckpt-tr.csv.gz "$tmp/gptoss_b7.csv" <<'PY'
import csv, gzip, sys
def rows(p):
    f = gzip.open(p, "rt") if p.endswith(".gz") else open(p)
    return [(r["action"], r["size"], r.get("frames") or "") for r in csv.DictReader(f)
            if r["action"] in ("alloc", "free_completed")]
t, v = rows(sys.argv[1]), rows(sys.argv[2])
cat = lambda rs: [i for i, r in enumerate(rs) if r[0] == "alloc" and r[1] == "15036055552"]
same = differ = 0
for i, j in zip(cat(t), cat(v)):
    if not v[j][2].endswith(".self_attn.cat_sinks"):
        continue  # the recomputation's and backward's: not this check's
    if [x[:2] for x in t[i - 12:i + 57]] == [x[:2] for x in v[j - 12:j + 57]]: same += 1
    else: differ += 1
# cub's radix-sort temporaries of the dispatch, by size, from step 0's last logits-sized
# allocation (its loss's backward) to step 1's: step 0's backward (its recomputation's sort over 64
# bits, index_put_'s over 17 and 15 bits) and step 1's forward
def sorts(rs):
    logits = [i for i, r in enumerate(rs) if r[0] == "alloc" and r[1] == "23062380544"]
    c = {}
    for r in rs[logits[3]:logits[7]]:
        if r[0] == "alloc" and r[1] in ("1877503", "1867263", "1865215"):
            c[r[1]] = c.get(r[1], 0) + 1
    return c
print(same, differ, "sorts", "same" if sorts(t) == sorts(v) else "%s against the trace's %s" % (sorts(v), sorts(t)))
PY
)
if [ "$got" = "48 0 sorts same" ]; then ok "gpt-oss attention, LoRA o_proj, RMSNorm and router: 48 layer forwards allocate and free as the H200 trace, event by event; cub's sort temporaries are the trace's, size by size"
else bad "gpt-oss against the H200 trace: $got (want 48 windows same, 0 different, sorts same) $(cat "$tmp/err")"; fi

# gpt-oss's eager attention with sinks on an H100 at 4096 tokens: the cat with the sink column,
# the softmax over rows of 4097, the probabilities' strided slice times the values (cuBLAS's
# align1 kernel) and their backwards each take their own class's measured time at that shape
# (lua/hw/calibrated/h100_sxm_sinks_attention.lua, from results/sinks_attention_h100.json), plus
# the stream's gap after each kernel (1.558 us; the table's rates are rounded to 0.1 GB/s); at
# micro-batch 2 the scores pass 2^31 elements and the cat is cat_out_cuda's slice copies
# (cat_sinks_copy), faster than the batched kernel
for mb in 1 2; do
  "$VRSIM" scenarios/gpt_oss_20b_lora_h100.lua --set micro_batch=$mb --out "$tmp/sinks$mb" >/dev/null 2>"$tmp/err"
done
got=$(python3 - "$tmp/sinks1/trace.json" "$tmp/sinks2/trace.json" <<'PY'
import json, sys
want = {  # (micro-batch, op): (kind, ms in the table)
    (1, "cat_sinks"): ("cat_sinks", 6.21637), (1, "softmax"): ("softmax_sinks", 4.21166),
    (1, "pv"): ("mm_align1", 1.69873), (1, "pv.backward"): ("mm_align1_bwd", 2.08453),
    (1, "softmax.backward"): ("softmax_sinks_bwd", 5.39835),
    (2, "cat_sinks"): ("cat_sinks_copy", 5.34552), (2, "softmax"): ("softmax_sinks", 8.36966),
    (2, "pv"): ("mm_align1", 3.35700), (2, "pv.backward"): ("mm_align1_bwd", 3.93097),
    (2, "softmax.backward"): ("softmax_sinks_bwd", 10.78090)}
seen, bad = 0, []
for mb, path in ((1, sys.argv[1]), (2, sys.argv[2])):
    t = json.load(open(path))
    for e in (t["traceEvents"] if isinstance(t, dict) else t):
        a = e.get("args", {})
        op = e.get("name", "")[len("layers.0.self_attn."):]
        if e.get("ph") != "X" or a.get("step") != 1 or not e["name"].startswith("layers.0.self_attn.") or (mb, op) not in want:
            continue
        kind, ms = want[(mb, op)]
        seen += 1
        if a["kind"] != kind or abs(e["dur"] - ms * 1e3 - a.get("kernels", 1) * 1.558) > 0.05 + 1e-4 * ms * 1e3:
            bad.append(f"{mb} {op} {a['kind']} {e['dur']:.2f} us")
print(seen, "; ".join(bad) or "same")
PY
)
if [ "$got" = "10 same" ]; then ok "gpt-oss attention with sinks on an H100: the cat, the softmax over rows of s + 1, the align1 GEMM and their backwards at their measured classes' times, at 1 and 2 x 4096"
else bad "gpt-oss attention with sinks, op times against h100_sxm_sinks_attention.lua: $got $(cat "$tmp/err")"; fi

# peft's expert folding on an H100 (LoRA on the experts' 3-D weights): each torch.baddbmm(W, lhs,
# rhs), its memcpy of W and cuBLAS's in-place beta-1 GEMM, takes the whole call's measured time at
# its shape (lua/hw/calibrated/h100_sxm_baddbmm.lua, class mm_baddbmm: 128 x 1536 x 2048 and
# 128 x 2048 x 768 at r 16, 1.35011 and 0.67642 ms) plus the stream's gap after each of its two
# kernels; its backward (BaddbmmBackward0's two bmm over the stack's gradient) at that table's
# mm_baddbmm_bwd class, the rate of the ranks measured at the stack's size (0.606-0.669 and
# 0.308-0.370 ms at r 8 to 64), no faster than a GEMM
"$VRSIM" scenarios/qwen3_30b_a3b_lora_experts_h100.lua --set model.layers=1 --out "$tmp/fold" >/dev/null 2>"$tmp/err"
got=$(python3 - "$tmp/fold/trace.json" <<'PY'
import json, sys
want = {"gate_up_proj.lora_baddbmm": 1.35011, "down_proj.lora_baddbmm": 0.67642}
bwd = {"gate_up_proj.lora_baddbmm.backward": (605.59, 668.59), "down_proj.lora_baddbmm.backward": (308.35, 369.72)}
t = json.load(open(sys.argv[1]))
seen, bad = 0, []
for e in (t["traceEvents"] if isinstance(t, dict) else t):
    a = e.get("args", {})
    op = e.get("name", "")[len("layers.0.mlp.experts."):]
    if e.get("ph") != "X" or a.get("step") != 1 or not e["name"].startswith("layers.0.mlp.experts."):
        continue
    if op in want:
        seen += 1
        if a["kind"] != "mm_baddbmm" or abs(e["dur"] - want[op] * 1e3 - 2 * 1.558) > 0.05:
            bad.append(f"{op} {a['kind']} {e['dur']:.2f} us")
    elif op in bwd:
        seen += 1
        lo, hi = bwd[op]
        if a["kind"] != "mm_baddbmm_bwd" or not lo <= e["dur"] <= hi + 2 * 1.558:
            bad.append(f"{op} {a['kind']} {e['dur']:.2f} us")
print(seen, "; ".join(bad) or "same")
PY
)
if [ "$got" = "4 same" ]; then ok "peft's expert folding on an H100: each torch.baddbmm at its measured whole-call time (mm_baddbmm), its backward at its measured class (mm_baddbmm_bwd)"
else bad "expert folding against h100_sxm_baddbmm.lua: $got $(cat "$tmp/err")"; fi

# the experts' SwiGLU reads the two halves of the gate_up product, views with a row stride of
# twice their width, as GEGLU's (models/blocks/unet.lua): act_fn(gate) at the "strided" class
# (its backward, reading one strided operand beside contiguous ones, at "strided_mixed"), act * up
# at "strided_mixed" and its backward at "strided_mixed_bwd"
cp scenarios/configs/mixtral-8x7b.json "$tmp/"  # (a check above rewrote the copy)
scn swiglu "layers = 1"
"$VRSIM" "$tmp/swiglu.lua" --out "$tmp/swiglu" >/dev/null 2>"$tmp/err"
got=$(python3 - "$tmp/swiglu/trace.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
k = {}
for e in (t["traceEvents"] if isinstance(t, dict) else t):
    if e.get("ph") == "X" and e.get("args", {}).get("step") == 1 and e["name"].startswith("layers.0.mlp.experts."):
        k[e["name"][len("layers.0.mlp.experts."):]] = e["args"]["kind"]
print(" ".join(k.get(n, "-") for n in ("act_fn", "mul", "mul.backward", "act_fn.backward")))
PY
)
if [ "$got" = "strided strided_mixed strided_mixed_bwd strided_mixed" ]; then ok "MoE experts' SwiGLU over the strided halves: act_fn strided, the product strided_mixed (as GEGLU's)"
else bad "MoE experts' SwiGLU kinds (act_fn, mul, their backwards): $got $(cat "$tmp/err")"; fi

# the routing weights' product `proj_out * sample_weights_g.unsqueeze(-1)`: a stride-0 column, so
# TensorIterator's non-vectorized kernel, unrolled by the dtype (Loops.cuh): in bf16 (Qwen3-MoE's
# weights) the broadcast class's kernel, in fp32 (Mixtral's, which promote the product) the
# broadcast_rows class's. In bf16 the backward's three kernels are apart: grad * weights at
# broadcast, grad * proj_out contiguous (elementwise), the engine's row sum (reduce_rows); fp32's
# stays one op at broadcast_rows (512 tokens: 4096 pairs, so the weights' column is not as long as
# a row, which nn.mul would read as a weight vector)
cp scenarios/configs/qwen3-30b-a3b.json "$tmp/"
cat > "$tmp/qwen3w.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "qwen3-30b-a3b.json", layers = 1 },
  training = { micro_batch = 1, seq = 512, precision = "bf16", steps = 2 } }
EOS
"$VRSIM" "$tmp/qwen3w.lua" --out "$tmp/qwen3w" >/dev/null 2>"$tmp/err"
"$VRSIM" "$tmp/swiglu.lua" --out "$tmp/swiglu" >/dev/null 2>>"$tmp/err"
got=$(python3 - "$tmp/qwen3w/trace.json" "$tmp/swiglu/trace.json" <<'PY'
import json, sys
out = []
for f in sys.argv[1:]:
    t = json.load(open(f))
    k = {}
    for e in (t["traceEvents"] if isinstance(t, dict) else t):
        if e.get("ph") == "X" and e.get("args", {}).get("step") == 1 and e["name"].startswith("layers.0.mlp.experts.weight"):
            k[e["name"][len("layers.0.mlp.experts."):]] = e["args"]["kind"]
    out.append("/".join(k.get(n, "-") for n in ("weighted", "weighted.backward", "weights_grad_product.backward",
                                                 "weights_grad_sum.backward")))
print(" ".join(out))
PY
)
if [ "$got" = "broadcast/broadcast/elementwise/reduce_rows broadcast_rows/broadcast_rows/-/-" ]; then ok "MoE routing weights' product: bf16 (Qwen3-MoE) at the broadcast class, its backward's weights gradient contiguous and summed apart; fp32 (Mixtral) at broadcast_rows"
else bad "MoE routing weights' product kinds (Qwen3-MoE, Mixtral: forward/backward): $got $(cat "$tmp/err")"; fi

# peft's `result + lora_B(lora_A(dropout(x))) * scaling` adds the fp32 product to the bf16 base
# output: contiguous operands of two dtypes run the unrolled kernel with LoadWithCast (the H200's
# Qwen3 4 x 4096 step: 2.5 TB/s, against the contiguous class's 3.9), class add_mixed; its
# backward keeps the elementwise class. On an H100, which measured this very add
# (lua/hw/calibrated/h100_sxm_add_mixed.lua), q_proj's 2048 x 4096 sum takes that row's 41.09 us
# and the stream's gap; on the H200, which has no such row, the cast_up class's time for the same
# bytes, which is not the generic contiguous one (tests/test_cost.c has the fallback itself)
for g in h100_sxm h200; do
cat > "$tmp/qwen3l_$g.lua" <<EOS
return { hardware = { gpu = "$g" }, model = { config = "qwen3-30b-a3b.json", layers = 1 },
  training = { micro_batch = 1, seq = 2048, precision = "lora_bf16", steps = 2,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = { "q_proj" } } } }
EOS
"$VRSIM" "$tmp/qwen3l_$g.lua" --out "$tmp/qwen3l_$g" >/dev/null 2>"$tmp/err"
done
got=$(python3 - "$tmp/qwen3l_h100_sxm/trace.json" "$tmp/qwen3l_h200/trace.json" <<'PY'
import json, sys
def ops(path):
    t = json.load(open(path))
    return {e["name"]: e for e in (t["traceEvents"] if isinstance(t, dict) else t)
            if e.get("ph") == "X" and e.get("args", {}).get("step") == 1
            and e["name"].startswith("layers.0.self_attn.q_proj.lora_")}
h100, h200 = ops(sys.argv[1]), ops(sys.argv[2])
add = "layers.0.self_attn.q_proj.lora_add"
out = []
for k in (h100, h200):
    out.append(k[add]["args"]["kind"] + "/" + k[add + ".backward"]["args"]["kind"] if add in k else "-")
# the H100: the measured row plus one gap (1.558 us); the H200: slower than its contiguous
# class would make 80 MiB at 3.9 TB/s (21.5 us), as the cast_up kernel is
out.append("h100 " + ("at its row" if add in h100 and abs(h100[add]["dur"] - 41.09 - 1.558) < 0.05
                      else "%.2f us" % h100.get(add, {}).get("dur", -1)))
out.append("h200 " + ("cast_up" if add in h200 and h200[add]["dur"] > 25 else "%.2f us" % h200.get(add, {}).get("dur", -1)))
print(" ".join(out))
PY
)
if [ "$got" = "add_mixed/elementwise add_mixed/elementwise h100 at its row h200 cast_up" ]; then ok "LoRA's bf16 + fp32 add at class add_mixed (its measured row on an H100, the cast_up kernel's class on the H200), its backward elementwise"
else bad "LoRA's bf16 + fp32 add (kinds on the H100 and H200, times): $got $(cat "$tmp/err")"; fi

# The experts-LoRA run's allocator trace (validation/records/llama_h100_gen11_experts_trace.jsonl:
# Qwen3-30B-A3B, the MLP names in targets (peft's target_parameters, gate_up_proj at r 32),
# checkpointing, 1 x 4096, one H100, four steps) against vrsim's stream of the same scenario, step
# by step (validation/harness/compare_alloc_streams.py): as many allocations of each size the
# experts' ops make, the GPU-only ones included: B's contiguous copy in every baddbmm (12 MiB for
# gate_up_proj, 8 for down_proj: five a layer), each grouped GEMM's CUTLASS arguments and
# workspace (7680, 67584), cumsum's scan temporary (1023), the top-k division's backward
# temporaries (128 KiB) and the index_put's arrays of the pairs (256 KiB); and every 16 MiB one, layer
# 0's input-norm cast of the embedding output's gradient (enable_input_require_grads) among them
rec=validation/records/llama_h100_gen11_experts_trace.jsonl
python3 -c "import json, sys; r = json.loads(open(sys.argv[1]).readline()); json.dump(r['hf_config'], open(sys.argv[2], 'w'))" \
  "$rec" "$tmp/gen11cfg.json"
cat > "$tmp/gen11.lua" <<EOS
return { hardware = { gpu = "h100_sxm", capacity_mib = 81079.0 }, model = { config = "gen11cfg.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", optimizer = "adamw", optimizer_impl = "foreach",
    checkpointing = true, checkpoint_impl = "transformers", steps = 4, build = "direct", transformers = "5.25.0",
    lora = { r = 16, alpha = 32, dropout = 0, targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } } } }
EOS
"$VRSIM" "$tmp/gen11.lua" --no-files --alloc-trace "$tmp/gen11.csv" >/dev/null 2>"$tmp/err"
got=$(python3 validation/harness/compare_alloc_streams.py validation/traces/fulltrace_gen11-qwen3-30b-a3b-lora-experts-b1-ckpt-tr.csv.gz \
  "$tmp/gen11.csv" --json --sizes 12582912,8388608,7680,67584,1023,131072,262144,16777216 2>&1 | tr '\n' ' ')
case "$got" in
  '{"step": 0, "measured": 8790, "vrsim": 8790, "diff": {}} {"step": 1, "measured": 8118, "vrsim": 8118, "diff": {}} '*'{"step": 3, "measured": 8118, "vrsim": 8118, "diff": {}} ')
    ok "experts-LoRA trace: every step's 12 and 8 MiB copies, CUTLASS buffers, scan, division and index_put temporaries, 16 MiB blocks as measured" ;;
  *) bad "experts-LoRA trace against vrsim's stream: $got $(cat "$tmp/err")" ;;
esac

# the dispatch's multi-kernel ops launch what torch.profiler counts per call on an H100
# (validation/results/ops_gen11_experts_h100.jsonl: aten::sort of the 32768 int64 pairs 21,
# aten::cumsum 2, aten::_index_put_impl_ 5 for a 1-D index and 9 for rows); each gather's backward
# is the zeros and index_put_with_sort (1 + 9 for the hidden states and the pairs, 1 + 5 for the
# routing weights), in forward, recomputation and backward alike
got=$(python3 - "$tmp/fold/trace.json" <<'PY'
import json, sys
want = {"sort": 21, "cumsum": 2, "inv_perm": 5, "restore_order.backward": 10,
        "select_hidden.backward": 10, "select_weights.backward": 6}
t = json.load(open(sys.argv[1]))
seen, bad = 0, []
for e in (t["traceEvents"] if isinstance(t, dict) else t):
    if e.get("ph") != "X" or e.get("args", {}).get("step") != 1:
        continue
    op = e["name"].replace(" (recompute)", "")
    if op.startswith("layers.0.mlp.") and op[len("layers.0.mlp."):] in want:
        seen += 1
        if e["args"]["kernels"] != want[op[len("layers.0.mlp."):]]:
            bad.append("%s %d" % (e["name"], e["args"]["kernels"]))
print(seen, "; ".join(bad) or "same")
PY
)
if [ "$got" = "9 same" ]; then ok "MoE dispatch: sort, cumsum and index_put launch their profiled kernel counts (forward, recomputation, backward)"
else bad "MoE dispatch launches against ops_gen11_experts_h100.jsonl: $got"; fi

echo "test_moe: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
