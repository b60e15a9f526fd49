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
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", checkpointing = true, checkpoint_impl = "wrapper", steps = 2, compile = true,
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
# what stays refused: compiled layers checkpointed every second one (the layers between are
# compiled alone, whose saved set the offloading hooks would see)
"$VRSIM" "$tmp/off.lua" --no-files --set training.activation_offload=true --set checkpoint_every=2 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "training.compile with activation_offload is not modelled where a compiled layer is not checkpointed" "$tmp/err"; then
  ok "compile + activation_offload with checkpoint_every = 2: exit 2, named"
else bad "compile + activation_offload with checkpoint_every = 2: exit $rc: $(cat "$tmp/err")"; fi

# 2. bitsandbytes' 8-bit and paged AdamW stepped in backward (torchtune's optimizer_in_bwd: one
#    optimizer per parameter, config.instantiate(cfg_optimizer, [p])). Llama-3-8B full, 1 x 4096,
#    checkpointed: every gradient (16,060,522,496 bytes) alive when the step after backward begins;
#    in backward no more than one parameter's at any op (the 1 GiB head's or embedding's, an MLP
#    weight's 117,440,512 bytes in a layer's backward), as with torch's AdamW. The states are the
#    same bytes, made in the first backward; each of the 291 optimizers (every parameter has >= 4096
#    elements: all 8-bit) fills and moves its own two 256-entry fp32 maps (Optimizer8bit.name2qmap):
#    290 x 2 x 1024 bytes more than one optimizer's.
cat > "$tmp/oib.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", checkpointing = true, steps = 2 } }
EOS
grads() { python3 -c "
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))
layers = [int(x['gradients_bytes']) for x in r if x['phase'] == 'backward' and x['op'].startswith('layers.')]
print(max(int(x['gradients_bytes']) for x in r), max(layers))" "$1"; }
init_bytes() { awk -F, '$3 == "alloc" && $7 ~ /^adamw8bit\.init / { s += $5 } END { printf "%.0f", s }' "$1"; }
"$VRSIM" "$tmp/oib.lua" --out "$tmp/a0" --no-suggest --set optimizer=adamw8bit --alloc-trace "$tmp/a0.csv" >/dev/null
"$VRSIM" "$tmp/oib.lua" --out "$tmp/a1" --no-suggest --set optimizer=adamw8bit --set optimizer_in_backward=true \
  --alloc-trace "$tmp/a1.csv" >/dev/null
set -- $(grads "$tmp/a0/memory.csv"); g0=$1
set -- $(grads "$tmp/a1/memory.csv"); g1=$1; l1=$2
if [ "$g0" = 16060522496 ] && [ "$g1" = 1050673152 ] && [ "$l1" = 117440512 ]; then
  ok "adamw8bit in backward: gradients alive at most $g1 bytes (one parameter's; $l1 in a layer's backward), $g0 without"
else bad "adamw8bit in backward: gradients at most $g1 (in layers $l1), $g0 without (want 1050673152, 117440512, 16060522496)"; fi
i0=$(init_bytes "$tmp/a0.csv"); i1=$(init_bytes "$tmp/a1.csv")
if [ -n "$i0" ] && [ $((i1 - i0)) = $((290 * 2 * 1024)) ]; then
  ok "adamw8bit in backward: the states' bytes as after backward, and a qmap pair per optimizer ($i0 -> $i1 bytes)"
else bad "adamw8bit in backward: state bytes $i0 -> $i1 (want $((290 * 2 * 1024)) more: 290 more qmap pairs)"; fi
first_layer=$(grep -n ',"layers\.31\..*",backward$' "$tmp/a1/memory.csv" | head -1 | cut -d: -f1)
head_step=$(grep -n 'adamw8bit.update lm_head.weight' "$tmp/a1/memory.csv" | head -1 | cut -d: -f1)
if [ -n "$head_step" ] && [ -n "$first_layer" ] && [ "$head_step" -lt "$first_layer" ]; then
  ok "adamw8bit in backward: the head steps before layer 31's backward (memory.csv rows $head_step < $first_layer)"
