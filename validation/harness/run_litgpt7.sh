#!/bin/bash
# One device call on one H100 (under 540 s): litgpt's own LoRA / QLoRA fine-tuning step
# (measure_litgpt.py: litgpt/finetune/lora.py's GPT, Fabric, optimizer and fit() on random weights
# and random tokens, at the settings of config_hub/finetune/*/qlora.yaml) beside the same model
# through transformers and peft (measure_llama.py), each line's peaks against vrsim's prediction
# made before the run (validation/results/litgpt7_predictions_h100.jsonl), and the allocator's live
# blocks at each litgpt line's peak, to name what the published QLoRA rows hold beside vrsim.
#
#   bash validation/harness/run_litgpt7.sh --fetch-wheels   # here: the wheels into .whl/ (network)
#   bash validation/harness/run_litgpt7.sh --predict        # here: vrsim's predictions (./vrsim built)
#   bash validation/harness/run_litgpt7.sh --dry-run        # here, no GPU: both litgpt releases' CPU check
#   bash validation/harness/run_litgpt7.sh [BUDGET_S]       # the GPU machine (carry .whl), default 530 s
#
# The wheels (--fetch-wheels runs exactly this; 32.9 MB, with the tracked tree about 59 MiB):
#   P="--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
#      --platform manylinux2014_x86_64 --platform any"
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P -d .whl \
#     litgpt==0.5.13 lightning==2.6.6 lightning-utilities==0.15.3 jsonargparse==4.41.0 docstring-parser==0.18.0 \
#     typeshed-client==2.15.0 torchmetrics==1.9.0 psutil==7.2.2 bitsandbytes==0.50.2 peft==0.21.2 \
#     transformers==5.25.0 huggingface_hub==2.4.0 httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5 \
#     hf-xet==1.8.0 click==8.5.1 tomlkit==0.15.3 regex==2026.5.9 kernels==0.19.1
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P \
#     -d .whl/era2404 lightning==2.3.0
#   git -C LITGPT_CLONE archive --format=tar.gz 43c44323 litgpt > .whl/era2404/litgpt-43c44323-src.tar.gz
# then bitsandbytes' CUDA 11.8-12.8 and 13.2 and ROCm libraries are taken out of its wheel (the
# image is CUDA 13.0; 43 MB -> 3.9 MB). The published QLoRA rows ran bitsandbytes 0.42.0, whose
# libraries link CUDA 12's runtime and cuBLASLt, which the CUDA 13.0 image lacks: every line runs
# 0.50.2, and vrsim predicts each at bitsandbytes=0.50.2 (and, for reference, 0.42.0).
# litgpt at 43c44323 (2024-04-24, 0.4.0.dev0, the published QLoRA figures' commit) pinned the
# nightly lightning==2.3.0.dev20240328, which no index serves: lightning 2.3.0 (2024-06) stands in;
# its `import pkg_resources` (setuptools dropped it in 81) gets a one-function stand-in.
set -u
cd "$(dirname "$0")/../.."
# the wheels' folder (ignored by git; carried to the GPU machine): exactly the set named above
export WHL=${WHL:-.whl}
PRED=validation/results/litgpt7_predictions_h100.jsonl
HF_PLAN=validation/harness/plans/plan_litgpt7_hf.jsonl
Y2404=validation/harness/plans/litgpt7_llama2_7b_qlora_43c44323.yaml
D=tests/data
TINY_SET="--set lora_key=true --set lora_projection=true --set lora_mlp=true --set lora_head=true --set train.micro_batch_size=8 --set train.global_batch_size=8"
# name | program (new: litgpt 0.5.13, 2404: litgpt 43c44323, hf: measure_llama.py) | seconds |
# harness arguments (hf: the plan line's name) | vrsim scenario | vrsim --set keys
LINES=(
  "lit-qlora-l2-7b-l4|new|75|--model Llama-2-7b-hf --layers 4|$D/published_memory_litgpt_llama2_7b_qlora.lua|layers=4"
  "lit-qlora-l2-7b|new|110|--model Llama-2-7b-hf|$D/published_memory_litgpt_llama2_7b_qlora.lua|"
  "lit2404-qlora-l2-7b|2404|110|--yaml $Y2404 --model Llama-2-7b-hf|$D/published_memory_litgpt_llama2_7b_qlora.lua|"
  "hf-qlora-l2-7b-l4|hf|90|litgpt7-hf-qlora-l2-7b-l4||"
  "lit-lora-l2-7b|new|90|--model Llama-2-7b-hf --set quantize=none|$D/published_memory_litgpt_llama2_7b_lora.lua|"
  "lit-qlora-tinyllama|new|70|--model TinyLlama-1.1B-intermediate-step-1431k-3T $TINY_SET|$D/published_memory_litgpt_tinyllama_qlora.lua|model.config=scenarios/configs/tinyllama-1.1b.json"
  "lit-qlora-mistral-7b|new|110|--model Mistral-7B-v0.1|$D/published_memory_litgpt_mistral_7b_qlora.lua|model.config=scenarios/configs/mistral-7b-v0.1.json"
  "hf-qlora-l2-7b|hf|200|litgpt7-hf-qlora-l2-7b||"
)

