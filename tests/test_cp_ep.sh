#!/bin/sh
# Context parallelism (lua/strategies/cp.lua): each rank runs its s/cp tokens, attention is torch's
# ring attention with its KV exchange on the timeline, FSDP2 shards over dp_shard * cp, and what
# ring attention cannot take is refused by name. Expert parallelism (lua/strategies/ep.lua): E/ep
# experts a rank, torchtitan's all-to-all dispatch and combine around the grouped GEMMs, the
# routing's imbalance knob.
#
#   VRSIM=./vrsim sh tests/test_cp_ep.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-cpep.XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }
run() { _n=$1; shift; "$VRSIM" "$@" >"$TMP/$_n.out" 2>"$TMP/$_n.err"; RC=$?; }
expect() {
  if [ "$RC" -ge 128 ]; then fail "$1: crashed ($RC)" "$(tail -3 "$TMP/$_n.err")"; return; fi
  if [ "$RC" -eq "$2" ] && cat "$TMP/$_n.out" "$TMP/$_n.err" | grep -qE -- "$3"; then ok "$1"
  else fail "$1 (exit $RC, want $2 and /$3/)" "$(cat "$TMP/$_n.out" "$TMP/$_n.err" | head -5)"; fi
}
jf() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
# a one-layer LLaMA-2-7B (32 heads of 128, no GQA) on two H100s, its sequence split over cp 2
cat >"$TMP/cp.lua" <<'EOS'
return { hardware = { gpu = "h100", count = 2 }, model = { size = "7b-l1" },
         training = { seq = 4096, steps = 2, precision = "bf16", parallel = { cp = 2 } } }
EOS

# ---- the knob is listed ----------------------------------------------------------------------
"$VRSIM" fields | sed -n '/^training.parallel /,/^$/p' >"$TMP/fields"
if grep -q "^  cp_rotate_method .*allgather" "$TMP/fields"; then ok "vrsim fields lists training.parallel.cp_rotate_method"
else fail "vrsim fields lacks cp_rotate_method" "$(cat "$TMP/fields")"; fi

# ---- activations: each rank holds its s/cp tokens' ---------------------------------------------
# the same two GPUs as FSDP2 over dp_shard 2 (each rank the whole 8192 tokens) and as cp 2 (FSDP2
# over dp_shard * cp, each rank 4096 of them): the activations at the peak halve
"$VRSIM" "$TMP/cp.lua" --no-files --json --set seq=8192 --set parallel.cp=1 --set parallel.dp_shard=2 >"$TMP/dp.json" 2>&1
"$VRSIM" "$TMP/cp.lua" --no-files --json --set seq=8192 >"$TMP/cp2.json" 2>&1
a1=$(jf "$TMP/dp.json" 'd["breakdown_at_peak"]["activations"]'); a2=$(jf "$TMP/cp2.json" 'd["breakdown_at_peak"]["activations"]')
if python3 -c "import sys; r = $a2 / $a1; sys.exit(0 if 0.45 <= r <= 0.55 else 1)"
then ok "cp 2: activations at the peak $a2 bytes, $a1 without (about 1/cp)"
else fail "cp 2 does not halve the activations: $a2 against $a1"; fi
# tokens: the cp group shares one sequence, so each GPU's share is s/cp and the job's is one
# batch of 8192 a step
if [ "$(jf "$TMP/cp2.json" 'd["strategy"]')" = fsdp2 ] \
   && python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
want = 8192 / (d['step_time_ms'] / 1e3)
sys.exit(0 if abs(d['tokens_per_s'] - want) <= 0.01 * want else 1)" "$TMP/cp2.json"
then ok "cp 2: FSDP2 over dp_shard * cp; the job's tokens/s is one 8192-token sequence a step"
else fail "cp 2: strategy or tokens/s" "$(grep -E '"strategy"|tokens_per_s' "$TMP/cp2.json")"; fi

