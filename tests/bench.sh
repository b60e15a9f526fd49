#!/bin/sh
# tests/bench.sh: vrsim's speed (a benchmark, not a test; `make bench` runs it).
#
# The machines this runs on are shared and noisy, so every figure is printed twice: absolute, and
# as a ratio against a fixed reference run timed in the same invocation (gunzip of the largest
# trace, best of 5: work that no change to vrsim changes). A ratio moves only when vrsim does;
# compare ratios between runs, and absolute figures with the goals of docs/validation.md:
#   replay       allocator events per second of the largest trace (goal 10 million), the trace
#                read once (--repeat), and end to end (gunzip + parse + replay)
#   70B/64       LLaMA2-70B ZeRO-3 on 64 GPUs, one whole process (goal under 50 ms)
#   headline     vrsim scenarios/llama13b_zero2.lua with its files and "what would help" rows
#                (goal under 0.3 s)
#   sweep        a 1,000-point sweep, micro-batch x GPU x strategy, every point simulated op by
#                op through the allocator (goal 500 points/s on two cores), and what one point
#                costs on one worker when it builds its graph and when it reuses one
#   scenarios    every scenario, --no-files, best of 3
#   instructions with INSTR=1 (and valgrind): instruction counts, which no machine's noise
#                moves, of a 100-point sweep's points (micro-batches 1-2 of the sweep above, one
#                worker; every point's child from the moment it gets its point), of the 70B run
#                and of the headline without files: compare them between two builds
# The figures then go into docs/speed.md's speed table (the block between `<!-- BEGIN speed (make
# bench) -->` and `<!-- END speed -->`), with the date and the machine; README= leaves it be.
#   VRSIM=path/to/vrsim  REPEAT=N  TRACE=file  SWEEP=0 (skip the sweep)  README=file  INSTR=1
#   sh tests/bench.sh
set -eu
VRSIM=${VRSIM:-./vrsim}
REPEAT=${REPEAT:-200}
SWEEP=${SWEEP:-1}
README=${README-docs/speed.md}
if [ -z "${TRACE:-}" ]; then
    TRACE=$(ls -S validation/traces/*.csv.gz | head -n 1)
fi
[ -x "$VRSIM" ] || { echo "bench.sh: $VRSIM not built (make vrsim)" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM

# best N CMD...: the best wall time of N runs of CMD (output dropped), in seconds
best() {
    python3 - "$@" <<'PY'
import subprocess, sys, time
n = int(sys.argv[1]); cmd = sys.argv[2:]
b = None
for _ in range(n):
    t0 = time.perf_counter()
    subprocess.call(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.perf_counter() - t0
    b = t if b is None else min(b, t)
print("%.4f" % b)
PY
}
ratio() { python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$1" "$2"; }

REF=$(best 5 sh -c "gzip -dc '$TRACE' > /dev/null")
echo "bench: $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "reference: gunzip of $TRACE, best of 5: ${REF} s (ratios below are figure / reference)"

for conf in "" "expandable_segments:True"; do
    label=${conf:-default}
    # vrsim replay --repeat N prints the rate on stderr; the summary on stdout is dropped
    rate=$("$VRSIM" replay "$TRACE" --repeat "$REPEAT" ${conf:+--alloc-conf "$conf"} 2>&1 >/dev/null)
    m=$(echo "$rate" | sed -n 's/.*= \([0-9.]*\) million events\/s.*/\1/p')
    echo "  replay $label: $rate"
    [ -n "$m" ] && echo "    = $(python3 -c "import sys; print('%.3f' % (float(sys.argv[1]) * float(sys.argv[2])))" "$m" "$REF") million events per reference run (goal 10 million events/s)"
    if [ "$label" = default ]; then REPLAY=$m; else REPLAY_EXP=$m; fi
done

t=$(best 10 "$VRSIM" scenarios/llama70b_zero3_offload.lua --set count=64 --no-files)
T70=$t
echo "  70B ZeRO-3 on 64 GPUs: $(ratio "$t" 0.001) ms whole process, best of 10 ($(ratio "$t" "$REF") x reference; goal 0.050 s)"
t=$(best 5 "$VRSIM" scenarios/llama13b_zero2.lua --out "$TMP/headline")
THEAD=$t
echo "  headline with files and suggestions: $t s, best of 5 ($(ratio "$t" "$REF") x reference; goal 0.3 s)"
t=$(best 5 "$VRSIM" scenarios/llama13b_zero2.lua --no-files)
echo "  headline --no-files: $t s, best of 5 ($(ratio "$t" "$REF") x reference)"

if [ "$SWEEP" != 0 ]; then
    # 20 micro-batches x 10 GPUs x 5 strategies on 8 ranks = 1,000 points
    t=$(best 1 "$VRSIM" sweep scenarios/llama7b_h200.lua --set micro_batch=1..20 \
        --set gpu=a10g,rtx3090,rtx4090,a100_40g,l40s,rtx_a6000,a100_80g,h100_pcie,h100_sxm,h200 \
        --set strategy=ddp,zero1,zero2,zero3,fsdp2 --set count=8 -j "$(nproc)" --no-files)
    pps=$(python3 -c "import sys; print('%.0f' % (1000 / float(sys.argv[1])))" "$t")
    TSWEEP=$t
    echo "  sweep, 1,000 points (micro-batch x GPU x strategy), -j $(nproc): $t s, $pps points/s" \
         "($(ratio "$t" "$REF") x reference; goal 500 points/s)"
    # what one point costs, on one worker: (a) every point a graph of its own (40 micro-batches
    # on one GPU); (b) the 7 GPUs that share a graph (no Hopper: its fused attention differs) x
    # 20 micro-batches, GPU fastest: 20 graphs built, 120 points on a graph already built, whose
    # cost is (b) less 20 points of (a)
    ta=$(best 3 "$VRSIM" sweep scenarios/llama7b_h200.lua --set micro_batch=1..40 --set gpu=h200 \
         --set strategy=zero2 --set count=8 -j 1 --no-files)
    tb=$(best 3 "$VRSIM" sweep scenarios/llama7b_h200.lua --set micro_batch=1..20 \
         --set gpu=a10g,rtx3090,rtx4090,a100_40g,l40s,rtx_a6000,a100_80g \
         --set strategy=zero2 --set count=8 -j 1 --no-files)
    python3 - "$ta" "$tb" <<'PY'
import sys
ta, tb = float(sys.argv[1]), float(sys.argv[2])
fresh = ta / 40
reused = (tb - 20 * fresh) / 120
print("  one point, -j 1: %.1f ms when it builds its graph (40 micro-batches: %.3f s), %.1f ms on a"
      " graph built already (7 GPUs x 20 micro-batches: %.3f s, less 20 builds)" % (fresh * 1e3, ta, reused * 1e3, tb))
PY
fi

# instrs OUT CMD...: the instructions of CMD and of every process it forks (callgrind, each
# process counted from where collection starts: with --toggle-collect, inside that function)
instrs() {
    _d=$(mktemp -d "$TMP/cg.XXXXXX")
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$_d/cg.%p" "$@" \
        >/dev/null 2>"$_d/log" || true
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$_d/log" | awk '{ s += $1 } END { printf "%.1f", s / 1e6 }'
}
if [ "${INSTR:-0}" = 1 ]; then
    if command -v valgrind >/dev/null 2>&1; then
        echo "instructions (valgrind --tool=callgrind; M = million):"
        n=$(instrs --toggle-collect=points_run_feed "$VRSIM" sweep scenarios/llama7b_h200.lua \
            --set micro_batch=1..2 \
            --set gpu=a10g,rtx3090,rtx4090,a100_40g,l40s,rtx_a6000,a100_80g,h100_pcie,h100_sxm,h200 \
            --set strategy=ddp,zero1,zero2,zero3,fsdp2 --set count=8 -j 1 --no-files)
        echo "  sweep of 100 points (micro-batches 1-2 of the sweep above), the points: $n M"
        echo "  70B ZeRO-3 on 64 GPUs, whole process: $(instrs "$VRSIM" scenarios/llama70b_zero3_offload.lua --set count=64 --no-files) M"
        echo "  headline --no-files: $(instrs "$VRSIM" scenarios/llama13b_zero2.lua --no-files) M"
        # 80 checkpointed layers, 16 micro-batches: the derivation's early-stop bookkeeping per
        # recomputed region (once quadratic in the depth)
        echo "  70B FSDP2, 80 checkpointed layers, grad_accum 16: $(instrs "$VRSIM" scenarios/llama70b_fsdp2_16x8_h100.lua \
            --set checkpointing=true --set grad_accum=16 --no-files) M"
    else
        echo "instructions: skipped (INSTR=1 needs valgrind: apt-get install -y valgrind)"
    fi
fi

echo "scenarios (best of 3 wall seconds, --no-files; x reference):"
for s in scenarios/*.lua; do
    t=$(best 3 "$VRSIM" "$s" --no-files)
    echo "  $t  $(ratio "$t" "$REF")  $s"
done

# README.md's speed table: this run's figures
if [ -n "$README" ] && [ -f "$README" ]; then
    if ! grep -q '^<!-- BEGIN speed (make bench) -->$' "$README" || ! grep -q '^<!-- END speed -->$' "$README"; then
        echo "bench.sh: $README has no speed block" >&2; exit 1
    fi
    python3 - "$REF" "${REPLAY:-}" "${REPLAY_EXP:-}" "$T70" "$THEAD" "${TSWEEP:-}" "$(nproc)" "$(uname -m)" \
        > "$TMP/speed" <<'PY'
import sys, time
ref, replay, replay_exp, t70, thead, tsweep, cores, arch = sys.argv[1:9]
ref = float(ref)
rows = []
if replay:
    rows.append(("replay, the largest trace (PyTorch's default settings)", "%.1f M events/s" % float(replay),
                 "%.2f" % (float(replay) * ref), "10 M events/s"))
if replay_exp:
    rows.append(("replay, expandable segments", "%.1f M events/s" % float(replay_exp), "", ""))
rows.append(("LLaMA2-70B ZeRO-3 on 64 GPUs, whole process", "%.0f ms" % (float(t70) * 1e3),
             "%.2f" % (float(t70) / ref), "50 ms"))
rows.append(("headline (`scenarios/llama13b_zero2.lua`) with files and \"what would help\"",
             "%.2f s" % float(thead), "%.2f" % (float(thead) / ref), "0.3 s"))
if tsweep:
    rows.append(("sweep of 1,000 points (micro-batch x GPU x strategy), every point simulated",
                 "%.0f points/s" % (1000 / float(tsweep)), "%.2f" % (float(tsweep) / ref), "500 points/s"))
print("`make bench`, %s, %s cores (%s); the reference is a gunzip of the largest trace, best of 5: %.3f s."
      % (time.strftime("%Y-%m-%d", time.gmtime()), cores, arch, ref))
print("The machines are shared and noisy: compare the ratios between runs (a figure's time over the")
print("reference's; for replay, the million events replayed in the reference's time).")
print()
print("| figure | this run | ratio | goal |")
print("|---|---|---|---|")
for r in rows:
    print("| %s | %s | %s | %s |" % r)
PY
    awk -v content="$TMP/speed" '
        $0 == "<!-- BEGIN speed (make bench) -->" { print; while ((getline l < content) > 0) print l; skip = 1; next }
        $0 == "<!-- END speed -->" { skip = 0 }
        !skip { print }' "$README" > "$TMP/readme" && { cmp -s "$TMP/readme" "$README" || cat "$TMP/readme" > "$README"; }
    echo "bench: $README (speed)"
fi
