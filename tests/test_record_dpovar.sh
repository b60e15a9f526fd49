#!/bin/sh
# test_record_dpovar.sh: a measured record's dpo and data fields (validation/harness/tech_data.py)
# reach vrsim validate's scenario as training.dpo and training.data, the record's seq checked
# against the rows' length they give, and a record vrsim cannot reproduce as run is skipped with
# its reason.
#
#   VRSIM=./vrsim sh tests/test_record_dpovar.sh
set -u

VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_record_dpovar: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-dpovar.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# the plan's lines as the records measure_llama.py writes (placeholder measurements), the same
# runs without dpo / data, then variants vrsim must skip
python3 - "$TMP/recs.jsonl" <<'PY' || exit 1
import json, sys
sys.path.insert(0, "validation/harness")
from predict_plan import placeholder
plan = {c["name"]: c for c in map(json.loads, open("validation/harness/plans/plan_gen5_dpovar.jsonl"))}
full, lora = plan["gen5-dpo-full-bf16"], plan["gen5-dpo-lora-ckpt"]
pad, packed = plan["gen5-varlen-pad"], plan["gen5-varlen-packed-ckpt"]
recs = [dict(full, dpo_reference="ref_model_copy"), dict(lora, dpo_reference="adapters_disabled"),
        pad, packed, plan["gen5-varlen-packed"]]
def without(c, k, name, **kw):
    d = {x: v for x, v in c.items() if x != k}
    d.update(name=name, **kw)
    return d
recs += [without(full, "dpo", "plain-full", batch=8),       # the same 8 rows of 512, no DPO
         without(pad, "data", "plain-pad", seq=1024)]       # 8 rows of 1024, none padded
bad = [("bad-ref", dict(lora, dpo_reference="ref_model_copy")),
       ("bad-dpo-seq", dict(full, seq=1024)),
       ("bad-dpo-key", dict(full, dpo=dict(full["dpo"], beta=0.1))),
       ("bad-ref-alone", dict(plan["gen5-varlen-pad"], dpo_reference="ref_model_copy")),
       ("bad-order", dict(pad, data=dict(pad["data"], order="shuffle"))),
       ("bad-count", dict(pad, batch=4)),
       ("bad-data-seq", dict(packed, seq=1024)),
       ("bad-file", dict(pad, data=dict(pad["data"], lengths="lengths.txt")))]
recs += [dict(c, name=n) for n, c in bad]
with open(sys.argv[1], "w") as f:
    for c in recs:
        f.write(json.dumps(placeholder(c)) + "\n")
PY
"$VRSIM" validate --json "$TMP/recs.jsonl" >"$TMP/rows.json" 2>"$TMP/err" || { cat "$TMP/err"; exit 1; }
"$VRSIM" validate "$TMP/recs.jsonl" >"$TMP/table.txt" 2>&1
python3 - "$TMP/rows.json" "$TMP/table.txt" "$TMP/err" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
said = open(sys.argv[2]).read() + open(sys.argv[3]).read()
fails = 0
def check(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg)
    fails += not ok
p = {}
for r in rows:
    p.setdefault(r["config"], {})[r["metric"]] = r["predicted"]
want = ["gen5-dpo-full-bf16", "gen5-dpo-lora-ckpt", "gen5-varlen-pad", "gen5-varlen-packed",
        "gen5-varlen-packed-ckpt", "plain-full", "plain-pad"]
check(sorted(p) == sorted(want), "the dpo and data records are simulated, the bad ones not (%s)" % sorted(p))
if fails:
    sys.exit(1)
mib = lambda n: p[n]["peak_allocated"] / 2**20
# DPO full: the reference copy's parameters counted beside the policy's (measure_llama.py adds
# them to n_params), none with LoRA (the adapters disabled)
check(p["gen5-dpo-full-bf16"]["n_params"] == 2 * p["gen5-dpo-lora-ckpt"]["n_params"],
      "dpo full: n_params %d is twice LoRA's %d (the reference copy)" % (
          p["gen5-dpo-full-bf16"]["n_params"], p["gen5-dpo-lora-ckpt"]["n_params"]))
# the same 8 rows of 512 without DPO: no reference, no fused head (the full logits instead)
check(mib("gen5-dpo-full-bf16") != mib("plain-full"),
      "dpo full: peak allocated %.1f MiB, not the plain run's %.1f" % (mib("gen5-dpo-full-bf16"), mib("plain-full")))
# padded: 8 rows of 1024 with an attention mask against the same rows unpadded (SDPA's is_causal)
check(mib("gen5-varlen-pad") > mib("plain-pad"),
      "data pad: peak allocated %.1f MiB > the unpadded rows' %.1f (the padding mask)" % (
          mib("gen5-varlen-pad"), mib("plain-pad")))