# ---- ring attention's KV all-gather: on the compute stream, at its size -------------------------
# k and v of the rank's 2048 tokens (32 heads x 128, bf16) are 16 MiB each: the cat is 32 MiB,
# the gathered buffer cp x 32 MiB, in forward and again in backward
"$VRSIM" "$TMP/cp.lua" --out "$TMP/o" --alloc-trace "$TMP/cp.csv" >"$TMP/o.out" 2>&1
got=$(awk -F, '$3 == "alloc" && $7 ~ /layers.0.self_attn.cp_kv_all_gather$/ { print $5; exit }' "$TMP/cp.csv")
python3 - "$TMP/o/trace.json" >"$TMP/ev" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
for e in ev:
    if 'dur' in e and e.get('name', '').startswith('layers.0.self_attn.cp_kv_all_gather'):
        print(e['name'], e.get('tid'), e['dur'])
P
if [ "$got" = 67108864 ] && grep -q "^layers.0.self_attn.cp_kv_all_gather 0 " "$TMP/ev" \
   && grep -q "^layers.0.self_attn.cp_kv_all_gather (backward).backward 0 " "$TMP/ev"
then ok "the KV all-gather: 67108864 bytes gathered, on the compute stream's timeline in forward and backward"
else fail "the KV all-gather: $got bytes" "$(cat "$TMP/ev")"; fi
grep -q "context parallelism over 2 ranks (torch's ring attention, rotate method allgather" "$TMP/o.out" \
  && ok "the notes state context parallelism and its rotate method" \
  || fail "no context-parallelism note" "$(grep notes "$TMP/o.out")"
# alltoall: no all-gather, the k, v passed on cp - 1 times (cp 4: three sends a layer)
"$VRSIM" "$TMP/cp.lua" --set count=4 --set parallel.cp=4 --set parallel.cp_rotate_method=alltoall \
  --out "$TMP/a" >"$TMP/a.out" 2>&1
n=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
names = {e['name'] for e in ev if 'dur' in e}
print(sum(1 for k in names if k.startswith('layers.0.self_attn.cp_kv_send_step')),
      sum(1 for k in names if 'all_gather' in k and 'self_attn.cp' in k))" "$TMP/a/trace.json")
if [ "$n" = "3 0" ]; then ok "cp_rotate_method alltoall at cp 4: three k, v sends a layer, no all-gather"
else fail "alltoall at cp 4: (sends, all-gathers) = $n"; fi
# the ring's work (torch's _templated_ring_attention with the head-tail balancer): step 0 the
# local 1024 x 1024 block causal, each step i > 0 the whole q over half the arriving k, v or half
# of q over all of them, half the block again: 4 x 2 x 32 x 1024 x 1024 x 128 = 34359738368
# FLOPs, the 4096-token sequence's causal attention (2 x 32 x 4096^2 x 128) over the 4 ranks;
# backward 2.5 times that
f=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
steps, bwd = {}, 0
for e in ev:
    n = e.get('name', '')
    if 'dur' not in e or e.get('args', {}).get('step') != 0: continue
    if n.startswith('layers.0.self_attn.cp_step'): steps[n] = e['args']['flops']
    if n == 'layers.0.self_attn.ring_attention.backward': bwd = e['args']['flops']
print(len(steps), len(set(steps.values())), sum(steps.values()), bwd)" "$TMP/a/trace.json")
if [ "$f" = "4 1 34359738368 85899345920" ]; then ok "cp 4: four ring steps of equal FLOPs, 1/cp of the causal attention (34359738368), backward 2.5 times"
else fail "cp 4 ring FLOPs: (steps, distinct, sum, backward) = $f, want 4 1 34359738368 85899345920"; fi
# _SDPAMerger's eager kernels: rank 0's steps are all partial (q's second half: 2097152 elements,
# 16384 rows): (2 + 4 + 32) x 2097152 + 52 x 16384 + the two cats' 16 x (4194304 + 32768) =
# 148176896 bytes in 11 kernels; rank 3's are all whole (i <= r): 38 x 4194304 + 52 x 32768 =
# 161087488 bytes in 9
for r in 0 3; do
  "$VRSIM" "$TMP/cp.lua" --set count=4 --set parallel.cp=4 --set rank=$r --out "$TMP/m$r" >/dev/null 2>&1
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
print(' '.join(sorted({'%d/%d' % (e['args']['bytes'], e['args']['kernels']) for e in ev
                       if 'dur' in e and e['name'].startswith('layers.0.self_attn.cp_merge')})))" "$TMP/m$r/trace.json" >"$TMP/m$r.txt"