else bad "adamw8bit in backward: the head's step at row '$head_step', layer 31's backward from '$first_layer'"; fi
# paged: the same 2 x 8,029,995,008 bytes of state in unified memory, outside the allocator, and the
# gradients one at a time
paged='[d["paged_state"]["bytes"], d["peak_allocated_bytes"], d["breakdown_at_peak"]["gradients"]]'
set -- $("$VRSIM" "$tmp/oib.lua" --json --no-files --set optimizer=paged_adamw_8bit | field "' '.join(map(str, $paged))")
b0=$1; p0=$2; gp0=$3
set -- $("$VRSIM" "$tmp/oib.lua" --json --no-files --set optimizer=paged_adamw_8bit --set optimizer_in_backward=true | field "' '.join(map(str, $paged))")
b1=$1; p1=$2; gp1=$3
# (without it, every parameter's gradient, 2 x 8,030,261,248 bytes, is alive at the peak)
if [ "$b0" = 16059990016 ] && [ "$b1" = "$b0" ] && [ "$gp0" -ge 16060522496 ] && [ "$gp1" = 0 ] && [ "$p1" -lt "$p0" ]; then
  ok "paged_adamw_8bit in backward: $b1 bytes paged as after backward; gradients at the peak $gp0 -> $gp1, peak $((p0 >> 20)) -> $((p1 >> 20)) MiB"
else bad "paged_adamw_8bit in backward: paged $b0 -> $b1, gradients at the peak $gp0 -> $gp1, peak $p0 -> $p1"; fi

# 3. torchao's NF4Tensor (torchtune's QLoRA builders) in compiled layers. Llama-3-8B cut to 2 layers,
#    1 x 1024, checkpointed under torchtune's wrapper (each layer compiled with its checkpoint). Each of the 14 quantized Linears keeps quantized_data (n / 2 bytes),
#    int8 scalers (n / 64), a bf16 factor per 256 scalers, a bf16 mean and the 16-entry bf16 table,
#    each a block of its own (512-byte multiples), in place of its 2n bf16 bytes. linear_nf4's
#    weight.to(bf16) is one fused kernel ending in the interleaving stack (aten.cat, which the
#    partitioner does not recompute), and backward reads the bf16 weight: the partition saves it
#    (validation/oracle/check_nf4_partition.py). Checkpointed, the MLP weights' bf16 copies
#    (14336 x 4096 x 2 = 117,440,512 bytes) are made in forward and again in the recomputation,
#    3 x 2 x 2 layers x 2 steps = 24 times, and a layer's three live together through its MLP's
#    backward; an unchecked layer saves the bf16 base's activations and the 7 dequantized weights
#    (4096 x (4096 + 1024 + 1024 + 4096 + 3 x 14336) x 2 bytes = 416 MiB).
cat > "$tmp/q.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 1, seq = 1024, precision = "lora_bf16", steps = 2, compile = true, checkpointing = true,
               checkpoint_impl = "wrapper", build = "direct",
               lora = { r = 8, alpha = 16, dropout = 0, dtype = "bf16", targets = { "q_proj", "v_proj" } } } }
