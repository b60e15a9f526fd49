"""What the kernel measurements (measure_conv_transforms.py, measure_gemm_kernels.py,
measure_group_norm.py, measure_norm_kernels.py, measure_geglu_mul.py) share: a call's kernels
under torch.profiler, their time summed per label over calls each profiled alone, and the command
line that either measures (--out F, on a GPU) or writes the calibrated Lua table from a
measurement (--from F --lua FILE, without torch).
"""
import argparse
import json
import statistics

try:  # writing a table (--from) runs without torch
    import torch
except ImportError:
    torch = None


def call_kernels(fn):
    """Calls fn once under torch.profiler: its result, and [(kernel name, device microseconds)]."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    return out, [(e.name, getattr(e, "device_time_total", 0.0)) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA]


def median_kernel_us(fn, calls=5, label=lambda name: "all"):
    """fn called `calls` times, each profiled alone; for each label (label(kernel name); None
    leaves a kernel out) the median over the calls of its kernels' summed microseconds and of
    their count (0 in a call that launched none)."""
    times, counts = [], []
    for _ in range(calls):
        t, n = {}, {}
        for name, us in call_kernels(fn)[1]:
            k = label(name)
            if k is not None:
                t[k] = t.get(k, 0.0) + us
                n[k] = n.get(k, 0) + 1
        times.append(t)
        counts.append(n)
    keys = {k for t in times for k in t}
    return ({k: statistics.median(t.get(k, 0.0) for t in times) for k in keys},
            {k: statistics.median(n.get(k, 0) for n in counts) for k in keys})


def save_rows(path, rows):
    """The measurement file --from reads: the rows, with the torch version and the GPU."""
    with open(path, "w") as f:
        json.dump({"rows": rows, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}, f)


def byte_rate_points(path):
    """A measurement file's rows with a time, as (bytes, GB/s, row), by bytes."""
    with open(path) as f:
        rows = json.load(f)["rows"]
    return sorted((r["bytes"], r["bytes"] / (r["us"] * 1e-6) / 1e9, r) for r in rows if r["us"] > 0)


def write_torch_ops(path, header, rows, gbps_digits=1):
    """A calibrated table of torch_ops rows as lua/vrsim/hardware.lua merges them: the comment lines
    of header, then each (class, op, bytes, ms, gbps) row."""
    with open(path, "w") as f:
        f.write(header)
        f.write("return {\n  torch_ops = {\n")
        for cls, op, nbytes, ms, gbps in rows:
            f.write('    {class="%s", op="%s", bytes=%d, ms=%.5f, gbps=%.*f},\n'
                    % (cls, op, nbytes, ms, gbps_digits, gbps))
        f.write("  },\n}\n")


def measured_on(src, gpu=None, date=None):
    """Where and when the rows of measurement file src were taken, for a table's header: the GPU
    and torch version the file records (save_rows), else gpu (--gpu-name), the date given
    (--date) and the file's path."""
    with open(src) as f:
        text = f.read()
    try:
        d = json.loads(text)
    except ValueError:  # JSON lines: the first record's
        d = json.loads(text.splitlines()[0]) if text.strip() else {}
    info = d if isinstance(d, dict) else {}
    name = info.get("gpu") or gpu
    if not name:
        raise SystemExit("%s does not say which GPU it was measured on: pass --gpu-name" % src)
    cudnn = info.get("cudnn")  # torch.backends.cudnn.version(): 91900 is 9.19
    return {"gpu": name, "torch": info.get("torch", "?"),
            "cudnn": "%d.%d" % (cudnn // 10000, cudnn // 100 % 100) if isinstance(cudnn, int) else "?",
            "date": date or "(date not given)", "src": src}


def measure_or_write(doc, measure, write_lua, add_args=None):
    """The scripts' command line. --out F: measure(args) (torch and a GPU needed); --from F --lua
    FILE: write_lua(F, FILE, measured_on(F)), the header naming the GPU, torch and --date of the
    measurement. add_args(parser) adds a script's own options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--from", dest="src")
    ap.add_argument("--lua")
    ap.add_argument("--date", help="with --from: the day the rows were measured (YYYY-MM-DD)")
    ap.add_argument("--gpu-name", help="with --from: the GPU, where the file does not record it")
    if add_args:
        add_args(ap)
    a = ap.parse_args()
    if a.src:
        if not a.lua:
            ap.error("--from needs --lua")
        return write_lua(a.src, a.lua, measured_on(a.src, a.gpu_name, a.date))
    if not a.out:
        ap.error("--out F (measure) or --from F --lua FILE (write the table)")
    if torch is None:
        ap.error("measuring needs torch (writing the table, --from, does not)")
    return measure(a)
