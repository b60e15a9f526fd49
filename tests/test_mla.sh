#!/bin/sh
# DeepSeek-V2 and -V3 (lua/models/deepseek_v2.lua, deepseek_v3.lua) as transformers 5.25 runs them:
# multi-head latent attention, dense layers before first_k_dense_replace, routed and shared experts,
# V2's softmax routing (greedy, group_limited_greedy) and V3's sigmoid group-limited routing; the
# parameter counts against transformers (meta device), the forward allocations against its fake-CUDA
# captures (validation/oracle/captures/deepseek_*), peft's reach, and the refusals.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp scenarios/configs/deepseek-v2-lite.json scenarios/configs/deepseek-v3.json "$tmp/"
field() { python3 -c "import sys,json; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
# the configs with keys changed: edit SRC DST 'python statements on d'
edit() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); exec(sys.argv[3]); json.dump(d, open(sys.argv[2], 'w'))" "$tmp/$1" "$tmp/$2" "$3"; }
edit deepseek-v3.json v3.json 'd.pop("quantization_config")'
edit deepseek-v3.json v3-l2.json 'd.pop("quantization_config"); d.update(num_hidden_layers=2, first_k_dense_replace=1)'
edit deepseek-v3.json v3-l4.json 'd.pop("quantization_config"); d.update(num_hidden_layers=4)'
edit deepseek-v2-lite.json v2-l2.json 'd.update(num_hidden_layers=2)'
edit deepseek-v2-lite.json v2g-l2.json 'd.update(num_hidden_layers=2, topk_method="group_limited_greedy", n_group=8, topk_group=3)'
scn() { # name config [training fields]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "$2" },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2, optimizer = "sgd", attention = "eager", $3 } }
EOS
}
params() { "$VRSIM" "$tmp/$1.lua" --json --no-files 2>"$tmp/err" | field 'sum(d["parameters"].values())'; }

