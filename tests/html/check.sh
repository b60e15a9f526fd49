#!/bin/sh
# tests/html/check.sh: report.html in a real headless Chromium.
#
#   sh tests/html/check.sh            (from anywhere; VRSIM=path/to/vrsim to test another build)
#
# Generates report.html for a few scenarios (one that fits, one out of memory, one with
# checkpointing) with ./vrsim, loads each in `chromium --headless --dump-dom` and checks that the
# page's script ran to the end without an error (<body data-ok="1">, no data-error), that the
# timeline SVG has its stacked-category paths and the allocated and reserved lines, and that the
# breakdown and segment-map SVGs were drawn. Also takes a screenshot of the first page into
# $OUT (default: a temporary folder) when KEEP=1.
#
# It installs nothing. Needs Debian's chromium package (apt-get install -y chromium); without it
# the script prints "skip" and exits 77. The pages are the ones `vrsim SCENARIO --out DIR` writes.
set -u
cd "$(dirname "$0")/../.." || exit 1
VRSIM=${VRSIM:-./vrsim}
CHROMIUM=${CHROMIUM:-}
if [ -z "$CHROMIUM" ]; then
  for c in chromium chromium-browser google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$c; break; fi
  done
fi
if [ -z "$CHROMIUM" ]; then
  echo "skip html check: no chromium (Debian: apt-get install -y chromium)"
  exit 77
fi
[ -x "$VRSIM" ] || { echo "html check: $VRSIM is not built (make)" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/vrsim-html.XXXXXX")}
mkdir -p "$OUT" || exit 1
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$OUT"' EXIT INT TERM
PROFILE="$OUT/profile"

PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# make NAME SCENARIO [--suggest] [KEY=VALUE ...]: $OUT/NAME/report.html
make_report() {
  _n=$1; _s=$2; shift 2
  _sug=""
  if [ "${1:-}" = --suggest ]; then
    shift
    _sug=--suggest
  fi
  _sets=""
  for _kv in "$@"; do _sets="$_sets --set $_kv"; done
  rm -rf "$OUT/$_n"
  # vrsim adds "what would help" unless told --no-suggest; the plain page is asked for with it
  _flag=--no-suggest
  [ -n "$_sug" ] && _flag=""
  # shellcheck disable=SC2086
  "$VRSIM" "$_s" $_flag $_sets --out "$OUT/$_n" >"$OUT/$_n.out" 2>&1
  _rc=$?
  if [ "$_rc" -ge 128 ]; then fail "$_n: vrsim crashed (exit $_rc)" "$(tail -n 5 "$OUT/$_n.out")"; return 1; fi
  [ -f "$OUT/$_n/report.html" ] && return 0
  fail "$_n: vrsim wrote no report.html (exit $_rc)" "$(tail -n 5 "$OUT/$_n.out")"
  return 1
}

# check NAME: loads $OUT/NAME/report.html in Chromium and checks the drawn DOM.
check() {
  _n=$1
  _page="$OUT/$_n/report.html"
  grep -q 'src=["'"'"']http\|href=["'"'"']http\|@import' "$_page" && fail "$_n: the page refers to the network"
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$PROFILE" \
    --dump-dom "file://$(cd "$(dirname "$_page")" && pwd)/report.html" \
    >"$OUT/$_n.dom" 2>"$OUT/$_n.chromium.err"
  _rc=$?
  if [ "$_rc" != 0 ] || [ ! -s "$OUT/$_n.dom" ]; then
    fail "$_n: chromium exited $_rc" "$(grep -v dbus "$OUT/$_n.chromium.err" | tail -n 5)"
    return
  fi
  _body=$(grep -o '<body[^>]*>' "$OUT/$_n.dom" | head -n 1)
  case "$_body" in
    *data-error*) fail "$_n: the page's script failed" "$_body" ;;
    *'data-ok="1"'*) ok "$_n: page loaded, script ran to the end (data-ok=\"1\")" ;;
    *) fail "$_n: no data-ok on <body> (script did not run?)" "$_body" ;;
  esac
  # the timeline: one area per category, the allocated and the reserved line
  _tl=$(sed -n 's/.*\(<svg[^>]*id="timeline-svg".*\)/\1/p' "$OUT/$_n.dom" | sed 's#</svg>.*##')
  _areas=$(printf '%s' "$_tl" | grep -o '<path[^>]*class="area"' | wc -l)
  _lines=$(printf '%s' "$_tl" | grep -o '<path[^>]*class="\(allocated\|reserved\)"' | wc -l)
  _d=$(printf '%s' "$_tl" | grep -o ' d="M[0-9.]*,[0-9.]*L' | wc -l)
  if [ "$_areas" -ge 5 ] && [ "$_lines" = 2 ] && [ "$_d" -ge 7 ]; then
    ok "$_n: timeline SVG has $_areas category areas and the allocated and reserved lines"
  else
    fail "$_n: timeline SVG: $_areas areas, $_lines lines, $_d drawn paths"
  fi
  grep -q 'id="breakdown-svg"' "$OUT/$_n.dom" && ok "$_n: breakdown drawn" || fail "$_n: no breakdown SVG"
  if grep -q 'id="segments-svg"' "$OUT/$_n.dom"; then
    _rects=$(sed -n 's/.*\(<svg[^>]*id="segments-svg".*\)/\1/p' "$OUT/$_n.dom" | sed 's#</svg>.*##' | grep -o '<rect' | wc -l)
    [ "$_rects" -ge 2 ] && ok "$_n: segment map drawn ($_rects blocks)" || fail "$_n: segment map has $_rects rects"
  elif grep -q 'No segment map for this run' "$OUT/$_n.dom"; then
    ok "$_n: no step completed, the page says there is no segment map"
  else
    fail "$_n: no segment map SVG"
  fi
}

SCN=scenarios/llama7b_h200.lua
if make_report fits $SCN model.size=7b-l2 seq=512; then check fits; fi
if make_report oom $SCN model.size=7b-l2 seq=512 capacity_gib=4; then
  check oom
  grep -q 'DOES NOT FIT' "$OUT/oom.dom" && ok "oom: the page says it does not fit" || fail "oom: no DOES NOT FIT verdict"
fi
if make_report ckpt $SCN model.size=7b-l2 seq=512 checkpointing=true micro_batch=2; then check ckpt; fi
if make_report suggest $SCN --suggest model.size=7b-l2 seq=512 micro_batch=4; then
  check suggest
  _rows=$(sed -n 's/.*\(<div id="variants">.*\)/\1/p' "$OUT/suggest.dom" | sed 's#</table>.*##' | grep -o '<tr>' | wc -l)
  [ "$_rows" -ge 3 ] && ok "suggest: 'what would help' lists $((_rows - 1)) re-simulated changes" \
    || fail "suggest: the 'what would help' table has $_rows rows"
fi

if [ "${KEEP:-0}" = 1 ]; then
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$PROFILE" --hide-scrollbars \
    --window-size=1220,2400 --screenshot="$OUT/fits.png" "file://$(cd "$OUT/fits" && pwd)/report.html" >/dev/null 2>&1 \
    && echo "screenshot: $OUT/fits.png"
fi
echo "html check: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