done
if [ "$(cat "$TMP/m0.txt")" = 148176896/11 ] && [ "$(cat "$TMP/m3.txt")" = 161087488/9 ]
then ok "the merges' eager kernels: 148176896 bytes in 11 (a partial update, rank 0), 161087488 in 9 (rank 3)"
else fail "the merges' bytes/kernels: rank 0 $(cat "$TMP/m0.txt"), rank 3 $(cat "$TMP/m3.txt")"; fi

# ---- the ring backward's own adds, cats and casts (_templated_ring_attention_backward) ----------
# cp 4, N = 4194304 elements in q and in each of k, v: eager, rank 0 (every later step on q's
# second half): the final casts 18N, zeros, v's copy and the cat 24N, step 0 46N, steps 1-2 a
# dropped k, v cat 8N and 49N each, step 3 49N: 251N in 28 kernels; rank 3 (every later step on
# the first half of k, v: the adds into that half and the cats back) 260N in 31. Compiled, rank 0:
# each step's adds and cats fused into two kernels, no zeros, no dropped cat: 127N in 10. The
# forward's dropped cats (steps 1 and 2) are eager's only
for v in "0 false" "3 false" "0 true"; do
  set -- $v
  "$VRSIM" "$TMP/cp.lua" --set count=4 --set parallel.cp=4 --set rank=$1 --set compile=$2 --out "$TMP/g$1$2" >/dev/null 2>&1
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
w = [e['args'] for e in ev if 'dur' in e and e.get('args', {}).get('step') == 1
     and e['name'] == 'layers.0.self_attn.cp_grad_accumulate.backward']
cats = {e['name'] for e in ev if 'dur' in e and e['name'].startswith('layers.0.self_attn.cp_kv_cat_step')}
print('%d/%d/%d' % (w[0]['bytes'], w[0]['kernels'], len(cats)) if w else 'none')" "$TMP/g$1$2/trace.json" >>"$TMP/gacc.txt"
done
if [ "$(tr '\n' ' ' <"$TMP/gacc.txt")" = "1052770304/28/2 1090519040/31/2 532676608/10/0 " ]
then ok "the ring backward's elementwise work: 251N in 28 kernels (rank 0), 260N in 31 (rank 3), 127N in 10 compiled; the dropped k, v cats eager only"
else fail "the ring backward's elementwise work (bytes/kernels/forward cats)" "$(cat "$TMP/gacc.txt")"; fi

# ---- against the oracle's captures of torch's ring attention (validation/oracle/capture_cp.py) ---
# ranks 0 and 1 of cp 2, Llama-2-7B's shapes cut to two layers, 256 tokens, FSDP2 over the two:
# the live bytes after the build, after step 1's forward and at its peak within 16 KiB of the
# capture's (the batch: the capture makes it afresh each step and context_parallel shards it,
# docs/oracle.md), the ring's workspaces standing for its buffers. Rank 0's merged output comes
# from a torch.cat (every step after the first updates q's second half), so the attention's
# transpose(1, 2).contiguous() copies it, 1 MiB a layer that o_proj keeps; rank 1's does not.
# mp_fp32: the same rank 0 under torchtitan's MixedPrecisionPolicy(bf16, fp32) over the fp32 model
# (fp32 shards, gradients and AdamW states; the ring on the bf16 q, k, v of the gathered parameters)
for n in llama2_7b_l2_bf16_cp2 llama2_7b_l2_bf16_cp2_rank1 llama2_7b_l2_mp_fp32_cp2; do
  python3 validation/oracle/compare.py --quiet --vrsim "$VRSIM" --expect validation/oracle/expected/$n.txt \
    validation/oracle/captures/$n.jsonl.gz validation/oracle/scenarios/$n.lua >"$TMP/$n.cmp" 2>&1
  d=$(grep -E 'after build|after forward|step 1 peak' "$TMP/$n.cmp" | sed -E 's/.*\(([-+]?[0-9]+) bytes\).*/\1/')
  if [ "$(printf '%s\n' "$d" | awk '$1 >= -16384 && $1 <= 16384' | wc -l)" -eq 3 ]; then
    ok "$n: live bytes after build, after forward, at step 1's peak within 16 KiB of the capture's ($(echo $d) B)"
  else fail "$n: live bytes beside the capture's" "$(cat "$TMP/$n.cmp")"; fi
