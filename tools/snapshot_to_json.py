#!/usr/bin/env python3
"""snapshot_to_json.py: turn a pickled torch.cuda.memory._snapshot() into the JSON `vrsim replay` reads.

Record on the machine with the GPU:

    torch.cuda.memory._record_memory_history(max_entries=10_000_000)
    ... the training steps ...
    torch.cuda.memory._dump_snapshot("snap.pickle")   # or pickle.dump(torch.cuda.memory._snapshot(), f)

then, anywhere with Python 3 (PyTorch is not needed: a snapshot holds only plain dicts and lists):

    python3 tools/snapshot_to_json.py snap.pickle -o trace.json [--device N]
    vrsim replay trace.json

Output (stack frames dropped, everything else the replay needs kept):

    {"device_traces": [[{"action", "addr", "size", "stream", "time_us"}, ...], ...],
     "segments": [{"device", "address", "total_size", "stream", "segment_type", "is_expandable",
                   "blocks": [{"address", "size", "requested_size", "state"}, ...]}, ...]}

`vrsim replay` replays one device: with several, pass --device N. The snapshot's segments are its
state at the end; the replay uses them only to place the blocks that stay allocated throughout
and never appear in the trace (model weights, optimizer state) before the first event.

The pickle is read with a restricted unpickler that builds only plain Python values, so a hostile
file cannot run code. `--self-test` checks the converter on a hand-made snapshot.
"""
import argparse
import gzip
import io
import json
import pickle
import sys

TRACE_KEYS = ("action", "addr", "size", "stream", "time_us")
SEGMENT_KEYS = ("device", "address", "total_size", "stream", "segment_type", "is_expandable")
BLOCK_KEYS = ("address", "size", "requested_size", "state")


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: no classes, no code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"the pickle refers to {module}.{name}; a memory snapshot holds only plain values")


def load_snapshot(path):
    """Reads a snapshot pickle (optionally gzip-compressed) from path ('-' = stdin)."""
    data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    snap = _PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(snap, dict) or "device_traces" not in snap:
        raise ValueError("not a torch.cuda.memory._snapshot(): no 'device_traces' key")
    return snap


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what} is not an integer: {v!r}")
    return v


def convert(snap, device=None):
    """Returns the JSON-ready dict for snapshot `snap`; only `device` if given."""
    traces = []
    for i, trace in enumerate(snap.get("device_traces") or []):
        if device is not None and i != device:
            traces.append([])
            continue
        out = []
        for n, e in enumerate(trace or []):
            if not isinstance(e, dict) or "action" not in e:
                raise ValueError(f"device_traces[{i}][{n}] is not a trace entry")
            entry = {"action": str(e["action"])}
            for k in TRACE_KEYS[1:]:
                if k in e and e[k] is not None:
                    entry[k] = _int(e[k], f"device_traces[{i}][{n}].{k}")
            out.append(entry)
        traces.append(out)
    segments = []
    for n, s in enumerate(snap.get("segments") or []):
        if not isinstance(s, dict):
            raise ValueError(f"segments[{n}] is not a segment")
        if device is not None and s.get("device", 0) != device:
            continue
        seg = {k: s[k] for k in SEGMENT_KEYS if k in s}
        addr = _int(s.get("address", 0), f"segments[{n}].address")
        blocks = []
        for b in s.get("blocks") or []:
            blk = {k: b[k] for k in BLOCK_KEYS if k in b}
            if "address" not in blk:  # older snapshots: blocks follow each other from the base
                blk["address"] = addr
            addr = _int(blk["address"], f"segments[{n}] block address") + _int(
                blk.get("size", 0), f"segments[{n}] block size")
            blocks.append(blk)
        seg["blocks"] = blocks
        segments.append(seg)
    return {"device_traces": traces, "segments": segments}


def self_test():
    """Converts a hand-made snapshot of plain dicts shaped like torch's and checks the result."""
    snap = {
        "segments": [{
            "device": 0, "address": 139_000_000_000_000, "total_size": 20_971_520,
            "allocated_size": 2_097_152, "active_size": 2_097_152, "requested_size": 2_000_000,
            "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [],
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
             "time_us": 2, "frames": [{"filename": "x.py", "line": 3, "name": "g"}]},
            {"action": "alloc", "addr": 139_000_002_097_152, "size": 4096, "stream": 0,
             "time_us": 3, "frames": []},
            {"action": "free_requested", "addr": 139_000_002_097_152, "size": 4096, "stream": 0,
             "time_us": 4, "frames": []},
            {"action": "free_completed", "addr": 139_000_002_097_152, "size": 4096, "stream": 0,
             "time_us": 5, "frames": []},
        ]],
        "allocator_settings": {}, "external_annotations": [],
    }
    raw = pickle.dumps(snap)
    got = convert(_PlainUnpickler(io.BytesIO(raw)).load())
    assert len(got["device_traces"]) == 1 and len(got["device_traces"][0]) == 5
    assert got["device_traces"][0][1] == {"action": "alloc", "addr": 139_000_000_000_000,
                                          "size": 2_000_000, "stream": 0, "time_us": 2}
    blocks = got["segments"][0]["blocks"]
    assert blocks[1]["address"] == 139_000_000_000_000 + 2_097_152, blocks
    assert "frames" not in json.dumps(got)
    # a pickle that names a class is refused
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    try:
        _PlainUnpickler(io.BytesIO(pickle.dumps(Evil()))).load()
        raise AssertionError("a pickle with a class was accepted")
    except pickle.UnpicklingError:
        pass
    json.dumps(got)
    print("snapshot_to_json.py self-test: ok")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("snapshot", nargs="?", help="pickled torch.cuda.memory._snapshot() ('-' = stdin)")
    ap.add_argument("-o", "--output", default="-", help="JSON file to write (default: stdout)")
    ap.add_argument("--device", type=int, default=None, help="keep only this CUDA device")
    ap.add_argument("--self-test", action="store_true", help="check the converter and exit")
    args = ap.parse_args(argv)
    if args.self_test:
        self_test()
        return 0
    if not args.snapshot:
        ap.error("a snapshot file is needed")
    try:
        out = convert(load_snapshot(args.snapshot), args.device)
    except (OSError, ValueError, pickle.UnpicklingError, EOFError) as e:
        print(f"snapshot_to_json.py: {args.snapshot}: {e}", file=sys.stderr)
        return 2
    text = json.dumps(out, separators=(",", ":"))
    if args.output == "-":
        sys.stdout.write(text + "\n")
    else:
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        import os
        os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
