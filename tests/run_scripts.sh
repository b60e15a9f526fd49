#!/bin/sh
# run_scripts.sh: the shell test scripts named, JOBS at a time (default: the CPUs), each one's
# output held until it ends and then printed whole under its name and time, so that two scripts'
# lines never interleave. Exit status 1 when any script failed, after naming each.
#   VRSIM=build/vrsim JOBS=2 sh tests/run_scripts.sh tests/test_a.sh tests/test_b.sh ...
# Each script makes its own temporaries (mktemp) and writes nothing shared, which is what lets
# them run side by side.
set -u
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
RUNS=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-scripts.XXXXXX") || exit 1
trap 'rm -rf "$RUNS"' EXIT INT TERM
export RUNS
for s in "$@"; do printf '%s\n' "$s"; done |
  xargs -P "$JOBS" -I{} sh -c '
    log="$RUNS/$(basename "$1").log"; t0=$(date +%s)
    sh "$1" >"$log" 2>&1; rc=$?
    { echo "== $1 ($(( $(date +%s) - t0 )) s, exit $rc)"; cat "$log"; } > "$log.done"
    cat "$log.done"
    [ $rc -eq 0 ] || echo "$1" >>"$RUNS/failed"' sh {}
if [ -s "$RUNS/failed" ]; then
  echo "run_scripts: failed:"; sed 's/^/  /' "$RUNS/failed"
  exit 1
fi
echo "run_scripts: $# scripts passed"
