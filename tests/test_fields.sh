#!/bin/sh
# test_fields.sh: `vrsim fields` lists the schema that checks scenarios, and what it lists is
# what --set accepts: every field shown with a default takes that default back through --set.
#
#   VRSIM=./vrsim sh tests/test_fields.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_fields: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-fields.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

"$VRSIM" fields >"$TMP/fields" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q "^training" "$TMP/fields" && grep -q "micro_batch" "$TMP/fields"; then
  ok "vrsim fields lists the sections and their fields ($(grep -c '^  [a-z]' "$TMP/fields") lines)"
else fail "vrsim fields" "$(cat "$TMP/err")"; fi

"$VRSIM" fields --bogus >/dev/null 2>&1
if [ $? -eq 2 ]; then ok "an unknown option exits 2"; else fail "vrsim fields --bogus: expected exit 2"; fi

# section.field=default for the plain-valued training fields: a one-layer model keeps it quick
sets=$(awk '/^[a-z]/ { sec = $1 } sec == "training" && /^  [a-z_]+ +(integer|number|boolean|string) .*\[[^]]*\]$/ {
         match($0, /\[[^]]*\]$/); d = substr($0, RSTART + 1, RLENGTH - 2); print "--set training." $1 "=" d }' "$TMP/fields")
n=$(printf '%s\n' "$sets" | grep -c . )
# shellcheck disable=SC2086
"$VRSIM" scenarios/llama7b_h200.lua --no-files --set model.size=7b-l1 --set seq=128 $sets >"$TMP/run" 2>&1
rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ]; then ok "every listed training default ($n fields) is accepted by --set"
else fail "listed defaults through --set: exit $rc" "$(head -n 3 "$TMP/run")"; fi

# the field that states an NVLink bridge between two cards sold without NVLink is listed, with
# its default (none fitted), and takes that default back through --set
if awk '/^[a-z]/ { sec = $1 } sec == "hardware" && /^  nvlink_bridge +boolean .*\[false\]$/ { f = 1 } END { exit !f }' "$TMP/fields"
then
  "$VRSIM" scenarios/llama7b_h200.lua --no-files --set model.size=7b-l1 --set seq=128 \
    --set hardware.nvlink_bridge=false >"$TMP/bridge" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then ok "hardware.nvlink_bridge is listed (boolean, default false) and --set takes it"
  else fail "hardware.nvlink_bridge through --set: exit $rc" "$(head -n 3 "$TMP/bridge")"; fi
else fail "vrsim fields does not list hardware.nvlink_bridge" "$(grep -A3 '^hardware' "$TMP/fields")"; fi

echo "test_fields: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
