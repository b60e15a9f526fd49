#!/bin/sh
# test_megatron_pp.sh: training.parallel.pp > 1 under tp_impl = "megatron", Megatron-LM's
# pipeline as megatron-core 0.16.1 runs it (lua/strategies/megatron_pp.lua, and its interleaved
# schedule lua/strategies/megatron_vpp.lua): the captured stages against the oracle's capture of
# megatron-core's own 1F1B and interleaved schedules; the first stage's warm-up micro-batches in
# flight growing with pp, and under the interleaved schedule more of them, each with fewer layers;
# Megatron's micro-batch groups (pp_microbatch_group: the warm-up, the receive rings) against captures;
# what the first and the last stage hold; each output deallocated once sent and each receive a new
# tensor; the batched transfers' synchronize and variable_seq_lengths' shape exchange (captures and
# the step they lengthen); and what it does not model, refused by name.
#   VRSIM=./vrsim sh tests/test_megatron_pp.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-mgpp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
O=validation/oracle
# the captures' scenarios: Llama-3-8B's shapes, 4 layers over pp 2, tp 2, 512 tokens, bf16, 4
# micro-batches; rank 0 (the first stage) and rank 2 (the last); and a middle stage of pp 4; the
# interleaved schedule's at the same layout with 2 model chunks a rank (one layer each)
N=llama3_8b_l4_bf16_megatron_tp2_pp2_m4
NV=llama3_8b_l4_bf16_megatron_tp2_pp2_vp2_m4
# the interleaved schedule with 8 micro-batches in groups of 3 and of 4 (pp_microbatch_group,
# Megatron's microbatch_group_size_per_vp_stage), rank 0 and rank 2
NG=llama3_8b_l4_bf16_megatron_tp2_pp2_vp2_m8_g
# and without overlap_p2p_comm (pp_overlap_p2p_comm = false, --no-overlap-p2p-communication): 8
# layers over pp 4 x vp 2, 8 micro-batches, rank 0 and rank 6
NO=llama3_8b_l8_bf16_megatron_tp2_pp4_vp2_m8_nooverlap
# and with overlap_p2p_comm_warmup_flush (pp_overlap_p2p_warmup_flush = true,
# --overlap-p2p-communication-warmup-flush) at the same layout, rank 0 and rank 6 (and ${NG}4's
# layout with it, ${NG}4_warmflush and _rank2, whose rings have 3 slots)
NW=llama3_8b_l8_bf16_megatron_tp2_pp4_vp2_m8_warmflush
SC=$O/scenarios/$N.lua

