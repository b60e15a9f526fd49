#!/bin/sh
# test_megatron_dp.sh: Megatron's data parallelism under training.parallel.tp_impl = "megatron"
# (lua/strategies/megatron_dp.lua): megatron-core 0.16.1's DistributedDataParallel over
# dp_replicate ranks and the optimizer over its main parameters. The fields; the rank's
# allocations against the oracle's captures of megatron-core itself (with and without the
# distributed optimizer, fp32 and bf16 main_grad buffers, dp ranks 0 and 1); the contiguous grad
# buffer, made once and kept; the optimizer state per rank halving from dp 2 to dp 4 under the
# distributed optimizer and not without it; the bf16 gradients dropped by their hooks; and what it
# does not model, refused by name.
#   VRSIM=./vrsim sh tests/test_megatron_dp.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-mgdp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
O=validation/oracle
# Llama-3-8B's shapes, 2 layers, 512 tokens, bf16, tp 2 x dp_replicate 2, the distributed optimizer
SC=$O/scenarios/llama3_8b_l2_bf16_megatron_tp2_dp2.lua

# 1. the fields, their types and defaults (megatron/training/arguments.py's)
f=$("$VRSIM" fields 2>/dev/null | sed -n '/^training.parallel /,/^$/p')
if printf '%s\n' "$f" | grep -q '^  megatron_distributed_optimizer boolean .*\[false\]$' \
   && printf '%s\n' "$f" | grep -q '^  megatron_grad_reduce_in_fp32 boolean .*\[true\]$'
then ok "vrsim fields lists training.parallel.megatron_distributed_optimizer (boolean, false) and megatron_grad_reduce_in_fp32 (boolean, true)"
else bad "vrsim fields: the megatron data-parallel fields" "$(printf '%s\n' "$f" | grep megatron_)"; fi

