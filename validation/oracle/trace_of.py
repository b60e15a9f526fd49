#!/usr/bin/env python3
"""An oracle capture as a caching-allocator trace, for `vrsim replay` (Python's standard library
only).

  trace_of.py CAPTURE.jsonl.gz OUT.csv

Each storage the capture allocates is an `alloc` of its exact requested bytes and each storage
freed a `free_requested` and `free_completed`, in the capture's order, in the columns
`vrsim replay` reads (seq,time_us,action,addr,size,stream). Replaying it gives the reserved
memory of the real library's allocation sequence under vrsim's model of the allocator, to hold
against vrsim's own sequence (`vrsim SCENARIO --alloc-trace`): the first place they part is the
op or rule that changes reserved (docs/oracle.md).

A fake tensor cannot show what a CUDA kernel allocates inside itself; the one such temporary
large enough to move reserved is added where the capture's op makes it:

- `_softmax_backward_data`: softmax_backward_cuda_out computes `Tensor tmp = grad * output;`
  (aten/src/ATen/native/cuda/SoftMax.cu), a temporary of the gradient's size made after the
  output and freed when the kernel returns.
Zero-byte storages are left out (the caching allocator is not asked for them).
"""
import gzip
import json
import sys

# (op, what): the ops whose CUDA kernel makes a temporary the size of its output
KERNEL_TEMPS = {"aten._softmax_backward_data.default": "softmax_backward_cuda_out's tmp = grad * output"}


def main():
    if len(sys.argv) != 3:
        print("usage: trace_of.py CAPTURE.jsonl.gz OUT.csv", file=sys.stderr)
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    opener = gzip.open if src.endswith(".gz") else open
    try:
        with opener(src, "rt") as f:
            events = [json.loads(ln) for ln in f if ln.strip()]
    except (OSError, ValueError) as e:
        print(f"trace_of: cannot read capture {src}: {e}", file=sys.stderr)
        return 2
    if not events or events[0].get("e") != "header":
        print(f"trace_of: {src}: not an oracle capture (no header line)", file=sys.stderr)
        return 2
    rows = ["seq,time_us,action,addr,size,stream"]
    sizes = {}
    temp_addr = 1 << 44   # (above every storage's address: 4 KiB apart from 4 GiB up)

    def emit(action, addr, size):
        rows.append(f"{len(rows)},{len(rows)},{action},{addr},{size},0")

    for ev in events[1:]:
        kind = ev.get("e")
        if kind == "op":
            for sid, b in ev.get("new", []):
                if b <= 0:
                    continue
                sizes[sid] = b
                emit("alloc", (1 << 32) + sid * 4096, b)
                if ev.get("op") in KERNEL_TEMPS:
                    temp_addr += 4096
                    emit("alloc", temp_addr, b)
                    emit("free_requested", temp_addr, b)
                    emit("free_completed", temp_addr, b)
        elif kind == "free" and ev.get("sid") in sizes:
            b = sizes.pop(ev["sid"])
            emit("free_requested", (1 << 32) + ev["sid"] * 4096, b)
            emit("free_completed", (1 << 32) + ev["sid"] * 4096, b)
    try:
        with open(dst, "w") as f:
            f.write("\n".join(rows) + "\n")
    except OSError as e:
        print(f"trace_of: cannot write {dst}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
