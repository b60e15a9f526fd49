#!/bin/sh
# The techniques a run that does not fit reaches for, each against its library's physics:
# Liger's fused linear cross-entropy, torchtune's chunked cross-entropy and Cut Cross-Entropy (training.loss), the
# optimizer step in backward (training.optimizer_in_backward) and activation offloading
# (training.activation_offload), paged optimizers (training.optimizer = "paged_..."); and the
# combinations each refuses.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { python3 -c "import sys,json; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
cp scenarios/configs/llama-3-8b.json "$tmp/"

# Llama-3-8B (vocabulary 128256, hidden 4096) at 1 x 4096 tokens with all-linear LoRA: the fp32
# logits are 4096 x 128256 x 4 = 2,101,346,304 bytes
cat > "$tmp/l3.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", steps = 2,
               lora = { r = 16, alpha = 32, targets = "all-linear" } } }
EOS
LOGITS32=2101346304

# 1. the full loss's peak holds the three fp32 logits-sized tensors (log_softmax's output and the
#    two gradients); Liger's fused loss never makes one, and the peak falls by about their bytes
"$VRSIM" "$tmp/l3.lua" --json --no-files > "$tmp/full.json"
"$VRSIM" "$tmp/l3.lua" --json --no-files --set training.loss=liger_fused > "$tmp/fused.json"
n=$(field "sum(1 for x in d['live_at_peak'] if x['bytes'] == $LOGITS32)" < "$tmp/full.json")
if [ "$n" = 3 ]; then ok "loss = full: three fp32 logits tensors live at the peak"
else bad "loss = full: $n fp32 logits tensors live at the peak (want 3)"; fi
pf=$(field "d['peak_allocated_bytes']" < "$tmp/full.json")
pl=$(field "d['peak_allocated_bytes']" < "$tmp/fused.json")
if python3 -c "import sys; a,b,l=map(int,sys.argv[1:]); sys.exit(not (2.5*l < a-b < 3.2*l))" "$pf" "$pl" "$LOGITS32"; then
  ok "loss = liger_fused: the peak falls by $(( (pf - pl) >> 20 )) MiB (three fp32 logits: $(( 3 * LOGITS32 >> 20 )) MiB)"
else bad "loss = liger_fused: the peak falls from $pf to $pl bytes, not by about three fp32 logits"; fi

# 2. Liger's chunks: inc_factor = ceil(128256 / 4096) = 32, chunk = next_pow2(4096 / 32) = 128
#    rows; one (128, 128256) bf16 buffer reused by every chunk, and nothing logits-sized at all
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=liger_fused --alloc-trace "$tmp/fused.csv" >/dev/null
big=$(awk -F, '$3 == "alloc" && $5 >= 1000000000' "$tmp/fused.csv" | grep -c "logits\|log_probs\|fused_lce")
store=$(grep ",alloc," "$tmp/fused.csv" | grep "fused_lce.logits_storage" | cut -d, -f5 | sort -u)
if [ "$big" = 0 ] && [ "$store" = 32833536 ]; then
  ok "loss = liger_fused: one 128 x 128256 bf16 logits buffer per step ($store bytes), no logits of the batch"
else bad "loss = liger_fused: logits buffer '$store' bytes (want 32833536), $big allocations of 1 GB or more"; fi

# 3. the gradients are made in forward and handed on: the hidden states' gradient is allocated
#    before backward starts and freed by the final norm's backward, which allocates none for it
first_bwd=$(grep -n "\.backward" "$tmp/fused.csv" | head -1 | cut -d: -f1)
gi=$(grep -n ",alloc,.*fused_lce.grad_input$" "$tmp/fused.csv" | head -1 | cut -d: -f1)
if [ -n "$gi" ] && [ -n "$first_bwd" ] && [ "$gi" -lt "$first_bwd" ]; then
  ok "loss = liger_fused: grad_input made in forward (trace line $gi, backward from $first_bwd)"
else bad "loss = liger_fused: grad_input not made in forward ($gi, backward from $first_bwd)"; fi

# 4. full fine-tuning: the head's weight gradient is Liger's accumulator, the .grad the
#    optimizer reads (one of the weight's bytes, in the gradients category), not a second copy
cat > "$tmp/l3f.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", optimizer = "sgd", steps = 2, checkpointing = true } }
EOS
"$VRSIM" "$tmp/l3f.lua" --json --no-files --set training.loss=liger_fused > "$tmp/ff.json"
g=$(field "[x['category'] for x in d['live_at_peak'] if x['name'] == 'fused_lce.grad_weight']" < "$tmp/ff.json")
gf=$("$VRSIM" "$tmp/l3f.lua" --json --no-files | field "d['breakdown_at_peak']['gradients']")
gl=$(field "d['breakdown_at_peak']['gradients']" < "$tmp/ff.json")
if [ "$g" = "['gradients']" ] && [ "$gf" = "$gl" ]; then
  ok "loss = liger_fused, full fine-tuning: the head's gradient is Liger's accumulator ($gl bytes of gradients, as with the full loss)"
else bad "loss = liger_fused, full fine-tuning: grad_weight at the peak as $g; gradients $gl vs $gf with the full loss"; fi

# 5. torchtune's chunked loss: the head on 8 chunks, each chunk's fp32 upcast and log-probs 1/8
#    of the logits (log_softmax keeps every chunk's for backward), nothing fp32 logits-sized
"$VRSIM" "$tmp/l3.lua" --json --no-files --set training.loss=chunked > "$tmp/chunked.json"
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=chunked --alloc-trace "$tmp/ch.csv" >/dev/null
sizes=$(grep ",alloc," "$tmp/ch.csv" | grep "chunked_ce.chunk[0-9]*.log_softmax$\|chunked_ce.chunk[0-9]*.float$" | cut -d, -f5 | sort | uniq -c | tr -s ' ')
heads=$(grep ",alloc," "$tmp/ch.csv" | grep -c ",lm_head.chunk[1-8]$")
big=$(awk -F, -v l=$LOGITS32 '$3 == "alloc" && $5 >= l/2 && $7 != ""' "$tmp/ch.csv" | wc -l)
if [ "$sizes" = " 32 262668288" ] && [ "$heads" = 16 ] && [ "$big" = 0 ]; then
  ok "loss = chunked: 8 head chunks a step, fp32 copies and log-probs of 1/8 of the logits (262668288 bytes)"
else bad "loss = chunked: chunk allocations '$sizes', $heads head chunks in 2 steps, $big allocations of half the fp32 logits or more"; fi
pc=$(field "d['peak_allocated_bytes']" < "$tmp/chunked.json")
if [ "$pl" -lt "$pc" ] && [ "$pc" -lt "$pf" ]; then
  ok "loss = chunked: peak between Liger's and the full loss's ($pl < $pc < $pf)"
else bad "loss = chunked: peak $pc not between Liger's $pl and the full loss's $pf"; fi

# 5b. under torch.compile the recipes compile compute_cross_entropy
#    (torchtune.training.compile_loss): per chunk it saves the bf16 logits and two fp32 values a row
#    (512 rows: 2048 bytes each), never an fp32 copy or fp32 log-probs; backward reduces into one
#    fp32 value a row, then writes the bf16 gradient (512 x 128256 x 2 = 131334144 bytes)
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=chunked --set training.compile=true --alloc-trace "$tmp/cc.csv" >/dev/null
f32=$(grep ",alloc," "$tmp/cc.csv" | grep -c "chunked_ce.chunk[0-9]*.log_softmax$\|chunked_ce.chunk[0-9]*.float$")
rows=$(grep ",alloc," "$tmp/cc.csv" | grep "chunked_ce.chunk[0-9]*.compiled_cross_entropy$" | cut -d, -f5 | grep -v "^4$" | sort | uniq -c | tr -s ' ')
bwd=$(grep ",alloc," "$tmp/cc.csv" | grep "chunked_ce.chunk[0-9]*.compiled_cross_entropy.backward$" | cut -d, -f5 | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
if [ "$f32" = 0 ] && [ "$rows" = " 32 2048" ] && [ "$bwd" = " 16 131334144  16 2048 " ]; then
  ok "loss = chunked, compiled: two fp32 values a row saved per chunk, bf16 chunk gradients, no fp32 copy or log-probs"
else bad "loss = chunked, compiled: $f32 fp32 chunk copies or log-probs, per-row allocations '$rows', backward '$bwd'"; fi
#    With training.compile.loss = false only the layers are compiled and the chunked loss runs
#    eager, as in 5 (validation/harness/tech_model.py's apply_compile; its measured trace,
#    fulltrace_ttc-compile-oib-act-offload-8bit, allocates per chunk a 262668288-byte fp32 copy
#    and keeps a 262668288-byte log_softmax output); with another loss the key is refused
sed 's/steps = 2,/steps = 2, compile = { loss = false },/' "$tmp/l3.lua" > "$tmp/l3e.lua"
"$VRSIM" "$tmp/l3e.lua" --no-files --set training.loss=chunked --alloc-trace "$tmp/ce.csv" >/dev/null
sizes=$(grep ",alloc," "$tmp/ce.csv" | grep "chunked_ce.chunk[0-9]*.log_softmax$\|chunked_ce.chunk[0-9]*.float$" | cut -d, -f5 | sort | uniq -c | tr -s ' ')
comp=$(grep ",alloc," "$tmp/ce.csv" | grep -c "chunked_ce.chunk[0-9]*.compiled_cross_entropy")
if [ "$sizes" = " 32 262668288" ] && [ "$comp" = 0 ]; then
  ok "loss = chunked, compile.loss = false: the eager loss's fp32 copies and log-probs (262668288 bytes) under compiled layers"
else bad "loss = chunked, compile.loss = false: chunk allocations '$sizes', $comp compiled cross-entropy allocations"; fi
"$VRSIM" "$tmp/l3e.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q 'training.compile.loss with training.loss = "full" is not modelled' "$tmp/err"; then
  ok "compile.loss with the full loss: exit 2, named"
else bad "compile.loss with the full loss: exit $rc: $(cat "$tmp/err")"; fi


# 5c. torchtitan's compiled loss (training.compile_loss, compile.components "loss"): the full
#    cross-entropy one graph over the whole bf16 logits, which saves them and two fp32 values a
#    row (4096 rows: 16384 bytes each) and takes the dataloader's shifted labels (4096 int64:
#    32768 bytes); no fp32 copy or fp32 log-probs in forward, and backward writes the bf16
#    gradient (4096 x 128256 x 2 = 1050673152 bytes): the peak falls by about two fp32 logits
"$VRSIM" "$tmp/l3.lua" --no-files --set training.compile_loss=true --alloc-trace "$tmp/cl.csv" >/dev/null
"$VRSIM" "$tmp/l3.lua" --json --no-files --set training.compile_loss=true > "$tmp/cl.json"
f32=$(grep ",alloc," "$tmp/cl.csv" | grep -c ",logits.float$\|,log_softmax$")
rows=$(grep ",alloc," "$tmp/cl.csv" | grep ",compiled_cross_entropy$" | cut -d, -f5 | grep -v "^4$" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
bwd=$(grep ",alloc," "$tmp/cl.csv" | grep ",compiled_cross_entropy.backward$" | cut -d, -f5 | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
lab=$(grep ",alloc," "$tmp/cl.csv" | grep -c ",labels.pad$\|,labels.shift$")
pcl=$(field "d['peak_allocated_bytes']" < "$tmp/cl.json")
if [ "$f32" = 0 ] && [ "$lab" = 0 ] && [ "$rows" = " 4 16384 " ] && [ "$bwd" = " 2 1050673152  2 16384 " ] \
   && python3 -c "import sys; a,b,l=map(int,sys.argv[1:]); sys.exit(not (1.9*l < a-b < 2.1*l))" "$pf" "$pcl" "$LOGITS32"; then
  ok "compile_loss: two fp32 values a row saved, a bf16 gradient, no fp32 copy or log-probs; the peak falls by $(( (pf - pcl) >> 20 )) MiB"
else bad "compile_loss: $f32 fp32 copies or log-probs, $lab label pads, per-row '$rows', backward '$bwd', peak $pcl (full $pf)"; fi
"$VRSIM" "$tmp/l3.lua" --no-files --set training.compile_loss=true --set training.loss=chunked >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "compile_loss with training.loss = \"chunked\" is not modelled.*compiled with training.compile" "$tmp/err"; then
  ok "compile_loss with the chunked loss: exit 2, named"
else bad "compile_loss with the chunked loss: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" scenarios/sdxl_lora_4090.lua --no-files --set training.compile_loss=true >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "sdxl: training.compile_loss" "$tmp/err"; then ok "compile_loss on SDXL: exit 2, named"
else bad "compile_loss on SDXL: exit $rc: $(cat "$tmp/err")"; fi

# 6. refused where the library refuses or vrsim does not model it
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=liger_fused --set precision=amp_bf16 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "liger_fused.*amp_bf16.*not modelled" "$tmp/err"; then ok "liger_fused under autocast: exit 2, named"
else bad "liger_fused under autocast: exit $rc: $(cat "$tmp/err")"; fi
sed 's/targets = "all-linear"/targets = { "q_proj", "lm_head" }/' "$tmp/l3.lua" > "$tmp/l3h.lua"
"$VRSIM" "$tmp/l3h.lua" --no-files --set training.loss=liger_fused >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "LoRA on lm_head" "$tmp/err"; then ok "liger_fused with LoRA on lm_head: exit 2, named"
else bad "liger_fused with LoRA on lm_head: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" scenarios/sdxl_lora_4090.lua --no-files --set training.loss=chunked >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "sdxl: training.loss" "$tmp/err"; then ok "training.loss on SDXL: exit 2, named"
else bad "training.loss on SDXL: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=chunked --set inference=true >"$tmp/out" 2>&1
if grep -q "training.loss = chunked has no effect" "$tmp/out"; then ok "training.loss under inference: noted as without effect"
else bad "training.loss under inference: not noted"; fi

# 6b. Cut Cross-Entropy (training.loss = "cce"): no logits at all, not even Liger's chunk buffer.
#     Forward adds the LSE (4095 valid rows after the shift, fp32: 16380 bytes), the fp32 logit
#     averages (128256 x 4 = 513024 bytes) and the valid-token index: under 1 MiB above what was
#     allocated before the loss, where Liger's forward holds its grad_input (32 MiB) and its
#     (128, 128256) bf16 buffer
"$VRSIM" "$tmp/l3.lua" --json --no-files --set training.loss=cce > "$tmp/cce.json"
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=cce --alloc-trace "$tmp/cce.csv" >/dev/null
"$VRSIM" "$tmp/l3.lua" --out "$tmp/oc" --no-suggest --set training.loss=cce >/dev/null
"$VRSIM" "$tmp/l3.lua" --out "$tmp/ol" --no-suggest --set training.loss=liger_fused >/dev/null
rise() { python3 -c "
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))
i = [k for k, x in enumerate(r) if x['op'] == sys.argv[2]][0]
j = [k for k, x in enumerate(r) if x['op'] == 'end of forward'][0]
print(max(int(x['allocated_bytes']) for x in r[i:j]) - int(r[i - 1]['allocated_bytes']))" "$@"; }
rc_=$(rise "$tmp/oc/memory.csv" cce.valids.ne); rl=$(rise "$tmp/ol/memory.csv" labels.pad)
lse=$(grep ",alloc," "$tmp/cce.csv" | grep ",cce.lse$" | cut -d, -f5 | sort -u)
avg=$(grep ",alloc," "$tmp/cce.csv" | grep ",cce.logit_avg$" | cut -d, -f5 | sort -u)
big=$(grep ",alloc," "$tmp/cce.csv" | grep ",cce\.\|,LinearCrossEntropyFunction" | awk -F, '$5 > 33554432' | wc -l)
if [ "$lse" = 16380 ] && [ "$avg" = 513024 ] && [ "$big" = 0 ] && [ "$rc_" -lt 1048576 ] && [ "$rl" -ge 67108864 ]; then
  ok "loss = cce: forward adds $rc_ bytes (LSE $lse, logit averages $avg), Liger's $rl; nothing above the hidden states' gradient"
else bad "loss = cce: forward adds $rc_ bytes (Liger's $rl), LSE '$lse', logit_avg '$avg', $big allocations above 32 MiB"; fi
pc=$(field "d['peak_allocated_bytes']" < "$tmp/cce.json")
if python3 -c "import sys; a,b,c,l=map(int,sys.argv[1:]); sys.exit(not (2.5*l < a-b < 3.2*l and b <= c))" "$pf" "$pc" "$pl" "$LOGITS32"; then
  ok "loss = cce: the peak falls by $(( (pf - pc) >> 20 )) MiB from the full loss's, and is no higher than Liger's"
else bad "loss = cce: peak $pc (full $pf, Liger $pl)"; fi

# 6c. Cut Cross-Entropy saves the hidden states (e) for backward, which recomputes the logit
#     blocks: they are freed by its backward node (Liger's are gone in forward), whose GEMM work
#     is the recomputation and grad_e, 2 x 2 N V H with N = 4095, V = 128256, H = 4096, and a
#     third 2 N V H for grad_c where the head trains (full fine-tuning)
freed=$(grep "free_completed,.*,33554432,0,LinearCrossEntropyFunction.backward$" "$tmp/cce.csv" | wc -l)
bflops() { python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
print(int([e for e in ev if e.get('name') == 'LinearCrossEntropyFunction.backward'][0]['args']['flops']))" "$1"; }
"$VRSIM" "$tmp/l3f.lua" --out "$tmp/ocf" --no-suggest --set training.loss=cce >/dev/null
NVH=$((4095 * 128256 * 4096))
f1=$(bflops "$tmp/oc/trace.json"); f2=$(bflops "$tmp/ocf/trace.json")
if [ "$freed" = 2 ] && [ "$f1" = $((4 * NVH)) ] && [ "$f2" = $((6 * NVH)) ]; then
  ok "loss = cce: the hidden states kept until its backward (2 steps), which recomputes: $f1 FLOPs with LoRA, $f2 full"
else bad "loss = cce: hidden states freed by its backward $freed times (want 2), backward FLOPs $f1 / $f2 (want $((4 * NVH)) / $((6 * NVH)))"; fi

# 6d. refused where the library refuses (no Ampere) or vrsim does not model it
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=cce --set precision=amp_bf16 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "cce.*amp_bf16.*not modelled" "$tmp/err"; then ok "cce under autocast: exit 2, named"
else bad "cce under autocast: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" "$tmp/l3h.lua" --no-files --set training.loss=cce >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "cce.*LoRA on lm_head" "$tmp/err"; then ok "cce with LoRA on lm_head: exit 2, named"
else bad "cce with LoRA on lm_head: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" "$tmp/l3.lua" --no-files --set training.loss=cce --set gpu=t4 --set seq=256 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "requires an Ampere GPU or newer" "$tmp/err"; then ok "cce on a T4: exit 2, the library's refusal"
else bad "cce on a T4: exit $rc: $(cat "$tmp/err")"; fi

# 6e. Gemma's head (its final soft-capping) is its own: the fused and chunked losses, built on
#     Llama's, are refused there rather than ignored
for l in cce liger_fused; do
  "$VRSIM" scenarios/gemma3_4b_lora_4090.lua --no-files --set training.loss=$l >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "training.loss = \"$l\" is not modelled for Gemma3ForCausalLM" "$tmp/err"; then ok "$l on Gemma 3: exit 2, named"
  else bad "$l on Gemma 3: exit $rc: $(cat "$tmp/err")"; fi
done

# 7. the optimizer step in backward: full fine-tuning of Llama-3-8B with AdamW. Without it every
#    gradient is alive when the step begins (16,060,522,496 bytes: all of them); with it no more
#    than one parameter's gradient at any op (the 1 GiB head's or embedding's; a decoder layer's
#    largest, an MLP weight, 117,440,512 bytes, while the layers run backward), and the peak falls
#    by more than the gradients' bytes (the foreach step's temporaries go with them)
cat > "$tmp/oib.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", checkpointing = true, steps = 2 } }
EOS
grads() { python3 -c "
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))
layers = [int(x['gradients_bytes']) for x in r if x['phase'] == 'backward' and x['op'].startswith('layers.')]
print(max(int(x['gradients_bytes']) for x in r), max(layers), max(int(x['allocated_bytes']) for x in r))" "$1"; }
"$VRSIM" "$tmp/oib.lua" --out "$tmp/o0" --no-suggest >/dev/null
"$VRSIM" "$tmp/oib.lua" --out "$tmp/o1" --no-suggest --set training.optimizer_in_backward=true >"$tmp/o1.txt"
set -- $(grads "$tmp/o0/memory.csv"); g0=$1; p0=$3
set -- $(grads "$tmp/o1/memory.csv"); g1=$1; l1=$2; p1=$3
if [ "$g0" = 16060522496 ] && [ "$g1" = 1050673152 ] && [ "$l1" = 117440512 ]; then
  ok "optimizer_in_backward: gradients alive at most $g1 bytes (one parameter's; $l1 in a layer's backward), $g0 without"