# 1. parameters as transformers counts them (DeepseekV2ForCausalLM / DeepseekV3ForCausalLM on the
#    meta device, 5.25): DeepSeek-V2-Lite 15,706,484,224; DeepSeek-V3 671,026,404,352; V3 cut to 4
#    layers (3 dense, first_k_dense_replace, then one MoE) 15,111,101,440
for cn in deepseek-v2-lite.json:15706484224 v3.json:671026404352 v3-l4.json:15111101440; do
  c=${cn%%:*}; want=${cn#*:}
  scn p "$c"
  got=$(params p)
  if [ "$got" = "$want" ]; then ok "$c: $want parameters, as transformers counts"
  else bad "$c: $got parameters (transformers: $want) $(cat "$tmp/err")"; fi
done

# 2. layer 1 (MoE) of the two-layer cuts at 1 x 256 tokens, forward allocations in order as
#    transformers' fake-CUDA forward makes them (the oracle captures), less the router weight's fp32
#    copy the capture makes because its bf16 build cast that weight (from_pretrained keeps it fp32):
#    the router (the input's fp32 copy, the logits, V2: softmax then top-k (group_limited_greedy: each
#    group's max, the group top-k, the mask, its boolean copies, masked_fill); V3: sigmoid, + the
#    correction bias, each group's top two summed, the group top-k, the mask, masked_fill, top-k, the
#    gathered scores, their sum + eps, the in-place division's copy, the routed scaling), the routed
#    experts (Mixtral's grouped_mm path, weighted in fp32), the shared experts' MLP and the sum;
#    with the CUDA-only buffers the capture cannot show: cumsum's cub scan temporary (1023) and
#    each grouped GEMM's CUTLASS arguments (60 bytes a group: 3840 for V2-Lite's 64 experts, 15360
#    for V3's 256) and workspace (512 bytes an SM of the H200)
mlp() { # config want label
  scn s "$1"
  "$VRSIM" "$tmp/s.lua" --no-files --alloc-trace "$tmp/s.csv" >/dev/null 2>"$tmp/err"
  got=$(awk -F, '$7 ~ /^layers\.1\.mlp.*backward/ { exit } $3 == "alloc" && $7 ~ /^layers\.1\.mlp/ { printf "%s ", $5 }' "$tmp/s.csv" | sed 's/ $//')
  if [ "$got" = "$2" ]; then ok "$3: transformers' MoE block allocations in order"
  else bad "$3 MoE block allocates: $got (transformers: $2)"; fi
}
mlp v2-l2.json "2097152 65536 65536 6144 12288 6144 12288 12288 12288 6291456 6144 6144 256 256 1023 8650752 3840 67584 4325376 4325376 6291456 3840 67584 12582912 12288 12288 12582912 2097152 1048576 1441792 1441792 1441792 1441792 1048576 1048576" "DeepSeek-V2-Lite (greedy)"
mlp v2g-l2.json "2097152 65536 65536 8192 16384 3072 6144 8192 65536 16384 16384 65536 6144 12288 6144 12288 12288 12288 6291456 6144 6144 256 256 1023 8650752 3840 67584 4325376 4325376 6291456 3840 67584 12582912 12288 12288 12582912 2097152 1048576 1441792 1441792 1441792 1441792 1048576 1048576" "DeepSeek-V2-Lite (group_limited_greedy)"
mlp v3-l2.json "7340032 262144 262144 262144 16384 32768 8192 4096 8192 8192 262144 65536 65536 262144 8192 16384 8192 1024 1024 8192 8192 16384 16384 16384 29360128 8192 8192 1024 1024 1023 16777216 15360 67584 8388608 8388608 29360128 15360 67584 58720256 16384 16384 58720256 7340032 3670016 1048576 1048576 1048576 1048576 3670016 3670016" "DeepSeek-V3 (noaux_tc)"

# 3. the latent attention of layer 1, forward allocations in order as the captures have them (less
#    the cache's two empty tensors): V3 with q_lora_rank (q_a_proj, q_a_layernorm, q_b_proj),
#    kv_a_proj_with_mqa, kv_a_layernorm, the interleaved rotary of q and k, the cache's latent and
#    rope key, the query cat, kv_b_proj, the keys' new_empty, q @ k^T, * scaling, + mask, the fp32
#    softmax and its cast, @ v, the transpose copy, o_proj; V2-Lite with q_proj and the complex
#    rotary (fp32 copies, complex64 products, casts back)
attn() { # config want label
  scn a "$1"
  "$VRSIM" "$tmp/a.lua" --no-files --alloc-trace "$tmp/a.csv" >/dev/null 2>"$tmp/err"
  got=$(awk -F, '$7 ~ /^layers\.1\.mlp/ { exit } $3 == "alloc" && $7 ~ /^layers\.1\.(self_attn|q_|k_|key|query|kv|latent|cache)/ { printf "%s ", $5 }' "$tmp/a.csv" | sed 's/ $//')
  if [ "$got" = "$2" ]; then ok "$3: transformers' attention allocations in order"
  else bad "$3 attention allocates: $got (transformers: $2)"; fi
}
attn v3-l2.json "786432 1572864 1572864 1024 1024 1024 1572864 786432 786432 12582912 294912 524288 524288 1024 1024 1024 524288 262144 262144 2097152 2097152 2097152 2097152 2097152 2097152 4194304 16384 16384 16384 16384 16384 16384 32768 262144 32768 12582912 16777216 12582912 16777216 16777216 16777216 33554432 33554432 16777216 8388608 8388608 3670016" "DeepSeek-V3 MLA (q_lora_rank 1536)"
attn v2-l2.json "1572864 294912 524288 524288 1024 1024 1024 524288 262144 262144 1048576 65536 1048576 524288 65536 32768 262144 32768 1572864 2097152 1572864 2097152 2097152 2097152 4194304 4194304 2097152 1048576 1048576 1048576" "DeepSeek-V2-Lite MLA (q_proj, complex rotary)"

# 3b. the same under SDPA (transformers' default), on an H200: after the keys, cuDNN attention on
#    the 192 / 128 head dims (the two int64 philox tensors, the (b, heads, s, 128) output, the fp32
#    row statistic, the 256-byte workspace), then sdpa_attention_forward's transpose(1, 2)
#    .contiguous(), a copy (the output has the query's (b, heads, s, d) layout), and o_proj, as
#    the captures deepseek_*_l2_bf16_sdpa have them (the capture's meta function returns the
#    philox tensors after the output; the kernel's workspace is CUDA-only)
scn() { # name config [training fields]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "$2" },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2, optimizer = "sgd", $3 } }
EOS
}
attn v3-l2.json "786432 1572864 1572864 1024 1024 1024 1572864 786432 786432 12582912 294912 524288 524288 1024 1024 1024 524288 262144 262144 2097152 2097152 2097152 2097152 2097152 2097152 4194304 16384 16384 16384 16384 16384 16384 32768 262144 32768 12582912 16777216 12582912 8 8 8388608 131072 256 8388608 3670016" "DeepSeek-V3 MLA under SDPA (cuDNN)"
attn v2-l2.json "1572864 294912 524288 524288 1024 1024 1024 524288 262144 262144 1048576 65536 1048576 524288 65536 32768 262144 32768 1572864 2097152 1572864 8 8 1048576 16384 256 1048576 1048576" "DeepSeek-V2-Lite MLA under SDPA (cuDNN)"
# on an A100 the memory-efficient kernel (flash takes one head dim only): its (b, s, heads, 128)
# output, the logsumexp, the philox state and, above head dim 128, the fp32 output accumulator;
# the transpose is a view. Noted: its backward's own buffers are not modelled.
scn e v2-l2.json 'attention = "sdpa"'
sed -i 's/gpu = "h200"/gpu = "a100_80g"/' "$tmp/e.lua"
"$VRSIM" "$tmp/e.lua" --no-files --alloc-trace "$tmp/e.csv" >"$tmp/out" 2>&1
got=$(awk -F, '$7 ~ /^layers\.1\.mlp/ { exit } $3 == "alloc" && $7 ~ /^layers\.1\.self_attn\.(sdpa|attn_transpose|o_proj$)/ { printf "%s ", $5 }' "$tmp/e.csv" | sed 's/ $//')
want="1048576 16384 16 2097152 1048576"
if [ "$got" = "$want" ] && grep -q "memory-efficient kernel on this GPU" "$tmp/out"; then
  ok "A100: the memory-efficient kernel's allocations, no transpose copy, noted"
else bad "A100 SDPA allocates: $got (expected: $want) $(cat "$tmp/out")"; fi
scn() { # name config [training fields]
  cat > "$tmp/$1.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "$2" },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2, optimizer = "sgd", attention = "eager", $3 } }
EOS
}

# 4. DeepSeek-V2-Lite's q_lora_rank is null: no query compression (q_proj), with no note; a key
#    left out (a config written as a Lua table cannot hold a null) is read the same, noted
scn n v2-l2.json
nn=$("$VRSIM" "$tmp/n.lua" --json --no-files 2>"$tmp/err" | field '"%d|%s" % (d["n_params"], " ".join(d["notes"]))')
edit deepseek-v2-lite.json v2-l2-noq.json 'd.update(num_hidden_layers=2); del d["q_lora_rank"]'
scn na v2-l2-noq.json
na=$("$VRSIM" "$tmp/na.lua" --json --no-files 2>>"$tmp/err" | field '"%d|%s" % (d["n_params"], " ".join(d["notes"]))')
if [ -n "${nn%%|*}" ] && [ "${nn%%|*}" = "${na%%|*}" ] \
   && case "$nn" in *q_lora_rank*) false ;; *) true ;; esac \
   && case "$na" in *"q_lora_rank absent from the config: read as null"*) true ;; *) false ;; esac; then
  ok "q_lora_rank null: q_proj, no note; left out: read as null, noted"
