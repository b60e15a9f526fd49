#!/bin/sh
# test_validate.sh: vrsim validate over every measured run in validation/records/ (a regression guard:
# the accuracy figures themselves are in docs/validation.md, from `./vrsim validate`).
#
#   VRSIM=./vrsim sh tests/test_validate.sh
#
# Fails when any record is skipped (every record must be simulated), when a parameter count
# differs from the record's, when a fit verdict is wrong, and when a metric leaves the bands of
# docs/validation.md, "Goals": peak allocated 1 % mean / 3 % max, peak reserved 2 % / 4 %, step time 5 % / 12 %. An
# exemption from a max band is computed from the record's own measurements and has a bound of
# its own (below). With VRSIM_TRUTH_DIR naming a folder of held-out records
# (kept outside the repository), its *_gen2.jsonl must all be simulated too.
set -u

VRSIM=${VRSIM:-./vrsim}
cd "$(dirname "$0")/.." || exit 1
[ -x "$VRSIM" ] || { echo "test_validate: $VRSIM is not an executable (set VRSIM)" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrsim-validate.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM

# one run over every record: the rows on stdout, what it says of each record (the host it
# applies, the skipped ones and why) on stderr; the text table's own lines are checked on small
# files by the other scripts (test_sdxl.sh, test_record_dcompile.sh)
"$VRSIM" validate --json >"$TMP/rows.json" 2>"$TMP/err"
rc=$?
GEN2=""
for f in "${VRSIM_TRUTH_DIR:-/nonexistent}/llama_h200_gen2.jsonl" "${VRSIM_TRUTH_DIR:-/nonexistent}/sdxl_h200_gen2.jsonl"; do
  [ -f "$f" ] && GEN2="$GEN2 $f"
done
if [ -n "$GEN2" ]; then
  # shellcheck disable=SC2086
  "$VRSIM" validate $GEN2 >"$TMP/gen2.txt" 2>&1
else : >"$TMP/gen2.txt"; fi
# A record's `gpu` picks the card: one H200 record renamed to an H100 is simulated on the H100
# (another step time), and a card validate does not map is skipped with its name.
head -n 1 validation/records/llama_h200_gen4_families.jsonl >"$TMP/h200.jsonl"
sed 's/"gpu": "NVIDIA H200"/"gpu": "NVIDIA H100 80GB HBM3"/' "$TMP/h200.jsonl" >"$TMP/h100.jsonl"
sed 's/"gpu": "NVIDIA H200"/"gpu": "NVIDIA A10G"/' "$TMP/h200.jsonl" >"$TMP/a10g.jsonl"
for g in h200 h100 a10g; do "$VRSIM" validate --json "$TMP/$g.jsonl" >"$TMP/$g.json" 2>"$TMP/$g.err"; done
# An inference record's host classes (timed recording autograd) are not its ops' under no_grad:
# generate's prediction is the same with and without its host_class_bench
G=validation/records/llama_h100_gen6_generate.jsonl
python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).readline()); d.pop('host_class_bench'); print(json.dumps(d))" "$G" >"$TMP/gen_nocls.jsonl"
"$VRSIM" validate --json "$G" >"$TMP/gen_cls.json" 2>/dev/null
"$VRSIM" validate --json "$TMP/gen_nocls.jsonl" >"$TMP/gen_nocls.json" 2>/dev/null
python3 - "$TMP/rows.json" "$rc" "$TMP/err" "$TMP/gen2.txt" "$GEN2" "$TMP/gen_cls.json" "$TMP/gen_nocls.json" <<'PY'
import json, re, sys, glob
rc = int(sys.argv[2])
fails = 0
def check(ok, msg):
    global fails
    print(("ok   " if ok else "FAIL ") + msg)
    fails += not ok
check(rc == 0, "vrsim validate --json exits 0 (got %d)" % rc)

def predicted_step(path):
    return [r["predicted"] for r in json.load(open(path)) if r["metric"] == "step_time"]
