#!/bin/sh
# tests/bench.sh: replay and scenario speed (a benchmark, not a test; `make bench` runs it).
# Replays the largest trace in validation/traces many times through the caching-allocator model
# and prints allocator events per second: the replay alone (the trace read once and kept in
# memory, as a sweep over allocator settings uses it) and end to end (gunzip + parse + replay).
#   VRSIM=path/to/vrsim  REPEAT=N  TRACE=file  sh tests/bench.sh
set -eu
VRSIM=${VRSIM:-./vrsim}
REPEAT=${REPEAT:-200}
if [ -z "${TRACE:-}" ]; then
    TRACE=$(ls -S validation/traces/*.csv.gz | head -n 1)
fi
[ -x "$VRSIM" ] || { echo "bench.sh: $VRSIM not built (make vrsim)" >&2; exit 2; }
echo "bench: $TRACE, $REPEAT replays, $(nproc) cores, $(uname -m)"
for conf in "" "expandable_segments:True"; do
    label=${conf:-default}
    # vrsim replay --repeat N prints the rate on stderr; the summary on stdout is dropped
    rate=$("$VRSIM" replay "$TRACE" --repeat "$REPEAT" ${conf:+--alloc-conf "$conf"} 2>&1 >/dev/null)
    echo "  $label: $rate"
done

# Scenario wall time, best of three runs: DESIGN.md asks for under a second per scenario.
echo "scenarios (best of 3 wall seconds, --no-files):"
for s in scenarios/*.lua; do
    best=$(python3 - "$VRSIM" "$s" <<'PY'
import subprocess, sys, time
best = None
for _ in range(3):
    t0 = time.time()
    subprocess.call([sys.argv[1], sys.argv[2], "--no-files"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.time() - t0
    best = t if best is None else min(best, t)
print("%.2f" % best)
PY
)
    echo "  $best  $s"
done
