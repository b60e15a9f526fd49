#!/bin/sh
# test_inputs.sh: inputs users already have (DeepSpeed JSON as published, PYTORCH_CUDA_ALLOC_CONF,
# config paths they type, GPU names), gradient accumulation per strategy, the verdict, and the
# output set (written whole, cleaned up on signals, report.html escaping).
#
#   VRSIM=./vrsim sh tests/test_inputs.sh       (make test runs it for each build)
set -u
VRSIM=${VRSIM:-./vrsim}
case "$VRSIM" in /*) ;; */*) VRSIM="$(pwd)/$VRSIM" ;; esac
cd "$(dirname "$0")/.." || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-inputs.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
unset PYTORCH_CUDA_ALLOC_CONF
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }
run() { _n=$1; shift; "$VRSIM" "$@" >"$TMP/$_n.out" 2>"$TMP/$_n.err"; RC=$?; }
# expect NAME RC PATTERN: the last run exited RC (no crash) and stdout+stderr match PATTERN
expect() {
  if [ "$RC" -ge 128 ]; then fail "$1: crashed ($RC)" "$(tail -3 "$TMP/$_n.err")"; return; fi
  if [ "$RC" -eq "$2" ] && cat "$TMP/$_n.out" "$TMP/$_n.err" | grep -qE -- "$3"; then ok "$1"
  else fail "$1 (exit $RC, want $2 and /$3/)" "$(cat "$TMP/$_n.out" "$TMP/$_n.err" | head -5)"; fi
}
DS=scenarios/llama7b_deepspeed_json.lua
SMALL="--set size=7b-l2 --set seq=512 --set steps=2 --no-files"

# ---- several bad fields: the same one is reported every time ---------------------------------
cat > "$TMP/two_bad.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { family = "llama2", size = "7b", layers = 2 },
         training = { micro_batch = 1, seq = 16, precision = "bf16", optimizer = "adamw" },
         allocator = { conf = 5 } }
L
first=""; same=1
for i in 1 2 3 4 5 6 7 8; do
  run twobad "$TMP/two_bad.lua" --no-files
  msg=$(head -1 "$TMP/twobad.err")
  [ -z "$first" ] && first=$msg
  [ "$msg" = "$first" ] || same=0
done
if [ "$same" = 1 ] && [ "$RC" -eq 2 ]; then ok "two bad fields: one message, the same in 8 runs ($first)"
else fail "two bad fields: the message changed between runs or exit $RC" "$first / $msg"; fi

# ---- DeepSpeed JSON: "auto" values, offload devices, batch arithmetic, cases once mishandled --
cat > "$TMP/auto_bucket.json" <<'J'
{ "train_micro_batch_size_per_gpu": "auto", "zero_optimization": { "stage": 2, "reduce_bucket_size": "auto" } }
J
run auto2 $DS --set training.deepspeed="$TMP/auto_bucket.json" $SMALL
expect "reduce_bucket_size \"auto\" is hidden^2 (was dp.lua:475 floor)" 0 "reduce_bucket_size auto = 16777216"
cat > "$TMP/auto_prefetch.json" <<'J'
{ "zero_optimization": { "stage": 3, "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto" } }
J
run auto3 $DS --set training.deepspeed="$TMP/auto_prefetch.json" $SMALL
expect "stage3 \"auto\" values are 0.9 hidden^2 and 10 hidden (was dp.lua:305 compare)" 0 \
  "stage3_param_persistence_threshold auto = 40960; stage3_prefetch_bucket_size auto = 15099494"
run ovl scenarios/llama13b_zero2.lua --set training.zero.overlap_comm=false --set size=13b-l2 --set steps=2 --no-files
expect "--set training.zero.overlap_comm=false runs (was outputs[2] is not a tensor)" 0 "^FITS"
run cpux scenarios/llama13b_zero2.lua --set zero.offload_optimizer=cpux --set size=13b-l2 --no-files
expect "offload_optimizer=cpux is an error with a suggestion (was silently no offload)" 2 "did you mean 'cpu'"
run nvme scenarios/llama13b_zero2.lua --set zero.offload_optimizer=nvme --set size=13b-l2 --no-files
expect "offload_optimizer=nvme is 'not modelled', exit 2 (was silently no offload)" 2 "nvme.*not modelled"
cat > "$TMP/nvme.json" <<'J'
{ "zero_optimization": { "stage": 3, "offload_optimizer": { "device": "nvme", "nvme_path": "/local_nvme" } } }
J
run nvmej $DS --set training.deepspeed="$TMP/nvme.json" $SMALL
expect "DeepSpeed JSON offload device nvme: not modelled, exit 2" 2 "nvme.*not modelled"
cat > "$TMP/tb.json" <<'J'
{ "train_batch_size": 30, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "zero_optimization": { "stage": 2 } }
J
run tb $DS --set training.deepspeed="$TMP/tb.json" $SMALL
expect "an inconsistent train_batch_size is DeepSpeed's assertion, exit 2" 2 "30 != 2 \\* 2 \\* 8"
cat > "$TMP/ga.json" <<'J'
{ "train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "fp16": { "enabled": true, "loss_scale": 0 },
  "zero_optimization": { "stage": 2 }, "no_such_key": 1 }
