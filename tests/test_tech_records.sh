#!/bin/sh
# test_tech_records.sh: records of validation/harness/tech_train.py's techniques (bitsandbytes'
# 8-bit and paged AdamW, the optimizer step in backward, activation offloading, QLoRA, generate)
# become the scenarios they name (lua/vrsim/record.lua): each is simulated, each field changes the
# prediction the way its scenario field does, and a record that contradicts itself is skipped
# with the reason.
#
#   VRSIM=./vrsim sh tests/test_tech_records.sh
set -u

VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_tech_records: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-techrec.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

python3 - "$TMP/rec.jsonl" <<'PY'
import json, sys
hf = json.load(open("scenarios/configs/llama-3-8b.json"))
hf["num_hidden_layers"] = 2
steps = [{"step": i, "wall_ms": 1.0, "gpu_ms": 1.0, "peak_alloc_mib": 1.0, "peak_reserved_mib": 1.0,
          "end_alloc_mib": 1.0, "end_reserved_mib": 1.0, "num_alloc_retries": 0} for i in range(3)]
base = {"hf_config": hf, "batch": 1, "seq": 512, "ckpt": True, "attn": "sdpa", "optim": "adamw_foreach",
        "gpu": "NVIDIA H200", "total_mib": 143155.9375, "steps": steps}
lora = {"r": 8, "alpha": 16, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}
recs = [
    ("full", {"mode": "bf16"}),
    ("adamw8bit", {"mode": "bf16", "optimizer": "adamw8bit"}),
    ("paged", {"mode": "bf16", "optimizer": "paged_adamw_8bit"}),
    ("inbwd", {"mode": "bf16", "optimizer_in_backward": True}),
    ("lora", {"mode": "lora_bf16", "lora": lora}),
    ("offload", {"mode": "lora_bf16", "lora": lora, "activation_offload": True}),
    ("qlora", {"mode": "qlora_bf16", "quant": "nf4", "lora": lora}),
    # measure_llama.py's n_trainable of an inference run: every parameter (requires_grad as built)
    ("generate", {"mode": "bf16", "ckpt": False, "build": "direct", "inference": True, "batch": 2, "seq": 64,
                  "n_params": 1486901248, "n_trainable": 1486901248,
                  "generate": {"prompt": 64, "max_new_tokens": 8, "batch": 2}}),
    ("generate-long", {"mode": "bf16", "ckpt": False, "build": "direct", "inference": True, "batch": 2, "seq": 64,
                       "generate": {"prompt": 64, "max_new_tokens": 64, "batch": 2}}),
    # contradictions, each skipped
    ("bad-qlora-noquant", {"mode": "qlora_bf16", "lora": lora}),
    ("bad-quant-plain", {"mode": "lora_bf16", "quant": "nf4", "lora": lora}),
    ("bad-optimizer", {"mode": "bf16", "optimizer": "lion"}),
    ("bad-generate", {"mode": "bf16", "ckpt": False, "inference": True, "batch": 1, "seq": 64,
                      "generate": {"prompt": 64, "max_new_tokens": 8, "batch": 2}}),
]
with open(sys.argv[1], "w") as f:
    for name, extra in recs:
        r = dict(base, name=name)
        r.update(extra)
        f.write(json.dumps(r) + "\n")
PY
# bitsandbytes 0.50.2's Optimizer2State.init_state for an 8-bit AdamW: state1 and state2 one byte
# an element, absmax1 and absmax2 one fp32 per 256-element block (`blocksize = 256`): for
# Llama-3-8B's head (128256 x 4096), 2 x 525,336,576 and 2 x 8,208,384 bytes (the H100 records
# gen4-tt-adamw8bit and gen4-tt-paged-adamw8bit peak at vrsim's figure to 2 KiB with these)
cp scenarios/configs/llama-3-8b.json "$TMP/"
cat > "$TMP/a8.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 1 },
  training = { micro_batch = 1, seq = 128, precision = "bf16", steps = 1, build = "direct", optimizer = "adamw8bit" } }
EOS
"$VRSIM" "$TMP/a8.lua" --no-files --alloc-trace "$TMP/a8.csv" >/dev/null
got=$(awk -F, '$3 == "alloc" && $7 == "adamw8bit.init lm_head.weight" { print $5 }' "$TMP/a8.csv" | sort -n | tr '\n' ' ')
if [ "$got" = "8208384 8208384 525336576 525336576 " ]; then
  echo "ok   adamw8bit: lm_head's state1, state2 and one fp32 absmax per 256 elements each"
else
  echo "FAIL adamw8bit: lm_head's state allocations $got (want 8208384 x 2, 525336576 x 2)"; exit 1
fi
"$VRSIM" validate --json "$TMP/rec.jsonl" >"$TMP/rows.json" 2>"$TMP/err"
"$VRSIM" validate "$TMP/rec.jsonl" >"$TMP/table.txt" 2>&1
python3 - "$TMP/rows.json" "$TMP/table.txt" <<'PY'
import json, sys
fails = 0
def check(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg)
    fails += not ok
pred = {}
for r in json.load(open(sys.argv[1])):
    pred.setdefault(r["config"], {})[r["metric"]] = r["predicted"]
text = open(sys.argv[2]).read()
for n in ("full", "adamw8bit", "paged", "inbwd", "lora", "offload", "qlora", "generate", "generate-long"):
    check(n in pred, "record '%s' is simulated" % n)
if fails:
    print(text)
    sys.exit(1)
a = lambda n: pred[n]["peak_allocated"]
MiB = 2 ** 20
# 8-bit state: one byte an element for each moment against bf16 AdamW's two bytes
check(a("adamw8bit") < a("full"), "adamw8bit peaks below bf16 AdamW (%.1f < %.1f MiB)" % (a("adamw8bit") / MiB, a("full") / MiB))
# paged: the matrices' states leave the caching allocator (cudaMallocManaged)
check(a("paged") < a("adamw8bit"), "paged_adamw_8bit peaks below adamw8bit (%.1f < %.1f MiB)" % (a("paged") / MiB, a("adamw8bit") / MiB))
check(a("inbwd") < a("full"), "optimizer_in_backward peaks below the whole-model step (%.1f < %.1f MiB)" % (a("inbwd") / MiB, a("full") / MiB))
check(a("offload") < a("lora"), "activation_offload peaks below the same LoRA run (%.1f < %.1f MiB)" % (a("offload") / MiB, a("lora") / MiB))
check(a("qlora") < a("lora"), "qlora_bf16 (nf4 base) peaks below lora_bf16 (%.1f < %.1f MiB)" % (a("qlora") / MiB, a("lora") / MiB))
check("n_trainable" not in pred["generate"] and "n_params" not in pred["generate"],
      "generate: the record's n_params matches; its n_trainable (the model as built, none trained) is not compared")
t = lambda n: pred[n]["step_time"]
check(t("generate-long") > 4 * t("generate"), "generate: 64 new tokens take over 4 x the time of 8 (%.1f, %.1f ms)" % (t("generate-long"), t("generate")))
for n, why in (("bad-qlora-noquant", "without quant"), ("bad-quant-plain", "outside mode qlora_bf16"),
               ("bad-optimizer", "optimizer 'lion'"), ("bad-generate", "generate.batch")):
    line = [l for l in text.splitlines() if n + " skipped" in l or (n in l and "skipped" in l)]
    check(n not in pred and any(why in l for l in line), "record '%s' is skipped: %s" % (n, line[0].strip() if line else "(no line)"))
if fails:
    print(text)
sys.exit(1 if fails else 0)
PY