fetch_wheels() {
  local P="--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
  local PD="python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P"
  mkdir -p $WHL/era2404
  $PD -d $WHL litgpt==0.5.13 lightning==2.6.6 lightning-utilities==0.15.3 jsonargparse==4.41.0 \
    docstring-parser==0.18.0 typeshed-client==2.15.0 torchmetrics==1.9.0 psutil==7.2.2 bitsandbytes==0.50.2 \
    peft==0.21.2 transformers==5.25.0 huggingface_hub==2.4.0 httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5 \
    hf-xet==1.8.0 click==8.5.1 tomlkit==0.15.3 regex==2026.5.9 kernels==0.19.1 || return 1
  $PD -d $WHL/era2404 lightning==2.3.0 || return 1
  if [ -z "${LITGPT_CLONE:-}" ]; then
    LITGPT_CLONE=$(mktemp -d)/litgpt
    git clone -q https://github.com/Lightning-AI/litgpt "$LITGPT_CLONE" || return 1
  fi
  git -C "$LITGPT_CLONE" archive --format=tar.gz 43c44323 litgpt > $WHL/era2404/litgpt-43c44323-src.tar.gz || return 1
  python3 - <<'EOF'
import glob, os, re, zipfile
src = glob.glob(os.environ.get("WHL", ".whl") + "/bitsandbytes-0.50.2-*.whl")[0]
drop = re.compile(r"bitsandbytes/libbitsandbytes_(cuda1(18|21|24|26|28|32)|rocm\d+)\.so$")
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(src + ".tmp", "w", zipfile.ZIP_DEFLATED) as zout:
    for i in zin.infolist():
        if drop.search(i.filename):
            continue
        data = zin.read(i.filename)
        if i.filename.endswith("RECORD"):
            data = b"\n".join(l for l in data.split(b"\n") if l.strip() and not drop.search(l.split(b",")[0].decode())) + b"\n"
        zout.writestr(i, data)
os.replace(src + ".tmp", src)
EOF
  du -cb $WHL/*.whl $WHL/era2404/* | tail -1
}

predict() {
  # vrsim's peak for each line, before the run: the litgpt lines from the published rows'
  # scenarios on the H100 with bitsandbytes 0.50.2 (what runs) and 0.42.0 (the rows' release)
  local commit; commit=$(git rev-parse --short HEAD)
  local tmp; tmp=$(mktemp -d)
  : > "$PRED.tmp"
  for line in "${LINES[@]}"; do
    IFS='|' read -r name prog secs hargs scen sets <<<"$line"
    [ "$prog" = hf ] && continue
    local s="--set hardware.gpu=h100_sxm"; for kv in $sets; do s="$s --set $kv"; done
    ./vrsim "$scen" $s --set bitsandbytes=0.50.2 --json --no-files > "$tmp/a.json" || return 1
    ./vrsim "$scen" $s --set bitsandbytes=0.42.0 --json --no-files > "$tmp/b.json" || return 1
    python3 - "$name" "$prog" "$hargs" "$scen" "$sets" "$commit" "$tmp/a.json" "$tmp/b.json" >> "$PRED.tmp" <<'EOF'
import json, sys
name, prog, hargs, scen, sets, commit, a, b = sys.argv[1:]
a, b = json.load(open(a)), json.load(open(b))
mib = lambda x: round(x / 1048576, 2)
print(json.dumps({"name": name, "program": {"new": "litgpt 0.5.13", "2404": "litgpt 43c44323"}[prog],
                  "harness": hargs, "scenario": scen, "sets": ("hardware.gpu=h100_sxm " + sets).strip(),
                  "bitsandbytes": "0.50.2", "vrsim_commit": commit,
                  "pred_peak_alloc_mib": mib(a["peak_allocated_bytes"]),
                  "pred_peak_reserved_mib": mib(a["peak_reserved_bytes"]),
                  "pred_peak_alloc_mib_bnb_0_42_0": mib(b["peak_allocated_bytes"]),
                  "pred_n_trainable": a.get("n_trainable"),
                  "note": "vrsim simulates litgpt 0.5's program; 43c44323's main() makes no StableEmbedding"
                          " (its weight and gradient are in the prediction) and gives the optimizer only"
                          " the trainable parameters" if prog == "2404" else ""}))
EOF
  done
  python3 validation/harness/predict_plan.py --plan "$HF_PLAN" --gpu h100 | python3 -c "
import json, sys
names = {'litgpt7-hf-qlora-l2-7b-l4': 'hf-qlora-l2-7b-l4', 'litgpt7-hf-qlora-l2-7b': 'hf-qlora-l2-7b'}
for l in sys.stdin:
    r = json.loads(l)
    r.pop('hf_config', None)
    r['plan_name'] = r['name']; r['name'] = names[r['name']]; r['program'] = 'transformers + peft (measure_llama.py)'
    print(json.dumps(r))" >> "$PRED.tmp" || return 1
  mv "$PRED.tmp" "$PRED"
  cat "$PRED"
}

if [ "${1:-}" = "--fetch-wheels" ]; then fetch_wheels; exit $?; fi
if [ "${1:-}" = "--predict" ]; then predict; exit $?; fi
if [ "${1:-}" = "--dry-run" ]; then
  # no GPU: each litgpt release through one optimizer step of a tiny config (quantization skipped)
  S=$(mktemp -d); S24=$(mktemp -d)
  # litgpt's own stack only (pure-Python wheels: this machine's Python need not be the GPU image's 3.12)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$S" $WHL/litgpt-*.whl $WHL/lightning-*.whl \
    $WHL/lightning_utilities-*.whl $WHL/jsonargparse-*.whl $WHL/docstring_parser-*.whl $WHL/typeshed_client-*.whl \
    $WHL/torchmetrics-*.whl $WHL/bitsandbytes-*.whl 2>&1 | grep -v "^WARNING" | tail -2
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$S24" $WHL/era2404/lightning-*.whl 2>&1 | grep -v "^WARNING" | tail -2
  tar -xzf $WHL/era2404/litgpt-43c44323-src.tar.gz -C "$S24"
  python3 -c "import pkg_resources" 2>/dev/null || printf 'def declare_namespace(name):\n    pass\n' > "$S24/pkg_resources.py"
  rc=0
  PYTHONPATH=$S python3 validation/harness/measure_litgpt.py --cpu-check --name lit-dry 2>&1 | tail -1 || rc=1
  PYTHONPATH=$S24:$S python3 validation/harness/measure_litgpt.py --cpu-check --name lit2404-dry --yaml $Y2404 2>&1 | tail -1 || rc=1
  rm -rf "$S" "$S24"
  exit $rc
fi

# the GPU machine
BUDGET=${1:-530}
T0=$(date +%s)
OUT=${OUT:-/tmp/litgpt7-out}; mkdir -p "$OUT"
W=/tmp/litgpt7-run; rm -rf "$W"; mkdir -p "$W/traces"
export PYTHONUNBUFFERED=1 USE_HUB_KERNELS=NO TOKENIZERS_PARALLELISM=false
elapsed() { echo $(( $(date +%s) - T0 )); }
LOG=$OUT/log_litgpt7.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $WHL/*.whl 2>&1 | grep -v "^WARNING\|already exists" | tail -3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site2404 $WHL/era2404/lightning-*.whl 2>&1 | grep -v "^WARNING\|already exists" | tail -3
tar -xzf $WHL/era2404/litgpt-43c44323-src.tar.gz -C /tmp/site2404
python3 -c "import pkg_resources" 2>/dev/null || printf 'def declare_namespace(name):\n    pass\n' > /tmp/site2404/pkg_resources.py
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  for S in /tmp/site "/tmp/site2404:/tmp/site"; do
    PYTHONPATH=$S python3 -c "import sys, torch, bitsandbytes, lightning, litgpt, transformers, peft; print(sys.version.split()[0], 'torch', torch.__version__, 'bnb', bitsandbytes.__version__, 'lightning', lightning.__version__, 'litgpt', litgpt.__file__, 'transformers', transformers.__version__, 'peft', peft.__version__)" 2>&1 | tail -1
  done
} > "$OUT/env_litgpt7.txt"
cat "$OUT/env_litgpt7.txt"
REC=$W/litgpt7_records_h100.jsonl; : > "$REC"
for line in "${LINES[@]}"; do
  IFS='|' read -r name prog secs hargs scen sets <<<"$line"
  left=$(( BUDGET - $(elapsed) - 15 ))
  if [ "$left" -lt 45 ]; then echo "== [$(elapsed) s] $name: skipped, $left s left" | tee -a "$LOG"; continue; fi
  [ "$secs" -gt "$left" ] && secs=$left
  echo "== [$(elapsed) s] $name ($prog, up to $secs s)" | tee -a "$LOG"
  case $prog in
    new)  PYTHONPATH=/tmp/site timeout -k 5 "$secs" python3 validation/harness/measure_litgpt.py $hargs --name "$name" \
            --steps 3 --out "$REC" --trace-dir "$W/traces" >> "$LOG" 2>&1 ;;
    2404) PYTHONPATH=/tmp/site2404:/tmp/site timeout -k 5 "$secs" python3 validation/harness/measure_litgpt.py $hargs \
            --name "$name" --steps 3 --out "$REC" --trace-dir "$W/traces" >> "$LOG" 2>&1 ;;
    hf)   cfg=$(python3 -c "import json,sys; [print(l.strip()) for l in open('$HF_PLAN') if json.loads(l)['name'] == '$hargs']")
          cfg=$(python3 -c "import json,sys; c=json.loads(sys.argv[1]); c['name']='$name'; print(json.dumps(c))" "$cfg")
          PYTHONPATH=/tmp/site timeout -k 5 "$secs" python3 validation/harness/measure_llama.py --config "$cfg" \
            --out "$REC" --trace-dir "$W/traces" >> "$LOG" 2>&1 ;;
  esac
  echo "   rc $? at $(elapsed) s" | tee -a "$LOG"
  grep -v "^\s*$" "$LOG" | tail -4 | cut -c1-300
done
# one line per configuration: measured against predicted
python3 - "$REC" "$PRED" <<'EOF' | tee "$OUT/summary_litgpt7.txt"
import json, sys
recs = {}
for l in open(sys.argv[1]):
    r = json.loads(l); recs[r["name"]] = r
preds = {json.loads(l)["name"]: json.loads(l) for l in open(sys.argv[2])}
for name, p in preds.items():
    r = recs.get(name)
    if r is None:
        print(f"{name}: no record"); continue
    m = r.get("train_peak_alloc_mib") or max((s.get("peak_allocated_mib", s.get("peak_alloc_mib", 0)) for s in r.get("steps", r.get("steps_rec", []))), default=0)
    mr = r.get("peak_reserved_mib") or max((s.get("peak_reserved_mib", 0) for s in r.get("steps", r.get("steps_rec", []))), default=0)
    pa, pr = p["pred_peak_alloc_mib"], p["pred_peak_reserved_mib"]
    print(f"{name}: peak allocated {m:.1f} MiB (vrsim {pa:.1f}, {100 * (pa - m) / m:+.1f} %), reserved {mr:.1f} MiB "
          f"(vrsim {pr:.1f}, {100 * (pr - mr) / mr:+.1f} %)"
          + (f", build peak {r['build_peak_alloc_mib']}" if "build_peak_alloc_mib" in r else "")
          + (f", trace peak {r['trace_peak_alloc_mib']}" if "trace_peak_alloc_mib" in r else ""))
EOF
cp "$REC" "$OUT/"
# the peaks' live blocks in one file; the traces in parts of at most 15 MiB (8 files come back)
python3 -c "
import glob, json
with open('$OUT/peaks_litgpt7.jsonl', 'w') as f:
    for p in sorted(glob.glob('$W/traces/peak_*.json')):
        f.write(json.dumps(json.load(open(p))) + '\n')"
(cd "$W/traces" && tar -cf "$W/traces_litgpt7.tar" fulltrace_*.csv.gz 2>/dev/null) && \
  split -b 15m -d -a 1 "$W/traces_litgpt7.tar" "$OUT/traces_litgpt7.tar.part"
# 8 files come back: the five above and three parts; a fourth part on is left on the machine
for f in $(ls "$OUT"/traces_litgpt7.tar.part* 2>/dev/null | tail -n +4); do echo "left out: $f"; rm -f "$f"; done
ls -la "$OUT"
echo "== done in $(elapsed) s"
