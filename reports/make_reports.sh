#!/bin/sh
# reports/make_reports.sh: regenerates what is written from vrsim's output (`make reports` runs it):
#   reports/seed_claims.md                   the seed article's claims (below)
#   scenarios/*.lua headers' checked answers  reports/scenario_answers.sh write
#   README.md        blocks example, validation-summary
#   docs/validation.md  block validate-table (all of `vrsim validate`)
#   docs/step-time.md  block published (tests/test_published.sh as a table; python3)
#   docs/scenarios.md   block fields (`vrsim fields`)
#   docs/gpus.md        blocks gpus (`vrsim gpus`) and gpu-kinds (each figure's kind, --sources)
# A block is the text between `<!-- BEGIN NAME (make reports) -->` and `<!-- END NAME -->`; the
# rest of each file is left byte for byte. Running it twice changes nothing.
#
# Every claim of the seed article (issue 8) is checked by running vrsim on a scenario in
# scenarios/claims/ (each file's header states the claim and the variants run here). This script
# only runs them, reads the figures from `--json`, does the arithmetic and writes one row per
# claim: the claim, vrsim's figures, a verdict (holds / holds only when ... / does not hold / not
# checked yet) and why. The verdict thresholds are in the code next to each claim.
#
#   VRSIM=./vrsim sh reports/make_reports.sh [OUT.md]
#
# Needs only sh, sed and awk. Same vrsim, same bytes out.
set -u
cd "$(dirname "$0")/.." || exit 1
VRSIM=${VRSIM:-./vrsim}
OUT=${1:-reports/seed_claims.md}
[ -x "$VRSIM" ] || { echo "make_reports: $VRSIM is not built (make)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-claims.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
T=$(printf '\t')
C=scenarios/claims

# sim NAME SCENARIO [KEY=VALUE ...]: $TMP/NAME.json (vrsim --json), exit status in $TMP/NAME.rc
sim() {
  _n=$1; _s=$2; shift 2
  _a=""
  for _kv in "$@"; do _a="$_a --set $_kv"; done
  # shellcheck disable=SC2086
  "$VRSIM" "$_s" $_a --json --no-files >"$TMP/$_n.json" 2>"$TMP/$_n.err"
  echo $? >"$TMP/$_n.rc"
}
rc()   { cat "$TMP/$1.rc"; }
fits() { [ "$(rc "$1")" = 0 ]; }
# get NAME KEY: a top-level number of NAME's summary.json (empty if absent)
get()  { sed -n "s/^$T\"$2\":$T\([^,{]*\),\{0,1\}\$/\1/p" "$TMP/$1.json" | head -n 1; }
# bd NAME CATEGORY: bytes of the breakdown at peak
bd()   { sed -n "/^$T\"breakdown_at_peak\":/,/^$T}/s/^$T$T\"$2\":$T\([^,]*\),\{0,1\}\$/\1/p" "$TMP/$1.json" | head -n 1; }
# par NAME MODULE: parameter count of a module; par NAME: all of them
par() {
  sed -n "/^$T\"parameters\":$T{/,/^$T}/s/^$T$T\"\([^\"]*\)\":$T\([0-9.e+]*\),\{0,1\}\$/\1 \2/p" "$TMP/$1.json" |
    awk -v m="${2:-}" 'm == "" || $1 == m { s += $2 } END { printf "%.0f", s }'
}
# m EXPR: awk arithmetic, printed with %.Nf via m1/m2 or as is
m()  { awk "BEGIN { printf \"%s\", $1 }"; }
m0() { awk "BEGIN { printf \"%.0f\", $1 }"; }
m1() { awk "BEGIN { printf \"%.1f\", $1 }"; }
m2() { awk "BEGIN { printf \"%.2f\", $1 }"; }
# in RANGE: X is within [LO, HI]
within() { awk "BEGIN { exit !(($1) >= ($2) && ($1) <= ($3)) }"; }
GB=1000000000
GIB=1073741824
gib() { m2 "($1) / $GIB"; }
gb()  { m1 "($1) / $GB"; }
# the peak as nvidia-smi shows it: reserved plus the CUDA context
smi() { m "$(get "$1" peak_reserved_bytes) + $(bd "$1" cuda_context)"; }
verdict_of() { if fits "$1"; then echo "fits"; else echo "does not fit"; fi; }

ROWS="$TMP/rows.md"
: >"$ROWS"
N=0
# row CLAIM FIGURES VERDICT WHY
row() {
  N=$((N + 1))
  printf '| %d | %s | %s | **%s** | %s |\n' "$N" "$1" "$2" "$3" "$4" >>"$ROWS"
}

# ---- 1. SDXL 512 -> 768 ----------------------------------------------------------------------
# "GB" in such claims is what nvidia-smi shows (MiB / 1024): compared in GiB.
sim sdxl512 $C/sdxl_resolution.lua resolution=512
sim sdxl768 $C/sdxl_resolution.lua resolution=768
sim sdxlL512 $C/sdxl_resolution.lua resolution=512 precision=lora_bf16
sim sdxlL768 $C/sdxl_resolution.lua resolution=768 precision=lora_bf16
a=$(smi sdxl512); b=$(smi sdxl768); la=$(smi sdxlL512); lb=$(smi sdxlL768)
fig="full fine-tune (bf16 weights and AdamW state, fused AdamW, no checkpointing, one image): $(gib "$a") GiB at 512 px, $(gib "$b") GiB at 768 px; LoRA on the UNet: $(gib "$la") and $(gib "$lb") GiB (peak reserved + CUDA context)"
if within "$a / $GIB" 15.3 20.7 && within "$b / $GIB" 23.8 32.2; then v="holds"; w="Both figures within 15 %."
elif within "$la / $GIB" 15.3 20.7 && within "$lb / $GIB" 23.8 32.2; then v="holds only for LoRA"; w="The LoRA figures match within 15 %."
elif within "($b / $a) / (28 / 18)" 0.85 1.15 || within "($lb / $la) / (28 / 18)" 0.85 1.15; then v="holds only as a ratio"; w="The growth matches 28/18 = 1.56, the absolute figures do not."
else v="does not hold at one image per step"
  w="A 10 GB rise needs activations that dominate. At one image the full fine-tune's peak is in backward, where the UNet's bf16 weights, gradients and AdamW state (20 GB that do not depend on the resolution) dominate: +$(gib "$(m "$b - $a")") GiB from 512 to 768 px. With LoRA the state is small and activations show: +$(gib "$(m "$lb - $la")") GiB ($(m0 "100 * ($lb / $la - 1)") %). The claim's figures fit a larger batch or another setup it does not state."
fi
row "SDXL training memory rises from about 18 GB at 512x512 to about 28 GB at 768x768" "$fig" "$v" "$w"

# ---- 2. SDXL on an RTX 3090 ------------------------------------------------------------------
sim sdxl3090 $C/sdxl_3090.lua
t=$(smi sdxl3090)
te=$(m "($(par sdxl3090 text_encoder) + $(par sdxl3090 text_encoder_2)) * 2")
vae=$(m "$(par sdxl3090 vae) * 4")
unet=$(m "$(bd sdxl3090 parameters) - $te - $vae + $(bd sdxl3090 gradients) + $(bd sdxl3090 optimizer_state)")
inter=$(m "$(bd sdxl3090 activations) + $(bd sdxl3090 temporaries) + $(bd sdxl3090 allocator_slack)")
fig="$(verdict_of sdxl3090) at 1024 px with checkpointing (bf16, fused AdamW): $(gib "$t") GiB in all (peak reserved + CUDA context); UNet weights + gradients + AdamW state $(gib "$unet") GiB, text encoders $(gib "$te") GiB (bf16), VAE $(gib "$vae") GiB (fp32), activations + temporaries + allocator slack $(gib "$inter") GiB, CUDA context $(gib "$(bd sdxl3090 cuda_context)") GiB"
if fits sdxl3090 && within "$t / $GIB" 22 24.5; then
  if within "$unet / $GIB" 9 15; then v="holds"; w="Total and UNet share match."
  else v="holds only in total"
    w="The total matches, but the split does not: the UNet's trained state (bf16 weights, gradients and AdamW moments of 2.57 B parameters) is $(gib "$unet") GiB, not 12, and checkpointing leaves little for intermediates; the text encoders and the VAE are frozen weights only ($(gib "$te") and $(gib "$vae") GiB)."
  fi
elif within "$t / $GIB" 22 24.5; then v="holds in total, but does not fit"
  w="vrsim's total, $(gib "$t") GiB, is inside the claim's 22-24 GB, but more than the card can hold, so it does not fit. The UNet's trained state (2.57 B parameters) is $(gib "$unet") GiB at the peak, not 12."
else v="does not hold"; w="vrsim finds $(gib "$t") GiB ($(verdict_of sdxl3090))."
fi
row "SDXL training on an RTX 3090 uses 22-24 GB: UNet 12 GB, text encoder 3 GB, VAE decoder 2 GB, intermediates 5 GB" "$fig" "$v" "$w"

# ---- 3. LLaMA2 weights -----------------------------------------------------------------------
fig=""; ok=1
for s in 7b 13b 70b; do
  sim "w$s" $C/llama2_weights.lua model.size=$s capacity_gib=2048
  p=$(par "w$s")
  case $s in 7b) c32=28; c16=14 ;; 13b) c32=52; c16=26 ;; 70b) c32=280; c16=140 ;; esac
  f32=$(m "$p * 4 / $GB"); f16=$(m "$p * 2 / $GB")
  within "$f32 / $c32" 0.9 1.1 || ok=0
  fig="$fig${fig:+; }$s: $(m2 "$p / 1e9") B parameters, $(m1 "$f32") GB fp32, $(m1 "$f16") GB fp16"
