#!/bin/sh
# test_megatron_mix.sh: Megatron-LM's parallelisms together under training.parallel.tp_impl =
# "megatron": activation recompute on a pipeline stage (lua/strategies/megatron_pp.lua,
# megatron_recompute.lua) against megatron-core 0.16.1's own 1F1B schedule with recompute, first
# and last stage; what a stage's micro-batches in flight keep under each recompute; the stage's
# own layers as the recompute's bound; and what stays refused, by name.
#   VRSIM=./vrsim sh tests/test_megatron_mix.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-mgmix.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
O=validation/oracle
P=training.parallel
# Llama-3-8B's shapes, 4 layers over pp 2, tp 2, 512 tokens, bf16, 4 micro-batches
N=llama3_8b_l4_bf16_megatron_tp2_pp2_m4
SC=$O/scenarios/$N.lua

# 1. recompute on a stage against megatron-core's capture (capture_megatron_pp.py with
#    TransformerConfig's recompute fields, committed): full uniform 1 and selective core_attn, the
#    first stage (rank 0) and the last (rank 2); every allocation aligned but the named
#    divergences, and the live bytes after the build, after step 1's schedule and at its peak
#    within 4 KiB of the capture's
# held N: capture N against vrsim, as above (section 4 holds the dp captures the same way)
held() {
  n=$1
  python3 "$O/compare.py" --vrsim "$VRSIM" --expect "$O/expected/$n.txt" "$O/captures/$n.jsonl.gz" \
    "$O/scenarios/$n.lua" >"$tmp/cmp" 2>&1; rc=$?
  near=$(grep -E 'after build|after forward|step 1 peak' "$tmp/cmp" | awk '
    { d = 0; if (match($0, /\([-+]?[0-9]+ bytes\)/)) d = substr($0, RSTART + 1, RLENGTH - 8) + 0
      if (d < 0) d = -d; if (d <= 4096) n++ } END { print n + 0 }')
  if [ $rc = 0 ] && [ "$near" = 3 ]; then
    ok "oracle $n: matches megatron-core's capture (named divergences only; 3 milestones within 4 KiB)"
  else bad "oracle $n (exit $rc, $near of 3 milestones within 4 KiB)" "$(tail -12 "$tmp/cmp")"; fi
}
for k in rc_full_uniform rc_full_uniform_rank2 rc_selective rc_selective_rank2; do
  held "${N}_$k"
done

# 2. what the first stage's micro-batches in flight keep: step 1's schedule peak above its start
#    on rank 0 (pp - 1 = 1 warm-up forward, so two micro-batches' saved tensors at once) falls
#    from no recompute to selective core_attn (the scores, softmax and repeated keys and values
#    not kept) and further to full uniform 1 (each layer only its input)
sched_peak() { # $1 scenario, then --set arguments: the schedule's peak above its start, step 1
  s=$1; shift
  "$VRSIM" "$s" --no-files --no-suggest --alloc-trace "$tmp/a.csv" "$@" >"$tmp/a.out" 2>&1 \
    || { echo "run failed: $(tail -2 "$tmp/a.out")" >&2; return; }
  python3 - "$tmp/a.csv" <<'PY'
import csv, sys
live, sizes, starts, peak, on, start = 0, {}, 0, 0, False, 0
for ev in csv.DictReader(open(sys.argv[1])):
    f, a, n = ev["frames"], ev["action"], int(ev["size"])
    if a == "alloc":
        live += n; sizes[ev["addr"]] = n
    elif a == "free_requested":
        live -= sizes.pop(ev["addr"], 0)
    if f.startswith("total_num_tokens") and a == "alloc":
        starts += 1
        if starts == 2: start, on = live, True
    if f.startswith("adamw"): on = False
    if on: peak = max(peak, live)
print(peak - start)
PY
}
none=$(sched_peak "$SC")
sel=$(sched_peak "$O/scenarios/${N}_rc_selective.lua")
full=$(sched_peak "$O/scenarios/${N}_rc_full_uniform.lua")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
if [ -n "$none" ] && [ -n "$sel" ] && [ -n "$full" ] && [ "$sel" -lt "$none" ] && [ "$full" -lt "$sel" ]; then
  ok "first stage's schedule peak above its start: none $(mib "$none"), selective $(mib "$sel"), full uniform 1 $(mib "$full") MiB"
else bad "the first stage's schedule peak under recompute (none $none, selective $sel, full $full)"; fi

# 3. the recompute's bound is a stage's layers (num_layers_per_pipeline_rank), not the model's:
#    full block 2 on 2 layers a stage runs; 3 is refused naming the stage
"$VRSIM" "$SC" --no-files --no-suggest --set $P.megatron_recompute_granularity=full \
  --set $P.megatron_recompute_method=block --set $P.megatron_recompute_num_layers=2 >"$tmp/out" 2>&1 \
  && ok "full block 2 on a stage of 2 layers runs" || bad "full block 2 on a stage" "$(tail -3 "$tmp/out")"

refused() { # $1 what, $2 the message's pattern, then arguments
  what=$1; pat=$2; shift 2
  "$VRSIM" "$SC" --no-files "$@" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$pat" "$tmp/out"; then ok "$what: exit 2, named"
  else bad "$what: exit $rc" "$(head -3 "$tmp/out")"; fi
}
refused "recompute_num_layers past a stage's layers" \
  "megatron_recompute_num_layers = 3: must be between 1 and the 2 layers of a pipeline stage" \
  --set $P.megatron_recompute_granularity=full --set $P.megatron_recompute_method=block \
  --set $P.megatron_recompute_num_layers=3
refused "uniform chunks that do not divide a stage's layers" \
  "megatron_recompute_num_layers = 2 with method \"uniform\" does not divide the 3 layers of a pipeline stage" \
  --set model.layers=6 --set $P.megatron_recompute_granularity=full --set $P.megatron_recompute_method=uniform \
  --set $P.megatron_recompute_num_layers=2
refused "torch's checkpointing beside the pipeline points to Megatron's recompute" \
  "training.checkpointing (torch.utils.checkpoint; .*set $P.megatron_recompute_granularity" --set checkpointing=true

# 4. Megatron's data parallelism beside the pipeline (tp 2 x pp 2 x dp 2, world 8, the distributed
#    optimizer) against megatron-core's capture (capture_megatron_pp.py with capture_megatron_dp.py's
#    DistributedDataParallel and optimizer; finalize_model_grads run by the schedule): rank 0 (the
#    first stage, dp rank 0) and rank 6 (the last stage, dp rank 1)
D=llama3_8b_l4_bf16_megatron_tp2_pp2_dp2_m4
for n in $D ${D}_rank6; do
  held "$n"
done

# 5. the optimizer state per rank on a pipeline stage (the first, rank 0; 8 layers, 4 a stage): the
#    fp32 main params and Adam's two states, summed from the simulated allocations, halve from dp 2
#    to dp 4 under the distributed optimizer; without it dp changes nothing
state() { "$VRSIM" "$O/scenarios/$D.lua" --no-files --no-suggest --set model.layers=8 --alloc-trace "$tmp/s.csv" "$@" \
  >"$tmp/s.out" 2>&1 && python3 - "$tmp/s.csv" <<'PY'
import csv, sys
live = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["action"] == "alloc":
        live[r["addr"]] = r
    elif r["action"] == "free_requested":
        live.pop(r["addr"], None)
print(sum(int(r["size"]) for r in live.values()
          if "main param .float()" in r["frames"] or r["frames"].startswith("adamw.init ")))
PY
}
d2=$(state); d4=$(state --set hardware.count=16 --set $P.dp_replicate=4)
n2=$(state --set $P.megatron_distributed_optimizer=false)
n4=$(state --set $P.megatron_distributed_optimizer=false --set hardware.count=16 --set $P.dp_replicate=4)
if [ -n "$d2" ] && [ -n "$d4" ] && [ "$d2" -gt 0 ] && [ "$d2" = $((2 * d4)) ] && [ -n "$n2" ] && [ "$n2" = "$n4" ] \
   && [ "$n2" = $((2 * d2)) ]
then ok "first stage's optimizer state: $d2 B at dp 2, $d4 B at dp 4 with the distributed optimizer (half); $n2 B at both without it"
else bad "optimizer state per rank on a stage" "dp2 $d2 dp4 $d4; without: dp2 $n2 dp4 $n4; $(tail -2 "$tmp/s.out")"; fi

# 6. what the schedule does with Megatron's DistributedDataParallel: each weight's bf16 gradient
#    dropped into main_grad by its hook in every micro-batch's backward (the output layer's, on
#    the last stage, 4 times a step), never added into a .grad the hook dropped; the buffer
#    reduced (reduce-scatter) once a step, after the schedule's last backward; the last stage's loss scaled by the optimizer's _scale_one in each
#    backward_step (one [1] fp32 tensor a micro-batch), the first stage's not
"$VRSIM" "$O/scenarios/${D}_rank6.lua" --no-suggest --alloc-trace "$tmp/r6.csv" --out "$tmp/o6" >"$tmp/r6.out" 2>&1 \
  || bad "rank 6" "$(tail -3 "$tmp/r6.out")"
"$VRSIM" "$O/scenarios/$D.lua" --no-files --no-suggest --alloc-trace "$tmp/r0.csv" >"$tmp/r0.out" 2>&1 \
  || bad "rank 0" "$(tail -3 "$tmp/r0.out")"
if python3 - "$tmp/r6.csv" "$tmp/r0.csv" "$tmp/o6/memory.csv" <<'PY'
import csv, sys
r6, r0 = list(csv.DictReader(open(sys.argv[1]))), list(csv.DictReader(open(sys.argv[2])))
rows = list(csv.DictReader(open(sys.argv[3])))
hooks = [r for r in r6 if r["action"] == "free_requested"
         and r["frames"] == "module.output_layer.weight: main_grad.add_(grad); grad = None"]
accum = [r for r in r6 if r["frames"].startswith("AccumulateGrad(add_)")]
scaled = lambda rows: sum(1 for r in rows if r["action"] == "alloc" and "grad_scale_func" in r["frames"])
# each step's reduce-scatter: after the schedule's last backward node, before the optimizer
rs = [i for i, r in enumerate(rows) if r["op"].startswith("finish_grad_sync: reduce_scatter")]
def placed(i):
    nxt = next(j for j in range(i, len(rows)) if rows[j]["phase"] == "optimizer")
    return (not any(rows[j]["op"].endswith(".backward") for j in range(i, nxt))
            and any(rows[j]["op"].endswith(".backward") for j in range(i)))
print("output layer's hook frees", len(hooks), "AccumulateGrad(add_)", len(accum), "scaled losses", scaled(r6),
      scaled(r0), "reduce-scatters", len(rs))
ok = (len(hooks) == 8 and not accum and scaled(r6) == 8 and scaled(r0) == 0 and len(rs) == 2
      and all(placed(i) for i in rs))
sys.exit(0 if ok else 1)
PY
then ok "DDP on a stage: main_grad hooks in each micro-batch's backward, one reduce-scatter before the schedule returns, the last stage's loss scaled"
else bad "Megatron's DDP inside the schedule"; fi

# 7. all three together (tp 2 x pp 2 x dp 2 with full recompute): the first stage's schedule peak
#    above its start falls with recompute as without data parallelism, and by as much (the
#    optimizer's and DDP's tensors are outside the schedule)
dn=$(sched_peak "$O/scenarios/$D.lua")
df=$(sched_peak "$O/scenarios/$D.lua" --set $P.megatron_recompute_granularity=full \
  --set $P.megatron_recompute_method=uniform --set $P.megatron_recompute_num_layers=1)
if [ -n "$dn" ] && [ -n "$df" ] && [ "$df" -lt "$dn" ] && [ $((dn - df)) = $((none - full)) ]; then
  ok "tp x pp x dp with full recompute: the first stage's schedule peak $(mib "$dn") -> $(mib "$df") MiB"
else bad "recompute beside the pipeline and dp (none $dn, full $df; without dp $none, $full)"; fi

refused "dp_shard beside Megatron's pipeline" 'training.parallel.tp_impl = "megatron" with data parallelism: training.strategy = "fsdp2"' \
  --set hardware.count=8 --set $P.dp_shard=2

echo "test_megatron_mix: $pass passed, $fail failed"
[ "$fail" = 0 ]