EOS
p0=$("$VRSIM" "$tmp/q.lua" --json --no-files | field 'd["breakdown_at_peak"]["parameters"]')
p1=$("$VRSIM" "$tmp/q.lua" --json --no-files --set quant=torchao_nf4 | field 'd["breakdown_at_peak"]["parameters"]')
want=$(python3 -c "
r = lambda b: -(-b // 512) * 512
ns = [4096 * 4096, 1024 * 4096, 1024 * 4096, 4096 * 4096] + [14336 * 4096] * 3
q = lambda n: r(n // 2) + r(n // 64) + r(n // 16384 * 2) + r(2) + r(32)
print(2 * sum(2 * n - q(n) for n in ns))")
if [ -n "$p1" ] && [ $((p0 - p1)) = "$want" ]; then
  ok "torchao_nf4: parameters $p0 -> $p1 bytes (the 14 Linears' bf16 weights for NF4Tensor's inner tensors)"
else bad "torchao_nf4: parameters $p0 -> $p1 bytes (want $want fewer)"; fi
"$VRSIM" "$tmp/q.lua" --no-files --set quant=torchao_nf4 --alloc-trace "$tmp/q.csv" >/dev/null
got=$(python3 -c "
import csv, sys
alive = made = most = 0
for r in csv.DictReader(open(sys.argv[1])):
    if r['size'] != '117440512': continue
    if r['action'] == 'alloc': alive += 1; made += 1
    elif r['action'] == 'free_requested': alive -= 1
    most = max(most, alive)
print(made, most)" "$tmp/q.csv")
if [ "$got" = "24 3" ]; then ok "torchao_nf4: the MLP weights dequantized 24 times (forward and recomputation), a layer's three alive through its backward"
else bad "torchao_nf4: MLP weights dequantized / most alive at once: $got (want 24 3)"; fi
# 3b. the same layers under transformers' checkpointing, which dynamo graph-breaks around: they
#    run eager, and so does linear_nf4 (torchao 0.18 get_original_weight, one kernel a step,
#    its locals kept until it returns). fulltrace_ttc-torchao-nf4-compile-ckpt allocates, for
#    each dequantization of an MLP weight (n = 14336 x 4096), the uint8 code and its int64 copy
#    twice (n / 2 and 4n bytes, the code freed at once), the two table lookups (n each), the
#    scalers twice (n / 32), each repeated.flatten() copy and its product (n each), then the
#    weight (2n); LinearNF4 saves the NF4 weight alone, so each MLP weight is dequantized in
#    forward, in the recomputation and again in backward: 3 x 2 layers x 3 x 2 steps
"$VRSIM" "$tmp/q.lua" --no-files --set quant=torchao_nf4 --set checkpoint_impl=transformers --alloc-trace "$tmp/qe.csv" >/dev/null
got=$(python3 -c "
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r['action'] == 'alloc']
first = [r['size'] for r in rows if r['frames'].startswith('layers.0.mlp.gate_proj.get_original_weight.')][:13]
mlp = [r['frames'] for r in rows if r['size'] == '117440512' and '.mlp.' in r['frames']]
fwd = sum(f.endswith('get_original_weight.torch.stack') for f in mlp)
rec = sum(f.endswith('get_original_weight.torch.stack (recompute)') for f in mlp)
bwd = sum('backward: get_original_weight.torch.stack' in f for f in mlp)
print(' '.join(first), fwd, rec, bwd)" "$tmp/qe.csv")
want="29360128 234881024 29360128 234881024 58720256 58720256 1835008 1835008 58720256 58720256 58720256 58720256 117440512 12 12 12"
if [ "$got" = "$want" ]; then ok "torchao_nf4 in eager checkpointed layers: get_original_weight's 13 allocations as the measured trace's, each MLP weight dequantized in forward, recomputation and backward"
else bad "torchao_nf4 in eager checkpointed layers: '$got' (want '$want')"; fi
saved() { "$VRSIM" "$tmp/q.lua" --no-files --set checkpointing=false "$@" | grep -o 'the partitioner saves [0-9]* activations of decoder layer 1 for backward, [0-9.]* MiB'; }
s0=$(saved); s1=$(saved --set quant=torchao_nf4)
got=$(python3 -c "
import re, sys
a, b = (re.search(r'saves (\d+) activations .*, ([0-9.]+) MiB', x).groups() for x in sys.argv[1:])
print(int(b[0]) - int(a[0]), round(float(b[1]) - float(a[1]), 2))" "$s0" "$s1" 2>/dev/null)
if [ "$got" = "7 416.0" ]; then ok "torchao_nf4 unchecked: the bf16 base's saved set and the 7 dequantized weights (+416 MiB)"
else bad "torchao_nf4 unchecked: '$s1' against the bf16 base's '$s0' (want 7 more tensors, 416 MiB)"; fi
# a Linear to_nf4 cannot quantize (an MLP of 14337 x 4096 weights: not a multiple of 64 x 256)
python3 -c "
import json; c = json.load(open('$tmp/llama-3-8b.json')); c['intermediate_size'] = 14337
json.dump(c, open('$tmp/odd.json', 'w'))"
"$VRSIM" "$tmp/q.lua" --no-files --set quant=torchao_nf4 --set model.config="$tmp/odd.json" >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "gate_proj.*to_nf4 needs a multiple of 64 x 256 weights" "$tmp/err"; then
  ok "torchao_nf4: a weight to_nf4 refuses (14337 x 4096): exit 2, named"
else bad "torchao_nf4 on 14337 x 4096: exit $rc: $(cat "$tmp/err")"; fi
# what stays refused: eager torchao NF4, torchao NF4 sharded (bitsandbytes' NF4 compiled:
# tests/test_compile.sh)
for c in "compile=false|quant = \"torchao_nf4\" without compile is not modelled" \
         "strategy=ddp|quant = \"torchao_nf4\" under strategy ddp is not modelled" \
         "inference=true|quant = \"torchao_nf4\" for inference is not modelled"; do
  set_=${c%%|*}; want=${c#*|}
  q=torchao_nf4; what=$set_
  "$VRSIM" "$tmp/q.lua" --no-files --set quant=$q --set "$set_" >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -qF "$want" "$tmp/err"; then ok "quant=$q with $what: exit 2, named"
  else bad "quant=$q with $what: exit $rc: $(cat "$tmp/err")"; fi
done

# 4. the measured runs' plan (validation/harness/plans/plan_torchtune_combos.jsonl, run by
#    validation/harness/run_gen4.sh): its records (placeholder measurements here) reach vrsim
#    validate's scenarios, every line simulated; torchao's NF4 maps to quant = "torchao_nf4" with
#    the LoRA precision, and in any other mode the record is skipped, naming it
python3 - "$tmp/recs.jsonl" <<'PY' || bad "the plan's placeholder records were not written"
import json, sys
sys.path.insert(0, "validation/harness")
from predict_plan import placeholder
plan = [json.loads(l) for l in open("validation/harness/plans/plan_torchtune_combos.jsonl")]
with open(sys.argv[1], "w") as f:
    for c in plan:
        f.write(json.dumps(placeholder(c)) + "\n")
    c = dict([c for c in plan if c.get("quant") == "torchao_nf4"][0], name="bad-torchao-mode", mode="bf16")
    c.pop("lora", None)
    f.write(json.dumps(placeholder(c)) + "\n")
PY
"$VRSIM" validate --json "$tmp/recs.jsonl" >"$tmp/rows.json" 2>"$tmp/err"
"$VRSIM" validate "$tmp/recs.jsonl" >"$tmp/table.txt" 2>&1
got=$(python3 -c "
import json, sys
rows = json.load(open(sys.argv[1]))
pred = {}
for r in rows:
    pred.setdefault(r['config'], {})[r['metric']] = r['predicted']
names = [json.loads(l)['name'] for l in open(sys.argv[2])][:-1]
ok = all(n in pred and 'peak_allocated' in pred[n] for n in names)
nf4 = pred['ttc-torchao-nf4-compile']['peak_allocated'] > pred['ttc-torchao-nf4-compile-ckpt']['peak_allocated']
print(len(names), int(ok), int(nf4))" "$tmp/rows.json" "$tmp/recs.jsonl" 2>/dev/null)
if [ "$got" = "6 1 1" ]; then ok "plan_torchtune_combos.jsonl: all 6 records simulated (torchao NF4 unchecked above checkpointed)"
else bad "plan_torchtune_combos.jsonl: records simulated / torchao order: '$got' (want 6 1 1): $(cat "$tmp/err")"; fi
if grep -q "bad-torchao-mode.*skipped: quant 'torchao_nf4' outside mode lora_bf16" "$tmp/table.txt"; then
  ok "a torchao_nf4 record outside mode lora_bf16 is skipped, naming it"
else bad "a torchao_nf4 record outside mode lora_bf16: $(grep bad-torchao "$tmp/table.txt")"; fi

echo "test_ttc: $pass passed, $fail failed"
[ "$fail" = 0 ]