done
sim inf7 $C/llama2_weights.lua gpu=rtx3090
sim inf13 $C/llama2_weights.lua model.size=13b gpu=a100_40g
n40=$(m0 "int($(par w70b) * 2 / ($(get inf13 capacity_bytes) + 0) + 0.999999)")
fig="$fig. fp16 inference: 7B on an RTX 3090 $(verdict_of inf7), 13B on an A100-40GB $(verdict_of inf13); 70B weights alone fill $n40 A100-40GB"
if [ $ok = 1 ] && fits inf7 && fits inf13; then v="holds"
  w="The figures are 4 and 2 bytes per parameter, with 7/13/70 B rounded (LLaMA2 has 6.74/13.0/69.0 B). The setups are the smallest that hold the fp16 weights for inference; 8x A100 leaves room for activations and the KV cache (the weights need $n40 A100-40GB). The 70B setup is judged by weight size (scenarios/claims/device_map.lua shows how device_map=\"auto\" fills the GPUs)."
elif [ $ok = 1 ]; then v="holds for the weights; not for the setups"; w="The weight figures hold (4 and 2 bytes per parameter); fp16 inference does not fit as stated, see the figures."
else v="does not hold"; w="See the figures."
fi
row "LLaMA2 weights need 28/52/280 GB in FP32 and 14/26/140 GB in FP16 for 7B/13B/70B; smallest setups RTX 3090, A100-40GB, 8x A100" "$fig" "$v" "$w"

