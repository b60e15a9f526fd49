#!/bin/sh
# Fused attention priced from the kernel table measured on the GPU (lua/hw/calibrated/
# h100_sxm_sdpa_kernels.lua, measure_sdpa_kernels.py on an H100 SXM, with the context-parallel
# ring's 16384-32768-token rows), over the H200's rows carried to it; the other boards of its
# architecture take the H100 SXM's rows carried by their peak ratio (lua/hw/carry.lua sdpa_rows);
# the H200 and the other architectures keep what they had.
#
#   VRSIM=./vrsim sh tests/test_sdpa_tables.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-sdpa.XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# a one-layer LLaMA-2-7B (32 heads of 128) under flash attention, one GPU
cat >"$TMP/l1.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { size = "7b-l1" },
         training = { micro_batch = 1, seq = 8192, steps = 2, precision = "bf16", attention = "flash" } }
EOS
# lua/ without the H100's table: the H200's rows carried, as before it was measured
cp -r "${VRSIM_LUA:-lua}" "$TMP/lua0" && rm -f "$TMP/lua0/hw/calibrated/h100_sxm_sdpa_kernels.lua"

# "fwd bwd" durations (us) of layer 0's flash attention in the second step of a run's trace
sdpa() { # name, then vrsim arguments
  _n=$1; shift
  "$VRSIM" "$TMP/l1.lua" --json --out "$TMP/$_n" "$@" >"$TMP/$_n.json" 2>"$TMP/$_n.err"
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents'] if isinstance(d, dict) else d
t = {e['name']: e['dur'] for e in ev if e.get('args', {}).get('step') == 1 and 'dur' in e}
print('%.3f %.3f' % (t.get('layers.0.self_attn.sdpa_flash', -1), t.get('layers.0.self_attn.sdpa_flash.backward', -1)))
" "$TMP/$_n/trace.json" 2>/dev/null || echo "none"
}

# ---- the H100 SXM: its own rows ------------------------------------------------------------------
# 8192 causal, the row llama7b_b1_s8192: flash fwd 1.70142 ms, fwd+bwd 6.39850, each kernel then
# the stream's gap the H100 measured (1.558 us, h100_sxm_kernel_gap.lua): 1702.978 and 4698.638 us;
# carried from the H200's row (1.73837 ms) it was 1739.928
got=$(sdpa s8)
old=$(VRSIM_LUA="$TMP/lua0" sdpa s8old)
if [ "$got" = "1702.978 4698.638" ] && [ "$old" != "$got" ]; then
  ok "H100 SXM, 8192 tokens: flash attention takes the H100's own row ($got us; carried: $old)"
else fail "H100 SXM 8192 flash: $got us, want 1702.978 4698.638 (carried: $old)" "$(tail -3 "$TMP/s8.err")"; fi
grep -q "fused attention measured on this GPU (lua/hw/calibrated/h100_sxm_sdpa_kernels.lua)" "$TMP/s8.json" \
  && ok "the step time's basis names the H100's attention table" \
  || fail "basis without the H100's attention table" "$(grep -o '"basis[^,]*' "$TMP/s8.json" | head -2)"

# 16384 causal, past the H200's largest row: the long row long_h32_d128_b1_s16384 (flash 6.58139,
# 23.12085 ms): 6582.948 and 16541.018 us; without the table the curve holds the 8192 row's rate
# flat (4 x its FLOPs: 4 x 1738.37 + 1.558 = 6955.038)
got=$(sdpa s16 --set seq=16384)
old=$(VRSIM_LUA="$TMP/lua0" sdpa s16old --set seq=16384)
if [ "$got" = "6582.948 16541.018" ] && [ "${old%% *}" = "6955.038" ]; then
  ok "H100 SXM, 16384 tokens: the measured long row, not the 8192 row's rate held flat ($got; held flat: $old)"
else fail "H100 SXM 16384 flash: $got us, want 6582.948 16541.018; without the table $old, want 6955.038 ..." \
  "$(tail -3 "$TMP/s16.err")"; fi

# ---- another board of the die: the H100 SXM's rows at its peak ratio -------------------------------
# h100_hbm2e_96g (132 SMs, no step clock: 1830 MHz against the SXM's 1980): 6581.39 x 1980/1830 +
# the H200's carried gap 1.665 = 7122.513 us
got=$(sdpa b96 --set seq=16384 --set gpu=h100_hbm2e_96g)
if [ "${got%% *}" = "7122.513" ] &&
   grep -q "fused attention from lua/hw/calibrated/h100_sxm_sdpa_kernels.lua x0.924" "$TMP/b96.json"; then
  ok "H100 96GB HBM2e: the H100 SXM's long row at x0.924 ($got us)"
