"""torch._grouped_mm (the mixture-of-experts experts' GEMMs) and the dispatch's index ops, timed on
one GPU in bf16, written as a Lua supplement of lua/hw/calibrated/ (<gpu>_grouped_mm.lua).

transformers 5.25 runs an experts module by integrations/moe.py grouped_mm_experts_forward:

    expert_ids_g, perm = torch.sort(expert_ids)                 # S = tokens x top_k pairs
    selected = hidden_states[perm // top_k]                      # aten::index, (S, hidden)
    sample_weights_g = sample_weights[perm]                      # aten::index, (S,)
    tokens_per_expert = torch.histc(expert_ids_g.int(), bins=E, min=0, max=E - 1)
    offsets = torch.cumsum(tokens_per_expert, dim=0, dtype=torch.int32)
    proj = torch._grouped_mm(selected, gate_up_proj.transpose(-2, -1), offs=offsets)
    ...
    down = torch._grouped_mm(gated, down_proj.transpose(-2, -1), offs=offsets)
    inv_perm[perm] = torch.arange(S)                             # index_put_, (S,)
    out = (down * sample_weights_g[:, None])[inv_perm]           # aten::index, (S, hidden)

(GPT-OSS's experts are stored (E, in, out), is_transposed=True: no transpose view, layout "nn".)
Backward: GroupedMmBackward0 makes the input's gradient (grad x W_e^T per expert, "dgrad") and the
weight's (a 2-D x 2-D grouped GEMM, "wgrad": x_e^T x grad_e, or grad_e^T x x_e for the weights
passed transposed, as it runs them); each IndexBackward0 is a
zero fill of the source's shape and a sort-based index_put_ with accumulate ("index_bwd").

Timed here (CUDA events, medians of --reps batches of --calls back-to-back calls queued behind a
sleep kernel, so the figure is the device's time and not the host's launch rate):
  grouped_mm  gemm = fwd, dgrad, wgrad (the two backward GEMMs called as GroupedMmBackward0 calls
              them) and bwd (the autograd node itself, both gradients, a cross-check);
              routing = "balanced" (each expert S / E rows, remainder to the first) over a sweep of
              total rows S and of experts E, and routing = "record:<name>" with the tokens per
              expert a measured run's router gave each layer (validation/records/
              llama_h200_gen4_families.jsonl `routing`; the median over its layers).
  moe_index   op = sort (int64 ids, values and permutation), histc (int32, E bins), cumsum (E),
              index_put (inv_perm[perm] = arange), index_fwd / index_bwd (rows gathered from a
              (src_rows, width) tensor and IndexBackward0's zero fill + accumulate), at the
              records' sizes.

  python3 validation/harness/measure_grouped_mm.py      # on the GPU: $OUT/<gpu>_grouped_mm.lua, where <gpu>
                                                        # is the catalog's name (an H100 SXM: h100_sxm)
  python3 validation/harness/measure_grouped_mm.py --cpu-check      # shapes and call path, CPU, small

It stops timing new shapes after --budget-s seconds (default 85) and writes what it has; the
header says so.
"""
import argparse, json, os, statistics, sys, time

RECORDS = "validation/records/llama_h200_gen4_families.jsonl"

# The experts of the records' families: (name, experts, hidden, expert intermediate, top_k,
# weights stored (E, in, out) as GPT-OSS's are). The grouped GEMMs are gate_up (k = hidden,
# n = 2 x intermediate) and down (k = intermediate, n = hidden).
FAMILIES = [
    ("qwen3_moe", 128, 2048, 768, 8, False),
    ("deepseek_v2", 64, 2048, 1408, 6, False),
    ("mixtral", 8, 4096, 14336, 2, False),
    ("gpt_oss", 32, 2880, 2880, 4, True),
]
SWEEP_ROWS = [2048, 4096, 8192, 16384, 32768, 65536]
MAX_ROWS = {"mixtral": 32768}          # its largest GEMMs take 10+ ms each: enough points below
SWEEP_EXPERTS = [8, 16, 32, 64, 128, 256]
EXPERT_SWEEP_ROWS = [8192, 32768]      # with Qwen3-MoE's projection shapes
GEMMS = ("fwd", "dgrad", "wgrad", "bwd")