# ---- 4. 13B on one RTX 4090 ------------------------------------------------------------------
sim l13 $C/llama13b_4090.lua
sim l13lora $C/llama13b_4090.lua precision=lora_bf16
sim l13qlora $C/llama13b_4090.lua precision=lora_bf16 quant=nf4
fig="full bf16 fine-tune (checkpointing, micro-batch 2, accumulation 8): $(verdict_of l13); LoRA on bf16 weights: $(verdict_of l13lora)"
fits l13lora && fig="$fig ($(gib "$(get l13lora peak_reserved_bytes)") GiB reserved)"
fig="$fig; QLoRA (4-bit weights): $(verdict_of l13qlora)"
fits l13qlora && fig="$fig ($(gib "$(get l13qlora peak_reserved_bytes)") GiB reserved)"
if fits l13; then v="holds"; w="A full fine-tune fits."
elif fits l13lora; then v="holds only with LoRA"; w="The bf16 weights alone are $(gib "$(m "$(par l13lora) * 2")") GiB; a full fine-tune adds gradients and optimizer state and cannot fit in 24 GB whatever the micro-batch. With LoRA the frozen weights fit and micro-batch 2 with accumulation 8 works."
elif fits l13qlora; then v="holds only with QLoRA"; w="The bf16 weights alone ($(gib "$(m "$(par l13lora) * 2")") GiB) do not leave room on a 24 GB card; 4-bit base weights (QLoRA) do."
else v="does not hold"; w="Not even QLoRA fits here."
fi
row "LLaMA2-13B trains on one RTX 4090 (24 GB) with micro-batch 2 and gradient accumulation 8" "$fig" "$v" "$w"

# ---- 5. mixed precision ----------------------------------------------------------------------
sim fp32 $C/precision.lua
sim amp $C/precision.lua precision=amp_bf16
sim bf16 $C/precision.lua precision=bf16
r32=$(get fp32 peak_reserved_bytes); ra=$(get amp peak_reserved_bytes); rb=$(get bf16 peak_reserved_bytes)
sa=$(m "100 * (1 - $ra / $r32)"); sb=$(m "100 * (1 - $rb / $r32)")
fig="peak reserved fp32 $(gib "$r32") GiB, amp bf16 (fp32 weights and state, autocast) $(gib "$ra") GiB (-$(m0 "$sa") %), pure bf16 $(gib "$rb") GiB (-$(m0 "$sb") %); LLaMA2-7B, micro-batch 1 x 2048, H200"
if within "$sa" 30 50; then v="holds"; w="Autocast saves about 40 % here."
elif within "$sb" 30 60; then v="holds only when weights and optimizer state are in bf16 too"
  w="torch.autocast keeps fp32 weights, gradients and AdamW state and casts per op: it saves only activations, which are small at micro-batch 1 ($(m0 "$sa") %). Storing weights, gradients and AdamW state in bf16 halves them ($(m0 "$sb") %)."
