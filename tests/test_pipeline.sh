#!/bin/sh
# Pipeline parallelism (lua/vrsim/pipeline.lua, sim/cmd_pipeline.c): the stages torchtitan cuts,
# each rank's graph running torch.distributed.pipelining's schedule in order, the memory that
# order makes each rank hold, the step composed with its bubble, and what is refused.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp scenarios/configs/tinyllama-1.1b.json "$tmp/"
field() { python3 -c "import sys,json; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
# TinyLlama's shapes, 6 layers, on two H100s as a 2-stage pipeline
cat > "$tmp/pp.lua" <<EOS
return { hardware = { gpu = "h100", count = 2 }, model = { config = "tinyllama-1.1b.json", layers = 6 },
  training = { micro_batch = 1, seq = 1024, precision = "bf16", steps = 2,
               parallel = { pp = 2, pp_microbatches = 4 } } }
EOS
run() { "$VRSIM" "$tmp/pp.lua" --json --no-files "$@" 2>"$tmp/err"; }
given() { sed "s/pp_microbatches = 4/pp_microbatches = 4, pp_stage_layers = $1/" "$tmp/pp.lua" > "$tmp/given.lua"; }

# 1. torchtitan's split (_generate_llm_fqn_per_model_part, the embeddings and the norm + head
#    counted as a layer each): 6 layers on 2 stages are 3 + 3; 80 on 4 are 20, 21, 20, 19
got=$(run | field '[r["stage_layers"] for r in d["pipeline"]["ranks"]]')
want="[['0-2 +embed'], ['3-5 +head,loss']]"
if [ "$got" = "$want" ]; then ok "even split of 6 layers over 2 stages: $want"
else bad "6 layers over 2 stages: $got, torchtitan: $want"; fi
got=$(run --set layers=80 --set hidden=256 --set intermediate=512 --set heads=4 --set kv_heads=2 --set seq=64 \
          --set hardware.count=4 --set training.parallel.pp=4 | field '[r["stage_layers"][0] for r in d["pipeline"]["ranks"]]')
want="['0-19 +embed', '20-40', '41-60', '61-79 +head,loss']"
if [ "$got" = "$want" ]; then ok "even split of 80 layers over 4 stages: 20, 21, 20, 19 as torchtitan"
else bad "80 layers over 4 stages: $got, torchtitan: $want"; fi
given "{ 1, 5 }"
got=$("$VRSIM" "$tmp/given.lua" --json --no-files 2>"$tmp/err" | field '[r["stage_layers"] for r in d["pipeline"]["ranks"]]')
if [ "$got" = "[['0-0 +embed'], ['1-5 +head,loss']]" ]; then ok "a given split: 1 and 5 layers"
else bad "given split {1,5}: $got"; fi

# 2. each rank's graph runs its schedule's actions in torch's order (the orders
#    validation/pp_schedules/capture_orders.py captured from torch)
for case in "1F1B 2 4 1" "GPipe 2 4 1" "Interleaved1F1B 2 4 2"; do
  set -- $case
  want=$(awk -F'\t' -v s="$1" -v p="$2" -v m="$3" -v v="$4" '$1 == s && $2 == p && $3 == m && $4 == v { printf "%s|", $6 }' \
         tests/data/pp_schedule_orders.tsv)
  got=$(run --set training.parallel.pp_schedule=$1 | field '"".join(" ".join(r["actions"]) + "|" for r in d["pipeline"]["ranks"])')
  if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "$1 (pp $2, $3 micro-batches): each rank's graph in torch's order"
  else bad "$1: the ranks ran $got; torch: $want"; fi
done

# 3. memory is what the order makes each rank hold. Under 1F1B a rank keeps at most pp - rank
#    micro-batches in flight, so a further micro-batch adds only its receive buffer (PipelineStage
#    makes one per micro-batch and keeps it: 1 x 4096 x 2048 bf16 = 16 MiB), on the first rank (a
#    gradient buffer) as on the last (an activation buffer); under GPipe every forward runs before
#    any backward, and each micro-batch adds its saved activations (over 50 times that)
peaks() { run --set seq=4096 --set training.parallel.pp_schedule=$1 --set training.parallel.pp_microbatches=$2 \
          | field '" ".join(str(r["peak_allocated_bytes"]) for r in d["pipeline"]["ranks"])'; }
set -- $(peaks 1F1B 4) $(peaks 1F1B 5) $(peaks GPipe 4) $(peaks GPipe 5)
d0=$(( $3 - $1 )); d1=$(( $4 - $2 )); g0=$(( $7 - $5 ))
if [ "$d0" = 16777216 ] && [ "$d1" = 16777216 ]; then ok "1F1B: a fifth micro-batch adds one 16 MiB receive buffer on each rank, no activations"
else bad "1F1B: a fifth micro-batch adds $d0 and $d1 bytes (one receive buffer: 16777216)"; fi
if [ "$g0" -gt $((50 * 16777216)) ]; then ok "GPipe: a fifth micro-batch adds its activations on rank 0 ($g0 bytes)"
else bad "GPipe: a fifth micro-batch adds only $g0 bytes on rank 0"; fi
# under FSDP2's mixed precision (mp_fp32, torchtitan's default: fp32 shards, bf16 compute) the
# stages send and receive what the layers compute, bf16: the fifth micro-batch's receive buffer is
# the same 16 MiB, not an fp32 32 MiB (nor an fp32 input that SDPA would not take)
mpeaks() { run --set seq=4096 --set hardware.count=4 --set training.parallel.dp_shard=2 --set precision=mp_fp32 \
           --set training.parallel.pp_microbatches=$1 | field '" ".join(str(r["peak_allocated_bytes"]) for r in d["pipeline"]["ranks"])'; }
set -- $(mpeaks 4) $(mpeaks 5) x x x x
if [ "$#" = 8 ] && [ "$(( $3 - $1 )) $(( $4 - $2 ))" = "16777216 16777216" ]; then ok "mp_fp32: a fifth micro-batch adds one 16 MiB bf16 receive buffer on each rank"
else bad "mp_fp32: peaks with 4 and 5 micro-batches: $* (a fifth adds one bf16 receive buffer: 16777216) $(head -2 "$tmp/err")"; fi

# 4. the step: the bubble shrinks with more micro-batches and with interleaving; the busiest rank
#    is the verdict and every rank's peak is reported
b4=$(run | field 'd["pipeline"]["bubble"]')
b8=$(run --set training.parallel.pp_microbatches=8 | field 'd["pipeline"]["bubble"]')
bi=$(run --set training.parallel.pp_schedule=Interleaved1F1B | field 'd["pipeline"]["bubble"]')
if python3 -c "import sys; a,b,c=map(float,sys.argv[1:]); sys.exit(not (0 < b < a and 0 < c < a < 0.5))" "$b4" "$b8" "$bi"; then
  ok "bubble: 1F1B $b4 at 4 micro-batches, $b8 at 8, Interleaved1F1B $bi"
else bad "bubble: 1F1B $b4 at 4, $b8 at 8, Interleaved1F1B $bi"; fi
"$VRSIM" "$tmp/pp.lua" --no-files >"$tmp/out" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "^  step .* bubble .* tokens/s" "$tmp/out" && grep -q "<- busiest" "$tmp/out" \
   && [ "$(grep -c '^     [01]  ' "$tmp/out")" = 2 ]; then ok "text report: a line per rank, the busiest marked, step, bubble and tokens/s"
else bad "text report (exit $rc): $(head -8 "$tmp/out")"; fi

# 5. tensor parallelism inside each stage (torchtitan parallelizes each stage's module first):
#    with sequence parallelism the stage sends its last block's local Shard(1) output, 1/tp of
#    the sequence (1 x 512 x 2048 bf16 = 2 MiB at tp 2, against 4 MiB without), as each receive
#    buffer is; the job's tokens a step count the tensor-parallel group once (4 micro-batches of
#    1 x 1024 = 4096, not 8192); each rank's weights, gradients and optimizer state are its shard
tp2() { run --set hardware.count=4 --set training.parallel.tp=2 "$@"; }
got=$(tp2 | field 'd["pipeline"]["send_bytes"], round(d["pipeline"]["tokens_per_s"] * d["pipeline"]["step_time_ms"] / 1e3), d["pipeline"]["tokens_per_s_per_gpu"] * 4 == d["pipeline"]["tokens_per_s"]')
if [ "$got" = "(2097152, 4096, True)" ]; then ok "tp 2 in each stage: the stage sends 1/tp of the sequence; the job's 4096 tokens a step counted once"
else bad "tp 2 in each stage: (send bytes, tokens a step, per GPU = job / 4) $got, want (2097152, 4096, True)"; fi
tpeaks() { tp2 --set seq=4096 | field '" ".join(str(r["peak_allocated_bytes"]) for r in d["pipeline"]["ranks"])'; }
set -- $(tpeaks) $(peaks 1F1B 4)
if [ "$1" -lt $(( $3 * 2 / 3 )) ] && [ "$2" -lt $(( $4 * 2 / 3 )) ]; then
  ok "tp 2 in each stage: each rank holds its stage's tp shard ($1 and $2 bytes, $3 and $4 without tp)"
else bad "tp 2 in each stage: peaks $1 $2, without tp $3 $4"; fi

# 5b. context parallelism inside each stage (torchtitan's train.py runs pp_schedule.step inside the
#    context_parallel context over the cp mesh, the batch sharded along the sequence before the
#    schedule cuts it): each stage runs the rank's s/cp tokens, so what it sends and each receive
#    buffer is 1 x 512 x 2048 bf16 = 2 MiB at cp 2 (4 MiB under dp_shard 2, the same FSDP2 group
#    size), every rank's peak is below dp_shard 2's, and the job's tokens a step count the cp
#    group's shared sequences once (4 micro-batches of 1024 = 4096)
cp2() { run --set hardware.count=4 --set training.parallel.cp=2 "$@"; }
sd2() { run --set hardware.count=4 --set training.parallel.dp_shard=2 "$@"; }
stg() { field '[d["strategy"], d["pipeline"]["send_bytes"], round(d["pipeline"]["tokens_per_s"] * d["pipeline"]["step_time_ms"] / 1e3)] + [r["peak_allocated_bytes"] for r in d["pipeline"]["ranks"]]'; }
set -- $(cp2 | stg | tr -d "[],'") $(sd2 | stg | tr -d "[],'")
if [ "$1 $2 $3" = "fsdp2 2097152 4096" ] && [ "$7 $8" = "4194304 8192" ] && [ "$4" -lt "$9" ] && [ "$5" -lt "${10}" ]; then
  ok "cp 2 in each stage: the stage sends s/cp (2097152 bytes, 4194304 under dp_shard 2), peaks $4 and $5 (dp_shard 2: $9 and ${10}), 4096 tokens a step"
else bad "cp 2 in each stage: (strategy, send bytes, tokens a step, peaks) $1 $2 $3 $4 $5, dp_shard 2: $6 $7 $8 $9 ${10} $(head -2 "$tmp/err")"; fi
#    GPipe runs the same stages (every forward before any backward); HSDP over dp_replicate 2 x
#    (dp_shard x cp) beside it (torchtitan's ("dp_replicate", "dp_shard_cp") mesh: the shard group
#    is dp_shard x cp, 2 here) runs with the two replicas' 8192 tokens a step
set -- $(cp2 --set training.parallel.pp_schedule=GPipe | stg | tr -d "[],'") \
       $(run --set hardware.count=8 --set training.parallel.cp=2 --set training.parallel.dp_replicate=2 | stg | tr -d "[],'")
if [ "$1 $2 $3" = "fsdp2 2097152 4096" ] && [ "$6 $7 $8" = "fsdp2 2097152 8192" ]; then
  ok "cp 2 under GPipe, and beside HSDP (dp_replicate 2): the stage sends s/cp, 4096 and 8192 tokens a step"
else bad "cp 2 under GPipe / with dp_replicate 2: (strategy, send bytes, tokens a step, peaks) $* $(head -2 "$tmp/err")"; fi
#    the ring's exchanges run on the cp group's link: with 8 heads of 64 over 32768 tokens
#    (16384 a rank, 8388608 k elements) rank 0's 3 layers x 4 micro-batches each receive half
#    the forward k, v all-gather (2 x 2 x 8388608 x 2 bytes over 2 ranks), half the backward's,
#    and the dk, dv pass (2 x 2 x 8388608 x 4): 2415919104 bytes, 51.4 ms at the 47 GB/s a
#    rank's NIC carries (lua/hw/links.lua ib_ndr). With the cp pair on two nodes (gpus_per_node 1)
#    rather than one (2), the rank's busy time grows by that less NVLink's share of it, while
#    FSDP2's collectives off the compute stream stay under 2 ms
lnk() { cp2 --set seq=32768 --set hidden=512 --set intermediate=1024 --set heads=8 --set kv_heads=8 --set gpus_per_node=$1 \
        | field 'round(d["pipeline"]["ranks"][0]["busy_ms"] * 1000), round(d["time_ms"]["communication"] * 1000)' | tr -d "(),"; }
set -- $(lnk 2) $(lnk 1)
if [ $# = 4 ] && [ $(( $3 - $1 )) -ge 38000 ] && [ $(( $3 - $1 )) -le 51400 ] && [ "$4" -lt 2000 ]; then
  ok "cp 2 in each stage: the ring over the network adds $(( $3 - $1 )) us to rank 0's actions (2415919104 bytes at 47 GB/s: 51.4 ms, less NVLink's share)"
else bad "cp 2 in each stage, the ring's link: rank 0 busy (us) and off-stream communication (us), one node then two: $*"; fi

# 6. FSDP2 over dp_shard beside the pipeline (torchtitan's fully_shard on each stage's part, with
#    reshard_after_forward = not pp_enabled; PipelineStage holds every micro-batch's gradients
#    unsharded and perform_reduce_grad reduce-scatters them once): on 8 GPUs (tp 2, pp 2, dp_shard
#    2) each rank keeps its stage's whole tp shard of the parameters all step beside its FSDP
#    shard (at least 1.4 times what the rank holds without FSDP; resharding after forward would
#    hold about half), its AdamW state is halved, and the job's tokens a step are both replicas'
dp2() { run --set hardware.count=8 --set training.parallel.tp=2 "$@"; }
part() { field '[d["breakdown_at_peak"][k] for k in ("parameters", "optimizer_state")] + [round(d["pipeline"]["tokens_per_s"] * d["pipeline"]["step_time_ms"] / 1e3), d["strategy"]]'; }
set -- $(tp2 | part | tr -d "[],'") $(dp2 | part | tr -d "[],'")
if [ "$8" = fsdp2 ] && [ "$5" -gt $(( $1 * 14 / 10 )) ] && [ $(( $6 * 100 / $2 )) -ge 45 ] && [ $(( $6 * 100 / $2 )) -le 55 ] \
   && [ "$7" = 8192 ]; then
  ok "fsdp2 over dp_shard 2 beside the pipeline: the stage stays unsharded all step ($5 bytes of parameters, $1 without FSDP), AdamW state $6 of $2, 8192 tokens a step"
else bad "fsdp2 beside the pipeline: (parameters, optimizer state, tokens a step, strategy) without FSDP $1 $2 $3 $4, with $5 $6 $7 $8"; fi

# 7. dp_replicate beside the pipeline: torchtitan fully_shards each stage over its
#    ["dp_replicate", "fsdp"] mesh (llama3/parallelize.py), so dp_replicate alone is FSDP2 with a
#    shard group of one rank: the rank holds its stage's parameters twice (the one-rank shard and
#    the unsharded copy FSDP2 makes at world size 1) and AdamW state for all of them (the
#    breakdowns at the peak within 0.1 %), and the
#    replicas' gradients are all-reduced once after the schedule (foreach_reduce's all_reduce over
#    the replicate group), so the rank's step after its last action grows by it, more with the
#    pair on two nodes (one NIC a rank) than on one node's NVLink; HSDP (dp_replicate 2 x dp_shard
#    2) adds it after the reduce-scatter of dp_shard 2 alone
rep() { field '[d["strategy"], d["breakdown_at_peak"]["parameters"], d["breakdown_at_peak"]["optimizer_state"], round(d["pipeline"]["tokens_per_s"] * d["pipeline"]["step_time_ms"] / 1e3), round(d["pipeline"]["ranks"][0]["rest_ms"] * 1000)]'; }
set -- $(run | rep | tr -d "[],'") $(run --set hardware.count=4 --set training.parallel.dp_replicate=2 | rep | tr -d "[],'") \
       $(run --set hardware.count=4 --set training.parallel.dp_replicate=2 --set gpus_per_node=1 | rep | tr -d "[],'")
if [ "$6" = fsdp2 ] && [ "$7" -ge $(( $2 * 199 / 100 )) ] && [ "$7" -le $(( $2 * 2 )) ] && [ "$8" -ge $(( $3 * 999 / 1000 )) ] && [ "$8" -le "$3" ] && [ "$9" = 8192 ] && [ "${10}" -gt "$5" ] \
   && [ "${15}" -gt $(( ${10} * 3 / 2 )) ]; then
  ok "dp_replicate 2 beside the pipeline: FSDP2 with a shard of one ($7 bytes of parameters, $2 alone), 8192 tokens a step, the replicate all-reduce after the schedule (${10} us after the last action, $5 without; ${15} us across nodes)"
else bad "dp_replicate 2 beside the pipeline: alone $*"; fi
set -- $(run --set hardware.count=4 --set training.parallel.dp_shard=2 | rep | tr -d "[],'") \
       $(run --set hardware.count=8 --set training.parallel.dp_shard=2 --set training.parallel.dp_replicate=2 | rep | tr -d "[],'")
if [ "$6" = fsdp2 ] && [ "$7" = "$2" ] && [ "$9" = 16384 ] && [ "${10}" -gt "$5" ]; then
  ok "HSDP (dp_replicate 2 x dp_shard 2) beside the pipeline: the shards' all-reduce after the reduce-scatter (${10} us after the last action, $5 with dp_shard 2 alone), 16384 tokens a step"
else bad "HSDP beside the pipeline: dp_shard 2 alone, then with dp_replicate 2: $*"; fi

# 7b. float8 all-gathers beside the pipeline (torchao's enable_fsdp_float8_all_gather): the
#    weight is gathered in float8, but its gradient is in the param dtype, so the unsharded
#    gradients each stage accumulates over the micro-batches, and the one reduce-scatter after the
#    schedule, are as large as with bf16 all-gathers
f8() { run --set hardware.count=4 --set training.parallel.dp_shard=2 --set training.float8.recipe=tensorwise \
          --set training.float8.fsdp_float8_all_gather=$1 | field 'd["breakdown_at_peak"]["gradients"]'; }
set -- $(f8 true) $(f8 false)
if [ "$1" = "$2" ] && [ "$1" -gt 0 ]; then ok "float8 all-gathers beside the pipeline: the accumulated gradients in bf16 ($1 bytes at the peak, as with bf16 all-gathers)"
else bad "float8 all-gathers beside the pipeline: gradients at the peak $1 bytes, with bf16 all-gathers $2"; fi

# 8. refused by name, never dropped: other mesh dimensions, data-parallel strategies beside it,
#    what torch refuses, the split backward (its order is modelled, its graph not yet)
refuse() { # what grep-pattern [scenario] --set...
  what=$1; pat=$2; shift 2
  f="$tmp/pp.lua"
  case "$1" in *.lua) f=$1; shift ;; esac
  "$VRSIM" "$f" --no-files "$@" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q -e "$pat" "$tmp/out"; then ok "refused: $what"
  else bad "$what: exit $rc: $(cat "$tmp/out")"; fi
}
refuse "tp that does not divide the heads" "num_key_value_heads = 4 is not a multiple of tp" --set training.parallel.tp=8 --set hardware.count=16
refuse "strategy fsdp2 beside pp" 'training.strategy = "fsdp2" does not match training.parallel' --set strategy=fsdp2
refuse "1F1B with fewer micro-batches than stages" "Number of microbatches (1) must be greater than or equal to the number of stages (2)" \
       --set training.parallel.pp_microbatches=1
refuse "training.strategy ddp beside pp" 'training.strategy = "ddp" does not match training.parallel' --set hardware.count=4 \
       --set training.parallel.dp_replicate=2 --set strategy=ddp
refuse "FSDP knobs beside pp" "training.zero with pipeline parallelism is not modelled" --set hardware.count=4 --set training.zero.raf=true
refuse "an unknown key" "pp_size is not a key vrsim knows" --set training.parallel.pp_size=2
refuse "a schedule not modelled" 'pp_schedule "ZBVZeroBubble" is not modelled' --set training.parallel.pp_schedule=ZBVZeroBubble
refuse "context parallelism beside a multi-stage schedule" 'cp > 1 beside pp_schedule "Interleaved1F1B" with pipeline parallelism is not modelled' \
       --set hardware.count=4 --set training.parallel.cp=2 --set training.parallel.pp_schedule=Interleaved1F1B
refuse "InterleavedZeroBubble's split backward" "input and weight gradients (I actions) is not built" \
       --set training.parallel.pp_schedule=InterleavedZeroBubble
given "{ 2, 3 }"
refuse "a given split that misses layers" "adds up to 5 layers; the model has 6" "$tmp/given.lua"
refuse "--explain" "--explain is not made for pipeline parallelism" --explain
# the commands that run one plan (one rank) say so instead of answering for rank 0 alone
"$VRSIM" maxbatch "$tmp/pp.lua" >"$tmp/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "simulated by vrsim SCENARIO only" "$tmp/out"; then ok "refused: maxbatch on a pipeline"
else bad "maxbatch on a pipeline: exit $rc: $(cat "$tmp/out")"; fi
"$VRSIM" sweep "$tmp/pp.lua" --set micro_batch=1,2 >"$tmp/out" 2>&1
if [ "$(grep -c "error: pipeline parallelism (training.parallel.pp > 1) is simulated by vrsim SCENARIO only" "$tmp/out")" = 2 ]
then ok "sweep on a pipeline: each point an error naming why"
else bad "sweep on a pipeline: $(cat "$tmp/out")"; fi

# 8. torchtitan's published pipeline runs (tests/data/published_pipeline.tsv): their layouts (TP 8
#    in each stage, FSDP 8 beside the pipeline: over dp_shard x cp in Table 6) run as laid out, each
#    step the 8 data-parallel ranks' 2097152 tokens (Table 5: local batch 32 of 8192 tokens, 8
#    micro-batches of 4, torchtitan's default count: the pipeline degree; Table 6: local batch 8 of
#    32768 x cp tokens over dp_shard = 8 / cp replicas, each sequence split over cp), eager under
#    FSDP2's mixed precision over fp32 shards (mp_fp32, as torchtitan builds them); and as run, with
#    torch.compile of each block and torchao's float8 (tensorwise, float8 all-gathers in FSDP2 and
#    TP) and async tensor parallelism, whose GEMMs, fused kernels and overlapped TP collectives make
#    the step shorter. Each rank's actions, as timed from its own run, add up with what follows them
#    (the reduce-scatter after the schedule, the optimizer) to its step: none counts another's time
#    (the second stage's FSDP all-gathers, which the rank's run starts at the step's start).
#    Tokens/s are not held to the published figure (as run they are outside 15 %: docs/pipeline.md);
#    the peak reserved as run is, within the row's band where it gives one.
n=0
while IFS="$(printf '\t')" read -r id tps mem src args asrun band; do
  case $id in "#"*|"") continue ;; esac
  n=$((n + 1))
  sets=""; for a in $args; do sets="$sets --set $a"; done
  # shellcheck disable=SC2086
  got=$("$VRSIM" tests/data/published_pipeline.lua --json --no-files $sets 2>"$tmp/err" \
        | field '(d["strategy"], d["pipeline"]["pp"], d["gpus"], d["pipeline"]["microbatches"],
                 round(d["pipeline"]["tokens_per_s"] * d["pipeline"]["step_time_ms"] / 1e3),
                 str(round(d["pipeline"]["tokens_per_s_per_gpu"])))')
  eager=$(echo "${got##*, }" | tr -d "')")
  case $got in
    "('fsdp2', 8, 512, 8, 2097152, "*) ok "published $id: runs as laid out (tp 8, pp 8, fsdp2 8, 8 micro-batches, 2097152 tokens a step); tokens/s per GPU, published $tps, vrsim $eager"  ;;
    *) bad "published $id: $got $(head -3 "$tmp/err")" ;;
  esac
  for a in $asrun; do sets="$sets --set $a"; done
  # shellcheck disable=SC2086
  got=$("$VRSIM" tests/data/published_pipeline.lua --json --no-files $sets 2>"$tmp/err" \
        | field '(round(d["pipeline"]["tokens_per_s_per_gpu"]), round(d["peak_reserved_bytes"] / 2**30, 1),
                 any(x.startswith("torch.compile: the partitioner") for x in d["notes"]),
                 any(x.startswith("float8 (torchao, recipe tensorwise)") for x in d["notes"]),
                 any(x.startswith("async tensor parallelism over 8 ranks") for x in d["notes"]),
                 all(r["rest_ms"] > 0 and abs(r["busy_ms"] + r["rest_ms"] - r["own_step_ms"]) < 1e-6 * r["own_step_ms"]
                     for r in d["pipeline"]["ranks"]))')
  case $got in
    "("*", True, True, True, True)")
      ran=$(echo "$got" | tr -d '()' | cut -d, -f1 | tr -d ' ')
      res=$(echo "$got" | cut -d, -f2 | tr -d ' ')
      if [ "$ran" -gt "$eager" ]; then
        ok "published $id as run (compile, float8, async tp): tokens/s per GPU, published $tps, vrsim $ran (eager $eager)"
      else bad "published $id as run: $ran tokens/s per GPU, not above eager's $eager"; fi
      err=$(python3 -c "print('%+.1f' % (100 * ($res / $mem - 1)))")
      if [ "$band" = "-" ]; then
        echo "-    published $id as run: peak reserved $res GiB, published $mem GiB ($err %, printed only)"
      elif python3 -c "import sys; sys.exit(0 if abs($res / $mem - 1) <= $band / 100 else 1)"; then
        ok "published $id as run: peak reserved $res GiB, published $mem GiB ($err %, band $band %)"
      else bad "published $id as run: peak reserved $res GiB, published $mem GiB ($err %, band $band %)"; fi ;;
    *) bad "published $id as run: $got $(head -3 "$tmp/err")" ;;
  esac
done < tests/data/published_pipeline.tsv
[ $n -ge 6 ] || bad "tests/data/published_pipeline.tsv: $n rows"

echo "test_pipeline: $pass passed, $fail failed"
[ $fail = 0 ]
