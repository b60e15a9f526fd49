#!/usr/bin/env python3
"""The op classes of gpt-oss's eager attention with sinks, from profile_sinks_attention.py's op
timings: a lua/hw/calibrated/<gpu>_sinks_attention.lua table vrsim joins to the card's torch_ops.
Standard library only.

Each class is the measured device time of the named ATen op's own kernels at one shape, over the
bytes vrsim's op moves (N = b * heads * s * (s + 1) elements of the scores with the sink column,
bf16):

  softmax_sinks       aten::_softmax over the (b, heads, s, s + 1) rows: 4N bytes (read, write)
  softmax_sinks_bwd   aten::_softmax_backward_data and the `grad * output` product it runs first
                      (SoftMax.cu softmax_backward_cuda_out): 12N bytes (both read two, write one)
  cat_sinks           aten::cat of the masked scores and the sink column where the output is
                      32-bit indexable (one CatArrayBatchedCopy kernel)
  cat_sinks_copy      the same cat over 2^31 - 1 elements: cat_out_cuda then copies each input into
                      its narrowed slice of the output (TensorIterator copies)
  cat_sinks_bwd       the cat's backward: CatBackward0 narrows (views); ExpandBackward sums the sink
                      column's gradient (b, heads, s, 1), row stride s + 1, to (heads,): that
                      aten::sum (bytes: the column and the result)
  mm_align1           the probabilities' [..., :-1] view (row stride s + 1) times the values: cuBLAS
                      sends it to CUTLASS's sm75 align1 kernel (bytes: the view's elements, values
                      and output)
  mm_align1_bwd       its backward: the values' gradient (the view transposed, again align1) and
                      the probabilities' gradient (an aligned GEMM, the same kernel and shape as
                      q @ k^T: that bmm's mean per call); twice the forward's bytes

  python3 validation/harness/sinks_attention_classes.py GPU_LABEL OUT.lua RESULTS.json[l] ...
"""
import json
import sys

INT32_MAX = 2**31 - 1


def rows_of(path):
    text = open(path).read()
    docs = [json.loads(l) for l in text.splitlines() if l.strip()] if path.endswith(".jsonl") else [json.loads(text)]
    for d in docs:
        for r in d["rows"]:
            yield d, r


def op_us(r, name, shapes=None):
    """(calls, us) of ATen op `name` (with these input shapes, if given) in row r."""
    hit = [o for o in r["ops"] if o["op"] == name and (shapes is None or o["shapes"] == shapes)]
    if len(hit) != 1:
        raise SystemExit(f"sinks_attention_classes: {len(hit)} ops {name} {shapes or ''} in a row")
    return hit[0]["calls"], hit[0]["us"]


def kernel_us(r, sub):
    hit = [k for k in r["kernels"] if sub in k["kernel"]]
    if len(hit) != 1:
        raise SystemExit(f"sinks_attention_classes: {len(hit)} kernels with '{sub}' in a row")
    return hit[0]["us"]


def classes(r):
    b, s, h, d = r["batch"], r["seq"], r["heads"], r["head_dim"]
    n, nss = b * h * s * (s + 1), b * h * s * s
    s1 = f"[[{b}, {h}, {s}, {s + 1}]"
    _, sm = op_us(r, "aten::_softmax", s1 + ", [], []]")
    _, smb = op_us(r, "aten::_softmax_backward_data", f"{s1}, [{b}, {h}, {s}, {s + 1}], [], []]")
    _, mul = op_us(r, "aten::mul", f"{s1}, [{b}, {h}, {s}, {s + 1}]]")
    _, cat = op_us(r, "aten::cat", "[[], []]")
    _, col_sum = op_us(r, "aten::sum", f"[[{b}, {h}, {s}, 1], [], [], []]")
    calls, qk = op_us(r, "aten::bmm", f"[[{b * h}, {s}, {d}], [{b * h}, {d}, {s}]]")
    fwd_align1 = kernel_us(r, "_nn_align1>")
    bwd_align1 = kernel_us(r, "_nt_align1>")
    mm_bytes = 2 * nss + 2 * (2 * b * h * s * d)
    label = f"b{b} heads{h} s{s}"
    return [
        ("softmax_sinks", label, 4 * n, sm),
        ("softmax_sinks_bwd", label, 12 * n, smb + mul),
        ("cat_sinks" if n <= INT32_MAX else "cat_sinks_copy", label, 2 * nss + 2 * h + 2 * n, cat),
        ("cat_sinks_bwd", label, 2 * b * h * s + 2 * h, col_sum),
        ("mm_align1", label, mm_bytes, fwd_align1),
        ("mm_align1_bwd", label, 2 * mm_bytes, bwd_align1 + qk / calls),
    ]


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    label, out, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows, meta = [], set()
    for p in paths:
        for d, r in rows_of(p):
            meta.add((d.get("gpu"), d.get("torch")))
            rows += classes(r)
    rows.sort(key=lambda x: (x[0], x[2]))
    gpu = ", ".join(sorted(f"{g}, torch {t}" for g, t in meta))
    lines = [
        f"-- gpt-oss's eager attention with sinks on {label} ({gpu}): each op's own kernels' device",
        "-- time (torch.profiler, profile_sinks_attention.py) over the bytes vrsim's op moves; the classes",
        "-- and their bytes are described in validation/harness/sinks_attention_classes.py. Sources:",
        *[f"--   validation/results/{p.split('/')[-1]}" for p in paths],
        f"-- command: python3 validation/harness/sinks_attention_classes.py \"{label}\" THIS_FILE "
        + " ".join("validation/results/" + p.split("/")[-1] for p in paths),
        "return {",
        "  torch_ops = {",
    ]
    for cls, lab, nbytes, us in rows:
        ms = us / 1e3
        lines.append(f'    {{class="{cls}", op="{lab}", bytes={nbytes}, ms={ms:.5f}, gbps={nbytes / ms / 1e6:.1f}}},')
    lines += ["  },", "}", ""]
    open(out, "w").write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
