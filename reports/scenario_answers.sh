#!/bin/sh
# reports/scenario_answers.sh: the answers written in the scenarios' headers, checked or rewritten.
#
#   VRSIM=./vrsim sh reports/scenario_answers.sh check [FILE.lua ...]   (tests/scenario_tests.sh)
#   VRSIM=./vrsim sh reports/scenario_answers.sh write [FILE.lua ...]   (make reports)
#
# An answer is two comment lines in a scenario's header: the command, which must run this file,
# and the verdict line vrsim prints for it (the last line starting FITS or DOES NOT FIT: one, or
# the GPU's then the host's where the optimizer state is offloaded):
#
#   --   $ ./vrsim scenarios/llama13b_zero2.lua --set micro_batch=2
#   --   FITS: peak reserved 61.96 GiB of 78.45 GiB usable (79.0 %), 16.49 GiB headroom
#
# Arguments after the file are split on blanks (no quoting). `check` prints one line per answer
# and exits 1 if any answer drifted, a command fails (exit other than 0 for FITS or 3 for DOES NOT
# FIT), a command names another file, or a file has no answer. `write` puts what vrsim prints now
# in place of each verdict line and leaves the rest of the file byte for byte as it was; running it
# twice changes nothing. Default files: scenarios/*.lua. Needs sh, grep, sed and awk.
set -u
cd "$(dirname "$0")/.." || exit 1
VRSIM=${VRSIM:-./vrsim}
MODE=${1:-}
case $MODE in check|write) shift ;; *) echo "usage: scenario_answers.sh check|write [FILE.lua ...]" >&2; exit 2 ;; esac
[ -x "$VRSIM" ] || { echo "scenario_answers: $VRSIM is not built (make)" >&2; exit 2; }
[ $# -gt 0 ] || set -- scenarios/*.lua
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-answers.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT INT TERM
bad=0
for f in "$@"; do
  # LINE<TAB>ARGS for each command line; the verdict is on LINE + 1
  sed -n '/^--   \$ \.\/vrsim /{=;p;}' "$f" | sed 'N;s/\n--   \$ \.\/vrsim /\t/' >"$TMP/cmds"
  if [ ! -s "$TMP/cmds" ]; then echo "FAIL $f: no answer ('--   \$ ./vrsim $f' and its verdict line) in the header"; bad=1; continue; fi
  : >"$TMP/new"
  while IFS="$(printf '\t')" read -r n args; do
    file=${args%% *}; rest=""; [ "$file" = "$args" ] || rest=${args#* }
    if [ "$file" != "$f" ]; then echo "FAIL $f:$n: the command runs '$file', not this file"; bad=1; continue; fi
    said=$(sed -n "$((n + 1))s/^--   //p" "$f")
    case $said in FITS*|"DOES NOT FIT"*) ;; *) echo "FAIL $f:$((n + 1)): no verdict line after the command"; bad=1; continue ;; esac
    # shellcheck disable=SC2086
    # (--no-suggest: the verdict line is the same without the "what would help" rows, which
    # simulate up to a hundred more runs for each answer that does not fit)
    "$VRSIM" "$f" $rest --no-files --no-suggest >"$TMP/out" 2>"$TMP/err"
    rc=$?
    now=$(grep -E '^(FITS|DOES NOT FIT)' "$TMP/out" | tail -n 1)
    case $now in FITS*) want=0 ;; "DOES NOT FIT"*) want=3 ;; *) want=none ;; esac
    if [ "$rc" != "$want" ]; then
      echo "FAIL $f:$n: ./vrsim $args exits $rc with '$now' $(head -n 2 "$TMP/err" | tr '\n' ' ')"; bad=1; continue
    fi
    printf '%s\t%s\n' "$((n + 1))" "$now" >>"$TMP/new"
    if [ "$said" = "$now" ]; then echo "ok   $f:$((n + 1)): $now"
    elif [ "$MODE" = write ]; then echo "new  $f:$((n + 1)): $now (was: $said)"
    else echo "FAIL $f:$((n + 1)): the header says '$said', vrsim prints '$now' (make reports rewrites it)"; bad=1
    fi
  done <"$TMP/cmds"
  if [ "$MODE" = write ] && [ -s "$TMP/new" ]; then
    awk -F '\t' 'NR == FNR { v[$1] = $2; next } (FNR in v) { print "--   " v[FNR]; next } { print }' \
      "$TMP/new" "$f" >"$TMP/file" && { cmp -s "$TMP/file" "$f" || cat "$TMP/file" >"$f"; }
  fi
done
exit $bad
