"""Where the SDXL UNet's forward and optimizer spend the host's time, call by call: the Python of
the module calls and forward bodies against the C calls that dispatch and launch the ops.

vrsim prices a host-bound step from per-op classes timed on chains of leaf modules
(measure_host_classes.py); on the H100 hosts the UNet's forward issues 22-35 % slower than those
classes add up to, and its optimizer about twice as slow (docs/step-time.md, "The host's time by
phase"), while the backward is within 15 %. This script looks inside both phases on the GPU's host:

  phases      each phase's host time, median of --reps steady steps (no profiler), as
              measure_sdxl_steps.py times them
  forward     cProfile over --profile-reps forwards: per function its calls and own time (tottime),
              grouped into module machinery (torch/nn/modules/module.py), the model's forward
              bodies (sdxl_unet.py), torch's other Python (nn.Linear.forward, F.layer_norm, ...), and
              C calls (the op bindings: dispatch, autograd recording, launch); the profiled forward's
              own time beside the unprofiled one says how much the profiler added
  optimizer   the same for AdamW(foreach).step() and zero_grad
  micro       the host's unprofiled cost of the pieces the forward repeats: an empty module call,
              a submodule lookup through nn.Module.__getattr__, a plain Python call, and
              Dropout(0.0) (the UNet's 210 no-op dropouts)
  classes     measure_host_classes.py's chains on this host (measure_sdxl_steps.class_bench), so
              that the real model's per-call C time can be set beside the chain figures vrsim uses

  python3 validation/harness/profile_sdxl_host_calls.py --res 512 --batch 1 --out $OUT/host_calls.json
  python3 validation/harness/profile_sdxl_host_calls.py --cpu-check --out /tmp/hc.json  # a tiny UNet on the CPU
"""
import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdxl_unet import CONFIG, SDXLUNet  # noqa: E402

TINY = dict(CONFIG, block_out=(32, 64, 64), heads=(1, 2, 2), temb=64, time_proj=32, add_time_proj=8,
            add_in=64 + 6 * 8, cross=32)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def build(a, dev):
    cfg = TINY if a.cpu_check else CONFIG
    dtype = torch.float32 if a.cpu_check else torch.bfloat16
    torch.manual_seed(0)
    with torch.device(dev):
        torch.set_default_dtype(dtype)
        model = SDXLUNet(cfg)
        torch.set_default_dtype(torch.float32)
    if a.ckpt:
        model.enable_gradient_checkpointing()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    lat, b = a.res // 8, a.batch
    inp = dict(sample=torch.randn(b, 4, lat, lat, device=dev, dtype=dtype),
               context=torch.randn(b, 77, cfg["cross"], device=dev, dtype=dtype),
               text_embeds=torch.randn(b, cfg["add_in"] - 6 * cfg["add_time_proj"], device=dev, dtype=dtype),
               time_ids=torch.randn(b, 6, device=dev, dtype=dtype))
    target = torch.randn(b, 4, lat, lat, device=dev, dtype=dtype)

    def fwd():
        ts = torch.randint(0, 1000, (b,), device=dev)
        pred = model(inp["sample"], ts, inp["context"], inp["text_embeds"], inp["time_ids"])
        return F.mse_loss(pred.float(), target.float())

    def optim():
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, fwd, optim


def phase_times(dev, fwd, optim, reps):
    """Median host ms of each phase over `reps` steady steps (a synchronized device before each)."""
    got = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        loss = fwd()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optim()
        t3 = time.perf_counter()
        sync(dev)
        for k, d in zip(got, (t1 - t0, t2 - t1, t3 - t2)):
            got[k].append(d * 1e3)
    return {k: {"median_ms": round(statistics.median(v), 3), "min_ms": round(min(v), 3),
                "max_ms": round(max(v), 3)} for k, v in got.items()}


def group_of(key):
    """The group a pstats function key belongs to: C calls, nn.Module's machinery, the model's
    forward bodies (sdxl_unet.py, diffusers, peft), a compiled block's layers (dynamo's guards and
    frame evaluation, AOTAutograd's runtime wrappers, Inductor's runtime and its generated code),
    torch's other Python, the rest."""
    filename, _, name = key
    if filename == "~":
        return "c_calls"
    f = filename.replace("\\", "/")
    if f.endswith("torch/nn/modules/module.py"):
        return "module_machinery"
    if f.endswith("sdxl_unet.py") or "/diffusers/" in f or "/peft/" in f:
        return "forward_bodies"
    if "/torch/_dynamo/" in f or "/torch/_guards" in f:
        return "dynamo"
    if "/torch/_functorch/" in f:
        return "aot_autograd"
    if "/torch/_inductor/" in f:
        return "inductor_runtime"
    if "torchinductor" in f:
        return "inductor_generated"
    if "/torch/" in f:
        return "torch_python"
    return "other_python"


class Empty(nn.Module):
    def forward(self, x):
        return x


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = Empty()


def per_call_us(fn, n=20000, reps=7):
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
    return round(statistics.median(best), 4)


