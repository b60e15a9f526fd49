#!/usr/bin/env python3
"""fuzz_snapshot.py: a bounded fuzz loop over tools/snapshot_to_json.py, for `make fuzz`.

libFuzzer drives C; the converter is Python, so this loop does the same job by hand: each
iteration makes a pickle, by mutating a seed (bytes flipped, inserted, deleted, repeated, spliced
from another seed) or by pickling a generated snapshot whose fields hold random values (lists
shared many ways deep, lists that contain themselves, huge integers, long strings), sometimes
gzip-compressed, and runs the converter on it in this process under a 5 s alarm. The converter
must return the JSON or raise its SnapshotError; any other exception, a MemoryError under the
address-space cap, or the alarm is a finding, written to --crashes and fatal (exit 1).

    python3 tests/fuzz/fuzz_snapshot.py --seconds 600 --crashes build-fuzz/crashes_snapshot
"""
import argparse
import gzip
import importlib.util
import json
import os
import pickle
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
spec = importlib.util.spec_from_file_location("snapshot_to_json",
                                              os.path.join(ROOT, "tools", "snapshot_to_json.py"))
conv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conv)

CASE_SECONDS = 5
MAX_INPUT = 1 << 16


class Hang(Exception):
    pass


def base_snapshot():
    return {
        "segments": [{
            "device": 0, "address": 139_000_000_000_000, "total_size": 20_971_520,
            "stream": 0, "segment_type": "large", "is_expandable": False, "frames": [],
            "blocks": [
                {"size": 2_097_152, "requested_size": 2_000_000, "state": "active_allocated",
                 "frames": [{"filename": "x.py", "line": 1, "name": "f"}]},
                {"size": 18_874_368, "requested_size": 0, "state": "inactive", "frames": []},
            ],
        }],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 139_000_000_000_000, "size": 20_971_520,
             "stream": 0, "time_us": 1, "frames": []},
            {"action": "alloc", "addr": 139_000_000_000_000, "size": 2_000_000, "stream": 0,
             "time_us": 2},
            {"action": "free_requested", "addr": 139_000_000_000_000, "size": 2_000_000,
             "stream": 0, "time_us": 3},
        ], []],
        "allocator_settings": {}, "external_annotations": [],
    }