with_cls, without = predicted_step(sys.argv[6]), predicted_step(sys.argv[7])
check(len(with_cls) == 1 and with_cls == without,
      "generate (no_grad): its host_class_bench is not applied (%s ms with it, %s without)" % (with_cls, without))
table = open(sys.argv[3]).read()
check(re.search(r"gen6-tt-generate\s+host: host_dispatch_scale \(it runs under no_grad", table) and re.search(r"steps-r512-b1_bf16_classes\s+host: its host_class_bench", table),
      "validate names the host classes it applies: the training records', not generate's")
tmp = sys.argv[1].rsplit("/", 1)[0]
def step_of(g):
    try:
        return [r["predicted"] for r in json.load(open("%s/%s.json" % (tmp, g))) if r["metric"] == "step_time"]
    except ValueError:
        return []
h200, h100 = step_of("h200"), step_of("h100")
check(len(h200) == 1 and len(h100) == 1 and h100[0] > h200[0] * 1.02,
      "a record measured on an H100 is simulated on vrsim's H100 (step %s ms vs the H200's %s)" % (h100, h200))
a10g_err = open("%s/a10g.err" % tmp).read()
check(step_of("a10g") == [] and "NVIDIA A10G" in a10g_err,
      "a record from a card validate does not map is skipped, naming it")
try:
    rows = json.load(open(sys.argv[1]))
except ValueError as e:
    check(False, "validate --json prints a JSON array (%s)" % e)
    sys.exit(1)

def skipped(path):
    text = open(path).read()
    # the text table's summary, or --json's on stderr (no line when none was skipped)
    m = re.search(r"^  skipped +(\d+) records", text, re.M) or \
        re.search(r"^vrsim validate: (\d+) records skipped", text, re.M)
    lines = [l.strip() for l in text.splitlines() if " skipped: " in l]
    if m:
        return int(m.group(1)), lines
    # --json's stderr from a run that simulated records and skipped none
    return (0 if re.search(r"^vrsim validate: ", text, re.M) and not lines else None), lines
n, why = skipped(sys.argv[3])
check(n == 0, "every record in validation/records/ is simulated (skipped: %s)%s" % (n, "".join("; " + w for w in why)))
if sys.argv[5].strip():
    n, why = skipped(sys.argv[4])
    check(n == 0, "every record of%s is simulated (skipped: %s)%s" % (sys.argv[5], n, "".join("; " + w for w in why)))
    wrong = [l.strip() for l in open(sys.argv[4]) if "FAILED" in l]
    check(not wrong, "  ... with the parameter counts of every record%s" % "".join("; " + w for w in wrong))

records = {}
for path in glob.glob("validation/records/*.jsonl"):
    for line in open(path):
        if line.strip():
            rec = json.loads(line)
            records[rec["name"]] = rec

def by(metric):
    return [r for r in rows if r["metric"] == metric]
alloc, resv, step, fits = by("peak_allocated"), by("peak_reserved"), by("step_time"), by("fits")
check(len(alloc) >= 40, "%d configurations with a peak allocated row" % len(alloc))
counts = [r for r in rows if r["metric"] in ("n_params", "n_trainable")]
check(not counts, "n_params and n_trainable match every record%s" %
      "".join("; %s %s %d, simulated %d" % (r["config"], r["metric"], r["measured"], r["predicted"]) for r in counts))
# a verdict vrsim does not get right yet, with the issue that owns it and what was measured; once
# right the test fails until the entry is removed
KNOWN_VERDICTS = {}
for cfg, why in sorted(KNOWN_VERDICTS.items()):
    r = [x for x in fits if x["config"] == cfg]
    check(len(r) == 1 and r[0]["rel_error"] != 0, "known wrong verdict %s (%s)" % (cfg, why))
wrong = [r["config"] for r in fits if r["rel_error"] != 0 and r["config"] not in KNOWN_VERDICTS]
check(fits and not wrong, "every fit verdict right (%d)%s" % (len(fits), "".join("; " + w for w in wrong)))

def mean(rs):
    return sum(abs(r["rel_error"]) for r in rs) / len(rs)

