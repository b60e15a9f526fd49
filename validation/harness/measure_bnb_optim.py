"""bitsandbytes' optimizer steps on one GPU, parameter by parameter, as Optimizer8bit.step runs them
(bitsandbytes 0.50.2, optim/optimizer.py): for each parameter with a .grad, prefetch_state (paged
states only: cudaMemPrefetchAsync of state1 and state2 through lib.cprefetch), update_step
(p.data.contiguous(), get_config, then one kernel through ctypes:
functional.optimizer_update_8bit_blockwise -> kOptimizer8bit2StateBlockwise, or
optimizer_update_32bit -> kOptimizer32bit2State), then sync_gpu(p), a torch.cuda.synchronize();
a paged optimizer synchronizes once more after the loop.

What it measures, each through the real optimizer classes on the real step:
  kernel rows  one parameter of `numel` elements (1e5..1e9) in bf16 or fp32, for AdamW8bit,
               PagedAdamW8bit, AdamW32bit and PagedAdamW32bit: the update kernel's own device
               time (torch.profiler, median of 5 update_step calls; kernel_us), and the wall time
               of a whole optimizer.step() on that one parameter (median of 5; step_us: host
               work, the prefetch, the kernel and the synchronize)
  param rows   the host's cost per parameter: step() and zero_grad(set_to_none=True) over N
               small parameters (N = 16..256), the slope of a least-squares line per parameter
               (step_param_us, zero_grad_param_us) and its intercept (step_us0), with the
               kernels' own time per parameter at that size (kernel_us) so that
               step_param_us - kernel_us is the host's part

Writes OUT/<key>_bnb_optim.lua (a calibrated table, lua/hw/calibrated/README.md; <key> the GPU's
catalog key, h100_sxm for an H100 SXM) and OUT/<key>_bnb_optim.jsonl (every row). Under 90 s on an
H100.

  python3 validation/harness/measure_bnb_optim.py        # writes under $OUT: <key>_bnb_optim.lua
  python3 validation/harness/measure_bnb_optim.py --cpu-check --out-dir /tmp/x   # no GPU: tiny sizes
                                                      on the CPU (bitsandbytes' CPU kernels), the
                                                      same code path and the table writer
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time
import warnings

T0 = time.perf_counter()  # the budget counts the imports too
import torch  # noqa: E402

warnings.filterwarnings("ignore")
import bitsandbytes as bnb  # noqa: E402

# the optimizers, by the name vrsim gives them (training.optimizer)
OPTIMS = {
    "adamw8bit": lambda ps: bnb.optim.AdamW8bit(ps, lr=1e-5),
    "paged_adamw_8bit": lambda ps: bnb.optim.PagedAdamW8bit(ps, lr=1e-5),
    "adamw32bit": lambda ps: bnb.optim.AdamW32bit(ps, lr=1e-5),
    "paged_adamw_32bit": lambda ps: bnb.optim.PagedAdamW32bit(ps, lr=1e-5),
}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# (optimizer, dtype) pairs of the kernel rows: the 8-bit step in both dtypes, the others in bf16
KERNEL_CASES = [("adamw8bit", "bf16"), ("adamw8bit", "fp32"), ("paged_adamw_8bit", "bf16"),
                ("adamw32bit", "bf16"), ("paged_adamw_32bit", "bf16")]
# lua/hw/gpus.lua's keys for the devices' names (lua/vrsim/record.lua RECORD_GPUS)
CATALOG = {"NVIDIA H100 80GB HBM3": "h100_sxm", "NVIDIA H200": "h200"}
SIZES_GPU = [100_000, 300_000, 1_000_000, 3_000_000, 10_000_000, 30_000_000, 100_000_000,
             300_000_000, 1_000_000_000]
SIZES_CPU = [8192, 131072]
# the host's cost per parameter: N parameters of `numel` elements (8-bit from 4096 elements,
# paged from 1e5: get_state_buffer)
PARAM_COUNTS_GPU, PARAM_COUNTS_CPU = (16, 64, 256), (4, 8, 16)
PARAM_NUMEL = {"adamw8bit": 8192, "paged_adamw_8bit": 131072, "adamw32bit": 8192,
               "paged_adamw_32bit": 131072}


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def kernel_us(dev, fn, calls=5):
    """fn's kernels' device microseconds (median of `calls` calls, each profiled alone); on the
    CPU the wall time of fn (the check has no kernels)."""
    if dev != "cuda":
        ts = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(ts), 1
    from torch.profiler import ProfilerActivity, profile
    ts, ns = [], []
    for _ in range(calls):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        ks = [getattr(e, "device_time_total", 0.0) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA]
        ts.append(sum(ks))
        ns.append(len(ks))
    return statistics.median(ts), statistics.median(ns)


def wall_us(dev, fn, calls=5):
    ts = []
    for _ in range(calls):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)


def one_param(dev, optim, dtype, numel):
    p = torch.nn.Parameter(torch.empty(numel, device=dev, dtype=DTYPES[dtype]).normal_())
    p.grad = torch.empty_like(p).normal_(std=1e-3)
    opt = OPTIMS[optim]([p])
    opt.step()  # the first step makes the state
    opt.step()
    return p, opt


def kernel_row(dev, optim, dtype, numel):
    p, opt = one_param(dev, optim, dtype, numel)
    group = opt.param_groups[0]
    # update_step alone: the kernel (the paged states are resident after the steps above)
    k_us, k_n = kernel_us(dev, lambda: opt.update_step(group, p, 0, 0))
    s_us = wall_us(dev, opt.step)
    ev = None
    if dev == "cuda":  # the kernel between two events, a check on the profiler's figure
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        evs = []
        for _ in range(5):
            torch.cuda.synchronize()
            a.record()
            opt.update_step(group, p, 0, 0)
            b.record()
            torch.cuda.synchronize()
            evs.append(a.elapsed_time(b) * 1e3)
        ev = statistics.median(evs)
    paged = bool(getattr(opt.state[p]["state1"], "is_paged", False))
    row = {"what": "kernel", "optim": optim, "dtype": dtype, "numel": numel, "kernel_us": round(k_us, 3),
           "kernels": k_n, "event_us": ev and round(ev, 3), "step_us": round(s_us, 3),
           "state_dtype": str(opt.state[p]["state1"].dtype).replace("torch.", ""), "paged": paged}
    del p, opt
    if dev == "cuda":
        torch.cuda.empty_cache()
    return row


def fit(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def param_row(dev, optim, counts, reps):
    numel = PARAM_NUMEL[optim]
    steps, zeros, kus = [], [], []
    for n in counts:
        ps = [torch.nn.Parameter(torch.empty(numel, device=dev, dtype=torch.bfloat16).normal_())
              for _ in range(n)]
        gs = [torch.empty_like(p).normal_(std=1e-3) for p in ps]
        opt = OPTIMS[optim](ps)
        best_s = best_z = float("inf")
        for r in range(reps + 2):
            for p, g in zip(ps, gs):
                p.grad = g
            sync(dev)
            t0 = time.perf_counter()
            opt.step()
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            t2 = time.perf_counter()
            sync(dev)
            if r >= 2:  # the first step makes the state
                best_s, best_z = min(best_s, t1 - t0), min(best_z, t2 - t1)
        steps.append(best_s * 1e6)
        zeros.append(best_z * 1e6)
        if dev == "cuda":  # the kernels' own time over the step, per parameter
            for p, g in zip(ps, gs):  # (zero_grad above set them to None)
                p.grad = g
            group = opt.param_groups[0]
            k, _ = kernel_us(dev, lambda: [opt.update_step(group, p, 0, i) for i, p in enumerate(ps)], 3)
            kus.append(k / n)
        del ps, gs, opt
    b, m = fit(list(counts), steps)
    bz, mz = fit(list(counts), zeros)
    return {"what": "param", "optim": optim, "dtype": "bf16", "numel": numel, "counts": list(counts),
            "step_us": [round(v, 2) for v in steps], "zero_grad_us": [round(v, 2) for v in zeros],
            "step_us0": round(b, 2), "step_param_us": round(m, 3),
            "zero_grad_param_us": round(mz, 3),
            "kernel_us": round(statistics.median(kus), 3) if kus else 0.0}


def write_lua(path, rows, meta):
    krows = [r for r in rows if r["what"] == "kernel"]
    prows = [r for r in rows if r["what"] == "param"]
    with open(path, "w") as f:
        f.write("-- bitsandbytes %s's optimizer steps on %s, torch %s, %s:\n"
                % (meta["bitsandbytes"], meta["name"], meta["torch"], meta["measured"]))
        f.write("-- kernel: one parameter of `numel` elements, the update kernel's own time (kernel_us,\n"
                "-- torch.profiler) and a whole step() on it (step_us: host, prefetch, kernel, synchronize).\n"
                "-- param: step() and zero_grad() over N small parameters, the slope per parameter\n"
                "-- (step_param_us, zero_grad_param_us; kernel_us: the kernels' part of it) and the\n"
                "-- intercept (step_us0).\n")
        f.write("--   python3 validation/harness/measure_bnb_optim.py --gpu %s\n" % meta["gpu"])
        f.write("return {\n")
        f.write('  gpu = "%s", name = "%s", measured = "%s", torch = "%s", bitsandbytes = "%s",\n'
                % (meta["gpu"], meta["name"], meta["measured"], meta["torch"], meta["bitsandbytes"]))
        f.write("  bnb_optim = {\n    kernel = {\n")
        for r in krows:
            f.write('      {optim="%s", dtype="%s", numel=%d, kernel_us=%.3f, step_us=%.3f, paged=%s},\n'
                    % (r["optim"], r["dtype"], r["numel"], r["kernel_us"], r["step_us"],
                       "true" if r["paged"] else "false"))
        f.write("    },\n    param = {\n")
        for r in prows:
            f.write('      {optim="%s", dtype="%s", numel=%d, step_param_us=%.3f, kernel_us=%.3f, '
                    'zero_grad_param_us=%.3f, step_us0=%.2f},\n'
                    % (r["optim"], r["dtype"], r["numel"], r["step_param_us"], r["kernel_us"],
                       r["zero_grad_param_us"], r["step_us0"]))
        f.write("    },\n  },\n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", help="the catalog key the table is for, its file's name (default: the "
                    "device's, from CATALOG; vrsim reads lua/hw/calibrated/<key>_bnb_optim.lua)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT"), help="default $OUT")
    ap.add_argument("--cpu-check", action="store_true",
                    help="no GPU: tiny sizes on the CPU through the same code and writer")
    ap.add_argument("--budget-s", type=float, default=70.0,
                    help="take no more kernel rows past this many seconds from the start (imports "
                         "included; the largest sizes come last)")
    a = ap.parse_args()
    if not a.out_dir:
        ap.error("--out-dir or $OUT needed")
    os.makedirs(a.out_dir, exist_ok=True)
    dev = "cpu" if a.cpu_check else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device (--cpu-check runs on the CPU)")
    t_start = T0
    if not a.gpu:
        name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
        a.gpu = CATALOG.get(name) or ("h100_sxm" if dev == "cpu" else None)
        if not a.gpu:
            ap.error("no catalog key known for %r: give --gpu" % name)
    sizes = SIZES_CPU if a.cpu_check else SIZES_GPU
    counts = PARAM_COUNTS_CPU if a.cpu_check else PARAM_COUNTS_GPU
    rows = []
    jpath = os.path.join(a.out_dir, "%s_bnb_optim.jsonl" % a.gpu)
    with open(jpath, "w") as jf:
        def emit(row):
            rows.append(row)
            jf.write(json.dumps(row) + "\n")
            jf.flush()
            print(json.dumps(row), flush=True)
        for optim in OPTIMS:
            emit(param_row(dev, optim, counts, 3 if a.cpu_check else 5))
        for numel in sizes:  # size by size, so that a budget cut leaves every case's small sizes
            for optim, dtype in KERNEL_CASES:
                if time.perf_counter() - t_start > a.budget_s:
                    print("budget: %s %s %d left out" % (optim, dtype, numel), file=sys.stderr)
                    continue
                emit(kernel_row(dev, optim, dtype, numel))
    meta = {"gpu": a.gpu, "torch": torch.__version__, "bitsandbytes": bnb.__version__,
            "measured": datetime.date.today().isoformat(),
            "name": torch.cuda.get_device_name() if dev == "cuda" else "cpu (check only)"}
    lpath = os.path.join(a.out_dir, "%s_bnb_optim.lua" % a.gpu)
    write_lua(lpath, rows, meta)
    print("wrote %s and %s in %.1f s" % (lpath, jpath, time.perf_counter() - t_start))


if __name__ == "__main__":
    main()
