"""SDXL UNet step time as a steady median, with the host's own dispatch speed recorded beside it.

A single step of a host-bound SDXL run says as much about the host as about the model: lent H200
hosts ran the same UNet step at 201-250 ms and at 313 ms (docs/step-time.md). This harness times
the step of validation/records/sdxl_h200.jsonl (the plain-PyTorch UNet of sdxl_unet.py, MSE on
random latents, AdamW foreach, profile_sdxl_step.py's build and phases) for --warmup steps, then
--steps (30 or more) steady ones, each from a synchronized device with CUDA events (as
profile_sdxl_step.timed_step does), and writes one JSON line:

  steps          every steady step's gpu_ms, the host's wall_ms of issuing it, and host_ms: that
                 wall time by phase (forward, backward, optimizer with zero_grad), each from the
                 end of the one before, no synchronisation inside the step
  median_ms, min_ms, max_ms, p10_ms, p90_ms, iqr_ms
                 of the steady steps' gpu_ms (the spread says whether the host drifted)
  median_host_ms the median of each phase's host_ms: where a host that issues the step slower than
                 its class chains say spends the difference (the chains time forward ops and
                 backward nodes; the optimizer's figures are per tensor, on tiny tensors)
  host_bench     the host's dispatch benchmark, before and after the steps: a tight loop of tiny
                 ops (64x64, so the device never limits), median us per op of --bench-reps runs,
                 the loops of measure_dispatch.py (eager_linear_us, eager_inplace_add_us)
  host_dispatch_scale
                 the bench's eager_linear_us (mean of before and after) over the calibration
                 host's (lua/hw/calibrated/h200_torch.lua, 24.552 us): vrsim's
                 hardware.host_dispatch_scale for this run's host
  host_class_bench
                 after the steps (with --class-every K, one repeat before the steady steps and
                 one after every K of them instead), the UNet's host op classes timed as measure_host_classes.py
                 times them (chains of its ops with autograd, forward and backward node, median
                 of --class-reps interleaved repeats), each beside the committed figure of
                 h200_torch.lua's host_class_us, and `scale`: their summed fwd + bwd over the
                 committed sum. A tight F.linear loop leaves out the module calls and autograd
                 the UNet's ops carry; on the first H100 host it said 0.556 while the UNet's own
                 issue time was 0.776 of vrsim's calibration host (docs/step-time.md); `rounds`
                 the ratio of each repeat in the order they ran, `every` K where interleaved
  cpu, torch, gpu, date, and the configuration

  python3 validation/harness/measure_sdxl_steps.py --res 1024 --batch 1 --ckpt --out F.jsonl

--dry-run runs the same protocol on the CPU with a small stand-in model (a few convolutions,
GroupNorms and Linears, not the UNet) so the harness itself can be checked without a GPU; its
figures say nothing about SDXL.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# lua/hw/calibrated/h200_torch.lua eager_linear_us: the calibration host's figure for the same loop
CALIBRATION_EAGER_LINEAR_US = 24.552


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def host_bench(dev, n_ops, reps):
    """Median us per op of tight loops of tiny ops (measure_dispatch.py's eager loops)."""
    x = torch.randn(64, 64, device=dev)
    w = torch.randn(64, 64, device=dev)

    def linear():
        for _ in range(n_ops):
            F.linear(x, w)

    def add():
        for _ in range(n_ops):
            x.add_(1.0)

    out = {}
    for name, fn in (("eager_linear_us", linear), ("eager_inplace_add_us", add)):
        fn()  # warm-up
        times = []
        for _ in range(reps):
            sync(dev)
            t0 = time.perf_counter()
            fn()
            sync(dev)
            times.append((time.perf_counter() - t0) / n_ops * 1e6)
        out[name] = round(statistics.median(times), 3)
    return out


# lua/hw/calibrated/h200_torch.lua host_class_us (fwd, bwd) of the classes the UNet's ops take,
# by measure_host_classes.py's chain names (activation: F.silu's chain). vrsim validate reads the
# measured figures of each (lua/vrsim/record.lua); at the calibration host's figures the plain
# 1024 px UNet issues 47 ms of its 209 ms through linear_nobias (the attention's bias-free
# projections), 47 through linear, 19 layer_norm, 16 sdpa, 9 conv, 7 group_norm, 5 add, 4
# activation; cast: autocast's casts, which the amp runs add; cast and view as the chains run
# them, two ops a link: x.to(torch.float32).to(torch.bfloat16), twice the class `cast` (14.4 /
# 17.8 us a cast), and x.view(4096).view(64, 64), twice the class `view` that prices each of the
# UNet's 2,690 view ops (lua/vrsim/record.lua halves both)
CALIBRATION_CLASS_US = {"linear": (34.7, 112.0), "linear_nobias": (32.9, 81.1), "conv": (62.8, 113.8),
                        "group_norm": (50.2, 105.8), "layer_norm": (28.1, 62.4), "sdpa": (35.2, 76.9),
                        "silu": (12.8, 18.8), "add": (12.8, 5.6), "cast": (28.8, 35.6),
                        "view": (6.52, 12.52)}


def class_samples(dev, reps, into=None):
    """The UNet's host op classes on this host (measure_host_classes.py's chains), `reps`
    interleaved repeats appended to `into` (made on the first call): per class its forward and
    backward samples in s per op, and the empty chain's backward."""
    import measure_host_classes as mhc
    mhc.DEV = dev.type
    if dev.type != "cuda":  # --dry-run: the same chains on the CPU
        torch.cuda.synchronize = lambda: None
    if into is None:
        torch.manual_seed(0)
        classes = {k: v for k, v in mhc.make_classes().items() if k in CALIBRATION_CLASS_US}
        for make, ops, ac in classes.values():
            mhc.time_chain(make, ops, mhc.N, ac)  # warm-up
        into = {"classes": classes, "base": [], "samples": {k: ([], []) for k in classes}, "rounds": []}
    classes = into["classes"]
    for _ in range(reps):
        into["base"].append(mhc.time_chain(classes["add"][0], [], 0)[1] / mhc.N)
        got = 0.0
        for k, (make, ops, ac) in classes.items():
            f, b = mhc.time_chain(make, ops, mhc.N, ac)
            into["samples"][k][0].append(f / mhc.N)
            into["samples"][k][1].append(b / mhc.N)
            got += (f + b) / mhc.N * 1e6
        into["rounds"].append(round(got / sum(sum(CALIBRATION_CLASS_US[k]) for k in classes), 4))
    return into


def class_summary(got_samples):
    """Each class's median forward and backward (less the empty chain's backward) beside the
    committed figure, and the ratio of their sums: a host scale measured on the ops the model
    runs. `rounds`: that ratio of each repeat, in the order they ran."""
    import measure_host_classes as mhc
    b0 = statistics.median(got_samples["base"])
    out, got, ref = {}, 0.0, 0.0
    for k, (fs, bs) in got_samples["samples"].items():
        f, b = statistics.median(fs) * 1e6, statistics.median(bs) * 1e6 - b0 * 1e6
        out[k] = {"fwd_us": round(f, 3), "bwd_us": round(b, 3),
                  "committed_fwd_us": CALIBRATION_CLASS_US[k][0], "committed_bwd_us": CALIBRATION_CLASS_US[k][1]}
        got += f + b
        ref += sum(CALIBRATION_CLASS_US[k])
    return {"classes": out, "n": mhc.N, "reps": len(got_samples["base"]), "scale": round(got / ref, 4),
            "rounds": got_samples["rounds"]}


def class_bench(dev, reps):
    """The UNet's host op classes on this host, `reps` interleaved repeats at once (class_summary)."""
    return class_summary(class_samples(dev, reps))


# the calibration host's AdamW(foreach) bf16 per-tensor host work, step and zero_grad (us,
# lua/hw/calibrated/h200_torch.lua optim_step_tensor_us.foreach.bf16, zero_grad_tensor_us)
CALIBRATION_OPTIM_US = (9.554, 0.242)


def optim_bench(dev):
    """The optimizer's host work per parameter tensor on this host, as measure_optim_host.py
    times it (AdamW foreach, bf16, 64..2048 tiny tensors): vrsim's hardware.host_optim. The
    optimizer's per-tensor loop is Python (grouping, the step counters' .item(), the bias
    corrections, each _foreach_ op's checks) that the class chains' ratio need not carry (on one
    H100 host the chains said 0.72 of the calibration host and this loop 1.67)."""
    from measure_optim_host import per_tensor_us
    counts = (16, 32) if dev.type != "cuda" else (64, 256, 1024, 2048)
    step, zero = per_tensor_us(dev=dev.type, counts=counts)
    return {"step_tensor_us": step, "zero_grad_tensor_us": zero, "impl": "foreach", "dtype": "bf16",
            "committed_step_tensor_us": CALIBRATION_OPTIM_US[0],
            "committed_zero_grad_tensor_us": CALIBRATION_OPTIM_US[1]}


def host_fields(dev, bench_ops=5000, bench_reps=7, class_reps=5):
    """The record fields that state the run's host (as main() writes them, the bench taken once,
    after the steps): host_bench, host_dispatch_scale and host_class_bench. For the other
    harnesses' plan field `host_bench` (measure_llama.py, measure_diffusers.py), so that a
    host-bound run says how fast its host issued the ops."""
    bench = host_bench(dev, bench_ops, bench_reps)
    return {"host_bench": {"after": bench, "ops": bench_ops, "reps": bench_reps},
            "host_dispatch_scale": round(bench["eager_linear_us"] / CALIBRATION_EAGER_LINEAR_US, 4),
            "host_class_bench": class_bench(dev, class_reps) if class_reps > 0 else None}


class StandIn(nn.Module):
    """--dry-run's model: the UNet's kinds of ops at toy size (no relation to its time)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 32, 3, padding=1)
        self.norm = nn.GroupNorm(8, 32)
        self.conv2 = nn.Conv2d(32, 4, 3, padding=1)
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        h = F.silu(self.norm(self.conv1(x)))
        b, c, hh, ww = h.shape
        t = self.proj(h.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(b, c, hh, ww)
        return self.conv2(h + t)


def dry_run_phases(a):
    dev = torch.device("cpu")
    torch.manual_seed(0)
    model = StandIn().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    lat = max(a.res // 8, 8)
    x = torch.randn(a.batch, 4, lat, lat)
    target = torch.randn_like(x)

    def fwd():
        return F.mse_loss(model(x), target)

    def bwd(loss):
        loss.backward()

    def optim():
        opt.step()
        opt.zero_grad(set_to_none=True)
    return fwd, bwd, optim


def timed_step(dev, fwd, bwd, optim):
    """One step from a synchronized device: device ms (CUDA events; on the CPU the wall time), the
    host's ms of issuing it, and that by phase."""
    sync(dev)
    if dev.type == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
    t0 = time.perf_counter()
    loss = fwd()
    tf = time.perf_counter()
    bwd(loss)
    tb = time.perf_counter()
    optim()
    t1 = time.perf_counter()
    if dev.type == "cuda":
        e.record()
    sync(dev)
    t2 = time.perf_counter()
    gpu_ms = s.elapsed_time(e) if dev.type == "cuda" else (t2 - t0) * 1e3
    return {"gpu_ms": round(gpu_ms, 3), "wall_ms": round((t1 - t0) * 1e3, 3),
            "host_ms": {p: round(d * 1e3, 3) for p, d in zip(PHASES, (tf - t0, tb - tf, t1 - tb))}}


# the phases of host_ms, in the order a step runs them
PHASES = ("forward", "backward", "optimizer")


def spread(values):
    v = sorted(values)
    q = statistics.quantiles(v, n=10) if len(v) >= 2 else [v[0]] * 9
    q4 = statistics.quantiles(v, n=4) if len(v) >= 2 else [v[0]] * 3
    return {"median_ms": round(statistics.median(v), 3), "min_ms": v[0], "max_ms": v[-1],
            "p10_ms": round(q[0], 3), "p90_ms": round(q[-1], 3), "iqr_ms": round(q4[2] - q4[0], 3)}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--res", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mode", choices=("bf16", "amp_bf16"), default="bf16")
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--warmup", type=int, default=3, help="steps not counted (optimizer state, cuDNN plans)")
    ap.add_argument("--steps", type=int, default=40, help="steady steps timed (30 or more)")
    ap.add_argument("--bench-ops", type=int, default=5000)
    ap.add_argument("--bench-reps", type=int, default=7)
    ap.add_argument("--class-reps", type=int, default=5, help="repeats of the host class chains (0: none)")
    ap.add_argument("--class-every", type=int, default=0,
                    help="K > 0: one repeat of the class chains after every K steady steps (and one "
                         "before them) instead of --class-reps after them all, so the chains sample "
                         "the host over the same minutes as the steps")
    ap.add_argument("--optim-bench", action="store_true",
                    help="time the optimizer's per-tensor host work after the steps (host_optim_bench)")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU with a stand-in model")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.steps < (2 if a.dry_run else 30):
        ap.error("--steps %d: a steady median needs 30 or more steps" % a.steps)
    if a.res % 8 or a.res <= 0 or a.batch <= 0 or a.warmup < 0:
        ap.error("--res must be a positive multiple of 8, --batch positive, --warmup not negative")
    if not a.dry_run and not torch.cuda.is_available():
        sys.exit("measure_sdxl_steps: no CUDA device (use --dry-run to check the harness on the CPU)")
    dev = torch.device("cpu" if a.dry_run else "cuda")

    before = host_bench(dev, a.bench_ops, a.bench_reps)
    if a.dry_run:
        run = dry_run_phases(a)
    else:
        from profile_sdxl_step import build, phases
        model, opt, inp, target, _ = build(a)
        run = phases(a, model, opt, inp, target)
    for _ in range(a.warmup):
        timed_step(dev, *run)
    if a.class_every > 0:
        # the chains between the steps: a step right after a repeat is timed like any other
        samples = class_samples(dev, 1)
        steps = []
        for i in range(a.steps):
            steps.append(timed_step(dev, *run))
            if (i + 1) % a.class_every == 0:
                class_samples(dev, 1, samples)
        classes = class_summary(samples)
        classes["every"] = a.class_every
    else:
        steps = [timed_step(dev, *run) for _ in range(a.steps)]
    after = host_bench(dev, a.bench_ops, a.bench_reps)
    optim = optim_bench(dev) if a.optim_bench else None
    if a.class_every <= 0:
        classes = class_bench(dev, a.class_reps) if a.class_reps > 0 else None

    linear_us = (before["eager_linear_us"] + after["eager_linear_us"]) / 2
    rec = {"name": "steps-r%d-b%d_%s%s" % (a.res, a.batch, a.mode, "_ckpt" if a.ckpt else ""),
           "res": a.res, "batch": a.batch, "mode": a.mode, "ckpt": a.ckpt, "dry_run": a.dry_run,
           "warmup": a.warmup, "n_steps": a.steps, "steps": steps,
           **spread([s["gpu_ms"] for s in steps]),
           "median_wall_ms": round(statistics.median(s["wall_ms"] for s in steps), 3),
           "median_host_ms": {p: round(statistics.median(s["host_ms"][p] for s in steps), 3) for p in PHASES},
           "host_bench": {"before": before, "after": after, "ops": a.bench_ops, "reps": a.bench_reps},
           "host_dispatch_scale": None if a.dry_run else round(linear_us / CALIBRATION_EAGER_LINEAR_US, 4),
           "host_class_bench": classes,
           **({"host_optim_bench": optim} if optim else {}),
           "cpu": cpu_name(), "python": platform.python_version(), "torch": torch.__version__,
           "gpu": "cpu (dry run)" if a.dry_run else torch.cuda.get_device_name(),
           "date": time.strftime("%Y-%m-%d")}
    print("%s: median %.1f ms (p10 %.1f, p90 %.1f) over %d steps; host eager_linear %.2f -> %.2f us"
          % (rec["name"], rec["median_ms"], rec["p10_ms"], rec["p90_ms"], a.steps,
             before["eager_linear_us"], after["eager_linear_us"]), file=sys.stderr)
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