def odd_value(rng, depth=0):
    """A value a hostile snapshot could put anywhere."""
    k = rng.randrange(12)
    if k == 0:
        v = []
        for _ in range(rng.randrange(1, 80)):
            v = [v, v]
        return v
    if k == 1:
        v = []
        v.append(v)
        return v
    if k == 2:
        d = {}
        d["self"] = d
        d["action"] = d
        return d
    if k == 3:
        return rng.choice([0, -1, 1 << 64, -(1 << 70), 10 ** 300, True, None, 1.5, float("nan")])
    if k == 4:
        return "x" * rng.choice([0, 1, 255, 256, 257, 100000])
    if k == 5:
        return b"\0" * rng.randrange(100)
    if k == 6 and depth < 3:
        return {rng.choice(["action", "addr", "size", "blocks", "state", "address"]): odd_value(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    if k == 7 and depth < 3:
        return tuple(odd_value(rng, depth + 1) for _ in range(rng.randrange(4)))
    if k == 8:
        return rng.choice(["alloc", "free_completed", "segment_free", "oom", "active_allocated", "small"])
    if k == 9:
        return rng.randrange(1 << 48)
    if k == 10 and depth < 3:
        return [odd_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return rng.randrange(-5, 5)


def generated(rng):
    """A snapshot with a few fields replaced by odd values, pickled."""
    snap = base_snapshot()
    places = [
        lambda v: snap.__setitem__("device_traces", v),
        lambda v: snap.__setitem__("segments", v),
        lambda v: snap["device_traces"].__setitem__(0, v),
        lambda v: snap["device_traces"][0].__setitem__(1, v),
        lambda v: snap["device_traces"][0][1].__setitem__(rng.choice(list(conv.TRACE_KEYS)), v),
        lambda v: snap["segments"].__setitem__(0, v),
        lambda v: snap["segments"][0].__setitem__(rng.choice(list(conv.SEGMENT_KEYS) + ["blocks"]), v),
        lambda v: snap["segments"][0]["blocks"].__setitem__(1, v),
        lambda v: snap["segments"][0]["blocks"][0].__setitem__(rng.choice(list(conv.BLOCK_KEYS)), v),
    ]
    for _ in range(rng.randrange(1, 4)):
        try:
            rng.choice(places)(odd_value(rng))
        except (TypeError, IndexError, KeyError, AttributeError):
            pass  # an earlier odd value took the place away
    try:
        return pickle.dumps(snap, protocol=rng.choice([0, 2, 4, 5]))
    except (RecursionError, ValueError):
        return pickle.dumps(base_snapshot())


def mutated(rng, seeds):
    b = bytearray(rng.choice(seeds))
    for _ in range(rng.randrange(1, 8)):
        if not b:
            b += b"\x80"
        op = rng.randrange(6)
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.randrange(256)
        elif op == 2:
            b.insert(i, rng.randrange(256))
        elif op == 3 and len(b) > 1:
            del b[i:i + rng.randrange(1, 8)]
        elif op == 4:
            j = rng.randrange(i, min(len(b), i + 32) + 1)
            b[i:i] = b[i:j] * rng.randrange(1, 20)
        else:
            other = rng.choice(seeds)
            j = rng.randrange(len(other) + 1)
            b = b[:i] + other[j:j + rng.randrange(1, 64)] + b[i:]
    return bytes(b[:MAX_INPUT])


def run_one(path):
    """The converter on one file: its JSON text, or its SnapshotError."""
    signal.alarm(CASE_SECONDS)
    try:
        out = conv.convert(conv.load_snapshot(path, 64 << 20), None)
        return json.dumps(out, separators=(",", ":"))
    finally:
        signal.alarm(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--crashes", default="build-fuzz/crashes_snapshot")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    os.makedirs(args.crashes, exist_ok=True)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))

    def hang(_s, _f):
        raise Hang()
    signal.signal(signal.SIGALRM, hang)
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    seeds = [pickle.dumps(base_snapshot(), protocol=p) for p in (0, 2, 4, 5)]
    hostile = os.path.join(ROOT, "tests", "hostile")
    for name in sorted(os.listdir(hostile)):
        if name.endswith(".pickle"):
            with open(os.path.join(hostile, name), "rb") as f:
                seeds.append(f.read())
    fd, path = tempfile.mkstemp(prefix="vrsim-fuzz-snapshot.", suffix=".pickle")
    os.close(fd)
    end = time.monotonic() + args.seconds
    n = ok = refused = 0
    try:
        while time.monotonic() < end:
            data = generated(rng) if rng.random() < 0.5 else mutated(rng, seeds)
            if rng.random() < 0.1:
                data = gzip.compress(data, mtime=0)
            if rng.random() < 0.02:  # a small gzip bomb
                z = zlib.compressobj(9, zlib.DEFLATED, 31)
                data = z.compress(bytes(rng.randrange(60, 70) << 20)) + z.flush()
            with open(path, "wb") as f:
                f.write(data)
            n += 1
            try:
                run_one(path)
                ok += 1
                if rng.random() < 0.05 and len(data) < 4096:
                    seeds.append(data)
            except conv.SnapshotError:
                refused += 1
            except BaseException as e:  # noqa: a finding, whatever it is
                if isinstance(e, KeyboardInterrupt):
                    raise
                crash = os.path.join(args.crashes, f"crash-{seed}-{n}.pickle")
                with open(crash, "wb") as f:
                    f.write(data)
                what = "a hang (over %d s)" % CASE_SECONDS if isinstance(e, Hang) else type(e).__name__
                print(f"fuzz_snapshot: {what} on {crash} (seed {seed}, case {n})", file=sys.stderr)
                traceback.print_exc()
                return 1
    finally:
        os.unlink(path)
    print(f"fuzz_snapshot: {n} cases in {args.seconds:.0f} s (seed {seed}): {ok} converted, "
          f"{refused} refused with a message, no finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
