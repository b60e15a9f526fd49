#!/bin/sh
# QLoRA's 4-bit base weights under the sharding strategies: fully_shard and ZeRO-3 shard a packed
# weight held in a floating storage dtype (bnb_4bit_quant_storage) like any frozen parameter,
# gather it per unit and offload it with offload_param; its quantization state stays whole on
# every rank; uint8 storage is left out of FSDP2's sharding (accelerate's ignored_params) with a
# note, and refused under ZeRO-3.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { python3 -c "import sys,json; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

# Llama-2-7B's shapes cut to 2 layers; q_proj is 4096 x 4096 (8,388,608 packed bytes), the MLP's
# projections 11008 x 4096 (22,544,384)
cat > "$tmp/q.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm", count = 4 }, model = { arch = "llama2", size = "7b", layers = 2 },
  training = { micro_batch = 1, seq = 512, precision = "lora_bf16", quant = "nf4", strategy = "fsdp2",
               steps = 2 } }
EOS
# 70B on 1, 2 and 4 GPUs, the published FSDP-QLoRA setting (peft's docs: r 8 on every linear,
# micro-batch 2 x 2048, checkpointing)
cat > "$tmp/q70.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm", count = 2 }, model = { arch = "llama2", size = "70b" },
  training = { micro_batch = 2, seq = 2048, precision = "lora_bf16", quant = "nf4", checkpointing = true,
               strategy = "fsdp2", steps = 2,
               lora = { r = 8, alpha = 16, targets = "all-linear" } } }
EOS

# 1. fully_shard makes each packed weight's shard: a quarter of its bytes on each of 4 ranks
"$VRSIM" "$tmp/q.lua" --no-files --alloc-trace "$tmp/q.csv" >/dev/null 2>"$tmp/err"
sizes=$(grep "fully_shard layer 0" "$tmp/q.csv" | grep ",alloc," | cut -d, -f5 | sort -n | uniq -c | tr -s ' ' | tr '\n' ';')
case "$sizes" in
  *"4 2097152;"*"3 5636096;"*) ok "fsdp2 x4: q/k/v/o and the MLP's packed weights sharded to 1/4 ($sizes)" ;;
  *) bad "fsdp2 x4: packed weights not sharded to 1/4 (fully_shard layer 0 allocates: $sizes)" ;;
esac

# 2. the same under ZeRO-3
"$VRSIM" "$tmp/q.lua" --no-files --set strategy=zero3 --alloc-trace "$tmp/z.csv" >/dev/null 2>"$tmp/err"
n=$(grep "fully_shard layer 0" "$tmp/z.csv" | grep ",alloc," | grep -c ",2097152,\|,5636096,")
if [ "$n" = 7 ]; then ok "zero3 x4: the 7 packed weights of a layer partitioned"
else bad "zero3 x4: $n of the 7 packed weights of a layer partitioned"; fi

# 3. parameters per GPU fall with the GPU count (the quantization state, ~1/32 of the packed
#    bytes, and one gathered unit stay whole on each rank)
p1=$("$VRSIM" "$tmp/q70.lua" --json --no-files --set count=1 --set strategy=none | field 'd["breakdown_at_peak"]["parameters"]')
p2=$("$VRSIM" "$tmp/q70.lua" --json --no-files --set count=2 --set training.zero.init=meta | field 'd["breakdown_at_peak"]["parameters"]')
p4=$("$VRSIM" "$tmp/q70.lua" --json --no-files --set count=4 --set training.zero.init=meta | field 'd["breakdown_at_peak"]["parameters"]')
if python3 -c "import sys; p1,p2,p4=map(int,sys.argv[1:]); sys.exit(not (p2 < 0.58*p1 and p4 < 0.33*p1 and p4 < p2))" "$p1" "$p2" "$p4"; then
  ok "70B QLoRA parameters per GPU: 1 GPU $p1, 2 GPUs $p2, 4 GPUs $p4 bytes"
else bad "70B QLoRA parameters per GPU do not fall with the count: $p1, $p2, $p4"; fi