else fail "H100 96GB HBM2e 16384 flash: $got us, want 7122.513 ..." "$(tail -3 "$TMP/b96.err")"; fi

# ---- the H200 and another architecture keep their carry -------------------------------------------
a=$(sdpa h2 --set gpu=h200); b=$(VRSIM_LUA="$TMP/lua0" sdpa h2old --set gpu=h200)
if [ "$a" = "$b" ] && [ "$a" != "none" ]; then ok "the H200 does not read the H100's attention table ($a us either way)"
else fail "the H100's attention table changed the H200's: $a against $b"; fi
a=$(sdpa a1 --set gpu=a100_80g); b=$(VRSIM_LUA="$TMP/lua0" sdpa a1old --set gpu=a100_80g)
if [ "$a" = "$b" ] && [ "$a" != "none" ] && ! grep -q "fused attention" "$TMP/a1.json"; then
  ok "an A100 (Ampere) keeps the H200's attention rows carried ($a us either way)"
else fail "the H100's attention table changed the A100's: $a against $b"; fi

# ---- a mask whose rows are not a multiple of 16 bytes ----------------------------------------------
# One packed row (padding-free, checkpointed: no KV cache, so transformers builds the block-causal
# mask) of 1000 + 1345 = 2345 tokens: its bf16 mask rows are 4690 bytes. cuDNN's forward read such
# a mask 2-2.7x slower than an aligned one on the H100 SXM (masked_h32_d128_b1_s2049: 0.439 ms
# against 0.205 at 2048; validation/results/sdpa_kernels_masked_more_h100_sxm.json), and its backward
# 1.45x (0.916 ms against 0.630: a length not a multiple of 64 keys, sdpa_align_h100_sxm.json, where
# 2112 keys took 0.774). One token fewer (2344, a multiple of 8) takes the aligned rows.
cat >"$TMP/pk.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { size = "7b-l1" },
         training = { micro_batch = 2, steps = 2, precision = "bf16", attention = "sdpa", checkpointing = true,
                      data = { lengths = { 1000, 1345 }, batching = "padding_free", order = "given" } } }
EOS
sed 's/1345/1344/' "$TMP/pk.lua" >"$TMP/pk2.lua"
masked() { # scenario, name, then vrsim arguments: "kind fwd bwd" of layer 0's attention in the second step
  _s=$1 _n=$2; shift 2
  "$VRSIM" "$_s" --json --out "$TMP/$_n" "$@" >"$TMP/$_n.json" 2>"$TMP/$_n.err"
  python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
t = {e['name']: e for e in ev if e.get('args', {}).get('step') == 1 and 'dur' in e}
f, b = t['layers.0.self_attn.sdpa_cudnn'], t['layers.0.self_attn.sdpa_cudnn.backward']
print(f['args']['kind'], '%.1f %.1f' % (f['dur'], b['dur']))
" "$TMP/$_n/trace.json" 2>/dev/null || echo "none"
}
un=$(masked "$TMP/pk.lua" un); al=$(masked "$TMP/pk2.lua" al)
if python3 - "$un" "$al" <<'PY'
import sys
(ku, fu, bu), (ka, fa, ba) = (a.split() for a in sys.argv[1:])
fu, bu, fa, ba = map(float, (fu, bu, fa, ba))
sys.exit(not (ku == "attention_cudnn_masked_unaligned" and ka == "attention_cudnn_masked"
              and 1.8 < fu / fa < 3.0 and 1.1 < bu / ba < 1.6))
PY
then ok "H100 SXM: a 2345-key mask takes the unaligned rows ($un), 2344 keys the aligned ones ($al)"
else fail "unaligned mask: 2345 keys $un, 2344 keys $al (want the unaligned kind, forward 1.8-3x, backward 1.1-1.6x)"; fi
grep -q "rows not a multiple of 16 bytes" "$TMP/un.json" && fail "H100 SXM: a note on the unaligned mask, whose rows it measured"
# the H200's own table has no such rows: it takes the H100 SXM's (the same die, carried by 1 and 1:
# lua/hw/carry.lua sdpa_borrowed_rows) and says so; without the H100's table, its aligned rows
h2=$(masked "$TMP/pk.lua" h2 --set gpu=h200); h2a=$(masked "$TMP/pk2.lua" h2a --set gpu=h200)
if python3 - "$un" "$h2" "$h2a" <<'PY' &&
import sys
(_, fu, _), (k2, f2, _), (_, fa, _) = (a.split() for a in sys.argv[1:])
sys.exit(not (k2 == "attention_cudnn_masked_unaligned" and abs(float(f2) / float(fu) - 1) < 0.01
              and float(f2) / float(fa) > 1.8))
