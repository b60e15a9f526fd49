#!/bin/sh
# test_ops.sh: the Lua unit tests (tests/ops/test_*.lua: test_ops.lua, what each op of the op
# library allocates and what its backward node keeps; test_rules.lua, the capacity and cuBLAS
# workspace rules, DDP's buckets and more op rules), each run through the vrsim binary as a
# scenario whose checks run as it loads and which prints "<what>: N checks passed".
#
#   VRSIM=./vrsim sh tests/test_ops.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_ops: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
pass=0 failed=0
for f in tests/ops/test_*.lua; do
  out=$("$VRSIM" "$f" --no-files 2>&1)
  rc=$?
  line=$(printf '%s\n' "$out" | grep -E "^[a-z ]+: [0-9]+ checks passed" | head -n 1)
  if [ "$rc" -eq 0 ] && [ -n "$line" ]; then
    echo "ok   $f: $line"
    pass=$((pass + 1))
  else
    echo "FAIL $f: exit $rc"
    printf '%s\n' "$out" | head -n 20 | sed 's/^/       /'
    failed=$((failed + 1))
  fi
done
# models cast through the op library's autocast rule (lua/vrsim/ops/autocast.lua, nn.autocast),
# never by hand: no weight cast cache of their own, no cast to cx.autocast's dtype
hand=$(grep -rnE 'cast_cache|nn\.(cast|to)\(cx, [^,]+, (cx\.autocast|lp)[,)]' lua/models)
if [ -n "$hand" ]; then
  echo "FAIL lua/models: casts by hand where the autocast rule applies (use nn.autocast):"
  printf '%s\n' "$hand" | sed 's/^/       /'
  failed=$((failed + 1))
else
  echo "ok   lua/models: no autocast cast by hand"
  pass=$((pass + 1))
fi
echo "test_ops: $pass passed, $failed failed"
[ "$failed" -eq 0 ]