# 4. offload_param moves the packed shards to the host: two 24 GB cards hold 70B QLoRA
#    (Answer.AI's FSDP-QLoRA: 70B on two 24 GB cards with CPU offload)
po=$("$VRSIM" "$tmp/q70.lua" --json --no-files --set training.zero.init=meta --set training.zero.offload_param=cpu | field 'd["breakdown_at_peak"]["parameters"]')
if python3 -c "import sys; a,b=map(int,sys.argv[1:]); sys.exit(not (b < a - 15*2**30))" "$p2" "$po"; then
  ok "70B QLoRA offload_param=cpu: parameters on the GPU $p2 -> $po bytes"
else bad "70B QLoRA offload_param=cpu leaves the packed shards on the GPU ($p2 -> $po)"; fi
"$VRSIM" "$tmp/q70.lua" --no-files --set gpu=rtx3090 --set training.zero.init=meta \
  --set training.zero.offload_param=cpu >"$tmp/out" 2>&1; rc=$?
if [ $rc = 0 ]; then ok "70B QLoRA with param offload fits on two RTX 3090s"
else bad "70B QLoRA with param offload on two RTX 3090s: exit $rc ($(head -c 300 "$tmp/out"))"; fi

# 5. uint8 storage: left whole under FSDP2, with a note; refused under ZeRO-3
"$VRSIM" "$tmp/q.lua" --no-files --set quant_storage=uint8 --alloc-trace "$tmp/u.csv" >"$tmp/out" 2>&1
n=$(grep "fully_shard layer 0" "$tmp/u.csv" | grep ",alloc," | grep -c ",2097152,\|,5636096,")
if [ "$n" = 0 ] && grep -q "left out of fully_shard" "$tmp/out"; then
  ok "fsdp2, uint8 storage: packed weights whole on every rank, and the note says so"
else bad "fsdp2, uint8 storage: $n packed shards made, or no note"; fi
"$VRSIM" "$tmp/q.lua" --no-files --set strategy=zero3 --set quant_storage=uint8 >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q 'quant_storage = "uint8" under zero3 is not modelled' "$tmp/out"; then
  ok "zero3, uint8 storage: exit 2 naming it"
else bad "zero3, uint8 storage: exit $rc"; fi

# 6. quant_storage without 4-bit weights asks for nothing: a note says so
"$VRSIM" "$tmp/q.lua" --no-files --set quant=none --set precision=bf16 --set quant_storage=bf16 >"$tmp/out" 2>&1
if grep -q "training.quant_storage = .* has no effect" "$tmp/out"; then ok "quant_storage without nf4: noted as unread"
else bad "quant_storage without nf4 is silently ignored"; fi

# 7. peft's FSDP-QLoRA guide (docs/source/accelerate/fsdp.md, peft v0.21.2, "Memory usage"):
#    Llama-2-70B, r 8 alpha 16 dropout 0.1 on every linear, micro-batch 2 x 2048, accumulation 2,
#    checkpointing, flash attention, bf16 quant storage, 2 GPUs: 19.6 GB a GPU with CPU offload
#    ("now requires 2X24GB GPUs"), 35.6 GB without. vrsim's peak reserved plus the CUDA context
#    against them (GB = 1e9 bytes; the guide's GPUs hold more than an NCCL-free allocator figure),
#    and the verdicts on two 24 GB cards. The guide (peft 6008f272a, 2024-03-13) asks for
#    bitsandbytes>=0.43.0, the only release then (0.43.1 came 2024-04-11), and its command passes
#    --use_reentrant True: training.bitsandbytes = "0.43.0", checkpoint_reentrant = true. That
#    MatMul4Bit keeps each 4-bit matmul's input only in the recomputation (+0.23 GB over 0.50.2's:
#    14.57 -> 14.80 GB offloaded, 32.09 -> 32.32 without); the rest of the offloaded gap (-24.5 %)
#    is not the version and stays unexplained. Both figures are held to 25 %.
cat > "$tmp/peft70.lua" <<'EOS'
return { hardware = { gpu = "rtx4090", count = 2 }, model = { arch = "llama2", size = "70b" },
  training = { micro_batch = 2, seq = 2048, grad_accum = 2, precision = "lora_bf16", quant = "nf4",
               checkpointing = true, checkpoint_reentrant = true, bitsandbytes = "0.43.0",
               attention = "flash", strategy = "fsdp2", steps = 2,
               lora = { r = 8, alpha = 16, dropout = 0.1, targets = "all-linear" } } }