PY
   grep -q "attention mask of 2345 keys, its rows not a multiple of 16 bytes: cuDNN's kernels at the rows h100_sxm measured" "$TMP/h2.json"
then ok "H200: the H100 SXM's unaligned rows, named in a note ($h2; the H100: $un; aligned on the H200: $h2a)"
else fail "H200 unaligned mask: $h2 (H100 $un, aligned $h2a), or no note naming h100_sxm" "$(grep -o '"notes[^]]*' "$TMP/h2.json" | head -c 600)"; fi
h2o=$(VRSIM_LUA="$TMP/lua0" masked "$TMP/pk.lua" h2o --set gpu=h200)
if grep -q "attention mask of 2345 keys, its rows not a multiple of 16 bytes: cuDNN's forward at the aligned mask's rate" "$TMP/h2o.json" &&
   [ "${h2o#* }" != "${h2#* }" ]
then ok "H200 without the H100's table: the aligned rate, and a note that says so ($h2o)"
else fail "H200 without the H100's table: $h2o, or no note" "$(grep -o '"notes[^]]*' "$TMP/h2o.json" | head -c 600)"; fi

# ---- flex attention (transformers' flex_attention_forward, torch.compile(flex_attention)) --------
# Llama-3-8B cut to one layer at 8192 tokens: the H100 SXM's flex row flex_h32_d128_b1_s8192
# (measure_flex_attention.py: forward 1.43513 ms, forward + backward 4.93698) plus the stream's
# gap (1.558 us): 1436.688 and 3503.408 us. Beyond cuDNN SDPA's peak: the BlockMask's eight int32
# tensors (4 x 64 + 4 x 64 x 64 entries), 67,584 bytes as the allocator rounds them (what
# measure_flex_attention.py found create_block_mask keeps), less the two 512-byte philox tensors
# cuDNN's layer keeps and flex's does not: 66,560
cp scenarios/configs/llama-3-8b.json "$TMP/"
cat >"$TMP/fx.lua" <<'EOS'
return { hardware = { gpu = "h100_sxm" }, model = { config = "llama-3-8b.json", layers = 1 },
         training = { micro_batch = 1, seq = 8192, steps = 2, precision = "bf16", attention = "flex" } }
EOS
flex() { # name, then vrsim arguments: "fwd bwd" of layer 0's flex attention in the second step
  _n=$1; shift
  "$VRSIM" "$TMP/fx.lua" --json --out "$TMP/$_n" "$@" >"$TMP/$_n.json" 2>"$TMP/$_n.err"
  python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
t = {e['name']: e['dur'] for e in ev if e.get('args', {}).get('step') == 1 and 'dur' in e}
print('%.3f %.3f' % (t['layers.0.self_attn.flex_attention'], t['layers.0.self_attn.flex_attention.backward']))
" "$TMP/$_n/trace.json" 2>/dev/null || echo "none"
}
got=$(flex fx)
"$VRSIM" "$TMP/fx.lua" --json --no-files --set attention=sdpa >"$TMP/fxs.json" 2>&1
extra=$(python3 -c "import json; a, b = (json.load(open(f)) for f in ('$TMP/fx.json', '$TMP/fxs.json')); print(a['peak_allocated_bytes'] - b['peak_allocated_bytes'])")
if [ "$got" = "1436.688 3503.408" ] && [ "$extra" = 66560 ] && ! grep -q "attention flex" "$TMP/fx.json"; then
  ok "H100 SXM flex attention: the measured row ($got us), the BlockMask's bytes beyond SDPA's peak"
