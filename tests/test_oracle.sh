#!/bin/sh
# test_oracle.sh: vrsim against every committed oracle capture (validation/oracle/: the real
# transformers/peft/torch training step run on fake CUDA tensors, docs/oracle.md). Each
# captures/NAME.jsonl.gz is compared with scenarios/NAME.lua by compare.py (standard library
# only: no torch needed); the comparison must find no divergence outside the named CUDA-only
# and fake-tensor-only differences, or exactly the divergences expected/NAME.txt lists (each
# explained in docs/oracle.md). Then compare.py must catch a scenario that is not the capture's.
#
#   VRSIM=./vrsim sh tests/test_oracle.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_oracle: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-oracle.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }
O=validation/oracle
# compare.py --quiet --expect expected/NAME.txt on captures/NAME against scenarios/NAME into
# $TMP/out: the output the first loop below kept of that same command where it ran it (the
# comparison is a function of those files and vrsim alone), else a run of its own
compared_with_expect() {
  if [ -f "$TMP/out.$1" ]; then cp "$TMP/out.$1" "$TMP/out"
  else python3 "$O/compare.py" --quiet --vrsim "$VRSIM" --expect "$O/expected/$1.txt" \
         "$O/captures/$1.jsonl.gz" "$O/scenarios/$1.lua" >"$TMP/out" 2>&1; fi
}
n=0
r=0
for cap in "$O"/captures/*.jsonl.gz; do
  [ -f "$cap" ] || continue
  name=$(basename "$cap" .jsonl.gz)
  scen="$O/scenarios/$name.lua"
  exp="$O/expected/$name.txt"
  n=$((n + 1))
  if [ ! -f "$scen" ]; then fail "$name: no scenario $scen"; continue; fi
  set -- python3 "$O/compare.py" --quiet --vrsim "$VRSIM" "$cap" "$scen"
  [ -f "$exp" ] && set -- "$@" --expect "$exp"
  if "$@" >"$TMP/out" 2>&1; then
    ok "$name: $(grep -E 'PASS' "$TMP/out" | sed 's/^ *//')"
  else fail "$name" "$(cat "$TMP/out")"; fi
  # kept for the checks below that read this same comparison (compared_with_expect)
  [ -f "$exp" ] && cp "$TMP/out" "$TMP/out.$name"
  # a capture of the configuration of an H200 run (its spec's "record"): compare.py printed the
  # capture's peak plus vrsim's CUDA-only terms against the measured peak, step by step, and
  # passed only if they are equal to the byte
  if grep -q '"record"' "$O/specs/$name.json" 2>/dev/null; then
    r=$((r + 1))
    if grep -q "against the H200 record" "$TMP/out" && [ "$(grep -cE '^ +[0-9]+ .* \+0 B$' "$TMP/out")" -gt 0 ] \
       && ! grep -qE ' B +FAIL$' "$TMP/out"; then
      ok "$name: capture + CUDA-only terms = the measured peak allocated, every step ($(grep -cE '^ +[0-9]+ .* \+0 B$' "$TMP/out") steps)"
    else fail "$name: no record check, or it failed" "$(cat "$TMP/out")"; fi
  fi
done
[ "$n" -gt 0 ] && ok "$n captures compared" || fail "no capture in $O/captures"
[ "$r" -ge 4 ] && ok "$r captures checked against the peak of their H200 record" \
  || fail "only $r captures checked against an H200 record (4 expected)"

# Tensor parallelism inside FSDP2 (specs_tp/ with dp_shard: a 2-D mesh): besides the allocations,
# the live bytes after the build, after step 1's forward and at its peak agree with the capture's
# to 4 KiB (the inputs and rotary buffers made differently, docs/oracle.md): the post-backward's
# redistribution of the embedding's whole gradient and of the norms' Partial ones to their tp
# placements decides the peak
m=0
for spec in "$O"/specs_tp/*.json; do
  grep -q '"dp_shard"' "$spec" || continue
  name=$(basename "$spec" .json)
  m=$((m + 1))
  compared_with_expect "$name"
  diffs=$(grep -E 'after build|after forward|step 1 peak' "$TMP/out" | sed -E 's/.*\(([-+]?[0-9]+) bytes\).*/\1/')
  if [ "$(printf '%s\n' "$diffs" | awk '$1 >= -4096 && $1 <= 4096' | wc -l)" -eq 3 ]; then
    ok "$name: live bytes after build, after forward, at step 1's peak within 4 KiB of the capture's ($(echo $diffs) B)"
  else fail "$name: live bytes beside the capture's" "$(cat "$TMP/out")"; fi
done
[ "$m" -ge 4 ] && ok "$m captures of tensor parallelism inside FSDP2 held to their live bytes" \
  || fail "only $m captures of tensor parallelism inside FSDP2 (4 expected)"

# A capture's step-1 peak against vrsim less its named allocations: the difference must be
# exactly the bytes its comment explains (peak_is NAME SIGNED_BYTES WHAT).
peak_is() {
  compared_with_expect "$1"
  if grep -E '^ +step 1 peak' "$TMP/out" | grep -q "($2 bytes)\$"; then
    ok "$1: step 1 peak, vrsim less its named = capture $2 bytes ($3)"
  else fail "$1: step 1 peak is not the capture's $2 bytes" "$(cat "$TMP/out")"; fi
}

