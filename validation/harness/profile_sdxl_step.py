"""Where an SDXL UNet training step's time goes on the host and on the GPU, measured with the
plain-PyTorch UNet of sdxl_unet.py and the step of validation/records/sdxl_h200.jsonl (MSE on random
latents, AdamW foreach lr 1e-5, bf16 parameters or fp32 under bf16 autocast, optional
checkpointing). One JSON line per configuration:

  steps_gpu_ms      CUDA-event time of each of the steps (compare with the truth's gpu_ms)
  steps_peak_alloc_reserved_mib
                    each step's peak allocated and reserved MiB (peak stats reset per step)
  host_ms           per phase (forward, backward, optimizer) of a steady step: the time the
                    Python thread spends issuing the phase, without a synchronisation inside the
                    step (the GPU may finish later)
  phase_gpu_ms      per phase, synchronised at each phase's end (what each phase costs alone)
  kernels           per phase, from torch.profiler: the CUDA kernels (and memcpy/memset) launched
  busy_ms           per phase: the summed kernel time
  top_ops           per phase, per top-level op (an aten call from Python, an autograd node):
                    count, kernels launched under it, CPU time (profiled, so inflated)

  python3 validation/harness/profile_sdxl_step.py --res 1024 --mode bf16 --ckpt --out F.jsonl
"""
import argparse
import collections
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdxl_unet import SDXLUNet  # noqa: E402

PHASES = ("forward", "backward", "optimizer")


def build(a):
    dtype = torch.float32 if a.mode == "amp_bf16" else torch.bfloat16
    torch.manual_seed(0)
    with torch.device("cuda"):
        torch.set_default_dtype(dtype)
        model = SDXLUNet()
        torch.set_default_dtype(torch.float32)
    if a.ckpt:
        model.enable_gradient_checkpointing()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    lat = a.res // 8
    b = a.batch
    inp = dict(sample=torch.randn(b, 4, lat, lat, device="cuda", dtype=dtype),
               context=torch.randn(b, 77, 2048, device="cuda", dtype=dtype),
               text_embeds=torch.randn(b, 1280, device="cuda", dtype=dtype),
               time_ids=torch.randn(b, 6, device="cuda", dtype=dtype))
    target = torch.randn(b, 4, lat, lat, device="cuda", dtype=dtype)
    return model, opt, inp, target, dtype


def phases(a, model, opt, inp, target):
    """The three phases of a step as closures (the forward returns the loss)."""
    def fwd():
        ts = torch.randint(0, 1000, (a.batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.mode == "amp_bf16"):
            pred = model(inp["sample"], ts, inp["context"], inp["text_embeds"], inp["time_ids"])
        return F.mse_loss(pred.float(), target.float())

    def bwd(loss):
        loss.backward()

    def optim():
        opt.step()
        opt.zero_grad(set_to_none=True)
    return fwd, bwd, optim


def timed_step(fwd, bwd, optim):
    """One step, from a synchronized device: its GPU milliseconds (events around it), the host's
    milliseconds in each phase, and how long the host then waited for the device (wait_ms)."""
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    t0 = time.perf_counter(); loss = fwd()
    t1 = time.perf_counter(); bwd(loss)
    t2 = time.perf_counter(); optim()
    t3 = time.perf_counter()
    e.record()
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    return {"gpu_ms": round(s.elapsed_time(e), 3),
            "host_ms": {p: round(d * 1e3, 3) for p, d in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2))},
            "wait_ms": round((t4 - t3) * 1e3, 3)}


def subtree_kernels(e):
    return len(e.kernels) + sum(subtree_kernels(c) for c in e.cpu_children)


def profiled_phase(fn, *args):
    """Kernels, their summed time and, per top-level op (an aten call from Python, an autograd
    node in backward): how many ran, the kernels under them and their CPU time."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        out = fn(*args)
        torch.cuda.synchronize()
    kernels, busy = 0, 0.0
    table = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
            busy += getattr(e, "device_time_total", 0.0) / 1e3
        elif e.cpu_parent is None and (e.name.startswith("aten::") or e.name.startswith("autograd::")):
            row = table.setdefault(e.name, [0, 0, 0.0])
            row[0] += 1
            row[1] += subtree_kernels(e)
            row[2] += e.cpu_time_total
    ops = {k: {"count": v[0], "kernels": v[1], "cpu_us": round(v[2], 1)}
           for k, v in sorted(table.items(), key=lambda kv: -kv[1][1])}
    return out, kernels, busy, ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mode", default="bf16", choices=["bf16", "amp_bf16"])
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--name", default="")
    ap.add_argument("--gc", default="on", choices=["on", "off"],
                    help="off: gc.disable() before the steps (is the Python collector in the step time?)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.gc == "off":
        import gc
        gc.disable()
    model, opt, inp, target, dtype = build(a)
    n_params = sum(p.numel() for p in model.parameters())
    fwd, bwd, optim = phases(a, model, opt, inp, target)
    steps, peaks = [], []
    for _ in range(a.steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        s.record()
        loss = fwd(); bwd(loss); optim()
        e.record()
        torch.cuda.synchronize()
        steps.append(round(s.elapsed_time(e), 3))
        peaks.append((round(torch.cuda.max_memory_allocated() / 2**20, 3),
                      round(torch.cuda.max_memory_reserved() / 2**20, 3)))
        del loss
    # host time per phase, no synchronisation inside the step (best of three)
    host = {p: float("inf") for p in PHASES}
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter(); loss = fwd()
        t1 = time.perf_counter(); bwd(loss)
        t2 = time.perf_counter(); optim()
        t3 = time.perf_counter()
        torch.cuda.synchronize()
        for p, d in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2)):
            host[p] = min(host[p], d * 1e3)
        del loss
    # each phase alone, synchronised at its end
    gpu = {}
    torch.cuda.synchronize()
    t0 = time.perf_counter(); loss = fwd(); torch.cuda.synchronize()
    t1 = time.perf_counter(); bwd(loss); torch.cuda.synchronize()
    t2 = time.perf_counter(); optim(); torch.cuda.synchronize()
    t3 = time.perf_counter()
    gpu = dict(zip(PHASES, (round((t1 - t0) * 1e3, 3), round((t2 - t1) * 1e3, 3), round((t3 - t2) * 1e3, 3))))
    del loss
    kernels, busy, ops = {}, {}, {}
    loss, kernels["forward"], busy["forward"], ops["forward"] = profiled_phase(fwd)
    _, kernels["backward"], busy["backward"], ops["backward"] = profiled_phase(bwd, loss)
    _, kernels["optimizer"], busy["optimizer"], ops["optimizer"] = profiled_phase(optim)
    rec = {"name": a.name or f"sdxl-r{a.res}-b{a.batch}-{a.mode}{'-ckpt' if a.ckpt else ''}{'-gcoff' if a.gc == 'off' else ''}",
           "res": a.res, "batch": a.batch, "mode": a.mode, "ckpt": a.ckpt, "n_params": n_params,
           "steps_gpu_ms": steps, "steps_peak_alloc_reserved_mib": peaks, "host_ms": {k: round(v, 3) for k, v in host.items()},
           "phase_gpu_ms": gpu, "kernels": kernels,
           "busy_ms": {k: round(v, 3) for k, v in busy.items()},
           "top_ops": ops, "gc": a.gc,
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k != "top_ops"}))


if __name__ == "__main__":
    main()