else bad "optimizer_in_backward: gradients at most $g1 (in layers $l1), $g0 without (want 1050673152, 117440512, 16060522496)"; fi
if python3 -c "import sys; a,b=map(int,sys.argv[1:]); sys.exit(not (a - b > 16060522496))" "$p0" "$p1"; then
  ok "optimizer_in_backward: peak allocated $((p0 >> 20)) -> $((p1 >> 20)) MiB"
else bad "optimizer_in_backward: peak allocated $p0 -> $p1 bytes: not below by the gradients' bytes"; fi
# each parameter's step follows its gradient at once: the head's state is made and its gradient
# dropped before any decoder layer's backward
first_layer=$(grep -n ',"layers\.31\..*",backward$' "$tmp/o1/memory.csv" | head -1 | cut -d: -f1)
head_step=$(grep -n 'adamw.init lm_head.weight' "$tmp/o1/memory.csv" | head -1 | cut -d: -f1)
if [ -n "$head_step" ] && [ -n "$first_layer" ] && [ "$head_step" -lt "$first_layer" ]; then
  ok "optimizer_in_backward: the head steps before layer 31's backward (memory.csv rows $head_step < $first_layer)"
else bad "optimizer_in_backward: the head's step at row '$head_step', layer 31's backward from '$first_layer'"; fi

# 8. refused where torchtune refuses or vrsim does not model it
for s in "grad_accum=2:torchtune refuses" "strategy=ddp:not modelled" "precision=amp_fp16:not modelled"; do
  "$VRSIM" "$tmp/oib.lua" --no-files --set training.optimizer_in_backward=true --set "${s%%:*}" >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "optimizer_in_backward.*${s#*:}" "$tmp/err"; then ok "optimizer_in_backward with ${s%%:*}: exit 2, named"
  else bad "optimizer_in_backward with ${s%%:*}: exit $rc: $(cat "$tmp/err")"; fi
done

# 9. activation offloading with per-layer checkpointing (Llama-3-8B LoRA, 1 x 4096): what reaches
#    the offloading hooks is each layer's input (checkpoint's frame.save_inputs), 4096 x 4096 bf16 =
#    33,554,432 bytes, and the final norm's saves. At the peak (the loss's backward) the forward
#    stash still holds the last 5 packs (the norm's 4 and layer 31's input), and the first layer's
#    input is the model's until it returns: 31 layer inputs fewer on the GPU. The copies run on the
#    copy streams: the step's device-to-host and host-to-device time grow from zero, equal.
cat > "$tmp/off.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 4096, precision = "lora_bf16", checkpointing = true, steps = 2,
               lora = { r = 16, alpha = 32, targets = "all-linear" } } }
EOS
acts='[d["breakdown_at_peak"]["activations"], d["time_ms"]["device_to_host"], d["time_ms"]["host_to_device"], d["step_time_ms"]]'
set -- $("$VRSIM" "$tmp/off.lua" --json --no-files | field "' '.join(map(str, $acts))")
a0=$1; d0=$2; s0=$4
set -- $("$VRSIM" "$tmp/off.lua" --json --no-files --set training.activation_offload=true | field "' '.join(map(str, $acts))")
a1=$1; d1=$2; h1=$3; s1=$4
if [ $((a0 - a1)) = $((31 * 33554432)) ]; then ok "activation_offload: activations at the peak $a0 -> $a1 bytes (31 layer inputs to the host)"
else bad "activation_offload: activations at the peak $a0 -> $a1 bytes (want 31 x 33554432 fewer)"; fi
if python3 -c "import sys; d0,d1,h1=map(float,sys.argv[1:]); sys.exit(not (d0 == 0 and d1 > 10 and d1 == h1))" "$d0" "$d1" "$h1"; then
  ok "activation_offload: device-to-host $d0 -> $d1 ms a step, host-to-device $h1 ms"
else bad "activation_offload: copy time $d0 -> $d1 ms down, $h1 ms up"; fi
# the copies overlap compute where it outlasts them; checkpointing every second layer offloads
# every saved activation of the others, and the forward stalls on the host link
s2=$("$VRSIM" "$tmp/off.lua" --json --no-files --set checkpoint_every=2 | field 'd["step_time_ms"]')
s3=$("$VRSIM" "$tmp/off.lua" --json --no-files --set checkpoint_every=2 --set training.activation_offload=true | field 'd["step_time_ms"]')
if python3 -c "import sys; s0,s1,s2,s3=map(float,sys.argv[1:]); sys.exit(not (s1 >= s0 and s1 < 1.01*s0 and s3 > 1.2*s2))" "$s0" "$s1" "$s2" "$s3"; then
  ok "activation_offload: step $s0 -> $s1 ms with every layer checkpointed, $s2 -> $s3 ms with every second"
else bad "activation_offload: step $s0 -> $s1 ms (every layer), $s2 -> $s3 ms (every second)"; fi
# each layer's input comes back before its recomputation and goes once its first backward node is done
"$VRSIM" "$tmp/off.lua" --no-files --set training.activation_offload=true --alloc-trace "$tmp/off.csv" >/dev/null
order=$(grep -n "unpack layers.29.out from host\|layers.30.input_layernorm.to_fp32 (recompute)" "$tmp/off.csv" | head -2 | cut -d, -f7 | tr '\n' ';')
case "$order" in
  "unpack layers.29.out from host;layers.30.input_layernorm.to_fp32 (recompute);") ok "activation_offload: layer 30's input comes back before its recomputation" ;;
  *) bad "activation_offload: layer 30's input and recomputation in the order '$order'" ;;
esac
"$VRSIM" "$tmp/off.lua" --no-files --set training.activation_offload=true --set checkpointing=false >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "activation_offload without checkpointing: torchtune refuses" "$tmp/err"; then ok "activation_offload without checkpointing: exit 2, named"
else bad "activation_offload without checkpointing: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" scenarios/sdxl_lora_4090.lua --no-files --set training.activation_offload=true >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "sdxl: training.activation_offload" "$tmp/err"; then ok "activation_offload on SDXL: exit 2, named"
else bad "activation_offload on SDXL: exit $rc: $(cat "$tmp/err")"; fi

# 10. Adafactor and Lion on TinyLlama-1.1B (hidden 2048, MLP 5632, 22 layers, 4 key/value heads,
#    vocabulary 32000, untied head; 1,100,048,384 bf16 parameters). Adafactor keeps, per matrix
#    (r, c), an fp32 row and column moment (r + c values), per vector an fp32 moment of its size,
#    and a 0-dim fp32 RMS per parameter (checked against transformers' Adafactor on the CPU);
#    its step holds four fp32 copies of the parameter it is on (grad.float(), p.float(), the update
#    and -update): at most four of the embedding's 32000 x 2048. lion-pytorch keeps exp_avg in the
#    parameters' dtype, bitsandbytes' lion_32bit an fp32 state1.
cp scenarios/configs/tinyllama-1.1b.json "$tmp/"
cat > "$tmp/tl.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "tinyllama-1.1b.json" },
  training = { micro_batch = 1, seq = 2048, precision = "bf16", steps = 2 } }