# step time, exemption: a record whose steady steps (1..) themselves spread by more than the
# 12 % band (max/min - 1) has no single time to meet 12 % of; bound: 20 %.
def spread(cfg):
    rec = records.get(cfg.split("/")[0].split("@")[0])
    if not rec or "steps" not in rec or len(rec["steps"]) < 3:
        return 0
    t = [s["gpu_ms"] for s in rec["steps"][1:] if s.get("gpu_ms")]
    return max(t) / min(t) - 1 if t else 0

# known misses: a row the model does not meet yet, each with the issue that owns it, what was
# measured and a bound. It is left out of its metric's mean and max and held to its bound; once
# it is back within the band the test fails until the entry is removed, so the list cannot go
# stale.
KNOWN = {
    # axolotl's packing under sdpa on Qwen2.5-0.5B (24 layers): sdpa_varlen reads two values on
    # the host in each layer's forward (int() of _is_packed's count and of the longest
    # sequence), 48 syncs a step, so the step is exposed to the host's speed; vrsim: host 103.4 ms
    # against 118.6 ms of GPU work, 135.4 ms with the syncs; measured 155.3 (steps 159.2, 156.7,
    # 155.3). The kernels are not the cause: profiled, 118.9 ms (validation/results/
    # profile_gen19b_h100.jsonl); under the profiler the host took 129.5 ms to issue the backward
    # and 73.2 the forward. The 8B cut's same batch, GPU-bound, is within 0.3 % and 2.7 %
    # (gen19-mp-sdpa-8b-l4-b4[-ckpt]). The host's time outside the profiler is not measured
    # (issue 42)
    ("gen19-mp-sdpa-qwen25-05b-b4", "step_time"): (0.15,
        "host time: its kernels are vrsim's to 0.3 ms (profiled), the host issues the backward slower "
        "than the kernels run, and the record does not measure the host's speed"),
    ("gen3-qwen25-05b-lora-qv-b16-s512", "step_time"): (0.20,
        "host dispatch: a host-bound step (the profiled kernels are 87.3 ms of its 121.3, "
        "validation/results/kernels_gen3-qwen25-05b-lora-qv-b16-s512.jsonl), and the host's "
        "speed moves it: the same configuration took 110.2 ms on another host "
        "(gen3-qwen25-05b-lora-qv-b16-s512-rerun, within the band), and 107.6-136.3 ms a step on a "
        "third (validation/results/gpu_idle_gen3_h200.jsonl); vrsim's host figures for it are "
        "low by 7-16 %"),
    # MoE reserved: `vrsim replay` of the measured allocator trace gives its 37116 MiB to the
    # byte, and every allocation of 1 MiB or more matches the trace in size and count step by
    # step; only the order of some frees in step 0's backward differs by one or two events, so
    # layer 3's down_proj gradient (768 MiB) lands in another free block and the optimizer's
    # first step makes one extra 2374 MiB segment instead of a 768 MiB one
    ("gen4-qwen3moe-l4-b2", "peak_reserved"): (0.05,
        "MoE: one 768 MiB expert gradient placed in another segment after a free-order difference "
        "in step 0's backward (allocations match the trace; replay of the trace is exact)"),
    # SDXL steady medians on an H100 host, host-bound: the host issued the step in 0.78-0.86x
    # vrsim's calibration-host dispatch (median_wall_ms), where the record's tiny-op
    # host_dispatch_scale says 0.55-0.56 (docs/step-time.md, "Steady medians by resolution and
    # batch, on an H100 host"). The records predate the harness's host_class_bench, which
    # validate reads instead where a record has it (hardware.host_classes): the UNet's host time
    # is 74 % linear, linear_nobias, layer_norm, sdpa, conv, group_norm, add and activation, and
    # on the H200 hosts' own calls those classes did not move with the tiny-op loop
    # (docs/step-time.md, "The host's op classes as an input")
    # transformers' generate, 128 decode forwards of 4 x 512 tokens: host-bound in vrsim (host
    # 805.1 ms against 370.3 ms of GPU work, _sample's per-token ops and StopCheck's sync
    # included); the record's steady steps took 1025.5, 975.8 and 1158.4 ms (19 % spread,
    # validation/results/logs/gen4_tech_h100_call1.log). The harness sets eos_token_id = None
    # (tech_train.py): no EOS padding, no EosTokenCriteria. Its allocator trace against vrsim's
    # (--alloc-trace), token by token in the last step (from one next_token_logits to the next):
    # 7.91 ms a token against 6.27 (median); from the logits to the next token's embedding, the
    # loop's position_ids growth, logits copy, argmax, input_ids growth, MaxLengthCriteria,
    # unfinished_sequences update and bool(unfinished_sequences.max() == 0), a host sync every
    # token (DeferredStopCheck runs on mps only): the same 16 allocations size for size in all
    # 508 decode tokens of the 4 steps, 0.96 ms against 0.58; the rest of the token, the
    # forward, 6.95 ms against 5.69 (1.22x): the host's speed, which the record does not
    # measure (no host_bench, no host_class_bench)
    ("gen4-tt-generate", "step_time"): (0.33,
        "host-bound generate loop on the H100 host, steady steps 975.8-1158.4 ms"),
    ("steps-r1024-b1_bf16", "step_time"): (0.25,
        "host-bound; the tiny-op host_dispatch_scale overstates the H100 host's speed for the UNet's ops"),
    ("steps-r1024-b1_bf16_ckpt", "step_time"): (0.25,
        "host-bound; the tiny-op host_dispatch_scale overstates the H100 host's speed for the UNet's ops"),
    # diffusion_h100_gen5.jsonl, SD 3.5 Medium cut to 4 blocks: the harness recorded every
    # allocation's Python stack through every step (trace "stacks"; it now stops after step 1),
    # which slows the host of these 50-80 ms steps; their own steps 1-3 spread 12 % and 19 %
    # (49.6, 52.6, 55.7 ms and 80.8, 76.4, 68.1 ms: validation/results/logs/gen5_h100_call1.log).
    # They carry no host benchmark, so vrsim runs them at the calibration host's figures (40.6 and
    # 83.1 ms); without stack recording, on a host whose class chains said 1.08x that host, the
    # plain step took 44.2-53.0 ms (gen6-sd35m-l4-lora-r1024: vrsim 46.8, in the band)
    ("gen4-sd35m-l4-lora-r1024", "step_time"): (0.30,
        "host slowed by the harness's stack recording of every allocation; steps 49.6-55.7 ms"),
    ("gen4-sd35m-l4-lora-r1024-ckpt", "step_time"): (0.40,
        "host slowed by the harness's stack recording of every allocation; steps 68.1-80.8 ms"),
    # diffusion_h100_gen6_hostbound.jsonl, the same SD 3.5 pair without stack recording, each in
    # its own process: steps 44.2-53.0 ms (median 51.7) plain and 60.4-74.4 (median 62.9)
    # checkpointed, a ratio of 1.22 (1.45 for the gen5 pair's medians), where vrsim's
    # checkpointing doubles the host time at one host speed (45.0 -> 91.0 ms). A host's speed
    # moves by that much between processes: the gen5 pair's traces (fulltrace_gen4-sd35m-l4-lora-
    # r1024[-ckpt]) ran the same optimizer step in 1.76-2.05 ms in the checkpointed process and
    # 2.46-3.00 in the plain one, and the checkpointed forward in less time than the plain forward
    # (20.1-24.4 against 26.4-28.4 ms); within the checkpointed process the recomputation took
    # as long as the forward (19.3-24.6 ms) and the backward 1.1-1.3 times it, against 0.7 in the
    # plain process, which two processes cannot turn into what checkpointing adds at one speed
    # (validation/harness/measure_diffusers_ckpt_ab.py times both in one process; docs/validation.md)
    ("gen6-sd35m-l4-lora-r1024-ckpt", "step_time"): (0.40,
        "checkpointed and plain steps timed in separate processes whose host speed differs; steps 60.4-74.4 ms; "
        "timed in one process (results/ckpt_ab_h100.jsonl) checkpointing adds 30.4 ms, in vrsim 42.5"),
    # diffusion_h100_gen14_hostbound.jsonl, the same four configurations on another H100 host
    # (host A of 2026-12-07, 08:24-08:26): its class chains, timed after each run's steps, said
    # 0.73-1.15x the calibration host from one process to the next, and measure_host_classes.py
    # in a process two minutes before them 1.16x; the same host ran the cut Llama's forward in
    # the time a host whose chains said 0.72x did (results/phase_host_modules_h100.jsonl against
    # phase_host_h100_interleaved.jsonl: 9.12 and 9.20 ms). The chains do not carry this host's
    # speed for a model's code; vrsim at the chains is 17-38 % fast on all four
    ("gen6-sd15-unet-ampbf16-r512-b4-ckpt_r2", "step_time"): (0.45,
        "host-bound; steps 218.1-331.4 ms; its class chains 0.89x the calibration host, 1.16x in a process minutes before"),
    ("gen6-sd35m-l4-lora-r1024_r2", "step_time"): (0.30,
        "host-bound; steps 41.4-52.8 ms; its class chains 0.91x the calibration host, 1.16x in a process minutes before"),
    # the two SD 1.5 records of the same call: the same configurations, timed again later in one
    # process alternating plain and checkpointed rounds (measure_diffusers_ckpt_ab.py,
    # results/ckpt_ab_h100.jsonl, 8 rounds), ran 144.8 and 226.1 ms a step, where these records
    # took 191.7 and 304.0: vrsim at these records' host figures (141.2, 223.5) is -2.5 and -1.2 %
    # of that run. The records' own host figures did not catch what slowed their processes.
    ("gen6-sd15-unet-ampbf16-r512-b4", "step_time"): (0.30,
        "the same configuration ran 144.8 ms a step in a later process (results/ckpt_ab_h100.jsonl); vrsim 141.2"),
    ("gen6-sd15-unet-ampbf16-r512-b4-ckpt", "step_time"): (0.30,
        "the same configuration ran 226.1 ms a step in a later process (results/ckpt_ab_h100.jsonl); vrsim 223.5"),
    ("gen4-sd15-unet-ampbf16-r512-b4-ckpt", "step_time"): (0.25,
        "the same host-bound UNet under the harness's stack recording; steps 371.4, 295.0, 268.2 ms"),
    ("gen4-sd15-unet-ampbf16-r512-b4", "step_time"): (0.55,
        "host-bound under the harness's trace \"stacks\" (a Python stack recorded for each of the "
        "step's allocations: foreach AdamW over 686 fp32 tensors) on the H100 host whose speed for "
        "the UNet's ops the tiny-op scale overstates (the SDXL rows above); steps 235.5, 223.2, "
        "270.1 ms"),
    # gen4-sd15-unet-ampbf16-r512-b4, above: its allocator trace against vrsim's, the last step
    # (validation/harness/trace_host_phases.py --step-op unet.time_proj.arange --loss-op
    # mse_loss.backward): forward 84.4 ms against 35.2, backward 162.7 against 68.1, 2.4x in both
    # phases alike; beyond the 0.78 at which an H100 host issued the SDXL UNet (above), 28-31 us
    # for each of the step's 2021 and 3513 allocations: the Python stack the harness records for
    # each, not an op class
    # float8 rowwise, eager: the record's steps 1-2 took 295.4 and 293.8 ms and step 3, the one
    # compared, 370.0 ms (its steps spread 26 %); against steps 1-2 vrsim's 300.3 ms is +2 %.
    # The three steps make the same 3501 allocations; step 3's host reached the middle one
    # 155.8 ms in, steps 1-2's 55.4 and 57.2 (trace_step_pace.py on its allocator trace): the
    # same calls issued 4.2 times slower over the first tenth, 1.4 by the middle, with no pause
    # (no interval over the 11.2 ms all three share) and no segment allocated or freed (no
    # allocator sync): the host's own pace, not the GPU's work. A profiled
    # steady step of the same configuration (kernels_tech_model_h100.jsonl, compare_kernels.py
    # --kernels) sums 281.4 ms of kernels and launches as many float8 kernels as vrsim's
    ("gen4-tm-l3-8b-l4-b2-s4096-f8-rowwise", "step_time"): (0.25,
        "a slow last step (370.0 ms after 295.4 and 293.8: its host issued the same calls slower); "
        "+2 % against the steady two"),
    # SDXL's steady steps on the H100 host, taken before the harness timed the host's op classes:
    # they run at the tiny-op loop's host scale, which leaves the host-bound rows 14-22 % fast
    # (docs/step-time.md, "Steady medians by resolution and batch"); this one's steps spread 28 %
    ("steps-r512-b4_bf16", "step_time"): (0.25,
        "host-bound on the H100 host at the tiny-op scale (the records predate host_class_bench)"),
    # SDXL's steady medians with the host's op classes timed beside them (sdxl_steps_h100_classes,
    # 2026-12-06), on another H100 host: it issued the UNet step in 1.9x the earlier H100
    # host's time (r512 b1: 359.6 against 186.9 ms) and its own steady steps spread 57 % (274.7-
    # 430.2 ms), while its class chains, timed after the steps, said 1.27x the calibration host and
    # its tiny-op loop 1.06x: on this host neither benchmark beside the run measures the speed the
    # UNet's ops got (validation/PROVENANCE.md)
    ("steps-r512-b1_bf16_classes", "step_time"): (0.30,
        "host-bound on an H100 host whose UNet issue speed neither host benchmark measured; steps 274.7-430.2 ms"),
    ("steps-r768-b1_bf16_classes", "step_time"): (0.30,
        "the same host: steps 261.6-386.2 ms; class chains 1.22x, tiny-op loop 0.83x the calibration host"),
    # the SDXL grid of 2026-12-06 on one H100 host (sdxl_steps_h100_grid.jsonl): every
    # host-bound configuration's 30 steady steps spread 20-98 % (r512 b1 199.3-276.1 ms), and
    # the floor they share, 206.6-229.1 ms from r512 b1 to r1024 b2, is 8.6 % below to 9.2 %
    # above vrsim at each record's own class chains (with the view ops; 0.9-20.8 % below without
    # them). The chains, timed after each configuration's steps, put this one host at 0.67-0.94
    # of the calibration host from record to record while its issue time (median_wall_ms
    # 183.5-213.3 ms) moves by 16 %: the rows left out of band are those whose chains ran fastest
    # (r768 b1 0.67, r1024 b2 0.72). The GPU-bound r1024 b4 (steps spread 3 %) is -2.1 %.
    # Checkpointing adds 220.6 ms (b1) and 199.5 ms (b4) measured, 115.2 and 146.7 in vrsim's
    # predictions, which run at different records' chains (0.67 for ckpt b1, 0.85 for plain b1):
    # at one host speed vrsim's checkpointed 1024 px b1 issues in 1.98x the plain step's host
    # time, the host in 2.12x (416.9 and 196.3 ms)
    ("steps-r768-b1_bf16_grid", "step_time"): (0.25,
        "host-bound; steps 198.3-276.8 ms; its class chains 0.67x the calibration host, the grid's fastest"),
    ("steps-r1024-b2_bf16_grid", "step_time"): (0.25,
        "host-bound; steps 212.6-282.9 ms; its class chains 0.72x the calibration host (0.67-0.94 on this host)"),
    ("steps-r1024-b1_bf16_ckpt_grid", "step_time"): (0.35,
        "host-bound with checkpointing; its class chains 0.67x the calibration host, the plain b1's 0.85x; steps 384.9-762.7 ms"),
    # the SDXL grid again on a third H100 host with the class chains between the steps
    # (sdxl_steps_h100_every.jsonl, --class-every 10: one repeat before the 30 steady steps and
    # one after every 10). Validate reads each class's median over the four repeats. Across the
    # seven host-bound plain records the chains follow the host (vrsim's host time at each
    # record's chains, 171.5-246.0 ms, against the steps' issue time, median_wall_ms 214.2-318.1:
    # Pearson 0.90), but the issue time is 1.17-1.38x vrsim's host time at them (median 1.28; the
    # grid's host 0.96-1.32, median 1.19), and vrsim meets the steps' fast end (p10) rather than
    # their median. Within a record the chains' repeats move by up to 1.55x (r768 b1 0.69-1.08)
    # with no trend over the run; the two rows below, past the 20 % of the step-spread exemption:
    ("steps-r512-b1_bf16_every", "step_time"): (0.25,
        "host-bound; the call's first configuration: steps 272.1-374.7 ms (p10 290.7), issue time "
        "318.1 ms, 1.38x vrsim's host at its own chains (0.89-1.14x the calibration host)"),
    ("steps-r1024-b1_bf16_ckpt_every", "step_time"): (0.27,
        "host-bound with checkpointing; steps spread 132 % (the grid's widest); its chains' repeats are the host's speed "
        "for tight loops, not for the UNet's code (phase_host_modules_h100.jsonl)"),
    ("steps-r1024-b2_bf16_every", "step_time"): (0.25,
        "host-bound; the host slowed during the run: chains 0.71, 0.83, 1.09, 1.01x the calibration "
        "host, tiny-op loop 14.6 -> 20.9 us, steps 210.6-341.0 ms (10-step medians 253, 224, 316 ms of wall)"),
    # the truth records' H200 host ran the plain UNet at 512 px in 212.1 ms (one step); on the
    # host that measured the class figures the same step's host time was 237.6 ms (best of three,
    # median step 280.3 ms: profile_sdxl_batch_h200.jsonl), against vrsim's 250.6 (+5.5 %) with
    # the view ops the UNet runs (227.4 without them): a faster host than the calibration one
    ("pub-r512_bf16", "step_time"): (0.22,
        "host-bound on a host faster than the classes' host (237.6 ms of host time there, vrsim 250.6)"),
    # the same configurations measured twice on the same H100 host minutes apart
    # (validation/results/logs/gen7_h100_call1.txt, call2, call4): QLoRA q, v without checkpointing
    # 43.4 ms (steps 42.9-43.5) at 03:31 and 34.8 ms (34.7-34.9) at 03:43 (vrsim 31.9: -8.3 % of
    # the second); paged AdamW 8-bit in backward 113.8 ms at 03:34 and 132.8 ms (129.4-132.8) at
    # 03:37 (vrsim 107.9: -5.2 % of the first). The records hold the later and the earlier run
    # respectively; their host time moved by 25 % and 17 % between runs on one machine
    ("gen6-qlora-qv-nockpt", "step_time"): (0.30,
        "43.4 ms here, 34.8 ms on the same host 12 minutes later (vrsim 31.9)"),
    ("ttc-paged-adamw8bit-in-bwd", "step_time"): (0.22,
        "132.8 ms here, 113.8 ms on the same host 3 minutes earlier (vrsim 107.9)"),
    # paged AdamW 8-bit in backward again on a second H100 host (llama_h100_torchtune_combos_r2,
    # 05:55): steps 125.9, 116.8, 124.3 ms, where the first host measured 113.8 and 132.8 ms in two
    # runs minutes apart (above). The three runs' allocator sequences are the same event for event
    # (validation/PROVENANCE.md): the same work, 113.8-132.8 ms. No record of the three carries a
    # host benchmark (host_bench, host_class_bench), so what moved is not attributed; vrsim's
    # 107.9 is -5.2 % of the fastest run
    ("ttc-paged-adamw8bit-in-bwd_r2", "step_time"): (0.16,
        "124.3 ms here (steps 116.8-125.9); the same work 113.8 and 132.8 ms on the first host (vrsim 107.9)"),
    # the same six-row plan's four bitsandbytes/torchtune rows on a third H100 host
    # (llama_h100_torchtune_combos_r3, 2026-12-06 23:41): paged AdamW 8-bit in backward 132.8 ms
    # again (steps 129.9-132.8), the first host's slower run to the tenth of a millisecond
    ("ttc-paged-adamw8bit-in-bwd_r3", "step_time"): (0.22,
        "132.8 ms here, as on the first host's second run; 113.8-124.3 ms in the other two (vrsim 107.9)"),
    # and on a fourth H100 host (llama_h100_torchtune_combos_r4, 2026-12-07 06:18): steps 124.1,
    # 121.6, 128.0 ms, within the 113.8-132.8 ms the other hosts measured for the same work
    ("ttc-paged-adamw8bit-in-bwd_r4", "step_time"): (0.18,
        "128.0 ms here (steps 121.6-128.0); 113.8-132.8 ms on three other hosts (vrsim 107.9)"),
    # compile with activation offloading on that third host ran a different program: its
    # allocator trace (fulltrace_ttc-compile-act-offload-r3.csv.gz) has 14780 events against the
    # other two hosts' 16702 (identical to each other), none of the 56 MiB bool masks of the
    # down_proj adapters' dropout (32 in theirs), a peak of 9900.1 MiB against 9997.1 (vrsim
    # 9901.1) and a cold first step (19.4 s of compilation against 1.05 and 1.36 s there); its
    # steps took 75.0-76.9 ms against 114.7-117.2. A fourth host (_r4, 2026-12-07) ran the
    # ordinary program again: 16702 events, 9997.1 MiB, 115.7 ms. Which of the two programs a run
    # gets is not traced to its cause; vrsim's 119.7 ms is within 4 % of the other two hosts' step
    ("ttc-compile-act-offload_r3", "step_time"): (0.60,
        "a different compiled program on this host (14780 allocator events, no dropout masks): 76.9 ms, 115.3-115.7 on two hosts (vrsim 119.7)"),
}
for (cfg, metric), (bound, why) in sorted(KNOWN.items()):
    r = [x for x in rows if x["config"] == cfg and x["metric"] == metric]
    band = {"peak_allocated": 0.03, "peak_reserved": 0.04, "step_time": 0.12}[metric]
    check(len(r) == 1 and band < abs(r[0]["rel_error"]) <= bound,
          "known miss %s %s: %s within its bound %.0f %% (%s)" % (cfg, metric,
          "%+.2f %%" % (100 * r[0]["rel_error"]) if r else "no row", 100 * bound, why))
