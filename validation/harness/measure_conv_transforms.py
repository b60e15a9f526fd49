"""cuDNN's layout transforms around the SDXL UNet's convolutions. With NCHW tensors (PyTorch's
default memory format) cuDNN's tensor-core engines work in NHWC, so a call may launch
nchwToNhwcKernel / nhwcToNchwKernel / tensorTransformGeneric kernels besides the convolution.
Every distinct Conv2d of sdxl_unet.SDXLUNet (its input shape recorded by a forward pre-hook at
--res and --batch) is run alone in bf16, forward and then backward (input and weight needing a
gradient), each under torch.profiler; per call and direction, the kernels by kind: count and
microseconds of the transforms and of everything else. One JSON line per configuration:

  convs   [{cin, cout, k, stride, h, w, n, calls, fwd: {transform: [count, us], ...},
            bwd: {...}, kernels: {fwd: [names], bwd: [names]}}]

  python3 validation/harness/measure_conv_transforms.py --res 1024 --batch 1 --out F.jsonl

--from F.jsonl --lua FILE (no GPU) fits the transforms' time as the bytes they move (each
transformed tensor read and written once) at two rates, activations and filters, plus a fixed
cost per kernel, over every convolution and direction with transforms (forward: input, filter,
output; backward: grad_output, filter, grad_input for the data gradient and grad_output, input,
grad_weight for the filter gradient), and writes the rates as the profile classes "layout" and
"layout_filter" (lua/hw/calibrated/h200_conv_layout.lua).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_timing import call_kernels, measure_or_write, torch, write_torch_ops  # noqa: E402

if torch is not None:  # the fit (--from) runs without torch
    import torch.nn as nn
    from sdxl_unet import record_calls

TRANSFORM = re.compile(r"nchwToNhwc|nhwcToNchw|tensorTransformGeneric")


def conv_calls(res, batch):
    """(cin, cout, k, stride, pad, n, h, w) of every Conv2d call of one forward, in order."""
    calls = []
    record_calls(nn.Conv2d, res, batch, lambda m, x: calls.append(
        (m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0], m.padding[0],
         x.shape[0], x.shape[2], x.shape[3])))
    return calls


def summarize(ks):
    s = {"transform": [0, 0.0], "other": [0, 0.0]}
    for name, us in ks:
        c = s["transform" if TRANSFORM.search(name) else "other"]
        c[0] += 1
        c[1] = round(c[1] + us, 2)
    return s


def short(name):
    return re.sub(r"[<(].*", "", name)[:90]


def solve(rows, b):
    """Least squares of rows x = b by the normal equations (three unknowns, no numpy here)."""
    n = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * y for r, y in zip(rows, b))]
         for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            f = m[j][i] / m[i][i]
            m[j] = [x - f * y for x, y in zip(m[j], m[i])]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (m[i][n] - sum(m[i][k] * x[k] for k in range(i + 1, n))) / m[i][i]
    return x


def fit(path):
    """(us per kernel, activation GB/s, filter GB/s, points, largest relative error)."""
    rows, b = [], []
    for line in open(path):
        for c in json.loads(line)["convs"]:
            ho, wo = c["h"] // c["stride"], c["w"] // c["stride"]
            x = c["n"] * c["cin"] * c["h"] * c["w"] * 2
            y = c["n"] * c["cout"] * ho * wo * 2
            w = c["cout"] * c["cin"] * c["k"] * c["k"] * 2
            for d, act, filt in (("fwd", x + y, w), ("bwd", 2 * (x + y), 2 * w)):
                count, us = c[d]["transform"]
                if count:
                    rows.append([count, 2 * act, 2 * filt])
                    b.append(us)
    k, a, f = solve(rows, b)
    err = max(abs(sum(p * q for p, q in zip(r, (k, a, f))) - y) / y for r, y in zip(rows, b))
    return k, 1e-3 / a, 1e-3 / f, len(rows), err


def write_lua(src, path, m):
    k, act, filt, n, err = fit(src)
    size = 1 << 24  # the rates hold at every measured size: one row each, its rate constant
    write_torch_ops(path,
                "-- cuDNN's layout transforms around NCHW convolutions on %(gpu)s (torch %(torch)s,\n"
                "-- cuDNN %(cudnn)s), %(date)s: every 3x3 convolution of the SDXL UNet at 1024 px, batch 1 and 4,\n"
                "-- bf16, forward and backward, its nchwToNhwc / nhwcToNchw kernels timed with torch.profiler\n"
                "-- (1x1 convolutions launch none). Their time fitted as bytes read and written at two rates\n"
                "-- plus %(k).2f us a kernel, over %(n)d convolution-directions, largest error %(err).0f %%:\n"
                "--   python3 validation/harness/measure_conv_transforms.py --res 1024 --batch B --out %(src)s\n"
                "--   python3 validation/harness/measure_conv_transforms.py --from %(src)s --date %(date)s --lua THIS_FILE\n"
                "-- Read as profile classes by lua/vrsim/hardware.lua; priced per op by sim/cost.c (layout_ns).\n"
                % dict(m, k=k, n=n, err=100 * err),
                [(cls, "fit", size, size / (gbps * 1e6), gbps)
                 for cls, gbps in (("layout", act), ("layout_filter", filt))])
    print("per kernel %.2f us, activations %.1f GB/s, filters %.1f GB/s, %d points, max error %.0f %%"
          % (k, act, filt, n, 100 * err))


def measure(a):
    torch.backends.cudnn.benchmark = False
    counts = {}
    for c in conv_calls(a.res, a.batch):
        counts[c] = counts.get(c, 0) + 1
    rows = []
    for (cin, cout, k, stride, pad, n, h, w), calls in counts.items():
        x = torch.randn(n, cin, h, w, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        conv = nn.Conv2d(cin, cout, k, stride, pad, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):  # cuDNN's plans built, the allocator warm
            y = conv(x)
            y.backward(torch.ones_like(y))
        y, fk = call_kernels(lambda: conv(x))
        g = torch.ones_like(y)
        _, bk = call_kernels(lambda: y.backward(g))
        rows.append({"cin": cin, "cout": cout, "k": k, "stride": stride, "n": n, "h": h, "w": w,
                     "calls": calls, "fwd": summarize(fk), "bwd": summarize(bk),
                     "kernels": {"fwd": [short(nm) for nm, _ in fk], "bwd": [short(nm) for nm, _ in bk]}})
        print(json.dumps({k2: v for k2, v in rows[-1].items() if k2 != "kernels"}))
        del x, conv, y, g
    rec = {"name": f"sdxl-convs-r{a.res}-b{a.batch}", "res": a.res, "batch": a.batch, "convs": rows,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name()}
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")


def main():
    def args(ap):
        ap.add_argument("--res", type=int, default=1024)
        ap.add_argument("--batch", type=int, default=1)
    measure_or_write(__doc__, measure, write_lua, args)


if __name__ == "__main__":
    main()
