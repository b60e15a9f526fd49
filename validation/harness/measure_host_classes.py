"""Host time per op, by op class, of eager PyTorch training on one GPU: what the Python thread
spends to issue one op of each class in forward (with autograd recording) and what the autograd
engine spends on its node in backward. Tensors are tiny, so the GPU never limits: each figure is
host time alone.

Each class is timed as a chain of N ops, each consuming the previous one's output (so forward
records N autograd nodes and backward runs N of them), then backward from a sum. Per op:
forward (chain time) / N and backward (backward time - the same backward of a chain of 0) / N.
Repeats are interleaved across classes (machine noise hits every class alike); the figures are
medians, with the best and worst.

Classes (the op library's host classes, lua/vrsim/ops/*.lua):
  module_call     a module's __call__ alone (forward returns its input): added per module op
  aten            a bare tensor op, out of place, no autograd (torch.add under no_grad)
  pointwise       a bare tensor op with autograd (x * w; MulBackward0, two gradients)
  add             x + c with autograd (AddBackward0: the gradient passes through, no kernel)
  view            two x.view calls without a copy (ViewBackward0): the figure is for two views
  cast            x.to(fp32).to(bf16) with autograd (ToCopyBackward0): the figure is for two casts
  linear          nn.Linear call (module + addmm + the weight's transpose view)
  linear_nobias   nn.Linear(bias=False) call (module + mm)
  linear_frozen   the same with its weight frozen (requires_grad False): LoRA's base layers
  lora_linear     peft's LoRA layer (r 8, dropout 0) around a frozen Linear; lora_linear_dropout
                  the same with dropout 0.05 (when peft is installed)
  autocast_linear nn.Linear with fp32 weights inside one bf16 autocast region: two casts more
  conv            nn.Conv2d call (cuDNN)
  group_norm      nn.GroupNorm call
  layer_norm      nn.LayerNorm call
  silu            F.silu
  sdpa            F.scaled_dot_product_attention (q, k, v all the chain's tensor)
  reduce          x.sum(dim) with autograd (SumBackward1: an expand)
  mul_scalar      x * 0.5 (MulBackward1: one kernel, nothing saved)
  dropout         nn.Dropout(0.05) in training (native_dropout: mask and output)
  float8_linear_tensorwise, float8_linear_rowwise
                  torchao's Float8Linear (convert_to_float8_training, that recipe; bias-free,
                  64 x 64) call: its autograd Function, the casts' ATen ops (14 a rowwise cast,
                  11 a tensorwise one), two Float8TrainingTensor constructions and mm's
                  __torch_dispatch__ (preprocess_addmm, the reciprocals, _scaled_mm) in forward;
                  four casts, two dispatched mms and their layout copies in backward (when
                  torchao is installed and the GPU is sm89 or newer)
With --ckpt-region R every chain runs as checkpointed regions of R ops, so each figure carries
torch.utils.checkpoint's costs (its saved-tensor hooks per op, the region's own set-up, and in
backward the recomputation).
Also, as the reference that lua/hw/calibrated/h200_torch.lua's host_kernel_us came from on
another machine instance, measure_module_dispatch.py's blocks on this one (host time per kernel).

  python3 validation/harness/measure_host_classes.py --out host_classes_h200.json
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

N = 400
REPS = 9
DEV = "cuda"
BF = torch.bfloat16


class Identity(nn.Module):
    def forward(self, x):
        return x


def make_classes():
    """name -> (make_input, ops, autocast): ops[i](x) -> y with x's shape and dtype, so chains
    compose; each position has its own module or weight, as in a real model (every weight's
    gradient is stolen by AccumulateGrad once, never accumulated)."""
    c = {}
    small = lambda: torch.randn(64, 64, device=DEV, dtype=BF, requires_grad=True)
    img = lambda: torch.randn(1, 32, 8, 8, device=DEV, dtype=BF, requires_grad=True)
    qkv = lambda: torch.randn(1, 2, 32, 64, device=DEV, dtype=BF, requires_grad=True)
    per = lambda mk: [mk() for _ in range(N)]
    idents = per(Identity)
    c["module_call"] = (small, [lambda x, m=m: m(x) for m in idents], False)
    ws = per(lambda: torch.randn(64, 64, device=DEV, dtype=BF, requires_grad=True))
    c["pointwise"] = (small, [lambda x, w=w: x * w for w in ws], False)
    k = torch.randn(64, 64, device=DEV, dtype=BF)
    c["add"] = (small, [lambda x: x + k] * N, False)
    c["view"] = (small, [lambda x: x.view(4096).view(64, 64)] * N, False)
    c["cast"] = (small, [lambda x: x.to(torch.float32).to(BF)] * N, False)
    lins = per(lambda: nn.Linear(64, 64, device=DEV, dtype=BF))
    c["linear"] = (small, [lambda x, m=m: m(x) for m in lins], False)
    lins_nb = per(lambda: nn.Linear(64, 64, bias=False, device=DEV, dtype=BF))
    c["linear_nobias"] = (small, [lambda x, m=m: m(x) for m in lins_nb], False)
    # a frozen Linear (LoRA's and QLoRA's base layers): it saves only its weight, and its
    # backward node computes the input's gradient alone, with no AccumulateGrad after it
    lins_fz = per(lambda: nn.Linear(64, 64, bias=False, device=DEV, dtype=BF).requires_grad_(False))
    c["linear_frozen"] = (small, [lambda x, m=m: m(x) for m in lins_fz], False)
    # peft's LoRA layer around a frozen Linear (r 8, alpha 8; dropout 0, peft's Identity, and
    # 0.05): the whole layer, base, adapters, scaling and add, as one op of the chain
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        LoraConfig = None
    if LoraConfig is not None:
        for key, p in (("lora_linear", 0.0), ("lora_linear_dropout", 0.05)):
            holder = nn.ModuleList([nn.Module() for _ in range(N)])
            for h in holder:
                h.lin = nn.Linear(64, 64, bias=False, device=DEV, dtype=BF)
            holder.requires_grad_(False)
            holder = inject_adapter_in_model(LoraConfig(r=8, lora_alpha=8, lora_dropout=p,
                                                        target_modules=["lin"]), holder)
            holder.to(DEV)  # peft keeps the adapters in fp32 (autocast_adapter_dtype), as in training
            c[key] = (small, [lambda x, m=h.lin: m(x) for h in holder], False)
    lins32 = per(lambda: nn.Linear(64, 64, device=DEV, dtype=torch.float32))
    c["autocast_linear"] = (small, [lambda x, m=m: m(x) for m in lins32], True)
    convs = per(lambda: nn.Conv2d(32, 32, 3, padding=1, device=DEV, dtype=BF))
    c["conv"] = (img, [lambda x, m=m: m(x) for m in convs], False)
    gns = per(lambda: nn.GroupNorm(8, 32, device=DEV, dtype=BF))
    c["group_norm"] = (img, [lambda x, m=m: m(x) for m in gns], False)
    lns = per(lambda: nn.LayerNorm(64, device=DEV, dtype=BF))
    c["layer_norm"] = (small, [lambda x, m=m: m(x) for m in lns], False)
    c["silu"] = (small, [lambda x: F.silu(x)] * N, False)
    c["sdpa"] = (qkv, [lambda x: F.scaled_dot_product_attention(x, x, x)] * N, False)
    c["reduce"] = (small, [lambda x: x.sum(0, keepdim=True).expand(64, 64)] * N, False)
    c["mul_scalar"] = (small, [lambda x: x * 0.5] * N, False)
    drop = nn.Dropout(0.05)
    c["dropout"] = (small, [lambda x: drop(x)] * N, False)
    # torchao's Float8Linear: the Python it runs per call (tensor subclass creation,
    # __torch_dispatch__, the Function's backward) is host time no ATen op class holds
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        convert_to_float8_training = None
    if convert_to_float8_training is not None and torch.cuda.get_device_capability() >= (8, 9):
        for key, recipe in (("float8_linear_tensorwise", "tensorwise"), ("float8_linear_rowwise", "rowwise")):
            holder = nn.ModuleList([nn.Linear(64, 64, bias=False, device=DEV, dtype=BF) for _ in range(N)])
            convert_to_float8_training(holder, config=Float8LinearConfig.from_recipe_name(recipe))
            c[key] = (small, [lambda x, m=m: m(x) for m in holder], False)
    return c


REGION = 0  # > 0: the chain runs as checkpointed regions of REGION ops (--ckpt-region)


def time_chain(make, ops, n, autocast=False):
    from torch.utils.checkpoint import checkpoint
    x0 = make()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    y = x0
    with torch.autocast("cuda", dtype=BF, enabled=autocast):
        if REGION > 0:
            def region(x, lo):
                for i in range(lo, min(lo + REGION, n)):
                    x = ops[i](x)
                return x
            for lo in range(0, n, REGION):
                y = checkpoint(region, y, lo, use_reentrant=False)
        else:
            for i in range(n):
                y = ops[i](y)
    loss = y.float().sum()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    loss.backward()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def aten_no_grad(n):
    a = torch.randn(64, 64, device=DEV, dtype=BF)
    b = torch.randn(64, 64, device=DEV, dtype=BF)
    with torch.no_grad():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = a
        for _ in range(n):
            y = torch.add(y, b)
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def module_blocks_us():
    """measure_module_dispatch.py's reference: host time per kernel of its blocks on this host."""
    import measure_module_dispatch as mmd  # noqa: E402
    import io, contextlib, re
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            mmd.main()
        except SystemExit:
            pass
    m = re.search(r"host per kernel ([0-9.]+) us", buf.getvalue())
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ckpt-region", type=int, default=0,
                    help="run each chain as torch.utils.checkpoint(use_reentrant=False) regions of "
                         "this many ops: backward then includes their recomputation")
    ap.add_argument("--no-reference", action="store_true", help="skip measure_module_dispatch's blocks")
    a = ap.parse_args()
    global REGION
    REGION = a.ckpt_region
    torch.manual_seed(0)
    classes = make_classes()
    for make, ops, ac in classes.values():   # warm up every kernel and cuDNN's plans
        for _ in range(3):
            time_chain(make, ops, N, ac)
    samples = {k: ([], []) for k in classes}
    base = ([], [])
    aten = []
    for _ in range(REPS):
        f0, b0 = time_chain(classes["add"][0], [], 0)
        base[0].append(f0); base[1].append(b0)
        aten.append(aten_no_grad(N) / N)
        for k, (make, ops, ac) in classes.items():
            f, b = time_chain(make, ops, N, ac)
            samples[k][0].append(f / N)
            samples[k][1].append(b / N)
    b0 = statistics.median(base[1])
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "n": N, "reps": REPS,
           "ckpt_region": REGION,
           "date": time.strftime("%Y-%m-%d"), "classes": {}}
    us = lambda s: round(s * 1e6, 3)
    out["classes"]["aten"] = {"fwd_us": us(statistics.median(aten)), "fwd_best_us": us(min(aten)),
                              "fwd_worst_us": us(max(aten)), "bwd_us": 0.0}
    for k, (fs, bs) in samples.items():
        bs = [b - b0 / N for b in bs]
        out["classes"][k] = {"fwd_us": us(statistics.median(fs)), "fwd_best_us": us(min(fs)),
                             "fwd_worst_us": us(max(fs)), "bwd_us": us(statistics.median(bs)),
                             "bwd_best_us": us(min(bs)), "bwd_worst_us": us(max(bs))}
    out["module_blocks_us_per_kernel"] = None if a.no_reference else module_blocks_us()
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for k, v in out["classes"].items():
        print(f"{k:16s} fwd {v['fwd_us']:8.2f} us  bwd {v['bwd_us']:8.2f} us  "
              f"(fwd best {v['fwd_best_us']:.2f}, worst {v['fwd_worst_us']:.2f})")
    print("module blocks, host per kernel:", out["module_blocks_us_per_kernel"], "us")


if __name__ == "__main__":
    main()
