#!/bin/sh
# test_ops.sh: the op library's unit tests (tests/ops/test_ops.lua: what each op allocates and
# what its backward node keeps), run through the vrsim binary as a scenario whose checks run as
# it loads.
#
#   VRSIM=./vrsim sh tests/test_ops.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_ops: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
out=$("$VRSIM" tests/ops/test_ops.lua --no-files 2>&1)
rc=$?
line=$(printf '%s\n' "$out" | grep "op library:" | head -n 1)
if [ "$rc" -eq 0 ] && printf '%s\n' "$line" | grep -q "checks passed"; then
  echo "ok   $line"
  echo "test_ops: 1 passed, 0 failed"
  exit 0
fi
echo "FAIL exit $rc"
printf '%s\n' "$out" | head -n 20 | sed 's/^/       /'
echo "test_ops: 0 passed, 1 failed"
exit 1
