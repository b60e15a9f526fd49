#!/bin/sh
# test_tp_compile.sh: torch.compile and float8 beside tensor and pipeline parallelism, as
# torchtitan applies them (parallelize_llama: tensor parallelism, then activation checkpointing,
# then each TransformerBlock compiled; Float8ColwiseParallel / Float8RowwiseParallel /
# PrepareFloat8ModuleInput in the float8 plan): what the partitioner saves of a TP-sharded layer
# (DTensor's collectives are graph nodes it must save), what a checkpointed compiled layer
# recomputes, the float8 all-gather of the sequence-parallel input, and what stays refused.
#
#   VRSIM=./vrsim sh tests/test_tp_compile.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-tpc.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cat > "$tmp/l.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm", count = 2, gpus_per_node = 2 }, model = { arch = "llama2", size = "7b-l4" },
  training = { micro_batch = 1, seq = 1024, precision = "bf16", steps = 2, checkpointing = true, checkpoint_impl = "wrapper",
               parallel = { tp = 2 } } }
EOS
# the saved set the compile note lists: "name [shape] dtype" entries
saved() {
  python3 -c '
import sys, json, re
d = json.load(sys.stdin)
note = [n for n in d["notes"] if n.startswith("torch.compile: the partitioner saves")][0]
body = note[note.index("(") + 1:note.rindex(")")]
for e in body.split(", "):
    m = re.match(r"(.*) \[([0-9x]+)\] (\w+)$", e)
    print(m.group(1), m.group(2), m.group(3), sep="\t")'
}

# 1. compiled under tensor parallelism (tp 2, no checkpointing), a layer saves what compile alone
#    saves of it, with each tensor at its rank's local shape (heads and the intermediate size
#    over tp, the sequence-parallel states over tp along the sequence) and, where compile alone
#    saves a norm's output that a projection reads, the all-gathered input instead: DTensor's
#    all-gather is a node of the traced graph, and the partitioner never recomputes a collective
#    (force_save_collectives), so its output is saved and the norm's is not
"$VRSIM" "$tmp/l.lua" --no-files --json --set training.compile=true --set checkpointing=false \
  --set parallel.tp=1 --set hardware.count=1 2>"$tmp/err" | saved > "$tmp/alone" || bad "compile alone: $(cat "$tmp/err")"
"$VRSIM" "$tmp/l.lua" --no-files --json --set training.compile=true --set checkpointing=false \
  2>"$tmp/err" | saved > "$tmp/tp" || bad "compile under tp: $(cat "$tmp/err")"
got=$(python3 - "$tmp/alone" "$tmp/tp" 2>&1 <<'EOF'
import sys
tp = 2
def rows(f):
    return [l.rstrip("\n").split("\t") for l in open(f) if l.strip()]
alone, under = rows(sys.argv[1]), rows(sys.argv[2])
H, S, I, NH = 4096, 1024, 11008, 32
want = []
for name, shape, dt in alone:
    s = [int(x) for x in shape.split("x")]
    if name.endswith("input_layernorm") or name.endswith("post_attention_layernorm"):
        pass                                  # the all-gathered input, the same (b, s, h)
    elif len(s) >= 2 and s[1] == NH:
        s[1] //= tp                           # heads over tp
    elif s[-1] == I:
        s[-1] //= tp                          # the MLP's intermediate over tp
    elif len(s) == 3 and s[1] == S and s[2] in (H, 1) and not name.startswith("rotary"):
        s[1] //= tp                           # sequence-parallel: rsqrt, o_proj's output, the layer input
    want.append(("x".join(map(str, s)), dt))
got = [(shape, dt) for _, shape, dt in under]
names = " ".join(n for n, _, _ in under)
assert sorted(want) == sorted(got), ("want", sorted(want), "got", sorted(got))
assert "self_attn: all_gather input" in names and "mlp: all_gather input" in names, names
assert "o_proj: reduce_scatter" in names, names
assert "input_layernorm " not in names + " " and "post_attention_layernorm " not in names + " ", names
print("same", len(got))
EOF
)
case $got in
  "same 18") ok "compile under tp 2 saves compile alone's 18 tensors of a layer at local shapes, the gathered inputs for the norms' outputs" ;;
  *) bad "compile under tp: saved set" "$got" ;;
esac

# 2. a checkpointed compiled layer (torchtitan: full AC, then compile) recomputes in backward what
#    backward reads, all-gathers included (the collectives of an AC region are MUST_RECOMPUTE),
#    but not what nothing in backward depends on: the last projection, its reduce-scatter and the
#    residual sum that is the layer's output (the backward graph's dead-code elimination; eager
#    checkpointing's early stop skips the same ops)
"$VRSIM" "$tmp/l.lua" --set training.compile=true --set steps=1 --out "$tmp/ck" >/dev/null 2>"$tmp/err" \
  || bad "compile + checkpointing under tp: $(cat "$tmp/err")"
got=$(python3 - "$tmp/ck/trace.json" <<'EOF'
import sys, json
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
names = {e.get("name", "") for e in ev}
r = lambda n: ("layers.2." + n + " (recompute)") in names
print(r("self_attn: all_gather input"), r("mlp: all_gather input"), r("self_attn.o_proj: reduce_scatter"),
      r("mlp.gate_proj"), r("mlp.down_proj"), r("mlp.down_proj: reduce_scatter"), r("residual_add2"))
EOF
)
if [ "$got" = "True True True True False False False" ]; then
  ok "compiled and checkpointed under tp: backward recomputes the all-gathers and GEMMs it reads, not down_proj, its reduce-scatter, the layer's output"