J
run ga $DS --set training.deepspeed="$TMP/ga.json" --set precision=fp16 $SMALL --json
expect "gradient_accumulation_steps derived (64 / 2 / 8 = 4), fp16 with dynamic loss scaling" 0 \
  "micro-batch 2 x 4 accumulation x 8 GPUs.*fp16 dynamic loss scaling|fp16 dynamic loss scaling.*micro-batch 2 x 4"
grep -q '"unknown_keys":.*"no_such_key"' "$TMP/ga.out" && ok "  ... the unknown key in summary.json by name" \
  || fail "  ... unknown key missing from summary.json" "$(grep -A3 deepspeed "$TMP/ga.out")"
run gatext $DS --set training.deepspeed="$TMP/ga.json" --set precision=fp16 $SMALL
expect "  ... and in the text" 0 "DeepSpeed does not know.*no_such_key"
run mism $DS --set training.deepspeed="$TMP/ga.json" --set micro_batch=4 $SMALL
expect "a DeepSpeed value that disagrees with --set is the Trainer's mismatch error" 2 "mismatch"
cat > "$TMP/badz.json" <<'J'
{ "zero_optimization": { "stage": 2, "overlap_com": true } }
J
run badz $DS --set training.deepspeed="$TMP/badz.json" $SMALL
expect "an unknown zero_optimization key names itself and the right one" 2 "overlap_com.*did you mean 'overlap_comm'"
cat > "$TMP/stage2_default.json" <<'J'
{ "zero_optimization": { "stage": 2 } }
J
run dflt $DS --set training.deepspeed="$TMP/stage2_default.json" $SMALL --json
expect "overlap_comm left out is DeepSpeed's default (stage == 3: false at stage 2)" 0 "overlap_comm false"

# ---- configs as published (tests/deepspeed/README.md) ---------------------------------------
run hf2 $DS --set training.deepspeed=tests/deepspeed/hf_docs_zero2.json $SMALL
expect "HF docs' ZeRO-2 example as published (a missing comma): a clear JSON error" 2 "not valid JSON \\(line 14\\)"
run hf2f $DS --set training.deepspeed=tests/deepspeed/hf_docs_zero2_fixed.json $SMALL
expect "HF docs' ZeRO-2 example (comma added) runs: CPU offload read" 0 "offload_optimizer cpu"
run hf3 $DS --set training.deepspeed=tests/deepspeed/hf_docs_zero3.json $SMALL
expect "HF docs' ZeRO-3 example runs with its auto values resolved" 0 "ZeRO stage 3.*reduce_bucket_size auto = 16777216"
run hf3n $DS --set training.deepspeed=tests/deepspeed/hf_docs_zero3_nvme.json $SMALL
expect "HF docs' ZeRO-3/Infinity example: exit 2, naming what is not modelled" 2 "not a DeepSpeed key|not modelled"

# ---- gradient accumulation as each framework runs it -------------------------------------------
run z2a1 scenarios/llama13b_zero2.lua --set size=13b-l2 --no-files --json
run z2a8 scenarios/llama13b_zero2.lua --set size=13b-l2 --set grad_accum=8 --no-files --json
if [ "$RC" -eq 0 ] && python3 - "$TMP/z2a1.out" "$TMP/z2a8.out" <<'P'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
ga, gb = a["breakdown_at_peak"]["gradients"], b["breakdown_at_peak"]["gradients"]
sys.exit(0 if b["fits"] and gb == ga else 1)
P
then ok "ZeRO-2 grad_accum=8: gradients stay the partition (reduce-scatter every micro-batch), FITS"
else fail "ZeRO-2 grad_accum=8 holds more than the partition" "$(head -c 300 "$TMP/z2a8.out")"; fi
run head8 scenarios/llama13b_zero2.lua --set grad_accum=8 --no-files
expect "the headline scenario with --set grad_accum=8 FITS with the gradient partition" 0 "zero2 gradient partition"
run fs1 scenarios/llama13b_zero2.lua --set size=13b-l2 --set strategy=fsdp2 --set grad_accum=3 --no-files --json
run fs0 scenarios/llama13b_zero2.lua --set size=13b-l2 --set strategy=fsdp2 --set grad_accum=3 \
  --set zero.sync_every_micro_batch=false --no-files --json
