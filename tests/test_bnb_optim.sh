#!/bin/sh
# bitsandbytes' optimizer step priced from the table measured on the run's GPU
# (lua/hw/calibrated/<gpu>_bnb_optim.lua, strategies/bnb_optim.lua): per parameter its kernel's
# measured time, then torch.cuda.synchronize(), then the host's work for the next parameter; the
# path (8 or 32 bits, paged or not) taken from the parameter's state; without a row for the
# path, the kernels at their bytes and a note. The tables here are synthetic, in a copy of lua/
# (VRSIM_LUA), so that the figures are known.
VRSIM=${VRSIM:-./vrsim}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r lua "$tmp/lua"
TABLE="$tmp/lua/hw/calibrated/h100_sxm_bnb_optim.lua"

# Llama-2-7B's shapes cut to 2 layers, bf16: 21 parameters, from 4096 (the norms) to 131,072,000
# elements (the embedding and lm_head)
cat > "$tmp/c.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { arch = "llama2", size = "7b", layers = 2 },
  training = { micro_batch = 1, seq = 512, precision = "bf16", optimizer = "adamw8bit", steps = 2 } }
EOS
# the 8-bit kernel at 30 us per 1e6 elements (30 ps an element) between 1e6 and 1e9, 20 us at
# 8192 elements (the param row), host 120 - 20 = 100 us a parameter; the paged 8-bit path's host
# 300 us, its kernel as the unpaged one's, and its one-parameter step 200 us longer than the
# unpaged one's at 1e6 elements, 1200 us at 1e9: the prefetch's 1000 us more over those sizes
cat > "$TABLE" <<'EOS'
return {
  bnb_optim = {
    kernel = {
      {optim="adamw8bit", dtype="bf16", numel=1000000, kernel_us=30, step_us=200},
      {optim="adamw8bit", dtype="bf16", numel=1000000000, kernel_us=30000, step_us=30200},
      {optim="paged_adamw_8bit", dtype="bf16", numel=1000000, kernel_us=30, step_us=400},
      {optim="paged_adamw_8bit", dtype="bf16", numel=1000000000, kernel_us=30000, step_us=31400},
    },
    param = {
      {optim="adamw8bit", dtype="bf16", numel=8192, step_param_us=120, kernel_us=20, zero_grad_param_us=1},
      {optim="paged_adamw_8bit", dtype="bf16", numel=131072, step_param_us=320, kernel_us=20, zero_grad_param_us=1},
    },
  },
}
EOS

# check TRACE LABEL PAGED: each update span of step 1 against the table: its duration the
# kernel's time at its elements (from its bytes: 3 x 2 for the bf16 parameter, gradient and
# parameter written, 2 x 1 for the 8-bit states), and the time from the previous span's end to
# its start the host's work for it (after the synchronize): 100 us, or with PAGED = 1 for a
# parameter of 1e5 elements or more 300 us and the prefetch's growth. Prints the spans' count
# and "match" with the gaps seen, or the first mismatches.
check() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
label, paged = sys.argv[2], sys.argv[3] == "1"
ups = sorted((e for e in ev if e.get("name", "").startswith(label + ".update ") and e["args"]["step"] == 1),
             key=lambda e: e["ts"])
def kernel(n):
    if n <= 8192: return 20.0
    if n <= 1e6: return 20 + (30 - 20) * (n - 8192) / (1e6 - 8192)
    return 30 + (30000 - 30) * (n - 1e6) / (1e9 - 1e6)
def host(n):
    if not (paged and n >= 1e5): return 100.0
    return 300 + (1000 * (n - 1e6) / (1e9 - 1e6) if n > 1e6 else 0)
bad, gaps = [], set()
for i, e in enumerate(ups):
    n = e["args"]["bytes"] / 10
    if abs(e["dur"] - kernel(n)) > 0.01:
        bad.append("%s: %.3f us, want %.3f" % (e["name"], e["dur"], kernel(n)))
    if i:
        gap = e["ts"] - (ups[i - 1]["ts"] + ups[i - 1]["dur"])
        gaps.add(round(gap))
        if abs(gap - host(n)) > 0.01:
            bad.append("%s: %.3f us of host before it, want %.3f" % (e["name"], gap, host(n)))
print(len(ups), "; ".join(bad[:2]) if bad else "match, gaps " + ",".join("%g" % g for g in sorted(gaps)))
PY
}

# 1. AdamW8bit: every kernel at the table's time for its elements, 100 us of host between two
#    (the synchronize leaves no kernel queued while the host works)
VRSIM_LUA="$tmp/lua" "$VRSIM" "$tmp/c.lua" --out "$tmp/a" >/dev/null 2>"$tmp/err"
r=$(check "$tmp/a/trace.json" adamw8bit 0)
case "$r" in
  "21 match, gaps 100") ok "adamw8bit: 21 kernels at the table's time, 100 us of host between them" ;;
  *) bad "adamw8bit: kernels or gaps off the table [$r] $(head -c 300 "$tmp/err")" ;;
esac
if grep -q "priced at its kernels' bytes" "$tmp/a/summary.json"; then
  bad "adamw8bit with a table: the bytes note is given"
else ok "adamw8bit with a table: no bytes note"; fi

# 2. PagedAdamW8bit: after a paged parameter 300 us, and the prefetch's growth with its size
#    (the embedding's 131,072,000 elements: 130 us more, the MLP's 45,088,768: 44 us, q_proj's
#    16,777,216: 16 us); the norms (4096 elements, under get_state_buffer's 1e5) keep unpaged
#    states, the unpaged path's 100 us
VRSIM_LUA="$tmp/lua" "$VRSIM" "$tmp/c.lua" --set optimizer=paged_adamw_8bit --out "$tmp/p" >/dev/null 2>"$tmp/err"
r=$(check "$tmp/p/trace.json" PagedAdamW8bit 1)
case "$r" in
  "21 match, gaps 100,316,344,430") ok "paged_adamw_8bit: paged parameters 300 us of host and the prefetch's growth, the small unpaged ones 100 us" ;;
  *) bad "paged_adamw_8bit: the path by state or the prefetch not followed [$r] $(head -c 300 "$tmp/err")" ;;
esac

# 3. a dtype the table has no row for (fp32 parameters): the kernels at their bytes, and a note
#    naming the file and the path it lacks
VRSIM_LUA="$tmp/lua" "$VRSIM" "$tmp/c.lua" --set precision=fp32 --json --no-files >"$tmp/f.json" 2>"$tmp/err"
if grep -q "adamw8bit step priced at its kernels' bytes.*h100_sxm_bnb_optim.lua has no rows for adamw8bit fp32" "$tmp/f.json"; then
  ok "fp32 parameters without fp32 rows: priced at their bytes, the note names the missing rows"
else bad "fp32 parameters without fp32 rows: no note naming them [$(grep -o '"bitsandbytes[^"]*"' "$tmp/f.json")]"; fi

# 4. no table for the GPU: as before the table (the kernels at their bytes, no synchronize), with
#    a note
rm "$TABLE"
VRSIM_LUA="$tmp/lua" "$VRSIM" "$tmp/c.lua" --out "$tmp/n" >/dev/null 2>"$tmp/err"
r=$(check "$tmp/n/trace.json" adamw8bit 0)
if grep -q "no measured table for this GPU" "$tmp/n/summary.json" && ! echo "$r" | grep -q "match"; then
  ok "no table: priced at the kernels' bytes with a note"
else bad "no table: no note or the table's pricing [$r]"; fi

echo "test_bnb_optim: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