EOS
off="--set training.zero.offload_param=cpu --set training.zero.offload_optimizer=cpu"
# shellcheck disable=SC2086
"$VRSIM" "$tmp/peft70.lua" --no-files $off >/dev/null 2>&1; rc_off=$?
"$VRSIM" "$tmp/peft70.lua" --no-files >/dev/null 2>&1; rc_on=$?
if [ $rc_off = 0 ] && [ $rc_on = 3 ]; then ok "peft FSDP-QLoRA 70B on two 24 GB cards: fits with CPU offload, not without"
else bad "peft FSDP-QLoRA 70B on two 24 GB cards: exit $rc_off with offload, $rc_on without (want 0 and 3)"; fi
gb() { python3 -c "import sys,json; d=json.load(sys.stdin); print('%.1f' % ((d['peak_reserved_bytes'] + d['breakdown_at_peak']['cuda_context']) / 1e9))"; }
# shellcheck disable=SC2086
g_off=$("$VRSIM" "$tmp/peft70.lua" --json --no-files --set gpu=h100_sxm $off | gb)
g_on=$("$VRSIM" "$tmp/peft70.lua" --json --no-files --set gpu=h100_sxm | gb)
if python3 -c "import sys; a,b=map(float,sys.argv[1:]); sys.exit(not (abs(a/19.6-1) < 0.25 and abs(b/35.6-1) < 0.25))" "$g_off" "$g_on"; then
  ok "peft FSDP-QLoRA 70B: $g_off GB a GPU with offload (published 19.6), $g_on without (35.6)"
else bad "peft FSDP-QLoRA 70B: $g_off GB with offload (published 19.6), $g_on without (35.6): off by more than 25 %"; fi

# 8-10. bitsandbytes 0.50.2's eager MatMul4Bit (bitsandbytes/autograd/_functions.py) keeps
#    ctx.tensors = (None, B): the packed weight, never its input. LoRA on q and v with dropout:
#    down_proj's input (the MLP's product, 2048 x 11008 bf16 = 45,088,768 bytes) is read by no
#    one else, so it is freed when down_proj's forward ends. At 2048 rows gemm_4bit falls back to
#    dequantize + F.linear (M > 1536): the nested absmax in fp32 and absmax + offset (704,512
#    blocks x 4 = 2,818,048 bytes each) and the bf16 weight (90,177,536), then the output (test 13b);
#    backward's dequantize_4bit makes the absmax and the weight before grad_A.
cat > "$tmp/qv.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { arch = "llama2", size = "7b", layers = 2 },
  training = { micro_batch = 1, seq = 2048, precision = "lora_bf16", quant = "nf4", steps = 2,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = { "q_proj", "v_proj" } } } }
EOS
"$VRSIM" "$tmp/qv.lua" --no-files --alloc-trace "$tmp/qv.csv" >"$tmp/out" 2>&1
n=$(grep -c ",free_completed,[0-9]*,45088768,0,layers.1.mlp.down_proj$" "$tmp/qv.csv")
if [ "$n" = 2 ]; then ok "eager MatMul4Bit keeps no input: down_proj's input freed by its forward (both steps)"
else bad "eager MatMul4Bit: down_proj's input freed by its forward in $n of 2 steps"; fi
fwd=$(grep ",alloc,.*,layers.1.mlp.down_proj$" "$tmp/qv.csv" | head -4 | cut -d, -f5 | tr '\n' ' ')
if [ "$fwd" = "2818048 2818048 90177536 16777216 " ]; then
  ok "gemm_4bit at 2048 rows: fp32 absmax twice, bf16 weight, then the output ($fwd)"
else bad "gemm_4bit at 2048 rows allocates: $fwd (want 2818048 2818048 90177536 16777216)"; fi
bwd=$(grep ",alloc,.*,layers.1.mlp.down_proj.backward$" "$tmp/qv.csv" | head -3 | cut -d, -f5 | tr '\n' ' ')
if [ "$bwd" = "2818048 90177536 45088768 " ]; then
  ok "MatMul4Bit.backward: absmax and bf16 weight, then grad_A ($bwd)"
else bad "MatMul4Bit.backward allocates: $bwd (want 2818048 90177536 45088768)"; fi

