#!/bin/sh
# test_fields.sh: `vrsim fields` lists the schema that checks scenarios, and what it lists is
# what the checker accepts, both ways: every listed field (training.zero's knobs, training.lora's
# keys and each model's own fields included) is a name the checker knows, and every name the
# checker lists when it refuses an unknown one is in `vrsim fields`. Every field shown with a
# default takes that default back through --set. Names of things vrsim does not model are refused
# as such, a misspelling is only "corrected" to a name that is close, and every docs section a
# message cites exists.
#
#   VRSIM=./vrsim sh tests/test_fields.sh
set -u
VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_fields: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-fields.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

"$VRSIM" fields >"$TMP/fields" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q "^training" "$TMP/fields" && grep -q "micro_batch" "$TMP/fields"; then
  ok "vrsim fields lists the sections and their fields ($(grep -c '^  [a-z]' "$TMP/fields") lines)"
else fail "vrsim fields" "$(cat "$TMP/err")"; fi

"$VRSIM" fields --bogus >/dev/null 2>&1
if [ $? -eq 2 ]; then ok "an unknown option exits 2"; else fail "vrsim fields --bogus: expected exit 2"; fi

# section.field=default for the plain-valued training fields: a one-layer model keeps it quick
sets=$(awk '/^[a-z]/ { sec = $1 } sec == "training" && !/sdxl\]/ && !/flux\]/ && !/sd3\]/ && /^  [a-z_]+ +(integer|number|boolean|string) .*\[[^]]*\]$/ {
         match($0, /\[[^]]*\]$/); d = substr($0, RSTART + 1, RLENGTH - 2); print "--set training." $1 "=" d }' "$TMP/fields")
n=$(printf '%s\n' "$sets" | grep -c . )
# shellcheck disable=SC2086
"$VRSIM" scenarios/llama7b_h200.lua --no-files --set model.size=7b-l1 --set seq=128 $sets >"$TMP/run" 2>&1
rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ]; then ok "every listed training default ($n fields) is accepted by --set"
else fail "listed defaults through --set: exit $rc" "$(head -n 3 "$TMP/run")"; fi

run() { _n=$1; shift; "$VRSIM" "$@" >"$TMP/$_n.out" 2>"$TMP/$_n.err"; RC=$?; }
# expect NAME RC PATTERN: the last run exited RC (no crash) and stdout+stderr match PATTERN
expect() {
  if [ "$RC" -ge 128 ]; then fail "$1: crashed ($RC)" "$(tail -3 "$TMP/$_n.err")"; return; fi
  if [ "$RC" -eq "$2" ] && cat "$TMP/$_n.out" "$TMP/$_n.err" | grep -qE -- "$3"; then ok "$1"
  else fail "$1 (exit $RC, want $2 and /$3/)" "$(cat "$TMP/$_n.out" "$TMP/$_n.err" | head -5)"; fi
}
cat >"$TMP/llama.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { size = "7b-l1" }, training = { seq = 128, steps = 2 } }
L
cat >"$TMP/sdxl.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { arch = "sdxl" }, training = { resolution = 256, steps = 2 } }
L
cp scenarios/configs/flux1-dev-transformer.json scenarios/configs/sd35-medium-transformer.json "$TMP/"
cat >"$TMP/flux.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { arch = "flux", config = "flux1-dev-transformer.json" }, training = { resolution = 256, steps = 2 } }
L
cat >"$TMP/sd3.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { arch = "sd3", config = "sd35-medium-transformer.json" }, training = { resolution = 256, steps = 2 } }
L

# ---- what `vrsim fields` lists, block by block: "SECTION NAME [sdxl]" per field --------------
awk '/^[a-z][a-z_.]* *(\(|$)/ { blk = $1; next } /^$/ { blk = "" }
     blk != "" && /^  [a-z_0-9]+ / { tag = ($0 ~ /sdxl\]/) ? "sdxl" : ($0 ~ /flux\]/) ? "flux" : ($0 ~ /sd3\]/) ? "sd3" : "-"; print blk, $1, tag }' \
  "$TMP/fields" >"$TMP/listed"
