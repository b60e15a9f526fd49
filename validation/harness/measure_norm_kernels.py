"""F.layer_norm's and F.group_norm's kernels, forward and backward, timed with torch.profiler
(each kernel's own time, the median of 5 calls), at the SDXL UNet's shapes in bf16: LayerNorm
over 320-1280 channels at 256-65536 tokens, GroupNorm (32 groups) at its channels x pixels and
batch 1-8. GroupNorm's statistics kernel (RowwiseMomentsCUDAKernel) is counted apart: vrsim
prices it per block (measure_group_norm.py). Each row gives the bytes as vrsim's op library
counts them for the op (forward: input, affine parameters, output, mean and rstd; backward:
twice that, the default of a derived backward) and the kernels' time, so bytes / time is the
rate of vrsim's "norm" class (forward) and "norm_bwd" (backward). One JSON object: {"rows": [{"op", "shape", "dir", "bytes", "us"}]}

  python3 validation/harness/measure_norm_kernels.py --out F.json
  python3 validation/harness/measure_norm_kernels.py --from F.json --lua lua/hw/calibrated/h200_norm.lua
"""
import json

from kernel_timing import (byte_rate_points, measure_or_write, median_kernel_us, save_rows, torch,
                           write_torch_ops)

if torch is not None:  # --from runs without torch
    import torch.nn.functional as F

LN = [(t, c) for c in (320, 640, 1280) for t in (256, 1024, 4096, 16384, 65536)]
GN = [(n, c, side) for n in (1, 2, 4, 8) for c, side in ((320, 128), (640, 64), (1280, 32), (960, 128), (1920, 64))]


def kernel_us(fn, skip="RowwiseMoments"):
    """One call's kernel microseconds, those named `skip` left out (median of 5 calls)."""
    us, _ = median_kernel_us(fn, 5, lambda name: None if skip in name else "all")
    return us.get("all", 0.0)


def measure(a):
    rows = []
    kw = dict(device="cuda", dtype=torch.bfloat16)
    for t, c in LN:
        x = torch.randn(t, c, **kw, requires_grad=True)
        w = torch.ones(c, **kw, requires_grad=True)
        b = torch.zeros(c, **kw, requires_grad=True)
        y = F.layer_norm(x, (c,), w, b)
        g = torch.ones_like(y)
        fwd_bytes = 2 * t * c * 2 + 2 * c * 2 + 2 * t * 4   # x, out; w, b; fp32 mean, rstd
        for _ in range(3):
            F.layer_norm(x, (c,), w, b).backward(g)
        rows.append({"op": "layer_norm", "shape": [t, c], "dir": "fwd", "bytes": fwd_bytes,
                     "us": round(kernel_us(lambda: F.layer_norm(x, (c,), w, b)), 2)})

        def bwd():
            torch.autograd.grad(F.layer_norm(x, (c,), w, b), (x, w, b), g)
        both = kernel_us(bwd)
        rows.append({"op": "layer_norm", "shape": [t, c], "dir": "bwd", "bytes": 2 * fwd_bytes,
                     "us": round(both - rows[-1]["us"], 2)})
        print(json.dumps(rows[-2]), json.dumps(rows[-1]))
    for n, c, side in GN:
        x = torch.randn(n, c, side, side, **kw, requires_grad=True)
        w = torch.ones(c, **kw, requires_grad=True)
        b = torch.zeros(c, **kw, requires_grad=True)
        g = torch.ones_like(x)
        fwd_bytes = 2 * x.numel() * 2 + 2 * c * 2 + 2 * n * 32 * 2  # x, out; w, b; mean, rstd
        for _ in range(3):
            F.group_norm(x, 32, w, b).backward(g)
        f_us = kernel_us(lambda: F.group_norm(x, 32, w, b))
        rows.append({"op": "group_norm", "shape": [n, c, side, side], "dir": "fwd", "bytes": fwd_bytes,
                     "us": round(f_us, 2)})

        def gbwd():
            torch.autograd.grad(F.group_norm(x, 32, w, b), (x, w, b), g)
        rows.append({"op": "group_norm", "shape": [n, c, side, side], "dir": "bwd", "bytes": 2 * fwd_bytes,
                     "us": round(kernel_us(gbwd) - f_us, 2)})
        print(json.dumps(rows[-2]), json.dumps(rows[-1]))
        del x, g
        torch.cuda.empty_cache()
    save_rows(a.out, rows)


def write_lua(src, path, m):
    pts = byte_rate_points(src)
    write_torch_ops(path,
                "-- F.layer_norm's and F.group_norm's kernels (GroupNorm's statistics kernel apart: <gpu>_group_norm.lua)\n"
                "-- on %(gpu)s, torch %(torch)s, bf16, torch.profiler kernel time, %(date)s: the\n"
                "-- bytes vrsim's op library counts for each op (ops/norm.lua; backward: twice the forward's)\n"
                "-- over the kernels' time, %(n)d shapes of the SDXL UNet: the classes of kind \"norm\" (forward)\n"
                "-- and \"norm_bwd\" (without them: the generic streaming curve, 2-5 times faster than these).\n"
                "--   python3 validation/harness/measure_norm_kernels.py --out %(src)s\n"
                "--   python3 validation/harness/measure_norm_kernels.py --from %(src)s --date %(date)s --lua THIS_FILE\n"
                % dict(m, n=len(pts)),
                [("norm" if r["dir"] == "fwd" else "norm_bwd",
                  "%s %s" % (r["op"], "x".join(str(v) for v in r["shape"])), b, r["us"] / 1e3, gbps)
                 for b, gbps, r in pts])
    print("%d points, %.0f-%.0f GB/s" % (len(pts), min(p[1] for p in pts), max(p[1] for p in pts)))


def main():
    measure_or_write(__doc__, measure, write_lua)


if __name__ == "__main__":
    main()
