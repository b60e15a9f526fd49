#!/usr/bin/env python3
"""Which fused attention does PyTorch's scaled_dot_product_attention choose, and what does each
backend cost in time and memory, for the attention shapes of LLaMA2 (HF layout) and SDXL.

For each shape: q, k, v in bf16 laid out as transformers' LlamaAttention leaves them
((batch, seq, heads, dim) in memory, viewed as (batch, heads, seq, dim)); the backend PyTorch
picks by default is read from the CUDA kernel names under torch.profiler; then each backend
(flash, efficient, cudnn, math where it fits) is timed with CUDA events, forward alone and forward
plus backward, median of timed runs after warm-up, with the extra memory each needs (peak
allocated minus what the inputs hold).

  measure_sdpa.py --out validation/results/sdpa_h200_dev.json --lua lua/hw/calibrated/h200_sdpa.lua
"""
import argparse
import json
import os
import statistics
import sys
import time

MIB = float(1 << 20)

SHAPES = [  # (tag, batch, heads, seq_q, seq_k, dim, causal)
    ("llama7b_b1_s2048", 1, 32, 2048, 2048, 128, True),
    ("llama7b_b4_s2048", 4, 32, 2048, 2048, 128, True),
    ("llama7b_b1_s4096", 1, 32, 4096, 4096, 128, True),
    ("llama7b_b1_s8192", 1, 32, 8192, 8192, 128, True),
    ("llama13b_b4_s2048", 4, 40, 2048, 2048, 128, True),
    ("sdxl_l1_b1", 1, 10, 4096, 4096, 64, False),
    ("sdxl_l2_b1", 1, 20, 1024, 1024, 64, False),
    ("sdxl_cross_l1_b1", 1, 10, 4096, 77, 64, False),
]