# 11. 16 rows on an H100 (132 SMs): bitsandbytes' table runs the fused kernel for gate_proj
#    (N 11008: 172 blocks of 64 >= the SMs, M <= 32) and falls back for down_proj (N 4096: 64
#    blocks, under half the SMs): only down_proj materializes its weight
"$VRSIM" "$tmp/qv.lua" --no-files --set seq=16 --alloc-trace "$tmp/q16.csv" >/dev/null 2>&1
g=$(grep -c ",alloc,.*,90177536,0,layers.1.mlp.gate_proj$" "$tmp/q16.csv")
d=$(grep -c ",alloc,.*,90177536,0,layers.1.mlp.down_proj$" "$tmp/q16.csv")
if [ "$g" = 0 ] && [ "$d" = 2 ]; then ok "gemm_4bit at 16 rows: gate_proj fused, down_proj dequantizes"
else bad "gemm_4bit at 16 rows: gate_proj dequantized $g times, down_proj $d (want 0 and 2)"; fi

# 12. LLM.int8 inference (MatMul8bitLt's fast path, threshold 6.0): int8_vectorwise_quant of
#    down_proj's 2048 x 11008 fp16 input allocates SCA (2048 fp32 = 8,192 bytes) and CA (int8,
#    22,544,384), then A.abs() (fp16, 45,088,768) and the bool mask `>= threshold` (22,544,384);
#    the outlier columns' extra matmul is data-dependent: a note names it
"$VRSIM" scenarios/llama7b_int8_inference_3090.lua --no-files --set layers=2 --set steps=1 \
  --alloc-trace "$tmp/i8.csv" >"$tmp/out" 2>&1
q=$(grep ",alloc,.*,layers.1.mlp.down_proj.int8_vectorwise_quant$" "$tmp/i8.csv" | cut -d, -f5 | tr '\n' ' ')
if [ "$q" = "8192 22544384 45088768 22544384 " ] && grep -q "LLM.int8's outlier columns" "$tmp/out"; then
  ok "int8_vectorwise_quant: SCA, CA, the fp16 abs and the outlier mask; the outlier path noted"
else bad "int8_vectorwise_quant allocates: $q (want 8192 22544384 45088768 22544384), or no outlier note"; fi

