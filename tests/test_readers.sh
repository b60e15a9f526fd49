#!/bin/sh
# test_readers.sh: hostile input to vrsim's readers: every file opened the one checked way (a
# FIFO is refused, not waited on), one range check per field whatever the source (DeepSpeed
# JSON as --set), JSON that leaves no doubt (no trailing data, no \u0000, no key twice),
# validation records that are scored only on real measurements, allocator traces whose
# structure is checked and whose gzip text is limited while it inflates, the snapshot
# converter's bounds, and two sanitizer findings. Each case fails on the code before the fix
# (it hung, answered with exit 0, or crashed under a sanitizer) and must now end with a clear
# message and the exit status of the one rule (0 ok/fits, 2 bad input).
#
#   VRSIM=./vrsim sh tests/test_readers.sh      (make test runs it for each build)
#
# The inputs are in tests/hostile/; the FIFOs and the gzip bombs they need are made here.
set -u

VRSIM=${VRSIM:-./vrsim}
case "$VRSIM" in /*) ;; */*) VRSIM="$(pwd)/$VRSIM" ;; esac
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_readers: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-readers.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

PASS=0
FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       /'; }

# run_check NAME RC WANT NOTWANT -- CMD...: runs CMD (60 s at most); the exit status must be RC,
# the output (stdout and stderr) must match the extended regex WANT and must not match NOTWANT
# ("" = no such check).
run_check() {
  _n=$1 _rc=$2 _want=$3 _not=$4
  shift 5
  timeout 60 "$@" >"$TMP/out" 2>&1
  _got=$?
  if [ "$_got" -eq 124 ]; then fail "$_n: still running after 60 s"; return; fi
  if [ "$_got" -ge 128 ]; then fail "$_n: exit $_got (crash)" "$(tail -n 5 "$TMP/out")"; return; fi
  if [ "$_got" -ne "$_rc" ]; then fail "$_n: exit $_got, expected $_rc" "$(head -n 4 "$TMP/out")"; return; fi
  if [ -n "$_want" ] && ! grep -Eq -- "$_want" "$TMP/out"; then
    fail "$_n: the output does not say /$_want/" "$(head -n 6 "$TMP/out")"; return
  fi
  if [ -n "$_not" ] && grep -Eq -- "$_not" "$TMP/out"; then
    fail "$_n: the output says /$_not/" "$(grep -E -- "$_not" "$TMP/out" | head -n 2)"; return
  fi
  ok "$_n: exit $_rc, $(grep -v '^$' "$TMP/out" | head -n 1 | cut -c1-100)"
}
check() { _a=$1 _b=$2 _c=$3 _d=$4; shift 5; run_check "$_a" "$_b" "$_c" "$_d" -- "$VRSIM" "$@"; }
# also_says REGEX WHAT: the last output also matches REGEX
also_says() {
  if grep -Eq -- "$1" "$TMP/out"; then ok "  ... $2"; else fail "$2: no /$1/" "$(cat "$TMP/out")"; fi
}

H=tests/hostile
HAVE_FIFO=0
mkfifo "$TMP/fifo" 2>/dev/null && HAVE_FIFO=1

# ---- every reader opens its file the one checked way ------------------------------------------
if [ "$HAVE_FIFO" = 1 ]; then
  check "validate of a FIFO (it waited forever)" 2 "fifo: not a regular file" "" -- validate "$TMP/fifo"
  check "replay of a FIFO (it waited forever)" 2 "fifo: not a regular file" "" -- replay "$TMP/fifo"
  check "a scenario that is a FIFO" 2 "not a regular file" "" -- "$TMP/fifo" --no-files
  check "sweep of a FIFO scenario (it waited forever)" 2 "fifo: not a regular file" "" -- \
        sweep "$TMP/fifo" --set micro_batch=1,2 --no-files
  check "maxbatch of a FIFO scenario (it waited forever)" 2 "fifo: not a regular file" "" -- maxbatch "$TMP/fifo"
  check "shop of a FIFO scenario (it waited forever)" 2 "fifo: not a regular file" "" -- shop "$TMP/fifo" --tokens 1e6
fi
check "replay of a folder" 2 "not a regular file" "" -- replay "$H"
# a record's name with terminal escapes: shown with each control character a '?'
printf '{"name": "esc\\u001b]0;pwned\\u0007x", "shape": "7b-l1"}\n' >"$TMP/esc.jsonl"
"$VRSIM" validate "$TMP/esc.jsonl" >"$TMP/out" 2>&1
if grep -q 'esc?]0;pwned?x' "$TMP/out" && ! grep -q "$(printf '\033')" "$TMP/out"; then ok "validate: a record name's escapes never reach the terminal raw"
else fail "validate: a record name's escapes reach the terminal" "$(cat -v "$TMP/out" | head -3)"; fi