def micro(dev):
    """Unprofiled host costs of the pieces a forward repeats, in us a call."""
    x = torch.randn(8, 8, device=dev, requires_grad=True)
    y = x * 1
    e, h, d = Empty(), Holder(), nn.Dropout(0.0).train()

    def plain(v):
        return v
    return {"python_call_us": per_call_us(lambda: plain(y)),
            "empty_module_call_us": per_call_us(lambda: e(y)),
            "submodule_getattr_us": per_call_us(lambda: h.sub),
            "dropout_p0_module_us": per_call_us(lambda: d(y)),
            "tensor_shape_us": per_call_us(lambda: y.shape[-1]),
            "to_same_dtype_us": per_call_us(lambda: y.to(y.dtype)),
            "loop_overhead_us": per_call_us(lambda: None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--res", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30, help="steady steps timed without the profiler")
    ap.add_argument("--profile-reps", type=int, default=5)
    ap.add_argument("--top", type=int, default=60)
    ap.add_argument("--class-reps", type=int, default=3, help="repeats of the host class chains (0: none)")
    ap.add_argument("--cpu-check", action="store_true", help="a tiny UNet on the CPU (checks the script)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.res % 8 or a.res <= 0 or a.batch <= 0:
        ap.error("--res must be a positive multiple of 8 and --batch positive")
    if not a.cpu_check and not torch.cuda.is_available():
        sys.exit("profile_sdxl_host_calls: no CUDA device (--cpu-check runs a tiny UNet on the CPU)")
    dev = torch.device("cpu" if a.cpu_check else "cuda")
    if a.cpu_check:
        a.res, a.reps, a.profile_reps = min(a.res, 64), min(a.reps, 3), min(a.profile_reps, 2)
    model, fwd, optim = build(a, dev)
    for _ in range(a.warmup):
        fwd().backward()
        optim()
    sync(dev)
    rec = {"res": a.res, "batch": a.batch, "ckpt": a.ckpt, "cpu_check": a.cpu_check,
           "phases": phase_times(dev, fwd, optim, a.reps)}

    # the forward alone under the profiler; its backward and step run unprofiled between reps
    prof = cProfile.Profile()
    t_fwd = []
    for _ in range(a.profile_reps):
        sync(dev)
        t0 = time.perf_counter()
        prof.enable()
        loss = fwd()
        prof.disable()
        t_fwd.append((time.perf_counter() - t0) * 1e3)
        loss.backward()
        optim()
    rec["forward"] = summarize(prof, a.profile_reps, a.top, t_fwd)
    prof = cProfile.Profile()
    t_opt = []
    for _ in range(a.profile_reps):
        fwd().backward()
        sync(dev)
        t0 = time.perf_counter()
        prof.enable()
        optim()
        prof.disable()
        t_opt.append((time.perf_counter() - t0) * 1e3)
    rec["optimizer"] = summarize(prof, a.profile_reps, a.top, t_opt)
    n_mod = sum(1 for _ in model.modules())
    n_leaf = sum(1 for m in model.modules() if not any(True for _ in m.children()))
    rec["modules"] = {"all": n_mod, "leaf": n_leaf}
    rec["micro"] = micro(dev)
    if a.class_reps > 0 and not a.cpu_check:
        from measure_sdxl_steps import class_bench
        rec["classes"] = class_bench(dev, a.class_reps)
    rec.update({"python": platform.python_version(), "torch": torch.__version__,
                "gpu": "cpu (check)" if a.cpu_check else torch.cuda.get_device_name(),
                "date": time.strftime("%Y-%m-%d")})
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    fw = rec["forward"]
    print("forward: unprofiled %.1f ms, profiled %.1f ms; own ms by group: %s" % (
        rec["phases"]["forward"]["median_ms"], fw["profiled_wall_ms"],
        ", ".join("%s %.1f (%d calls)" % (k, v["own_ms"], v["calls"]) for k, v in sorted(fw["groups"].items()))),
        file=sys.stderr)
    op = rec["optimizer"]
    print("optimizer: unprofiled %.1f ms, profiled %.1f ms; own ms by group: %s" % (
        rec["phases"]["optimizer"]["median_ms"], op["profiled_wall_ms"],
        ", ".join("%s %.1f (%d calls)" % (k, v["own_ms"], v["calls"]) for k, v in sorted(op["groups"].items()))),
        file=sys.stderr)


def summarize(prof, reps, top, walls):
    """profile()'s summary of a cProfile run already made, `walls` its calls' wall ms."""
    st = pstats.Stats(prof)
    groups, rows = {}, []
    for key, (cc, nc, tt, ct, _) in st.stats.items():
        g = group_of(key)
        e = groups.setdefault(g, {"calls": 0, "own_ms": 0.0})
        e["calls"] += nc / reps
        e["own_ms"] += tt * 1e3 / reps
        rows.append({"function": key[2] if key[0] == "~" else "%s:%d(%s)" % (os.path.basename(key[0]), key[1], key[2]),
                     "group": g, "calls": round(nc / reps, 2),
                     "own_us_per_call": round(tt * 1e6 / nc, 3) if nc else None,
                     "own_ms": round(tt * 1e3 / reps, 4), "cum_ms": round(ct * 1e3 / reps, 4)})
    rows.sort(key=lambda r: -r["own_ms"])
    for e in groups.values():
        e["calls"], e["own_ms"] = round(e["calls"], 1), round(e["own_ms"], 3)
    return {"profiled_wall_ms": round(statistics.median(walls), 3), "groups": groups, "top": rows[:top],
            "c_calls": [r for r in rows if r["group"] == "c_calls"]}


if __name__ == "__main__":
    main()