rows = [x for x in rows if (x["config"], x["metric"]) not in KNOWN]
alloc, resv, step = by("peak_allocated"), by("peak_reserved"), by("step_time")

for name, rs, band_mean, band_max, exempt, bound, why in (
        ("peak allocated", alloc, 0.01, 0.03, lambda r: False, 0, ""),
        ("peak reserved", resv, 0.02, 0.04, lambda r: False, 0, ""),
        ("step time", step, 0.05, 0.12, lambda r: spread(r["config"]) > 0.12, 0.20,
         "records whose own steady steps spread beyond 12 %")):
    check(rs and mean(rs) <= band_mean, "%s: mean |error| %.2f %% <= %.0f %%" % (name, 100 * mean(rs), 100 * band_mean))
    out = [r for r in rs if abs(r["rel_error"]) > band_max and not exempt(r)]
    ex = [r for r in rs if abs(r["rel_error"]) > band_max and exempt(r)]
    over = [r for r in ex if abs(r["rel_error"]) > bound]
    check(not out and not over, "%s: every row within %.0f %%%s%s" % (name, 100 * band_max,
          "".join("; %s %+.2f %%" % (r["config"], 100 * r["rel_error"]) for r in out + over),
          (" (exempt, within %.0f %%: %s: %s)" % (100 * bound, why, ", ".join(
              "%s %+.2f %%%s" % (r["config"], 100 * r["rel_error"],
                                 " (steps spread %.0f %%)" % (100 * spread(r["config"])) if name == "step time" else "")
              for r in ex))) if ex else ""))
print("test_validate: %d failed" % fails)
sys.exit(1 if fails else 0)
PY
