"""gpt-oss's eager attention with sinks (transformers 5.25 modeling_gpt_oss.eager_attention_forward),
alone on the GPU: every ATen op of its forward and backward with the device time of its own kernels,
grouped by op and input shapes (torch.profiler, median over profiled calls of forward + backward).

The attention's scores are (b, heads, s, s + 1) once the sink column is concatenated: an odd last
dimension. This times, op by op at the shapes gpt-oss-20b trains at, what that width costs: the
mask's broadcast add, the cat, the row max and its broadcast subtraction, the softmax over odd
rows, and the product of the probabilities' strided [..., :-1] slice (row stride s + 1 elements)
with the values, and each op's backward. vrsim prices these ops by their class (Op kind); this
file is the evidence for the classes (sinks_attention_classes.py turns it into the
lua/hw/calibrated/*_sinks_attention.lua tables vrsim reads).

  python3 validation/harness/profile_sinks_attention.py --out F.json [--batch 1 2] [--seq 4096]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


class Module(torch.nn.Module):
    """The attributes eager_attention_forward reads of GptOssAttention."""

    def __init__(self, heads, kv_heads):
        super().__init__()
        self.num_key_value_groups = heads // kv_heads
        self.sinks = torch.nn.Parameter(torch.zeros(heads, device="cuda", dtype=torch.bfloat16))


def attention(module, q, k, v, mask, scaling):
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
    return eager_attention_forward(module, q, k, v, mask, scaling, dropout=0.0)[0]


def profiled(fn):
    """fn() under torch.profiler: ({(event, input shapes): (calls, self device us)} for every event
    with device time of its own, the ATen ops and, under their names, the kernels;
    {kernel: (launches, device us)})."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages(group_by_input_shape=True):
        us = getattr(e, "self_device_time_total", 0.0)
        if us > 0:
            out[(e.key, str(e.input_shapes))] = (e.count, us)
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            c, t = kernels.get(e.name, (0, 0.0))
            kernels[e.name] = (c + 1, t + getattr(e, "device_time_total", 0.0))
    return out, kernels


def measure(batch, seq, heads=64, kv_heads=8, head_dim=64, calls=5):
    m = Module(heads, kv_heads)
    bf = torch.bfloat16
    q = torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=bf, requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, head_dim, device="cuda", dtype=bf, requires_grad=True)
    v = torch.randn(batch, kv_heads, seq, head_dim, device="cuda", dtype=bf, requires_grad=True)
    # transformers' causal mask for eager attention: (b, 1, s, s) in the scores' dtype
    mask = torch.full((seq, seq), torch.finfo(bf).min, device="cuda", dtype=bf).triu(1)
    mask = mask[None, None].expand(batch, 1, seq, seq)
    grad = torch.randn(batch, seq, heads, head_dim, device="cuda", dtype=bf)

    def step():
        out = attention(m, q, k, v, mask, head_dim ** -0.5)
        out.backward(grad)
        q.grad = k.grad = v.grad = m.sinks.grad = None

    for _ in range(3):
        step()
    runs = [profiled(step) for _ in range(calls)]
    ops = {}
    for key in runs[0][0]:
        ops[key] = (runs[0][0][key][0], statistics.median(r[0].get(key, (0, 0.0))[1] for r in runs))
    kern = {}
    for key in runs[0][1]:
        kern[key] = (runs[0][1][key][0], statistics.median(r[1].get(key, (0, 0.0))[1] for r in runs))
    return {"batch": batch, "seq": seq, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "ops": [{"op": o, "shapes": s, "calls": c, "us": round(us, 2)}
                    for (o, s), (c, us) in sorted(ops.items(), key=lambda kv: -kv[1][1])],
            "kernels": [{"kernel": n, "calls": c, "us": round(us, 2)}
                        for n, (c, us) in sorted(kern.items(), key=lambda kv: -kv[1][1])]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seq", type=int, default=4096)
    a = ap.parse_args()
    rows = [measure(b, a.seq) for b in a.batch]
    with open(a.out, "w") as f:
        json.dump({"rows": rows, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}, f)
    for r in rows:
        print("batch %d seq %d" % (r["batch"], r["seq"]))
        for o in r["ops"][:30]:
            print("  %-40s %6d %10.1f us  %s" % (o["op"], o["calls"], o["us"], o["shapes"][:90]))


if __name__ == "__main__":
    main()