else bad "q_lora_rank null / absent: $nn / $na $(cat "$tmp/err")"; fi

# 5. LoRA on the attention's Linears: r 16 on q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj of the
#    two-layer V2-Lite cut is 526,336 parameters, as peft 0.21 counts
scn l v2-l2.json 'precision = "lora_bf16", lora = { r = 16, targets = { "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj" } }'
n=$("$VRSIM" "$tmp/l.lua" --json --no-files 2>"$tmp/err" | field 'd["n_trainable"]')
if [ "$n" = 526336 ]; then ok "MLA LoRA: 526336 trainable, as peft counts"
else bad "MLA LoRA: $n trainable (peft: 526336) $(cat "$tmp/err")"; fi

#    LoRA on the routed experts' 3-D weights (target_parameters, lora.ParamWrapper, laid out as
#    Mixtral's): V2-Lite cut to two layers (layer 1 MoE), r 8 on the attention and the experts,
#    4,523,008 trainable as peft 0.21 counts (gate_up lora_A (8 x 64, 2048), lora_B (2816, 8 x 64);
#    the shared experts are Linears, untouched); the folded stacks (64 x 2816 x 2048 and
#    64 x 2048 x 1408 bf16) made each forward (captures/deepseek_v2_lite_l2_lora_experts)
scn le v2-l2.json 'precision = "lora_bf16", optimizer = "adamw", lora = { r = 8, alpha = 16, dropout = 0,
  targets = { "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj" }, target_parameters = { "mlp.experts.gate_up_proj", "mlp.experts.down_proj" } }'