EOS
want=$(python3 -c "
V, H, I, L, KV = 32000, 2048, 5632, 22, 256
mats = [(V, H), (V, H)] + [(H, H), (KV, H), (KV, H), (H, H), (I, H), (I, H), (H, I)] * L
print(sum(4 * (r + c) for r, c in mats) + 4 * H * (2 * L + 1) + 4 * (len(mats) + 2 * L + 1))")
state() { grep ",alloc," "$1" | grep "$2" | cut -d, -f5 | python3 -c "import sys; print(sum(map(int, sys.stdin)))"; }
"$VRSIM" "$tmp/tl.lua" --no-files --set optimizer=adafactor --alloc-trace "$tmp/af.csv" >/dev/null
"$VRSIM" "$tmp/tl.lua" --out "$tmp/afo" --no-suggest --set optimizer=adafactor >/dev/null
got=$(state "$tmp/af.csv" "adafactor.init")
peak_tmp=$(python3 -c "
import csv, sys
print(max(int(x['temporaries_bytes']) for x in csv.DictReader(open(sys.argv[1])) if x['phase'] == 'optimizer'))" "$tmp/afo/memory.csv")
if [ "$got" = "$want" ] && python3 -c "import sys; t=int(sys.argv[1]); e=32000*2048*4; sys.exit(not (4*e <= t < 4*e + (1 << 20)))" "$peak_tmp"; then
  ok "adafactor: factored state $got bytes (as computed from the shapes), step temporaries $peak_tmp (four fp32 embeddings)"
else bad "adafactor: state $got bytes (want $want), step temporaries $peak_tmp (want four fp32 copies of 32000 x 2048)"; fi
"$VRSIM" "$tmp/tl.lua" --no-files --set optimizer=lion --alloc-trace "$tmp/lion.csv" >/dev/null
"$VRSIM" "$tmp/tl.lua" --no-files --set optimizer=lion_32bit --alloc-trace "$tmp/lion32.csv" >/dev/null
l16=$(state "$tmp/lion.csv" "lion.init"); l32=$(state "$tmp/lion32.csv" "lion.init")
clones=$(grep -c ",alloc,.*lion exp_avg.clone" "$tmp/lion.csv"); t32=$(grep ",alloc," "$tmp/lion32.csv" | grep -c "lion optimizer_update")
if [ "$l16" = $((2 * 1100048384)) ] && [ "$l32" = $((4 * 1100048384)) ] && [ "$clones" -gt 0 ] && [ "$t32" = 0 ]; then
  ok "lion: exp_avg $l16 bytes (bf16), lion_32bit: state1 $l32 bytes (fp32), its fused step allocating nothing"
else bad "lion: state $l16 (want $((2 * 1100048384))), lion_32bit $l32 (want $((4 * 1100048384))), $clones clones, $t32 allocations in the fused step"; fi
"$VRSIM" "$tmp/tl.lua" --no-files --set optimizer=adafactor --set strategy=fsdp2 --set count=2 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "adafactor.*fsdp2 is not modelled" "$tmp/err"; then ok "adafactor under fsdp2: exit 2, named"
else bad "adafactor under fsdp2: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" "$tmp/tl.lua" --no-files --set optimizer=lion --set optimizer_impl=fused >"$tmp/out" 2>&1
if grep -q "optimizer_impl = fused has no effect" "$tmp/out"; then ok "lion with optimizer_impl: noted as without effect"
else bad "lion with optimizer_impl = fused: not noted"; fi

# 6. variable-length data (training.data): the batch the run meets, shaped by its collator.
#    Padded to the longest (DataCollatorWithPadding): the worst batch a shuffle can deal is the
#    longest sequence with the shortest, (4, 2048), and transformers' SDPA mask for a padded
#    batch is a (4, 1, 2048, 2048) boolean (16 MiB) beside the (4, 2048) int64 attention_mask
cat > "$tmp/vl.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "tinyllama-1.1b.json" },
  training = { micro_batch = 4, precision = "bf16", steps = 2, checkpointing = true,
               data = { lengths = { 1000, 300, 700, 2048, 50, 1900, 999, 100 } } } }
EOS
"$VRSIM" "$tmp/vl.lua" --no-files --alloc-trace "$tmp/vl.csv" > "$tmp/vl.out"
mask=$(grep ",alloc," "$tmp/vl.csv" | grep ",padding_mask.and_padding$" | cut -d, -f5 | sort -u)
am=$(grep ",alloc," "$tmp/vl.csv" | grep ",attention_mask$" | cut -d, -f5)
if [ "$mask" = 16777216 ] && [ "$am" = 65536 ] && grep -q "micro-batch 4 x seq 2048" "$tmp/vl.out" \
   && grep -q "simulated: the worst batch a shuffle can deal, 4 x 2048 (2498 tokens of data)" "$tmp/vl.out"; then
  ok "data, padded: the worst batch 4 x 2048 (2048 + 50 + 100 + 300 tokens), its 16 MiB boolean mask and attention_mask"
else bad "data, padded: mask '$mask' (want 16777216), attention_mask '$am' (want 65536): $(grep -o 'simulated:.*' "$tmp/vl.out")"; fi

# 7. data of one length: no row is padded, so no mask (is_causal serves); the run is the
#    fixed-length one plus the collator's attention_mask (4 x 512 int64: 16384 bytes)
printf '512\n512\n512\n512\n512\n' > "$tmp/even.txt"
"$VRSIM" "$tmp/vl.lua" --json --no-files --set "training.data.lengths=$tmp/even.txt" --alloc-trace "$tmp/even.csv" > "$tmp/even.json"
sed 's/data = {.*} } } }/seq = 512 } }/' "$tmp/vl.lua" > "$tmp/fixed.lua"
"$VRSIM" "$tmp/fixed.lua" --json --no-files > "$tmp/fixed.json"
pe=$(field "d['peak_allocated_bytes']" < "$tmp/even.json"); px=$(field "d['peak_allocated_bytes']" < "$tmp/fixed.json")
nm=$(grep -c "padding_mask" "$tmp/even.csv")
if [ "$nm" = 0 ] && [ $((pe - px)) = 16384 ]; then
  ok "data of one length: no mask, the fixed-length run's peak plus the attention_mask ($pe = $px + 16384)"
else bad "data of one length: $nm mask allocations, peak $pe vs the fixed run's $px (want + 16384)"; fi

# 8. padding-free (DataCollatorWithFlattening): the 4 longest in one row, 2048 + 1900 + 1000 +
#    999 = 5947 tokens, with the collator's position_ids (no arange); under checkpointing (no
#    cache) transformers finds the packed sequences and builds a (1, 1, T, T) block-causal
#    boolean; without checkpointing the DynamicCache keeps it from looking: no mask, and a note
"$VRSIM" "$tmp/vl.lua" --no-files --set training.data.batching=padding_free --alloc-trace "$tmp/pf.csv" > "$tmp/pf.out"
pm=$(grep ",alloc," "$tmp/pf.csv" | grep ",packed_mask.and_same_sequence$" | cut -d, -f5 | sort -u)
pos=$(grep ",alloc," "$tmp/pf.csv" | grep ",position_ids$" | cut -d, -f5)
ar=$(grep -c "position_ids.arange" "$tmp/pf.csv")
if [ "$pm" = $((5947 * 5947)) ] && [ "$pos" = $((5947 * 8)) ] && [ "$ar" = 0 ] && grep -q "micro-batch 4 flattened to 1 x seq 5947" "$tmp/pf.out"; then
  ok "data, padding-free: one row of 5947 tokens, its position_ids and a 5947 x 5947 block-causal mask"
else bad "data, padding-free: mask '$pm' (want $((5947 * 5947))), position_ids '$pos', $ar aranges"; fi
"$VRSIM" "$tmp/vl.lua" --no-files --set training.data.batching=padding_free --set checkpointing=false --alloc-trace "$tmp/pfc.csv" > "$tmp/pfc.out"
if [ "$(grep -c packed_mask "$tmp/pfc.csv")" = 0 ] && grep -q "SDPA attends across them" "$tmp/pfc.out"; then
  ok "data, padding-free without checkpointing: the cache keeps transformers from building the mask, noted"
else bad "data, padding-free without checkpointing: mask built or not noted"; fi

# 8b. TRL's packing (batching bfd / bfd_split, trl 1.16 _pack_bfd): the nine lengths below cut to
#    1024 and packed best-fit decreasing: rows [1024], [900, 120], [700, 300], [250, 100, 60, 30]
#    (what TRL's own function returns for them); the worst a shuffle deals with micro-batches of
#    2 rows is the two fullest flattened, 1024 + 1020 = 2044 tokens of 3 sequences; bfd_split
#    keeps the 476 tokens past 1024 as a sequence of their own: 3960 tokens in 4 rows, 96.7 %
#    full. Under flash attention TRL's collator hands the kernel cu_seq_lens (2 x 16 bytes) and
#    seq_idx (int32, 4 x 2044 bytes): no layer makes position_starts
cat > "$tmp/pk.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 2, precision = "bf16", steps = 2, attention = "flash", checkpointing = true,
               data = { lengths = { 900, 700, 300, 250, 120, 100, 60, 1500, 30 }, batching = "bfd", pack_length = 1024 } } }
EOS
"$VRSIM" "$tmp/pk.lua" --no-files --alloc-trace "$tmp/pk.csv" > "$tmp/pk.out" 2>&1
"$VRSIM" "$tmp/pk.lua" --no-files --set training.data.batching=bfd_split > "$tmp/pks.out" 2>&1
cu=$(grep ",alloc," "$tmp/pk.csv" | grep -c ",cu_seq_lens_[qk]$"); si=$(grep ",alloc," "$tmp/pk.csv" | grep ",seq_idx$" | cut -d, -f5)
ps=$(grep -c "position_starts" "$tmp/pk.csv")
if grep -q "into 4 rows of at most 1024 tokens (TRL's packing, 1000 sequences at a time, 476 tokens cut; the rows 85.1 % full)" "$tmp/pk.out" \
   && grep -q "simulated: the worst batch a shuffle can deal, 1 x 2044 (3 sequences)" "$tmp/pk.out" \
   && grep -q "longer ones split, into 4 rows of at most 1024 tokens (TRL's packing, 1000 sequences at a time; the rows 96.7 % full)" "$tmp/pks.out" \
   && [ "$cu" = 2 ] && [ "$si" = $((4 * 2044)) ] && [ "$ps" = 0 ]; then
  ok "data, TRL's bfd packing: 4 rows (85.1 % full, 476 tokens cut), the worst batch 2044 tokens; bfd_split 96.7 % full; TRL's collator's flash arguments"
else bad "data, TRL's bfd packing: $(grep -o 'training.data: [^;]*;[^;]*;[^;]*' "$tmp/pk.out"), cu_seq_lens $cu, seq_idx '$si', position_starts $ps"; fi
# the same packing over 2500 lengths (Python's random.seed(1), randint(1, 3000)) into rows of 2048:
# TRL's _pack_bfd (trl 1.16, run on pyarrow over the same lengths, 1000 at a time, 2026-12-07)
# makes 1687 rows holding 3407398 of the 3792754 tokens
python3 -c "import random; random.seed(1); print('\n'.join(str(random.randint(1, 3000)) for _ in range(2500)))" > "$tmp/rl.txt"
sed -e 's/lengths = { 900, 700, 300, 250, 120, 100, 60, 1500, 30 }/lengths = "rl.txt"/' -e 's/pack_length = 1024/pack_length = 2048/' \
  "$tmp/pk.lua" > "$tmp/pk2.lua"
"$VRSIM" "$tmp/pk2.lua" --no-files > "$tmp/pk2.out" 2>&1
if grep -q "2500 sequences (3792754 tokens) packed best-fit decreasing, each cut to the row length, into 1687 rows of at most 2048 tokens (TRL's packing, 1000 sequences at a time, 385356 tokens cut" "$tmp/pk2.out"; then
  ok "data, TRL's bfd packing of 2500 lengths: TRL's 1687 rows and 3407398 tokens"
else bad "data, TRL's bfd packing of 2500 lengths: $(grep -o 'training.data: [^;]*;' "$tmp/pk2.out")"; fi
for to in "" ", pack_length = 0"; do
  sed "s/, pack_length = 1024/$to/" "$tmp/pk.lua" > "$tmp/pkb.lua"
  "$VRSIM" "$tmp/pkb.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "training.data.pack_length = .*: batching bfd packs rows of pack_length tokens" "$tmp/err"; then
    ok "data, bfd with${to:- no pack_length}: exit 2, named"
  else bad "data, bfd with${to:- no pack_length}: exit $rc: $(cat "$tmp/err")"; fi
done
# 8c. axolotl's sample packing (batching multipack, axolotl 0.18 samplers/multipack.py): the
#    2500 lengths above, those over max_length 2048 dropped, packed first-fit in the given order
#    into bins of 4096 tokens: axolotl's own pack_group (run without numba over the same lengths,
#    2026-12-07) makes 416 bins of 1656 sequences, 98.5 % full, and with bin_size 3 and
#    group_size 500, 553 bins. The largest bin holds 4056 tokens in 2 sequences, its row padded to
#    4096 with the padding one more sequence: each layer's position_starts has 3 entries
cat > "$tmp/mp.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 1, precision = "bf16", steps = 2, attention = "flash", checkpointing = true,
               data = { lengths = "rl.txt", batching = "multipack", pack_length = 4096, max_length = 2048,
                        pad_to_multiple_of = 2048, order = "given" } } }
EOS
"$VRSIM" "$tmp/mp.lua" --no-files --no-suggest --alloc-trace "$tmp/mp.csv" > "$tmp/mp.out" 2>&1
"$VRSIM" "$tmp/mp.lua" --no-files --no-suggest --set training.data.bin_sequences=3 --set training.data.group_size=500 > "$tmp/mp3.out" 2>&1
ps=$(grep ",alloc," "$tmp/mp.csv" | grep "position_starts$" | cut -d, -f5 | sort -u)
if grep -q "1656 sequences (844 longer than 2048 dropped) packed first-fit in the given order into 416 bins of at most 4096 tokens and 200 sequences (axolotl's sample packing, 100000 sequences at a time; the bins 98.5 % full)" "$tmp/mp.out" \
   && grep -q "simulated: the epoch's largest bin, 1 x 4096 (2 sequences, the padding one more)" "$tmp/mp.out" \
   && grep -q "into 553 bins of at most 4096 tokens and 3 sequences" "$tmp/mp3.out" && [ "$ps" = 24 ]; then
  ok "data, axolotl's multipack: axolotl's 416 bins (98.5 % full; 553 with 3 a bin in groups of 500), the largest 1 x 4096 with its padding a sequence"
else bad "data, axolotl's multipack: $(grep -o 'training.data: [^;]*;[^;]*' "$tmp/mp.out"); position_starts '$ps'"; fi
# 8c'. axolotl's packing under sdpa (real_batches, multipack_real_batches): the same lengths in bins
#    of sequence_len 2048, dealt 4 bins a batch, each bin a row padded to 2048; axolotl's
#    sdpa_varlen runs varlen_attn over every sequence and padding of the 4 rows (n of them): each
#    layer's nonzero makes n starts (8n bytes), and the flash varlen backward's softmax_d and dq
#    accumulator are 32 heads x (4 x 2048 + 128 n) fp32 and that x 128 (FlashAttention 2's
#    mha_varlen_bwd); the epoch's batches are the 4-bin groups of the bins made in order
sed -e 's/micro_batch = 1/micro_batch = 4/' -e 's/attention = "flash"/attention = "sdpa"/' \
    -e 's/pack_length = 4096, max_length = 2048,/pack_length = 2048, max_length = 2048, real_batches = true,/' \
    "$tmp/mp.lua" > "$tmp/mpr.lua"
"$VRSIM" "$tmp/mpr.lua" --no-files --no-suggest --alloc-trace "$tmp/mpr.csv" > "$tmp/mpr.out" 2>&1
n=$(sed -n 's/.*micro-batch 4 packed bins (\([0-9]*\) sequences and paddings.*/\1/p' "$tmp/mpr.out")
ps=$(grep ",alloc," "$tmp/mpr.csv" | grep "sdpa_varlen.position_starts$" | cut -d, -f5 | sort -u)
ws=$(grep ",alloc," "$tmp/mpr.csv" | grep "sdpa_varlen.backward$" | cut -d, -f5 | sort -un | tr '\n' ' ')
if [ -n "$n" ] && [ "$ps" = $((8 * n)) ] \
   && echo " $ws" | grep -q " $((32 * (8192 + 128 * n) * 4)) " && echo " $ws" | grep -q " $((32 * (8192 + 128 * n) * 4 * 128)) " \
   && grep -q "4 a micro-batch (multipack_real_batches), each a row padded to a multiple of 2048" "$tmp/mpr.out"; then
  ok "data, multipack real_batches under sdpa: 4 rows of 2048, $n sequences and paddings to varlen_attn, its backward's buffers sized by them"