for blk in hardware model training allocator training.zero training.lora; do
  grep -q "^$blk " "$TMP/listed" || fail "vrsim fields has no block $blk"
done
for want in training.zero:init training.zero:offload_param training.zero:reduce_dtype training:build \
             training:text_encoders training:vae training:ema training:width training.lora:r training.lora:targets; do
  grep -q "^${want%%:*} ${want#*:} " "$TMP/listed" || fail "vrsim fields does not list ${want%%:*}.${want#*:}"
done
grep -A1 "^  optimizer " "$TMP/fields" | grep -q "one of: .*adam, adamw, adamw8bit, .*sgd" \
  && grep "^  optimizer " "$TMP/fields" | grep -q "adamw8bit" \
  && ok "the optimizers adam and adamw8bit are listed and described" \
  || fail "optimizer's listing lacks adam or adamw8bit" "$(grep -A1 '^  optimizer ' "$TMP/fields")"

# listed -> known: each listed name, set to a value of the wrong kind, is refused for its value,
# never as an unknown name ([sdxl] fields on an SDXL scenario)
unknown_re="unknown field|unknown section|not a knob vrsim knows|not a key vrsim knows|read by arch|does not model"
bad=""; n=0
while read -r blk f tag; do
  scn="$TMP/llama.lua"; [ "$tag" = sdxl ] && scn="$TMP/sdxl.lua"; [ "$tag" = flux ] && scn="$TMP/flux.lua"; [ "$tag" = sd3 ] && scn="$TMP/sd3.lua"
  case $blk in training.zero) key="zero.$f" ;; training.lora) key="lora.$f" ;; *) key="$blk.$f" ;; esac
  "$VRSIM" "$scn" --no-files --set "$key=zzqq" >/dev/null 2>"$TMP/one.err"
  if grep -qE "$unknown_re" "$TMP/one.err"; then bad="$bad $key:$(head -c 160 "$TMP/one.err")"; fi
  n=$((n + 1))
done <"$TMP/listed"
if [ -z "$bad" ] && [ "$n" -gt 60 ]; then ok "every listed field ($n) is a name the checker knows"
else fail "listed fields the checker refuses as unknown ($n listed)" "$bad"; fi

# known -> listed: the names the checker gives when it refuses an unknown one are the listed ones
names_in() { sed -n "s/.*($2: \([^)]*\)).*/\1/p" "$1" | tr -d ' ' | tr ',' '\n' | sort; }
listed_in() { awk -v b="$1" -v t="$2" '$1 == b && ($3 == "-" || $3 == t) { print $2 }' "$TMP/listed" | sort; }
for sc in llama sdxl; do
  for sec in hardware model training allocator; do
    sed "s/return {/return { $sec = { zzqq = 1 },/; s/ $sec = {\([^}]*\)}, *\(.*\)$sec = { zzqq = 1 }/\2$sec = { zzqq = 1,\1}/" \
      "$TMP/$sc.lua" >"$TMP/unk.lua"
    # (a section the base scenario already gives gets zzqq inside it)
    grep -q "$sec = {.*$sec = {" "$TMP/unk.lua" && sed -i "s/return { $sec = { zzqq = 1 },/return {/; s/ $sec = { / $sec = { zzqq = 1, /" "$TMP/unk.lua"
    "$VRSIM" "$TMP/unk.lua" --no-files >/dev/null 2>"$TMP/unk.err"
    names_in "$TMP/unk.err" fields >"$TMP/known"
    listed_in "$sec" "$sc" >"$TMP/shown"
    if [ -s "$TMP/known" ] && cmp -s "$TMP/known" "$TMP/shown"; then :
    else fail "$sc: $sec: the checker's names differ from vrsim fields'" "$(diff "$TMP/known" "$TMP/shown" | head -5; head -c 200 "$TMP/unk.err")"; fi
  done