done

# ---- with tensor parallelism: attention on heads/tp, the sequence s/cp/tp between blocks --------
"$VRSIM" "$TMP/cp.lua" --no-files --json --set count=4 --set parallel.tp=2 >"$TMP/tpcp.json" 2>"$TMP/tpcp.err"
if python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
want = 4096 / (d['step_time_ms'] / 1e3)
sys.exit(0 if d['fits'] and abs(d['tokens_per_s'] - want) <= 0.01 * want else 1)" "$TMP/tpcp.json"
then ok "tp 2 x cp 2: runs; the job's tokens/s is one 4096-token sequence a step"
else fail "tp 2 x cp 2" "$(head -3 "$TMP/tpcp.err")"; fi

# ---- under torch.compile the ring's backward stays the ring's ----------------------------------
# the compiled layer's fused kernels move only what they materialize, but the backward's k, v
# all-gather, its dk, dv ring (cp x the fp32 pair: 2 x 2 x 8388608 x 4 = 134217728 bytes at cp 2)
# and its fp32 buffers are NCCL's and the ring's, as in eager: same bytes and workspace either way
for c in false true; do
  "$VRSIM" "$TMP/cp.lua" --set compile=$c --out "$TMP/c$c" --alloc-trace "$TMP/c$c.csv" >/dev/null 2>&1
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
print(' '.join(sorted('%s=%d' % (e['name'].split('.')[-2].split(' ')[0], e['args']['bytes']) for e in ev
                      if 'dur' in e and e.get('args', {}).get('step') == 1
                      and e['name'].startswith('layers.0.self_attn.cp_') and e['name'].endswith('(backward).backward'))))" \
    "$TMP/c$c/trace.json" >"$TMP/c$c.txt"
  awk -F, '$3 == "alloc" && $7 == "layers.0.self_attn.ring_attention.backward" { n += $5 } END { print n + 0 }' \
    "$TMP/c$c.csv" >>"$TMP/c$c.txt"
done
if [ "$(head -1 "$TMP/ctrue.txt")" = "cp_dkv_send=134217728 cp_kv_all_gather=67108864" ] \
   && [ "$(tail -1 "$TMP/ctrue.txt")" = "$(tail -1 "$TMP/cfalse.txt")" ] && [ "$(tail -1 "$TMP/ctrue.txt")" -gt 0 ]
then ok "compile: the ring's backward exchanges keep their bytes (134217728, 67108864) and its workspace ($(tail -1 "$TMP/ctrue.txt") bytes, as eager)"
else fail "compile: the ring's backward" "$(cat "$TMP/cfalse.txt" "$TMP/ctrue.txt")"; fi

# ---- model.repeat_kv: torchtitan's Llama repeats k, v to every query head before SDPA ----------
# Llama 3 8B's 8 key-value heads, one layer, cp 2: the ring gathers 2 x (k, v) of the rank's 2048
# tokens, 8 heads x 128 in bf16 (16777216 bytes), or of all 32 query heads with repeat_kv
# (67108864), which the repeat copies (16777216 bytes each for k and v) make
cat >"$TMP/gqa.lua" <<'EOS'
return { hardware = { gpu = "h100", count = 2 }, model = { layers = 1 },
         training = { seq = 4096, steps = 2, precision = "bf16", parallel = { cp = 2 } } }
EOS
for rk in false true; do
  "$VRSIM" "$TMP/gqa.lua" --set model.config=scenarios/configs/llama-3-8b.json --set model.repeat_kv=$rk \
    --out "$TMP/r$rk" --alloc-trace "$TMP/r$rk.csv" >/dev/null 2>&1
  awk -F, '$3 == "alloc" && ($7 ~ /self_attn.cp_kv_all_gather$/ || $7 ~ /repeat_[kv]$/) && !seen[$7]++ { printf "%s=%s ", $7, $5 }' \
    "$TMP/r$rk.csv" >"$TMP/r$rk.txt"