else bad "data, multipack real_batches: n '$n' starts '$ps' workspaces '$ws' $(grep -o 'training.data: [^;]*;[^;]*' "$tmp/mpr.out" | head -c 600)"; fi
# sdpa_varlen's int() of _is_packed's count is a host sync: the device idles from that count's end
# until the host has issued the next kernel (the keys' repeat), in every layer of the last step
"$VRSIM" "$tmp/mpr.lua" --no-suggest --out "$tmp/mpr_out" > /dev/null 2>&1
gap=$(python3 - "$tmp/mpr_out/trace.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); ev = d["traceEvents"] if isinstance(d, dict) else d
x = [e for e in ev if e.get("ph") == "X" and e.get("args", {}).get("step") == 1]
ends = {e["name"]: e["ts"] + e["dur"] for e in x if e["name"].endswith("sdpa_varlen.is_packed_sum")}
starts = {e["name"]: e["ts"] for e in x if e["name"].endswith("sdpa_varlen.repeat_k")}
gaps = [starts[n.replace("is_packed_sum", "repeat_k")] - t for n, t in ends.items() if n.replace("is_packed_sum", "repeat_k") in starts]
print(len(gaps), "%.1f" % min(gaps) if gaps else "-")
PY
)
if [ "${gap%% *}" = 2 ] && python3 -c "import sys; sys.exit(0 if float('${gap#* }') > 5 else 1)"; then
  ok "data, multipack real_batches under sdpa: after _is_packed's read the device waits for the host (>= ${gap#* } us, both layers)"
else bad "data, multipack real_batches: the gap after _is_packed's read: '$gap'"; fi
# under eager axolotl patches nothing: transformers' (4, 1, 2048, 2048) block-causal mask from the
# position_ids of the 4 rows, additive in bf16 (32 MiB)
"$VRSIM" "$tmp/mpr.lua" --no-files --no-suggest --set training.attention=eager --alloc-trace "$tmp/mpe.csv" > "$tmp/mpe.out" 2>&1
add=$(grep ",alloc," "$tmp/mpe.csv" | grep ",packed_mask.eager_additive$" | cut -d, -f5 | sort -u)
if [ "$add" = 33554432 ] && ! grep -q "sdpa_varlen" "$tmp/mpe.csv"; then
  ok "data, multipack real_batches under eager: the 4 rows' block-causal additive mask (32 MiB), no varlen_attn"
else bad "data, multipack real_batches under eager: additive '$add': $(tail -3 "$tmp/mpe.out")"; fi
for bad_set in "training.attention=mem_efficient:under mem_efficient attention is not modelled" \
               "training.precision=amp_bf16:in amp_bf16 is not modelled: varlen_attn takes fp16 and bf16" \
               "training.attention=flash:real_batches under flash attention"; do
  "$VRSIM" "$tmp/mpr.lua" --no-files --no-suggest --set "${bad_set%%:*}" >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "${bad_set#*:}" "$tmp/err"; then ok "data, real_batches with ${bad_set%%:*}: exit 2, named"
  else bad "data, real_batches with ${bad_set%%:*}: exit $rc: $(cat "$tmp/err")"; fi
done
"$VRSIM" "$tmp/mp.lua" --no-files --no-suggest --set training.data.too_long=truncate > "$tmp/mpt.out" 2>&1
sed 's/lengths = "rl.txt", //' "$tmp/mp.lua" > "$tmp/mpn.lua"
"$VRSIM" "$tmp/mpn.lua" --no-files --no-suggest > "$tmp/mpn.out" 2>&1
if grep -q "2500 sequences (844 cut to 2048) packed first-fit" "$tmp/mpt.out" \
   && grep -q "no lengths given (the data set's token counts: --set training.data.lengths=FILE); simulated the fullest bin axolotl's sample packing can make: 2 sequences of at most 2048 tokens in 4096" "$tmp/mpn.out"; then
  ok "data, multipack: too_long truncate cuts the 844; without lengths the fullest bin, named"
else bad "data, multipack truncate / no lengths: $(grep -o 'training.data: [^;]*' "$tmp/mpt.out" "$tmp/mpn.out")"; fi
for bad_set in "training.data.too_long=raise:more than max_length 2048 (too_long = raise" \
               "training.attention=sdpa:under sdpa: axolotl deals micro_batch_size bins of sequence_len a batch there" \
               "training.micro_batch=2:deals one bin a micro-batch" \
               "training.data.max_length=8192:is longer than a bin" \
               "training.data.collator=trl:axolotl's collator hands the model position_ids"; do
  "$VRSIM" "$tmp/mp.lua" --no-files --set "${bad_set%%:*}" >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -qF "${bad_set#*:}" "$tmp/err"; then ok "data, multipack with ${bad_set%%:*}: exit 2, named"
  else bad "data, multipack with ${bad_set%%:*}: exit $rc: $(cat "$tmp/err")"; fi
done
sed 's/batching = "multipack", pack_length = 4096, max_length = 2048,/batching = "pad", max_length = 2048,/' "$tmp/mp.lua" > "$tmp/mpp.lua"
"$VRSIM" "$tmp/mpp.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "training.data.max_length is axolotl's sample packing's: batching pad does not use it" "$tmp/err"; then
  ok "data, max_length with batching pad: exit 2, named"
else bad "data, max_length with batching pad: exit $rc: $(cat "$tmp/err")"; fi
# the collator of a flattened batch: DataCollatorWithFlattening's layers derive cu_seqlens from
# position_ids (position_starts, cu_seqlens, max_seqlen a layer), TRL's hands them to the kernel
sed 's/batching = "bfd", pack_length = 1024/batching = "padding_free"/' "$tmp/pk.lua" > "$tmp/pf2.lua"
for c in transformers trl; do
  "$VRSIM" "$tmp/pf2.lua" --no-files --set training.data.collator=$c --alloc-trace "$tmp/pc_$c.csv" >/dev/null 2>&1
done
n_tf=$(grep ",alloc," "$tmp/pc_transformers.csv" | grep -c "position_starts$"); n_trl=$(grep ",alloc," "$tmp/pc_trl.csv" | grep -c "position_starts$")
c_tf=$(grep -c ",cu_seq_lens_q$" "$tmp/pc_transformers.csv"); c_trl=$(grep ",alloc," "$tmp/pc_trl.csv" | grep -c ",cu_seq_lens_q$")
if [ "$n_tf" = 4 ] && [ "$n_trl" = 0 ] && [ "$c_tf" = 0 ] && [ "$c_trl" = 1 ]; then
  ok "data, padding_free's collator: transformers' derives cu_seqlens in each of 2 layers x 2 steps, TRL's hands them over once"
else bad "data, padding_free's collator: position_starts $n_tf / $n_trl, cu_seq_lens $c_tf / $c_trl"; fi
for set_ in "pf2:training.data.batching=pad --set training.data.collator=trl:collator is a flattened batch's" \
            "pk:training.data.collator=transformers:collator = transformers with batching bfd"; do
  f=${set_%%:*}; rest=${set_#*:}; args=${rest%%:*}; want=${rest#*:}
  "$VRSIM" "$tmp/$f.lua" --no-files --set $args >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "$want" "$tmp/err"; then ok "data, $want: exit 2"
  else bad "data, --set $args: exit $rc: $(cat "$tmp/err")"; fi
done
sed 's/batching = "bfd", pack_length = 1024/batching = "pad", pack_length = 1024/' "$tmp/pk.lua" > "$tmp/pkb.lua"
"$VRSIM" "$tmp/pkb.lua" --no-files >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "pack_length is the packed rows' length: batching pad packs nothing" "$tmp/err"; then ok "data, pack_length beside batching pad: exit 2"
else bad "data, pack_length beside pad: exit $rc: $(cat "$tmp/err")"; fi

# 8d. torchtune's packed data sets (batching torchtune, torchtune 0.6.1 PackedDataset): the 2500
#    lengths above truncated by the tokenizer to 2048 (2047 for text completion's split packs)
#    and packed in order into packs of 2048: torchtune's own PackedDataset, run on the CPU over
#    the same lengths (2026-12-07), makes 2078 packs holding 3407398 tokens, and with
#    split_across_pack 1664 packs holding 3406553
cat > "$tmp/tt.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json", layers = 2, repeat_kv = true },
  training = { micro_batch = 2, precision = "bf16", steps = 2, attention = "flex",
               data = { lengths = "rl.txt", batching = "torchtune", pack_length = 2048 } } }
EOS
"$VRSIM" "$tmp/tt.lua" --json --no-files > "$tmp/tt.json" 2>&1
"$VRSIM" "$tmp/tt.lua" --no-files --set training.data.split_across_pack=true > "$tmp/tts.out" 2>&1
if grep -q "2500 sequences (3407398 tokens, 844 sequences truncated to 2048 by the tokenizer) packed in order into 2078 packs of 2048 tokens" "$tmp/tt.json" \
   && grep -q "2500 sequences (3406553 tokens, 845 sequences truncated to 2047 by the tokenizer) packed in order into 1664 packs of 2048 tokens (torchtune's PackedDataset, split_across_pack" "$tmp/tts.out"; then
  ok "data, torchtune's packing of 2500 lengths: torchtune's 2078 packs (3407398 tokens), split 1664 (3406553)"
else bad "data, torchtune's packing: $(grep -o 'training.data: [^;]*;' "$tmp/tt.json" "$tmp/tts.out")"; fi
# every pack is (b, 2048) whatever its documents: the same peak as one document a pack (no
# lengths); the median batch's documents leave less attention work than one document a pack
# (the worst can take more: a document boundary inside a block makes its blocks partial, each
# the work of two full ones); the tokens a step are the data's, not the padding's
sed 's/lengths = "rl.txt", //' "$tmp/tt.lua" > "$tmp/tt1.lua"
"$VRSIM" "$tmp/tt1.lua" --json --no-files > "$tmp/tt1.json" 2>&1
pk=$(field "d['peak_allocated_bytes']" < "$tmp/tt.json"); pk1=$(field "d['peak_allocated_bytes']" < "$tmp/tt1.json")
st=$("$VRSIM" "$tmp/tt.lua" --json --no-files --set training.data.batch=p50 2>&1 | field "d['step_time_ms']")
st1=$(field "d['step_time_ms']" < "$tmp/tt1.json")
tok=$(field "round(d['tokens_per_s'] * d['step_time_ms'] / 1000)" < "$tmp/tt.json")
blocks=$(grep -o "FlexAttention's blocks: [0-9]* partial, [0-9]* full" "$tmp/tt.json" | head -1)
if [ -n "$pk" ] && [ "$pk" = "$pk1" ] && python3 -c "import sys; sys.exit(not float('$st') < float('$st1'))" \
   && [ "$tok" -lt 4096 ] && grep -q "one 2048-token document each" "$tmp/tt1.json" && [ -n "$blocks" ]; then
  ok "data, torchtune packs: the same peak with and without lengths ($pk B), p50 $st < $st1 ms, the worst batch's $blocks, $tok tokens a step"
else bad "data, torchtune packs: peak $pk / $pk1, step $st / $st1, tokens $tok, blocks '$blocks'"; fi
# what torchtune's packing is not modelled with, each named (exit 2)
for set_ in "attention=sdpa:batching = torchtune is torchtune's packed data set, whose collator makes a BlockMask" \
            "training.data.collator=trl:collator with batching torchtune" \
            "training.data.pack_length=nil:pack_length = nil: batching torchtune packs rows of pack_length" \
            "training.data.batching=pad:split_across_pack is torchtune's packing's" \
            "training.data.batch=p50:batch = p50 needs the data set's lengths"; do
  args=${set_%%:*}; want=${set_#*:}
  extra="" f=tt; case $args in training.data.batching=pad) extra="--set training.data.split_across_pack=true";;
                         training.data.batch=p50) f=tt1;; esac
  "$VRSIM" "$tmp/$f.lua" --no-files --set $args $extra >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q -- "$want" "$tmp/err"; then ok "data, torchtune: $want: exit 2"
  else bad "data, torchtune --set $args $extra: exit $rc: $(head -c 300 "$tmp/err")"; fi
done
# torch.compile with torchtune's packing: FlexAttention under torch.compiler.disable breaks each
# compiled layer into two graphs (validation/oracle/check_torchtune_flex_compile.py), the
# attention eager between them: its saved q, k and v are the first graph's outputs, not its
# partition's, and its output is the second graph's input, which that graph saves; checkpointed, the eager checkpoint around both keeps the layer's input alone, the
# live bytes at the end of forward those of eager checkpointing; not checkpointed, the two
# graphs save less than the eager layer
live_end_fwd() { # scenario, then vrsim arguments: allocated bytes at the end of step 2's forward
  _f=$1; shift
  "$VRSIM" "$_f" --out "$tmp/lef" "$@" >/dev/null 2>&1
  python3 -c "
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bw = [i for i, r in enumerate(rows) if r['phase'] == 'backward']
f2 = [i for i, r in enumerate(rows) if r['phase'] == 'forward' and i > bw[0]]
print(rows[max(i for i in f2 if i < min(j for j in bw if j > f2[0]))]['allocated_bytes'])
" "$tmp/lef/memory.csv" 2>/dev/null || echo none
}
"$VRSIM" "$tmp/tt1.lua" --json --no-files --set training.compile=true > "$tmp/ttc.json" 2>&1
ec=$(live_end_fwd "$tmp/tt1.lua" --set checkpointing=true)
cc=$(live_end_fwd "$tmp/tt1.lua" --set checkpointing=true --set training.compile=true --set checkpoint_impl=wrapper)
e0=$(live_end_fwd "$tmp/tt1.lua"); c0=$(live_end_fwd "$tmp/tt1.lua" --set training.compile=true)
if grep -q "each decoder layer is two graphs (its FlexAttention call, under torch.compiler.disable, a graph break)" "$tmp/ttc.json" \
   && ! grep -q "q_rotary.embed \[\|k_rep \[\|v_rep \[" "$tmp/ttc.json" && grep -q "flex_attention.out \[" "$tmp/ttc.json" \
   && [ "$ec" != none ] && [ "$ec" = "$cc" ] && [ "$c0" != none ] && [ "$c0" -lt "$e0" ]; then
  ok "data, torchtune packing compiled: two graphs a layer; checkpointed, the end of forward as eager checkpointing's ($cc B); not, $c0 < $e0 B"
else bad "data, torchtune packing compiled: end of forward $ec / $cc (checkpointed), $e0 / $c0: $(grep -o 'torch.compile[^"]*' "$tmp/ttc.json" | head -c 400)"; fi
printf '2000\n2000\n' > "$tmp/two_packs.txt"
"$VRSIM" "$tmp/tt.lua" --no-files --set training.data.lengths="$tmp/two_packs.txt" --set micro_batch=4 >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "make 2 packs of 2048 tokens, fewer than a micro-batch of 4 (torchtune's DataLoader drops the last short batch" "$tmp/err"; then
  ok "data, torchtune: fewer packs than a micro-batch: exit 2 (drop_last)"
else bad "data, torchtune, fewer packs than a micro-batch: exit $rc: $(cat "$tmp/err")"; fi

# 8f. FlexAttention's own buffers (the H100 traces fulltrace_gen16-flex-*): forward, the fp32
#    (b, h, s) row maximum the kernel writes beside the log-sum-exp, freed as the call returns;
#    backward, a copy of the incoming gradient (the original dropped once copied), then the
#    zero gradient of the log-sum-exp and the row term delta, (b, h, s) fp32 each, before dq,
#    dk, dv. 1 x 1024 tokens, 32 heads of 128: the output 8 MiB, a row 128 KiB
cat > "$tmp/flexbuf.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json", layers = 1 },
  training = { micro_batch = 1, seq = 1024, precision = "bf16", steps = 2, attention = "flex" } }