# 13. the QLoRA record gen4-tt-qlora (validation/records/llama_h100_gen5_qlora.jsonl: 4 Llama-3-8B
#    layers, peft LoRA r 16 dropout 0.05 on every linear, 2 x 2048, checkpointing, H100) against
#    its measured allocator trace (validation/traces/fulltrace_gen4-tt-qlora.csv.gz): from the
#    first fp32 logits (2,101,346,304 bytes) to the last, three steps, the number of allocations
#    of each size that these layers make. 1 MiB and 3.5 MiB: the fp32 absmax of a 4096 x 4096
#    and a 14336 x 4096 weight, twice in gemm_4bit's fallback, once in backward's dequantize;
#    8, 32 and 112 MiB: the base outputs of k/v, q/o and gate/up, with peft's lora.bnb clone and
#    its cast of the adapters' product before the add; 16, 64 and 224 MiB: their fp32 adapter
#    products (no fp32 sum)
cat > "$tmp/ttq.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" },
  model = { arch = "llama2", hidden = 4096, intermediate = 14336, heads = 32, kv_heads = 8, layers = 4, vocab = 128256 },
  training = { micro_batch = 2, seq = 2048, precision = "lora_bf16", quant = "nf4", checkpointing = true,
               attention = "sdpa", steps = 4,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" } } }
EOS
"$VRSIM" "$tmp/ttq.lua" --no-files --alloc-trace "$tmp/ttq.csv" >/dev/null 2>&1
sizes() { awk -F, '{ a[NR] = $3 "," $5 } $3 == "alloc" && $5 == 2101346304 { if (!f) f = NR; l = NR }
  END { for (i = f; i <= l; i++) { split(a[i], x, ","); if (x[1] == "alloc") c[x[2]]++ }
        n = split("1048576 3670016 8388608 16777216 67108864 117440512 234881024", s, " ")
        for (k = 1; k <= n; k++) printf "%s:%d ", s[k], c[s[k]] }'; }
meas=$(gzip -dc validation/traces/fulltrace_gen4-tt-qlora.csv.gz | sizes)
sim=$(sizes < "$tmp/ttq.csv")
if [ -n "$meas" ] && [ "$meas" = "$sim" ]; then ok "gen4-tt-qlora: allocations by size match the measured trace ($sim)"
else bad "gen4-tt-qlora: allocations by size: vrsim $sim, measured $meas"; fi
# 13b. and in the order measured: the first gemm_4bit fallback after the first logits (a gate or
#    up projection recomputed, 4096 rows) allocates the fp32 absmax twice (3,670,016 bytes), the
#    bf16 weight, then the output (117,440,512 bytes each), as _dequant_linear_fallback does
#    (the allocations and frees from the first absmax on, a alloc and f free)
first4() { awk -F, '$3 == "alloc" || $3 == "free_completed" { n++; a[n] = substr($3, 1, 1) $5 }
  $3 == "alloc" && $5 == 2101346304 && !f { f = n }
  END { for (i = f; i <= n; i++) if (a[i] == "a3670016") { print a[i], a[i+1], a[i+2], a[i+3]; exit } }'; }
meas=$(gzip -dc validation/traces/fulltrace_gen4-tt-qlora.csv.gz | first4)
sim=$(first4 < "$tmp/ttq.csv")
if [ "$meas" = "a3670016 a3670016 a117440512 a117440512" ] && [ "$sim" = "$meas" ]; then
  ok "gen4-tt-qlora: gemm_4bit's fallback allocates its temporaries before its output, as measured"
else bad "gen4-tt-qlora: gemm_4bit's fallback allocates: vrsim '$sim', measured '$meas'"; fi

# 14. bitsandbytes before 0.43.2 (training.bitsandbytes, strategies/bnb_version.lua): MatMul4Bit
#    keeps ctx.tensors = (A, B), so down_proj's input (45,088,768 bytes) lives until down_proj's
#    backward; its forward is dequantize_4bit then F.linear: the fp32 absmax (2,818,048), the
#    bf16 weight (90,177,536), the absmax freed as dequantize_4bit returns, then the output
#    (16,777,216). 0.43.2 keeps nothing (test 8's free in forward).
"$VRSIM" "$tmp/qv.lua" --no-files --set training.bitsandbytes=0.43.1 --alloc-trace "$tmp/v1.csv" >/dev/null 2>&1
"$VRSIM" "$tmp/qv.lua" --no-files --set training.bitsandbytes=0.43.2 --alloc-trace "$tmp/v2.csv" >/dev/null 2>&1
freed_by() { awk -F, '$3 == "alloc" && $5 == 45088768 && $7 == "layers.1.mlp.mul" { a[$4] = 1 }
  $3 == "free_completed" && $5 == 45088768 && ($4 in a) { printf "%s ", $7; delete a[$4] }' "$1"; }
f1=$(freed_by "$tmp/v1.csv"); f2=$(freed_by "$tmp/v2.csv")
if [ "$f1" = "layers.1.mlp.down_proj.backward layers.1.mlp.down_proj.backward " ] && \
   [ "$f2" = "layers.1.mlp.down_proj layers.1.mlp.down_proj " ]; then
  ok "MatMul4Bit keeps its input before 0.43.2 (freed by down_proj's backward), not from 0.43.2"
else bad "down_proj's input freed by: 0.43.1 '$f1', 0.43.2 '$f2'"; fi
fwd=$(grep ",layers.1.mlp.down_proj[.a-z_0-9]*$" "$tmp/v1.csv" | head -5 | cut -d, -f3,5 | tr '\n' ' ')
if [ "$fwd" = "alloc,2818048 alloc,90177536 free_requested,2818048 free_completed,2818048 alloc,16777216 " ]; then
  ok "0.43.1's forward: fp32 absmax, bf16 weight, absmax freed, then the output"
else bad "0.43.1's down_proj forward: $fwd"; fi

# 15. under the non-reentrant checkpoint 0.43.1's kept input escapes the region (ctx.tensors is
#    no saved tensor): the forward's down_proj input lives until the region's backward frees its
#    frame (input_layernorm's pow backward); with checkpoint_reentrant the forward ran under
#    no_grad and it goes with down_proj's forward, as with 0.50.2
"$VRSIM" "$tmp/qv.lua" --no-files --set checkpointing=true --set training.bitsandbytes=0.43.1 --alloc-trace "$tmp/c1.csv" >/dev/null 2>&1
"$VRSIM" "$tmp/qv.lua" --no-files --set checkpointing=true --set training.bitsandbytes=0.43.1 \
  --set checkpoint_reentrant=true --alloc-trace "$tmp/c2.csv" >"$tmp/out" 2>&1
c1=$(freed_by "$tmp/c1.csv"); c2=$(freed_by "$tmp/c2.csv")
if [ "$c1" = "layers.1.input_layernorm.pow.backward layers.1.input_layernorm.pow.backward " ] && \
   [ "$c2" = "layers.1.mlp.down_proj layers.1.mlp.down_proj " ] && grep -q "checkpoint_reentrant: use_reentrant=True" "$tmp/out"; then
  ok "0.43.1 checkpointed: the kept input outlives the region non-reentrant, not reentrant (noted)"
else bad "0.43.1 checkpointed: down_proj's input freed by '$c1' non-reentrant, '$c2' reentrant, or no note"; fi

# 16. the version is checked: outside 0.41.0 .. 0.50.2 or not MAJOR.MINOR.PATCH is exit 2 naming
#    it; with neither 4-bit nor 8-bit weights nor an 8-bit optimizer it is noted as unread;
#    LLM.int8 before 0.45.0 and compiled nf4 before 0.50.0 are refused
for v in 0.40.0 0.50.3 0.43 abc; do
  "$VRSIM" "$tmp/qv.lua" --no-files --set training.bitsandbytes=$v >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "training.bitsandbytes = \"$v\"" "$tmp/out"; then ok "bitsandbytes $v: exit 2 naming it"
  else bad "bitsandbytes $v: exit $rc ($(head -c 200 "$tmp/out"))"; fi
done
"$VRSIM" "$tmp/qv.lua" --no-files --set quant=none --set training.bitsandbytes=0.43.1 >"$tmp/out" 2>&1
if grep -q "training.bitsandbytes = 0.43.1 has no effect" "$tmp/out"; then ok "bitsandbytes without its layers or optimizers: noted as unread"
else bad "bitsandbytes without its layers is silently ignored"; fi
"$VRSIM" scenarios/llama7b_int8_inference_3090.lua --no-files --set layers=2 --set training.bitsandbytes=0.44.1 >"$tmp/out" 2>&1; r1=$?
"$VRSIM" "$tmp/qv.lua" --no-files --set compile=true --set training.bitsandbytes=0.49.2 >"$tmp/out2" 2>&1; r2=$?
if [ $r1 = 2 ] && grep -q "int8.*0.44.1 is not modelled" "$tmp/out" && [ $r2 = 2 ] && grep -q "compile with quant = nf4 and bitsandbytes 0.49.2" "$tmp/out2"; then
  ok "int8 before 0.45.0 and compiled nf4 before 0.50.0: exit 2"
else bad "int8 at 0.44.1: exit $r1, compiled nf4 at 0.49.2: exit $r2"; fi

# 17. the 8-bit optimizers' absmax: one fp32 a block of 256 elements from 0.44.0, of 2048 before
#    (Optimizer2State.init_state): q_proj's lora_A (16 x 4096) has 256 blocks (1,024 bytes) or 32
#    (128 bytes) for each of its two states
for v in 0.44.0 0.43.3; do
  "$VRSIM" "$tmp/qv.lua" --no-files --set optimizer=adamw8bit --set training.bitsandbytes=$v --alloc-trace "$tmp/o$v.csv" >/dev/null 2>&1
done
a44=$(grep -c ",alloc,[0-9]*,1024,0,adamw8bit.init .*layers.0.self_attn.q_proj.lora_A" "$tmp/o0.44.0.csv")
a43=$(grep -c ",alloc,[0-9]*,128,0,adamw8bit.init .*layers.0.self_attn.q_proj.lora_A" "$tmp/o0.43.3.csv")
if [ "$a44" = 4 ] && [ "$a43" = 2 ]; then ok "AdamW8bit's absmax: 256-element blocks from 0.44.0, 2048 before"
else bad "AdamW8bit's absmax: $a44 allocations of 1024 bytes at 0.44.0 (want 4: two qmaps, two absmax), $a43 of 128 at 0.43.3 (want 2)"; fi

echo "test_quant: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
