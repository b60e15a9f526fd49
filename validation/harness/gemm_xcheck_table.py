#!/usr/bin/env python3
"""The GEMM cross-check tables, from the files of run_gemm_xcheck.sh (standard library only).

For each pass NAME it reads validation/harness/gemm_xcheck_h200_NAME.lua (sim/calib's cuBLAS
figures) and validation/harness/torch_gemm_xcheck_h200_NAME.json (torch.mm under the same
protocol on the same card, right after), and prints, in Markdown:

  1. program against PyTorch on the same card: the kernel time (batched_ms) of the two, where
     the kernel is long enough to be the GPU's time and not the host's (>= 25 us; torch.mm's own
     host time is ~13 us a call here), and the time of one call alone (single_ms);
  2. both against validation/results/hw_h200_pytorch.json, one call alone, as it was measured.

  gemm_xcheck_table.py [--dir validation/harness] [--ref validation/results/hw_h200_pytorch.json] NAME ...
"""
import argparse
import json
import os
import re
import sys

ROW = re.compile(r'dtype="(\w+)", op="nn", m=(\d+), n=(\d+), k=(\d+), single_ms=([\d.]+), '
                 r'batched_ms=([\d.]+), tflops=[\d.]+, sm_mhz=(-?\d+), watts=(-?\d+), temp_c=(-?\d+)')
GPU_BOUND_MS = 0.025
BAR = 5.0


def read_program(path):
    rows = {}
    with open(path) as f:
        for m in ROW.finditer(f.read()):
            key = (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)))
            rows[key] = {"single_ms": float(m.group(5)), "batched_ms": float(m.group(6)),
                         "sm_mhz": int(m.group(7))}
    if not rows:
        raise ValueError(f"{path}: no gemm_xcheck rows")
    return rows


def read_torch(path):
    with open(path) as f:
        d = json.load(f)
    return {(g["dtype"], g["m"], g["n"], g["k"]): g for g in d["gemm"]}


def err(a, b):
    return 100.0 * (a / b - 1.0)


def shape(k):
    return f"{k[0]} {k[1]}×{k[2]}×{k[3]}"


def summary(errs):
    a = [abs(e) for e in errs]
    return f"{sum(x <= BAR for x in a)}/{len(a)} within {BAR:.0f} %, mean {sum(a) / len(a):.1f} %, max {max(a):.1f} %"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="validation/harness")
    ap.add_argument("--ref", default="validation/results/hw_h200_pytorch.json")
    ap.add_argument("passes", nargs="+")
    a = ap.parse_args()
    try:
        with open(a.ref) as f:
            ref = [(((g["dtype"], g["m"], g["n"], g["k"])), g["ms"]) for g in json.load(f)["gemm"]]
        data = {p: (read_program(os.path.join(a.dir, f"gemm_xcheck_h200_{p}.lua")),
                    read_torch(os.path.join(a.dir, f"torch_gemm_xcheck_h200_{p}.json"))) for p in a.passes}
    except (OSError, ValueError, KeyError) as e:
        print(f"gemm_xcheck_table: {e}", file=sys.stderr)
        return 2

    print("### 1. vrsim-calibrate (cuBLAS) against torch.mm, same card, same protocol\n")
    print("Error of the program's time against torch.mm's. Kernel: 20 calls back to back, shapes whose "
          f"kernel takes at least {GPU_BOUND_MS * 1e3:.0f} µs. One call: median of calls timed alone "
          "(the program's call skips torch's ~8 µs of dispatch).\n")
    print("| pass | kernel time | one call alone | kernel-time rows over 5 %: shape, error, SM MHz program / torch |")
    print("|---|---|---|---|")
    for p in a.passes:
        prog, torch = data[p]
        kern, alone, over = [], [], []
        for k, _ in ref:
            c, t = prog[k], torch[k]
            if c["batched_ms"] < GPU_BOUND_MS:
                continue
            e = err(c["batched_ms"], t["batched_ms"])
            kern.append(e)
            alone.append(err(c["single_ms"], t["single_ms"]))
            if abs(e) > BAR:
                over.append(f"{shape(k)} {e:+.1f} % ({c['sm_mhz']} / {t.get('sm_mhz')})")
        print(f"| {p} | {summary(kern)} | {summary(alone)} | {'; '.join(over) or '–'} |")

    print("\n### 2. One call alone against validation/results/hw_h200_pytorch.json\n")
    print("| dtype m×n×k | reference ms | " + " | ".join(f"{p}: program | {p}: torch.mm" for p in a.passes) + " |")
    print("|---|---|" + "---|---|" * len(a.passes))
    errs = {p: ([], []) for p in a.passes}
    for k, r in ref:
        cells = []
        for p in a.passes:
            prog, torch = data[p]
            ec, et = err(prog[k]["single_ms"], r), err(torch[k]["single_ms"], r)
            errs[p][0].append(ec)
            errs[p][1].append(et)
            cells += [f"{ec:+.1f} %", f"{et:+.1f} %"]
        print(f"| {shape(k)} | {r:.4f} | " + " | ".join(cells) + " |")
    print()
    for p in a.passes:
        print(f"- {p}: program {summary(errs[p][0])}; torch.mm {summary(errs[p][1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
