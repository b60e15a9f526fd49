#!/bin/sh
# The defaults follow what the common training scripts do, and the header says them: the weights
# made in their dtype (from_pretrained(torch_dtype=...), then .to("cuda")), and FSDP2 built on the
# meta device (accelerate's fsdp_cpu_ram_efficient_loading, torchtitan), so the whole model is
# never on one GPU. build = "cast" and training.zero.init = "whole" still give the other ways.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/d.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm", count = 4 }, model = { arch = "llama2", size = "7b", layers = 2 },
  training = { micro_batch = 1, seq = 512, precision = "bf16", steps = 2 } }
EOS
# q_proj is 4096 x 4096: 67,108,864 bytes in fp32, 33,554,432 in bf16, 8,388,608 a quarter shard.
# has_alloc TRACE BYTES: an allocation of BYTES while the model is built (before the input batch)
has_alloc() { sed '/,input_ids$/q' "$1" | grep -q ",alloc,[0-9]*,$2,0,"; }

"$VRSIM" "$tmp/d.lua" --no-files --alloc-trace "$tmp/a.csv" >"$tmp/out" 2>&1
if ! has_alloc "$tmp/a.csv" 67108864 && ! grep -q "to(bf16)" "$tmp/a.csv" && grep -q "weights made in their dtype (from_pretrained)" "$tmp/out"; then
  ok "default build: no fp32 weights, no .to(bf16), and the header says so"
else bad "default build: fp32 weights made, or the header does not say how"; fi
"$VRSIM" "$tmp/d.lua" --no-files --set build=cast --alloc-trace "$tmp/c.csv" >"$tmp/out" 2>&1
if has_alloc "$tmp/c.csv" 67108864 && grep -q "to(bf16)" "$tmp/c.csv" && grep -q "built in fp32, then .to(bf16)" "$tmp/out"; then
  ok "build = cast: fp32 weights, then .to(bf16), and the header says so"
else bad "build = cast: no fp32 weights or no header"; fi

"$VRSIM" "$tmp/d.lua" --no-files --set strategy=fsdp2 --alloc-trace "$tmp/f.csv" >"$tmp/out" 2>&1
if ! has_alloc "$tmp/f.csv" 33554432 && has_alloc "$tmp/f.csv" 8388608 && grep -q "sharded from meta-device init" "$tmp/out"; then
  ok "fsdp2 default: only shards are made (meta-device init), and the header says so"
else bad "fsdp2 default: a whole weight was made on the GPU, or the header does not say how"; fi
"$VRSIM" "$tmp/d.lua" --no-files --set strategy=fsdp2 --set training.zero.init=whole --alloc-trace "$tmp/w.csv" >"$tmp/out" 2>&1
if has_alloc "$tmp/w.csv" 33554432 && grep -q "whole on every GPU, then sharded" "$tmp/out"; then
  ok "fsdp2 init = whole: the whole model first, and the header says so"
else bad "fsdp2 init = whole: no whole weight made, or no header"; fi

# Llama-3-8B, all-linear LoRA r16, checkpointing, 1 x 2048 on a 24 GB RTX 4090, written without a
# build field: it fits as from_pretrained loads it (built in fp32 first it runs out of memory
# while building, as it did under the old default)
cp scenarios/configs/llama-3-8b.json "$tmp/"
cat > "$tmp/l3.lua" <<'EOS'
return { hardware = { gpu = "rtx4090" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 2048, precision = "lora_bf16", checkpointing = true, steps = 2,
               lora = { r = 16, alpha = 32, targets = "all-linear" } } }
EOS
"$VRSIM" "$tmp/l3.lua" --no-files --no-suggest >"$tmp/out" 2>&1; rc=$?
"$VRSIM" "$tmp/l3.lua" --no-files --no-suggest --set build=cast >"$tmp/out2" 2>&1; rc2=$?
if [ $rc = 0 ] && [ $rc2 = 3 ] && grep -q "while building the model" "$tmp/out2"; then
  ok "Llama-3-8B LoRA on a 24 GB card: fits as loaded by default; built in fp32 it does not"
else bad "Llama-3-8B LoRA on a 4090: exit $rc by default, $rc2 with build=cast"; fi

echo "test_defaults: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