done
"$VRSIM" "$TMP/llama.lua" --no-files --set zero.zzqq=1 >/dev/null 2>"$TMP/unk.err"
names_in "$TMP/unk.err" "one of" >"$TMP/known"; listed_in training.zero - >"$TMP/shown"
cmp -s "$TMP/known" "$TMP/shown" || fail "training.zero: the checker's knobs differ from vrsim fields'" "$(diff "$TMP/known" "$TMP/shown")"
"$VRSIM" "$TMP/llama.lua" --no-files --set lora.zzqq=1 >/dev/null 2>"$TMP/unk.err"
names_in "$TMP/unk.err" "one of" >"$TMP/known2"; listed_in training.lora - >"$TMP/shown2"
if [ -s "$TMP/known" ] && cmp -s "$TMP/known2" "$TMP/shown2" && cmp -s "$TMP/known" "$TMP/shown"; then
  ok "every name the checker knows (each section, on llama and sdxl; zero's knobs; lora's keys) is listed"
else fail "training.lora: the checker's keys differ from vrsim fields'" "$(diff "$TMP/known2" "$TMP/shown2")"; fi
# training.data's keys (a scenario that gives no seq: data sets it)
printf 'return { hardware = { gpu = "h200" }, model = { arch = "llama2", size = "7b-l1" },\n  training = { micro_batch = 1 } }\n' >"$TMP/data.lua"
"$VRSIM" "$TMP/data.lua" --no-files --set training.data.zzqq=1 >/dev/null 2>"$TMP/unk.err"
names_in "$TMP/unk.err" "one of" >"$TMP/known3"; listed_in training.data - >"$TMP/shown3"
if [ -s "$TMP/known3" ] && cmp -s "$TMP/known3" "$TMP/shown3"; then
  ok "training.data: every key the checker knows is listed ($(wc -l <"$TMP/known3") keys)"
else fail "training.data: the checker's keys differ from vrsim fields'" "$(diff "$TMP/known3" "$TMP/shown3"; head -c 300 "$TMP/unk.err")"; fi

# ---- every table refuses an unknown key: training.lora as training.zero ----------------------
run lrank "$TMP/llama.lua" --no-files --set precision=lora_bf16 --set lora.rank=64
expect "--set lora.rank=64 is refused, suggesting nothing far (was silently r = 8)" 2 \
  "training.lora.rank is not a key vrsim knows \(one of: alpha, dropout, dtype, r, target_parameters, targets\)"
cat >"$TMP/lrank.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { size = "7b-l1" },
         training = { seq = 128, steps = 2, precision = "lora_bf16",
                      lora = { rank = 64,
                               targets = { "q_proj" } } } }
L
run lrank2 "$TMP/lrank.lua" --no-files
expect "training.lora = { rank = 64 } in a scenario: exit 2 naming the file" 2 "lrank.lua:[0-9?]+: training.lora.rank is not a key"
run lrs "$TMP/llama.lua" --no-files --set precision=lora_bf16 --set lora.dropuot=0.1
expect "a misspelt lora key suggests the right one" 2 "lora.dropuot.*did you mean 'dropout'"
run lsd "$TMP/sdxl.lua" --no-files --set precision=lora_bf16 --set lora.use_dora=true
expect "lora.use_dora: exit 2" 2 "training.lora.use_dora is not a key"
cat >"$TMP/title.lua" <<'L'
return { title = { "x" }, hardware = { gpu = "h200" }, model = { size = "7b-l1" }, training = { seq = 128 } }
L
run title "$TMP/title.lua" --no-files
expect "a title that is not a string: exit 2" 2 "title must be a string"
run sdxlf "$TMP/llama.lua" --no-files --set text_encoders=cached
expect "an SDXL field on a Llama run: exit 2 naming the arch that reads it" 2 "training.text_encoders is read by arch flux or sd or sd3 or sdxl only"