def family_of(rec):
    c = rec["hf_config"]
    mt = c.get("model_type")
    for f in FAMILIES:
        if f[0] == mt:
            return f
    return None


def load_records(path):
    """The MoE records: name, family, tokens, S and each layer's tokens per expert."""
    out = []
    with open(path) as fh:
        for line in fh:
            r = json.loads(line)
            if "routing" not in r:
                continue
            fam = family_of(r)
            if fam is None:
                raise SystemExit(f"{path}: record {r['name']}: model_type {r['hf_config'].get('model_type')} "
                                 "has no experts shape here")
            t = r["batch"] * r["seq"]
            layers = [list(v) for v in r["routing"].values()]
            for v in layers:
                if len(v) != fam[1] or sum(v) != t * fam[4]:
                    raise SystemExit(f"{path}: record {r['name']}: a routing of {len(v)} experts summing "
                                     f"to {sum(v)}, expected {fam[1]} summing to {t * fam[4]}")
            out.append({"name": r["name"], "family": fam, "tokens": t, "rows": t * fam[4], "layers": layers})
    return out


def balanced(rows, experts):
    base, rem = divmod(rows, experts)
    return [base + (1 if e < rem else 0) for e in range(experts)]


class Timer:
    """Device time of fn() per call: --calls calls queued behind a sleep kernel between two
    events, --reps times, the median. On the CPU (--cpu-check) it runs fn once and returns 0."""

    def __init__(self, torch, dev, calls, reps, sleep_cycles):
        self.torch, self.dev, self.calls, self.reps, self.sleep = torch, dev, calls, reps, sleep_cycles

    def ms(self, fn):
        torch = self.torch
        if self.dev == "cpu":
            fn()
            return 0.0
        fn(); fn()                                   # warm-up: the kernels' first launches
        torch.cuda.synchronize()
        out = []
        for _ in range(self.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(self.sleep)
            a.record()
            for _ in range(self.calls):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / self.calls)
        return statistics.median(out)


def grouped_cases(torch, dev, counts, k, n, transposed, need_bwd=True):
    """The four callables of one grouped GEMM over `counts` rows per expert: out (S, n) =
    x (S, k) @ W_e, W stored (E, n, k) and passed as its transpose view, or (E, k, n) as is."""
    e, s = len(counts), sum(counts)
    offs = torch.cumsum(torch.tensor(counts, dtype=torch.int32), 0, dtype=torch.int32).to(dev)
    x = torch.randn(s, k, device=dev, dtype=torch.bfloat16)
    if transposed:
        wt = torch.randn(e, k, n, device=dev, dtype=torch.bfloat16) * 0.02
        w = wt
    else:
        wt = torch.randn(e, n, k, device=dev, dtype=torch.bfloat16) * 0.02
        w = wt.transpose(-2, -1)
    gy = torch.randn(s, n, device=dev, dtype=torch.bfloat16)
    gm = torch._grouped_mm
    cases = {
        "fwd": lambda: gm(x, w, offs=offs),
        # GroupedMmBackward0 (torch.profiler of its CPU run, torch 2.13): grad_x = grad @ W_e^T;
        # the weight's gradient in the weight's own layout, offsets along S: x_e^T @ grad_e for
        # (E, k, n) weights, and (grad_e^T @ x_e), transposed, for the (E, n, k) ones passed as
        # their transpose
        "dgrad": lambda: gm(gy, w.transpose(-2, -1), offs=offs),
        "wgrad": (lambda: gm(x.t(), gy, offs=offs)) if transposed else (lambda: gm(gy.t(), x, offs=offs)),
    }
    if need_bwd:
        xr = x.detach().requires_grad_(True)
        wr = wt.detach().requires_grad_(True)
        wv = wr if transposed else wr.transpose(-2, -1)
        y = gm(xr, wv, offs=offs)

        def bwd():
            torch.autograd.grad(y, (xr, wr), gy, retain_graph=True)
        cases["bwd"] = bwd
    shapes = {"x": tuple(x.shape), "w": tuple(w.shape), "out": (s, n)}
    return cases, shapes