# SDXL's frozen encoders and fp32 VAE in the step (sdxl_enc_vae_lora_bf16): step 1's peak is
# in the VAE's encode under no_grad, where Python's variables, not autograd, hold the tensors
# (Encoder.forward's `sample` keeps a down block's input through the block, a resnet's
# input_tensor lives to its return: five 512 MiB feature maps at down_blocks.0.resnets.1's
# division). vrsim less its named allocations is the capture's peak to the byte but for three
# explained terms: + 1,310,720 the loss's CUDA-only buffers (listed in expected/), - 449,024
# the training loop's step-0 prompt_embeds, pooled embeddings and latents the capture holds until
# step 1 reassigns them, - 1,248 the build's position_ids and 8-byte buffers (listed).
peak_is "sdxl_enc_vae_lora_bf16" "+860448" "the three explained terms"

# Flux.1's frozen CLIP-L, T5-XXL and 16-channel VAE in the step (flux_enc_vae_lora_bf16): step
# 1's peak is in T5 block 1's attention, where block 0's position bias (1 x 64 x 512 x 512 bf16,
# T5Stack.forward's position_bias) and the block's contiguous copy of it (SDPA's additive mask)
# are live beside Python's locals: inputs_embeds (T5Stack.forward), the normed input
# (T5LayerSelfAttention.forward), the ids moved to the GPU (the encoder's argument). vrsim less its
# named allocations is the capture's peak to the byte but for three explained terms: - 4,230,144
# the training loop's step-0 prompt_embeds, text_ids and latents the capture holds until step 1
# reassigns them, - 624 the build's position_ids and 4-byte buffers, + 2,097,152 the two cuBLASLt
# workspaces (all listed in expected/).
peak_is "flux_enc_vae_lora_bf16" "-2133616" "the three explained terms"

# SD3's frozen CLIP-L, CLIP-G, T5-XXL and fp32 VAE in the step (sd35_enc_vae_lora_bf16): step 1's
# peak is in the VAE's encode (down_blocks.0.resnets.1's division, as SDXL's); vrsim less its
# named allocations is the capture's plus 1,014,560 bytes: + 1,048,576 the loss's cuBLASLt
# workspace, - 32,768 the step-0 latents the capture's loop holds until step 1 reassigns them,
# - 1,248 the build's position_ids and 8-byte buffers (listed in expected/).
peak_is "sd35_enc_vae_lora_bf16" "+1014560" "the three explained terms"

# Loss parallel at Llama 3 70B's shapes (llama3_70b_l2_bf16_tp8_b16: tp 8, 16 x 8192 tokens, 16032
# vocabulary rows a rank; capture_tp.py records inside DTensor's loss handlers): step 1's peak is in
# nll_loss's fused backward, where the saved log-probabilities, the zeros, exp(x) and their sum
# (8016 MiB each) are alive together. vrsim less its named allocations is the capture's peak less
# 2,294,276 bytes: + 2,031,104 the inputs and rotary buffers (as after forward), - 4,325,376 loss
# parallel's per-row tensors alive there (the masked targets and indices, b x s values each: not
# modelled), - 4 the loss's scalar. (Before vrsim modelled DTensor's handlers it was 8.4 GB short.)
peak_is "llama3_70b_l2_bf16_tp8_b16" "-2294276" "the three explained terms"

# SD3's transformer (sd35_medium_cut_lora): step 1's peak is in the last block's feed-forward,
# where Python's frames hold what autograd does not (the caller's hidden_states, the block's
# norm_encoder_hidden_states). vrsim less its named allocations is the capture's peak plus two
# explained terms: + 1,048,576 the loss's cuBLASLt workspace (listed in expected/), - 32,772 the
# noise and timesteps the capture's step function holds to its return (docs/oracle.md).
peak_is "sd35_medium_cut_lora" "+1015804" "the two explained terms"

# With checkpointing (sd35_medium_cut_lora_ckpt) the peak is in block 0's recompute, at its
# context feed-forward, where the block's frame holds the context stream's gated attention output
# and modulated norm, the checkpoint's frame the block's arguments (hidden_states,
# encoder_hidden_states, temb) until the block's backward, and the recomputation's frame the
# image stream's final sum until the early stop; vrsim less its named = capture + 1,048,576 (the
# workspace) - 8 (the loss and backward's ones_like seed, 4 bytes each, the capture holds there).
peak_is "sd35_medium_cut_lora_ckpt" "+1048568" "the workspace, less the loss and its seed"

# Flux's checkpointed blocks (flux_cut_lora_ckpt): the peak is in the last single block's
# recomputed proj_out, with the block's arguments (the slices of the block before's output,
# whose base they keep) held by the checkpoint's frame; vrsim less its named = capture +
# 35,651,584 (the cuBLAS and cuBLASLt workspaces) - 8 (the loss and its seed).
peak_is "flux_cut_lora_ckpt" "+35651576" "the workspaces, less the loss and its seed"