if python3 - "$TMP/fs1.out" "$TMP/fs0.out" <<'P'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
sys.exit(0 if b["breakdown_at_peak"]["gradients"] > 2 * a["breakdown_at_peak"]["gradients"] else 1)
P
then ok "FSDP2 set_requires_gradient_sync(False) holds unsharded gradients across micro-batches"
else fail "FSDP2 sync_every_micro_batch=false changes nothing"; fi
# every knob combination the strategies accept runs
bad=""
for st in ddp zero1 zero2 zero3 fsdp2; do
  for ov in true false; do for cg in true false; do for off in none cpu; do for ga in 1 2; do
    "$VRSIM" scenarios/llama13b_zero2.lua --set size=13b-l1 --set seq=256 --set steps=2 --set count=2 \
      --set strategy=$st --set zero.overlap_comm=$ov --set zero.contiguous_gradients=$cg \
      --set zero.offload_optimizer=$off --set grad_accum=$ga --no-files >/dev/null 2>"$TMP/sweep.err"
    r=$?
    if [ $r -ne 0 ] && [ $r -ne 3 ]; then bad="$bad $st/ov=$ov/cg=$cg/off=$off/ga=$ga:$(head -c 120 "$TMP/sweep.err")"; fi
  done; done; done; done
done
[ -z "$bad" ] && ok "every strategy x overlap_comm x contiguous_gradients x offload x accumulation runs" \
  || fail "knob combinations that fail:" "$bad"

# ---- verdict -----------------------------------------------------------------------------------
run worst scenarios/llama7b_h200.lua --set size=7b-l2 --set steps=3 --no-files --json
python3 - "$TMP/worst.out" <<'P' && ok "summary.json: worst_step, headroom_bytes, num_alloc_retries" || fail "verdict fields missing"
import json, sys
d = json.load(open(sys.argv[1]))
w = d["worst_step"]
assert w["peak_reserved_bytes"] == max(s["peak_reserved_bytes"] for s in d["steps"])
assert d["headroom_bytes"] == d["capacity_bytes"] - w["peak_reserved_bytes"]
assert "num_alloc_retries" in d
P
run oom scenarios/llama7b_h200.lua --set size=7b-l2 --set capacity_gib=4 --no-files --json
python3 - "$TMP/oom.out" <<'P' && ok "after an OOM: live tensors, breakdown of the moment of the OOM" || fail "OOM moment missing" "$(head -c 400 "$TMP/oom.out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert not d["fits"] and d["live_at"] == "oom"
bd = d["oom"]["breakdown"]
live = sum(t["bytes"] for t in d["live_at_peak"])
cats = sum(v for k, v in bd.items() if k != "allocator_slack")
# the live tensors listed (the largest 20) cannot exceed what was allocated at the OOM
assert 0 < live <= cats and cats <= d["oom"]["allocated_bytes"] + 64 * 2**20, (live, cats, d["oom"]["allocated_bytes"])
P
run oomt scenarios/llama7b_h200.lua --set size=7b-l2 --set capacity_gib=4 --no-files
expect "  ... and in the text" 3 "largest live tensors at the out-of-memory error"

# ---- habits ------------------------------------------------------------------------------------
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$VRSIM" scenarios/llama7b_h200.lua $SMALL >"$TMP/env.out" 2>&1
grep -q "from PYTORCH_CUDA_ALLOC_CONF in the environment: expandable_segments:True" "$TMP/env.out" \
  && ok "PYTORCH_CUDA_ALLOC_CONF from the environment, said so" || fail "environment alloc conf not used" "$(tail -3 "$TMP/env.out")"