done
if [ "$(cat "$TMP/rfalse.txt")" = "layers.0.self_attn.cp_kv_all_gather=16777216 " ] \
   && [ "$(cat "$TMP/rtrue.txt")" = "layers.0.repeat_k=16777216 layers.0.repeat_v=16777216 layers.0.self_attn.cp_kv_all_gather=67108864 " ]
then ok "model.repeat_kv: k, v repeated to the 32 query heads, the ring's all-gather 4 x (67108864 bytes against 16777216)"
else fail "model.repeat_kv" "$(cat "$TMP/rfalse.txt"; echo; cat "$TMP/rtrue.txt")"; fi
run rkv "$TMP/gqa.lua" --no-files --set model.config=scenarios/configs/gemma-2-9b.json --set model.repeat_kv=true \
  --set parallel.cp=1 --set count=1
expect "model.repeat_kv on Gemma 2: exit 2 naming it" 2 'model.repeat_kv = true: modelled for the families whose attention is Llama.s .*not for gemma2'

# ---- torchtitan's published context-parallel runs (tests/data/published_cp.tsv): each runs as laid
# out (compile and float8 under FSDP2's mixed precision over fp32 shards, on the 96 GB HBM2e H100 at
# 500 W those runs had); vrsim's tokens/s printed beside the published figure with the median
# |error|, not held to a band here: CP 1 and 2 are within 15 % (tests/test_published.sh holds them),
# CP 4 and 8 not (the growth past cp 2, docs/parallelism.md); vrsim's peak reserved held within 10 %
# of the published memory (torchtitan's max reserved) on every row
grep -v '^#' tests/data/published_cp.tsv | while IFS="$(printf '\t')" read -r id tps mem _src args; do
  sets=""
  for a in $args; do sets="$sets --set $a"; done
  # shellcheck disable=SC2086
  "$VRSIM" scenarios/llama3_8b_cp4_long_context_h100.lua --no-files --json $sets >"$TMP/pub.json" 2>"$TMP/pub.err"
  got=$(jf "$TMP/pub.json" 'round(d["tokens_per_s"] / d["gpus"]) if d["fits"] else "no fit"' 2>/dev/null)
  res=$(jf "$TMP/pub.json" '"%.1f" % (d["peak_reserved_bytes"] / 2**30)' 2>/dev/null)
  case $got in
    ''|"no fit") echo "FAIL published $id: $got $(head -2 "$TMP/pub.err")" ;;
    *) echo "ok   published $id: runs as laid out; tokens/s per GPU, published $tps, vrsim $got ($(python3 -c "print('%+.0f %%' % (100 * ($got / $tps - 1)))"))"
       if python3 -c "import sys; sys.exit(0 if abs($res / $mem - 1) <= 0.10 else 1)"; then
         echo "ok   published $id: peak reserved $res GiB, published $mem GiB ($(python3 -c "print('%+.1f %%' % (100 * ($res / $mem - 1)))"), band 10 %)"
       else echo "FAIL published $id: peak reserved $res GiB, published $mem GiB (band 10 %)"; fi ;;
  esac
done >"$TMP/pub.out"
cat "$TMP/pub.out"
PASS=$((PASS + $(grep -c '^ok' "$TMP/pub.out"))); FAIL=$((FAIL + $(grep -c '^FAIL' "$TMP/pub.out")))
sed -n 's/^ok   published .*(\([-+][0-9]*\) %)$/\1/p' "$TMP/pub.out" | python3 -c "
import statistics, sys
e = [abs(float(x)) for x in sys.stdin.read().split()]
print('     published CP rows: median |error| %.0f %% over %d (not held to a band: the growth past cp 2 '
      'that the ring\'s source does not account for: docs/parallelism.md)' % (statistics.median(e), len(e)))"

