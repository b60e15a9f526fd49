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
file cannot run code. Whatever the file holds, the converter ends with the JSON or one line saying
what is wrong (exit 2), within bounds: the file must be a regular file of at most --max-mib MiB,
a gzip file may inflate to at most 100 times its size (and --max-mib), the work stops after
--time-limit seconds, and the process's memory is capped at --max-memory-mib. Only the fields
listed below are read, and each must be a plain scalar (a string, an integer, a boolean): a
snapshot's values are never walked deeper, so shared or self-containing lists cost nothing.
`--self-test` checks the converter on a hand-made snapshot.
"""
import argparse
import io
import json
import os
import pickle
import signal
import stat
import sys
import zlib

TRACE_KEYS = ("action", "addr", "size", "stream", "time_us")
SEGMENT_KEYS = ("device", "address", "total_size", "stream", "segment_type", "is_expandable")
BLOCK_KEYS = ("address", "size", "requested_size", "state")


MAX_MIB = 4096           # the pickle (inflated) at most this large by default
GZIP_RATIO = 100         # a gzip file inflates to at most this many times its size ...
MIN_INFLATED = 64 << 20  # ... or this, whichever is more (a gzip bomb stops there)
TIME_LIMIT_S = 600
MAX_MEMORY_MIB = 16384
MAX_STRING = 256         # an action, a state or a segment type is a short word


class SnapshotError(ValueError):
    """What is wrong with the input, in one line for the user."""


class _TimeUp(Exception):
    """The --time-limit passed."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: no classes, no code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"the pickle refers to {module}.{name}; a memory snapshot holds only plain values")


def _read_input(path, max_bytes):
    """The bytes of path ('-' = stdin): a regular file of at most max_bytes (a FIFO or a device
    is refused, not waited on), or stdin read up to max_bytes + 1."""
    if path == "-":
        data = sys.stdin.buffer.read(max_bytes + 1)
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise SnapshotError(f"cannot open it: {e.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise SnapshotError("not a regular file (a FIFO, device, socket or folder)")
            if st.st_size > max_bytes:
                raise SnapshotError(f"larger than {max_bytes >> 20} MiB: refused (--max-mib)")
            os.set_blocking(fd, True)
            data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SnapshotError(f"larger than {max_bytes >> 20} MiB: refused (--max-mib)")
    return data


def _gunzip(data, max_bytes):
    """Inflates gzip data (every member), refusing it as soon as the text passes
    min(max_bytes, max(GZIP_RATIO x its size, MIN_INFLATED)): the limit holds while inflating."""
    limit = min(max_bytes, max(GZIP_RATIO * len(data), MIN_INFLATED))
    out, total, rest = [], 0, data
    while rest:
        d = zlib.decompressobj(wbits=31)
        buf = rest
        while buf and not d.eof:
            try:
                chunk = d.decompress(buf, 1 << 20)
            except zlib.error as e:
                raise SnapshotError(f"not a valid gzip file: {e}") from None
            total += len(chunk)
            if total > limit:
                raise SnapshotError(f"inflates to more than {limit >> 20} MiB (more than {GZIP_RATIO} "
                                    "times its size, or --max-mib): refused, a gzip bomb?")
            out.append(chunk)
            buf = d.unconsumed_tail
        if not d.eof:
            raise SnapshotError("truncated gzip file")
        rest = d.unused_data.lstrip(b"\0")  # zero padding after the last member, as gzip allows
    return b"".join(out)


def load_snapshot(path, max_bytes=MAX_MIB << 20):
    """Reads a snapshot pickle (optionally gzip-compressed) from path ('-' = stdin)."""
    data = _read_input(path, max_bytes)
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, max_bytes)
    try:
        snap = _PlainUnpickler(io.BytesIO(data)).load()
    except _TimeUp:
        raise
    except MemoryError:
        # a damaged length field makes the unpickler ask for it all at once (a bytes8 of 2^62)
        raise SnapshotError("the pickle needs more memory than the cap (--max-memory-mib), or a "
                            "length in it is larger than the file") from None
    except Exception as e:  # a damaged pickle raises almost anything: one line, not a traceback
        raise SnapshotError(f"not a readable pickle: {type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(snap, dict) or "device_traces" not in snap:
        raise SnapshotError("not a torch.cuda.memory._snapshot(): no 'device_traces' key")
    return snap


def _shown(v):
    """A value for a message: scalars as they are, containers by type (never walked)."""
    if isinstance(v, (bool, int, float)) or v is None:
        return repr(v)[:40]
    if isinstance(v, (str, bytes)):
        return repr(v[:40])
    return f"a {type(v).__name__}"


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, int):
        raise SnapshotError(f"{what} is not an integer: {_shown(v)}")
    if not -(1 << 63) <= v < (1 << 64):
        raise SnapshotError(f"{what} is out of range: {_shown(v)}")
    return v


def _str(v, what):
    if not isinstance(v, str) or len(v) > MAX_STRING:
        raise SnapshotError(f"{what} is not a short string: {_shown(v)}")
    return v


def _bool(v, what):
    if not isinstance(v, bool):
        raise SnapshotError(f"{what} is not true or false: {_shown(v)}")
    return v


def _list(v, what):
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise SnapshotError(f"{what} is not a list: {_shown(v)}")
    return v


# how each output field's value is checked: every one a scalar, so no value of the snapshot is
# ever walked deeper (json.dumps of the result is linear in its size)
SEGMENT_CHECKS = {"device": _int, "address": _int, "total_size": _int, "stream": _int,
                  "segment_type": _str, "is_expandable": _bool}
