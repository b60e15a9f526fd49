"""SDXL UNet GPU time by kernel class, measured against vrsim, for docs/step-time.md's table.

Measured: profile_sdxl_kernels.py's kernels (torch.profiler, each kernel's own time, summed over
forward, backward and optimizer). vrsim: the steady step of its trace.json for the same run
(plain UNet, bf16, AdamW foreach), each op's time less the stream's gap between its kernels
(kernels x kernel_gap_us of h200_kernel_gap.lua), so both columns count kernel time alone.
cuDNN's layout transforms are priced inside vrsim's convolution ops, so both sides count them
with the convolutions. No GPU; runs ./vrsim.

  python3 validation/harness/sdxl_kernel_classes.py [--kernels validation/results/kernels_sdxl_h200.jsonl]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import tempfile

CLASSES = ("GEMM", "fused attention", "convolution and layout transforms", "group and layer norm",
           "elementwise, reductions, copies", "optimizer (foreach AdamW)")


def kernel_class(name):
    if re.search(r"multi_tensor_apply", name):
        return CLASSES[5]
    if re.search(r"sdpa|flash|fmha|compute_dot_do_o|convert_dq", name):
        return CLASSES[1]
    if re.search(r"nchwToNhwc|nhwcToNchw|tensorTransformGeneric|fprop|dgrad|wgrad|conv", name, re.I):
        return CLASSES[2]
    if re.search(r"nvjet|gemm|cutlass", name, re.I):
        return CLASSES[0]
    if re.search(r"[Nn]orm|RowwiseMoments|ComputeInternalGradients|GammaBeta|ComputeFusedParams", name):
        return CLASSES[3]
    return CLASSES[4]


def op_class(kind):
    if kind == "mm":
        return CLASSES[0]
    if kind.startswith("attention"):
        return CLASSES[1]
    if kind == "conv":
        return CLASSES[2]
    if kind.startswith("norm"):
        return CLASSES[3]
    if kind.startswith("foreach"):
        return CLASSES[5]
    return CLASSES[4]


def measured(path, name):
    for line in open(path):
        r = json.loads(line)
        if r["name"] == name:
            out = collections.Counter()
            for ks in r["kernels"].values():
                for kname, v in ks.items():
                    out[kernel_class(kname)] += v["ms"]
            return out
    raise SystemExit("no record %s in %s" % (name, path))


def simulated(vrsim, res, batch, ckpt, gap_us):
    scn = ('return { title = "sdxl", hardware = { gpu = "h200" }, model = { arch = "sdxl", variant = '
           '"sdxl-base-unet" }, training = { micro_batch = %d, resolution = %d, precision = "bf16", '
           'optimizer = "adamw", optimizer_impl = "foreach", checkpointing = %s, attention = "sdpa", '
           'steps = 3 } }' % (batch, res, "true" if ckpt else "false"))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.lua")
        with open(path, "w") as f:
            f.write(scn)
        subprocess.run([vrsim, path, "--out", os.path.join(d, "out"), "--no-suggest"], check=True,
                       stdout=subprocess.DEVNULL)
        ev = [e for e in json.load(open(os.path.join(d, "out", "trace.json")))["traceEvents"]
              if e.get("ph") == "X"]
    last = max(e["args"]["step"] for e in ev)
    out = collections.Counter()
    for e in ev:
        if e["args"]["step"] == last and e["tid"] == 0:
            ms = max(0.0, e["dur"] - e["args"].get("kernels", 1) * gap_us) / 1e3
            out[op_class(e["args"].get("kind", ""))] += ms
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="validation/results/kernels_sdxl_h200.jsonl")
    ap.add_argument("--vrsim", default="./vrsim")
    ap.add_argument("--gap-us", type=float, default=1.665, help="h200_kernel_gap.lua's kernel_gap_us")
    a = ap.parse_args()
    runs = [("1024 px ckpt, b1", "sdxl-r1024-b1-bf16-ckpt", 1024, 1, True),
            ("1024 px ckpt, b4", "sdxl-r1024-b4-bf16-ckpt", 1024, 4, True),
            ("512 px, b1", "sdxl-r512-b1-bf16", 512, 1, False),
            ("512 px, b4", "sdxl-r512-b4-bf16", 512, 4, False)]
    cols = [(label, measured(a.kernels, name), simulated(a.vrsim, res, b, ck, a.gap_us))
            for label, name, res, b, ck in runs]
    print("| class | " + " | ".join(c[0] for c in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for cl in CLASSES + ("total",):
        cells = []
        for _, m, s in cols:
            mv = sum(m.values()) if cl == "total" else m[cl]
            sv = sum(s.values()) if cl == "total" else s[cl]
            cells.append("%.1f / %.1f" % (mv, sv))
        print("| %s | %s |" % (cl, " | ".join(cells)))


if __name__ == "__main__":
    main()