"$VRSIM" "$tmp/le.lua" --json --no-files --alloc-trace "$tmp/le.csv" > "$tmp/le.json" 2>"$tmp/err"
n=$(field 'd["n_trainable"]' < "$tmp/le.json")
# (each fold's own allocation, not cuBLAS's contiguous copy of the B factor after it)
got=$(awk -F, '$3 == "alloc" && $7 ~ /^layers\.1\.mlp\.experts\.[a-z_]+\.lora_baddbmm$/ && $5 > 16777216 { printf "%s ", $5; if (++k == 2) exit }' "$tmp/le.csv" | sed 's/ $//')
if [ "$n" = 4523008 ] && [ "$got" = "738197504 369098752" ]; then ok "DeepSeek expert LoRA (target_parameters): 4523008 trainable, as peft counts; the folded stacks"
else bad "DeepSeek expert LoRA: $n trainable (peft: 4523008), folded '$got' $(cat "$tmp/err")"; fi
#    the MLP names in targets, as peft 0.21 converts them (DeepSeek by the qwen2_moe pattern,
#    captures/deepseek_v2_lite_l2_lora_mlp_names): gate_proj + up_proj become target_parameters
#    gate_up_proj at twice the rank, down_proj down_proj, and they leave target_modules, so the
#    dense layer's and the shared experts' MLP Linears get no adapter: 7,013,376 trainable with
#    r 8 on the attention, as peft counts (the attention alone: 263,168), noted
scn lm v2-l2.json 'precision = "lora_bf16", lora = { r = 8, alpha = 16, dropout = 0,
  targets = { "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } }'
"$VRSIM" "$tmp/lm.lua" --json --no-files > "$tmp/lm.json" 2>"$tmp/err"
n=$(field 'd["n_trainable"]' < "$tmp/lm.json")
note=$(field '" ".join(d["notes"])' < "$tmp/lm.json")
case "$n $note" in
  "7013376 "*"turns deepseek_v2's MLP names into target_parameters"*) ok "MLP names on DeepSeek-V2: peft's conversion to the routed experts (7013376 trainable), noted" ;;
  *) bad "MLP names on DeepSeek-V2: $n trainable (peft: 7013376), notes: $note $(cat "$tmp/err")" ;;
esac
#    the router's name (and so "all-linear") becomes the fp32 gate.weight under a 2-D wrapper: not
#    modelled, exit 2 naming it
scn lg v2-l2.json 'precision = "lora_bf16", lora = { dropout = 0, targets = { "q_proj", "mlp.gate", "gate_proj", "up_proj" } }'
"$VRSIM" "$tmp/lg.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q '"mlp.gate" on DeepseekV2ForCausalLM.*fp32 router weight gate.weight.*not modelled' "$tmp/out"; then ok "DeepSeek LoRA on the router's name: exit 2 naming it"
else bad "DeepSeek LoRA on the router's name: exit $rc: $(cat "$tmp/out")"; fi
#    the router's weight (fp32, DeepseekV2TopkRouter) through a ParamWrapper is not modelled
scn lr v2-l2.json 'precision = "lora_bf16", lora = { dropout = 0, targets = { "q_proj" }, target_parameters = { "mlp.gate.weight" } }'
"$VRSIM" "$tmp/lr.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "router's weight (gate.weight) of Mixtral and Qwen3-MoE only" "$tmp/out"; then ok "DeepSeek router target_parameters: exit 2 naming it"
else bad "DeepSeek router target_parameters: exit $rc: $(cat "$tmp/out")"; fi