# ---- did you mean: only a close name; things vrsim does not model named as such -------------
run loss "$TMP/llama.lua" --no-files --set loss=1
if [ "$RC" -eq 2 ] && ! grep -q "did you mean" "$TMP/loss.err"; then ok "--set loss=1 suggests nothing (was 'lora')"
else fail "--set loss=1" "$(cat "$TMP/loss.err")"; fi
cat >"$TMP/loss.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { size = "7b-l1" }, training = { seq = 128, loss = "ce" } }
L
run loss2 "$TMP/loss.lua" --no-files
if [ "$RC" -eq 2 ] && ! grep -q "did you mean" "$TMP/loss2.err" && grep -q "unknown value 'ce' (one of: cce, chunked, full, liger_fused)" "$TMP/loss2.err"
then ok "training.loss = \"ce\": no guess, the choices listed"; else fail "training.loss" "$(cat "$TMP/loss2.err")"; fi
run gpu "$TMP/llama.lua" --no-files --set gpu=rtx3080
if [ "$RC" -eq 2 ] && ! grep -q "did you mean" "$TMP/gpu.err"; then ok "gpu=rtx3080 (not in the catalog) is not 'corrected' to another card"
else fail "gpu=rtx3080" "$(cat "$TMP/gpu.err")"; fi
run typo "$TMP/llama.lua" --no-files --set checkpointng=true
expect "a real slip is still corrected (checkpointng -> checkpointing)" 2 "did you mean 'checkpointing'"
NM='does not model .*docs/scenarios.md, "Not modelled"'
for case in "transformer_engine=true:Transformer Engine" "pipeline_parallel_size=2:pipeline parallelism" \
            "context_parallel=2:context" "expert_parallel=2:expert parallelism" "use_liger_kernel=true:Liger's kernels" \
            "orpo=true:ORPO"; do
  set_=${case%%:*}; want=${case#*:}
  run nm "$TMP/llama.lua" --no-files --set precision=lora_bf16 --set "$set_"
  if [ "$RC" -eq 2 ] && grep -q "$want" "$TMP/nm.err" && grep -qE "$NM" "$TMP/nm.err" && ! grep -q "did you mean" "$TMP/nm.err"
  then :; else fail "--set $set_: not refused as not modelled" "$(cat "$TMP/nm.err")"; fi
done
# what vrsim models under another name: the refusal names the field
for case in "chunked_cross_entropy=true:training.loss = \"liger_fused\"" \
            "activation_offloading=true:training.activation_offload = true" \
            "optimizer_in_bwd=true:training.optimizer_in_backward = true" \
            "tp=2:training.parallel = { tp = N }" "strategy=tp:training.parallel = { tp = N }" \
            "zero.tp_size=2:training.parallel = { tp = N }" \
            "training.fp8=true:training.float8 = {" "precision=fp8:training.float8 = {" \
            "lora.fp8=true:training.float8 = {" "dpo_trainer=true:training.dpo = {" \
            "kv_cache=true:training.generate = {" \
            "torch_compile=true:training.compile = true" "inductor=true:training.compile = true" \
            "paged_optimizer=true:training.optimizer = \"paged_adamw_8bit\"" \
            "cut_cross_entropy=true:training.loss = \"cce\"" \
            "packing=true:training.data = { lengths = ..., batching = \"bfd\" }" \
            "sample_packing=true:training.data = { lengths = ..., batching = \"bfd\" }"; do
  set_=${case%%:*}; want=${case#*:}
  run nm "$TMP/llama.lua" --no-files --set "$set_"
  if [ "$RC" -eq 2 ] && grep -qF "is written $want" "$TMP/nm.err"; then :
  else fail "--set $set_: not pointed to $want" "$(cat "$TMP/nm.err")"; fi
done
ok "names of things vrsim does not model (fp8, liger, ...) are refused as not modelled, and those it models under another name (tp, compile) pointed to it"
cat >"$TMP/nmsec.lua" <<'L'
return { hardware = { gpu = "h200" }, model = { size = "7b-l1" }, training = { seq = 128 },
         torch_compile = { mode = "max-autotune" } }
L
run nmsec "$TMP/nmsec.lua" --no-files
expect "a section named after torch.compile: pointed to training.compile, with the scenario's line" 2 "nmsec.lua:2: torch_compile: torch.compile is written training.compile = true"

# every "docs/FILE.md, \"Section\"" and README "Section" a source file cites is a heading there
bad=""
grep -rhoE '(docs/[a-z-]+\.md|README)[,]? \\?"[A-Z][^"\\]*\\?"' lua sim | sort -u >"$TMP/cites"
while read -r cite; do
  file=$(printf '%s' "$cite" | sed 's/[, ].*//'); [ "$file" = README ] && file=README.md
  title=$(printf '%s' "$cite" | sed 's/^[^"]*"//; s/\\\?"$//; s/\\$//')
  # (a heading, or a paragraph's bold label: **Convolution workspaces.**)
  grep -qE "^#+ $title\$|\*\*$title\.?\*\*" "$file" || bad="$bad [$file: $title]"
done <"$TMP/cites"
if [ -z "$bad" ] && [ -s "$TMP/cites" ]; then ok "every docs section a message cites exists ($(wc -l <"$TMP/cites") cited)"
else fail "messages cite sections that do not exist" "$bad"; fi
grep -q '^## Not modelled$' README.md && ok "README has its \"Not modelled\" section" || fail "README lacks ## Not modelled"

# ---- the run's header states the defaults that change the answer --------------------------
run hcast "$TMP/llama.lua" --no-files --set build=cast
expect "header: build cast stated" 0 "llama2 7b-l1, micro-batch 1 x seq 128, bf16, adamw .*; built in fp32, then .to\(bf16\)"
run hdir "$TMP/llama.lua" --no-files --set build=direct
expect "header: build direct stated" 0 "; weights made in their dtype \(from_pretrained\)"
run hinit "$TMP/llama.lua" --no-files --set strategy=fsdp2 --set count=2 --set zero.init=meta
expect "header: FSDP2's zero.init stated" 0 "fsdp2 over 2 GPUs; .*, sharded from meta-device init"
run hz3 "$TMP/llama.lua" --no-files --set strategy=zero3 --set count=2 --set zero.init=whole
expect "header: ZeRO-3's zero.init stated" 0 "zero3 over 2 GPUs; .*, whole on every GPU, then sharded"
run hfp32 "$TMP/llama.lua" --no-files --set precision=fp32 --set build=cast
expect "build where the weights are fp32: no build in the header, a note that it has no effect" 0 \
  "training.build = cast has no effect on this run"
grep -q "built in fp32\|weights made in" "$TMP/hfp32.out" && fail "  ... fp32 weights: the header names a build path"

# no tracked file cites a path outside the repository (its users have no sibling folder of it);
# the pattern and the messages are written so that this file does not match itself
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  hits=$(git grep -n -I -e '\.\./shar[e]d' -e 'shar[e]d/truth' -e 'shar[e]d/ALLOC' -e 'ALLOCATO[R]\.md' -e 'DESIG[N]\.md' -- . 2>/dev/null | head -5)
  if [ -z "$hits" ]; then ok "no tracked file cites ../shar""ed"
  else fail "tracked files cite ../shar""ed, outside the repository" "$hits"; fi
else echo "skip the check of citations outside the repository: not a git checkout"; fi

# the field that states an NVLink bridge between two cards sold without NVLink is listed, with
# its default (none fitted), and takes that default back through --set
if awk '/^[a-z]/ { sec = $1 } sec == "hardware" && /^  nvlink_bridge +boolean .*\[false\]$/ { f = 1 } END { exit !f }' "$TMP/fields"
then
  "$VRSIM" scenarios/llama7b_h200.lua --no-files --set model.size=7b-l1 --set seq=128 \
    --set hardware.nvlink_bridge=false >"$TMP/bridge" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then ok "hardware.nvlink_bridge is listed (boolean, default false) and --set takes it"
  else fail "hardware.nvlink_bridge through --set: exit $rc" "$(head -n 3 "$TMP/bridge")"; fi
else fail "vrsim fields does not list hardware.nvlink_bridge" "$(grep -A3 '^hardware' "$TMP/fields")"; fi

echo "test_fields: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
