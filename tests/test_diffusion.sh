#!/bin/sh
# test_diffusion.sh: Stable Diffusion 1.x / 2.x (arch sd) through the vrsim command line, read
# from their published diffusers configs (scenarios/configs/sd15-unet.json, sd21-unet.json).
#
#   VRSIM=./vrsim sh tests/test_diffusion.sh
#
# Parameter counts are diffusers' and transformers' own (UNet2DConditionModel.from_config and
# CLIPTextModel on the meta device; peft's add_adapter for the LoRA counts); the op-level checks
# read vrsim's allocator trace. Prints one line per check and exits non-zero if any failed.
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
if [ ! -x "$VRSIM" ]; then
  echo "test_diffusion: $VRSIM is not an executable (set VRSIM)" >&2
  exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "test_diffusion: needs python3 (JSON checks)" >&2
  exit 1
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-diffusion.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

cp scenarios/configs/sd15-unet.json scenarios/configs/sd21-unet.json scenarios/configs/llama-2-7b-hf.json \
   tests/data/unet_configs/sdxl_base_unet.json tests/data/diffusers/flux1-dev-transformer.json \
   scenarios/configs/sd35-large-transformer.json "$TMP/"
# scn NAME CONFIG [PRECISION]: a 512 px step of that UNet on an H200
scn() {
  printf 'return { hardware = { gpu = "h200" }, model = { arch = "sd", config = "%s" },\n  training = { micro_batch = 1, resolution = 512, precision = "%s", steps = 1 } }\n' \
    "$2" "${3:-amp_bf16}" >"$TMP/$1.lua"
}
# run NAME [ARGS...]: $TMP/NAME.json (or .out), exit status in RC
run() {
  _n=$1; shift
  "$VRSIM" "$TMP/$_n.lua" --no-files "$@" >"$TMP/$_n.out" 2>"$TMP/$_n.err"
  RC=$?
}
params() { python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["parameters"]; print(" ".join("%s=%d" % kv for kv in sorted(p.items())))' "$1" 2>&1; }
# allocations by op in a trace: count, or the first line number
nalloc() { awk -F, -v op="$2" -v sz="${3:-}" '$3 == "alloc" && $7 == op && (sz == "" || $5 == sz) { n++ } END { print n + 0 }' "$1"; }
first() { awk -F, -v op="$2" '$3 == "alloc" && $7 == op { print NR; exit }' "$1"; }

scn sd15 sd15-unet.json
scn sd21 sd21-unet.json

# ---- parameter counts: diffusers' UNet2DConditionModel and transformers' CLIPTextModel ----------
run sd15 --json --alloc-trace "$TMP/sd15.csv"
got=$(params "$TMP/sd15.out")
if [ "$RC" -eq 0 ] && [ "$got" = "text_encoder=123060480 unet=859520964 vae=83653863" ]; then
  ok "SD 1.5: UNet 859,520,964, CLIP ViT-L/14 123,060,480, VAE 83,653,863 parameters"
else fail "SD 1.5 parameters: exit $RC, '$got'" "$(tail -n 3 "$TMP/sd15.err")"; fi
run sd21 --json --alloc-trace "$TMP/sd21.csv"
got=$(params "$TMP/sd21.out")
if [ "$RC" -eq 0 ] && [ "$got" = "text_encoder=340387840 unet=865910724 vae=83653863" ]; then
  ok "SD 2.1: UNet 865,910,724, OpenCLIP ViT-H/14 (23 layers) 340,387,840, VAE 83,653,863 parameters"
else fail "SD 2.1 parameters: exit $RC, '$got'" "$(tail -n 3 "$TMP/sd21.err")"; fi

# LoRA as train_text_to_image_lora.py adds it (rank 4 on to_k, to_q, to_v, to_out.0)
scn sd15l sd15-unet.json lora_bf16
run sd15l --json
got=$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["parameters"]; print(p.get("lora_adapters", -1))' "$TMP/sd15l.out" 2>&1)
if [ "$RC" -eq 0 ] && [ "$got" = "797184" ]; then ok "SD 1.5 LoRA rank 4 on the attention projections: 797,184 adapter parameters (peft)"
else fail "SD 1.5 LoRA: exit $RC, adapters '$got', expected 797184"; fi
scn sd21l sd21-unet.json lora_bf16
run sd21l --json
got=$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["parameters"]; print(p.get("lora_adapters", -1))' "$TMP/sd21l.out" 2>&1)
if [ "$RC" -eq 0 ] && [ "$got" = "829952" ]; then ok "SD 2.1 LoRA rank 4: 829,952 adapter parameters (peft)"
else fail "SD 2.1 LoRA: exit $RC, adapters '$got', expected 829952"; fi

# ---- the forward as diffusers runs it --------------------------------------------------------
# use_linear_projection false (SD 1.x): proj_in and proj_out are 1x1 convolutions, so the copy
# back to NCHW comes before proj_out; with linear projections (SD 2.x) after it
A=unet.down_blocks.0.attentions.0
c15=$(first "$TMP/sd15.csv" "$A.to_nchw"); p15=$(first "$TMP/sd15.csv" "$A.proj_out")
c21=$(first "$TMP/sd21.csv" "$A.to_nchw"); p21=$(first "$TMP/sd21.csv" "$A.proj_out")
if [ -n "$c15" ] && [ -n "$p15" ] && [ "$c15" -lt "$p15" ] && [ -n "$c21" ] && [ -n "$p21" ] && [ "$p21" -lt "$c21" ]; then
  ok "SD 1.5's transformers convolve (to_nchw, then proj_out); SD 2.1's project linearly (proj_out, then to_nchw)"
else fail "projection order: SD 1.5 to_nchw $c15 proj_out $p15; SD 2.1 to_nchw $c21 proj_out $p21"; fi
# the first block's LayerNorm takes the permuted view of the 1x1 convolution's output:
# native_layer_norm copies it contiguous (4096 x 320 fp32 under autocast: 5,242,880 bytes; the
# forward's copy is counted here); with linear projections its input is contiguous
N=$A.transformer_blocks.0.norm1
n15=$(nalloc "$TMP/sd15.csv" "$N" 5242880); n21=$(nalloc "$TMP/sd21.csv" "$N" 5242880)
if [ "$n15" -eq $((n21 + 1)) ]; then ok "SD 1.5: norm1 copies its permuted input contiguous ($n15 allocations of 5 MiB against $n21)"
else fail "norm1 on the permuted view: $n15 allocations of 5242880 bytes in SD 1.5, $n21 in SD 2.1 (want one more)"; fi
# no added embedding (addition_embed_type null): the time embedding goes straight to the blocks
if [ "$(nalloc "$TMP/sd15.csv" unet.add_embedding.linear_1)" -eq 0 ] && [ "$(nalloc "$TMP/sd15.csv" unet.emb_add)" -eq 0 ] \
   && [ "$(nalloc "$TMP/sd15.csv" unet.time_embedding.linear_2)" -gt 0 ]; then
  ok "SD 1.5: no text/time added embedding, the time embedding alone"
else fail "SD 1.5 added embedding: add_embedding or emb_add ops in the trace"; fi
# the text encoder: text_encoder(input_ids)[0], final_layer_norm's output, called outside
# autocast (only the prepared UNet's forward autocasts): no fp32 casts of its inputs
fl=$(nalloc "$TMP/sd15.csv" text_encoder.final_layer_norm)
casts=$(awk -F, '$3 == "alloc" && $7 ~ /^text_encoder\..*(input_cast|autocast)$/' "$TMP/sd15.csv" | wc -l)
if [ "$fl" -gt 0 ] && [ "$casts" -eq 0 ]; then ok "SD 1.5's text encoder: the last hidden state (final_layer_norm), no autocast casts"
else fail "SD text encoder: final_layer_norm allocations $fl, autocast casts $casts (want > 0 and 0)"; fi
# a trained text encoder is prepared by Accelerate, so its forward autocasts (casts appear)
run sd15 --set text_encoders=trained --alloc-trace "$TMP/sd15t.csv"
casts=$(awk -F, '$3 == "alloc" && $7 ~ /^text_encoder\..*(input_cast|autocast)$/' "$TMP/sd15t.csv" | wc -l)
if [ "$RC" -eq 0 ] && [ "$casts" -gt 0 ]; then ok "a trained text encoder runs under autocast ($casts casts)"
else fail "trained text encoder: exit $RC, autocast casts $casts (want > 0)"; fi
# the VAE in weight_dtype (bf16 under amp_bf16: the 512 px batch is 1 x 3 x 512 x 512 x 2 bytes)
# and the latents kept in it (noise: 1 x 4 x 64 x 64 x 2 bytes)
if [ "$(nalloc "$TMP/sd15.csv" pixel_values 1572864)" -eq 1 ] && [ "$(nalloc "$TMP/sd15.csv" noise 32768)" -eq 1 ] \
   && [ "$(nalloc "$TMP/sd15.csv" latents.to_unet_dtype)" -eq 0 ]; then
  ok "the VAE encodes in weight_dtype (bf16) and the noise is made in the latents' dtype"
else fail "VAE and latents dtype: pixel_values / noise allocations not bf16, or a cast of the latents"; fi
run sd15 --set vae=fp32 --alloc-trace "$TMP/sd15v.csv"
if [ "$RC" -eq 0 ] && [ "$(nalloc "$TMP/sd15v.csv" pixel_values 3145728)" -eq 1 ]; then ok "training.vae = fp32: an fp32 VAE encode"
else fail "training.vae = fp32: exit $RC" "$(tail -n 3 "$TMP/sd15.err")"; fi

# ---- the shipped scenario -------------------------------------------------------------------
"$VRSIM" scenarios/sd15_train_4090.lua --no-files >"$TMP/scn.out" 2>&1
RC=$?
if [ "$RC" -eq 0 ] && grep -q "peak reached at op 'adamw._foreach_sqrt'" "$TMP/scn.out"; then
  ok "scenarios/sd15_train_4090.lua runs; its peak is the optimizer step"
else fail "sd15_train_4090: exit $RC" "$(head -n 12 "$TMP/scn.out")"; fi

# ---- what is not modelled: exit 2, naming it ------------------------------------------------
run sd15 --set model.config=flux1-dev-transformer.json
if [ "$RC" -eq 2 ] && grep -q "FluxTransformer2DModel config (Flux.1's transformer: arch flux reads it)" "$TMP/sd15.err"; then
  ok "Flux.1-dev's transformer config with arch sd: exit 2, pointed to arch flux"
else fail "Flux config with arch sd: exit $RC" "$(cat "$TMP/sd15.err")"; fi
run sd15 --set arch=flux
if [ "$RC" -eq 2 ] && grep -q "arch flux reads a FluxTransformer2DModel config; this is a diffusers UNet2DConditionModel config" "$TMP/sd15.err"; then
  ok "model.arch = flux with SD 1.5's UNet config: exit 2, the config named"
else fail "arch flux with a UNet config: exit $RC" "$(cat "$TMP/sd15.err")"; fi
run sd15 --set arch=sd3
if [ "$RC" -eq 2 ] && grep -q "arch sd3 reads an SD3Transformer2DModel config; this is a diffusers UNet2DConditionModel config" "$TMP/sd15.err"; then
  ok "model.arch = sd3 with SD 1.5's UNet config: exit 2, the config named"
else fail "arch sd3 with a UNet config: exit $RC" "$(cat "$TMP/sd15.err")"; fi
run sd15 --set model.config=sd35-large-transformer.json
if [ "$RC" -eq 2 ] && grep -q "SD3Transformer2DModel config (Stable Diffusion 3's transformer: arch sd3 reads it)" "$TMP/sd15.err"; then
  ok "SD 3.5 Large's transformer config with arch sd: exit 2, pointed to arch sd3"
else fail "SD3 config with arch sd: exit $RC" "$(cat "$TMP/sd15.err")"; fi
printf 'return { hardware = { gpu = "h200" }, model = { arch = "llama", config = "flux1-dev-transformer.json" }, training = { seq = 128 } }\n' >"$TMP/fll.lua"
run fll
if [ "$RC" -eq 2 ] && grep -q 'arch = "flux" a FluxTransformer2DModel config' "$TMP/fll.err"; then ok "Flux.1's config with a language-model arch: exit 2, pointed to arch flux"
else fail "Flux config with arch llama: exit $RC" "$(cat "$TMP/fll.err")"; fi
run sd15 --set model.config=sdxl_base_unet.json
if [ "$RC" -eq 2 ] && grep -q 'addition_embed_type "text_time" is SDXL' "$TMP/sd15.err"; then ok "SDXL's UNet config with arch sd: exit 2, pointed to arch sdxl"
else fail "SDXL config with arch sd: exit $RC" "$(cat "$TMP/sd15.err")"; fi
run sd15 --set model.config=llama-2-7b-hf.json
if [ "$RC" -eq 2 ] && grep -q "this is a transformers LlamaForCausalLM config" "$TMP/sd15.err"; then ok "a Llama config with arch sd: exit 2"
else fail "Llama config with arch sd: exit $RC" "$(cat "$TMP/sd15.err")"; fi
sed 's/"in_channels": 4,/"in_channels": 9,/' "$TMP/sd15-unet.json" >"$TMP/inpaint.json"
run sd15 --set model.config=inpaint.json
if [ "$RC" -eq 2 ] && grep -q "in_channels 9" "$TMP/sd15.err"; then ok "an inpainting UNet (in_channels 9): exit 2"
else fail "in_channels 9: exit $RC" "$(cat "$TMP/sd15.err")"; fi
sed 's/"cross_attention_dim": 768,/"cross_attention_dim": 512,/' "$TMP/sd15-unet.json" >"$TMP/x512.json"
run sd15 --set model.config=x512.json
if [ "$RC" -eq 2 ] && grep -q "cross_attention_dim = 512: no Stable Diffusion text encoder" "$TMP/sd15.err"; then
  ok "cross_attention_dim 512 (no published text encoder of that width): exit 2"
else fail "cross_attention_dim 512: exit $RC" "$(cat "$TMP/sd15.err")"; fi
sed 's/"dual_cross_attention": false,/"dual_cross_attention": true, "attention_type": "gated",/' "$TMP/sd15-unet.json" >"$TMP/dual.json"
run sd15 --set model.config=dual.json
if [ "$RC" -eq 2 ] && grep -q 'dual_cross_attention = true (modelled: null)' "$TMP/sd15.err" \
   && grep -q 'attention_type = "gated"' "$TMP/sd15.err"; then ok "a UNet that differs (dual cross-attention, gated attention): exit 2 naming both keys"
else fail "dual_cross_attention: exit $RC" "$(cat "$TMP/sd15.err")"; fi
sed 's/"sample_size": 64,/"sample_size": 64, "cross_attention_norm_num_groups": 32,/' "$TMP/sd15-unet.json" >"$TMP/extra.json"
run sd15 --set model.config=extra.json
if [ "$RC" -eq 2 ] && grep -q "keys vrsim does not read: cross_attention_norm_num_groups" "$TMP/sd15.err"; then ok "a UNet config key vrsim does not read: exit 2 naming it"
else fail "unread key: exit $RC" "$(cat "$TMP/sd15.err")"; fi
printf 'return { hardware = { gpu = "h200" }, model = { arch = "sd" }, training = { resolution = 512 } }\n' >"$TMP/noc.lua"
run noc
if [ "$RC" -eq 2 ] && grep -q "arch sd needs model.config" "$TMP/noc.err"; then ok "arch sd without model.config: exit 2"
else fail "arch sd without a config: exit $RC" "$(cat "$TMP/noc.err")"; fi
run sd21 --set attention=eager
if [ "$RC" -eq 2 ] && grep -q "upcast_attention" "$TMP/sd21.err"; then ok "SD 2.1's upcast_attention with eager attention: exit 2"
else fail "upcast_attention with eager: exit $RC" "$(cat "$TMP/sd21.err")"; fi
run sd15 --set seq=128
if [ "$RC" -eq 2 ] && grep -q "training.seq = 128: sd does not read it" "$TMP/sd15.err"; then ok "training.seq on arch sd: exit 2"
else fail "seq on arch sd: exit $RC" "$(cat "$TMP/sd15.err")"; fi

# the language-model techniques are refused on a diffusion model by name, never ignored
for case in "float8:precision=bf16 training.float8.recipe=tensorwise:training.float8 is not modelled for this model" \
            "dpo:training.dpo.prompt_length=8 training.dpo.completion_length=8:training.dpo is TRL's DPOTrainer"; do
  name=${case%%:*}; rest=${case#*:}; sets=${rest%%:*}; want=${rest#*:}
  args=""; for s in $sets; do args="$args --set $s"; done
  run sd15 $args
  if [ "$RC" -eq 2 ] && grep -qF "$want" "$TMP/sd15.err"; then ok "$name on arch sd: exit 2 naming it"
  else fail "$name on arch sd: exit $RC" "$(cat "$TMP/sd15.err")"; fi
done
printf 'return { hardware = { gpu = "h200" }, model = { arch = "sd", config = "sd15-unet.json" },\n  training = { resolution = 512, inference = true, generate = { prompt = 8, max_new_tokens = 2 } } }\n' >"$TMP/gen.lua"
run gen
if [ "$RC" -eq 2 ] && grep -qF "training.generate is transformers' generate" "$TMP/gen.err"; then ok "generate on arch sd: exit 2 naming it"
else fail "generate on arch sd: exit $RC" "$(cat "$TMP/gen.err")"; fi

echo "test_diffusion: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