# 6. refused by name: the released FP8 checkpoint's quantization_config, flash attention (MLA's head dims),
#    cuDNN forced off the Hopper class, pipeline parallelism, generation and padded batches under SDPA,
#    autocast, all-linear and MLP targets (peft turns them into target_parameters on the experts),
#    rope_interleave false, an unknown topk_method, the load-balancing loss
refuse() { # label config training-fields pattern
  scn r "$2" "$3"
  "$VRSIM" "$tmp/r.lua" --no-files >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$4" "$tmp/out"; then ok "$1: exit 2 naming it"
  else bad "$1: exit $rc: $(cat "$tmp/out")"; fi
}
refuse "FP8 quantization_config" deepseek-v3.json "" "quant_method fp8.*not modelled"
refuse "flash attention" v2-l2.json 'attention = "flash"' "head dim (192) other than the values' (128), which flash attention does not take"
scn r v2-l2.json 'attention = "cudnn"'
sed -i 's/gpu = "h200"/gpu = "a100_80g"/' "$tmp/r.lua"
"$VRSIM" "$tmp/r.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "check_cudnn_tensor_shapes" "$tmp/out"; then ok "forced cuDNN on an A100 at 192 / 128: exit 2 naming it"
else bad "forced cuDNN on an A100: exit $rc: $(cat "$tmp/out")"; fi
scn r v2-l2.json 'parallel = { pp = 2 }'
sed -i 's/gpu = "h200"/gpu = "h200", count = 2/' "$tmp/r.lua"
"$VRSIM" "$tmp/r.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "DeepseekV2ForCausalLM with pipeline parallelism.*not modelled" "$tmp/out"; then ok "pipeline parallelism: exit 2 naming it"
else bad "pipeline parallelism: exit $rc: $(cat "$tmp/out")"; fi
cat > "$tmp/r.lua" <<EOS
return { hardware = { gpu = "h200" }, model = { config = "v2-l2.json" },
  training = { precision = "bf16", inference = true, attention = "sdpa", generate = { max_new_tokens = 4, prompt = 128 } } }
EOS
"$VRSIM" "$tmp/r.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "generation (decode steps) is not modelled" "$tmp/out"; then ok "generation under SDPA: exit 2 naming it"
else bad "generation under SDPA: exit $rc: $(cat "$tmp/out")"; fi
refuse "padded batches under SDPA" v2-l2.json 'attention = "sdpa", micro_batch = 2, seq = nil, data = { lengths = { 100, 200 }, batching = "pad" }' "padded batches on DeepseekV2ForCausalLM under SDPA is not modelled"
refuse "amp_bf16" v2-l2.json 'precision = "amp_bf16"' "autocast.*not modelled"
refuse "all-linear LoRA" v2-l2.json 'precision = "lora_bf16", lora = { targets = "all-linear" }' "all-linear.*target_parameters"
refuse "LoRA on gate_proj without up_proj" v2-l2.json 'precision = "lora_bf16", lora = { targets = { "q_proj", "gate_proj" } }' "cannot convert 'gate_proj' without 'up_proj'"
edit v3-l2.json v3-ri.json 'd.update(rope_interleave=False)'
refuse "rope_interleave false" v3-ri.json "" "rope_interleave = false.*not modelled"
edit v2-l2.json v2-tm.json 'd.update(topk_method="noaux_tc")'
refuse "V2 topk_method noaux_tc" v2-tm.json "" "topk_method = noaux_tc is not modelled"
edit v2-l2.json v2-aux.json 'd.update(output_router_logits=True)'
refuse "output_router_logits" v2-aux.json "" "output_router_logits.*not modelled"

echo "test_mla: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