else bad "compiled checkpointed recomputation under tp: $got"; fi

# 3. compiled under tp with checkpointing: peak memory as eager's (both save the layer inputs
#    only), a shorter step (fused kernels)
e=$("$VRSIM" "$tmp/l.lua" --no-files --json | python3 -c "import sys,json; d=json.load(sys.stdin); print(d['peak_allocated_bytes'], d['step_time_ms'])")
c=$("$VRSIM" "$tmp/l.lua" --no-files --json --set training.compile=true | python3 -c "import sys,json; d=json.load(sys.stdin); print(d['peak_allocated_bytes'], d['step_time_ms'])")
if python3 -c "import sys; e, c = [list(map(float, a.split())) for a in sys.argv[1:]]; assert c[0] <= e[0] and c[1] < e[1]" "$e" "$c"; then
  ok "compiled under tp and checkpointing: peak <= eager's, a shorter step ($e -> $c)"
else bad "compiled under tp: eager $e, compiled $c"; fi

# 4. compiled pipeline stages (pp 2, each stage's blocks compiled): the pipeline's throughput rises
pt() { "$VRSIM" "$tmp/l.lua" --no-files --json --set parallel.tp=1 --set parallel.pp=2 "$@" 2>"$tmp/err" \
  | python3 -c "import sys,json; d=json.load(sys.stdin); print(d['pipeline']['tokens_per_s'])"; }
e=$(pt); c=$(pt --set training.compile=true)
if python3 -c "import sys; assert float(sys.argv[2]) > float(sys.argv[1])" "$e" "$c" 2>/dev/null; then
  ok "compiled pipeline stages: tokens/s $e -> $c"
else bad "compiled pipeline stages: eager $e, compiled $c $(cat "$tmp/err")"; fi

# 5. float8 under tensor parallelism (torchao's Float8ColwiseParallel / Float8RowwiseParallel /
#    PrepareFloat8ModuleInput): the sequence shard is cast to float8 before the all-gather, so the
#    all-gather moves half the bytes of bf16's (1 byte an element), while its backward, a
#    reduce-scatter of the high-precision gradient, moves bf16's
ag() { python3 -c '
import sys, json
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
b = {e["name"]: e["args"]["bytes"] for e in ev if e.get("args", {}).get("step") == 0 and "bytes" in e.get("args", {})}
print(b.get("layers.1.self_attn: all_gather input"), b.get("layers.1.self_attn: all_gather input.backward"),
      b.get("layers.1.mlp: all_gather input"), b.get("layers.1.mlp: all_gather input.backward"))' "$1"; }
"$VRSIM" "$tmp/l.lua" --set steps=1 --set checkpointing=false --out "$tmp/b0" >/dev/null 2>"$tmp/err" || bad "bf16 tp: $(cat "$tmp/err")"
"$VRSIM" "$tmp/l.lua" --set steps=1 --set checkpointing=false --set training.float8.recipe=tensorwise --out "$tmp/f0" \
  >/dev/null 2>"$tmp/err" || bad "float8 tp: $(cat "$tmp/err")"
b=$(ag "$tmp/b0/trace.json"); f=$(ag "$tmp/f0/trace.json")
# (b, s, h) = 1 x 1024 x 4096: bf16 8 MiB, float8 4 MiB
if [ "$b" = "8388608 8388608 8388608 8388608" ] && [ "$f" = "4194304 8388608 4194304 8388608" ]; then
  ok "float8 under tp: the all-gathers move half bf16's bytes ($b -> $f), their backward bf16's"
else bad "float8 all-gather bytes: bf16 $b, float8 $f"; fi

# 6. what float8 under tp saves, compiled without checkpointing: the all-gathered inputs in float8
#    (the collective's output, which the Float8Linears' grad_weight GEMMs read as they are) where
#    bf16 saves them in bf16, and the Rowwise projections' float8 inputs (cast in
#    Float8RowwiseParallel's input function, saved by Float8Linear)
"$VRSIM" "$tmp/l.lua" --no-files --json --set training.compile=true --set checkpointing=false \
  --set training.float8.recipe=tensorwise 2>"$tmp/err" | saved > "$tmp/f8" || bad "float8 compile tp: $(cat "$tmp/err")"
got=$(grep -E "all_gather input|input.float8" "$tmp/f8" | tr '\t' ' ' | sed 's/^layers\.1\.//' | tr '\n' ';')
want="self_attn: all_gather input 1x1024x4096 fp8;self_attn.o_proj.input.float8 1x1024x2048 fp8;mlp: all_gather input 1x1024x4096 fp8;mlp.down_proj.input.float8 1x1024x5504 fp8;"
if [ "$got" = "$want" ]; then ok "float8 under tp, compiled: the gathered inputs saved in float8, the Rowwise inputs' float8 copies saved"
else bad "float8 under tp saved set" "got  $got
want $want"; fi

# 7. refused: a rowwise recipe under tp (torchao's float8 tensor-parallel styles assume tensorwise)
"$VRSIM" "$tmp/l.lua" --no-files --set training.float8.recipe=rowwise >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc = 2 ] && grep -q "training.float8 recipe rowwise with tensor parallelism is not modelled" "$tmp/err"; then
  ok "float8 rowwise under tp: exit 2, named"
else bad "float8 rowwise under tp: exit $rc $(cat "$tmp/err")"; fi

echo "test_tp_compile: $pass passed, $fail failed"
[ $fail = 0 ]
