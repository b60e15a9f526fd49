#!/bin/sh
# test_megatron_tp.sh: training.parallel.tp_impl = "megatron", tensor parallelism with sequence
# parallelism as megatron-core 0.16.1 runs it (lua/strategies/megatron_tp.lua): the field; the
# rank's live bytes against the oracle's capture of megatron-core itself; what its column-parallel
# linears keep (the local input, not the gathered one DTensor's plan keeps); the persistent "mpu"
# GlobalMemoryBuffer, made once; the backward all-gather of each column-parallel input on the
# compute stream; and what it does not model, refused by name.
#   VRSIM=./vrsim sh tests/test_megatron_tp.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-mgtp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
O=validation/oracle
# the capture's scenario: Llama-3-8B's shapes, 2 layers, 512 tokens, bf16, tp 2, eager attention
SC=$O/scenarios/llama3_8b_l2_bf16_megatron_tp2.lua

# 1. the field, its default and its choices
if "$VRSIM" fields 2>/dev/null | sed -n '/^training.parallel /,/^$/p' | grep -q '^  tp_impl  *string .*\[dtensor\]$' \
   && "$VRSIM" fields 2>/dev/null | sed -n '/^  tp_impl /,/one of/p' | grep -q 'one of: dtensor, megatron'
then ok "vrsim fields lists training.parallel.tp_impl (string, default dtensor, one of dtensor, megatron)"
else bad "vrsim fields does not list training.parallel.tp_impl" "$("$VRSIM" fields | grep -A1 tp_impl)"; fi

# 2. against megatron-core's own run (capture_megatron_tp.py, committed): every allocation
#    aligned but the named divergences, and the live bytes after the build, after step 1's forward
#    and at its peak within 4 KiB of the capture's
python3 "$O/compare.py" --vrsim "$VRSIM" --expect "$O/expected/llama3_8b_l2_bf16_megatron_tp2.txt" \
  "$O/captures/llama3_8b_l2_bf16_megatron_tp2.jsonl.gz" "$SC" >"$tmp/cmp" 2>&1; rc=$?
