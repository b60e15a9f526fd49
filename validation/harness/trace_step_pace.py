#!/usr/bin/env python3
"""The host's pace through the last steps of a measured allocator trace, step against step.

Steady training steps make the same allocation requests in the same order (the same sizes), so
where one step takes longer than its neighbour the host time between the same two requests tells
where: a slower host (every interval stretched alike), a pause (one interval), or a phase of its
own. This finds the last steps' boundaries from the trace alone (the shortest period p, between
len/(steps+1) and len/(steps-1) allocations, for which the last p allocation sizes repeat the p
before them), then prints, for each of the last --compare steps that repeat it, the host time at
every tenth of the step's allocations and the step's longest pauses. It reads
torch.cuda.memory._record_memory_history() as measure_llama.py writes it (fulltrace_*.csv.gz:
seq,time_us,action,addr,size,stream). Runs here (no GPU), standard library only.

  python3 validation/harness/trace_step_pace.py \\
      validation/traces/fulltrace_gen4-tm-l3-8b-l4-b2-s4096-f8-rowwise.csv.gz --steps 4
"""
import argparse
import csv
import gzip
import sys


def allocations(path):
    """[(time_us, size)] of every alloc event, in order."""
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt") as f:
        r = csv.reader(f)
        col = {name: k for k, name in enumerate(next(r))}
        for x in r:
            if x[col["action"]] == "alloc":
                rows.append((int(float(x[col["time_us"]])), int(x[col["size"]])))
    return rows


def period(sizes, steps):
    """The last step's allocation count: the shortest p near len/steps whose last p sizes repeat."""
    n = len(sizes)
    for p in range(max(1, n // (steps + 1)), n // max(1, steps - 1) + 1):
        if 2 * p <= n and sizes[n - p:] == sizes[n - 2 * p:n - p]:
            return p
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=4, help="the steps the trace holds (the record's)")
    ap.add_argument("--compare", type=int, default=2, help="how many of the last steps to print")
    ap.add_argument("--pauses", type=int, default=3, help="each step's longest intervals to name")
    a = ap.parse_args()
    rows = allocations(a.trace)
    sizes = [s for _, s in rows]
    p = period(sizes, a.steps)
    if p is None:
        sys.exit("trace_step_pace: the last steps of %s do not repeat each other's allocations" % a.trace)
    n = len(rows)
    # the last steps that repeat the last one, oldest first
    starts = [n - p]
    while len(starts) < a.compare and starts[-1] - p >= 0 and sizes[starts[-1] - p:starts[-1]] == sizes[n - p:]:
        starts.append(starts[-1] - p)
    starts.reverse()
    print("%d allocations a step; the last %d steps repeat each other's requests" % (p, len(starts)))
    marks = [round(p * k / 10) for k in range(1, 11)]
    marks[-1] = p - 1
    print("%-22s" % "allocations" + "".join("%9d" % m for m in marks))
    for i, s in enumerate(starts):
        t0 = rows[s][0]
        label = "step -%d host ms" % (len(starts) - i)
        print("%-22s" % label + "".join("%9.1f" % ((rows[s + m][0] - t0) / 1e3) for m in marks))
    for i, s in enumerate(starts):
        gaps = sorted(((rows[s + k][0] - rows[s + k - 1][0], k) for k in range(1, p)), reverse=True)
        print("step -%d longest intervals: %s" % (len(starts) - i, ", ".join(
            "%.1f ms before allocation %d (%d bytes)" % (g / 1e3, k, sizes[s + k]) for g, k in gaps[:a.pauses])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