# ---- one range check per field: DeepSpeed JSON as --set ---------------------------------------
check "DeepSpeed gradient_accumulation_steps 1e9 (ran for minutes)" 2 \
      "ds_huge_accum.json: gradient_accumulation_steps: training.grad_accum = 1000000000 is out of range: must be an integer in \[1, 4096\]" \
      "FITS" -- "$H/ds_huge_accum.lua" --no-files
check "DeepSpeed train_micro_batch_size_per_gpu 1e15 (an internal tensor-size error)" 2 \
      "train_micro_batch_size_per_gpu: training.micro_batch = 1000000000000000 is out of range" \
      "FITS|internal" -- "$H/ds_huge_micro.lua" --no-files
check "DeepSpeed train_batch_size 2^62 (an internal tensor-size error)" 2 \
      "train_micro_batch_size_per_gpu \(train_batch_size / the others\): training.micro_batch = 2305843009213693952 is out of range" \
      "FITS|internal" -- "$H/ds_huge_total.lua" --no-files
check "DeepSpeed zero_optimization as an array (plan.lua: attempt to get length)" 2 \
      "ds_zero_array.json: zero_optimization must be an object" "plan.lua|attempt to" -- \
      "$H/ds_zero_array.lua" --no-files
check "DeepSpeed overlap_comm \"auto\" at stage 3 (\"which nil has none of\")" 2 \
      "zero_optimization.overlap_comm = \"auto\": the HF Trainer fills \"auto\" only in" "nil" -- \
      "$H/ds_overlap_auto.lua" --no-files

# ---- JSON that leaves no doubt ----------------------------------------------------------------
check "config.json with \"num_hidden_layers\\u0000x\" (read as num_hidden_layers: 30 layers)" 2 \
      "hf_nul_key.json': a string holds \\\\u0000, a NUL character \(line 1\)" "FITS" -- \
      "$H/hf_nul_key.lua" --no-files
check "config.json followed by a second object" 2 \
      "hf_trailing.json': trailing data after the JSON value \(line 12\)" "FITS" -- \
      "$H/hf_trailing.lua" --no-files
check "config.json with num_hidden_layers twice" 2 \
      "hf_duplicate_key.json': key 'num_hidden_layers' appears twice" "FITS" -- \
      "$H/hf_duplicate_key.lua" --no-files
check "the same config.json without the fault fits" 0 "^FITS" "" -- "$H/hf_tiny.lua" --no-files
check "a replay JSON followed by a second object" 2 "trailing data after the JSON value" "" -- \
      replay "$H/trace_trailing.json"
check "a replay JSON with \"segments\" twice" 2 "key 'segments' appears twice" "" -- \
      replay "$H/trace_duplicate_key.json"

# ---- validate: rows only from real measurements; every record gives rows or is named ----------
check "validate: steps with no or non-numeric measurements (scored +0.00 %)" 2 \
      "validate_no_measurements.jsonl:1 \(no-measurements\): steps\[0\] has no peak_alloc_mib" \
      "no-measurements +peak" -- validate "$H/validate_no_measurements.jsonl"
also_says "validate_no_measurements.jsonl:2 \(string-measurement\): steps\[0\] has a non-numeric peak_alloc_mib" \
          "the string measurement is named"
also_says "peak_allocated  mean \|error\| +0\.00% +max +0\.00% +\(1 configs\)" "only the good record is in the mean"
check "validate: oom_at_step without cap_mib or total_mib (dropped, \"skipped 0\")" 0 \
      "oom-no-cap +skipped: oom_at_step without cap_mib or total_mib" "" -- validate "$H/validate_oom_no_cap.jsonl"
also_says "skipped +1 records" "counted as skipped"
# a run out of memory on the whole card is a verdict, rebuilt at the card's total_mib (DeepSeek-V2-Lite
# at 7 x 4096 on an H100: out of memory in step 0, predicted so)
check "validate: a whole-card out-of-memory is a verdict row" 0 \
      "gen11-dsv2lite-lora-b7-ckpt-eager +fits +OOM +OOM +ok" "skipped: oom_at_step" -- \
      validate validation/records/llama_h100_gen11_maxbatch.jsonl
also_says "fits +3 of 3 verdicts right" "the three whole-card out-of-memory runs counted"
check "validate: cap_mib twice (labelled with one, simulated with the other)" 2 \
      "validate_duplicate_key.jsonl:1: key 'cap_mib' appears twice" "dup-cap" -- \
      validate "$H/validate_duplicate_key.jsonl"