# (compare.py prints "(N bytes)" after a milestone where vrsim less its named differs from the
# capture, nothing where they are equal)
near=$(grep -E 'after build|after forward|step 1 peak' "$tmp/cmp" | awk '
  { d = 0; if (match($0, /\([-+]?[0-9]+ bytes\)/)) d = substr($0, RSTART + 1, RLENGTH - 8) + 0
    if (d < 0) d = -d; if (d <= 4096) n++ } END { print n + 0 }')
if [ $rc = 0 ] && [ "$near" = 3 ]; then
  ok "oracle: vrsim's rank 0 matches megatron-core's capture (the 4 named divergences only; live bytes after build, after forward, at step 1's peak within 4 KiB)"
else bad "oracle comparison (exit $rc, $near of 3 milestones within 4 KiB)" "$(tail -12 "$tmp/cmp")"; fi

# 3. what a layer keeps for its column-parallel GEMMs: DTensor's plan (tp_impl = dtensor, the same
#    model) keeps the all-gathered input [b, s, h] of q/k/v and of gate/up; Megatron keeps the
#    local input [s/tp, b, h] (the norm's output) and gathers it again in backward. Read from the
#    allocation traces of both runs: the tensors of layer 1 alive when backward begins.
"$VRSIM" "$SC" --no-files --no-suggest --alloc-trace "$tmp/mg.csv" >"$tmp/mg.out" 2>&1 || bad "megatron run" "$(tail -3 "$tmp/mg.out")"
"$VRSIM" "$SC" --set training.parallel.tp_impl=dtensor --no-files --no-suggest --alloc-trace "$tmp/dt.csv" \
  >"$tmp/dt.out" 2>&1 || bad "dtensor run" "$(tail -3 "$tmp/dt.out")"
if python3 - "$tmp/mg.csv" "$tmp/dt.csv" <<'PY'
import csv, sys
S, B, H, TP = 512, 1, 4096, 2           # the scenario's seq, micro_batch, hidden, tp
def live_at_backward(path):
    """Each allocation alive when step 0's backward starts: (frame, size)."""
    live = {}
    for ev in csv.DictReader(open(path)):
        if ev["frames"].endswith(".backward"):
            break
        if ev["action"] == "alloc":
            live[ev["addr"]] = (ev["frames"], int(ev["size"]))
        elif ev["action"] == "free_requested":
            live.pop(ev["addr"], None)
    return list(live.values())
mg, dt = live_at_backward(sys.argv[1]), live_at_backward(sys.argv[2])
gathered = [s for f, s in dt if f in ("layers.1.self_attn: all_gather input", "layers.1.mlp: all_gather input")]
local = [s for f, s in mg if f in ("decoder.layers.1.input_layernorm", "decoder.layers.1.pre_mlp_layernorm")
         and s == S // TP * B * H * 2]
mg_gathered = [f for f, s in mg if "all_gather" in f]
print(f"dtensor keeps {gathered}, megatron keeps {local} and no gathered tensor ({mg_gathered})")
ok = (gathered == [S * B * H * 2] * 2 and local == [S // TP * B * H * 2] * 2 and not mg_gathered
      and sum(gathered) - sum(local) == 2 * (S - S // TP) * B * H * 2)
sys.exit(0 if ok else 1)
PY
then ok "a layer's column-parallel GEMMs keep 2 local inputs of s/tp (2 MiB each) where DTensor's keep 2 gathered ones of s (4 MiB each): 4 MiB less a layer"
else bad "what the column-parallel GEMMs keep"; fi

# 4. the "mpu" buffer: made in step 0's forward (the qkv gather's request, then larger for the
#    attention scores' baddbmm input, the first freed as it is replaced), never in step 1, and kept:
#    its last size is max(s*b*h, b*heads/tp*s*s) bf16 elements
if python3 - "$tmp/mg.csv" <<'PY'
import csv, sys
S, B, H, NP = 512, 1, 4096, 16
made, freed, step_ops = [], set(), []
allocs = {}
rows = list(csv.DictReader(open(sys.argv[1])))
for ev in rows:
    if ev["action"] == "alloc" and "get_tensor makes the mpu buffer" in ev["frames"]:
        made.append((int(ev["seq"]), int(ev["size"])))
        allocs[ev["addr"]] = int(ev["size"])
    elif ev["action"] == "free_requested" and ev["addr"] in allocs:
        freed.add(allocs.pop(ev["addr"]))
want = max(S * B * H, B * NP * S * S) * 2
print("made", made, "freed", sorted(freed), "kept", list(allocs.values()))
sys.exit(0 if len(made) == 2 and list(allocs.values()) == [want] and freed == {S * B * H * 2} else 1)
PY
then ok "GlobalMemoryBuffer: made twice in the first forward (4 MiB, then 8 MiB for the scores), the first freed, the 8 MiB one kept for the run"
else bad "the mpu buffer"; fi
grep -q 'GlobalMemoryBuffer ("mpu"): 2 allocations, ending at 8.0 MiB' "$tmp/mg.out" \
  && ok "the run's note names the buffer and its size" || bad "no buffer note" "$(grep -o 'GlobalMemoryBuffer[^;]*' "$tmp/mg.out")"

# 4b. the order of a column-parallel backward's allocations (LinearWithGradAccumulationAndAsync
#     Communication.backward under sequence parallelism): grad_input [s, b, h], then the
#     reduce-scatter's output sub_grad_input [s/tp, b, h] (torch.empty), then the weight gradient,
#     each of step 1's five (q/k/v and fc1 of each layer, the output layer) as the capture makes
#     them; the reduce-scatter made after the weight gradient would add 2 MiB to a stage's peak
#     that falls at that GEMM
if python3 - "$tmp/mg.csv" "$O/captures/llama3_8b_l2_bf16_megatron_tp2.jsonl.gz" <<'PY'
import csv, gzip, json, sys
S, B, H, TP = 512, 1, 4096, 2
def capture(path):
    """Step 1: the allocations of each column-parallel backward (the runs of ops of
    LinearWithGradAccumulationAndAsyncCommunicationBackward that make the reduce-scatter's
    torch.empty), in order."""
    runs, cur = [], None
    for l in gzip.open(path, "rt"):
        d = json.loads(l)
        if d["e"] != "op" or d.get("st") != 1 or d.get("ph") != "bwd": continue
        if d.get("fw", "").endswith("|LinearWithGradAccumulationAndAsyncCommunicationBackward"):
            if cur is None: cur = []; runs.append(cur)
            cur += [(d["op"], n[1]) for n in d.get("new", [])]
        else: cur = None
    return [[n for _, n in r] for r in runs if any(op == "aten.empty.memory_format" for op, _ in r)]
def vrsim(path):
    """The allocations of each column-parallel linear's backward node, step 1's."""
    runs, last = [], None
    for ev in csv.DictReader(open(path)):
        if ev["action"] != "alloc": continue
        f = ev["frames"]
        if f.endswith((".linear_qkv.backward", ".linear_fc1.backward", "output_layer.backward")):
            if f != last: runs.append([]); last = f
            runs[-1].append(int(ev["size"]))
        else: last = None
    return runs[len(runs) // 2:]
c, v = capture(sys.argv[2]), vrsim(sys.argv[1])
print("step 1's column-parallel backwards, bytes in allocation order: vrsim", v, "the capture", c)
sys.exit(0 if len(v) == 5 and v == c and all(r[:2] == [S * B * H * 2, S // TP * B * H * 2] for r in v) else 1)
PY
then ok "column-parallel backward: grad_input, the reduce-scatter's output, then the weight gradient, as the capture allocates them (5 a step)"
else bad "the column-parallel backward's allocation order"; fi

# 5. the timeline: each column-parallel linear (2 a layer, and the output layer) all-gathers its
#    saved input again in backward, on the compute stream, before its backward node, over the tp
#    group (s * b * h bf16 gathered)
"$VRSIM" "$SC" --no-suggest --out "$tmp/o" >/dev/null 2>&1
if python3 - "$tmp/o/trace.json" <<'PY'
import json, sys
S, B, H = 512, 1, 4096
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
g = [e for e in ev if e["name"].endswith("backward all_gather of the saved input into the mpu buffer")]
step1 = [e for e in g if e["args"].get("step") == 1]
ok = len(step1) == 5 and all(e["cat"] == "backward" and e["tid"] == 0 and e["args"]["kind"] == "all_gather"
                              and e["args"]["bytes"] == S * B * H * 2 for e in step1)
# each before its linear's backward node
for e in step1:
    lin = e["name"].split(":")[0]
    node = [x for x in ev if x["name"] == lin + ".backward" and x["args"].get("step") == 1]
    ok = ok and len(node) == 1 and node[0]["ts"] >= e["ts"] + e["dur"] - 1e-6
print(len(g), "backward all-gathers;", [e["name"].split(":")[0] for e in step1])
sys.exit(0 if ok else 1)
PY
then ok "backward: 5 all-gathers of the saved local inputs a step on the compute stream, each before its linear's backward node"
else bad "the backward all-gathers on the timeline"; fi

# 6. what is not modelled: exit 2 naming the field
refused() { # $1 what, $2 the message's pattern, then arguments
  what=$1; pat=$2; shift 2
  "$VRSIM" "$SC" --no-files "$@" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$pat" "$tmp/out"; then ok "$what: exit 2, named"
  else bad "$what: exit $rc" "$(head -3 "$tmp/out")"; fi
}
F='training.parallel.tp_impl = "megatron"'
# (Megatron's DistributedDataParallel over dp_replicate: tests/test_megatron_dp.sh)
refused "megatron with FSDP2 over dp_shard" "$F with data parallelism: training.strategy = \"fsdp2\"" \
  --set hardware.count=4 --set training.parallel.dp_shard=2
refused "megatron with SDPA attention" "$F: training.attention = \"sdpa\": .*TransformerEngine" --set attention=sdpa
refused "megatron in fp32" "$F: training.precision = \"fp32\"" --set precision=fp32
refused "megatron with checkpointing" "$F: training.checkpointing" --set checkpointing=true
refused "megatron with LoRA" "$F: training.precision = \"lora_bf16\"" --set precision=lora_bf16
refused "megatron on Qwen3 (a q/k norm)" "$F: modelled for the Llama-shaped families" \
  --set model.config=scenarios/configs/qwen3-8b.json
refused "megatron with tied embeddings" "$F: tied embeddings" --set model.config=scenarios/configs/llama-3.2-1b.json
refused "megatron with qwen2's qkv bias" "$F: linear biases" --set model.config=scenarios/configs/qwen2.5-0.5b.json
refused "megatron without tensor parallelism" 'training.parallel.tp_impl = "megatron" needs tensor parallelism' \
  --set hardware.count=1 --set training.parallel.tp=1
refused "an unknown tp_impl" "training.parallel.tp_impl: unknown implementation 'nemo'" --set training.parallel.tp_impl=nemo

echo "test_megatron_tp: $pass passed, $fail failed"
[ "$fail" = 0 ]
