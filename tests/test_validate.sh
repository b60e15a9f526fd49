#!/bin/sh
# test_validate.sh: vrsim validate over every measured run in validation/ (a regression guard:
# the accuracy figures themselves are in the README's table, from `./vrsim validate`).
#
#   VRSIM=./vrsim sh tests/test_validate.sh
#
# Checks that validate reads every record (none skipped), and that every configuration's peak
# allocated and peak reserved memory stay within 3 % of the measurement (issues 2, 4 and 5's
# bar; one timing-dependent rank excepted, below).
set -u

VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_validate: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-validate.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

"$VRSIM" validate --json >"$TMP/rows.json" 2>"$TMP/err"
rc=$?
python3 - "$TMP/rows.json" "$rc" <<'PY'
import json, sys
rc = int(sys.argv[2])
fails = 0
def check(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg)
    fails += not ok
check(rc == 0, "vrsim validate --json exits 0 (got %d)" % rc)
try:
    rows = json.load(open(sys.argv[1]))
except ValueError as e:
    check(False, "validate --json prints a JSON array (%s)" % e)
    sys.exit(1)
alloc = [r for r in rows if r["metric"] == "peak_allocated"]
check(len(alloc) >= 40, "%d configurations with a peak allocated row" % len(alloc))
bad = [r for r in alloc if abs(r["rel_error"]) > 0.03]
check(not bad, "every peak allocated within 3 %%%s" %
      "".join("; %s %+.2f %%" % (r["config"], 100 * r["rel_error"]) for r in bad))
# peak reserved within 3 % too, but for the ZeRO-1 ranks where PyTorch kept the first
# iteration's DDP bucket past step 1's rebuild: a stash released on a timing-dependent call into
# the process group (pytorch#150079), 2 of the 10 measured ranks. The measurement shows it: that
# rank's step 1 peaks above its steady state by about the bucket (2044 MiB here).
import glob
TIMING_DEPENDENT = set()
for path in glob.glob("validation/*.jsonl"):
    for line in open(path):
        rec = json.loads(line) if line.strip() else {}
        if rec.get("strategy") != "zero1":
            continue
        for rk in rec.get("ranks", []):
            st = rk["steps"]
            if len(st) > 2 and st[1]["peak_alloc_mib"] - st[-1]["peak_alloc_mib"] > 1000:
                TIMING_DEPENDENT.add("%s/r%d" % (rec["name"], rk["rank"]))
resv = [r for r in rows if r["metric"] == "peak_reserved"]
bad = [r for r in resv if abs(r["rel_error"]) > 0.03 and r["config"] not in TIMING_DEPENDENT]
check(len(TIMING_DEPENDENT) <= 2 and not bad,
      "every peak reserved within 3 %% (but %s)%s" % (", ".join(sorted(TIMING_DEPENDENT)),
      "".join("; %s %+.2f %%" % (r["config"], 100 * r["rel_error"]) for r in bad)))
print("test_validate: %d failed" % fails)
sys.exit(1 if fails else 0)
PY