check "validate: a second object after the record" 2 \
      "validate_trailing.jsonl:1: trailing data after the JSON value" "" -- validate "$H/validate_trailing.jsonl"
check "validate: rank 1.5 (taken as rank 0)" 2 \
      "rank-fraction/ranks\[0\]\): rank must be an integer in \[0, 65535\]" "rank-fraction/r0" -- \
      validate "$H/validate_rank_fraction.jsonl"
check "validate: provenance fields are informational and named" 0 \
      "provenance +informational, not read: meta, env, python, launch_s, nvidia_smi_at_end, n_params_local" \
      "provenance +skipped" -- validate "$H/validate_provenance.jsonl"
also_says "provenance +peak_allocated +4494\.0 MiB" "the record with provenance fields gives its rows"
also_says "env-allocator +skipped: env\.PYTORCH_CUDA_ALLOC_CONF differs from alloc_conf" \
          "an env that sets the allocator is not informational"
also_says "meta-not-object +skipped: meta must be an object" "meta must be an object"
also_says "config-field +skipped: field 'zero_stage' is not one vrsim validate understands" \
          "a field that could change the configuration still skips the record"

# ---- replay: the trace's structure, and its text limited while it inflates --------------------
check "replay: a block 4 TiB outside its segment (reported 4 TiB allocated)" 2 \
      "segments\[0\]: the block at 140000000000000 \(4398046511104 bytes\) lies outside its segment" \
      "peak allocated" -- replay "$H/trace_block_outside.json"
check "replay: overlapping segments" 2 "segments\[0\] and segments\[1\] overlap" "peak allocated" -- \
      replay "$H/trace_overlapping_segments.json"
check "replay: a segment of size 0 holding blocks" 2 "segments\[1\] has blocks but no address or total_size" \
      "peak allocated" -- replay "$H/trace_empty_segment_blocks.json"
# a gzip file of 17 members, each 64 MiB of blank lines: 1 MiB that inflates to 1.06 GiB
python3 - "$TMP/bomb.csv.gz" <<'PY'
import gzip, sys
member = gzip.compress(b"\n" * (64 << 20), compresslevel=9, mtime=0)
head = gzip.compress(b"seq,time_us,action,addr,size,stream\n", mtime=0)
open(sys.argv[1], "wb").write(head + member * 17)
PY
check "replay: a gzip bomb (inflated whole before it was refused)" 2 \
      "bomb.csv.gz: inflates to more than [0-9]+ MiB of text \(100 times its compressed size\): refused" "" -- \
      replay "$TMP/bomb.csv.gz"
check "replay: a real trace still replays" 0 "peak reserved" "" -- \
      replay tests/fuzz/corpus/snapshot.json

# ---- the snapshot converter: bounded, one line of error ---------------------------------------
CONV="python3 tools/snapshot_to_json.py"
run_check "snapshot_to_json: a 462-byte pickle of lists shared 2^60 ways (spun)" 2 \
          "action is not a short string: a list" "Traceback" -- $CONV "$H/snapshot_shared_lists.pickle"
run_check "snapshot_to_json: a list that contains itself (a traceback)" 2 \
          "segment_type is not a short string: a list" "Traceback" -- $CONV "$H/snapshot_self_list.pickle"
python3 -c "import sys, zlib; z = zlib.compressobj(9, zlib.DEFLATED, 31); open(sys.argv[1], 'wb').write(z.compress(bytes(100 << 20)) + z.flush())" \
  "$TMP/bomb.pickle.gz"
run_check "snapshot_to_json: a 100 KB .gz of 100 MiB (inflated until memory ran out)" 2 \
          "inflates to more than 64 MiB .*refused, a gzip bomb" "Traceback" -- $CONV "$TMP/bomb.pickle.gz"
if [ "$HAVE_FIFO" = 1 ]; then
  run_check "snapshot_to_json: a FIFO (it waited forever)" 2 "not a regular file" "Traceback" -- $CONV "$TMP/fifo"
fi
run_check "snapshot_to_json: its self-test" 0 "self-test: ok" "" -- $CONV --self-test

# ---- sanitizer findings (the ASan/UBSan build of make test runs these too) --------------------
check "row_sum_buffers(math.maxinteger, 4) (a signed overflow under UBSan)" 0 "^FITS" "" -- \
      "$H/row_sum_overflow.lua" --no-files
check "a scenario removing the graphs' __gc (their C memory leaked)" 2 \
      "gc_replaced.lua:4: a graph's metatable is read-only \(setting '__gc'\)" "" -- \
      "$H/gc_replaced.lua" --no-files

echo "reader tests: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
