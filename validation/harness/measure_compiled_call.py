"""Host time of a regionally compiled model's blocks against eager: what calling one compiled
block costs the host beyond its kernels' launches. A compiled block's forward is dynamo's guard
check, AOTAutograd's runtime wrapper (CompiledFunction.apply, an autograd.Function) and Inductor's
generated `call` (its kernels launched from Python); its backward is that Function's backward node
running the backward graph's `call`. vrsim prices a compiled block as a bare launch per kernel;
this measures the rest.

Each model is M blocks of K units (Linear(64, 64) then GELU), each block compiled alone
(block.compile(), as diffusers' compile_repeated_blocks and torchtitan compile them), on tensors so
small that the GPU never limits. Host time of the forward and of backward(), median of REPS
iterations (synchronize, then perf_counter around each, no synchronization inside), eager and
compiled, with Inductor's kernel count per block. Then per phase a least-squares line
host_us = a + b * M + c * kernels (kernels = M * the block's kernels): b is the per-block call.

  python3 validation/harness/measure_compiled_call.py --out validation/results/compiled_call_h100.jsonl
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn

from measure_foreach_host import lstsq  # (the script's own folder is on sys.path)

D, BATCH, REPS = 64, 8, 30
DEV = "cuda"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


class Block(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.units = nn.ModuleList(nn.Linear(D, D) for _ in range(k))

    def forward(self, x):
        for u in self.units:
            x = torch.nn.functional.gelu(u(x))
        return x


def timed(model, x):
    fwd, bwd = [], []
    for r in range(REPS + 3):
        sync()
        t0 = time.perf_counter()
        out = model(x)
        t1 = time.perf_counter()
        loss = out.sum()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        sync()
        for p in model.parameters():
            p.grad = None
        if r >= 3:
            fwd.append((t1 - t0) * 1e6)
            bwd.append((t3 - t2) * 1e6)
    return statistics.median(fwd), statistics.median(bwd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150)
    ap.add_argument("--cpu-check", action="store_true", help="the same on the CPU (the code path, no figures)")
    a = ap.parse_args()
    global DEV
    if a.cpu_check:
        DEV = "cpu"
    t_start = time.time()
    import torch._inductor.metrics as metrics
    torch._dynamo.config.cache_size_limit = 64
    env = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu"}
    rows = []
    with open(a.out, "a") as f:
        def emit(rec):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(json.dumps(rec), flush=True)
        for k in (1, 2, 4, 8):
            for m in (4, 16):
                if time.time() - t_start > a.budget_s:
                    break
                torch.manual_seed(0)
                model = nn.Sequential(*[Block(k) for _ in range(m)]).to(DEV)
                x = torch.randn(BATCH, D, device=DEV, requires_grad=True)
                ef, eb = timed(model, x)
                before = metrics.generated_kernel_count
                for blk in model:
                    blk.compile()
                timed(model, x)  # compile (forward and backward graphs) outside the timing
                kernels = metrics.generated_kernel_count - before
                cf, cb = timed(model, x)
                rec = {"blocks": m, "units": k, "inductor_kernels_generated": kernels,
                       "eager_fwd_us": round(ef, 2), "eager_bwd_us": round(eb, 2),
                       "compiled_fwd_us": round(cf, 2), "compiled_bwd_us": round(cb, 2), **env}
                rows.append(rec)
                emit(rec)
                torch._dynamo.reset()
        # a block's kernels are its units' GEMMs (cuBLAS, called from Inductor's code: one per
        # unit forward, two backward) and Inductor's fused pointwise kernels, so the units stand
        # for the kernels in the fit
        for ph in ("fwd", "bwd"):
            for mode in ("eager", "compiled"):
                for r in rows:
                    r["unit_total"] = r["blocks"] * r["units"]
                c = lstsq(rows, ("blocks", "unit_total"), "%s_%s_us" % (mode, ph))
                emit({"fit": True, "mode": mode, "phase": ph, "intercept_us": round(c[0], 2),
                      "per_block_us": round(c[1], 3), "per_unit_us": round(c[2], 3), **env})


if __name__ == "__main__":
    main()