# 2. against megatron-core's own runs (capture_megatron_dp.py, committed): every allocation
#    aligned but the named divergences, and the live bytes after the build, after step 1's
#    forward and at its peak within 4 KiB of the capture's
for name in llama3_8b_l2_bf16_megatron_tp2_dp2 llama3_8b_l2_bf16_megatron_tp2_dp2_nodistopt \
            llama3_8b_l2_bf16_megatron_tp2_dp2_bf16grad llama3_8b_l2_bf16_megatron_tp2_dp2_rank2; do
  python3 "$O/compare.py" --vrsim "$VRSIM" --expect "$O/expected/$name.txt" \
    "$O/captures/$name.jsonl.gz" "$O/scenarios/$name.lua" >"$tmp/cmp" 2>&1; rc=$?
  near=$(grep -E 'after build|after forward|step 1 peak' "$tmp/cmp" | awk '
    { d = 0; if (match($0, /\([-+]?[0-9]+ bytes\)/)) d = substr($0, RSTART + 1, RLENGTH - 8) + 0
      if (d < 0) d = -d; if (d <= 4096) n++ } END { print n + 0 }')
  if [ $rc = 0 ] && [ "$near" = 3 ]; then
    ok "oracle $name: matches megatron-core's capture (the named divergences only; live bytes within 4 KiB at 3 milestones)"
  else bad "oracle $name (exit $rc, $near of 3 milestones within 4 KiB)" "$(tail -12 "$tmp/cmp")"; fi
done

# 3. the grad buffer: one allocation at the build, numel * 4 bytes (fp32 main_grad), never
#    freed; with megatron_grad_reduce_in_fp32 = false numel * 2 and the optimizer's fp32 copies
#    of the main gradients made in each step's optimizer phase and freed by its zero_grad
"$VRSIM" "$SC" --no-files --no-suggest --alloc-trace "$tmp/a.csv" >"$tmp/a.out" 2>&1 || bad "the dp2 run" "$(tail -3 "$tmp/a.out")"
"$VRSIM" "$SC" --no-files --no-suggest --set training.parallel.megatron_grad_reduce_in_fp32=false \
  --alloc-trace "$tmp/b.csv" >"$tmp/b.out" 2>&1 || bad "the bf16 grad run" "$(tail -3 "$tmp/b.out")"
if python3 - "$tmp/a.csv" "$tmp/b.csv" <<'PY'
import csv, sys
NUMEL = 743460864      # the rank's parameters: vocab/tp rows of embedding and output, 2 layers' shards, norms
def grad_buffer(path):
    rows = list(csv.DictReader(open(path)))
    made = [r for r in rows if r["action"] == "alloc" and r["frames"].startswith("_ParamAndGradBuffer")]
    addrs = {r["addr"] for r in made}
    freed = [r for r in rows if r["action"] == "free_requested" and r["addr"] in addrs]
    copies = [r for r in rows if r["action"] == "alloc" and "main_grad.float()" in r["frames"]]
    return sorted(int(r["size"]) for r in made), len(freed), copies
fa, na, ca = grad_buffer(sys.argv[1])
fb, nb, cb = grad_buffer(sys.argv[2])
print("fp32:", fa, "freed", na, "copies", len(ca), "| bf16:", fb, "freed", nb, "copies", sum(int(r["size"]) for r in cb))
# (the distributed optimizer's bf16 param buffer is made by the same op: NUMEL * 2)
ok = (fa == [NUMEL * 2, NUMEL * 4] and na == 0 and not ca and fb == [NUMEL * 2, NUMEL * 2] and nb == 0
      # the fp32 copies: rank 0's shard of the buffer, 4 bytes an element, each of the 2 steps
      and sum(int(r["size"]) for r in cb) == 2 * NUMEL // 2 * 4)
sys.exit(0 if ok else 1)
PY
then ok "grad buffer: one fp32 allocation of numel * 4 at the build, kept for the run; bf16 with megatron_grad_reduce_in_fp32 = false, the step's fp32 copies of the shard's main gradients beside it"
else bad "the grad buffer"; fi

# 4. no .grad outlives its hook: the bf16 gradient of each weight is freed by the
#    main_grad.add_ hook that follows it (the output layer's: 64128 x 4096 bf16)
if python3 - "$tmp/a.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
live = {}
for r in rows:
    if r["action"] == "alloc":
        live[r["addr"]] = r
    elif r["action"] == "free_requested" and r["addr"] in live:
        a = live.pop(r["addr"])
        if a["frames"] == "output_layer.backward" and int(a["size"]) == 64128 * 4096 * 2:
            print("output_layer's weight gradient freed by", r["frames"])
            sys.exit(0 if r["frames"].endswith("main_grad.add_(grad); grad = None") else 1)
sys.exit(1)
PY
then ok "backward: the output layer's bf16 weight gradient is freed by its main_grad.add_ hook"
else bad "the post-accumulate hook"; fi

# 5. the optimizer state per rank: the fp32 main params (made at the build) and Adam's two states
#    (its first step), summed from the simulated allocations, never freed. The distributed
#    optimizer's halves from dp 2 to dp 4 (1/dp of the buffer each, 12 bytes an element); without
#    it dp changes nothing, and it is the dp-2 one's double (every parameter's). The breakdown at
#    the peak says the same to the allocator's 2 MiB rounding of the large blocks.
state() { "$VRSIM" "$SC" --no-files --no-suggest --alloc-trace "$tmp/s.csv" "$@" >/dev/null 2>&1 && python3 - "$tmp/s.csv" <<'PY'
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
d2=$(state); d4=$(state --set hardware.count=8 --set training.parallel.dp_replicate=4)
n2=$(state --set training.parallel.megatron_distributed_optimizer=false)
n4=$(state --set training.parallel.megatron_distributed_optimizer=false --set hardware.count=8 \
  --set training.parallel.dp_replicate=4)
if [ -n "$d2" ] && [ -n "$d4" ] && [ "$d2" -gt 0 ] && [ "$d2" = $((2 * d4)) ] && [ "$n2" = "$n4" ] \
   && [ "$n2" = $((2 * d2)) ]
then ok "optimizer state per rank: $d2 B at dp 2, $d4 B at dp 4 with the distributed optimizer (half); $n2 B at both without it"
else bad "optimizer state per rank" "dp2 $d2 dp4 $d4; without: dp2 $n2 dp4 $n4"; fi

# 6. the header says the defaults in effect
"$VRSIM" "$SC" --no-files --no-suggest --set training.parallel.megatron_distributed_optimizer=false >"$tmp/h" 2>&1
grep -q "Megatron's DistributedDataParallel, main_grad in fp32, distributed optimizer off (--use-distributed-optimizer's default)" "$tmp/h" \
  && ok "the header names the distributed optimizer's default" || bad "header" "$(sed -n 4p "$tmp/h")"

# 7. what is not modelled: exit 2 naming the field
refused() { # $1 what, $2 the message's pattern, then arguments
  what=$1; pat=$2; shift 2
  "$VRSIM" "$SC" --no-files "$@" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$pat" "$tmp/out"; then ok "$what: exit 2, named"
  else bad "$what: exit $rc" "$(head -3 "$tmp/out")"; fi
}
F='training.parallel.tp_impl = "megatron" with data parallelism'
refused "Megatron-FSDP / FSDP2 over dp_shard" "$F: training.strategy = \"fsdp2\"" --set training.parallel.dp_replicate=1 \
  --set training.parallel.dp_shard=2
refused "CPU offload of the optimizer" "$F: training.zero.offload_optimizer" --set training.zero.offload_optimizer=cpu
refused "a torch DDP bucket knob" "$F: training.zero.bucket_cap_mb" --set training.zero.bucket_cap_mb=10
refused "fp8 (float8)" 'training.parallel.tp_impl = "megatron": float8' --set training.float8.recipe=tensorwise
refused "SGD" "$F: training.optimizer = \"sgd\"" --set optimizer=sgd
refused "gradient accumulation" "$F: training.grad_accum = 2" --set grad_accum=2
refused "fused AdamW" "$F: training.optimizer_impl = \"fused\"" --set optimizer_impl=fused
refused "the distributed optimizer without data parallelism" \
  "training.parallel.megatron_distributed_optimizer needs Megatron's data parallelism" --set hardware.count=2 \
  --set training.parallel.dp_replicate=1
# (a scenario that gives only megatron_grad_reduce_in_fp32, under DTensor's tensor parallelism)
sed 's/megatron_distributed_optimizer = true/megatron_grad_reduce_in_fp32 = false/' "$SC" >"$tmp/g.lua"
"$VRSIM" "$tmp/g.lua" --no-files --set training.parallel.tp_impl=dtensor >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "training.parallel.megatron_grad_reduce_in_fp32 needs Megatron's data parallelism" "$tmp/out"
then ok "megatron_grad_reduce_in_fp32 under DTensor's tp: exit 2, named"
else bad "megatron_grad_reduce_in_fp32 under DTensor's tp: exit $rc" "$(head -3 "$tmp/out")"; fi

echo "test_megatron_dp: $pass passed, $fail failed"
[ "$fail" = 0 ]
