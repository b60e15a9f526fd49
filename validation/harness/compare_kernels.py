#!/usr/bin/env python3
"""GPU time by kernel category: torch.profiler's kernels of a real step against vrsim's ops.

Reads one record of a --tables file of profile_llama_step.py (every kernel of one profiled step,
with its category) and vrsim's trace.json of the same configuration, and prints each category's
GPU ms side by side. The profiler's user annotations ("Optimizer.step#AdamW.step", which spans the
whole optimizer) are not kernels and are left out. Standard library only.

  ./vrsim SCENARIO.lua            # writes out/<name>/trace.json
  python3 validation/harness/compare_kernels.py validation/results/profile_tables_h200.jsonl \
      profile-7b-l4-b4-s2048-bf16 out/<name>/trace.json [--step 3]

With --gemm-grid FILE (a vrsim-calibrate profile, lua/hw/calibrated/h200_gemm.lua) it instead puts
each bf16 aten::mm shape of every record, its mean self time per call in the real step, beside
the program's figures for the same m, n, k (any of nn, nt, tn; their mean), no trace needed:

  python3 validation/harness/compare_kernels.py validation/results/profile_tables_h200.jsonl \
      --gemm-grid lua/hw/calibrated/h200_gemm.lua

With --kernels it reads a line of profile_hf_step.py's output instead (each kernel's launches and
ms per phase: forward, backward, optimizer) and prints, phase by phase, each category's ms and
launches beside those of vrsim's ops of that phase in the same step:

  ./vrsim SCENARIO.lua
  python3 validation/harness/compare_kernels.py --kernels validation/results/kernels_tech_model_h100.jsonl \
      gen4-tm-l3-8b-l4-b2-s4096-f8-tensorwise out/<name>/trace.json [--step 3]
"""
import ast
import argparse
import json
import re
import sys

# torch.profiler's user annotations ("Optimizer.step#AdamW.step") appear among the GPU events
ANNOTATION = re.compile(r"^[A-Za-z_]\w*\.\w+#")

# vrsim op kinds -> the profiler script's kernel categories (profile_llama_step.category)
KIND_CATEGORY = {
    "mm": "gemm", "conv": "gemm", "mm_align1": "gemm", "mm_align1_bwd": "gemm",
    "cast_up": "copy", "cast_down": "copy", "strided": "copy", "cat_strided": "copy",
    "cat_sinks": "copy", "cat_sinks_copy": "copy", "softmax_sinks": "reduce_softmax_index",
    "softmax_sinks_bwd": "reduce_softmax_index",
    "transpose": "copy", "transpose_fp8": "copy", "copy": "copy",
    "softmax": "reduce_softmax_index", "reduce_rows": "reduce_softmax_index",
    "reduce_cols": "reduce_softmax_index",
    "gather": "reduce_softmax_index",
}


# vrsim's streams (trace.json tid): 0 compute, 1 and 4 collectives, 2 and 3 host copies
STREAM_CATEGORY = {1: "collective", 4: "collective", 2: "copy", 3: "copy"}


def vrsim_category(kind, stream=0):
    if stream in STREAM_CATEGORY:
        return STREAM_CATEGORY[stream]
    if kind.startswith("attention"):
        return "attention"
    if kind.startswith("foreach"):
        return "optimizer"
    return KIND_CATEGORY.get(kind, "elementwise")


def kernel_category(name):
    """The category of a profiled kernel by its name (profile_llama_step.py's tables use these;
    this script imports no torch, so the rules live here)."""
    n = name.lower()
    if "nccl" in n:
        return "collective"
    if "multi_tensor_apply" in n or "foreach" in n or "fused_adam" in n:
        return "optimizer"
    if "fmha" in n or "flash" in n or "cudnn" in n and ("sdpa" in n or "attn" in n) or "attention" in n:
        return "attention"
    if "gemm" in n or "cutlass" in n or "sm90_xmma" in n or "nvjet" in n or "cublas" in n:
        return "gemm"
    if "reduce" in n or "softmax" in n or "nll" in n or "embedding" in n or "index" in n:
        return "reduce_softmax_index"
    if "memcpy" in n or "memset" in n or "copy" in n:
        return "copy"
    return "elementwise"


def compare_phases(path, name, trace_path, step):
    """profile_hf_step.py's kernels of record `name`, by phase and category, against vrsim's ops
    of the same phase (trace.json's cat) and category in `step`."""
    rec = None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r["name"] == name:
                rec = r
    if rec is None:
        print(f"compare_kernels: no record '{name}' in {path}", file=sys.stderr)
        return 2
    measured = {}
    for phase, kernels in rec["kernels"].items():
        for k, v in kernels.items():
            if ANNOTATION.match(k):
                continue
            cat = "attention" if "cudnn::fusion" in k else kernel_category(k)
            row = measured.setdefault((phase, cat), [0.0, 0])
            row[0] += v["ms"]
            row[1] += v["count"]
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    predicted = {}
    for e in events:
        args = e.get("args", {})
        if e.get("ph") != "X" or args.get("step") != step or args.get("kind", "none") == "none":
            continue
        # checkpointing's recomputation runs inside backward(), where the profiler's phase has it
        phase = "backward" if e.get("cat") == "recompute" else e.get("cat")
        row = predicted.setdefault((phase, vrsim_category(args["kind"], e.get("tid", 0))), [0.0, 0])
        row[0] += e["dur"] / 1e3
        row[1] += args.get("kernels", 1)
    print(f"{'phase':10s} {'category':22s} {'profiler ms':>12s} {'vrsim ms':>10s} {'diff':>8s} "
          f"{'launches':>9s} {'vrsim':>7s}")
    for phase in ("forward", "backward", "optimizer"):
        cats = sorted({c for p, c in set(measured) | set(predicted) if p == phase})
        for c in cats:
            (m, ml), (p, pl) = measured.get((phase, c), (0.0, 0)), predicted.get((phase, c), (0.0, 0))
            d = f"{(p - m) / m * 100:+.1f}%" if m > 0 else "-"
            print(f"{phase:10s} {c:22s} {m:12.2f} {p:10.2f} {d:>8s} {ml:9d} {pl:7d}")
        # a category's launches move with how an op's kernels are labelled (vrsim gives all of an
        # op's kernels its kind's category: a column reduction's memset counts as a reduction
        # here, a copy there); the phase's total does not
        ml = sum(v[1] for (ph, _), v in measured.items() if ph == phase)
        pl = sum(v[1] for (ph, _), v in predicted.items() if ph == phase)
        print(f"{phase:10s} {'(all launches)':22s} {'':12s} {'':10s} {'':8s} {ml:9d} {pl:7d}")
    m = sum(v[0] for v in measured.values())
    p = sum(v[0] for v in predicted.values())
    print(f"{'all':33s} {m:12.2f} {p:10.2f} {(p - m) / m * 100:+.1f}%  (vrsim ms include the stream's "
          f"gap after each kernel)")
    return 0


