#!/bin/sh
# test_published.sh: vrsim against published training throughput from GPUs and clusters nobody
# calibrated here (tests/data/published_throughput.tsv: sources and configurations). Asserts the
# band the file states: each row within +-25 %, the median |error| within 15 %, overall and for
# each kind (one A100 node, one H100 node, several nodes: issue 15's target). Prints the table;
# MARKDOWN=1 prints it as a Markdown table with the sources instead (make reports puts it in the
# docs/step-time.md).
VRSIM=${VRSIM:-./vrsim}
MARKDOWN=${MARKDOWN:-0}
DIR=$(dirname "$0")
SCN="$DIR/../scenarios/llama70b_fsdp2_16x8_h100.lua"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
grep -v '^#' "$DIR/data/published_throughput.tsv" | while IFS='	' read -r id pub tok src sets; do
  args=""
  for s in $sets; do args="$args --set $s"; done
  # shellcheck disable=SC2086
  "$VRSIM" "$SCN" $args --json > "$TMP/$id.json" 2> "$TMP/$id.err"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$pub" "$tok" "$TMP/$id.json" "$src" "$sets" >> "$TMP/rows"
done
python3 - "$TMP/rows" "$MARKDOWN" <<'PY'
import json, sys, statistics
md = sys.argv[2] == "1"
errs, kinds, bad = [], {}, 0
if md:
    print("| configuration (source) | published tok/s/GPU | vrsim | error |")
    print("|---|---:|---:|---:|")
for line in open(sys.argv[1]):
    rid, pub, tok, path, src, sets = line.rstrip("\n").split("\t")
    kv = dict(s.split("=", 1) for s in sets.split())
    kind = ("several nodes" if int(kv.get("count", "8")) > 8 else
            "one %s node" % ("A100" if kv.get("gpu", "").startswith("a100") else "H100"))
    try:
        d = json.load(open(path))
        pred = float(tok) / (d["step_time_ms"] / 1e3)
    except Exception as e:
        print("FAIL %s: vrsim gave no step time (%s)" % (rid, e)); bad += 1; continue
    err = pred / float(pub) - 1
    errs.append(abs(err))
    kinds.setdefault(kind, []).append(abs(err))
    ok = abs(err) <= 0.25
    bad += not ok
    if md:
        print("| %s (%s) | %.0f | %.0f | %+.1f %% |" % (rid, src.replace("|", "/"), float(pub), pred, 100 * err))
    else:
        print("%-4s %-18s published %7.0f  vrsim %7.0f tokens/s/GPU  %+6.1f %%  (%s)" %
              ("ok" if ok else "FAIL", rid, float(pub), pred, 100 * err, d.get("step_time_basis", "")[:40]))
med = statistics.median(errs) if errs else 1
if md: print()
print("median |error| %.1f %% over %d published configurations (band: 15 %%)" % (100 * med, len(errs)))
if med > 0.15: bad += 1
for kind in sorted(kinds):
    m = statistics.median(kinds[kind])
    print("%s%s: median |error| %.1f %% over %d (band: 15 %%)" % ("  " if not md else "- ", kind, 100 * m, len(kinds[kind])))
    if m > 0.15: bad += 1
sys.exit(1 if bad else 0)
PY
rc=$?
[ $rc -eq 0 ] && echo "test_published: ok" || echo "test_published: FAILED"
exit $rc
