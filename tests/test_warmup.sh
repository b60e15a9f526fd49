#!/bin/sh
# transformers' caching_allocator_warmup in from_pretrained(..., device_map=...) builds: one
# allocation of the model's bytes (4-bit weights at half a byte an element, the rest in their
# dtype), freed at once before the weights are made, so that they land in its segment; and a MoE
# block's experts stacked on the GPU from the checkpoint's per-expert tensors. The sizes are the
# measured traces' (validation/traces/fulltrace_gen4-tt-qlora*.csv.gz).
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# the records' runs as scenarios: model.config from the record's hf_config
python3 - "$tmp" <<'EOF' || { echo "FAIL writing the scenarios"; exit 1; }
import json, sys
out = sys.argv[1]
def lua(v):
    if isinstance(v, bool): return "true" if v else "false"
    if isinstance(v, (int, float)): return repr(v)
    if isinstance(v, str): return json.dumps(v)
    if isinstance(v, list): return "{" + ", ".join(lua(x) for x in v) + "}"
    return "{" + ", ".join('["%s"] = %s' % (k, lua(x)) for k, x in v.items() if x is not None) + "}"
for line in open("validation/records/llama_h100_gen5_qlora.jsonl"):
    d = json.loads(line)
    lo = d["lora"]
    open("%s/%s.lua" % (out, d["name"]), "w").write(
        'return { hardware = { gpu = "h100_sxm", capacity_mib = %s }, model = { config = %s },\n'
        '  training = { micro_batch = %d, seq = %d, precision = "lora_bf16", quant = "nf4", checkpointing = true,\n'
        '    steps = 2, lora = { r = %d, alpha = %d, dropout = %s, targets = %s } } }\n'
        % (d["total_mib"], lua(d["hf_config"]), d["batch"], d["seq"], lo["r"], lo["alpha"], lo["dropout"],
           lua(lo["targets"])))
EOF

# first three events of vrsim's allocator trace: "alloc SIZE;free_requested SIZE;free_completed SIZE;"
opening() { sed -n 2,4p "$1" | cut -d, -f3,5 | tr ',\n' ' ;'; }

# 1. Llama-3-8B cut to 4 layers: embed_tokens and lm_head in bf16 (2 x 1,050,673,152), the 4-bit
#    projections at 0.5 bytes (436,207,616), the norms in bf16 (73,728): 2,537,627,648 bytes
"$VRSIM" "$tmp/gen4-tt-qlora.lua" --no-files --no-suggest --alloc-trace "$tmp/l.csv" >/dev/null 2>"$tmp/err"
o=$(opening "$tmp/l.csv")
if [ "$o" = "alloc 2537627648;free_requested 2537627648;free_completed 2537627648;" ]; then
  ok "Llama QLoRA: the warmup of the measured trace (2537627648 bytes), made and freed first"
else bad "Llama QLoRA: the trace opens with '$o', not the 2537627648-byte warmup"; fi
# its segment (2 MiB rounding: 2,539,651,072 bytes, the trace's) holds the embedding and lm_head
"$VRSIM" replay "$tmp/l.csv" --segments >"$tmp/lr" 2>&1
if grep -Eq "^ +1 +2,539,651,072 " "$tmp/lr"; then ok "Llama QLoRA: the first segment is the warmup's 2,539,651,072 bytes"
else bad "Llama QLoRA: the first segment is not the warmup's: $(grep -E '^ +1 ' "$tmp/lr")"; fi

# 2. Qwen3-30B-A3B cut to 2 layers: the experts' 3-D stacks and the router's weight stay bf16
#    (bitsandbytes quantizes Linear4bit weights only); 3,680,523,264 bytes
"$VRSIM" "$tmp/gen4-tt-qlora-qwen3moe.lua" --no-files --no-suggest --alloc-trace "$tmp/q.csv" >/dev/null 2>"$tmp/err"
o=$(opening "$tmp/q.csv")
if [ "$o" = "alloc 3680523264;free_requested 3680523264;free_completed 3680523264;" ]; then
  ok "Qwen3-MoE QLoRA: the warmup of the measured trace (3680523264 bytes)"
else bad "Qwen3-MoE QLoRA: the trace opens with '$o', not the 3680523264-byte warmup"; fi

# 2b. the load then stacks each layer's per-expert checkpoint tensors on the GPU: the measured
#    trace's large segments, in its order: the warmup's, 384, 384 and 768 MiB for the last layer's
#    stacks, then step 0's 594 and 3 x 1188 MiB (the 9224 MiB the record measured)
"$VRSIM" replay "$tmp/q.csv" --segments >"$tmp/qr" 2>&1
big=$(awk '$1 ~ /^[0-9]+$/ { gsub(",", "", $2); if ($2 + 0 > 4194304) printf "%s ", $2 }' "$tmp/qr")
if [ "$big" = "3682598912 402653184 402653184 805306368 622854144 1245708288 1245708288 1245708288 " ]; then
  ok "Qwen3-MoE QLoRA: the trace's large segments, in order (the experts' stacks spill the warmup's)"
else bad "Qwen3-MoE QLoRA: large segments '$big'"; fi
if grep -q "peak reserved .*(9224.00 MiB)" "$tmp/qr"; then ok "Qwen3-MoE QLoRA: 9224 MiB reserved, as measured"
else bad "Qwen3-MoE QLoRA: $(grep 'peak reserved' "$tmp/qr")"; fi

# 3. the cap: on a card of 3 GiB the 2.36 GiB model's warmup is 3 GiB - 1.2 GiB = 1,932,735,283.2
#    bytes, int(byte_count // 2) fp16 elements: 1,932,735,282 bytes (the run itself OOMs later)
"$VRSIM" "$tmp/gen4-tt-qlora.lua" --no-files --no-suggest --set capacity_mib=3072 --alloc-trace "$tmp/c.csv" >/dev/null 2>&1
o=$(opening "$tmp/c.csv")
case "$o" in
  "alloc 1932735282;free_requested 1932735282;"*) ok "a 3 GiB card caps the warmup at total - 1.2 GiB" ;;
  *) bad "a 3 GiB card: the trace opens with '$o', not the capped 1932735282-byte warmup" ;;
esac

# 4. no warmup without a device_map: a bf16 LoRA build (from_pretrained on the CPU, then .to())
"$VRSIM" "$tmp/gen4-tt-qlora.lua" --no-files --no-suggest --set quant=none --set build=direct \
  --alloc-trace "$tmp/n.csv" >/dev/null 2>&1
o=$(opening "$tmp/n.csv")
case "$o" in
  "alloc 1050673152;alloc 1050673152;"*|"alloc 1050673152;"*) ok "no warmup in a build without device_map (opens with the embedding)" ;;
  *) bad "a build without device_map opens with '$o'" ;;
esac

# 5. a sharded QLoRA build (fully_shard's shards made at construction) says the warmup is left out
cat > "$tmp/f.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm", count = 2 }, model = { arch = "llama2", size = "7b", layers = 2 },
  training = { micro_batch = 1, seq = 512, precision = "lora_bf16", quant = "nf4", strategy = "fsdp2", steps = 2 } }
EOS
if "$VRSIM" "$tmp/f.lua" --no-files --no-suggest 2>&1 | grep -q "caching_allocator_warmup is not modelled under fsdp2"; then
  ok "fsdp2 QLoRA: a note says the warmup is not modelled"
else bad "fsdp2 QLoRA: no note about the warmup"; fi

echo "test_warmup: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