# ---- refused by name ---------------------------------------------------------------------------
run amp "$TMP/cp.lua" --no-files --set precision=amp_bf16
expect "cp under autocast: exit 2 naming it" 2 'training.parallel.cp = 2 with precision amp_bf16: not modelled'
run fp32 "$TMP/cp.lua" --no-files --set precision=fp32
expect "cp in fp32: exit 2 naming it" 2 'training.parallel.cp = 2 with precision fp32: not modelled'
run eager "$TMP/cp.lua" --no-files --set attention=eager
expect "cp with eager attention: exit 2 naming it" 2 'training.parallel.cp = 2 with attention = "eager": ring attention replaces F.scaled_dot_product_attention'
run odd "$TMP/cp.lua" --no-files --set seq=4098
expect "a sequence the head-tail balancer cannot cut: exit 2" 2 "training.seq = 4098 is not a multiple of 2 \\* cp = 4"
run rot "$TMP/cp.lua" --no-files --set parallel.cp_rotate_method=ring
expect "an unknown rotate method: exit 2" 2 "unknown rotate method 'ring' \\(one of: allgather, alltoall\\)"
run ddp "$TMP/cp.lua" --no-files --set strategy=ddp
expect "cp beside DDP: exit 2 (torchtitan folds cp into FSDP)" 2 'training.strategy = "ddp" does not match training.parallel'
run inert "$TMP/cp.lua" --no-files --set parallel.cp=1 --set parallel.cp_rotate_method=alltoall
expect "cp_rotate_method without cp: a named note" 0 "training.parallel.cp_rotate_method = alltoall has no effect on this run: cp = 1"
# beside a pipeline the ring runs inside each stage under the single-stage schedules
# (tests/test_pipeline.sh); the multi-stage ones are refused by name
run pp "$TMP/cp.lua" --no-files --set count=4 --set parallel.pp=2 --set layers=4
expect "cp beside a 1F1B pipeline: runs, the ring's note on each stage" 0 "context parallelism over 2 ranks"
run ppi "$TMP/cp.lua" --no-files --set count=4 --set parallel.pp=2 --set layers=4 --set parallel.pp_schedule=Interleaved1F1B
expect "cp beside an interleaved pipeline: exit 2" 2 'cp > 1 beside pp_schedule "Interleaved1F1B" with pipeline parallelism is not modelled'

# ---- expert parallelism (lua/strategies/ep.lua) -------------------------------------------------
# Qwen3-30B-A3B's shapes (128 experts of 768, top 8, hidden 2048), two layers, ep 2 on two H100s:
# S = 4096 tokens x 8 = 32768 token-expert pairs a layer, 128 MiB of bf16 rows
cp scenarios/configs/qwen3-30b-a3b.json "$TMP/"
cat >"$TMP/ep.lua" <<'EOS'
return { hardware = { gpu = "h100", count = 2 }, model = { config = "qwen3-30b-a3b.json", layers = 2 },
         training = { seq = 4096, steps = 2, precision = "bf16", parallel = { ep = 2 } } }
EOS
"$VRSIM" "$TMP/ep.lua" --out "$TMP/e" --alloc-trace "$TMP/ep.csv" >"$TMP/e.out" 2>&1
size() { awk -F, -v n="$2" '$3 == "alloc" && $7 == n { print $5; exit }' "$1"; }
# each rank holds E/ep = 64 experts, whole (ep takes every data-parallel rank: no FSDP shard of
# them), their AdamW state the same size: 64 x 1536 x 2048 bf16
got=$(size "$TMP/ep.csv" "adamw.init model.layers.0.mlp.experts.gate_up_proj")
if [ "$got" = 402653184 ] && ! grep -q "experts.gate_up_proj (shard)" "$TMP/ep.csv"
then ok "ep 2: each rank holds 64 of the 128 experts whole (gate_up_proj's AdamW state 402653184 bytes)"
else fail "ep 2: gate_up_proj's state is $got bytes (want 402653184, unsharded)"; fi
# the dispatch: the counts exchanged, the pairs all-to-all'd, permuted, the grouped GEMMs, unpermuted,
# all-to-all'd back; each all-to-all's backward the gradient's all-to-all
a=$(size "$TMP/ep.csv" layers.0.mlp.ep_dispatch); b=$(size "$TMP/ep.csv" layers.0.mlp.ep_combine)
c=$(size "$TMP/ep.csv" layers.0.mlp.ep_dispatch.backward); p=$(size "$TMP/ep.csv" layers.0.mlp.ep_permute)
if [ "$a" = 134217728 ] && [ "$b" = 134217728 ] && [ "$c" = 134217728 ] && [ "$p" = 134217728 ]
then ok "ep 2, balanced: dispatch, permute, combine and the backward all-to-all each 32768 rows (134217728 bytes)"
else fail "ep 2 buffers: dispatch $a, combine $b, dispatch backward $c, permute $p (want 134217728)"; fi
python3 - "$TMP/e/trace.json" >"$TMP/eev" <<'P2'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
seen = []
for e in ev:
    n = e.get('name', '')
    if 'dur' in e and n.startswith('layers.0.mlp.ep_') and n not in seen:
        seen.append(n)
