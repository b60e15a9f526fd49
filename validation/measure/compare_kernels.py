#!/usr/bin/env python3
"""GPU time by kernel category: torch.profiler's kernels of a real step against vrsim's ops.

Reads one record of a --tables file of profile_llama_step.py (every kernel of one profiled step,
with its category) and vrsim's trace.json of the same configuration, and prints each category's
GPU ms side by side. The profiler's user annotations ("Optimizer.step#AdamW.step", which spans the
whole optimizer) are not kernels and are left out. Standard library only.

  ./vrsim SCENARIO.lua            # writes out/<name>/trace.json
  python3 validation/measure/compare_kernels.py validation/measure/profile_tables_h200.jsonl \
      profile-7b-l4-b4-s2048-bf16 out/<name>/trace.json [--step 3]
"""
import argparse
import json
import re
import sys

# torch.profiler's user annotations ("Optimizer.step#AdamW.step") appear among the GPU events
ANNOTATION = re.compile(r"^[A-Za-z_]\w*\.\w+#")

# vrsim op kinds -> the profiler script's kernel categories (profile_llama_step.category)
KIND_CATEGORY = {
    "mm": "gemm", "conv": "gemm",
    "cast_up": "copy", "cast_down": "copy", "strided": "copy", "cat_strided": "copy",
    "transpose": "copy", "copy": "copy",
    "softmax": "reduce_softmax_index", "reduce_rows": "reduce_softmax_index",
    "gather": "reduce_softmax_index",
}


def vrsim_category(kind):
    if kind.startswith("attention"):
        return "attention"
    if kind.startswith("foreach"):
        return "optimizer"
    return KIND_CATEGORY.get(kind, "elementwise")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tables")
    ap.add_argument("name")
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=3, help="vrsim step to compare (a steady one)")
    a = ap.parse_args()
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
        measured[k["category"]] = measured.get(k["category"], 0.0) + k["ms"]
        launches += k["count"]
    with open(a.trace) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    predicted, kernels = {}, 0
    for e in events:
        args = e.get("args", {})
        if e.get("ph") != "X" or args.get("step") != a.step or "kind" not in args or e.get("tid") != 0:
            continue
        if args["kind"] == "none":
            continue
        c = vrsim_category(args["kind"])
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
