"""Device time of cuDNN's masked SDPA kernels against the sequence length's alignment: one
packed row's block-causal boolean mask [1, 1, s, s] (transformers' padding-free batches hand SDPA
such a mask), head_dim 64 and 128, 32 heads, at lengths that are and are not multiples of 8, 64 and
128, each kernel's name and time (torch.profiler, median of 5 calls after warm-up): whether a
length the mask's rows cannot be vectorised over changes the kernel or its time.

  python3 validation/harness/measure_sdpa_align.py --out F.json
"""
import argparse
import json
import statistics
import time

LENGTHS = (2048, 2049, 2056, 2112, 4096, 4104, 4160, 4608, 4693, 4696, 4704, 4736)


def kernels(fn, reps=5):
    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(reps):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        t = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                t[e.name[:120]] = t.get(e.name[:120], 0.0) + getattr(e, "device_time_total", 0.0) / 1e3
        runs.append(t)
    total = statistics.median(sum(t.values()) for t in runs)
    names = {k: round(statistics.median(t.get(k, 0.0) for t in runs), 5) for k in runs[0]}
    return round(total, 5), names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = torch.device("cuda", 0)
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "measured": time.strftime("%Y-%m-%d"), "rows": []}
    for d in (64, 128):
        for s in LENGTHS:
            g = torch.Generator(device=dev).manual_seed(0)
            mk = lambda: torch.randn(1, s, 32, d, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2).requires_grad_(True)
            q, k, v = mk(), mk(), mk()
            do = torch.randn(1, s, 32, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
            i = torch.arange(s, device=dev)
            seq = (i * 7 // s)  # seven packed sequences of equal length
            mask = ((i[None, :] <= i[:, None]) & (seq[None, :] == seq[:, None]))[None, None]
            row = {"dim": d, "seq": s}
            for mname, m in (("bool", mask), ("causal", None)):
                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=m is None)

                def fwdbwd():
                    F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=m is None).backward(do)
                    q.grad = k.grad = v.grad = None
                try:
                    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                        row[mname] = {"fwd": kernels(fwd), "fwdbwd": kernels(fwdbwd)}
                except Exception as ex:
                    row[mname] = {"error": repr(ex)[:160]}
            res["rows"].append(row)
            print(d, s, {m: (row[m]["fwd"][0], row[m]["fwdbwd"][0]) if "fwd" in row[m] else row[m]
                         for m in ("bool", "causal")}, flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