# The record check can fail: the same capture against another run's record (pub-c11, the whole
# 7B at batch 1) is not its measured peak: exit 1, named.
python3 - "$O/captures/llama2_7b_l4_bf16_b4.jsonl.gz" "$TMP/other.jsonl" <<'PY'
import gzip, json, sys
lines = [json.loads(ln) for ln in gzip.open(sys.argv[1], "rt")]
lines[0]["spec"]["record"]["name"] = "pub-c11"
with open(sys.argv[2], "w") as f:
    f.writelines(json.dumps(ln) + "\n" for ln in lines)
PY
python3 "$O/compare.py" --quiet --vrsim "$VRSIM" --expect "$O/expected/llama2_7b_l4_bf16_b4.txt" \
  "$TMP/other.jsonl" "$O/scenarios/llama2_7b_l4_bf16_b4.lua" >"$TMP/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "not the measured peak" "$TMP/out"; then ok "a capture held to another run's record: exit 1"
else fail "a capture held to another run's record: exit $rc, expected 1" "$(cat "$TMP/out")"; fi

# A scenario that is not the capture's (another sequence length) must diverge: exit 1.
cap="$O/captures/llama2_7b_l2_bf16.jsonl.gz"
sed 's/seq = 256/seq = 128/' "$O/scenarios/llama2_7b_l2_bf16.lua" >"$TMP/wrong.lua"
python3 "$O/compare.py" --quiet --vrsim "$VRSIM" --expect "$O/expected/llama2_7b_l2_bf16.txt" \
  "$cap" "$TMP/wrong.lua" >"$TMP/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "FAIL" "$TMP/out"; then ok "a scenario with another seq diverges (exit 1)"
else fail "a scenario with another seq: exit $rc, expected 1" "$(cat "$TMP/out")"; fi
# Bad input: exit 2 with a message, no traceback.
printf 'not json\n' >"$TMP/bad.jsonl"
python3 "$O/compare.py" --vrsim "$VRSIM" "$TMP/bad.jsonl" "$O/scenarios/llama2_7b_l2_bf16.lua" >"$TMP/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "cannot read capture" "$TMP/out" && ! grep -q Traceback "$TMP/out"; then
  ok "a capture that is not JSONL: exit 2, named"
else fail "a bad capture: exit $rc" "$(cat "$TMP/out")"; fi

# No vrsim where --vrsim says: exit 2, named, no traceback.
python3 "$O/compare.py" --vrsim "$TMP/no-such-vrsim" "$cap" "$O/scenarios/llama2_7b_l2_bf16.lua" >"$TMP/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "cannot run vrsim" "$TMP/out" && ! grep -q Traceback "$TMP/out"; then
  ok "no vrsim to run: exit 2, named"
else fail "no vrsim to run: exit $rc" "$(cat "$TMP/out")"; fi

# The allocator on the real sequence (trace_of.py): eager attention under autocast replayed from
# the capture, with softmax backward's CUDA temporary, reserves what vrsim's own sequence reserves
# (within 0.5 %; an fp32 mask added to bf16 scores makes the fp32 sum at once, where a bf16 sum and
# a cast split the segments and reserved 6.7 % more).
ecap="$O/captures/heldout_llama2_7b_l4_amp_bf16_eager_b2_s4096.jsonl.gz"
escen="$O/scenarios/heldout_llama2_7b_l4_amp_bf16_eager_b2_s4096.lua"
if python3 "$O/trace_of.py" "$ecap" "$TMP/eager.csv" >"$TMP/out" 2>&1 &&
   "$VRSIM" replay "$TMP/eager.csv" --json >"$TMP/replay.json" 2>>"$TMP/out" &&
   "$VRSIM" "$escen" --json --no-suggest >"$TMP/run.json" 2>>"$TMP/out"; then
  if python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["peak_reserved_bytes"]
v = json.load(open(sys.argv[2]))["peak_reserved_bytes"]
print("capture replayed %.0f MiB, vrsim %.0f MiB (%+.2f %%)" % (r / 2**20, v / 2**20, 100.0 * (v - r) / r))
sys.exit(0 if abs(v - r) <= 0.005 * r else 1)' "$TMP/replay.json" "$TMP/run.json" >"$TMP/cmp" 2>&1; then
    ok "eager attention under autocast: reserved as the capture's sequence replayed ($(cat "$TMP/cmp"))"
  else fail "eager attention under autocast: reserved" "$(cat "$TMP/cmp")"; fi
else fail "trace_of.py or vrsim replay on $ecap" "$(cat "$TMP/out")"; fi
# trace_of.py on bad input: exit 2, named
python3 "$O/trace_of.py" "$TMP/bad.jsonl" "$TMP/bad.csv" >"$TMP/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "cannot read capture" "$TMP/out" && ! grep -q Traceback "$TMP/out"; then
  ok "trace_of.py on a capture that is not JSONL: exit 2, named"
else fail "trace_of.py on a bad capture: exit $rc" "$(cat "$TMP/out")"; fi

echo "test_oracle: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