EOS
"$VRSIM" "$tmp/flexbuf.lua" --no-files --alloc-trace "$tmp/flexbuf.csv" >/dev/null 2>&1
seq_=$(awk -F, 'NR > 1 && $7 ~ /flex_attention/ && $7 !~ /lse_to|returns/ && ($3 == "alloc" || $3 == "free_requested") && $5 + 0 >= 131072 {
         printf "%s%d ", ($3 == "alloc" ? "+" : "-"), $5 / 1024 }' "$tmp/flexbuf.csv")
fwd="+128 +8192 +128 -128 "
bwd="+8192 -8192 +128 +128 +8192 +2048 +2048 -128 -128 "
case "$seq_" in
  "$fwd"*"$bwd"*) ok "flex: the row maximum beside the output; in backward the gradient's copy, then two fp32 rows before dq, dk, dv";;
  *) bad "flex buffers: '$seq_'";;
esac
# 8e. flex attention over a padded or flattened batch (transformers' flex_attention_mask): the
#    BlockMask's partial and full 128 x 128 blocks, counted from the lengths, are torch's own
#    create_block_mask's over the same masks (python3 validation/oracle/check_flex_blocks.py,
#    PyTorch 2.13 on the CPU, 2026-12-07), rows of lengths not a multiple of 128 included
for spec in "pad:1000, 2000:54:182" "pad:300, 700:19:17" "pad:129, 1024, 1:24:35" \
            "padding_free:1000, 2000:62:126" "padding_free:300, 700, 1000, 2000:89:133" \
            "padding_free:3156, 3054, 708, 1274:155:575"; do
  b=${spec%%:*}; rest=${spec#*:}; lens=${rest%%:*}; rest=${rest#*:}; p=${rest%%:*}; f=${rest#*:}
  n=$(echo "$lens" | tr ',' '\n' | wc -l)
  cat > "$tmp/fb.lua" <<EOS
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 1 },
         training = { micro_batch = $n, steps = 1, precision = "bf16", attention = "flex", checkpointing = true,
                      data = { lengths = { $lens }, order = "given", batching = "$b" } } }
EOS
  got=$("$VRSIM" "$tmp/fb.lua" --no-files 2>&1 | grep -o "BlockMask keeps [0-9]* partial and [0-9]* full" | head -1)
  if [ "$got" = "BlockMask keeps $p partial and $f full" ]; then ok "data, flex over $b { $lens }: create_block_mask's $p partial, $f full blocks"
  else bad "data, flex over $b { $lens }: '$got', want $p partial, $f full"; fi
done
# axolotl's sample packing under flex (its ATTN_IMPLS_SUPPORTING_PACKING): the bin of 1000 and
# 2000 tokens padded to 3008, the padding one more sequence (check_flex_blocks.py: packed
# [1000, 2000, 8], 62 partial and 126 full)
cat > "$tmp/fm.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 1 },
         training = { micro_batch = 1, steps = 1, precision = "bf16", attention = "flex", checkpointing = true,
                      data = { lengths = { 1000, 2000 }, order = "given", batching = "multipack", pack_length = 4096,
                               max_length = 2048, pad_to_multiple_of = 64 } } }
EOS
got=$("$VRSIM" "$tmp/fm.lua" --no-files 2>&1 | grep -o "1 x 3008\|BlockMask keeps [0-9]* partial and [0-9]* full" | tr '\n' ' ')
if [ "$got" = "1 x 3008 BlockMask keeps 62 partial and 126 full " ]; then ok "data, axolotl's multipack under flex: one row of 3008, 62 partial and 126 full blocks"
else bad "data, axolotl's multipack under flex: '$got'"; fi
# torchtitan's text stream under a flex flavor (batching torchtitan): the documents (BOS and EOS
# counted) cut into rows of pack_length + 1, the documents in a row told apart by its EOS tokens
# as get_document_mask_mod numbers them; the blocks are create_block_mask's over the same rows
# (check_flex_blocks.py, torchtitan's cases)
for spec in "700, 900, 500, 300, 650:1024:2:2:33:17" "5000:2048:2:2:62:210" \
            "100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 1900:1024:4:4:60:21"; do
  lens=${spec%%:*}; rest=${spec#*:}; L=${rest%%:*}; rest=${rest#*:}; mb=${rest%%:*}; rest=${rest#*:}
  rows=${rest%%:*}; rest=${rest#*:}; p=${rest%%:*}; f=${rest#*:}
  cat > "$tmp/ftt.lua" <<EOS
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 1 },
         training = { micro_batch = $mb, steps = 1, precision = "bf16", attention = "flex",
                      data = { batching = "torchtitan", pack_length = $L, lengths = { $lens } } } }
EOS
  got=$("$VRSIM" "$tmp/ftt.lua" --no-files 2>&1 | grep -o "streamed into [0-9]* rows\|FlexAttention's blocks: [0-9]* partial, [0-9]* full" | tr '\n' ' ')
  if [ "$got" = "streamed into $rows rows FlexAttention's blocks: $p partial, $f full " ]; then
    ok "data, torchtitan's stream { ${lens%%,*}, ... } in rows of $L: $rows rows, create_block_mask's $p partial, $f full blocks"
  else bad "data, torchtitan's stream in rows of $L: '$got', want $rows rows, $p partial, $f full"; fi
done
# its BlockMask is compiled (no dense mask): the document numbers (b, L) int64 live with it
"$VRSIM" "$tmp/ftt.lua" --no-files --alloc-trace "$tmp/ftt.csv" >/dev/null 2>&1
dn=$(grep ",alloc," "$tmp/ftt.csv" | grep -c ",block_mask.document_ids$"); dm=$(grep ",alloc," "$tmp/ftt.csv" | grep -c ",block_mask.padded_int64$")
if [ "$dn" = 1 ] && [ "$dm" = 0 ]; then ok "data, torchtitan's BlockMask: compiled, the document numbers alone beside it"
else bad "data, torchtitan's BlockMask: document_ids $dn, dense $dm"; fi
for set_ in "training.data.order=shuffle:torchtitan's text data sets stream the documents in order" \
            "attention=sdpa:batching = torchtitan is torchtitan's text stream under a flex flavor" \
            "training.data.collator=trl:collator with batching torchtitan"; do
  args=${set_%%:*}; want=${set_#*:}
  "$VRSIM" "$tmp/ftt.lua" --no-files --set $args >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q -- "$want" "$tmp/err"; then ok "data, torchtitan: $want: exit 2"
  else bad "data, torchtitan --set $args: exit $rc: $(head -c 300 "$tmp/err")"; fi
done
# the padded batch's boolean padding mask is made each step (the mask function holds it with the
# BlockMask; no dense mask: create_block_mask compiled), and its attention takes less time than
# the same shape unpadded
cat > "$tmp/fp.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 1 },
         training = { micro_batch = 2, steps = 2, precision = "bf16", attention = "flex", checkpointing = true,
                      data = { lengths = { 1000, 4096 }, order = "given" } } }
EOS
"$VRSIM" "$tmp/fp.lua" --out "$tmp/fp" --alloc-trace "$tmp/fp.csv" >/dev/null 2>&1
sed 's/lengths = { 1000, 4096 }/lengths = { 4096, 4096 }/' "$tmp/fp.lua" > "$tmp/fp2.lua"
"$VRSIM" "$tmp/fp2.lua" --out "$tmp/fp2" >/dev/null 2>&1
fl() { python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
print([e['dur'] for e in ev if e.get('args', {}).get('step') == 1 and e.get('name') == 'layers.0.self_attn.flex_attention'][0])
" "$1" 2>/dev/null || echo 0; }
tp=$(fl "$tmp/fp/trace.json"); tf=$(fl "$tmp/fp2/trace.json")
hb=$(grep ",alloc," "$tmp/fp.csv" | grep -c ",padding_mask.to_bool$")
if [ "$hb" = 2 ] && python3 -c "import sys; sys.exit(not 0 < float('$tp') < float('$tf'))"; then
  ok "data, flex over a padded batch: the padding mask made each step, the attention $tp < $tf us unpadded"
else bad "data, flex over a padded batch: padding mask allocs $hb, attention $tp / $tf us"; fi

# 9. which batch: in the order given, batches of 2 of 100..400 tokens: p50 is the second
#    (2 x 200), worst the last (2 x 400); tokens/s counts the data's tokens, not the padding
cat > "$tmp/q.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "tinyllama-1.1b.json" },
  training = { micro_batch = 2, precision = "bf16", steps = 2,
               data = { lengths = { 100, 100, 200, 200, 300, 300, 400, 400 }, order = "given" } } }
EOS
s50=$("$VRSIM" "$tmp/q.lua" --no-files --set training.data.batch=p50 | grep -o "micro-batch [0-9]* x seq [0-9]*")
sw=$("$VRSIM" "$tmp/q.lua" --no-files | grep -o "micro-batch [0-9]* x seq [0-9]*")
printf '100\n300\n' > "$tmp/two.txt"
t_pad=$("$VRSIM" "$tmp/q.lua" --json --no-files --set "training.data.lengths=$tmp/two.txt" | field "round(d['tokens_per_s'] * d['step_time_ms'] / 1000)")
if [ "$s50" = "micro-batch 2 x seq 200" ] && [ "$sw" = "micro-batch 2 x seq 400" ] && [ "$t_pad" = 400 ]; then
  ok "data, batch = p50 / worst: 2 x 200 / 2 x 400; a (100, 300) batch counts 400 tokens a step, not 600"
else bad "data: p50 '$s50', worst '$sw', tokens a step $t_pad (want 400)"; fi

if "$VRSIM" "$tmp/q.lua" --no-files --set grad_accum=2 | grep -q "each of the 2 accumulated micro-batches is simulated at this shape"; then
  ok "data with grad_accum = 2: the note says both micro-batches take the chosen shape"
else bad "data with grad_accum = 2: not noted"; fi

# 10. a file of lengths, one a line or JSONL with a length field, is the list; a bad line is
#     exit 2 naming the file and line (a file beside the scenario, or a path typed on the
#     command line)
printf '1000\n300\n700\n2048\n\n50\n1900\n999\n100\n' > "$tmp/l.txt"
i=0; for l in 1000 300 700 2048 50 1900 999 100; do i=$((i + 1)); echo "{\"id\": $i, \"length\": $l, \"text\": \"...\"}"; done > "$tmp/l.jsonl"
p0=$("$VRSIM" "$tmp/vl.lua" --json --no-files | field "d['peak_allocated_bytes']")
p1=$("$VRSIM" "$tmp/vl.lua" --json --no-files --set training.data.lengths=l.txt | field "d['peak_allocated_bytes']")
p2=$("$VRSIM" "$tmp/vl.lua" --json --no-files --set "training.data.lengths=$tmp/l.jsonl" | field "d['peak_allocated_bytes']")
printf '100\n12x\n' > "$tmp/bad.txt"
"$VRSIM" "$tmp/vl.lua" --no-files --set "training.data.lengths=$tmp/bad.txt" >/dev/null 2>"$tmp/err"; rc=$?
if [ "$p0" = "$p1" ] && [ "$p0" = "$p2" ] && [ $rc = 2 ] && grep -q "bad.txt:2: '12x' is not a sequence length" "$tmp/err"; then
  ok "data: a file of lengths and a JSONL with a length field are the list; a bad line is exit 2 at file:line"
else bad "data files: peaks $p0 $p1 $p2; bad line: exit $rc: $(cat "$tmp/err")"; fi

# 10b. eager attention on the padded batch: eager_mask turns the (4, 1, 2048, 2048) boolean mask
#     (16 MiB, no fast_all checks) into the additive one in bf16 (32 MiB), the boolean dropped
"$VRSIM" "$tmp/vl.lua" --no-files --set attention=eager --alloc-trace "$tmp/vle.csv" > "$tmp/vle.out" 2>&1
add=$(grep ",alloc," "$tmp/vle.csv" | grep ",padding_mask.eager_additive$" | cut -d, -f5 | sort -u)
bool=$(grep ",alloc," "$tmp/vle.csv" | grep ",padding_mask.and_padding$" | cut -d, -f5 | sort -u)
fa=$(grep -c "padding_mask.fast_all" "$tmp/vle.csv")
if [ "$add" = 33554432 ] && [ "$bool" = 16777216 ] && [ "$fa" = 0 ]; then
  ok "data, padded under eager: the 16 MiB boolean mask, then eager_mask's 32 MiB bf16 additive one"
else bad "data, padded under eager: additive '$add' boolean '$bool' fast_all $fa: $(tail -3 "$tmp/vle.out")"; fi

# 11. what is not modelled is exit 2, named
for case in "seq=512|training.seq is set by training.data" "training.data.shuffle=true|training.data.shuffle is not a key" \
            "inference=true|not modelled for inference" "training.data.batch=p101|worst, or pNN"; do
  set_=${case%%|*}; want=${case#*|}
  "$VRSIM" "$tmp/vl.lua" --no-files --set "$set_" >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "$want" "$tmp/err"; then ok "data with $set_: exit 2, named"
  else bad "data with $set_: exit $rc: $(cat "$tmp/err")"; fi
done

# 12. op-level selective checkpointing (checkpoint_scope = "op", torchtitan's SelectiveAC):
#     each layer's mm outputs 1, 3, 5, 7 (q, v, gate, down) and the attention kernel's are kept
#     from forward and replayed; k, o and up (mm 2, 4, 6) and everything else are recomputed,
#     to the layer's end (early_stop=False: the last residual add too, which per-layer
#     checkpointing's early stop never re-runs)
cat > "$tmp/sac.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json" },
  training = { micro_batch = 1, seq = 8192, precision = "bf16", steps = 2, optimizer = "sgd", checkpointing = true } }
EOS
"$VRSIM" "$tmp/sac.lua" --json --no-files --set checkpoint_scope=op --alloc-trace "$tmp/op.csv" > "$tmp/op.json"
"$VRSIM" "$tmp/sac.lua" --json --no-files --alloc-trace "$tmp/lay.csv" > "$tmp/lay.json"
"$VRSIM" "$tmp/sac.lua" --json --no-files --set checkpointing=false > "$tmp/none.json"
rec() { grep ",alloc," "$1" | grep ",layers\.5\..*(recompute)$" | sed 's/.*,layers\.5\.//; s/ (recompute)$//' | grep -x "$2" | wc -l; }
r_on=""; r_off=""
for o in self_attn.k_proj self_attn.o_proj mlp.up_proj residual_add2; do [ "$(rec "$tmp/op.csv" $o)" = 2 ] || r_on="$r_on $o"; done
for o in self_attn.q_proj self_attn.v_proj mlp.gate_proj mlp.down_proj self_attn.sdpa_cudnn; do [ "$(rec "$tmp/op.csv" $o)" = 0 ] || r_off="$r_off $o"; done
if [ -z "$r_on$r_off" ] && [ "$(rec "$tmp/lay.csv" residual_add2)" = 0 ] && [ "$(rec "$tmp/lay.csv" mlp.gate_proj)" = 2 ]; then
  ok "checkpoint_scope = op: q, v, gate, down and attention replayed, k, o, up and the rest recomputed to the layer's end"
