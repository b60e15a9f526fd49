#!/usr/bin/env python3
"""A measured allocator trace against vrsim's --alloc-trace of the same run, step by step: how
many allocations of each size each step makes on either side.

  compare_alloc_streams.py MEASURED.csv[.gz] VRSIM.csv [--marker OP] [--sizes N,N,...] [--json]

Both files are PyTorch-style trace CSVs (seq,time_us,action,addr,size,stream[,frames]). vrsim's
names each allocation's op (frames); its steps start at the allocation of op --marker (default
embed_tokens: the embedding's output, a step's first tensor of the model's own). The measured
trace names nothing, so a step starts there at the allocation whose size and the next two's are
those of vrsim's marker and the two after it; a run of such matches within a few allocations is
one step (the last of the run). The two must find as many steps.

Sizes are compared exactly, or by the allocator's classes with --classes (small requests rounded
up to 512 bytes, up to 1 MiB; larger ones below 10 MiB as they are, from 10 MiB up rounded up to
2 MiB). --sizes: only these sizes (exact). --json: one object per step {"step", "measured",
"vrsim", "diff": {size: measured - vrsim}}. Standard library only.
"""
import argparse
import collections
import csv
import gzip
import json
import sys


def allocs(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        return [(int(r["size"]), r.get("frames") or "") for r in csv.DictReader(f) if r["action"] == "alloc"]


def vrsim_steps(al, marker):
    return [i for i, (_, op) in enumerate(al) if op == marker]


def measured_steps(al, triple, gap=10):
    starts = []
    for i in range(len(al) - 2):
        if (al[i][0], al[i + 1][0], al[i + 2][0]) == triple:
            if starts and i - starts[-1] < gap:
                starts[-1] = i
            else:
                starts.append(i)
    return starts


def size_class(s):
    if s <= 1 << 20:
        return (s + 511) // 512 * 512
    if s < 10 << 20:
        return s
    return (s + (2 << 20) - 1) // (2 << 20) * (2 << 20)


def split(al, starts):
    ends = starts[1:] + [len(al)]
    return [al[a:b] for a, b in zip(starts, ends)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measured")
    ap.add_argument("vrsim")
    ap.add_argument("--marker", default="embed_tokens")
    ap.add_argument("--classes", action="store_true")
    ap.add_argument("--sizes")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    m, v = allocs(a.measured), allocs(a.vrsim)
    vs = vrsim_steps(v, a.marker)
    if not vs or vs[0] + 2 >= len(v):
        print(f"compare_alloc_streams: no allocation of op '{a.marker}' in {a.vrsim}", file=sys.stderr)
        return 2
    triple = tuple(v[vs[0] + k][0] for k in range(3))
    ms = measured_steps(m, triple)
    if len(ms) != len(vs):
        print(f"compare_alloc_streams: {len(vs)} steps in vrsim's trace, {len(ms)} in the measured one "
              f"(sizes {triple} start a step)", file=sys.stderr)
        return 2
    only = {int(x) for x in a.sizes.split(",")} if a.sizes else None
    key = size_class if a.classes else (lambda s: s)
    out = []
    for k, (ma, va) in enumerate(zip(split(m, ms), split(v, vs))):
        cm = collections.Counter(key(s) for s, _ in ma if only is None or s in only)
        cv = collections.Counter(key(s) for s, _ in va if only is None or s in only)
        diff = {s: cm[s] - cv[s] for s in sorted(set(cm) | set(cv)) if cm[s] != cv[s]}
        out.append({"step": k, "measured": sum(cm.values()), "vrsim": sum(cv.values()), "diff": diff})
    if a.json:
        for o in out:
            print(json.dumps(o))
        return 0
    for o in out:
        print(f"step {o['step']}: {o['measured']} allocations measured, {o['vrsim']} vrsim")
        for s, d in o["diff"].items():
            print(f"  {s:>12} bytes  {d:+d} (measured - vrsim)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
