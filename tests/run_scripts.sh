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
# python3 as the interpreter it starts, linked once into $RUNS/bin ahead of PATH: a version
# manager's shim (pyenv's) runs a shell and `pyenv exec` at every call, some 0.13 s each, and the
# scripts call python3 hundreds of times. The same interpreter, site and packages either way.
py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
if [ -n "$py" ] && [ -x "$py" ] && [ "$py" != "$(command -v python3)" ] && mkdir "$RUNS/bin" &&
   ln -s "$py" "$RUNS/bin/python3"; then
  PATH="$RUNS/bin:$PATH"; export PATH
fi
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