else bad "checkpoint_scope = op: not recomputed:$r_on; recomputed:$r_off"; fi
po=$(field "d['peak_allocated_bytes']" < "$tmp/op.json"); pl=$(field "d['peak_allocated_bytes']" < "$tmp/lay.json"); pn=$(field "d['peak_allocated_bytes']" < "$tmp/none.json")
to=$(field "d['step_time_ms']" < "$tmp/op.json"); tl=$(field "d['step_time_ms']" < "$tmp/lay.json")
if [ "$pl" -lt "$po" ] && [ "$po" -lt "$pn" ] && python3 -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$to" "$tl"; then
  ok "checkpoint_scope = op: peak between per-layer checkpointing and none ($pl < $po < $pn), step faster than per-layer ($to < $tl ms)"
else bad "checkpoint_scope = op: peaks $pl / $po / $pn, step $to vs $tl ms"; fi
for case in "checkpoint_every=2|checkpoint_every = 2 is not modelled" "activation_offload=true|with activation_offload is not modelled"; do
  set_=${case%%|*}; want=${case#*|}
  "$VRSIM" "$tmp/sac.lua" --no-files --set checkpoint_scope=op --set "$set_" >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "$want" "$tmp/err"; then ok "checkpoint_scope = op with $set_: exit 2, named"
  else bad "checkpoint_scope = op with $set_: exit $rc: $(cat "$tmp/err")"; fi
done

# float8 (torchao's Float8Linear, eager). Llama-3-8B cut to 2 layers, 1 x 4096 tokens: down_proj
# has M = 4096 rows, K = 14336 in, N = 4096 out. Its input cast: an fp32 copy of the bf16 input
# (4 MK bytes) and the float8 result (MK); the output layer stays nn.Linear (torchtitan's filter)
cat > "$tmp/f8.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 1, seq = 4096, precision = "bf16", steps = 2, optimizer = "sgd",
               float8 = { recipe = "tensorwise" } } }
EOS
"$VRSIM" "$tmp/f8.lua" --no-files --alloc-trace "$tmp/f8.csv" >/dev/null
sz() { grep ",alloc,.*,$2$" "$1" | head -1 | cut -d, -f5; }
MK=58720256
if [ "$(sz "$tmp/f8.csv" layers.1.mlp.down_proj.input.to_fp32)" = $((4 * MK)) ] \
   && [ "$(sz "$tmp/f8.csv" layers.1.mlp.down_proj.input.to_float8)" = $MK ] \
   && [ "$(sz "$tmp/f8.csv" layers.1.mlp.down_proj.weight.to_float8)" = $MK ] \
   && ! grep -q "lm_head.input.to_float8" "$tmp/f8.csv"; then
  ok "float8: down_proj's input cast through an fp32 copy ($((4 * MK)) bytes) to float8 ($MK), its weight too; lm_head not converted"
else bad "float8: casts $(sz "$tmp/f8.csv" layers.1.mlp.down_proj.input.to_fp32) / $(sz "$tmp/f8.csv" layers.1.mlp.down_proj.input.to_float8), lm_head: $(grep -c lm_head.input.to_float8 "$tmp/f8.csv")"; fi
# backward: the saved high-precision input (bf16, 2 MK) is freed by the grad_weight half; its
# temporaries: tensorwise holds grad_output's and the weight's float8 copies (MN + NK) and casts
# again (MN + 8 MK at the input cast's peak); rowwise_with_gw_hp computes grad_weight in bf16
MN=16777216
ws_t=$(sz "$tmp/f8.csv" layers.1.mlp.down_proj.float8_grad_weight.backward)
"$VRSIM" "$tmp/f8.lua" --no-files --set training.float8.recipe=rowwise_with_gw_hp --alloc-trace "$tmp/f8h.csv" >/dev/null
ws_h=$(sz "$tmp/f8h.csv" layers.1.mlp.down_proj.float8_grad_weight.backward)
freed=$(grep "layers.1.mlp.down_proj.float8_grad_weight.backward$" "$tmp/f8.csv" | grep -c "free_completed,[0-9]*,$((2 * MK)),")
if [ "$ws_t" = $((MN + MK + MN + 8 * MK)) ] && [ "$ws_h" = $((MN + MK)) ] && [ "$freed" -ge 1 ]; then
  ok "float8: grad_weight's temporaries $ws_t bytes tensorwise, $ws_h with rowwise_with_gw_hp; the bf16 input saved until then"
else bad "float8: grad_weight temporaries $ws_t / $ws_h (want $((MN + MK + MN + 8 * MK)) / $((MN + MK))), input freed there: $freed"; fi
# eager backward's casts as the kernels they launch (torchao 0.18, torch 2.11), each an op of its
# access class, in the last step's trace. down_proj: M = 4096 rows, N = 4096 out, K = 14336 in.
#  - grad_weight's operands are put in _scaled_mm's layouts by transposing float8 copies
#    (preprocess_addmm): the input's, 1 byte read and 1 written an element (2 MK bytes), priced
#    by the transposing class, slower a byte than the contiguous clamp of the same cast
#  - the scale multiply (a 0-d fp32 scale broadcast: TensorIterator's non-vectorized kernel) is
#    class broadcast_rows and takes longer than the clamp that follows it, the same 8 MN bytes
#    (and the 4-byte scale)
#  - launches: the H100 profile's tensorwise backward (validation/results/
#    kernels_tech_model_h100.jsonl, 28 Linears) runs 55 cast kernels a Linear beyond its GEMMs:
#    4 casts x 12 (abs, memset + max, 5 on the scale, .to(fp32), mul, clamp, .to(float8)), 2 x 2
#    scale reciprocals, 3 layout copies
#  - forward: 2 casts x 12, the two scales' reciprocals and the GEMM: 27 launches (the profile's
#    28 a Linear less one strided bf16 copy vrsim does not launch, docs/techniques.md)
#  - rowwise: grad_output's amax along its rows is one row reduction; the grad_weight casts'
#    amax along the columns is a column reduction (reduce_cols), with its memset; the profile's
#    rowwise backward runs 74 kernels a Linear beyond its GEMMs: 4 casts x 14 or 15 (3 more on
#    the scale: log2, floor, exp2; the weight's and grad_weight's amax per column, with a memset),
#    2 x 2 reciprocals, 3 layout copies, and after each GEMM 2 unit-scale fills, the fp32
#    post_inverse_scale and the product's scaling; forward 2 casts x 14, the reciprocals and the
#    GEMM: 31 (the profile's forward launches 848 kernels beyond the bf16 row's for 28 Linears:
#    30 each, and 8 memsets)
#  - rowwise: every scale product is fp32 times a broadcast scale, per row or per column, and the
#    profile's backward runs all 168 (112 casts, 56 post_inverse_scale) as the same non-vectorized
#    elementwise_kernel<128, 2>: grad_weight's per-column product of grad_output (class
#    broadcast_rows, M = N here) takes as long as grad_input's per-row one
"$VRSIM" "$tmp/f8.lua" --out "$tmp/f8out" >/dev/null
"$VRSIM" "$tmp/f8.lua" --out "$tmp/f8row" --set training.float8.recipe=rowwise >/dev/null
f8ops() { python3 - "$@" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
last = max(e["args"].get("step", 0) for e in ev if e.get("ph") == "X")
ops = {e["name"]: e for e in ev if e.get("ph") == "X" and e["args"].get("step") == last}
P = "layers.1.mlp.down_proj.float8_grad_"
def op(n): return ops[P + n + ".backward"]
def rate(n): return op(n)["args"]["bytes"] / op(n)["dur"]
M, N, K = 4096, 4096, 14336
if sys.argv[2] == "tensorwise":
    cp, cl, mul = op("weight_casts.input_t.float8_column_major"), op("input_casts.grad_output.clamp"), \
        op("input_casts.grad_output.mul_scale")
    k = sum(e["args"].get("kernels", 1) for n, e in ops.items()
            if n.startswith(P) and "casts." in n and n.endswith(".backward"))
    # on the H100 the layout copy runs at its measured class (257-296 GB/s: transpose_fp8 of
    # lua/hw/calibrated/h100_sxm_torch_ops.lua); on a card without that class, at transpose's
    # (the H200: 1.4 TB/s; the streaming curve would give some 3.5)
    lay = rate("weight_casts.input_t.float8_column_major")
    good = (cp["args"]["kind"] == "transpose_fp8" and cp["args"]["bytes"] == 2 * M * K
            and ((250e3 < lay < 300e3) if sys.argv[3] == "h100" else 1.2e6 < lay < 1.7e6)
            and lay < rate("input_casts.grad_output.clamp")
            and mul["args"]["kind"] == "broadcast_rows" and mul["args"]["bytes"] - 4 == cl["args"]["bytes"] == 8 * M * N
            and mul["dur"] > cl["dur"] and k == 55)
    f = sum(e["args"].get("kernels", 1) for n, e in ops.items()
            if n.startswith("layers.1.mlp.down_proj") and e["cat"] == "forward" and e["args"]["kind"] != "none")
    good = good and f == 27
    print("layout copy %s %d bytes %.0f B/us against the clamp's %.0f; scale multiply %.1f us, clamp %.1f us; "
          "%d kernels; forward %d" % (cp["args"]["kind"], cp["args"]["bytes"],
             rate("weight_casts.input_t.float8_column_major"), rate("input_casts.grad_output.clamp"),
             mul["dur"], cl["dur"], k, f))
else:
    r, c = op("input_casts.grad_output.amax")["args"], op("weight_casts.grad_output_t.amax")["args"]
    k = sum(e["args"].get("kernels", 1) for n, e in ops.items()
            if n.startswith(P) and "casts." in n and n.endswith(".backward"))
    # the ATen ops behind them, each dispatched on its own (torchao 0.18's backward, per
    # Linear): 4 casts x 14 (abs, amax, 8 on the scale, .to(fp32), mul, clamp, .to(float8)),
    # 2 x 2 reciprocals, 3 layout copies, 2 x 4 after the GEMMs (two new_ones, the product of
    # the inverse scales, the in-place scaling): 71 ops for the 74 kernels
    nops = sum(1 for n, e in ops.items() if n.startswith(P) and "casts." in n and n.endswith(".backward"))
    mr, mc = op("input_casts.grad_output.mul_scale"), op("weight_casts.grad_output_t.mul_scale")
    f = sum(e["args"].get("kernels", 1) for n, e in ops.items()
            if n.startswith("layers.1.mlp.down_proj") and e["cat"] == "forward" and e["args"]["kind"] != "none")
    good = (r["kind"] == "reduce_rows" and r.get("kernels", 1) == 1 and c["kind"] == "reduce_cols"
            and c["kernels"] == 2 and k == 74 and nops == 71 and f == 31
            and mr["args"]["kind"] == mc["args"]["kind"] == "broadcast_rows"
            and abs(mc["dur"] - mr["dur"]) < 0.01 * mr["dur"])
    print("row amax %s x%d, column amax %s x%d; %d kernels of %d ops; forward %d; scale products per row %s %.1f us, "
          "per column %s %.1f us" % (r["kind"], r.get("kernels", 1), c["kind"], c["kernels"], k, nops, f,
                                    mr["args"]["kind"], mr["dur"], mc["args"]["kind"], mc["dur"]))
sys.exit(0 if good else 1)
PY
}
if got=$(f8ops "$tmp/f8out/trace.json" tensorwise h100); then ok "float8 backward kernels: $got"
else bad "float8 backward kernels: $got"; fi
"$VRSIM" "$tmp/f8.lua" --out "$tmp/f8h200" --set gpu=h200 >/dev/null
if got=$(f8ops "$tmp/f8h200/trace.json" tensorwise h200); then ok "float8 layout copies on a card without transpose_fp8 (H200): at transpose's rate: $got"
else bad "float8 layout copies on the H200: $got"; fi
if got=$(f8ops "$tmp/f8row/trace.json" rowwise h100); then ok "float8 rowwise backward kernels: $got"
else bad "float8 rowwise backward kernels: $got"; fi
# torchao's Python per Float8Linear call (the tensor subclass, its __torch_dispatch__, the
# Function's backward) on the host: the whole call costs the profile's float8_linear_<recipe>
# class, timed as a call (h200_torch.lua: tensorwise 721.5 / 1436.9 us, rowwise 781.4 / 1797.8,
# forward / backward node), not its ATen ops one by one (which came to 761 / 1730 us above a bf16
# Linear, tensorwise). Against the same two layers in bf16 at 64 tokens, where each Linear is
# linear_nobias (32.9 / 81.1) with its input fold's two views (3.26 / 6.26 each), the forward's
# host time grows by class - 32.9 - 6.52 us a converted Linear (14 of them) and the backward's
# by class - 81.1 - 12.52; a hardware.host_classes figure for the class moves it a call by its
# difference from the profile's
cat > "$tmp/f8host.lua" <<'EOS'
return { hardware = { gpu = "h200" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 1, seq = 64, precision = "bf16", steps = 2, optimizer = "sgd",
               float8 = { recipe = "tensorwise" } } }
EOS
sed 's/float8 = { recipe = "tensorwise" } //' "$tmp/f8host.lua" > "$tmp/bfhost.lua"
sed 's/gpu = "h200" }/gpu = "h200", host_classes = { float8_linear_tensorwise = { fwd_us = 821.5, bwd_us = 1636.9 } } }/' \
  "$tmp/f8host.lua" > "$tmp/f8host_own.lua"