BLOCK_CHECKS = {"address": _int, "size": _int, "requested_size": _int, "state": _str}


def convert(snap, device=None):
    """Returns the JSON-ready dict for snapshot `snap`; only `device` if given. SnapshotError
    names the first value that is not what a snapshot holds."""
    traces = []
    for i, trace in enumerate(_list(snap.get("device_traces"), "device_traces")):
        if device is not None and i != device:
            traces.append([])
            continue
        out = []
        for n, e in enumerate(_list(trace, f"device_traces[{i}]")):
            if not isinstance(e, dict) or "action" not in e:
                raise SnapshotError(f"device_traces[{i}][{n}] is not a trace entry")
            entry = {"action": _str(e["action"], f"device_traces[{i}][{n}].action")}
            for k in TRACE_KEYS[1:]:
                if k in e and e[k] is not None:
                    entry[k] = _int(e[k], f"device_traces[{i}][{n}].{k}")
            out.append(entry)
        traces.append(out)
    segments = []
    for n, s in enumerate(_list(snap.get("segments"), "segments")):
        if not isinstance(s, dict):
            raise SnapshotError(f"segments[{n}] is not a segment")
        seg = {k: SEGMENT_CHECKS[k](s[k], f"segments[{n}].{k}") for k in SEGMENT_KEYS if k in s}
        if device is not None and seg.get("device", 0) != device:
            continue
        addr = _int(s.get("address", 0), f"segments[{n}].address")
        blocks = []
        for j, b in enumerate(_list(s.get("blocks"), f"segments[{n}].blocks")):
            if not isinstance(b, dict):
                raise SnapshotError(f"segments[{n}].blocks[{j}] is not a block")
            blk = {k: BLOCK_CHECKS[k](b[k], f"segments[{n}].blocks[{j}].{k}")
                   for k in BLOCK_KEYS if k in b}
            if "address" not in blk:  # older snapshots: blocks follow each other from the base
                blk["address"] = addr
            addr = blk["address"] + blk.get("size", 0)
            blocks.append(blk)
        seg["blocks"] = blocks
        segments.append(seg)
    return {"device_traces": traces, "segments": segments}


def _bounded(args):
    """Caps the process's address space and arms a timer (past either: one line, exit 2)."""
    try:
        import resource
        cap = args.max_memory_mib << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft == resource.RLIM_INFINITY or soft > cap:
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, ValueError, OSError):
        pass

    def up(_sig, _frame):
        raise _TimeUp()
    signal.signal(signal.SIGALRM, up)
    signal.alarm(args.time_limit)


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
    # a field that is not a scalar is refused by its type, never walked: a list shared 2^60
    # ways deep, a list that contains itself
    deep = []
    for _ in range(60):
        deep = [deep, deep]
    loop = []
    loop.append(loop)
    for bad in (deep, loop):
        for where in ("action", "state"):
            s2 = pickle.loads(raw)
            if where == "action":
                s2["device_traces"][0][0]["action"] = bad
            else:
                s2["segments"][0]["blocks"][0]["state"] = bad
            try:
                convert(_PlainUnpickler(io.BytesIO(pickle.dumps(s2))).load())
                raise AssertionError("a list as a field was accepted")
            except SnapshotError as e:
                assert "not a short string: a list" in str(e), e
    # a gzip bomb stops at its limit while it inflates
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = z.compress(b"\0" * (65 << 20)) + z.flush()
    try:
        _gunzip(bomb, MAX_MIB << 20)
        raise AssertionError("a gzip bomb was inflated")
    except SnapshotError as e:
        assert "gzip bomb" in str(e), e
    print("snapshot_to_json.py self-test: ok")



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("snapshot", nargs="?", help="pickled torch.cuda.memory._snapshot() ('-' = stdin)")
    ap.add_argument("-o", "--output", default="-", help="JSON file to write (default: stdout)")
    ap.add_argument("--device", type=int, default=None, help="keep only this CUDA device")
    ap.add_argument("--self-test", action="store_true", help="check the converter and exit")
    ap.add_argument("--max-mib", type=int, default=MAX_MIB,
                    help=f"largest pickle read, after inflating (default {MAX_MIB})")
    ap.add_argument("--time-limit", type=int, default=TIME_LIMIT_S,
                    help=f"seconds the conversion may take (default {TIME_LIMIT_S})")
    ap.add_argument("--max-memory-mib", type=int, default=MAX_MEMORY_MIB,
                    help=f"address space the process may use (default {MAX_MEMORY_MIB})")
    args = ap.parse_args(argv)
    if args.self_test:
        self_test()
        return 0
    if not args.snapshot:
        ap.error("a snapshot file is needed")
    if args.max_mib < 1 or args.time_limit < 1 or args.max_memory_mib < 64:
        ap.error("--max-mib and --time-limit must be >= 1, --max-memory-mib >= 64")
    _bounded(args)
    try:
        out = convert(load_snapshot(args.snapshot, args.max_mib << 20), args.device)
        text = json.dumps(out, separators=(",", ":"))
    except SnapshotError as e:
        print(f"snapshot_to_json.py: {args.snapshot}: {e}", file=sys.stderr)
        return 2
    except _TimeUp:
        print(f"snapshot_to_json.py: {args.snapshot}: took longer than {args.time_limit} s: "
              "stopped (--time-limit)", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"snapshot_to_json.py: {args.snapshot}: needs more than {args.max_memory_mib} MiB: "
              "stopped (--max-memory-mib)", file=sys.stderr)
        return 2
    finally:
        signal.alarm(0)
    if args.output == "-":
        sys.stdout.write(text + "\n")
    else:
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