def gemm_grid(path):
    """(m, n, k) -> {op: ms} of the bf16 rows of a profile's `gemm` table (not gemm_lt or the
    other GEMM tables)."""
    grid = {}
    row = re.compile(r'dtype="bf16", op="(\w+)", m=(\d+), n=(\d+), k=(\d+), ms=([\d.]+)')
    with open(path) as f:
        text = f.read()
    start = text.find("\n  gemm = {")
    if start < 0:
        raise SystemExit(f"compare_kernels: {path} has no gemm table")
    for m in row.finditer(text[start:text.find("\n  },", start)]):
        op, mm, n, k, ms = m.groups()
        grid.setdefault((int(mm), int(n), int(k)), {})[op] = float(ms)
    return grid


def compare_gemms(tables, grid_path):
    grid = gemm_grid(grid_path)
    print(f"{'record':36s} {'m':>6s} {'n':>6s} {'k':>6s} {'calls':>5s} {'step ms':>8s} {'program':>8s} {'diff':>7s}")
    with open(tables) as f:
        for line in f:
            rec = json.loads(line)
            for o in rec["ops"]:
                if o["op"] != "aten::mm":
                    continue
                shapes = ast.literal_eval(o["shapes"])
                (m, k), (_, n) = shapes[0], shapes[1]
                ms = grid.get((m, n, k))
                if not ms:
                    continue
                step_ms = o["self_ms"] / o["count"]
                prog = sum(ms.values()) / len(ms)
                print(f"{rec['name']:36s} {m:6d} {n:6d} {k:6d} {o['count']:5d} {step_ms:8.3f} {prog:8.3f} "
                      f"{(prog - step_ms) / step_ms * 100:+6.1f}%")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tables")
    ap.add_argument("name", nargs="?")
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--step", type=int, default=3, help="vrsim step to compare (a steady one)")
    ap.add_argument("--gemm-grid", help="compare each aten::mm shape with this profile's gemm rows")
    ap.add_argument("--kernels", action="store_true",
                    help="TABLES is profile_hf_step.py's output: compare phase by phase, launches too")
    a = ap.parse_args()
    if a.kernels:
        if not a.name or not a.trace:
            ap.error("--kernels: give a record name and a trace.json")
        return compare_phases(a.tables, a.name, a.trace, a.step)
    if a.gemm_grid:
        return compare_gemms(a.tables, a.gemm_grid)
    if not a.name or not a.trace:
        ap.error("give a record name and a trace.json (or --gemm-grid)")
    rec = None
    with open(a.tables) as f:
        for line in f:
            r = json.loads(line)
            if r["name"] == a.name:
                rec = r
    if rec is None:
        print(f"compare_kernels: no record '{a.name}' in {a.tables}", file=sys.stderr)
        return 2
    measured, launches = {}, 0
    for k in rec["kernels"]:
        if ANNOTATION.match(k["kernel"]):
            continue
        # cuDNN attention's backward helpers (compute_dot_do_o, convert_dq_to_16bits) fall in the
        # profiler script's "elementwise"; vrsim counts them with the attention op
        cat = "attention" if "cudnn::fusion" in k["kernel"] else k["category"]
        measured[cat] = measured.get(cat, 0.0) + k["ms"]
        launches += k["count"]
    with open(a.trace) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    predicted, kernels = {}, 0
    for e in events:
        args = e.get("args", {})
        # every stream: compute, collectives (NCCL kernels in the profiler) and host copies
        if e.get("ph") != "X" or args.get("step") != a.step or "kind" not in args:
            continue
        if args["kind"] == "none":
            continue
        c = vrsim_category(args["kind"], e.get("tid", 0))
        predicted[c] = predicted.get(c, 0.0) + e["dur"] / 1e3
        kernels += args.get("kernels", 1)
    print(f"{'category':22s} {'profiler ms':>12s} {'vrsim ms':>10s} {'diff':>8s}")
    for c in sorted(set(measured) | set(predicted)):
        m, p = measured.get(c, 0.0), predicted.get(c, 0.0)
        d = f"{(p - m) / m * 100:+.1f}%" if m > 0 else "-"
        print(f"{c:22s} {m:12.2f} {p:10.2f} {d:>8s}")
    m, p = sum(measured.values()), sum(predicted.values())
    print(f"{'all':22s} {m:12.2f} {p:10.2f} {(p - m) / m * 100:+.1f}%")
    print(f"kernels: {launches} profiled, {kernels} in vrsim's step {a.step} (vrsim ms include the "
          f"stream's gap after each kernel)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