hostph() { "$VRSIM" "$@" --json --no-files --no-suggest | python3 -c '
import json, sys; p = json.load(sys.stdin)["time_ms"]["host_dispatch_by_phase"]; print(p["forward"], p["backward"])'; }
bf=$(hostph "$tmp/bfhost.lua"); tw=$(hostph "$tmp/f8host.lua"); rw=$(hostph "$tmp/f8host.lua" --set training.float8.recipe=rowwise)
own=$(hostph "$tmp/f8host_own.lua")
if got=$(python3 - "$bf" "$tw" "$rw" "$own" <<'PY'
import sys
bf, tw, rw, own = ([float(v) for v in a.split()] for a in sys.argv[1:])
per = lambda x: [(x[i] - bf[i]) * 1000 / 14 for i in (0, 1)]
want = {"tensorwise": (721.5 - 32.9 - 6.52, 1436.9 - 81.1 - 12.52), "rowwise": (781.4 - 32.9 - 6.52, 1797.8 - 81.1 - 12.52)}
t, r, o = per(tw), per(rw), per(own)
good = all(abs(a - b) < 0.5 for a, b in zip(t + r, want["tensorwise"] + want["rowwise"]))
good = good and abs(o[0] - t[0] - 100) < 0.5 and abs(o[1] - t[1] - 200) < 0.5
print("a converted Linear adds %.1f / %.1f us tensorwise, %.1f / %.1f rowwise; with the run's own figure %.1f / %.1f"
      % (t[0], t[1], r[0], r[1], o[0], o[1]))
sys.exit(0 if good else 1)
PY
); then ok "float8 host: $got"
else bad "float8 host: $got"; fi
# checkpointing's forward host cost is its pack hook once per saved tensor, and its region's own
# set-up (h200_torch.lua: host_ckpt_saved_us 14.84, host_ckpt_region_us 112.5), not a figure per
# op: four Llama-3-8B layers with LoRA on q, k, v, o save 196 tensors in forward as PyTorch
# counts them (saved_tensors_hooks over the real layers on the CPU, the input needing a gradient
# as peft makes it under checkpointing), and cuDNN's attention saves two more a layer than the
# CPU's (its philox seed and offset): 204. So the checkpointed forward's host time is the plain
# forward's plus 4 x 112.5 + 204 x 14.84 us at the calibration host's speed. Priced per op it
# was 5.8 ms more, where one H100 host measured 3.5 ms at one host speed
# (results/phase_host_h100_interleaved.jsonl)
cp scenarios/configs/qwen3-30b-a3b.json "$tmp/"
fwd_host() { "$VRSIM" "$@" --json --no-files --no-suggest | python3 -c '
import json, sys; print(json.load(sys.stdin)["time_ms"]["host_dispatch_by_phase"]["forward"])'; }
# Qwen3-30B-A3B's four layers: 280 on the CPU, 288 with cuDNN's two a layer
for cs in llama-3-8b:204 qwen3-30b-a3b:288; do
  cat > "$tmp/ckhost.lua" <<EOS
return { hardware = { gpu = "h100_sxm" }, model = { config = "${cs%%:*}.json", layers = 4, use_cache = false },
  training = { micro_batch = 1, seq = 256, precision = "bf16", steps = 2, checkpointing = true,
               lora = { r = 16, alpha = 32, dropout = 0.05, targets = { "q_proj", "k_proj", "v_proj", "o_proj" } } } }
EOS
  ck=$(fwd_host "$tmp/ckhost.lua"); pl=$(fwd_host "$tmp/ckhost.lua" --set training.checkpointing=false)
  if got=$(python3 - "$ck" "$pl" "${cs##*:}" <<'PY'
import sys
ck, pl, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
want = (4 * 112.5 + n * 14.84) / 1000
print("checkpointing adds %.3f ms to the forward's host time (4 regions and %d saved tensors: %.3f)" % (ck - pl, n, want))
sys.exit(0 if abs(ck - pl - want) < 0.01 else 1)
PY
  ); then ok "checkpoint host, ${cs%%:*}: $got"
  else bad "checkpoint host, ${cs%%:*}: $got"; fi
done
# on an sm80 card torchtitan refuses it; an sm89 card (RTX 4090) runs it
"$VRSIM" "$tmp/f8.lua" --no-files --set gpu=a100_80g >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "only supported on SM89 or later" "$tmp/err" && "$VRSIM" "$tmp/f8.lua" --no-files --set gpu=rtx4090 >/dev/null 2>&1; then
  ok "float8: refused on the A100 (sm80) with torchtitan's reason, runs on the RTX 4090 (sm89)"
else bad "float8 on a100_80g: exit $rc: $(cat "$tmp/err")"; fi
# FSDP2's float8 all-gather: a layer's all-gather output in float8 (its Linears 1 byte an
# element, its norms bf16) instead of bf16
cat > "$tmp/f8f.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm", count = 4 }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 1, seq = 4096, precision = "mp_fp32", strategy = "fsdp2", steps = 2,
               float8 = { recipe = "tensorwise" } } }
EOS
"$VRSIM" "$tmp/f8f.lua" --no-files --alloc-trace "$tmp/ag0.csv" >/dev/null
"$VRSIM" "$tmp/f8f.lua" --no-files --set training.float8.fsdp_float8_all_gather=true --alloc-trace "$tmp/ag1.csv" >/dev/null
a0=$(sz "$tmp/ag0.csv" "all_gather layer 1"); a1=$(sz "$tmp/ag1.csv" "all_gather layer 1")
if [ "$a0" = 436224000 ] && [ "$a1" = 218120192 ]; then ok "float8: fsdp_float8_all_gather halves a layer's all-gather output ($a0 -> $a1 bytes)"
else bad "float8: all-gather output $a0 -> $a1 (want 436224000 -> 218120192)"; fi
"$VRSIM" "$tmp/f8f.lua" --no-files --set training.float8.recipe=rowwise --set training.float8.fsdp_float8_all_gather=true >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "only supports tensorwise" "$tmp/err"; then ok "float8: rowwise with the float8 all-gather refused (torchao's assertion)"
else bad "float8 rowwise all-gather: exit $rc: $(cat "$tmp/err")"; fi
"$VRSIM" "$tmp/f8f.lua" --no-files --set hardware.count=8 --set training.parallel.tp=2 --set training.parallel.dp_shard=4 \
  --set training.float8.recipe=rowwise >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "recipe rowwise with tensor parallelism is not modelled" "$tmp/err"; then ok "float8 rowwise with tensor parallelism: exit 2, named"
else bad "float8 rowwise with tp: exit $rc: $(cat "$tmp/err")"; fi

# DPO (TRL's DPOTrainer). Llama-3-8B cut to 2 layers, micro_batch 1: chosen and rejected make a
# batch of 2 rows of prompt + completion tokens (512 + 512, or cut to max_length)
cat > "$tmp/dpo.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 1, precision = "bf16", steps = 2, optimizer = "sgd",
               dpo = { prompt_length = 512, completion_length = 512 } } }
EOS
"$VRSIM" "$tmp/dpo.lua" --json --no-files > "$tmp/dpo.json"
"$VRSIM" "$tmp/dpo.lua" --json --no-files --set training.dpo.precompute_ref_log_probs=true > "$tmp/dpo_pre.json"
sed 's/dpo = { prompt_length = 512, completion_length = 512 }/seq = 1024/' "$tmp/dpo.lua" > "$tmp/sft.lua"
"$VRSIM" "$tmp/sft.lua" --json --no-files > "$tmp/sft.json"
pd=$(field "d['breakdown_at_peak']['parameters']" < "$tmp/dpo.json")
pp=$(field "d['breakdown_at_peak']['parameters']" < "$tmp/dpo_pre.json")
ps=$(field "d['breakdown_at_peak']['parameters']" < "$tmp/sft.json")
nref=$(field "sum(1 for x in d['live_at_peak'] if x['name'].startswith('ref_model.'))" < "$tmp/dpo.json")
if [ "$pd" = $((2 * ps)) ] && [ "$pp" = "$ps" ] && [ "$nref" -gt 0 ]; then
  ok "dpo, full fine-tune: two models' weights ($pd bytes against $ps), one with precompute_ref_log_probs"
else bad "dpo, full fine-tune: parameters $pd / precomputed $pp / sft $ps, ref_model tensors at peak $nref"; fi
# the batch: input_ids 2 x (512 + 88) int64 at max_length 600; the head takes the 2 x 88
# completion positions only (hidden_states[mask], bf16), in one 176 x 32768 tile buffer: no logits
"$VRSIM" "$tmp/dpo.lua" --no-files --set training.dpo.max_length=600 --alloc-trace "$tmp/dpo.csv" >/dev/null
ids=$(grep ",alloc,.*,input_ids$" "$tmp/dpo.csv" | head -1 | cut -d, -f5)
hm=$(grep ",alloc,.*,hidden_states\[mask\]$" "$tmp/dpo.csv" | head -1 | cut -d, -f5)
buf=$(grep ",alloc,.*,chunked_logprob.mm_buf$" "$tmp/dpo.csv" | head -1 | cut -d, -f5)
big=$(awk -F, '$3 == "alloc" && ($5 == 2 * 599 * 128256 * 2 || $5 == 2 * 599 * 128256 * 4)' "$tmp/dpo.csv" | wc -l)
if [ "$ids" = $((2 * 600 * 8)) ] && [ "$hm" = $((2 * 88 * 4096 * 2)) ] && [ "$buf" = $((176 * 32768 * 2)) ] && [ "$big" = 0 ]; then
  ok "dpo: 2 x 600 tokens in one batch, the head on the 176 completion positions through a $buf-byte tile, no logits"
else bad "dpo: input_ids $ids, hidden_states[mask] $hm, tile buffer $buf, $big logits-sized allocations"; fi
# LoRA: the reference is the base with its adapters disabled: no second copy; without
# checkpointing the reference forward runs over the policy's saved activations and sets the peak
# (after the policy's fused head, before any backward); precomputing the reference removes it
cat > "$tmp/dpol.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 4 },
  training = { micro_batch = 2, precision = "lora_bf16", steps = 2, lora = { r = 16, targets = "all-linear" },
               dpo = { prompt_length = 512, completion_length = 512 } } }
EOS
"$VRSIM" "$tmp/dpol.lua" --json --no-files --alloc-trace "$tmp/dl.csv" > "$tmp/dl.json"
"$VRSIM" "$tmp/dpol.lua" --json --no-files --alloc-trace "$tmp/dlp.csv" --set training.dpo.precompute_ref_log_probs=true > "$tmp/dlp.json"
sed 's/dpo = { prompt_length = 512, completion_length = 512 }/seq = 1024, micro_batch = 4/; s/micro_batch = 2, //' "$tmp/dpol.lua" > "$tmp/sftl.lua"
"$VRSIM" "$tmp/sftl.lua" --json --no-files > "$tmp/sl.json"
# where the trace's peak falls: "ref" when the policy's head ran last and no backward since
where() { python3 - "$1" <<'PY'
import csv, sys
live = peak = 0; state = at = None
for r in csv.DictReader(open(sys.argv[1])):
    if r["action"] == "alloc": live += int(r["size"])
    elif r["action"] == "free_completed": live -= int(r["size"])
    f = r["frames"]
    if f == "log_probs.masked_scatter": state = "ref"
    elif f.endswith(".backward"): state = None
    if live > peak: peak, at = live, state
print(at or "other")
PY
}
pl=$(field "d['breakdown_at_peak']['parameters']" < "$tmp/dl.json"); psl=$(field "d['breakdown_at_peak']['parameters']" < "$tmp/sl.json")
nref=$(grep -c "ref_model\." "$tmp/dl.csv")
w1=$(where "$tmp/dl.csv"); w2=$(where "$tmp/dlp.csv")
p1=$(field "d['peak_allocated_bytes']" < "$tmp/dl.json"); p2=$(field "d['peak_allocated_bytes']" < "$tmp/dlp.json")
if [ "$pl" = "$psl" ] && [ "$nref" = 0 ] && [ "$w1" = ref ] && [ "$w2" = other ] && [ "$p2" -lt "$p1" ]; then
  ok "dpo, LoRA: one model's weights; the peak in the reference forward ($p1), gone with precompute_ref_log_probs ($p2)"
else bad "dpo, LoRA: parameters $pl (sft $psl), ref_model tensors $nref, peak in: $w1 / $w2, peaks $p1 / $p2"; fi
cp scenarios/configs/qwen3-30b-a3b.json "$tmp/"
for case in "strategy=ddp|not modelled" "model.config=qwen3-30b-a3b.json|mixture-of-experts" \
            "training.dpo.prompt_length=1024|TRL drops such examples"; do
  set_=${case%%|*}; want=${case#*|}
  "$VRSIM" "$tmp/dpo.lua" --no-files --set hardware.count=2 --set "$set_" >/dev/null 2>"$tmp/err"; rc=$?
  if [ $rc = 2 ] && grep -q "$want" "$tmp/err"; then ok "dpo with $set_: exit 2, named"
  else bad "dpo with $set_: exit $rc: $(cat "$tmp/err")"; fi
done

# generation (transformers' generate with its DynamicCache, greedy). TinyLlama (22 layers, 4 key/value
# heads of 64): 8 prompts of 16 tokens, 48 new tokens. Each layer's cache grows by torch.cat, one
# token (8 x 4 x 64 x 2 = 4096 bytes) a step, the old tensor freed; the head runs on the last
# position only; the peak is in the last token's forward
cp scenarios/configs/tinyllama-1.1b.json "$tmp/"
cat > "$tmp/gen.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "tinyllama-1.1b.json" },
  training = { inference = true, precision = "bf16", steps = 1,
               generate = { prompt = 16, max_new_tokens = 48, batch = 8 } } }
EOS
"$VRSIM" "$tmp/gen.lua" --no-files --alloc-trace "$tmp/gen.csv" >/dev/null
python3 - "$tmp/gen.csv" > "$tmp/gen.out" <<'PY'
import csv, re, sys
live = peak = 0; tok = at = None; keys = []; head = set(); bad = 0; freed_old = 0; prev = None
for r in csv.DictReader(open(sys.argv[1])):
    f, size = r["frames"], int(r["size"])
    if r["action"] == "alloc":
        live += size
        if f in ("layers.0.cache_keys", "layers.0.cache_keys.cat"): keys.append(size)
        if f == "lm_head": head.add(size)
    elif r["action"] == "free_completed":
        live -= size
        if f == "layers.0.cache_keys.cat" and prev is not None and size == prev: freed_old += 1
    if r["action"] == "alloc" and f == "layers.0.cache_keys.cat": prev = keys[-2]
    m = re.search(r"\(token (\d+)\)$", f)
    if m: tok = int(m.group(1))
    if live > peak: peak, at = live, tok
steps = [b - a for a, b in zip(keys, keys[1:])]
print(len(keys), keys[0], keys[-1], sorted(set(steps)), freed_old, sorted(head), at)
PY
want="48 65536 258048 [4096] 47 [512000] 48"
if [ "$(cat "$tmp/gen.out")" = "$want" ]; then
  ok "generate: layer 0's keys cached at 16 tokens then grown by 4096 bytes a token (47 torch.cat, each freeing the old), logits of the last position only, the peak in the last token's forward"
else bad "generate: $(cat "$tmp/gen.out") (want $want)"; fi
# the loop after each forward, as transformers 5.25's _sample runs it (generation/utils.py,
# stopping_criteria.py), token 30 of 48 (8 rows, position 16 + 30): position_ids grown by a cat
# (arange(1), two adds of (8, 1) int64), next_token_logits (8 x 32000 fp32), the argmax, the EOS
# padding of finished rows (two muls, a rsub, an add of (8,) int64), input_ids grown, the
# stopping criteria (two torch.full and an or of (8,) bool, EosTokenCriteria's isin, any, or),
# ~is_done & unfinished, StopCheck's max and == 0; then the next forward's two (8, 1) clones.
# With eos = false (eos_token_id = None) the padding and EosTokenCriteria are not run
loop_allocs() {
  python3 - "$1" <<'PY'
import csv, sys
out = []; on = False
for r in csv.DictReader(open(sys.argv[1])):
    f = r["frames"]
    if r["action"] != "alloc": continue
    if f == "generate.position_ids.arange (token 30)": on = True
    if on and f == "embed_tokens": break
    if on: out.append("%s:%s" % (f.split(" (token")[0].replace("generate.", ""), r["size"]))
print(" ".join(out))
PY
}
got=$(loop_allocs "$tmp/gen.csv")
want="position_ids.arange:8 position_ids.add:64 position_ids.add_one:64 position_ids.cat:$((8 * 46 * 8))"
want="$want next_token_logits:$((8 * 32000 * 4)) argmax:64 eos_pad.mul:64 eos_pad.rsub:64 eos_pad.mul_pad:64 eos_pad.add:64"
want="$want input_ids.cat:$((8 * 46 * 8)) stopping.is_done:8 stopping.max_length:8 stopping.or_max_length:8"
want="$want stopping.eos_isin:8 stopping.eos_any:8 stopping.or_eos:8 unfinished.not:8 unfinished.and:64"
want="$want stop_check.max:8 stop_check.eq:1 input_ids[:; -1:]:64 position_ids[:; -1:]:64"
if [ "$got" = "$want" ]; then ok "generate: the loop's ops after each forward (position_ids, logits, argmax, EOS padding, stopping criteria, StopCheck), op for op"
else bad "generate loop: $got (want $want)"; fi
"$VRSIM" "$tmp/gen.lua" --no-files --set training.generate.eos=false --alloc-trace "$tmp/gen_noeos.csv" >/dev/null
got=$(loop_allocs "$tmp/gen_noeos.csv" | tr ' ' '\n' | grep -c 'eos')
if [ "$got" = 0 ] && [ -n "$(loop_allocs "$tmp/gen_noeos.csv")" ]; then ok "generate with eos = false: no EOS padding, no EosTokenCriteria"
else bad "generate with eos = false: $got EOS ops"; fi
# the model takes generate's (B, s) position_ids: the prefill's rotary tables are per row
got=$(grep -m1 ',alloc,.*,rotary\.freqs$' "$tmp/gen.csv" | cut -d, -f5)
if [ "$got" = $((8 * 16 * 32 * 4)) ]; then ok "generate: the prefill's rotary freqs of (8, 16) position_ids, (8, 16, 32) fp32"
else bad "generate: prefill rotary.freqs $got bytes (want $((8 * 16 * 32 * 4)))"; fi
# StopCheck's host sync: with a device-bound prefill (64 prompts of 2048) the host waits for it
# at the first token, and each token's forward is issued only once the device has drained the
# last: the step is the device's time plus the host's issue of every token, not the device's
# alone (as it would be were the host free to run ahead)
"$VRSIM" "$tmp/gen.lua" --no-files --json --set training.generate.prompt=2048 --set training.generate.batch=64 \
  --set training.generate.max_new_tokens=8 > "$tmp/gen_sync.json"
