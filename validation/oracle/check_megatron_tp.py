#!/usr/bin/env python3
"""Re-captures Megatron-LM's tensor parallelism (capture_megatron_tp.py, every spec in
validation/oracle/specs_megatron/), its data parallelism over it (capture_megatron_dp.py, every
spec in validation/oracle/specs_megatron_dp/) and its pipeline parallelism over it
(capture_megatron_pp.py, every spec in validation/oracle/specs_megatron_pp/) and checks each capture against the committed one: the same
bytes (write_capture's gzip is deterministic), or the first event where they part.

  check_megatron_tp.py [--write]

Needs torch and megatron-core 0.16.1 (pip install --no-deps megatron-core==0.16.1); where they
do not import it says so and exits 2. --write: replace the committed captures by the new ones.
The comparison of vrsim against the committed capture needs neither: tests/test_megatron_tp.sh
runs compare.py on it.
"""
import argparse
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def first_difference(a, b):
    la = gzip.open(a, "rt").read().splitlines()
    lb = gzip.open(b, "rt").read().splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}:\n  committed {x[:300]}\n  new       {y[:300]}"
    return f"lengths {len(la)} and {len(lb)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
        import megatron.core as mc
    except ImportError as e:
        print(f"check_megatron_tp: cannot import torch and megatron-core ({e}): nothing re-captured", file=sys.stderr)
        sys.exit(2)
    if mc.__version__ != "0.16.1":
        print(f"check_megatron_tp: megatron-core {mc.__version__}; the captures are of 0.16.1", file=sys.stderr)
    bad = 0
    runs = [(spec, "capture_megatron_tp.py") for spec in sorted(glob.glob(os.path.join(HERE, "specs_megatron", "*.json")))]
    runs += [(spec, "capture_megatron_dp.py") for spec in sorted(glob.glob(os.path.join(HERE, "specs_megatron_dp", "*.json")))]
    runs += [(spec, "capture_megatron_pp.py") for spec in sorted(glob.glob(os.path.join(HERE, "specs_megatron_pp", "*.json")))]
    for spec, script in runs:
        name = json.load(open(spec))["name"]
        committed = os.path.join(HERE, "captures", name + ".jsonl.gz")
        with tempfile.TemporaryDirectory() as tmp:
            new = os.path.join(tmp, name + ".jsonl.gz")
            p = subprocess.run([sys.executable, os.path.join(HERE, script), spec, "-o", new],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                print(f"{name}: the capture failed:\n{p.stderr[-2000:]}")
                bad += 1
                continue
            if a.write:
                os.replace(new, committed)
                print(f"{name}: written")
            elif open(new, "rb").read() == open(committed, "rb").read():
                print(f"{name}: the same as the committed capture")
            else:
                print(f"{name}: differs from the committed capture at {first_difference(committed, new)}")
                bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