def index_cases(torch, dev, tokens, top_k, width, experts):
    """The dispatch's index ops at S = tokens x top_k pairs, a (tokens, width) hidden state."""
    s = tokens * top_k
    ids = torch.randint(0, experts, (s,), device=dev, dtype=torch.int64)
    ids_g, perm = torch.sort(ids)
    ids32 = ids_g.int() if dev != "cpu" else ids_g.float()
    hs = torch.randn(tokens, width, device=dev, dtype=torch.bfloat16, requires_grad=True)
    pairs = torch.randn(s, width, device=dev, dtype=torch.bfloat16, requires_grad=True)
    row = perm // top_k
    inv = torch.argsort(perm)                    # the inverse permutation, as inv_perm holds it
    inv_put = torch.empty_like(perm)
    ar = torch.arange(s, device=dev)
    sel = hs[row]
    back = pairs[inv]
    g_sel = torch.randn(s, width, device=dev, dtype=torch.bfloat16)
    # sample_weights[perm]: one weight per pair (fp32, as Mixtral's router gives them)
    wts = torch.randn(s, device=dev, dtype=torch.float32, requires_grad=True)
    wts_g = wts[perm]
    g_w = torch.randn(s, device=dev, dtype=torch.float32)
    counts = torch.histc(ids32, bins=experts, min=0, max=experts - 1)

    def put():
        inv_put[perm] = ar
    c = {
        ("sort", s, 0, 0): lambda: torch.sort(ids),
        ("histc", s, experts, 0): lambda: torch.histc(ids32, bins=experts, min=0, max=experts - 1),
        ("cumsum", experts, 0, 0): lambda: torch.cumsum(counts, 0, dtype=torch.int32),
        ("index_put", s, 0, 0): put,
        # hidden_states[perm // top_k]: (S, width) rows of a (tokens, width) tensor, and back
        ("index_fwd", s, tokens, width): lambda: hs.detach()[row],
        ("index_bwd", s, tokens, width): lambda: torch.autograd.grad(sel, hs, g_sel, retain_graph=True),
        # weighted_out[inv_perm]: (S, width) rows of an (S, width) tensor, and back
        ("index_fwd", s, s, width): lambda: pairs.detach()[inv],
        ("index_bwd", s, s, width): lambda: torch.autograd.grad(back, pairs, g_sel, retain_graph=True),
        # sample_weights[perm]: S single values of an (S,) tensor, and back
        ("index_fwd", s, s, 1): lambda: wts.detach()[perm],
        ("index_bwd", s, s, 1): lambda: torch.autograd.grad(wts_g, wts, g_w, retain_graph=True),
    }
    return c


def catalog_name(device_name):
    """The catalog entry (lua/hw/gpus.lua) of the card torch names: vrsim reads
    lua/hw/calibrated/<entry>_grouped_mm.lua for that GPU alone."""
    d = device_name.lower()
    if "h200" in d:
        return "h200"
    if "h100" in d:
        return "h100_pcie" if "pcie" in d else "h100_sxm"
    raise SystemExit(f"measure_grouped_mm: which catalog GPU is '{device_name}'? name it with --gpu")