else v="does not hold"; w="Savings $(m0 "$sa") % (autocast) and $(m0 "$sb") % (bf16)."
fi
row "Mixed precision cuts memory by about 40 %" "$fig" "$v" "$w"

# ---- 6. LoRA ---------------------------------------------------------------------------------
sim lora $C/lora.lua
sim lorafull $C/lora.lua precision=bf16
sim lorafp32 $C/lora.lua precision=fp32
rl=$(get lora peak_reserved_bytes); rf=$(get lorafull peak_reserved_bytes); r3=$(get lorafp32 peak_reserved_bytes)
s1=$(m "100 * (1 - $rl / $rf)"); s3=$(m "100 * (1 - $rl / $r3)")
fig="peak reserved LoRA $(gib "$rl") GiB against full bf16 $(gib "$rf") GiB (-$(m0 "$s1") %) and full fp32 $(gib "$r3") GiB (-$(m0 "$s3") %); LLaMA2-7B, micro-batch 1 x 2048"
if within "$s1" 60 80; then v="holds"; w="Against a full bf16 fine-tune."
elif within "$s3" 60 85; then v="holds only against a full fp32 fine-tune"
  w="LoRA drops the gradients and AdamW state of the 6.7 B frozen weights, but the frozen bf16 weights (12.6 GiB) and the activations remain: $(m0 "$s1") % less than a full bf16 fine-tune, $(m0 "$s3") % less than fp32."
else v="does not hold"; w="Savings $(m0 "$s1") % (against bf16), $(m0 "$s3") % (against fp32)."
fi
row "LoRA (r=8 on q and v) cuts memory by about 70 %" "$fig" "$v" "$w"

# ---- 7. flash attention ----------------------------------------------------------------------
fig=""; rat4096=""
for s in 512 4096; do
  sim "eager$s" $C/attention.lua attention=eager seq=$s
  sim "sdpa$s" $C/attention.lua attention=sdpa seq=$s
  # activations alive after forward: the forward peak over what the step started with
  fe=$(sed -n "s/^$T$T$T\"fwd_peak_allocated_bytes\":$T\([0-9]*\),\$/\1/p" "$TMP/eager$s.json" | tail -n 1)
  fs=$(sed -n "s/^$T$T$T\"fwd_peak_allocated_bytes\":$T\([0-9]*\),\$/\1/p" "$TMP/sdpa$s.json" | tail -n 1)
  ee=$(sed -n "s/^$T$T$T\"end_allocated_bytes\":$T\([0-9]*\),\$/\1/p" "$TMP/eager$s.json" | tail -n 2 | head -n 1)
  es=$(sed -n "s/^$T$T$T\"end_allocated_bytes\":$T\([0-9]*\),\$/\1/p" "$TMP/sdpa$s.json" | tail -n 2 | head -n 1)
  ae=$(m "$fe - $ee"); as=$(m "$fs - $es")
  fig="$fig${fig:+; }$s tokens: activations after forward eager $(gib "$ae") GiB, SDPA $(gib "$as") GiB ($(m2 "$as / $ae") x), peak reserved $(gib "$(get "eager$s" peak_reserved_bytes)") against $(gib "$(get "sdpa$s" peak_reserved_bytes)") GiB"
  [ "$s" = 4096 ] && rat4096=$(m "$as / $ae")
done
if within "$rat4096" 0 0.6; then v="holds"
  w="Eager attention saves the heads x s x s softmax probabilities for backward (and materialises them in fp32); SDPA's flash kernel saves q, k, v, the output and the log-sum-exp only. The saving grows with the square of the sequence: at 512 tokens it is small."
else v="does not hold"; w="SDPA keeps $(m2 "$rat4096") of eager's activations at 4096 tokens."
fi
row "Flash attention halves attention memory" "$fig" "$v" "$w"

# ---- 8. checkpointing time -------------------------------------------------------------------
sim ck $C/checkpointing.lua
sim nock $C/checkpointing.lua checkpointing=false
tk=$(get ck step_time_ms); tn=$(get nock step_time_ms)
inc=$(m "100 * ($tk / $tn - 1)")
fig="step time $(m1 "$tn") ms without, $(m1 "$tk") ms with checkpointing (+$(m0 "$inc") %, H200 calibrated profile); peak reserved $(gib "$(get nock peak_reserved_bytes)") against $(gib "$(get ck peak_reserved_bytes)") GiB"
if within "$inc" 20 40; then v="holds"
  w="Every layer's forward runs again inside backward: about one more forward, a third of the forward + backward work."
