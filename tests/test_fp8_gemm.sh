#!/bin/sh
# float8 GEMMs (torchao Float8Linear's torch._scaled_mm) priced from the rows measured on an H100
# SXM (lua/hw/calibrated/h100_sxm_gemm_fp8.lua, measure_fp8_gemm.py), not the roofline (dense fp8
# peak x eff_compute); the H200 and the other Hopper boards take those rows by their fp8 peak
# ratio (lua/hw/carry.lua gemm_rows); a card of another architecture keeps the roofline, named.
#
#   VRSIM=./vrsim sh tests/test_fp8_gemm.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-fp8.XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# a one-layer LLaMA-2-7B, 8192 tokens, its Linears Float8Linear (tensorwise), one GPU
cat >"$TMP/l1.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { size = "7b-l1" },
         training = { micro_batch = 1, seq = 8192, steps = 2, precision = "bf16", attention = "flash",
                      float8 = { recipe = "tensorwise" } } }
EOS
# lua/ without the H100's fp8 table: the roofline, as before it was measured
cp -r "${VRSIM_LUA:-lua}" "$TMP/lua0" && rm -f "$TMP/lua0/hw/calibrated/h100_sxm_gemm_fp8.lua"

# the duration (us) of layer 0's down_proj grad_input GEMM (8192 x 11008 x 4096, one fp8
# _scaled_mm) in the second step of a run's trace
gemm() { # name, then vrsim arguments
  _n=$1; shift
  "$VRSIM" "$TMP/l1.lua" --json --out "$TMP/$_n" "$@" >"$TMP/$_n.json" 2>"$TMP/$_n.err" || { echo none; return; }
  grep '"step":1' "$TMP/$_n/trace.json" | grep -o '"name":"layers.0.mlp.down_proj.backward"[^}]*' |
    grep -o '"dur":[0-9.]*' | head -1 | cut -d: -f2
}

# ---- the H100 SXM: its own rows --------------------------------------------------------------------
# 738.73 GFLOP: two rows of those FLOPs (8192 x 11008 x 4096 at 1372.50 TFLOP/s, 8192 x 4096 x
# 11008 at 1387.64), their mean 1380.07: 535.288 us, then the stream's gap the H100 measured
# (1.558 us) = 536.846. The roofline: 1978.9 x 0.75 = 1484.2 TFLOP/s, 497.741 + 1.558 = 499.299
got=$(gemm s); old=$(VRSIM_LUA="$TMP/lua0" gemm s0)
if [ "$got" = "536.846" ] && [ "$old" = "499.299" ]; then
  ok "H100 SXM: the fp8 GEMM takes the measured rows' time ($got us; the roofline: $old)"
else fail "H100 SXM fp8 GEMM: $got us, want 536.846; without the table $old, want 499.299" "$(tail -3 "$TMP/s.err")"; fi
grep -q "float8 GEMMs measured on this GPU (lua/hw/calibrated/h100_sxm_gemm_fp8.lua)" "$TMP/s.json" \
  && ok "the step time's basis names the H100's fp8 table" \
  || fail "basis without the H100's fp8 table" "$(grep -o '"basis[^,]*' "$TMP/s.json" | head -2)"
grep -q "float8 GEMMs on NVIDIA H100 80GB HBM3 at the roofline" "$TMP/s0.json" \
  && ok "without the table, the roofline is named in a note" || fail "no roofline note without the table"

# ---- the H200: the H100 SXM's rows at x1 (same die, SMs, step clock) ----------------------------------
# 535.288 + the H200's own gap (1.665) = 536.953
got=$(gemm h2 --set gpu=h200)
if [ "$got" = "536.953" ] && grep -q "float8 GEMMs from lua/hw/calibrated/h100_sxm_gemm_fp8.lua x1.000" "$TMP/h2.json"; then
  ok "H200: the H100 SXM's fp8 rows at x1.000 ($got us)"
else fail "H200 fp8 GEMM: $got us, want 536.953" "$(tail -3 "$TMP/h2.err")"; fi

# ---- another H100 board: at its fp8 peak ratio to the SXM's ---------------------------------------
got=$(gemm b96 --set gpu=h100_hbm2e_96g); old=$(VRSIM_LUA="$TMP/lua0" gemm b960 --set gpu=h100_hbm2e_96g)
if [ "$got" != "none" ] && [ "$got" != "$old" ] &&
   grep -q "float8 GEMMs from lua/hw/calibrated/h100_sxm_gemm_fp8.lua x0.924" "$TMP/b96.json"; then
  ok "H100 96GB HBM2e: the H100 SXM's fp8 rows at x0.924 ($got us; the roofline: $old)"
else fail "H100 96GB HBM2e fp8 GEMM: $got us (roofline $old), want the SXM's rows at x0.924" "$(tail -3 "$TMP/b96.err")"; fi

# ---- another architecture keeps the roofline, named --------------------------------------------------
a=$(gemm l4 --set gpu=l40s); b=$(VRSIM_LUA="$TMP/lua0" gemm l40 --set gpu=l40s)
if [ "$a" = "$b" ] && [ "$a" != "none" ] && grep -q "float8 GEMMs on NVIDIA L40S at the roofline" "$TMP/l4.json"; then
  ok "an L40S (Ada) keeps the roofline, with a note ($a us either way)"
else fail "the H100's fp8 table changed the L40S's: $a against $b"; fi

# ---- the rowwise recipe: the tensorwise rows, named -----------------------------------------------------
got=$(gemm rw --set training.float8.recipe=rowwise)
if [ "$got" = "536.846" ] && grep -q "float8 recipe rowwise: its GEMMs at the tensorwise rows" "$TMP/rw.json"; then
  ok "rowwise: the tensorwise rows, with a note ($got us)"
else fail "rowwise fp8 GEMM: $got us, want 536.846 and a note" "$(tail -3 "$TMP/rw.err")"; fi

echo "test_fp8_gemm: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