# packed: one row of 4693 tokens computes fewer tokens than 8 x 1024 padded
check(mib("gen5-varlen-packed-ckpt") < mib("gen5-varlen-pad"),
      "data padding_free: peak allocated %.1f MiB < padded %.1f" % (mib("gen5-varlen-packed-ckpt"), mib("gen5-varlen-pad")))
for name, says in [("bad-ref", "dpo_reference 'ref_model_copy'"),
                   ("bad-dpo-seq", "seq 1024 is not the DPO rows' length 512"),
                   ("bad-dpo-key", "'dpo.beta' is not understood"),
                   ("bad-ref-alone", "field 'dpo_reference' without dpo"),
                   ("bad-order", "not one micro-batch in the given order"),
                   ("bad-count", "not one micro-batch in the given order"),
                   ("bad-data-seq", "seq 1024 is not the collated row's length 4693"),
                   ("bad-file", "data.lengths is not a list")]:
    line = [l for l in said.splitlines() if name + " skipped" in l]
    check(bool(line) and says in line[0], "%s is skipped, naming it (%s)" % (name, line[0].strip() if line else "no line"))
sys.exit(1 if fails else 0)
PY
[ $? -eq 0 ] || exit 1

# the measured runs (H100, Llama-3.2-1B cut to 4 layers): every peak within 0.1 %; the full
# fine-tune's reference copy is made after the policy is built and cast (DPOTrainer.__init__),
# which places the policy's bf16 embedding in the segment its fp32 head left (the trace's 57
# segments, 7598 MiB; made before the cast, 7552)
"$VRSIM" validate --json validation/records/llama_h100_gen5_dpovar.jsonl >"$TMP/meas.json" 2>"$TMP/err" \
    || { cat "$TMP/err"; exit 1; }
python3 - "$TMP/meas.json" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["metric"] in ("peak_allocated", "peak_reserved")]
fails = 0
def check(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg)
    fails += not ok
check(len(rows) == 10, "the five measured dpo and data runs are simulated (%d peak rows)" % len(rows))
worst = max(rows, key=lambda r: abs(r["rel_error"]))
check(abs(worst["rel_error"]) <= 0.001, "measured: every peak within 0.1 %% (worst %s %s %+.3f %%)" % (
    worst["config"], worst["metric"], 100 * worst["rel_error"]))
full = [r for r in rows if r["config"] == "gen5-dpo-full-bf16" and r["metric"] == "peak_reserved"]
check(len(full) == 1 and full[0]["measured"] == full[0]["predicted"],
      "dpo full: peak reserved %s MiB as measured (%s)" % (
          full[0]["predicted"] / 2**20 if full else "-", full[0]["measured"] / 2**20 if full else "-"))
sys.exit(1 if fails else 0)
PY

# axolotl's packing under sdpa (plans/plan_gen19_varlen.jsonl, tech_data.py's multipack): the
# records reach training.data as real batches (micro_batch the bins, the row the longest bin padded
# to pad_to_multiple_of); lengths that make another count of bins, or a seq that is not the row's
# length, are skipped with the reason
python3 - "$TMP/mp.jsonl" <<'PY' || exit 1
import json, sys
sys.path.insert(0, "validation/harness")
from predict_plan import placeholder
plan = [json.loads(l) for l in open("validation/harness/plans/plan_gen19_varlen.jsonl")]
c = plan[0]
recs = plan + [dict(c, name="bad-mp-bins", batch=3), dict(c, name="bad-mp-seq", seq=4096)]
with open(sys.argv[1], "w") as f:
    for r in recs:
        f.write(json.dumps(placeholder(dict(r, axolotl="0.19.0"))) + "\n")
PY
"$VRSIM" validate "$TMP/mp.jsonl" >"$TMP/mp.txt" 2>&1
sim=$(grep -c "gen19-mp-sdpa-.* peak_allocated" "$TMP/mp.txt")
if [ "$sim" = 3 ] && grep -q "bad-mp-bins *skipped: data: the record's lengths are not one micro-batch" "$TMP/mp.txt" \
   && grep -q "bad-mp-seq *skipped: seq 4096 is not the collated row's length 2048" "$TMP/mp.txt"; then
  echo "ok   data multipack records: the 3 of plan_gen19_varlen simulated, another count of bins or seq skipped, named"
else echo "FAIL data multipack records ($sim simulated)"; grep "gen19\|bad-mp" "$TMP/mp.txt" | head; exit 1; fi