def lua_row(d):
    parts = []
    for k, v in d.items():
        if isinstance(v, str):
            parts.append(f'{k}="{v}"')
        elif isinstance(v, float):
            parts.append(f"{k}={v:.5f}" if k == "ms" else f"{k}={v:.1f}")
        else:
            parts.append(f"{k}={v}")
    return "    {" + ", ".join(parts) + "},"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", help="catalog name of the card (lua/hw/gpus.lua; the file is <gpu>_grouped_mm.lua); "
                    "default: from the device's name (h200, h100_sxm, h100_pcie)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "."), help="where to write (default $OUT)")
    ap.add_argument("--records", default=RECORDS)
    ap.add_argument("--calls", type=int, default=5, help="back-to-back calls per timed batch")
    ap.add_argument("--reps", type=int, default=5, help="timed batches per shape (the median)")
    ap.add_argument("--budget-s", type=float, default=85.0, help="stop timing new shapes after this long")
    ap.add_argument("--cpu-check", action="store_true",
                    help="run every call path on the CPU at 1/32 of the sizes (one layer per record) and check the shapes; time nothing")
    a = ap.parse_args()
    t0 = time.time()
    import torch
    cpu = a.cpu_check
    dev = "cpu" if cpu else "cuda"
    if not cpu and not torch.cuda.is_available():
        raise SystemExit("measure_grouped_mm: no CUDA device (use --cpu-check to check the call path here)")
    if not hasattr(torch, "_grouped_mm"):
        raise SystemExit(f"measure_grouped_mm: torch {torch.__version__} has no torch._grouped_mm")
    # on the CPU the sizes shrink 16-fold (rows, widths); experts stay as they are
    sc = 32 if cpu else 1
    if cpu:
        a.budget_s = float("inf")                  # the check runs every path, however slow the CPU

    def d(x):
        """A width at 1/sc, kept a multiple of 8 (the grouped GEMM wants 16-byte strides)."""
        return x if sc == 1 else max(8, x // sc // 8 * 8)
    clock_hz = 1.9e9
    timer = Timer(torch, dev, a.calls, a.reps, int(clock_hz * 0.002))   # ~2 ms of sleep per batch
    records = load_records(a.records)
    gm_rows, ix_rows, skipped = [], [], []

    def over():
        return time.time() - t0 > a.budget_s

    def time_grouped(counts, k, n, transposed, routing, gemms=GEMMS):
        cases, shapes = grouped_cases(torch, dev, counts, k, n, transposed)
        s, e = sum(counts), len(counts)
        res = {}
        for g in gemms:
            try:
                res[g] = timer.ms(cases[g])
            except RuntimeError as err:             # a layout the kernel refuses: say so, go on
                if cpu:
                    raise
                skipped.append(f"{g} E={e} S={s} k={k} n={n}: {str(err).splitlines()[0]}")
        if cpu:
            # shapes of what each call makes, checked against the model's
            y = cases["fwd"]()
            dx = cases["dgrad"]()
            dw = cases["wgrad"]()
            assert tuple(y.shape) == (s, n), (y.shape, s, n)
            assert tuple(dx.shape) == (s, k), (dx.shape, s, k)
            assert tuple(dw.shape) == ((e, k, n) if transposed else (e, n, k)), (dw.shape, e, k, n)
        del cases
        return res, shapes

    def add_grouped(routing, counts, k, n, transposed, res):
        s, e = sum(counts), len(counts)
        for g, ms in res.items():
            fl = 2.0 * s * k * n * (2 if g == "bwd" else 1)
            gm_rows.append({"gemm": g, "layout": "nn" if transposed else "nt", "routing": routing,
                            "experts": e, "rows": s, "n": n, "k": k, "max_rows": max(counts),
                            "ms": ms, "tflops": (fl / (ms * 1e-3) / 1e12) if ms > 0 else 0.0})

    # 1. the records' own routing, layer by layer (median over layers), and their index ops
    for rec in records:
        name, ne, hid, inter, topk, tr = rec["family"]
        for proj, k, n in (("gate_up", hid, 2 * inter), ("down", inter, hid)):
            if over():
                skipped.append(f"record:{rec['name']} {proj}")
                continue
            per = {g: [] for g in GEMMS}
            for layer in (rec["layers"][:1] if cpu else rec["layers"]):
                r, _ = time_grouped([c // sc for c in layer], d(k), d(n), tr, "record")
                for g in r:
                    per[g].append(r[g])
            # the time the median over the record's layers; max_rows its first layer's
            add_grouped("record:" + rec["name"], [c // sc for c in rec["layers"][0]], d(k), d(n), tr,
                        {g: statistics.median(v) for g, v in per.items() if v})
        if over():
            skipped.append(f"record:{rec['name']} index ops")
            continue
        toks = max(1, rec["tokens"] // sc)
        for (op, size, aux, width), fn in index_cases(torch, dev, toks, topk, d(hid), ne).items():
            try:
                ms = timer.ms(fn)
            except RuntimeError as err:
                if cpu:
                    raise
                skipped.append(f"{op} n={size} ({rec['name']}): {str(err).splitlines()[0]}")
                continue
            ix_rows.append({"op": op, "n": size, "src_rows": aux if op.startswith("index_") else 0,
                            "width": width, "bins": aux if op == "histc" else 0,
                            "ms": ms, "record": rec["name"]})

    # 2. balanced routing: a sweep of total rows per family, with the records' S among them
    rec_rows = {}
    for rec in records:
        rec_rows.setdefault(rec["family"][0], set()).add(rec["rows"])
    for name, ne, hid, inter, topk, tr in FAMILIES:
        rows_list = sorted(set(r for r in SWEEP_ROWS if r <= MAX_ROWS.get(name, 1 << 30)) | rec_rows.get(name, set()))
        for s in rows_list:
            for proj, k, n in (("gate_up", hid, 2 * inter), ("down", inter, hid)):
                if over():
                    skipped.append(f"balanced {name} {proj} S={s}")
                    continue
                counts = balanced(s // sc, ne)
                r, _ = time_grouped(counts, d(k), d(n), tr, "balanced")
                add_grouped("balanced", counts, d(k), d(n), tr, r)
    # 3. balanced routing: a sweep of experts at Qwen3-MoE's projection shapes
    for e in SWEEP_EXPERTS:
        if e == 128:
            continue                                 # the family sweep has it
        for s in EXPERT_SWEEP_ROWS:
            for proj, k, n in (("gate_up", 2048, 1536), ("down", 768, 2048)):
                if over():
                    skipped.append(f"balanced E={e} {proj} S={s}")
                    continue
                counts = balanced(s // sc, e)
                r, _ = time_grouped(counts, d(k), d(n), False, "balanced")
                add_grouped("balanced", counts, d(k), d(n), False, r)

    elapsed = time.time() - t0
    if cpu:
        print(f"measure_grouped_mm --cpu-check: {len(gm_rows)} grouped_mm rows and {len(ix_rows)} index rows "
              f"ran on the CPU at 1/{sc} size in {elapsed:.1f} s; shapes as modelled")
        if skipped:
            print("skipped for the budget: " + "; ".join(skipped))
    dname = "the CPU (--cpu-check: no time measured)" if cpu else torch.cuda.get_device_name(0)
    if not a.gpu:
        a.gpu = catalog_name(dname) if not cpu else "h100_sxm"
    cmd = "python3 validation/harness/measure_grouped_mm.py " + " ".join(sys.argv[1:])
    lines = [
        f"-- torch._grouped_mm and the MoE dispatch's index ops on {dname}, torch {torch.__version__}, bf16,",
        f"-- {time.strftime('%Y-%m-%d', time.gmtime())}: the device's time per call (CUDA events over {a.calls} back-to-back calls queued",
        f"-- behind a sleep kernel, the median of {a.reps} batches), {elapsed:.0f} s in all.",
        f"-- command: {cmd}",
        "-- grouped_mm: gemm = fwd (x @ W_e), dgrad (grad @ W_e^T), wgrad (x_e^T @ grad_e; nt: grad_e^T @ x_e), bwd",
        "--   (GroupedMmBackward0, both gradients: a cross-check); layout nt = weights stored (E, n, k) and",
        "--   passed transposed, nn = stored (E, k, n) (GPT-OSS); rows = S token-expert pairs, max_rows the",
        "--   busiest expert's; routing balanced = S / E rows each, record:<name> = the tokens per expert",
        "--   the record's router gave (validation/records/llama_h200_gen4_families.jsonl), time the",
        "--   median over its layers, max_rows its first layer's. tflops = 2 S n k (bwd twice) / time.",
        "-- moe_index: sort (int64 S), histc (int32 S into bins), cumsum (E), index_put (inv_perm[perm] =",
        "--   arange, S), index_fwd (n rows gathered from a (src_rows, width) bf16 tensor; width 1: fp32), index_bwd",
        "--   (IndexBackward0: a zero fill of (src_rows, width) and the sort-based index_put_ accumulate).",
    ]
    if skipped:
        lines.append(f"-- NOT timed (past --budget-s {a.budget_s:g}, or refused): " + "; ".join(skipped))
    lines.append("return {")
    lines.append(f'  gpu = "{a.gpu}",')
    lines.append("  grouped_mm = {")
    lines += [lua_row(r) for r in gm_rows]
    lines.append("  },")
    lines.append("  moe_index = {")
    lines += [lua_row(r) for r in ix_rows]
    lines.append("  },")
    lines.append("}")
    out_dir = a.out_dir
    if cpu:
        import tempfile
        out_dir = tempfile.mkdtemp(prefix="grouped_mm_check.")   # the writer checked too, never a table
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{a.gpu}_grouped_mm.lua")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"wrote {path}: {len(gm_rows)} grouped_mm rows, {len(ix_rows)} index rows in {elapsed:.1f} s"
          + (f"; {len(skipped)} left out for the budget" if skipped else ""))


if __name__ == "__main__":
    main()
