#!/bin/sh
# The device mesh (training.parallel, lua/vrsim/mesh.lua): torchtitan's degrees checked against
# hardware.count, the data-parallel strategy a layout implies (the same run as the shorthand it
# equals), its process groups placed on the nodes, and every dimension not modelled yet refused
# naming its knob.
#
#   VRSIM=./vrsim sh tests/test_mesh.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-mesh.XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
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
# scn NAME HARDWARE TRAINING: a one-layer Llama scenario
scn() {
  cat >"$TMP/$1.lua" <<EOS
return { hardware = { gpu = "h100", $2 }, model = { size = "7b-l1" },
         training = { seq = 128, steps = 2,
                      $3 } }
EOS
}
# same_run A B: the two runs' JSON agree on everything but the scenario's name and the notes
same_run() {
  python3 - "$TMP/$1.json" "$TMP/$2.json" <<'P'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
diff = [k for k in set(a) | set(b) if k not in ("scenario", "notes") and a.get(k) != b.get(k)]
sys.exit(1 if diff else 0)
P
}

# ---- vrsim fields lists every key of training.parallel ---------------------------------------
"$VRSIM" fields >"$TMP/fields"
missing=""
for k in dp_replicate dp_shard tp cp pp ep pp_schedule pp_microbatches; do
  sed -n '/^training.parallel /,/^$/p' "$TMP/fields" | grep -q "^  $k " || missing="$missing $k"
done
if [ -z "$missing" ] && grep -q "^training.parallel (the device mesh, outermost first pp, dp_replicate, dp_shard, cp, tp" "$TMP/fields"
then ok "vrsim fields lists training.parallel's eight keys and the mesh order"
else fail "vrsim fields: training.parallel lacks$missing" "$(sed -n '/^training.parallel/,/^$/p' "$TMP/fields")"; fi

# ---- a layout is the strategy it implies: the same run as its shorthand -----------------------
# HSDP: dp_replicate 2 x dp_shard (the rest: 8) on 16 GPUs == fsdp2 with shard_group 8
scn hsdp "count = 16" "parallel = { dp_replicate = 2 }"
scn hsdp_short "count = 16" "strategy = \"fsdp2\", zero = { shard_group = 8 }"
"$VRSIM" "$TMP/hsdp.lua" --no-files --json >"$TMP/hsdp.json" 2>"$TMP/hsdp.err"
"$VRSIM" "$TMP/hsdp_short.lua" --no-files --json >"$TMP/hsdp_short.json" 2>&1
if same_run hsdp hsdp_short && grep -q '"strategy":[[:space:]]*"fsdp2"' "$TMP/hsdp.json"
then ok "parallel = { dp_replicate = 2 } on 16 GPUs: dp_shard = -1 is 8, the run of fsdp2 with shard_group 8"
else fail "dp_replicate 2 on 16 differs from fsdp2 + shard_group 8" "$(head -3 "$TMP/hsdp.err")"; fi
# DDP: dp_replicate 4, dp_shard 1 == strategy ddp over 4
scn ddp "count = 4" "parallel = { dp_replicate = 4, dp_shard = 1 }"
scn ddp_short "count = 4" "strategy = \"ddp\""
"$VRSIM" "$TMP/ddp.lua" --no-files --json >"$TMP/ddp.json" 2>&1
"$VRSIM" "$TMP/ddp_short.lua" --no-files --json >"$TMP/ddp_short.json" 2>&1
if same_run ddp ddp_short && grep -q '"strategy":[[:space:]]*"ddp"' "$TMP/ddp.json"
then ok "parallel = { dp_replicate = 4, dp_shard = 1 }: the run of ddp over 4"
else fail "dp_replicate 4 differs from ddp over 4"; fi
# FSDP2: an empty layout on 4 GPUs is dp_shard = 4, fsdp2 over 4
scn fsdp "count = 4" "parallel = {}"
scn fsdp_short "count = 4" "strategy = \"fsdp2\""
"$VRSIM" "$TMP/fsdp.lua" --no-files --json >"$TMP/fsdp.json" 2>&1
"$VRSIM" "$TMP/fsdp_short.lua" --no-files --json >"$TMP/fsdp_short.json" 2>&1
if same_run fsdp fsdp_short && grep -q '"strategy":[[:space:]]*"fsdp2"' "$TMP/fsdp.json"
then ok "parallel = {} on 4 GPUs: dp_shard = 4, the run of fsdp2 over 4"
else fail "parallel = {} on 4 differs from fsdp2 over 4"; fi
# ZeRO over dp_shard: a DeepSpeed stage given beside a layout without replicas is kept
scn z2 "count = 4" "strategy = \"zero2\", parallel = { dp_shard = 4 }"
run z2 "$TMP/z2.lua" --no-files --json
if [ "$RC" -eq 0 ] && grep -q '"strategy":[[:space:]]*"zero2"' "$TMP/z2.out"; then ok "strategy zero2 over parallel.dp_shard = 4 is kept"
else fail "zero2 over dp_shard 4 (exit $RC)" "$(head -3 "$TMP/z2.err")"; fi