PYTORCH_CUDA_ALLOC_CONF=bogus:1 "$VRSIM" scenarios/llama7b_h200.lua $SMALL >"$TMP/env2.out" 2>&1
[ $? -eq 2 ] && grep -q "environment" "$TMP/env2.out" && ok "  ... a bad one is an error that says where it came from" || fail "bad env conf"
run split scenarios/llama7b_h200.lua $SMALL --alloc-conf max_split_size_mb:99999999999999999 --json
expect "max_split_size_mb is clamped as PyTorch clamps it (not an error)" 0 '"fits"'
cp scenarios/configs/llama-2-7b-hf.json "$TMP/my-config.json"
run cfgpath scenarios/llama7b_from_config.lua --set model.config="$TMP/my-config.json" $SMALL
expect "--set model.config=PATH outside the scenario's folder is read (the user typed it)" 0 "^FITS"
run cfgrel scenarios/llama7b_deepspeed_json.lua --set training.deepspeed=tests/deepspeed/hf_docs_zero3.json $SMALL
expect "--set training.deepspeed=PATH relative to the working folder" 0 "^FITS"
run rank scenarios/llama7b_h200.lua --set count=8 --set strategy=zero1 --set rank=8 $SMALL
expect "--set rank=8 of 8 GPUs is an error (was a ZeRO-1 partition of nothing)" 2 "^vrsim: --set rank=8: hardware.rank = 8: the ranks of 8 GPUs are 0 to 7"
run rank7 scenarios/llama7b_h200.lua --set count=8 --set strategy=zero1 --set rank=7 $SMALL
expect "  ... rank 7, the last, runs" 0 "^FITS"
# a knob this run does not read is said so, never silently dropped
run inert1 scenarios/llama7b_h200.lua --set checkpoint_scope=attention $SMALL
expect "checkpoint_scope without checkpointing: noted as having no effect" 0 "training.checkpoint_scope = attention has no effect on this run: checkpointing is off"
run inert2 scenarios/llama7b_h200.lua --set checkpoint_scope=attention --set checkpointing=true $SMALL
if grep -q "no effect" "$TMP/inert2.out"; then fail "  ... with checkpointing on it is read: no note" "$(grep 'no effect' "$TMP/inert2.out")"
else ok "  ... with checkpointing on it is read: no note"; fi
run inert3 scenarios/llama7b_h200.lua --set zero.offload_optimizer=cpu $SMALL
expect "a training.zero knob with strategy none: noted" 0 "training.zero.offload_optimizer has no effect: strategy is none"
run inert4 scenarios/llama7b_h200.lua --set count=2 --set strategy=zero2 --set optimizer_impl=fused $SMALL
expect "optimizer_impl under ZeRO-2 (DeepSpeed's FusedAdam): noted" 0 "training.optimizer_impl = fused has no effect on this run: ZeRO-2's step is DeepSpeed's FusedAdam"
run inert5 scenarios/llama7b_h200.lua --set network=ib_hdr --set count=16 --set strategy=zero2 $SMALL
if grep -q "hardware.network.*no effect" "$TMP/inert5.out"; then fail "network across two nodes is read: no note" "$(grep 'no effect' "$TMP/inert5.out")"
else ok "network across two nodes is read: no note"; fi
run sgdz2 scenarios/llama7b_h200.lua --set count=2 --set strategy=zero2 --set optimizer=sgd $SMALL
expect "SGD under ZeRO-2 is not modelled, exit 2 (was Adam's state, silently)" 2 "optimizer = \"sgd\" under strategy zero2 is not modelled"
run sgdoff scenarios/llama7b_h200.lua --set count=2 --set strategy=zero3 --set zero.offload_optimizer=cpu --set optimizer=adamw8bit $SMALL
expect "8-bit AdamW with a CPU-offloaded step is not modelled, exit 2" 2 "with offload_optimizer = \"cpu\" is not modelled"
run q4full scenarios/llama7b_h200.lua --set quant=nf4 $SMALL
expect "a 4-bit model trained without LoRA: exit 2, as transformers' Trainer refuses it (was embeddings-only training)" 2 "does not fine-tune a purely quantized model"
run q8lora scenarios/llama7b_h200.lua --set quant=int8 --set precision=lora_bf16 $SMALL
expect "LoRA over LLM.int8 is not modelled, exit 2 (was 'the loss tensor does not require grad')" 2 "int8.*with LoRA is not modelled"
run mbres maxbatch scenarios/llama7b_h200.lua --field resolution
expect "maxbatch --field resolution on a language model: exit 2 (was 8192 'fits' at a constant peak)" 2 "training.resolution = 64: llama2 does not read it"
run mbseq maxbatch scenarios/sdxl_train_3090.lua --field seq
expect "maxbatch --field seq on SDXL: exit 2" 2 "training.seq = 1: sdxl does not read it"
run ver --version
expect "vrsim --version" 0 "^vrsim [0-9]+\\.[0-9]+"
run typo valdate
expect "a mistyped subcommand suggests the right one" 2 "did you mean 'vrsim validate'"
run g1 scenarios/llama7b_h200.lua --set gpu=h100 $SMALL
expect "gpu=h100 resolves to the catalog's h100_sxm" 0 "read as the catalog's h100_sxm"
run g2 scenarios/llama7b_h200.lua --set gpu=4090 $SMALL
expect "gpu=4090 resolves to rtx4090" 0 "RTX 4090"
run g3 scenarios/llama7b_h200.lua --set gpu=a100 $SMALL
expect "gpu=a100 names both catalog entries" 2 "a100_40g or a100_80g"

