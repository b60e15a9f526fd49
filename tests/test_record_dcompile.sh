#!/bin/sh
# test_record_dcompile.sh: every line of the compiled-diffusion plan
# (validation/harness/plans/plan_gen7_dcompile.jsonl, measure_diffusers.py) is a record vrsim
# validate simulates; a record with compile = true is the scenario with training.compile = true
# (the compiled line of each pair predicts another peak than its eager twin), an SDXL record's
# diffusers_config reaches the model (the cut UNet's parameter count), and an SDXL UNet record
# that says its text encoders ran is skipped, naming it.
#
#   VRSIM=./vrsim sh tests/test_record_dcompile.sh
set -u

VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_record_dcompile: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-dcompile.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# the plan's lines as measure_diffusers.py's records (predict_plan.py's placeholder
# measurements: the record fields the harness writes), and one SDXL line saying frozen encoders
python3 - "$TMP/recs.jsonl" <<'PY' || exit 1
import json, sys
sys.path.insert(0, "validation/harness")
from predict_plan import placeholder
plan = [json.loads(l) for l in open("validation/harness/plans/plan_gen7_dcompile.jsonl")]
with open(sys.argv[1], "w") as f:
    for c in plan:
        rec = placeholder(c, "h100")
        if c.get("compile"):
            # what the harness adds to a compiled line's record (information only)
            rec.update(compiled_classes=["BasicTransformerBlock"], dynamo_warmup={"stats": {"unique_graphs": 2}},
                       dynamo_end={"stats": {"unique_graphs": 2}},
                       timed={"from_step": 3, "n": 1, "median_gpu_ms": 1.0})
        f.write(json.dumps(rec) + "\n")
    sdxl = [c for c in plan if c["model"] == "sdxl-base-unet"][0]
    rec = placeholder(dict(sdxl, name="bad-sdxl-encoders"), "h100")
    rec["text_encoders"] = "frozen"
    f.write(json.dumps(rec) + "\n")
PY
"$VRSIM" validate --json "$TMP/recs.jsonl" >"$TMP/rows.json" 2>"$TMP/err" || { cat "$TMP/err"; exit 1; }
"$VRSIM" validate "$TMP/recs.jsonl" >"$TMP/table.txt" 2>&1
python3 - "$TMP/rows.json" "$TMP/table.txt" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read()
plan = [json.loads(l) for l in open("validation/harness/plans/plan_gen7_dcompile.jsonl")]
fails = 0
def check(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg)
    fails += not ok
pred = {}
for r in rows:
    pred.setdefault(r["config"], {})[r["metric"]] = r["predicted"]
names = [c["name"] for c in plan]
check(all("peak_allocated" in pred.get(n, {}) for n in names),
      "every plan line is simulated (%d of %d)" % (sum("peak_allocated" in pred.get(n, {}) for n in names), len(names)))
if fails:
    sys.exit(1)
for c in plan:
    if not c.get("compile"):
        continue
    twin = c["name"].replace("-compile", "-eager")
    a, e = pred[c["name"]]["peak_allocated"] / 2**20, pred[twin]["peak_allocated"] / 2**20
    check(a < e, "%s: compiled peak allocated %.1f < eager %.1f MiB" % (c["name"], a, e))
sdxl = [c["name"] for c in plan if c["model"] == "sdxl-base-unet"][0]
n = pred[sdxl].get("n_params")
check(n is not None and n < 2567463684,
      "%s: the cut config's UNet, %s parameters (SDXL base's has 2,567,463,684)" % (sdxl, n))
line = [l for l in table.splitlines() if l.strip().startswith("bad-sdxl-encoders ")]
check(bool(line) and "skipped" in line[0] and "text_encoders 'frozen'" in line[0],
      "an SDXL UNet record with frozen text encoders is skipped, naming it (%s)" % (line[0].strip() if line else "no line"))