else v="does not hold"; w="vrsim finds +$(m0 "$inc") %."
fi
row "Gradient checkpointing costs about 30 % more time" "$fig" "$v" "$w"

# ---- 9. accumulation -------------------------------------------------------------------------
sim acc $C/accumulation.lua
sim b32 $C/accumulation.lua micro_batch=32 grad_accum=1
fig="4 x 8 accumulated: $(verdict_of acc) ($(gib "$(get acc peak_reserved_bytes)") GiB reserved); one batch of 32: $(verdict_of b32); LLaMA2-7B bf16 with checkpointing on an A100-80GB"
if fits acc && ! fits b32; then v="holds"
  w="Only one micro-batch's activations are alive at a time; gradients accumulate into the same .grad buffers."
else v="does not hold"; w="See the figures."
fi
row "Accumulating 4 x 8 instead of a batch of 32 that does not fit" "$fig" "$v" "$w"

# ---- 10. data / pipeline / tensor parallelism ------------------------------------------------
sim dp1 $C/data_parallel.lua
sim dp4ddp $C/data_parallel.lua hardware.count=4 strategy=ddp
sim dp4z3 $C/data_parallel.lua hardware.count=4 strategy=zero3
# a 4-stage 1F1B pipeline of 4 micro-batches (each as large as the one GPU's batch): its busiest
# rank, the verdict (docs/pipeline.md)
sim pp4 $C/data_parallel.lua hardware.count=4 training.parallel.pp=4
# tensor parallelism over the same 4 GPUs (DTensor colwise/rowwise with sequence parallelism, as
# torchtitan applies it: lua/strategies/tp.lua)
sim tp4 $C/data_parallel.lua hardware.count=4 training.parallel.tp=4
r1=$(get dp1 peak_reserved_bytes); rd=$(get dp4ddp peak_reserved_bytes); rz=$(get dp4z3 peak_reserved_bytes)
rp=$(get pp4 peak_reserved_bytes); sp=$(m0 "100 * (1 - $rp / $r1)")
rt=$(get tp4 peak_reserved_bytes); st=$(m0 "100 * (1 - $rt / $r1)")
fig="LLaMA2-7B per GPU: 1 GPU $(gib "$r1") GiB; 4 GPUs DDP $(gib "$rd") GiB ($(verdict_of dp4ddp)); 4 GPUs ZeRO-3 $(gib "$rz") GiB ($(m0 "100 * (1 - $rz / $r1)") % less); 4-stage 1F1B pipeline, busiest stage $(gib "$rp") GiB ($sp % less); TP 4 $(gib "$rt") GiB ($st % less)"
if within "$sp" 60 80; then vp="holds for pipeline parallelism"; else vp="does not hold for pipeline parallelism ($sp %)"; fi
if within "$st" 50 70; then vt="holds for tensor parallelism"
elif awk "BEGIN { exit !($st > 70) }"; then vt="tensor parallelism saves more than claimed ($st %)"
else vt="does not hold for tensor parallelism ($st %)"; fi
wp="A pipeline stage holds a quarter of the weights, gradients and AdamW state, and under 1F1B the first stage keeps 4 micro-batches of its quarter of the layers in flight: $sp % less on the busiest stage. Tensor parallelism shards each linear layer's weights, gradients and AdamW state four ways (the embedding and head by vocabulary), and with sequence parallelism the norms' activations too: $st % less."
if awk "BEGIN { exit !($rd >= $r1) }"; then
v="does not hold for data parallelism; $vp; $vt"
w="Plain data parallelism (DDP) replicates the model and adds gradient buckets: it saves nothing per GPU. Sharding (ZeRO/FSDP) is what saves. $wp"
else v="holds only with sharding; $vp; $vt"
w="DDP saves $(m0 "100 * (1 - $rd / $r1)") % per GPU here; sharding (ZeRO/FSDP) saves more. $wp"
fi
row "Data, pipeline and tensor parallelism save 30-50 %, 60-80 % and 50-70 % of memory" "$fig" "$v" "$w"

# ---- 11. ZeRO stages -------------------------------------------------------------------------
fig=""; need1=""; need24=1; need8=""
for n in 1 2 4 8; do
  first=none
  for z in zero1 zero2 zero3; do
    sim "z$n$z" $C/zero_stages.lua hardware.count=$n strategy=$z
    if fits "z$n$z"; then first=$z; break; fi
  done
  fig="$fig${fig:+; }$n GPU$( [ $n = 1 ] || echo s): $first"
  case $n in 1) need1=$first ;; 2|4) [ "$first" = zero2 ] || need24=0 ;; 8) need8=$first ;; esac