else fail "H100 SXM flex: $got us (want 1436.688 3503.408), $extra bytes beyond SDPA (want 66560)" "$(tail -3 "$TMP/fx.err")"; fi
# head dim 64 (Llama-3.2-1B's): its own rows, flex_h32_d64_b1_s8192 (1.13534 and 3.51176 ms):
# 1136.898 and 2377.978 us. Its FLOPs equal the head-dim-128 row of two 4096-token sequences
# (0.77885 and 2.65962 ms), whose rate is 1.4x: one curve of both would average them
cp tests/data/recipes/llama-3.2-1b/config.json "$TMP/l1b.json"
sed 's/llama-3-8b.json/l1b.json/' "$TMP/fx.lua" >"$TMP/fx64.lua"
got64=$("$VRSIM" "$TMP/fx64.lua" --json --out "$TMP/fx64" >/dev/null 2>"$TMP/fx64.err"; python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
t = {e['name']: e for e in ev if e.get('args', {}).get('step') == 1 and 'dur' in e}
f, b = t['layers.0.self_attn.flex_attention'], t['layers.0.self_attn.flex_attention.backward']
print('%s %.3f %.3f' % (f['args']['kind'], f['dur'], b['dur']))
" "$TMP/fx64/trace.json" 2>/dev/null || echo none)
if [ "$got64" = "attention_flex_d64 1136.898 2377.978" ]; then
  ok "H100 SXM flex attention at head dim 64: its own rows ($got64)"
else fail "H100 SXM flex at head dim 64: $got64, want attention_flex_d64 1136.898 2377.978" "$(tail -3 "$TMP/fx64.err")"; fi
# the H200 borrows the H100 SXM's flex rows (the same die), an A100 has none: each says so
h2=$(flex fxh2 --set gpu=h200)
if grep -q "attention flex: FlexAttention's kernels at the rows h100_sxm measured" "$TMP/fxh2.json" && [ "${h2%% *}" != "none" ]
then ok "H200 flex attention: the H100 SXM's rows, named in a note ($h2)"
else fail "H200 flex: $h2, or no note" "$(grep -o '"notes[^]]*' "$TMP/fxh2.json" | head -c 400)"; fi
flex fxa1 --set gpu=a100_80g >/dev/null
grep -q "attention flex: no FlexAttention kernel measured on this GPU's architecture" "$TMP/fxa1.json" \
  && ok "A100 flex attention: no rows of its architecture, and a note that says so" \
  || fail "A100 flex: no note" "$(grep -o '"notes[^]]*' "$TMP/fxa1.json" | head -c 400)"
# torchtune's packed batches (training.data.batching = torchtune): FlexAttention over a document
# BlockMask, every packed row measure_flex_attention.py timed on an H100 (the lengths in order
# make exactly its packs). The kernels launch the causal grid and run the blocks the documents
# keep, a partial block priced as 2-2.8 full ones (ops/attention.lua FLEX_PARTIAL_BLOCK, from the
# causal and 16-document rows of 8192 tokens): forward and backward within 8 % of the measured
# times at 4096 and 8192 tokens, within 16 % at 2048 (short programs, launch-bound)
cp tests/data/recipes/llama-3.2-1b/config.json "$TMP/l1b.json"
packed=$(python3 - "$VRSIM" "$TMP" <<'PY'
import json, subprocess, sys
vrsim, tmp = sys.argv[1], sys.argv[2]
rows = json.load(open('validation/results/flex_attention_h100_sxm.json'))['rows']
bad, n = [], 0
for r in rows:
    if r['docs'] == 1:
        continue
    cfg = 'llama-3-8b.json' if r['dim'] == 128 else 'l1b.json'
    lens = ', '.join(str(l) for row in r['lengths'] for l in row)
    with open(tmp + '/pk.lua', 'w') as f:
        f.write('return { hardware = { gpu = "h100_sxm" }, model = { config = "%s", layers = 1 }, training = { '
                'micro_batch = %d, steps = 2, precision = "bf16", attention = "flex", data = { batching = "torchtune", '
                'pack_length = %d, lengths = { %s }, order = "given" } } }\n' % (cfg, r['batch'], r['seq'], lens))
    subprocess.run([vrsim, tmp + '/pk.lua', '--json', '--out', tmp + '/pk'], capture_output=True)
    ev = json.load(open(tmp + '/pk/trace.json'))['traceEvents']
    t = {e['name']: e['dur'] for e in ev if e.get('args', {}).get('step') == 1 and 'dur' in e}
    got = (t['layers.0.self_attn.flex_attention'] / 1e3, t['layers.0.self_attn.flex_attention.backward'] / 1e3)
    want = (r['fwd_ms'], r['fwdbwd_ms'] - r['fwd_ms'])
    bound = 0.08 if r['seq'] >= 4096 else 0.16
    n += 1
    for g, w, what in zip(got, want, ('forward', 'backward')):
        if abs(g / w - 1) > bound:
            bad.append('b%d s%d d%d %d docs %s: %.3f ms, measured %.3f' % (r['batch'], r['seq'], r['dim'], r['docs'], what, g, w))
print('%d rows' % n if not bad and n == 16 else '; '.join(bad) or 'no rows')
PY
)
[ "$packed" = "16 rows" ] && ok "H100 SXM flex attention over packed documents: $packed within 8 % (16 % at 2048 tokens)" \
  || fail "flex attention over packed documents" "$packed"
