#!/bin/sh
# torchtune's memory techniques composed as its recipes compose them (tests/data/published_memory.tsv):
# activation offloading around compiled, checkpointed layers; bitsandbytes' 8-bit and paged
# optimizers stepped in backward; torchao's NF4 weights in compiled layers.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { python3 -c "import sys,json; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
cp scenarios/configs/llama-3-8b.json "$tmp/"

# 1. activation offloading with compiled layers. torchtune wraps each layer in the eager
#    CheckpointWrapper and compiles the layer inside it (training.compile_model: m.compile() on each
#    TransformerSelfAttentionLayer), so the compiled graph's saves go to checkpoint's own hooks, and
#    what reaches OffloadActivations is checkpoint's frame.save_inputs of each layer's input,
#    4096 x 4096 bf16 = 33,554,432 bytes, as in eager: 31 of them off the GPU at the peak (the
#    stash keeps layer 31's, the model layer 0's), the copies on the copy streams, and each input
#    back before its layer's recomputation.
cat > "$tmp/off.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", checkpointing = true, steps = 2, compile = true,
               lora = { r = 16, alpha = 32, targets = "all-linear" } } }
EOS
acts='[d["breakdown_at_peak"]["activations"], d["time_ms"]["device_to_host"], d["time_ms"]["host_to_device"]]'
set -- $("$VRSIM" "$tmp/off.lua" --json --no-files | field "' '.join(map(str, $acts))")
a0=$1; d0=$2
set -- $("$VRSIM" "$tmp/off.lua" --json --no-files --set training.activation_offload=true | field "' '.join(map(str, $acts))")
a1=$1; d1=$2; h1=$3
if [ -n "$a1" ] && [ $((a0 - a1)) = $((31 * 33554432)) ]; then
  ok "compile + activation_offload: activations at the peak $a0 -> $a1 bytes (31 layer inputs to the host)"
else bad "compile + activation_offload: activations at the peak $a0 -> $a1 bytes (want 31 x 33554432 fewer)"; fi
if python3 -c "import sys; d0,d1,h1=map(float,sys.argv[1:]); sys.exit(not (d0 == 0 and d1 > 10 and d1 == h1))" "$d0" "$d1" "$h1" 2>/dev/null; then
  ok "compile + activation_offload: device-to-host $d0 -> $d1 ms a step, host-to-device $h1 ms"
else bad "compile + activation_offload: copy time $d0 -> $d1 ms down, $h1 ms up"; fi
"$VRSIM" "$tmp/off.lua" --no-files --set training.activation_offload=true --alloc-trace "$tmp/off.csv" >/dev/null
order=$(grep "unpack layers.29.out from host\|layers.30.input_layernorm (recompute)" "$tmp/off.csv" | head -2 | cut -d, -f7 | tr '\n' ';')
case "$order" in
  "unpack layers.29.out from host;layers.30.input_layernorm (recompute);") ok "compile + activation_offload: layer 30's input comes back before its compiled recomputation" ;;
  *) bad "compile + activation_offload: layer 30's input and recomputation in the order '$order'" ;;
esac
# what stays refused: compiled layers checkpointed every second one (compile's own refusal)
"$VRSIM" "$tmp/off.lua" --no-files --set training.activation_offload=true --set checkpoint_every=2 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "training.compile with checkpoint_scope = \"layer\" and checkpoint_every = 2 is not modelled" "$tmp/err"; then
  ok "compile + activation_offload with checkpoint_every = 2: exit 2, named"
else bad "compile + activation_offload with checkpoint_every = 2: exit $rc: $(cat "$tmp/err")"; fi

echo "test_ttc: $pass passed, $fail failed"
[ "$fail" = 0 ]