print(' '.join(seen))
P2
want="layers.0.mlp.ep_count_exchange layers.0.mlp.ep_splits layers.0.mlp.ep_dispatch layers.0.mlp.ep_permuted_indices layers.0.mlp.ep_permute layers.0.mlp.ep_local_offsets layers.0.mlp.ep_unpermute layers.0.mlp.ep_combine layers.0.mlp.ep_combine.backward layers.0.mlp.ep_unpermute.backward layers.0.mlp.ep_permute.backward layers.0.mlp.ep_dispatch.backward"
if [ "$(cat "$TMP/eev")" = "$want" ]; then ok "ep 2: the dispatcher's steps on the timeline in torchtitan's order, forward and backward"
else fail "ep 2 timeline" "$(cat "$TMP/eev")"; fi
grep -q "expert parallelism over 2 ranks (torchtitan's all-to-all token dispatcher around transformers' experts forward): routing balanced" "$TMP/e.out" \
  && ok "the notes state expert parallelism and its routing assumption" || fail "no expert-parallelism note" "$(grep notes "$TMP/e.out")"
# the imbalance knob: the busiest rank receives 1.5 x the pairs; its buffers and step grow with them
"$VRSIM" "$TMP/ep.lua" --no-files --alloc-trace "$TMP/ep15.csv" --set parallel.ep_imbalance=1.5 >"$TMP/e15.out" 2>&1
a=$(size "$TMP/ep15.csv" layers.0.mlp.ep_dispatch); b=$(size "$TMP/ep15.csv" layers.0.mlp.ep_combine)
t1=$("$VRSIM" "$TMP/ep.lua" --no-files --json | python3 -c "import json,sys; print(json.load(sys.stdin)['step_time_ms'])")
t2=$("$VRSIM" "$TMP/ep.lua" --no-files --json --set parallel.ep_imbalance=1.5 | python3 -c "import json,sys; print(json.load(sys.stdin)['step_time_ms'])")
if [ "$a" = 201326592 ] && [ "$b" = 134217728 ] && python3 -c "import sys; sys.exit(0 if $t2 > $t1 else 1)"
then ok "ep_imbalance 1.5: the busiest rank receives 49152 rows (201326592 bytes), sends back 32768; step $t2 ms against $t1"
else fail "ep_imbalance 1.5: dispatch $a, combine $b, step $t2 against $t1"; fi
# refused by name
run epd "$TMP/ep.lua" --no-files --set model.config=scenarios/configs/llama-3-8b.json
expect "ep on a dense model: exit 2" 2 "training.parallel.ep = 2: the model has no mixture-of-experts layers"
run epw "$TMP/ep.lua" --no-files --set count=4
expect "ep short of every data-parallel rank: exit 2 naming efsdp" 2 "FSDP2 of the experts over the 2 ranks ep leaves \(torchtitan's efsdp mesh\) is not modelled yet"
run epi "$TMP/ep.lua" --no-files --set parallel.ep_imbalance=3
expect "an imbalance above ep: exit 2" 2 "ep_imbalance = 3: the busiest rank's share over the mean cannot exceed ep = 2"
run epn "$TMP/ep.lua" --no-files --set parallel.ep_imbalance=0.5
expect "an imbalance below 1: exit 2" 2 "ep_imbalance must be a number >= 1"
run epx "$TMP/ep.lua" --no-files --set parallel.ep=1 --set parallel.ep_imbalance=2
expect "ep_imbalance without ep: a named note" 0 "training.parallel.ep_imbalance = 2 has no effect on this run: ep = 1"

echo "test_cp_ep: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