# ---- the process groups on the nodes ------------------------------------------------------
run groups "$TMP/hsdp.lua" --no-files
expect "16 GPUs, 8 a node: dp_replicate's 2 ranks are 8 apart on 2 nodes (the network), dp_shard's 8 in one node (NVLink)" 0 \
  "dp_replicate: 2 ranks, stride 8, 1 per node over 2 nodes \(ib_ndr\).*dp_shard: 8 ranks, stride 1, 8 per node over 1 node \(nvlink\)"
grep -q "device mesh \[pp 1, dp_replicate 2, dp_shard 8, cp 1, tp 1\]" "$TMP/groups.out" \
  && ok "the mesh's sizes are stated outermost first (pp, dp_replicate, dp_shard, cp, tp)" \
  || fail "the mesh's sizes are not stated" "$(grep notes "$TMP/groups.out")"
run groups2 "$TMP/hsdp.lua" --no-files --set gpus_per_node=4
expect "4 GPUs a node: dp_shard's 8 ranks are 4 per node over 2 nodes, dp_replicate's 2 on 2 nodes" 0 \
  "dp_replicate: 2 ranks, stride 8, 1 per node over 2 nodes \(ib_ndr\).*dp_shard: 8 ranks, stride 1, 4 per node over 2 nodes \(ib_ndr\)"
run groups3 "$TMP/hsdp.lua" --no-files --set count=32 --set gpus_per_node=16 --set network=roce_400g
expect "32 GPUs, 16 a node: dp_shard (the rest) is 16 in one node, dp_replicate 2 over 2 nodes on the network named" 0 \
  "dp_replicate: 2 ranks, stride 16, 1 per node over 2 nodes \(roce_400g\).*dp_shard: 16 ranks, stride 1, 16 per node over 1 node"

# ---- layouts that are not one: exit 2 naming the knob --------------------------------------
run prod "$TMP/hsdp.lua" --no-files --set parallel.dp_shard=4
expect "a mesh smaller than hardware.count: exit 2 with the product" 2 \
  "--set parallel.dp_shard=4: training.parallel: pp \* dp_replicate \* dp_shard \* cp \* tp = 1 \* 2 \* 4 \* 1 \* 1 = 8, and hardware.count = 16"
scn div "count = 6" "parallel = { dp_replicate = 4 }"
run div "$TMP/div.lua" --no-files
expect "dp_shard = -1 where the rest is no integer: exit 2 at the scenario's line" 2 \
  "div.lua:3: training.parallel: pp \* dp_replicate \* cp \* tp = 4 does not divide hardware.count = 6"
run key "$TMP/hsdp.lua" --no-files --set parallel.tensor=2
expect "an unknown key of training.parallel: exit 2 listing the keys" 2 \
  "training.parallel.tensor is not a key vrsim knows \(one of: cp, dp_replicate, dp_shard, ep, pp, pp_layers_per_stage, pp_microbatches, pp_schedule, pp_stage_layers, tp\)"
scn key2 "count = 2" "parallel = { dp_shrad = 2 }"
run key2 "$TMP/key2.lua" --no-files
expect "an unknown key in the scenario: exit 2 at its line" 2 "key2.lua:3: training.parallel.dp_shrad is not a key"
run zero "$TMP/hsdp.lua" --no-files --set parallel.dp_shard=0
expect "dp_shard = 0: exit 2 (out of range)" 2 "training.parallel.dp_shard = 0 is out of range"
run frac "$TMP/hsdp.lua" --no-files --set parallel.tp=1.5
expect "a fractional degree: exit 2" 2 "training.parallel.tp must be an integer, not 1.5"
run sched "$TMP/hsdp.lua" --no-files --set parallel.pp_schedule=1f1b
expect "an unknown schedule: exit 2 listing torchtitan's" 2 "unknown schedule '1f1b' \(one of: 1F1B, GPipe, Interleaved1F1B"
run strat "$TMP/hsdp.lua" --no-files --set strategy=ddp
expect "a strategy the layout contradicts: exit 2" 2 \
  "training.strategy = \"ddp\" does not match training.parallel \(dp_replicate = 2, dp_shard = 8\), which is fsdp2"
run sg "$TMP/hsdp.lua" --no-files --set zero.shard_group=4
expect "a shard_group other than dp_shard: exit 2" 2 "training.zero.shard_group = 4 and training.parallel.dp_shard = 8"
run mb "$TMP/hsdp.lua" --no-files --set parallel.pp_microbatches=4
expect "a pipeline knob without a pipeline: a named note" 0 \
  "training.parallel.pp_microbatches = 4 has no effect on this run: pp = 1 \(no pipeline\)"

# ---- the dimensions not modelled yet: exit 2 naming each --------------------------------------
for case in "cp=2:context parallelism" "ep=2:expert parallelism" \
            "tp=2:tensor parallelism"; do
  d=${case%%=*}; v=${case#*=}; v=${v%%:*}; what=${case#*:}
  run nm "$TMP/hsdp.lua" --no-files --set "parallel.$d=$v"
  expect "parallel.$d = $v: exit 2, $what not modelled yet" 2 \
    "--set parallel.$d=$v: training.parallel.$d = $v: $what.* is not modelled yet"
done

echo "test_mesh: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