# 1. against megatron-core's own schedule (capture_megatron_pp.py, committed), each stage: every
#    allocation aligned but the named divergences, the live bytes after the build, after step 1's
#    schedule and at step 1's peak the capture's to the byte (1F1B's output_tensor local keeps a
#    popped output's [1] placeholder past its backward, and total_num_tokens lives for the
#    schedule: without them 1F1B's stages are 4 or 6 bytes low after the schedule). The middle
#    stage of pp 4 (3 micro-batches: warm-up, steady state and cool-down) peaks inside a
#    column-parallel weight-gradient GEMM, where Megatron has made the reduce-scatter's
#    [s/tp, b, h] output already, as megatron_tp.lua does. The interleaved schedule's two stages
#    (each rank's chunks, received activations and gradients, outputs deallocated twice, the loss
#    seeded with ones_like) likewise, a middle stage of pp 4 with 2 chunks (8 layers, one a
#    chunk), the first stage with selective recompute, the last with full recompute (each chunk's
#    layer a checkpoint), and the first and last stages of tp 2 x pp 2 x dp 2 with Megatron's
#    DistributedDataParallel a chunk and the distributed optimizer; and both stages with
#    micro-batch groups of 3 and 4 above pp 2, whose last stage peaks inside the output layer's
#    weight-gradient GEMM (that reduce-scatter's output live there too), and both stages without
#    overlap_p2p_comm (the last one's peak likewise), and both with the warm-up flush
#    (pp_overlap_p2p_warmup_flush), at pp 4 and with groups of 4 over pp 2; and with
#    variable_seq_lengths (pp_variable_seq_lengths: each transfer's int64 shape tensors matched
#    allocation for allocation) 1F1B's two stages (8 a step), the interleaved schedule's (24 a
#    step), its two stages without overlap_p2p_comm (48 a step) and with the warm-up flush (48 a
#    step, each prefetch a call of its own)
for c in "$N 0" "${N}_rank2 0" "llama3_8b_l4_bf16_megatron_tp2_pp4_m3_rank2 0" "$NV 0" "${NV}_rank2 0" \
         "llama3_8b_l8_bf16_megatron_tp2_pp4_vp2_m4_rank2 0" "${NV}_rc_selective 0" "${NV}_rc_full_uniform_rank2 0" \
         "llama3_8b_l4_bf16_megatron_tp2_pp2_vp2_dp2_m4 0" "llama3_8b_l4_bf16_megatron_tp2_pp2_vp2_dp2_m4_rank6 0" \
         "${NG}3 0" "${NG}3_rank2 0" "${NG}4 0" "${NG}4_rank2 0" "$NO 0" "${NO}_rank6 0" \
         "$NW 0" "${NW}_rank6 0" "${NG}4_warmflush 0" "${NG}4_warmflush_rank2 0" "${N}_varlen 0" "${N}_varlen_rank2 0" \
         "${NV}_varlen 0" "${NV}_varlen_rank2 0" "${NO}_varlen 0" "${NO}_varlen_rank6 0" \
         "${NW}_varlen 0" "${NW}_varlen_rank6 0"; do
  set -- $c; n=$1; peak=$2
  python3 "$O/compare.py" --vrsim "$VRSIM" --expect "$O/expected/$n.txt" "$O/captures/$n.jsonl.gz" \
    "$O/scenarios/$n.lua" >"$tmp/cmp" 2>&1; rc=$?
  # (compare.py prints "(N bytes)" after a milestone where vrsim less its named differs from the
  # capture, nothing where they are equal)
  near=$(grep -E 'after build|after forward|step 1 peak' "$tmp/cmp" | awk -v peak="$peak" '
    { d = 0; if (match($0, /\([-+]?[0-9]+ bytes\)/)) d = substr($0, RSTART + 1, RLENGTH - 8) + 0
      if (/step 1 peak/) { if (d == peak) n++; next }
      if (d == 0) n++ } END { print n + 0 }')
  if [ $rc = 0 ] && [ "$near" = 3 ]; then
    ok "oracle $n: vrsim matches megatron-core's capture (named divergences only; after the build and step 1's schedule to the byte, step 1's peak $([ "$peak" = 0 ] && echo "to the byte" || echo "$peak bytes"))"
  else bad "oracle comparison $n (exit $rc, $near of 3 milestones as wanted)" "$(tail -12 "$tmp/cmp")"; fi
done

# 2. the first stage's warm-up: pp - 1 forwards before its first backward, so min(pp, m)
#    micro-batches' saved activations in flight at once. Rank 0 with 2 layers a stage and 8
#    micro-batches at pp 2 and at pp 4: the schedule's peak above its start grows by two
#    micro-batches' activations (one micro-batch's: the bytes its forward leaves once its output
#    is deallocated), to the 2-byte placeholders of the deallocated outputs
for pp in 2 4; do
  "$VRSIM" "$SC" --no-files --no-suggest --set hardware.count=$((2 * pp)) --set training.parallel.pp=$pp \
    --set model.layers=$((2 * pp)) --set training.parallel.pp_microbatches=8 --alloc-trace "$tmp/pp$pp.csv" \
    >"$tmp/pp$pp.out" 2>&1 || bad "rank 0 at pp $pp" "$(tail -3 "$tmp/pp$pp.out")"
done
if python3 - "$tmp/pp2.csv" "$tmp/pp4.csv" <<'PY'
import csv, sys
def schedule(path):
    """Step 1's schedule on rank 0: the most bytes live above its start, and what one micro-batch
    in flight adds (live once micro-batch 0's output is deallocated, less the start)."""
    live, sizes, starts, peak, one, on, start = 0, {}, 0, 0, None, False, 0
    for ev in csv.DictReader(open(path)):
        f, a, n = ev["frames"], ev["action"], int(ev["size"])
        if a == "alloc":
            live += n; sizes[ev["addr"]] = n
        elif a == "free_requested":
            live -= sizes.pop(ev["addr"], 0)
        if f.startswith("total_num_tokens") and a == "alloc":
            starts += 1
            if starts == 2: start, on = live, True
        if f.startswith("adamw"): on = False
        if on:
            peak = max(peak, live)
            if one is None and f.startswith("deallocate_output_tensor: micro-batch 0") and a == "free_requested":
                one = live - start
    return peak - start, one
(p2, one2), (p4, one4) = schedule(sys.argv[1]), schedule(sys.argv[2])
print(f"one micro-batch in flight {one2} bytes; schedule peak {p2} at pp 2, {p4} at pp 4")
sys.exit(0 if one2 == one4 and one2 > 100 * 2**20 and 0 <= (p4 - p2) - 2 * one2 <= 64 else 1)
PY
then ok "first stage: 2 more warm-up micro-batches in flight at pp 4 than at pp 2 (the peak grows by their saved activations)"
else bad "the first stage's warm-up activations"; fi

# 2b. the interleaved schedule's warm-up (get_pp_rank_microbatches): rank 0 runs (pp - 1) * 2 +
#    (vp - 1) * pp forwards of a chunk before its first backward, and one more in the steady
#    state's first pair: 5 chunks' micro-batches in flight at pp 2 and vp 2, each of 8 / (pp vp) = 2
#    layers, where 1F1B's stage holds 2 micro-batches of 4 layers (and the gradient received for
#    the first backward). So at the first backward the interleaved rank holds 5 of what its chunk
#    0's micro-batch 0 leaves (half a 1F1B micro-batch's), 1F1B 2 of its own: 10 layers' saved
#    activations against 8
for v in 1 2; do
  set -- --set training.parallel.pp_schedule=1F1B
  [ $v = 2 ] && set -- --set training.parallel.pp_schedule=Interleaved1F1B --set training.parallel.pp_virtual_stages=2
  "$VRSIM" "$SC" --no-files --no-suggest --set model.layers=8 --set training.parallel.pp_microbatches=8 "$@" \
    --alloc-trace "$tmp/vp$v.csv" >"$tmp/vp$v.out" 2>&1 || bad "rank 0 with $v model chunks" "$(tail -3 "$tmp/vp$v.out")"
done
if python3 - "$tmp/vp1.csv" "$tmp/vp2.csv" <<'PY'
import csv, sys
S, B, H, TP = 512, 1, 4096, 2
def flight(path):
    """Step 1 on rank 0: the live bytes above the schedule's start as its first backward begins,
    and what micro-batch 0's forward (chunk 0's) leaves once its output is deallocated."""
    live, sizes, starts, on, start, one, at_b = 0, {}, 0, False, 0, None, None
    for ev in csv.DictReader(open(path)):
        f, a, n = ev["frames"], ev["action"], int(ev["size"])
        if f.startswith("total_num_tokens") and a == "alloc":
            starts += 1
            if starts == 2: start, on = live, True
        if on and at_b is None and f.endswith(".backward"): at_b = live - start
        if a == "alloc": live += n; sizes[ev["addr"]] = n
        elif a == "free_requested": live -= sizes.pop(ev["addr"], 0)
        if on and one is None and f.startswith("deallocate_output_tensor") and "micro-batch 0's" in f \
           and "chunk 1" not in f and a == "free_requested":
            one = live - start
    return at_b, one
(a1, o1), (a2, o2) = flight(sys.argv[1]), flight(sys.argv[2])
grad = S // TP * B * H * 2
print(f"1F1B: {a1} bytes in flight at the first backward, {o1} a micro-batch; interleaved: {a2}, {o2} a chunk's")
near = lambda x, y: abs(x - y) <= 64 * 1024
sys.exit(0 if o2 > 100 * 2**20 and near(2 * o2, o1) and near(a1, 2 * o1 + grad) and near(a2, 5 * o2) and a2 > a1 else 1)
PY
then ok "interleaved first stage: 5 chunk micro-batches of 2 layers in flight at its first backward, 1F1B's 2 of 4 (10 layers' activations against 8)"
else bad "the interleaved schedule's warm-up activations"; fi

# 2c. Megatron's data parallelism beside the interleaved schedule: a DistributedDataParallel a
#     model chunk, so a parameter buffer and a grad buffer a chunk, each padded and sharded on its
#     own: their sizes are the capture's buffer rows (rank 0: the embedding's chunk, then layer 2's)
VD=llama3_8b_l4_bf16_megatron_tp2_pp2_vp2_dp2_m4
"$VRSIM" "$O/scenarios/$VD.lua" --no-files --no-suggest --alloc-trace "$tmp/vd.csv" >"$tmp/vd.out" 2>&1 \
  || bad "rank 0 with dp 2 and 2 chunks" "$(tail -3 "$tmp/vd.out")"
if python3 - "$tmp/vd.csv" "$O/captures/$VD.jsonl.gz" <<'PY'
import csv, gzip, json, sys
made = [int(r["size"]) for r in csv.DictReader(open(sys.argv[1]))
        if r["action"] == "alloc" and r["frames"].startswith("_ParamAndGradBuffer: torch.zeros")]
rows = [json.loads(l) for l in gzip.open(sys.argv[2], "rt")]
want = []
for b in (r for r in rows if r["e"] == "buffer"):
    want += [b["param_bytes"], b["grad_bytes"]]
print("vrsim's buffers", made, "the capture's", want)
sys.exit(0 if len(want) == 4 and sorted(made) == sorted(want) and made[:2] != made[2:] else 1)
PY
then ok "dp beside the interleaved schedule: a param and a grad buffer a model chunk, of the capture's sizes"
else bad "the buffers of each chunk's DistributedDataParallel"; fi

# 2d. Megatron's micro-batch groups (pp_microbatch_group = microbatch_group_size_per_vp_stage):
#     get_pp_rank_microbatches runs (pp - rank - 1) * 2 + (vp - 1) * group warm-up forwards, so
#     groups of 3 and 4 at pp 2 run 1 and 2 more than the default group of pp. As the captures
#     count them (the forwards before the first backward_step, the steady state's first one
#     included), and the bytes live above the step's start as that backward begins equal the
#     capture's (to 64 bytes: the last stage's ones_like seed comes before vrsim's first backward
#     op); on rank 0 vrsim's groups of 3 and 4 hold the captures' bytes there, the default group
#     of pp at least one chunk micro-batch's activations less a group
for g in 2 3 4; do
  "$VRSIM" "$O/scenarios/${NG}4.lua" --no-files --no-suggest --set training.parallel.pp_microbatch_group=$g \
    --alloc-trace "$tmp/g$g.csv" >"$tmp/g$g.out" 2>&1 || bad "rank 0 with groups of $g" "$(tail -3 "$tmp/g$g.out")"
done
for n in "${NG}3" "${NG}3_rank2" "${NG}4" "${NG}4_rank2"; do
  "$VRSIM" "$O/scenarios/$n.lua" --no-files --no-suggest --alloc-trace "$tmp/$n.csv" >"$tmp/$n.out" 2>&1 \
    || bad "$n" "$(tail -3 "$tmp/$n.out")"
done
cat >"$tmp/group.py" <<'PY'
import csv, gzip, json, sys
def capture(path):
    """Step 1 of a capture: the forwards run before the first backward_step (the steady state's
    first included), and the bytes live as it begins above the step's start."""
    live, start, seen, fwds = 0, None, 0, set()
    for l in gzip.open(path, "rt"):
        d = json.loads(l)
        if d["e"] == "op": live += sum(n[1] for n in d.get("new", []))
        elif d["e"] == "free": live -= d["b"]
        elif d["e"] == "phase" and d["st"] == 1:
            if start is None: start = live
            if d["ph"] == "fwd": fwds.add(d["mb"])
            # (the warm-up's last send_backward_recv_backward marks bwd 0 first; backward_step next)
            if d["ph"] == "bwd" and d["mb"] == 0:
                seen += 1
                if seen == 2: return len(fwds), live - start
def vrsim(path):
    """Step 1 of vrsim's trace: the bytes live above the step's start at its first backward op."""
    live, sizes, starts, start = 0, {}, 0, None
    for ev in csv.DictReader(open(path)):
        f, a, n = ev["frames"], ev["action"], int(ev["size"])
        if f.startswith("total_num_tokens") and a == "alloc":
            starts += 1
            if starts == 2: start = live
        if start is not None and f.endswith(".backward"): return live - start
        if a == "alloc": live += n; sizes[ev["addr"]] = n
        elif a == "free_requested": live -= sizes.pop(ev["addr"], 0)
PY
if python3 - "$tmp" "$O" "$NG" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
from group import capture, vrsim
tmp, O, NG = sys.argv[1:4]
good = True
for g in (3, 4):
    for rank, suf in ((0, ""), (1, "_rank2")):
        n = f"{NG}{g}{suf}"
        fwds, held = capture(f"{O}/captures/{n}.jsonl.gz")
        mine = vrsim(f"{tmp}/{n}.csv")
        note = open(f"{tmp}/{n}.out").read()
        warm = (2 - rank - 1) * 2 + g
        print(f"{n}: the capture's {fwds - 1} warm-up forwards (vrsim's note: "
              f"{f'{warm} warm-up forwards' in note}), {held} bytes at the first backward, vrsim {mine}")
        good &= fwds - 1 == warm and f"{warm} warm-up forwards of 16 virtual micro-batches" in note \
                and abs(mine - held) <= 64
at = {g: vrsim(f"{tmp}/g{g}.csv") for g in (2, 3, 4)}
one = at[3] - at[2]
print("rank 0 at the first backward, groups of 2, 3, 4:", at[2], at[3], at[4])
good &= one > 50 * 2**20 and at[4] - at[3] >= one and at[4] == capture(f"{O}/captures/{NG}4.jsonl.gz")[1] \
        and at[3] == capture(f"{O}/captures/{NG}3.jsonl.gz")[1]
sys.exit(0 if good else 1)
PY
then ok "micro-batch groups of 3 and 4 over pp 2: the captures' warm-up forwards (5, 3; 6, 4) and bytes at the first backward; each group above pp at least one chunk micro-batch more in flight on rank 0"
else bad "the warm-up of micro-batch groups"; fi

# 2e. the receive rings: fwd_recv_buffer on the first rank and bwd_recv_buffer on the last have
#     group - pp + 1 slots, and a slot keeps its received tensor until it is cleared or rewritten.
#     On the last stage with groups of 4 the gradients received for chunk 0's micro-batches 5 and
#     6 stay in the ring past their cool-down backwards, until the schedule returns: the bytes
#     live after the last backward less those after the schedule are the capture's (8 MiB and
#     the 4-byte total_num_tokens), where a ring of one slot would have let those two go (4 MiB
#     less); groups of 3 and the default keep the capture's too
cat >>"$tmp/group.py" <<'PY'
def capture_end(path):
    """Step 1: the bytes live after the last backward less those after the schedule."""
    live, last, after = 0, None, None
    for l in gzip.open(path, "rt"):
        d = json.loads(l)
        if d["e"] == "op": live += sum(n[1] for n in d.get("new", []))
        elif d["e"] == "free": live -= d["b"]
        elif d["e"] == "phase" and d["st"] == 1 and d["ph"] == "bwd": last = live
        elif d["e"] == "step" and d["st"] == 1: after = d["after_fwd"]
    return last - after
def vrsim_end(path):
    """The same of vrsim's trace: from after the last backward (before the cool-down's last
    output_tensor_grad or bwd_recv_buffer rebinding or the function's return, whichever comes
    first) to after the schedule (the decoder.input_tensor pairs kept)."""
    sizes, live, steps, mark, after = {}, 0, -1, None, None
    for ev in csv.DictReader(open(path)):
        a, f, n = ev["action"], ev["frames"], int(ev["size"])
        if a == "alloc" and f.startswith("total_num_tokens"): steps += 1
        if steps == 1 and f.endswith(".backward"): mark = None
        if steps == 1 and mark is None and a == "free_requested" and f.startswith(
                ("output_tensor_grad rebound", "bwd_recv_buffer", "output_tensor rebound",
                 "forward_backward_pipelining_with_interleaving returns")):
            mark = live
        if a == "alloc": sizes[ev["addr"]] = n; live += n
        elif a == "free_requested": live -= sizes.pop(ev["addr"], 0)
        if steps == 1 and f.endswith("decoder.input_tensor kept into the next step"): after = live
    return mark - after
PY
"$VRSIM" "$O/scenarios/${NV}_rank2.lua" --no-files --no-suggest --alloc-trace "$tmp/${NV}_rank2.csv" >/dev/null 2>&1
# (and with the warm-up flush, whose last rank's cool-down receives go to that ring too)
for n in "${NG}4_warmflush" "${NG}4_warmflush_rank2"; do
  "$VRSIM" "$O/scenarios/$n.lua" --no-files --no-suggest --alloc-trace "$tmp/$n.csv" >/dev/null 2>&1
done
if python3 - "$tmp" "$O" "$NG" "$NV" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from group import capture_end, vrsim_end
tmp, O, NG, NV = sys.argv[1:5]
good = True
for n in (f"{NG}4_rank2", f"{NG}3_rank2", f"{NG}4", f"{NV}_rank2", f"{NG}4_warmflush", f"{NG}4_warmflush_rank2"):
    c, v = capture_end(f"{O}/captures/{n}.jsonl.gz"), vrsim_end(f"{tmp}/{n}.csv")
    print(f"{n}: after the last backward, {c} bytes above the schedule's end in the capture, {v} in vrsim")
    good &= c == v
good &= capture_end(f"{O}/captures/{NG}4_rank2.jsonl.gz") == 4 * 2**21 + 4
sys.exit(0 if good else 1)
PY
then ok "the last stage's bwd_recv_buffer of 3 slots (groups of 4) keeps 2 received gradients past their backwards to the return, as the capture does"
else bad "the receive rings"; fi

# 2f. custom_backward's grad_output: on the last stage each micro-batch's backward is seeded with
#     torch.ones_like(loss), custom_backward's local until run_backward returns, so the 4-byte seed
#     is live through that whole backward, as in the capture (every allocation of the backward
#     made while it lives), not dropped once the engine has used it: the interleaved schedule's
#     loss chunk (one layer) and the non-interleaved 1F1B's last stage (two layers), the same
#     backward_step. The capture counts per layer 5 more outputs than vrsim allocates there (its
#     fake tensors' out-of-place gradient sums and empty_like buffers, less the softmax
#     temporary vrsim names), so the counts agree to 8 a layer
cat >"$tmp/seed.py" <<'PY'
import csv, gzip, json, sys
def vrsim(path):
    """Allocations made while each ones_like seed of step 1 lives."""
    spans, live = [], {}
    for ev in csv.DictReader(open(path)):
        if ev["action"] == "alloc":
            for k in live: live[k] += 1
            if ev["frames"].startswith("custom_backward: grad_output = ones_like"): live[ev["addr"]] = 0
        elif ev["action"] == "free_requested" and ev["addr"] in live:
            spans.append(live.pop(ev["addr"]))
    return spans[len(spans) // 2:]
def capture(path):
    spans, live = [], {}
    for l in gzip.open(path, "rt"):
        d = json.loads(l)
        if d["e"] == "op":
            for n in d.get("new", []):
                for k in live: live[k] += 1
                if d["op"] == "aten.ones_like.default" and n[1] == 4: live[n[0]] = 0
        elif d["e"] == "free" and d["sid"] in live:
            spans.append(live.pop(d["sid"]))
    return spans[len(spans) // 2:]
v, c = vrsim(sys.argv[1]), capture(sys.argv[2])
count, layers = int(sys.argv[3]), int(sys.argv[4])
print("allocations while each ones_like seed of step 1 lives: vrsim", v, "the capture", c)
sys.exit(0 if len(v) == len(c) == count and min(v) > 40 * layers
          and all(abs(x - y) <= 8 * layers for x, y in zip(v, c)) else 1)
PY
if python3 "$tmp/seed.py" "$tmp/${NG}3_rank2.csv" "$O/captures/${NG}3_rank2.jsonl.gz" 8 1
then ok "the loss chunk's ones_like seed lives through its backward (custom_backward's local), as in the capture"
else bad "custom_backward's ones_like seed"; fi
"$VRSIM" "$O/scenarios/${N}_rank2.lua" --no-files --no-suggest --alloc-trace "$tmp/seed1f1b.csv" >"$tmp/seed1f1b.out" 2>&1 \
  || bad "${N}_rank2" "$(tail -3 "$tmp/seed1f1b.out")"
if python3 "$tmp/seed.py" "$tmp/seed1f1b.csv" "$O/captures/${N}_rank2.jsonl.gz" 4 2
then ok "1F1B's last stage: each micro-batch's ones_like seed lives through its backward, as in the capture"
else bad "1F1B's custom_backward ones_like seed"; fi

# 2g. without overlap_p2p_comm the steady state's transfers are batched after each pair and held
#     by the schedule's locals: the overlapped schedule (pp_overlap_p2p_comm = true) diverges from
#     those captures, allocation by allocation (the activations received after the backward)
for n in "$NO" "${NO}_rank6"; do
  sed 's/pp_overlap_p2p_comm = false/pp_overlap_p2p_comm = true/' "$O/scenarios/$n.lua" >"$tmp/overlapped.lua"
  python3 "$O/compare.py" --vrsim "$VRSIM" --expect "$O/expected/$n.txt" "$O/captures/$n.jsonl.gz" \
    "$tmp/overlapped.lua" >"$tmp/cmp" 2>&1; rc=$?
  if [ $rc = 1 ] && grep -q "FAIL" "$tmp/cmp"; then
    ok "$n: the overlapped schedule is not what megatron-core ran without overlap_p2p_comm (compare.py fails it)"
  else bad "$n against the overlapped schedule (exit $rc, want 1)" "$(tail -5 "$tmp/cmp")"; fi
done

# 2h. overlap_p2p_comm_warmup_flush: a rank after the first receives each warm-up activation
#     before the forward ahead of the one that reads it (send_forward_recv_forward(None, ...)), so
#     step 1 opens with two received activations before its first layer runs (the first
#     recv_forward, then the prefetch), as in the capture, where without the flag one is; and the
#     last rank's warm-up receives go through fwd_recv_buffer, never the schedule's input_tensor
#     local: without the flag vrsim keeps chunk 1's first received activation and its .grad to the
#     schedule's return, 4 MiB over the capture at step 1's peak (the same allocations otherwise)
n=${NW}_rank6
"$VRSIM" "$O/scenarios/$n.lua" --no-files --no-suggest --alloc-trace "$tmp/wf.csv" >"$tmp/wf.out" 2>&1 \
  || bad "$n" "$(tail -3 "$tmp/wf.out")"
sed 's/, pp_overlap_p2p_warmup_flush = true//' "$O/scenarios/$n.lua" >"$tmp/noflush.lua"
"$VRSIM" "$tmp/noflush.lua" --no-files --no-suggest --alloc-trace "$tmp/noflush.csv" >"$tmp/noflush.out" 2>&1 \
  || bad "$n without the flush" "$(tail -3 "$tmp/noflush.out")"
if python3 - "$tmp/wf.csv" "$tmp/noflush.csv" "$O/captures/$n.jsonl.gz" <<'PY'
import csv, gzip, json, sys
RECV = 512 // 2 * 1 * 4096 * 2   # [s/tp, b, h] bf16
def vrsim(path):
    """Received activations allocated in step 1 before its first layer's first allocation."""
    starts, n = 0, 0
    for ev in csv.DictReader(open(path)):
        f = ev["frames"]
        if ev["action"] != "alloc": continue
        if f.startswith("total_num_tokens"): starts += 1
        elif starts == 2:
            if f.startswith("decoder.layers"): return n
            if f.startswith("recv activation") and int(ev["size"]) == RECV: n += 1
def capture(path):
    on, n = False, 0
    for ev in map(json.loads, gzip.open(path, "rt")):
        if ev.get("e") == "phase" and ev.get("st") == 1 and ev["ph"] == "fwd": on = True
        if on and ev.get("e") == "op" and ev.get("new"):
            if "decoder.layers" in (ev.get("m") or ""): return n
            if ev["op"] == "aten.empty.memory_format" and ev["new"][0][1] == RECV: n += 1
w, p, c = vrsim(sys.argv[1]), vrsim(sys.argv[2]), capture(sys.argv[3])
print(f"received before step 1's first layer: capture {c}, vrsim {w} with the flush, {p} without")
sys.exit(0 if c == w == 2 and p == 1 else 1)
PY
then ok "$n: the warm-up's next activation is received before the forward ahead (two receives before step 1's first layer, as in the capture; one without the flag)"
else bad "$n: the warm-up flush's prefetch"; fi
python3 "$O/compare.py" --vrsim "$VRSIM" --expect "$O/expected/$n.txt" "$O/captures/$n.jsonl.gz" "$tmp/noflush.lua" \
  >"$tmp/cmp" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "step 1 peak.*(+4194304 bytes)" "$tmp/cmp"; then
  ok "$n: without the flag vrsim is 4 MiB over megatron-core's step-1 peak (the input_tensor local's activation and .grad)"
else bad "$n against the schedule without the flush (exit $rc, want +4194304 bytes at step 1's peak)" "$(tail -5 "$tmp/cmp")"; fi

# 3. what each stage holds: the first the embedding (its weight's Adam state) and no output
#    layer; the last the output layer, its fp32 logits (s x b x vocab/tp) and the cross-entropy,
#    no embedding
"$VRSIM" "$O/scenarios/${N}_rank2.lua" --no-files --no-suggest --alloc-trace "$tmp/last.csv" >"$tmp/last.out" 2>&1 \
  || bad "rank 2" "$(tail -3 "$tmp/last.out")"
if python3 - "$tmp/pp2.csv" "$tmp/last.csv" <<'PY'
import csv, sys
S, B, V, TP = 512, 1, 128256, 2
def frames(path):
    return [(ev["frames"], int(ev["size"])) for ev in csv.DictReader(open(path)) if ev["action"] == "alloc"]
first, last = frames(sys.argv[1]), frames(sys.argv[2])
has = lambda fs, key: any(key in f for f, _ in fs)
logits = [n for f, n in last if f == "output_layer: logits.float()"]
ok = (has(first, "adamw.init module.embedding.word_embeddings.weight") and not has(first, "output_layer")
      and not has(first, "cross_entropy")
      and has(last, "adamw.init module.output_layer.weight") and not has(last, "word_embeddings")
      and has(last, "cross_entropy") and logits and set(logits) == {S * B * V // TP * 4})
print("last stage's fp32 logits:", sorted(set(logits)))
sys.exit(0 if ok else 1)
PY
then ok "the first stage holds the embedding and no output layer; the last the output layer, its fp32 logits and the loss, no embedding"
else bad "what each stage holds"; fi

# 4. the schedule's tensors on the last stage: each micro-batch's activation received into a new
#    [s/tp, b, h] bf16 tensor (4 a step), each output (the loss) deallocated once sent; on the
#    first stage each deallocation frees the 2 MiB [s/tp, b, h] output
if python3 - "$tmp/last.csv" "$tmp/pp2.csv" <<'PY'
import csv, sys
S, B, H, TP = 512, 1, 4096, 2
def rows(path): return list(csv.DictReader(open(path)))
last, first = rows(sys.argv[1]), rows(sys.argv[2])
recv = [int(r["size"]) for r in last if r["action"] == "alloc" and r["frames"].startswith("recv activation")]
sizes = {}
freed = []
for r in first:
    if r["action"] == "alloc": sizes[r["addr"]] = int(r["size"])
    elif r["action"] == "free_requested" and r["frames"].startswith("deallocate_output_tensor") \
         and not r["frames"].endswith(".backward"):
        freed.append(sizes.get(r["addr"]))
print("received", recv[:4], "first stage's deallocations free", sorted(set(freed)))
sys.exit(0 if recv == [S // TP * B * H * 2] * 8 and set(freed) == {S // TP * B * H * 2} and len(freed) == 16 else 1)
PY
then ok "receives are new [s/tp, b, h] tensors (4 a step on the last stage); each first-stage output is deallocated once sent (2 MiB each)"
else bad "the receives and deallocations"; fi

# 4b. the transfers' host waits and the shape exchange: 1F1B's batched transfers end with
#    torch.cuda.synchronize() (batch_p2p_sync, Megatron's default), so the step is longer than with
#    it off (the host no longer runs ahead into the next forward or backward); under
#    variable_seq_lengths each transfer is preceded by its shape's exchange (3 int64 on the
#    pipeline link: one more latency a send) and a synchronize and .tolist() of its own
step_of() { "$VRSIM" "$SC" --no-files --no-suggest "$@" 2>&1 | awk '/^  step .*pipeline/ { print $2, $(NF-5) }'; }
nosync=$(step_of --set training.parallel.pp_batch_p2p_sync=false)
sync=$(step_of)
varlen=$(step_of --set training.parallel.pp_variable_seq_lengths=true)
if awk -v a="$nosync" -v b="$sync" -v c="$varlen" 'BEGIN { split(a, x, " "); split(b, y, " "); split(c, z, " ")
     exit !(x[1] < y[1] && y[1] < z[1] && x[2] == y[2] && z[2] > y[2]) }'; then
  ok "batch_p2p_sync's host waits lengthen the step ($nosync -> $sync: step ms, send ms); variable_seq_lengths' shape exchange more, each send one handshake longer ($varlen)"
else bad "the transfers' synchronize and shape exchange (step ms, send ms: off $nosync, on $sync, varlen $varlen)"; fi
# the same on the interleaved schedule without overlap_p2p_comm, whose transfers are batched
SO=$O/scenarios/$NO.lua
nosync=$("$VRSIM" "$SO" --no-files --no-suggest --set training.parallel.pp_batch_p2p_sync=false 2>&1 | awk '/^  step .*pipeline/ { print $2 }')
sync=$("$VRSIM" "$SO" --no-files --no-suggest 2>&1 | awk '/^  step .*pipeline/ { print $2 }')
if awk -v a="$nosync" -v b="$sync" 'BEGIN { exit !(a + 0 > 0 && a < b) }'; then
  ok "interleaved without overlap_p2p_comm: batch_p2p_sync's host waits lengthen the step ($nosync -> $sync ms)"
else bad "the interleaved schedule's batched synchronize (off $nosync, on $sync ms)"; fi

# 5. what is not modelled: exit 2 naming it
refused() { # $1 what, $2 the message's pattern, then arguments
  what=$1; pat=$2; shift 2
  "$VRSIM" "$SC" --no-files "$@" >"$tmp/out" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q "$pat" "$tmp/out"; then ok "$what: exit 2, named"
  else bad "$what: exit $rc" "$(head -3 "$tmp/out")"; fi
}
F='training.parallel.tp_impl = "megatron": '
refused "the zero-bubble interleaved schedule" "${F}training.parallel.pp_schedule = \"InterleavedZeroBubble\": torch.distributed.pipelining's" \
  --set training.parallel.pp_schedule=InterleavedZeroBubble
refused "model chunks under 1F1B" "${F}training.parallel.pp_virtual_stages = 2: Megatron's model chunks run its interleaved schedule" \
  --set training.parallel.pp_virtual_stages=2
I="--set training.parallel.pp_schedule=Interleaved1F1B"
refused "one model chunk under Interleaved1F1B" "${F}training.parallel.pp_virtual_stages = 1 with pp_schedule = \"Interleaved1F1B\"" \
  $I --set training.parallel.pp_virtual_stages=1
refused "layers not a multiple of pp x vp" "${F}6 layers over pp = 2 stages of 2 model chunks" $I --set model.layers=6
refused "fewer micro-batches than pp (interleaved)" "${F}training.parallel.pp_microbatches = 1 under pp_schedule = \"Interleaved1F1B\": .*ValueError" \
  $I --set training.parallel.pp_microbatches=1
refused "micro-batches not a multiple of pp (interleaved)" "${F}training.parallel.pp_microbatches = 3 under pp_schedule = \"Interleaved1F1B\": .*RuntimeError" \
  $I --set training.parallel.pp_microbatches=3
G="--set training.parallel.pp_microbatch_group"
refused "a micro-batch group under pp (interleaved)" "${F}training.parallel.pp_microbatch_group = 1 with pp_microbatches = 4 under pp_schedule = \"Interleaved1F1B\": .*ValueError" \
  $I --set training.parallel.pp_microbatches=4 $G=1
refused "a micro-batch group above the micro-batches (interleaved)" "${F}training.parallel.pp_microbatch_group = 5 with pp_microbatches = 4 under pp_schedule = \"Interleaved1F1B\": .*ValueError" \
  $I --set training.parallel.pp_microbatches=4 $G=5
refused "a last micro-batch group under pp (interleaved)" "${F}training.parallel.pp_microbatch_group = 3 with pp_microbatches = 7 under pp_schedule = \"Interleaved1F1B\": .*RuntimeError .*= 1, is under pp = 2" \
  $I --set training.parallel.pp_microbatches=7 $G=3
refused "a micro-batch group under 1F1B" "training.parallel.pp_microbatch_group = 2 needs Megatron's interleaved pipeline" $G=2
refused "a micro-batch group under torchtitan's pipeline" "training.parallel.pp_microbatch_group = 2 needs Megatron's interleaved pipeline" \
  $I --set training.parallel.tp_impl=dtensor $G=2
refused "no p2p overlap at pp 2" "${F}training.parallel.pp_overlap_p2p_comm = false with pp = 2: Megatron's arguments.py asserts pp > 2" \
  $I --set training.parallel.pp_overlap_p2p_comm=false
refused "pp_overlap_p2p_comm under 1F1B" "training.parallel.pp_overlap_p2p_comm = false needs Megatron's interleaved pipeline" \
  --set training.parallel.pp_overlap_p2p_comm=false
W="--set training.parallel.pp_overlap_p2p_warmup_flush=true"
refused "the warm-up flush without p2p overlap" "training.parallel.pp_overlap_p2p_warmup_flush = true with pp_overlap_p2p_comm = false: Megatron's ModelParallelConfig raises ValueError" \
  $I --set training.parallel.pp_overlap_p2p_comm=false $W
refused "the warm-up flush under 1F1B" "training.parallel.pp_overlap_p2p_warmup_flush = true needs Megatron's interleaved pipeline" $W
refused "the warm-up flush under torchtitan's pipeline" "training.parallel.pp_overlap_p2p_warmup_flush = true needs Megatron's interleaved pipeline" \
  $I --set training.parallel.tp_impl=dtensor $W
refused "pp_virtual_stages under torchtitan's pipeline" "training.parallel: pp_virtual_stages = 2: Megatron's model chunks" \
  $I --set training.parallel.pp_virtual_stages=2 --set training.parallel.tp_impl=dtensor
refused "GPipe under Megatron" "${F}training.parallel.pp_schedule = \"GPipe\": Megatron runs 1F1B" \
  --set training.parallel.pp_schedule=GPipe
refused "an uneven split" "${F}5 layers over pp = 2 stages" --set model.layers=5
refused "torchtitan's per-stage layers" "${F}training.parallel.pp_layers_per_stage / pp_stage_layers" \
  --set training.parallel.pp_layers_per_stage=2
refused "pp_keep_outputs" "${F}training.parallel.pp_keep_outputs" --set training.parallel.pp_keep_outputs=true
refused "batch_p2p_sync under the interleaved schedule's overlap" "training.parallel.pp_batch_p2p_sync = false under the interleaved schedule with pp_overlap_p2p_comm (its default): those transfers are not batched" \
  $I --set training.parallel.pp_batch_p2p_sync=false
refused "variable_seq_lengths not a boolean" "training.parallel.pp_variable_seq_lengths must be true or false, not yes" \
  --set training.parallel.pp_variable_seq_lengths=yes
refused "variable_seq_lengths under torchtitan's pipeline" "training.parallel.pp_variable_seq_lengths = true needs Megatron's pipeline" \
  --set training.parallel.tp_impl=dtensor --set training.parallel.pp_variable_seq_lengths=true

echo "test_megatron_pp: $pass passed, $fail failed"
[ "$fail" = 0 ]