got=$(python3 -c "
import json; d = json.load(open('$tmp/gen_sync.json'))
print('%.1f %.1f %d' % (d['step_time_ms'], d['time_ms']['compute'], d['step_time_ms'] > 1.05 * d['time_ms']['compute']))")
if [ "${got##* }" = 1 ]; then ok "generate: the per-token sync serializes host and device (step, device ms: ${got% *})"
else bad "generate: step, device ms, step over 1.05 x device: $got"; fi
# a family whose model forward is not Llama's (Gemma 3) builds its own (1, s) position_ids: named
cp scenarios/configs/gemma-3-4b-text.json "$tmp/"
printf 'return { hardware = { gpu = "h100_sxm" }, model = { config = "gemma-3-4b-text.json", layers = 2 },\n  training = { inference = true, precision = "bf16", steps = 1, generate = { prompt = 64, max_new_tokens = 4, batch = 2 } } }\n' > "$tmp/gen_g3.lua"
n_g3=$("$VRSIM" "$tmp/gen_g3.lua" --no-files 2>&1 | grep -c "builds its own (1, s) position_ids")
n_ll=$("$VRSIM" "$tmp/gen.lua" --no-files 2>&1 | grep -c "builds its own (1, s) position_ids")
if [ "$n_g3" = 1 ] && [ "$n_ll" = 0 ]; then ok "generate: Gemma 3's own (1, s) position_ids named in a note (none for Llama)"
else bad "generate position_ids note: gemma 3 $n_g3, llama $n_ll (want 1, 0)"; fi
"$VRSIM" "$tmp/gen.lua" --no-files --set inference=false >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "needs inference = true" "$tmp/err"; then ok "generate without inference: exit 2, named"
else bad "generate without inference: exit $rc: $(cat "$tmp/err")"; fi

# flash_attention_2's varlen path (attention = flash with a padded or packed batch). The worst
# shuffled batch of 4 from these lengths: padded, 4096 with 77, 120 and 300 (4 x 4096, 4593 real
# tokens); flattened, the 4 longest in one row of 8544
printf '%s\n' 900 120 4096 300 2048 77 1500 640 > "$tmp/fl.txt"
cat > "$tmp/fl.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 4, precision = "bf16", steps = 2, checkpointing = true, optimizer = "sgd",
               attention = "flash", data = { lengths = "fl.txt" } } }
EOS
"$VRSIM" "$tmp/fl.lua" --no-files --alloc-trace "$tmp/flp.csv" >/dev/null
fa() { grep ",alloc,.*,layers\.0\.self_attn\.flash_varlen$2$" "$1" | head -1 | cut -d, -f5; }
T=4593
got="$(fa "$tmp/flp.csv" .indices) $(fa "$tmp/flp.csv" .unpad_q) $(fa "$tmp/flp.csv" .unpad_k) $(fa "$tmp/flp.csv" .pad) $(grep -c 'padding_mask\.' "$tmp/flp.csv")"
want="$((T * 8)) $((T * 32 * 128 * 2)) $((T * 8 * 128 * 2)) $((4 * 4096 * 32 * 128 * 2)) 0"
if [ "$got" = "$want" ]; then
  ok "flash, padded: each layer unpads q, k, v to the 4593 real tokens (indices, copies), pads the output back; no (b, 1, L, L) mask"
else bad "flash, padded: indices / q / k / padded output / mask ops $got (want $want)"; fi
"$VRSIM" "$tmp/fl.lua" --no-files --set training.data.batching=padding_free --alloc-trace "$tmp/flf.csv" >/dev/null
got="$(fa "$tmp/flf.csv" .cu_seqlens) $(fa "$tmp/flf.csv" "") $(grep -c 'flash_varlen\.unpad\|packed_mask\.' "$tmp/flf.csv")"
want="20 $((8544 * 32 * 128 * 2)) 0"
if [ "$got" = "$want" ]; then ok "flash, padding-free: cu_seqlens from position_ids, q, k, v viewed (no copies, no mask), the output (8544 tokens)"
else bad "flash, padding-free: cu_seqlens / output / copies and mask ops $got (want $want)"; fi
# each sequence's causal square alone: faster than SDPA's block-causal mask over the whole row
t_fa=$("$VRSIM" "$tmp/fl.lua" --json --no-files --set training.data.batching=padding_free | field "d['step_time_ms']")
t_sd=$("$VRSIM" "$tmp/fl.lua" --json --no-files --set training.data.batching=padding_free --set attention=sdpa | field "d['step_time_ms']")
if python3 -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$t_fa" "$t_sd"; then
  ok "flash, padding-free: step $t_fa ms against SDPA's masked $t_sd ms"
else bad "flash, padding-free: step $t_fa ms, SDPA $t_sd ms"; fi

# Paged optimizers (bitsandbytes' is_paged: state1 / state2 of parameters of >= 1e5 elements from
# cudaMallocManaged, outside the caching allocator). Llama-3-8B cut to 8 layers (2,795,573,248
# parameters, 17 RMSNorm weights of 4096 elements under 1e5) on one A10G: plain bf16 AdamW does
# not fit; paged 8-bit AdamW keeps n bytes a state, paged 32-bit 4 n
cat > "$tmp/pg.lua" <<'EOS'
return { hardware = { gpu = "a10g" }, model = { config = "llama-3-8b.json", layers = 8 },
  training = { micro_batch = 1, seq = 512, precision = "bf16", steps = 2, build = "direct" } }
EOS
"$VRSIM" "$tmp/pg.lua" --json --no-files --set optimizer=adamw8bit > "$tmp/a8.json"
"$VRSIM" "$tmp/pg.lua" --json --no-files --set optimizer=paged_adamw_8bit > "$tmp/p8.json"; rc8=$?
"$VRSIM" "$tmp/pg.lua" --json --no-files --set optimizer=adamw > "$tmp/a32.json"; rca=$?
"$VRSIM" "$tmp/pg.lua" --json --no-files --set optimizer=paged_adamw_32bit > "$tmp/p32.json"; rc32=$?
BIG=$((2795573248 - 17 * 4096))
# 1. the allocator's figures leave the paged state out: the paged run's peak allocated is the
#    8-bit run's less the managed bytes (within 16 MiB: the peak's temporaries), the optimizer
#    state at its peak is only the small parameters' states, absmax (two fp32 a 256-element
#    block) and qmaps, and its peak
#    reserved is the lower by at least the managed bytes' 90 % (the segments pack differently)
got=$(python3 -c "
import json,sys
a=json.load(open('$tmp/a8.json')); p=json.load(open('$tmp/p8.json')); m=p['paged_state']
d=a['peak_allocated_bytes']-p['peak_allocated_bytes']
r=a['peak_reserved_bytes']-p['peak_reserved_bytes']
print(m['bytes'], int(abs(d-m['bytes']) <= 16<<20), int(p['breakdown_at_peak']['optimizer_state'] < 2*$BIG//256*4 + (16<<20)), int(r > 0.9*m['bytes']))")
if [ "$rc8" = 0 ] && [ "$got" = "$((2 * BIG)) 1 1 1" ]; then
  ok "paged_adamw_8bit: 2 x $BIG bytes of state in unified memory, out of peak allocated and reserved"
else bad "paged_adamw_8bit: rc $rc8, paged bytes and allocator checks $got (want $((2 * BIG)) 1 1 1)"; fi
# 2. while it fits the card beside the reserve, the device total counts it and nothing moves
got=$(python3 -c "
import json
p=json.load(open('$tmp/p8.json')); m=p['paged_state']
print(int(m['device_total_bytes'] == p['peak_reserved_bytes'] + m['bytes'] + p['breakdown_at_peak']['cuda_context']),
      m['evicted_bytes'], m['transfer_ms'])")
if [ "$got" = "1 0 0" ]; then ok "paged_adamw_8bit: resident whole, in the device total (reserved + state + CUDA context), no transfer"
else bad "paged_adamw_8bit: device total / evicted / transfer $got (want 1 0 0)"; fi
# 3. where the state does not fit beside the reserve the driver evicts it: plain AdamW is out of
#    memory, paged 32-bit AdamW fits, its excess over the card (total - context - reserve) paged
#    out and back each step over the A10G's PCIe 4.0 x16 (25 GB/s pinned, lua/hw's link), in the
#    step time
got=$(python3 -c "
import json
p=json.load(open('$tmp/p32.json')); m=p['paged_state']
card=23609475072 - p['breakdown_at_peak']['cuda_context']
ev=m['bytes'] - (card - p['peak_reserved_bytes'])
print(m['bytes'], int(m['evicted_bytes'] == ev > 0), int(abs(m['transfer_ms'] - 2 * ev / 25e9 * 1e3) < 0.01 * m['transfer_ms']),
      int(p['step_time_ms'] > m['transfer_ms']))")
if [ "$rca" = 3 ] && [ "$rc32" = 0 ] && [ "$got" = "$((8 * BIG)) 1 1 1" ]; then
  ok "paged_adamw_32bit: fits where adamw is out of memory; the state's excess over the card is paged both ways in the step"
else bad "paged_adamw_32bit: rc adamw $rca, paged $rc32; bytes / evicted / transfer / step $got (want $((8 * BIG)) 1 1 1)"; fi

# 4-D mask the batch carries (training.attention_mask = block_diagonal, LLaMA-Factory's neat_packing
# under sdpa): one (b, 1, L, L) bf16 input, exactly its bytes more at the peak than the causal
# run, and every layer's SDPA takes it as its bias (the masked kernel, no boolean mask converted)
cat > "$tmp/m4.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 2 },
  training = { micro_batch = 2, seq = 2048, precision = "bf16", attention = "sdpa", checkpointing = true, steps = 2,
               attention_mask = "block_diagonal" } }
EOS
"$VRSIM" "$tmp/m4.lua" --json --out "$tmp/m4" > "$tmp/m4.json"
"$VRSIM" "$tmp/m4.lua" --json --no-files --set training.attention_mask=none > "$tmp/m4n.json"
got=$(python3 -c "
import json
a, n = json.load(open('$tmp/m4.json')), json.load(open('$tmp/m4n.json'))
ev = json.load(open('$tmp/m4/trace.json'))['traceEvents']
kinds = {e['args']['kind'] for e in ev if 'sdpa_cudnn' in e['name'] and 'args' in e}
conv = sum(1 for e in ev if 'attn_mask_to_bias' in e['name'] or 'causal_mask' in e['name'])
print(a['peak_allocated_bytes'] - n['peak_allocated_bytes'], sorted(kinds), conv)")
if [ "$got" = "16777216 ['attention_cudnn_masked'] 0" ]; then
  ok "attention_mask = block_diagonal: one (2, 1, 2048, 2048) bf16 input (16 MiB at the peak), SDPA's masked kernel, nothing converted"
else bad "attention_mask = block_diagonal: peak difference, kinds, conversions $got (want 16777216 ['attention_cudnn_masked'] 0)"; fi
# what the 4-D mask is not modelled with: each refused with exit 2, its message naming it
m4_refused() { # what, pattern, then vrsim arguments
  _w=$1 _p=$2; shift 2
  "$VRSIM" "$@" --no-files > "$tmp/m4r.out" 2>&1; _rc=$?
  if [ "$_rc" = 2 ] && grep -q -- "$_p" "$tmp/m4r.out"; then ok "attention_mask = block_diagonal $_w: refused (exit 2), named"
  else bad "attention_mask = block_diagonal $_w: exit $_rc, want 2 and /$_p/: $(head -c 300 "$tmp/m4r.out")"; fi
}
m4_refused "under flash attention" "training.attention_mask = block_diagonal under flash attention .* is not modelled" \
  "$tmp/m4.lua" --set attention=flash
sed 's/attention_mask = "block_diagonal"/attention_mask = "block_diagonal", data = { lengths = { 100, 200 } }/; s/seq = 2048, //' \
  "$tmp/m4.lua" > "$tmp/m4d.lua"
m4_refused "with training.data" "training.attention_mask = block_diagonal with training.data .* is not modelled" "$tmp/m4d.lua"
m4_refused "for inference" "training.attention_mask = block_diagonal for inference is not modelled" \
  "$tmp/m4.lua" --set training.inference=true
sed 's/gpu = "h100_sxm" }/gpu = "h100_sxm", count = 2 }/; s/attention_mask = "block_diagonal" }/attention_mask = "block_diagonal", parallel = { tp = 2 } }/' \
  "$tmp/m4.lua" > "$tmp/m4t.lua"
m4_refused "under tensor parallelism" \
  "training.attention_mask = block_diagonal under tensor or context parallelism is not modelled" "$tmp/m4t.lua"
cp scenarios/configs/gemma-2-9b.json "$tmp/"
printf 'return { model = { config = "gemma-2-9b.json", layers = 1 },\n  training = { seq = 512, attention = "eager", attention_mask = "block_diagonal" } }\n' > "$tmp/m4g.lua"
m4_refused "in Gemma 2 (its own mask functions)" \
  "training.attention_mask = block_diagonal: gemma2's forward does not take a 4-D mask as given" "$tmp/m4g.lua"
printf 'return {\n  model = { arch = "sdxl" },\n  training = { attention_mask = "block_diagonal" } }\n' > "$tmp/m4s.lua"
m4_refused "on SDXL, at its line" \
  "m4s.lua:3: training.attention_mask = block_diagonal: a language model's packed rows; arch sdxl's" "$tmp/m4s.lua"

echo "test_techniques: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
