"""Does an op's host time depend on its tensors' size, or on what runs around it? The host class
chains (measure_host_classes.py) time each class on tiny tensors (64 x 64, 32 x 8 x 8), one class at
a time; inside the SDXL UNet's forward the same ops' C calls take 1.3-2.4 times a chain's whole
figure (profile_sdxl_host_calls.py). This times three kinds of chain on the GPU's host, each op a
module of its own (400 a chain), forward and backward host us per op:

  tiny         the committed chains (measure_host_classes.make_classes)
  model        the same classes at the SDXL UNet's 512 px shapes (Linear 640 on 1 x 1024 x 640,
               Conv2d 320 and GroupNorm(32, 320) on 1 x 320 x 64 x 64, SDPA 1 x 10 x 1024 x 64, ...)
  interleaved  tiny ops of five classes in turn (linear, layer_norm, silu, linear_nobias, add), against
               the mean of the same five classes' own chains: what running among other code costs

  python3 validation/harness/measure_host_shapes.py --out $OUT/host_shapes.json
  python3 validation/harness/measure_host_shapes.py --cpu-check --out /tmp/hs.json
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_host_classes as mhc  # noqa: E402

BF = torch.bfloat16


def model_classes(dev, n, side=64):
    """The classes at the SDXL UNet's 512 px shapes (latents side x side): name -> (make_input, ops)."""
    seq = lambda: torch.randn(1, side * side // 4, 640, device=dev, dtype=BF, requires_grad=True)
    img = lambda: torch.randn(1, 320, side, side, device=dev, dtype=BF, requires_grad=True)
    heads = lambda: torch.randn(1, 10, side * side // 4, 64, device=dev, dtype=BF, requires_grad=True)
    per = lambda mk: [mk() for _ in range(n)]
    c = {}
    for name, mk in (("linear", lambda: nn.Linear(640, 640, device=dev, dtype=BF)),
                     ("linear_nobias", lambda: nn.Linear(640, 640, bias=False, device=dev, dtype=BF)),
                     ("layer_norm", lambda: nn.LayerNorm(640, device=dev, dtype=BF))):
        c[name] = (seq, [lambda x, m=m: m(x) for m in per(mk)])
    for name, mk in (("conv", lambda: nn.Conv2d(320, 320, 3, padding=1, device=dev, dtype=BF)),
                     ("group_norm", lambda: nn.GroupNorm(32, 320, eps=1e-5, device=dev, dtype=BF))):
        c[name] = (img, [lambda x, m=m: m(x) for m in per(mk)])
    c["silu"] = (img, [lambda x: F.silu(x)] * n)
    k = torch.randn(1, 320, side, side, device=dev, dtype=BF)
    c["add"] = (img, [lambda x: x + k] * n)
    c["sdpa"] = (heads, [lambda x: F.scaled_dot_product_attention(x, x, x)] * n)
    return c


def interleaved(tiny, names, n):
    """One chain of n ops taking the named tiny classes in turn (each op its own module)."""
    ops = [tiny[names[i % len(names)]][1][i] for i in range(n)]
    return tiny[names[0]][0], ops


def median_us(make, ops, n, reps):
    fs, bs = [], []
    for _ in range(reps):
        f, b = mhc.time_chain(make, ops, n)
        fs.append(f / n * 1e6)
        bs.append(b / n * 1e6)
    return {"fwd_us": round(statistics.median(fs), 3), "bwd_us": round(statistics.median(bs), 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpu-check", action="store_true", help="tiny counts on the CPU (checks the script)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not a.cpu_check and not torch.cuda.is_available():
        sys.exit("measure_host_shapes: no CUDA device (--cpu-check runs it on the CPU)")
    dev = "cpu" if a.cpu_check else "cuda"
    mhc.DEV = dev
    if a.cpu_check:
        torch.cuda.synchronize = lambda: None
        mhc.N, a.reps = 8, 1
    n = mhc.N
    torch.manual_seed(0)
    model = model_classes(dev, n, 4 if a.cpu_check else 64)
    mix = ("linear", "layer_norm", "silu", "linear_nobias", "add")
    tiny = {k: v[:2] for k, v in mhc.make_classes().items() if k in model}
    out = {"n": n, "reps": a.reps, "tiny": {}, "model": {}}
    for name, (make, ops) in list(tiny.items()) + list(model.items()):
        mhc.time_chain(make, ops, n)  # warm-up
    # interleave the kinds so that a drift of the host touches all of them alike
    for _ in range(a.reps):
        for name in model:
            for kind, table in (("tiny", tiny), ("model", model)):
                got = median_us(*table[name], n, 1)
                out[kind].setdefault(name, {"fwd": [], "bwd": []})
                out[kind][name]["fwd"].append(got["fwd_us"])
                out[kind][name]["bwd"].append(got["bwd_us"])
        got = median_us(*interleaved(tiny, mix, n), n, 1)
        out.setdefault("interleaved", {"classes": list(mix), "fwd": [], "bwd": []})
        out["interleaved"]["fwd"].append(got["fwd_us"])
        out["interleaved"]["bwd"].append(got["bwd_us"])
    for kind in ("tiny", "model"):
        for name, v in out[kind].items():
            out[kind][name] = {"fwd_us": round(statistics.median(v["fwd"]), 3),
                               "bwd_us": round(statistics.median(v["bwd"]), 3)}
    il = out["interleaved"]
    il["fwd_us"], il["bwd_us"] = round(statistics.median(il["fwd"]), 3), round(statistics.median(il["bwd"]), 3)
    il["own_chains_mean_fwd_us"] = round(statistics.mean(out["tiny"][k]["fwd_us"] for k in mix), 3)
    il["own_chains_mean_bwd_us"] = round(statistics.mean(out["tiny"][k]["bwd_us"] for k in mix), 3)
    out.update({"torch": torch.__version__, "gpu": "cpu (check)" if a.cpu_check else torch.cuda.get_device_name(),
                "date": time.strftime("%Y-%m-%d")})
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for name in model:
        t, m = out["tiny"][name], out["model"][name]
        print("%-14s tiny %6.1f / %6.1f us   model shapes %6.1f / %6.1f us   (fwd / bwd)" % (
            name, t["fwd_us"], t["bwd_us"], m["fwd_us"], m["bwd_us"]), file=sys.stderr)
    print("interleaved %s: %.1f / %.1f us an op; their own chains' mean %.1f / %.1f" % (
        "+".join(mix), il["fwd_us"], il["bwd_us"], il["own_chains_mean_fwd_us"], il["own_chains_mean_bwd_us"]),
        file=sys.stderr)


if __name__ == "__main__":
    main()