sys.exit(1 if fails else 0)
PY
rc=$?
# the measured runs (validation/results/gen7_dcompile_records_h100.jsonl, one H100): every line's
# peak allocated within 3 % (the compiled blocks' saved tensors as the partitioner chose them),
# the step time held to the timed steps' median (record field `timed`), and the compiled Flux
# blocks' step time within 12 % (the regional compile's kernels), the host-bound compiled SD 3.5
# blocks' within 25 % (SDXL's compiled lines are off, docs/techniques.md)
"$VRSIM" validate --json validation/results/gen7_dcompile_records_h100.jsonl >"$TMP/meas.json" 2>/dev/null
python3 - "$TMP/meas.json" validation/results/gen7_dcompile_records_h100.jsonl <<'PY' || rc=1
import json, sys
rows = json.load(open(sys.argv[1]))
recs = {json.loads(l)["name"]: json.loads(l) for l in open(sys.argv[2])}
bad = 0
def check(ok, what):
    global bad
    print(("ok   " if ok else "FAIL ") + what); bad += not ok
alloc = [r for r in rows if r["metric"] == "peak_allocated"]
check(len(alloc) == 8 and all(abs(r["rel_error"]) <= 0.03 for r in alloc),
      "measured compiled/eager diffusion: peak allocated within 3 %% on %d lines (worst %+.2f %%)"
      % (len(alloc), 100 * max((r["rel_error"] for r in alloc), key=abs)))
st = {r["config"]: r for r in rows if r["metric"] == "step_time"}
f = st["gen7-flux-dev-d2s4-lora-r1024-flash-compile"]
check(abs(f["measured"] - recs[f["config"]]["timed"]["median_gpu_ms"]) < 1e-6,
      "validate holds a record with a timed summary to its median (%.2f ms, last step %.2f)"
      % (f["measured"], recs[f["config"]]["steps"][-1]["gpu_ms"]))
check(abs(f["rel_error"]) <= 0.12, "compiled Flux blocks: step time %+.1f %% within 12 %%" % (100 * f["rel_error"]))
# the compiled SD 3.5 blocks are host-bound: each kernel of Inductor's code and each call of a
# compiled block cost the host what measure_compiled_call.py measured (lua/hw/calibrated/
# h200_torch.lua host_compiled_*_us); at a bare launch a kernel the line was -30.4 %
s3 = st["gen7-sd35m-l4-lora-r1024-compile"]
check(abs(s3["rel_error"]) <= 0.25, "compiled SD 3.5 blocks: step time %+.1f %% within 25 %%" % (100 * s3["rel_error"]))
sys.exit(1 if bad else 0)
PY
# a record's summaries as their formats say, or the record is named as malformed: a `timed` that is
# not an object or whose median is not a positive number, a median_host_ms phase that is not a number
python3 - "$TMP" <<'PY' || rc=1
import json, sys
r = json.loads(open("validation/results/gen7_dcompile_records_h100.jsonl").readline())
with open(sys.argv[1] + "/bad_summaries.jsonl", "w") as f:
    for name, k, v in (("t-list", "timed", [1]), ("t-neg", "timed", {"median_gpu_ms": -3}),
                       ("h-str", "median_host_ms", {"forward": "fast"})):
        d = dict(r, name=name); d[k] = v; f.write(json.dumps(d) + "\n")
PY
"$VRSIM" validate "$TMP/bad_summaries.jsonl" >"$TMP/bad_summaries.txt" 2>&1
if grep -q 't-list .*skipped: timed is not an object' "$TMP/bad_summaries.txt" &&
   grep -q 't-neg .*skipped: timed.median_gpu_ms must be a finite number > 0' "$TMP/bad_summaries.txt" &&
   grep -q 'h-str .*skipped: median_host_ms.forward must be a finite number >= 0' "$TMP/bad_summaries.txt"; then
  echo "ok   malformed timed and median_host_ms summaries are named, the records skipped"
else echo "FAIL malformed summaries: $(grep -c skipped "$TMP/bad_summaries.txt") skipped"; cat "$TMP/bad_summaries.txt"; rc=1; fi
exit $rc
