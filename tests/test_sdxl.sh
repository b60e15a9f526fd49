#!/bin/sh
# test_sdxl.sh: SDXL model checks through the vrsim command line.
#
#   VRSIM=./vrsim sh tests/test_sdxl.sh
#
# Parameter counts of the UNet, both text encoders and the VAE must match the published models
# exactly; every scenarios/sdxl_*.lua runs and states its answer in its header;
# the measured SDXL runs validate within 3 %. Prints one line per check and exits non-zero if
# any failed.
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
if [ ! -x "$VRSIM" ]; then
  echo "test_sdxl: $VRSIM is not an executable (set VRSIM)" >&2
  exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "test_sdxl: needs python3 (JSON checks)" >&2
  exit 1
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-sdxl.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

cat >"$TMP/full.lua" <<'SCN'
return {
  hardware = { gpu = "h200" },
  model = { arch = "sdxl", variant = "sdxl-base" },
  training = { micro_batch = 1, resolution = 512, precision = "bf16", checkpointing = true,
               text_encoders = "frozen", vae = "fp32", steps = 1 },
}
SCN

# ---- parameter counts ---------------------------------------------------------------------
"$VRSIM" "$TMP/full.lua" --json --no-files >"$TMP/full.json" 2>"$TMP/full.err"
RC=$?
if [ "$RC" -ge 128 ]; then fail "sdxl-base: crashed (exit $RC)" "$(tail -n 5 "$TMP/full.err")"
elif [ "$RC" -ne 0 ]; then fail "sdxl-base: exit $RC, expected 0" "$(tail -n 5 "$TMP/full.err")"
else
  for pair in unet:2567463684 text_encoder:123060480 text_encoder_2:694659840 vae:83653863; do
    mod=${pair%%:*}
    want=${pair#*:}
    got=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["parameters"].get(sys.argv[2], -1)))' "$TMP/full.json" "$mod" 2>&1)
    if [ "$got" = "$want" ]; then ok "parameters of $mod: $want"
    else fail "parameters of $mod: $got, expected $want"; fi
  done
fi

cat >"$TMP/unet.lua" <<'SCN'
return {
  hardware = { gpu = "h200" },
  model = { arch = "sdxl", variant = "sdxl-base-unet" },
  training = { micro_batch = 1, resolution = 512, precision = "bf16", steps = 1 },
}
SCN
"$VRSIM" "$TMP/unet.lua" --json --no-files >"$TMP/unet.json" 2>"$TMP/unet.err"
RC=$?
got=$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["parameters"]; print(" ".join("%s=%d" % kv for kv in sorted(p.items())))' "$TMP/unet.json" 2>&1)
if [ "$RC" -eq 0 ] && [ "$got" = "unet=2567463684" ]; then ok "sdxl-base-unet: the UNet alone ($got)"
else fail "sdxl-base-unet: exit $RC, parameters '$got'" "$(tail -n 3 "$TMP/unet.err")"; fi

"$VRSIM" "$TMP/unet.lua" --json --no-files --set precision=lora_bf16 >"$TMP/lora.json" 2>"$TMP/lora.err"
RC=$?
got=$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["parameters"]; print(p.get("unet", -1), p.get("lora_adapters", -1))' "$TMP/lora.json" 2>&1)
if [ "$RC" -eq 0 ] && [ "$got" = "2567463684 5806080" ]; then ok "LoRA rank 4 on to_q/to_k/to_v/to_out.0: 5806080 adapter parameters"
else fail "LoRA: exit $RC, unet and adapters '$got', expected '2567463684 5806080'" "$(tail -n 3 "$TMP/lora.err")"; fi

"$VRSIM" "$TMP/unet.lua" --no-files --set width=1344 --set resolution=768 >"$TMP/bucket.out" 2>"$TMP/bucket.err"
RC=$?
if [ "$RC" -eq 0 ] && grep -q "1344x768px" "$TMP/bucket.out"; then ok "a non-square aspect bucket (1344 x 768) runs"
else fail "aspect bucket: exit $RC" "$(tail -n 3 "$TMP/bucket.err")"; fi

# ---- bad input ----------------------------------------------------------------------------
"$VRSIM" "$TMP/unet.lua" --no-files --set model.variant=sdxl-turbo >"$TMP/bad.out" 2>"$TMP/bad.err"
RC=$?
if [ "$RC" -eq 2 ] && grep -q "sdxl-base" "$TMP/bad.err"; then ok "an unknown variant exits 2 and lists the known ones"
else fail "unknown variant: exit $RC, expected 2" "$(cat "$TMP/bad.err")"; fi

"$VRSIM" "$TMP/unet.lua" --no-files --set resolution=1000 >"$TMP/bad2.out" 2>"$TMP/bad2.err"
RC=$?
if [ "$RC" -eq 2 ] && grep -q "multiples of 64" "$TMP/bad2.err"; then ok "a resolution that is not a multiple of 64 exits 2"
else fail "resolution 1000: exit $RC, expected 2" "$(cat "$TMP/bad2.err")"; fi

# ---- scenarios: answered and runnable --------------------------------------------------
for s in scenarios/sdxl_*.lua; do
  [ -e "$s" ] || continue
  name=$(basename "$s" .lua)
  if ! head -n 40 "$s" | grep -qi "answer"; then fail "$name: no answer in the header comment"; fi
  # (how fast they run is a benchmark: make bench)
  "$VRSIM" "$s" --no-files >"$TMP/$name.out" 2>"$TMP/$name.err"
  RC=$?
  if [ "$RC" -eq 0 ] || [ "$RC" -eq 3 ]; then ok "$name runs (exit $RC)"
  else fail "$name: exit $RC" "$(tail -n 5 "$TMP/$name.err")"; fi
done

# ---- validation against the measured H200 runs --------------------------------------------
if [ -f validation/sdxl_h200.jsonl ]; then
  "$VRSIM" validate --json validation/sdxl_h200.jsonl >"$TMP/val.json" 2>"$TMP/val.err"
  msg=$(python3 - "$TMP/val.json" <<'PY' 2>&1
import json, sys
rows = json.load(open(sys.argv[1]))
mem = [r for r in rows if r["metric"] in ("peak_allocated", "peak_reserved")]
bad = [r for r in mem if abs(r["rel_error"]) > 0.03]
if len(mem) < 6:
    print("only %d memory rows" % len(mem)); sys.exit(1)
for r in bad:
    print("%s %s %+.2f%%" % (r["config"], r["metric"], 100 * r["rel_error"]))
sys.exit(1 if bad else 0)
PY
)
  if [ $? -eq 0 ]; then ok "validate: every SDXL run within 3 % of measured peak allocated and reserved"
  else fail "validate: SDXL runs beyond 3 %" "$msg"; fi
fi

echo "test_sdxl: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