def kernel_family(names):
    fam = set()
    for n in names:
        l = n.lower()
        if "cudnn" in l or "fort_native_sdpa" in l:
            fam.add("cudnn")
        elif "flash" in l:
            fam.add("flash")
        elif "fmha" in l or "cutlassf" in l or "cutlassb" in l or "mem_eff" in l or "attentionkernel" in l:
            fam.add("efficient")
    return sorted(fam)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--lua")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = torch.device("cuda", 0)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "measured": time.strftime("%Y-%m-%d", time.gmtime()),
           "flags": {"flash": torch.backends.cuda.flash_sdp_enabled(),
                     "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                     "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
                     "math": torch.backends.cuda.math_sdp_enabled()},
           "shapes": []}

    def make(b, h, sq, sk, d):
        g = torch.Generator(device=dev).manual_seed(0)
        q = torch.randn(b, sq, h, d, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2)
        k = torch.randn(b, sk, h, d, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2)
        v = torch.randn(b, sk, h, d, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2)
        for t in (q, k, v):
            t.requires_grad_(True)
        return q, k, v

    def timed(fn, reps=10):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            torch.cuda.synchronize()
            out.append(e0.elapsed_time(e1))
        return statistics.median(out)

    for tag, b, h, sq, sk, d, causal in SHAPES:
        q, k, v = make(b, h, sq, sk, d)
        do = torch.randn(b, sq, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
        causal_ok = causal and sq == sk
        entry = {"tag": tag, "batch": b, "heads": h, "seq_q": sq, "seq_k": sk, "dim": d,
                 "causal": causal_ok, "backends": {}}

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal_ok)

        def fwdbwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal_ok)
            o.backward(do)
            q.grad = k.grad = v.grad = None

        # default choice, from the kernels that ran
        try:
            from torch.profiler import profile, ProfilerActivity
            fwdbwd()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fwdbwd()
                torch.cuda.synchronize()
            names = sorted({e.key for e in prof.key_averages()
                            if any(s in e.key.lower() for s in ("flash", "fmha", "cudnn", "attention", "sdpa", "cutlass"))})
            entry["default_kernels"] = names[:12]
            entry["default_backend"] = kernel_family(names) or ["unknown"]
        except Exception as ex:  # the profiler is a convenience; timings follow regardless
            entry["default_backend_error"] = repr(ex)[:200]
        entry["default_fwd_ms"] = timed(fwd)
        entry["default_fwdbwd_ms"] = timed(fwdbwd)

        flops_fwd = 4.0 * b * h * sq * sk * d * (0.5 if causal_ok else 1.0)
        for bn, be in backends.items():
            if bn == "math" and b * h * sq * sk * 4 > 8 * (1 << 30):
                entry["backends"][bn] = {"skipped": "score matrix too large"}
                continue
            try:
                with sdpa_kernel([be]):
                    torch.cuda.synchronize()
                    base = torch.cuda.memory_allocated(dev)
                    torch.cuda.reset_peak_memory_stats(dev)
                    o = fwd()
                    torch.cuda.synchronize()
                    fwd_extra = torch.cuda.max_memory_allocated(dev) - base
                    saved = torch.cuda.memory_allocated(dev) - base  # output + saved for backward
                    torch.cuda.reset_peak_memory_stats(dev)
                    o.backward(do)
                    torch.cuda.synchronize()
                    bwd_extra = torch.cuda.max_memory_allocated(dev) - base
                    del o
                    q.grad = k.grad = v.grad = None
                    tf = timed(fwd)
                    tfb = timed(fwdbwd)
                entry["backends"][bn] = {
                    "fwd_ms": tf, "fwdbwd_ms": tfb,
                    "fwd_tflops": flops_fwd / (tf * 1e-3) / 1e12,
                    "fwdbwd_tflops": 3.5 * flops_fwd / (tfb * 1e-3) / 1e12,
                    "fwd_peak_extra_mib": fwd_extra / MIB, "held_after_fwd_mib": saved / MIB,
                    "bwd_peak_extra_mib": bwd_extra / MIB}
            except Exception as ex:
                entry["backends"][bn] = {"error": repr(ex)[:200]}
                q.grad = k.grad = v.grad = None
        res["shapes"].append(entry)
        print(f"{tag:22s} default {entry.get('default_backend')} fwd {entry['default_fwd_ms']:.3f} ms "
              f"fwd+bwd {entry['default_fwdbwd_ms']:.3f} ms | " +
              " ".join(f"{bn}:{x.get('fwdbwd_ms', float('nan')):.3f}" for bn, x in entry["backends"].items()),
              flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()

    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    if a.lua:
        L = ["-- PyTorch scaled_dot_product_attention on this GPU, by backend (bf16, HF LLaMA layout).",
             f"-- GPU {res['gpu']}, torch {res['torch']}, CUDA {res['cuda']}, cuDNN {res['cudnn']}, "
             f"date {res['measured']}.",
             "-- Made by validation/harness/measure_sdpa.py (see validation/PROVENANCE.md).",
             "-- fwd_ms / fwdbwd_ms: CUDA-event medians; tflops count 4*b*h*sq*sk*d (halved when causal),",
             "-- times 3.5 for forward plus backward; *_extra_mib: peak allocated above the inputs.",
             "return {", f'  gpu = "h200", name = "{res["gpu"]}", measured = "{res["measured"]}",',
             f'  torch = "{res["torch"]}", cudnn = {res["cudnn"]},', "  sdpa = {"]
        for e in res["shapes"]:
            dflt = ",".join(e.get("default_backend", ["unknown"]))
            L.append(f'    {{tag="{e["tag"]}", batch={e["batch"]}, heads={e["heads"]}, seq_q={e["seq_q"]}, '
                     f'seq_k={e["seq_k"]}, dim={e["dim"]}, causal={str(e["causal"]).lower()}, '
                     f'default="{dflt}", default_fwd_ms={e["default_fwd_ms"]:.4f}, '
                     f'default_fwdbwd_ms={e["default_fwdbwd_ms"]:.4f}, backends = {{')
            for bn, x in e["backends"].items():
                if "fwd_ms" in x:
                    L.append(f'      {bn} = {{fwd_ms={x["fwd_ms"]:.4f}, fwdbwd_ms={x["fwdbwd_ms"]:.4f}, '
                             f'fwd_peak_extra_mib={x["fwd_peak_extra_mib"]:.2f}, '
                             f'held_after_fwd_mib={x["held_after_fwd_mib"]:.2f}, '
                             f'bwd_peak_extra_mib={x["bwd_peak_extra_mib"]:.2f}}},')
            L.append("    }},")
        L += ["  },", "}", ""]
        tmp = a.lua + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(L))
        os.replace(tmp, a.lua)
    return 0


if __name__ == "__main__":
    sys.exit(main())