done
fig="LLaMA2-13B bf16 on A100-80GBs, lowest stage that fits: $fig"
if [ "$need1" = zero1 ] && [ $need24 = 1 ] && [ "$need8" = zero3 ]; then v="holds"; w="Matches."
else v="does not hold as a rule"
  w="ZeRO shards state across ranks (each holds 1/N of it), so on one card no stage helps; which stage a count needs depends on the model and the card, not on the count alone (the figures give the lowest stage that fits at each count; lower stages communicate less)."
fi
row "ZeRO-1 for one card, ZeRO-2 for 2-4, ZeRO-3 for 8" "$fig" "$v" "$w"

# ---- 12-13. catalog claims -------------------------------------------------------------------
"$VRSIM" $C/catalog.lua --no-files >"$TMP/catalog.out" 2>&1
cat_t=$(sed -n 2p "$TMP/catalog.out")
kv() { printf '%s\n' "$cat_t" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
p4=$(kv pcie4); p4t=${p4%%,*}; p4a=${p4##*,}; nvl=$(kv nvlink_a100)
fig="lua/hw/links.lua: PCIe 4.0 x16 $(gb "$p4t") GB/s per direction ($(gb "$p4a") GB/s typical achieved); lua/hw/gpus.lua: A100 NVLink $(gb "$nvl") GB/s both directions together ($(gb "$(m "$nvl / 2")") per direction)"
if within "$p4t / $GB" 28 36 && within "$nvl / $GB" 550 650; then v="holds, counting directions differently"
  w="32 GB/s is one direction, 600 GB/s is both directions of 12 NVLink links: per direction it is 31.5 against 300 GB/s, about 10x, not 19x."
else v="does not hold"; w="See the catalog figures."
fi
row "PCIe 4.0 x16 at about 32 GB/s against NVLink at about 600 GB/s" "$fig" "$v" "$w"
b4=$(kv buy4090); ba=$(kv buya100); g4=$(kv gb4090); ga=$(kv gba100)
fig="lua/hw/prices.lua: RTX 4090 launch MSRP \$$b4 for $g4 GB = \$$(m0 "$b4 / $g4") per GB; A100-80GB purchase price: $( [ "$ba" = 0 ] && echo "not in the catalog" || echo "\$$ba = \$$(m0 "$ba / $ga") per GB"); rental \$$(kv rent4090)/h against \$$(kv renta100)/h = \$$(m "1000 * $(kv rent4090) / $g4" | awk '{printf "%.1f", $1}') against \$$(m "1000 * $(kv renta100) / $ga" | awk '{printf "%.1f", $1}') per GB per 1000 h"
v="does not hold at launch prices; not checked for the A100"
w="At its launch MSRP an RTX 4090 costs about \$$(m0 "$b4 / $g4") per GB, not \$20; the catalog has no A100-80GB purchase price. Rented, the two cost about the same per GB-hour."
row "An RTX 4090 at about \$20 per GB of memory against an A100-80GB at about \$50" "$fig" "$v" "$w"

# ---- 14. memory fraction ---------------------------------------------------------------------
"$VRSIM" maxbatch $C/memory_fraction.lua >"$TMP/mf100.out" 2>&1
"$VRSIM" maxbatch $C/memory_fraction.lua --set memory_fraction=0.9 >"$TMP/mf90.out" 2>&1
b100=$(sed -n 's/^answer: micro_batch = \([0-9]*\) fits.*/\1/p' "$TMP/mf100.out")
b90=$(sed -n 's/^answer: micro_batch = \([0-9]*\) fits.*/\1/p' "$TMP/mf90.out")
fig="LLaMA2-7B LoRA with checkpointing on an RTX 4090 (vrsim maxbatch): largest micro-batch ${b100:-none} without a cap, ${b90:-none} with set_per_process_memory_fraction(0.9)"
v="holds as a safety margin, at a cost"
w="The cap makes PyTorch's allocator treat 90 % of the card's total memory as its limit (it fails, after freeing cached blocks and retrying, instead of calling cudaMalloc); it leaves room for other processes and for the CUDA context, and here it lowers the largest micro-batch by $( [ -n "$b100" ] && [ -n "$b90" ] && echo "$((b100 - b90))" || echo "an unknown amount")."
row "A 90 % memory-fraction cap" "$fig" "$v" "$w"

# ---- 15. 8-bit inference ---------------------------------------------------------------------
sim i8 $C/int8_inference.lua
sim i16 $C/int8_inference.lua quant=none
fig="LLaMA2-7B inference at 2048 tokens on an RTX 3090: int8 $(verdict_of i8), peak reserved $(gib "$(get i8 peak_reserved_bytes)") GiB; fp16 $(verdict_of i16), $(gib "$(get i16 peak_reserved_bytes)") GiB"
if fits i8; then v="holds"; w="LLM.int8 stores the linear weights in one byte each (embeddings and norms stay fp16)."
else v="does not hold"; w="See the figures."
fi
row "LLaMA2-7B inference in 8-bit" "$fig" "$v" "$w"

# ---- 16. device_map --------------------------------------------------------------------------
sim dm0 $C/device_map.lua rank=0
sim dm1 $C/device_map.lua rank=1
fig="LLaMA2-13B fp16 inference at 2048 tokens on 2x RTX 3090, max_memory 20 GiB: GPU 0 $(verdict_of dm0), peak reserved $(gib "$(get dm0 peak_reserved_bytes)") GiB ($(gib "$(bd dm0 parameters)") GiB of weights); GPU 1 $(verdict_of dm1), $(gib "$(get dm1 peak_reserved_bytes)") GiB ($(gib "$(bd dm1 parameters)") GiB of weights)"
if fits dm0 && fits dm1; then
  if awk "BEGIN { exit !($(bd dm1 parameters) < 0.5 * $(bd dm0 parameters)) }"; then
    v="holds, but the split is not 20 + 20"
    w="device_map=\"auto\" fills GPU 0 up to its max_memory first and puts only the rest on GPU 1, so the second card holds much less; max_memory is a ceiling per GPU, not a share."
  else v="holds"; w="Both GPUs fit within their max_memory."
  fi
else v="does not hold"; w="See the figures."
fi
row "A two-GPU device_map with 20 GiB each" "$fig" "$v" "$w"

# ---- 17. torch.compile -----------------------------------------------------------------------
sim ce $C/compile.lua
sim cc $C/compile.lua compile=true
sim cle $C/compile.lua precision=lora_bf16
sim clc $C/compile.lua precision=lora_bf16 compile=true
# pct EXPR: a signed whole percentage (+3, -11)
pct() { awk "BEGIN { printf \"%+.0f\", $1 }"; }
# fwdact NAME: the forward peak less the weights and optimizer state (activations, temporaries)
fwdact() {
  _f=$(sed -n "s/^$T$T$T\"fwd_peak_allocated_bytes\":$T\([0-9]*\),\$/\1/p" "$TMP/$1.json" | tail -n 1)
  m "$_f - $(bd "$1" parameters) - $(bd "$1" optimizer_state)"
}
re=$(get ce peak_reserved_bytes); rc_=$(get cc peak_reserved_bytes)
rle=$(get cle peak_reserved_bytes); rlc=$(get clc peak_reserved_bytes)
ae=$(fwdact ce); ac=$(fwdact cc); ale=$(fwdact cle); alc=$(fwdact clc)
sa=$(m "100 * (1 - $ac / $ae)"); sla=$(m "100 * (1 - $alc / $ale)")
sr=$(m "100 * (1 - $rc_ / $re)"); slr=$(m "100 * (1 - $rlc / $rle)")
fig="LLaMA2-7B, micro-batch 1 x 2048, H200, each decoder layer compiled: full bf16 fine-tune peak reserved $(gib "$re") GiB eager, $(gib "$rc_") GiB compiled ($(pct "0 - ($sr)") %), activations and temporaries at the forward peak $(gib "$ae") against $(gib "$ac") GiB ($(pct "0 - ($sa)") %); LoRA $(gib "$rle") against $(gib "$rlc") GiB ($(pct "0 - ($slr)") %), activations $(gib "$ale") against $(gib "$alc") GiB ($(pct "0 - ($sla)") %); step $(m1 "$(get ce step_time_ms)") -> $(m1 "$(get cc step_time_ms)") ms full, $(m1 "$(get cle step_time_ms)") -> $(m1 "$(get clc step_time_ms)") ms LoRA"
if within "$sr" 10 20; then v="holds"; w="Compiled layers save fewer activations and the peak falls by about the claimed share."
elif within "$slr" 10 20 || within "$sa" 10 40; then
  v="holds for activations, not for a full fine-tune's peak"
  w="AOTAutograd's min-cut partitioner saves a layer's matmul outputs, the normalized inputs of the matmuls and the attention kernel's outputs, and recomputes the rest (RMSNorm's fp32 intermediates, SiLU) in backward; Inductor's fused kernels never allocate those intermediates. That removes $(m0 "$sa") % of the activations, but a full fine-tune's peak is the optimizer step over bf16 weights, gradients and AdamW state, which compile does not touch ($(pct "0 - ($sr)") % peak reserved, the allocator's slack included). Where activations weigh more, as under LoRA, the peak falls $(m0 "$slr") %."
else v="does not hold"; w="Compiled layers change the peak by $(pct "0 - ($sr)") % (full) and $(pct "0 - ($slr)") % (LoRA)."; fi
row "torch.compile improves memory efficiency by about 15 %" "$fig" "$v" "$w"

{
  echo "# The seed article's claims, checked by vrsim"
  echo
  echo "Generated by \`make reports\` (reports/make_reports.sh); do not edit by hand. Each row runs the"
  echo "scenarios in scenarios/claims/ (the file's header names the variants); figures are vrsim's,"
  echo "step times come from the calibrated profile where the GPU has one (the H200), else the roofline on datasheet figures. GB = 10^9 bytes, GiB = 2^30."
  echo
  echo "| # | claim | vrsim | verdict | why |"
  echo "|---|---|---|---|---|"
  cat "$ROWS"
} >"$TMP/out.md"
mv "$TMP/out.md" "$OUT"
echo "make_reports: $OUT ($N claims)"

# ---- generated blocks of README.md and docs/ --------------------------------------------------
# splice FILE NAME CONTENT: CONTENT (a file) between FILE's BEGIN NAME and END NAME markers
splice() {
  grep -q "^<!-- BEGIN $2 (make reports) -->\$" "$1" && grep -q "^<!-- END $2 -->\$" "$1" ||
    { echo "make_reports: $1 has no block $2" >&2; exit 1; }
  awk -v name="$2" -v content="$3" '
    $0 == "<!-- BEGIN " name " (make reports) -->" { print; while ((getline l < content) > 0) print l; skip = 1; next }
    $0 == "<!-- END " name " -->" { skip = 0 }
    !skip { print }' "$1" >"$TMP/splice" && { cmp -s "$TMP/splice" "$1" || cat "$TMP/splice" >"$1"; }
  echo "make_reports: $1 ($2)"
}
# fence ARGS...: `./vrsim ARGS` and what it prints, as a fenced block in $TMP/fence
fence() {
  { echo '```'; echo "\$ ./vrsim $*"; "$VRSIM" "$@" 2>&1; echo '```'; } >"$TMP/fence"
}
fence scenarios/llama7b_h200.lua
splice README.md example "$TMP/fence"
"$VRSIM" validate >"$TMP/validate" 2>&1
{ echo '```'; echo '$ ./vrsim validate   (its last lines)'
  sed -n '/^  peak_allocated  mean/,$p' "$TMP/validate"; echo '```'; } >"$TMP/summary"
splice README.md validation-summary "$TMP/summary"
{ echo '```'; echo '$ ./vrsim validate'; cat "$TMP/validate"; echo '```'; } >"$TMP/table"
splice docs/validation.md validate-table "$TMP/table"
# published throughput beside vrsim's (the rows, sources and bands of tests/data/published_throughput.tsv)
MARKDOWN=1 VRSIM=$VRSIM sh tests/test_published.sh >"$TMP/pubout" 2>&1 ||
  { echo "make_reports: tests/test_published.sh failed:" >&2; cat "$TMP/pubout" >&2; exit 1; }
{ grep -v '^test_published:' "$TMP/pubout"; echo
  echo "\`sh tests/test_published.sh\` (make test runs it and holds every row to 25 %, each median to 15 %)."
} >"$TMP/published"
splice docs/step-time.md published "$TMP/published"
{ echo '```'; echo '$ ./vrsim fields'; "$VRSIM" fields 2>&1; echo '```'; } >"$TMP/fields"
splice docs/scenarios.md fields "$TMP/fields"
# the GPU catalog: `vrsim gpus`, and each figure's kind from `vrsim gpus --sources` as a table
fence gpus
splice docs/gpus.md gpus "$TMP/fence"
"$VRSIM" gpus --sources 2>&1 | awk '
  BEGIN { print "| catalog name | card | memory | usable | context | bandwidth | peaks | SMs | L2 | NVLink | power |"
          print "|---|---|---|---|---|---|---|---|---|---|---|" }
  /^[a-z0-9_]+ \(/ { key = $1; name = substr($0, length($1) + 3); sub(/\)$/, "", name) }
  /^  kind / { row = "| `" key "` | " name " |"
               n = split(substr($0, 26), f, ", ")
               for (i = 1; i <= n; i++) { sub(/^[a-z0-9_]+ /, "", f[i]); row = row " " f[i] " |" }
               print row }' >"$TMP/kinds"
splice docs/gpus.md gpu-kinds "$TMP/kinds"
VRSIM=$VRSIM sh reports/scenario_answers.sh write >"$TMP/answers"; arc=$?
grep -v '^ok ' "$TMP/answers"
echo "make_reports: scenarios/*.lua ($(grep -c '^ok ' "$TMP/answers") answers as they were)"
exit $arc