# the BlockMask torchtune's collator makes: create_block_mask uncompiled, 10 bytes an element of
# the (b, L, L) mask at its peak: 671,088,640 bytes at b 1, L 8192 (measure_flex_attention.py's
# mask_peak_bytes: 671,121,408, 32 KiB more, that neither the mask nor its blocks hold)
sed 's/seq = 8192, //; s/attention = "flex" }/attention = "flex", data = { batching = "torchtune", pack_length = 8192 } }/' \
  "$TMP/fx.lua" >"$TMP/fxtt.lua"
"$VRSIM" "$TMP/fxtt.lua" --out "$TMP/fxtt" >/dev/null 2>&1
mpk=$(python3 -c "
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
i = next(k for k, r in enumerate(rows) if r['op'] == 'block_mask.q_arange')
j = next(k for k, r in enumerate(rows) if r['op'] == 'block_mask: create_block_mask returns')
print(max(int(r['allocated_bytes']) for r in rows[i:j + 1]) - int(rows[i - 1]['allocated_bytes']))
" "$TMP/fxtt/memory.csv" 2>/dev/null)
[ "$mpk" = 671088640 ] && ok "torchtune's BlockMask: create_block_mask's dense peak, 10 bytes an element ($mpk B)" \
  || fail "torchtune's BlockMask peak: $mpk, want 671088640"
# what flex is not modelled with: each refused (exit 2), named
refused() { # name, pattern, then vrsim arguments
  _n=$1 _p=$2; shift 2
  "$VRSIM" "$@" --no-files >"$TMP/$_n.out" 2>&1; _rc=$?
  if [ "$_rc" = 2 ] && grep -q -- "$_p" "$TMP/$_n.out"; then ok "flex refused: $_n"
  else fail "flex $_n: exit $_rc, want 2 and /$_p/" "$(head -c 300 "$TMP/$_n.out")"; fi
}
refused fp32 "attention = flex in fp32 (its kernels were measured on bf16 tensors" "$TMP/fx.lua" --set precision=fp32
refused amp "attention = flex in amp_bf16 (its kernels were measured on bf16 tensors" "$TMP/fx.lua" --set precision=amp_bf16
sed 's/seq = 8192, //; s/attention = "flex" }/attention = "flex", data = { lengths = { 100, 300 } } }/' "$TMP/fx.lua" >"$TMP/fxd.lua"
refused mask4d "attention = flex with training.attention_mask = block_diagonal" "$TMP/fx.lua" --set training.attention_mask=block_diagonal
printf 'return { model = { arch = "sdxl" }, training = { attention = "flex" } }\n' >"$TMP/fxsd.lua"
refused sdxl "training.attention = flex: transformers' flex_attention_forward; arch sdxl's attention is diffusers'" "$TMP/fxsd.lua"
printf 'return { model = { config = "gemma-2-9b.json", layers = 1 }, training = { seq = 512, attention = "flex" } }\n' >"$TMP/fxg.lua"
cp scenarios/configs/gemma-2-9b.json "$TMP/"
refused gemma2 "flex" "$TMP/fxg.lua"
cp scenarios/configs/mistral-7b-v0.1.json "$TMP/"
sed 's/llama-3-8b.json/mistral-7b-v0.1.json/' "$TMP/fx.lua" >"$TMP/fxm.lua"
refused window "attention = flex past the sliding window (4096 tokens, sequences of 8192" "$TMP/fxm.lua"
refused inference "attention = flex for inference is not modelled" "$TMP/fx.lua" --set training.inference=true
sed 's/gpu = "h100_sxm" }/gpu = "h100_sxm", count = 2 }/; s/attention = "flex" }/attention = "flex", parallel = { cp = 2 } }/' \
  "$TMP/fx.lua" >"$TMP/fxcp.lua"
refused cp "attention = flex under context parallelism is not modelled" "$TMP/fxcp.lua"
cp scenarios/configs/gemma-3-4b-text.json "$TMP/"
printf 'return { model = { config = "gemma-3-4b-text.json", layers = 1 }, training = { seq = 512, attention = "flex" } }\n' >"$TMP/fxg3.lua"
refused headdim256 "attention = flex at head dim 256 (its kernels were measured at 64 and 128) is not modelled" "$TMP/fxg3.lua"

echo "test_sdpa_tables: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