# ---- output set --------------------------------------------------------------------------------
O="$TMP/set"
run set1 scenarios/llama7b_h200.lua --set size=7b-l2 --set steps=2 --out "$O" --no-suggest
head -1 "$O/memory.csv" | grep -q ",op,phase$" && sed -n 2p "$O/memory.csv" | grep -qE ',"[^"]*",(build|fwd)$' \
  && ok "memory.csv carries op and phase per row" || fail "memory.csv op/phase" "$(head -2 "$O/memory.csv")"
python3 - "$O/trace.json" <<'P' && ok "trace.json names its threads" || fail "trace.json thread names"
import json, sys
d = json.load(open(sys.argv[1]))
names = {e["tid"]: e["args"]["name"] for e in d["traceEvents"] if e.get("name") == "thread_name"}
assert names[0] == "compute" and "collectives" in names[1] and "host-to-device" in names[2]
P
run set2 scenarios/llama7b_h200.lua --set size=7b-l2 --set steps=2 --set capacity_gib=4 --out "$O" --no-suggest
grep -q '"CUDA out of memory"' "$O/trace.json" && grep -qE '"fits":[[:space:]]*false' "$O/summary.json" \
  && ok "a second run replaces the whole set (summary and trace from the same run, OOM marked)" \
  || fail "mixed or missing output set"
ls "$TMP" | grep -q "set.tmp-\|set.old-" && fail "temporaries left beside --out: $(ls "$TMP")" || ok "  ... no temporaries left"
touch "$O/notes.txt"
run set3 scenarios/llama7b_h200.lua --set size=7b-l2 --set steps=2 --out "$O" --no-suggest
expect "an --out folder holding other files is refused, not replaced" 2 "notes.txt"
[ -f "$O/notes.txt" ] && ok "  ... and the user's file is still there" || fail "user file removed"
# a signal mid-run removes the temporaries (a slow run: the what-would-help variants)
"$VRSIM" scenarios/llama13b_zero2.lua --out "$TMP/sig" --alloc-trace "$TMP/sig.csv" >/dev/null 2>&1 &
p=$!
sleep 2
kill -TERM $p 2>/dev/null
wait $p 2>/dev/null
left=$(ls "$TMP" | grep -E "^sig(\.csv)?\.(tmp|old)-" || true)
[ -d "$TMP/sig" ] && left="$left $(ls "$TMP/sig" | grep tmp || true)"
[ -z "$(echo $left)" ] && ok "SIGTERM leaves no temporaries (output set, --alloc-trace)" || fail "SIGTERM left: $left"
run atr scenarios/llama7b_h200.lua $SMALL --alloc-trace "$TMP/no-such-dir/t.csv"
expect "--alloc-trace that cannot be written: a non-zero exit" 1 "cannot write"
# report.html escapes every string it embeds
cat > "$TMP/evil.lua" <<'L'
return { title = "x <!--<script> </script><img src=x onerror=alert(1)> & \"q\"",
         hardware = { gpu = "h200" }, model = { size = "7b-l1" }, training = { seq = 256, steps = 2 } }
L
run evil "$TMP/evil.lua" --out "$TMP/evil" --no-suggest
n=$(grep -c "<script" "$TMP/evil/report.html")
if [ "$n" -eq 2 ] && ! grep -q "<!--\|<img" "$TMP/evil/report.html"; then
  ok "report.html: a title with <!--<script> and </script> stays inside the JSON (escaped)"
else fail "report.html embeds the title unescaped ($n <script tags)"; fi
if command -v chromium >/dev/null 2>&1; then
  timeout 60 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/prof" --dump-dom \
    "file://$TMP/evil/report.html" 2>/dev/null >"$TMP/evil.dom"
  grep -q 'data-ok="1"' "$TMP/evil.dom" && grep -q 'x &lt;!--&lt;script&gt;' "$TMP/evil.dom" \
    && ok "  ... and the page runs in Chromium and shows the title as text" || fail "  ... the page breaks in Chromium"
fi

echo "test_inputs: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
