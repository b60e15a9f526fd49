"""Device time of scaled_dot_product_attention's kernels, per backend and shape, from
torch.profiler (CUPTI kernel durations summed over a call), so the figure is the kernels' own
time and carries no launch latency or host dispatch: measure_sdpa.py's single calls timed with
CUDA events include both, which puts small shapes (SDXL's 77-token cross-attention, its 32x32
self-attention) at several times their kernel time. Shapes: measure_sdpa.py's, SDXL's four
attention shapes at 512, 768 and 1024 px and batch 1, 2, 4, and LLaMA-like shapes with an additive
mask (masked = true: Mistral past its sliding window), whose kernels skip no block. Each figure is the median over 5
profiled calls after warm-up; fwd_kernel_ms is the forward alone, fwdbwd_kernel_ms forward and
backward (the backward's dO.O dot product and dQ conversion included).

  python3 validation/harness/measure_sdpa_kernels.py --out validation/results/sdpa_kernels_h200.json
  python3 validation/harness/measure_sdpa_kernels.py --from validation/results/sdpa_kernels_h200.json \
      --lua lua/hw/calibrated/h200_sdpa_kernels.lua      (the calibrated table vrsim reads)
"""
import argparse
import json
import statistics
import time


BASE = [  # (tag, batch, heads, seq_q, seq_k, dim, causal): measure_sdpa.py's
    ("llama7b_b1_s2048", 1, 32, 2048, 2048, 128, True),
    ("llama7b_b4_s2048", 4, 32, 2048, 2048, 128, True),
    ("llama7b_b1_s4096", 1, 32, 4096, 4096, 128, True),
    ("llama7b_b1_s8192", 1, 32, 8192, 8192, 128, True),
    ("llama13b_b4_s2048", 4, 40, 2048, 2048, 128, True),
]


MASKED = [  # with an additive attention mask [1, 1, sq, sk] (a sliding window, as Mistral's
    # create_sliding_window_causal_mask hands SDPA past its window): no block is skipped
    ("masked_h32_d128_b1_s1024", 1, 32, 1024, 1024, 128, False),
    ("masked_h32_d128_b1_s2048", 1, 32, 2048, 2048, 128, False),
    ("masked_h32_d128_b4_s2048", 4, 32, 2048, 2048, 128, False),
    ("masked_h32_d128_b1_s4096", 1, 32, 4096, 4096, 128, False),
    ("masked_h32_d128_b1_s8192", 1, 32, 8192, 8192, 128, False),
]


MASKED_MORE = [  # head_dim 64 (Llama 3.2 1B-like), and keys a mask row's 16 bytes do not divide: a
    # [b, 1, s, s] bf16 mask whose row stride is not a multiple of 16 bytes, which cuDNN's forward
    # reads far slower (a padded batch's longest sequence, a packed row of any length)
    ("masked_h32_d64_b8_s1024", 8, 32, 1024, 1024, 64, False),
    ("masked_h32_d64_b1_s2048", 1, 32, 2048, 2048, 64, False),
    ("masked_h32_d64_b1_s4096", 1, 32, 4096, 4096, 64, False),
    ("masked_h32_d64_b1_s8192", 1, 32, 8192, 8192, 64, False),
    ("masked_h32_d64_b8_s1021", 8, 32, 1021, 1021, 64, False),
    ("masked_h32_d64_b1_s1025", 1, 32, 1025, 1025, 64, False),
    ("masked_h32_d64_b1_s2049", 1, 32, 2049, 2049, 64, False),
    ("masked_h32_d64_b1_s4097", 1, 32, 4097, 4097, 64, False),
    ("masked_h32_d64_b1_s4693", 1, 32, 4693, 4693, 64, False),
    ("masked_h32_d64_b1_s8193", 1, 32, 8193, 8193, 64, False),
    ("masked_h32_d128_b1_s1025", 1, 32, 1025, 1025, 128, False),
    ("masked_h32_d128_b1_s2049", 1, 32, 2049, 2049, 128, False),
    ("masked_h32_d128_b4_s2045", 4, 32, 2045, 2045, 128, False),
    ("masked_h32_d128_b1_s4097", 1, 32, 4097, 4097, 128, False),
    ("masked_h32_d128_b1_s8193", 1, 32, 8193, 8193, 128, False),
]


LONG = [  # torchtitan's context-parallel rows (Llama 3.1 8B, k and v repeated to 32 heads, 32768
    # tokens on each rank): the ring's calls with load balancing, causal on the rank's own two
    # chunks at step 0, then non-causal on half of the keys or half of the queries
    # (torch.distributed.tensor.experimental._attention._templated_ring_attention)
    ("long_h32_d128_b1_s16384", 1, 32, 16384, 16384, 128, True),
    ("long_h32_d128_b1_s32768", 1, 32, 32768, 32768, 128, True),
    ("long_h32_d128_b1_q32768_k16384", 1, 32, 32768, 16384, 128, False),
    ("long_h32_d128_b1_q16384_k32768", 1, 32, 16384, 32768, 128, False),
    ("long_h32_d128_b1_q16384_k16384", 1, 32, 16384, 16384, 128, False),
]


def sdxl_shapes():
    out = []
    for px in (512, 768, 1024):
        l1, l2 = (px // 16) ** 2, (px // 32) ** 2   # tokens at the two attention levels
        for b in (1, 2, 4):
            out += [(f"sdxl{px}_l1_self_b{b}", b, 10, l1, l1, 64, False),
                    (f"sdxl{px}_l1_cross_b{b}", b, 10, l1, 77, 64, False),
                    (f"sdxl{px}_l2_self_b{b}", b, 20, l2, l2, 64, False),
                    (f"sdxl{px}_l2_cross_b{b}", b, 20, l2, 77, 64, False)]
    return out


def kernel_ms(fn, reps=5):
    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        ts.append(sum(getattr(e, "device_time_total", 0.0) for e in prof.events()
                      if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3)
    return statistics.median(ts)


def shapes_of(res):
    """A results file's rows as this script's shapes: its own, or measure_flex_attention.py's rows of
    one document a row (causal flex attention: its kernels skip the blocks above the diagonal, as
    the causal SDPA kernels do) as the backend "flex"; the packed rows are not curve points."""
    if "shapes" in res:
        return res["shapes"]
    out = []
    for r in res["rows"]:
        if r.get("docs") != 1 or "fwd_ms" not in r:
            continue
        out.append({"tag": "flex_h%d_d%d_b%d_s%d" % (r["heads"], r["dim"], r["batch"], r["seq"]), "batch": r["batch"],
                    "heads": r["heads"], "seq_q": r["seq"], "seq_k": r["seq"], "dim": r["dim"], "causal": True,
                    "masked": False,
                    "backends": {"flex": {"fwd_kernel_ms": r["fwd_ms"], "fwdbwd_kernel_ms": r["fwdbwd_ms"]}}})
    return out


def write_lua(res, path, source, merged=()):
    L = ["-- Device time of scaled_dot_product_attention's kernels per backend and shape (bf16), from",
         "-- torch.profiler: the kernels' own time, no launch or host dispatch in it (kernel_time = true;",
         "-- sim/cost.c reads every row). GPU %s, torch %s, cuDNN %s, measured %s." % (
             res["gpu"], res["torch"], res["cudnn"], res["measured"]),
         "-- Made by python3 validation/harness/measure_sdpa_kernels.py --from %s%s --lua %s" % (
             source, "".join(" --merge " + m for m in merged), path),
         "-- (measure_sdpa_kernels.py --out on one %s: %s; validation/PROVENANCE.md)." % (
             res["gpu"], ", ".join((source,) + tuple(merged))),
         "return {", "  sdpa = {"]
    for e in res["shapes"]:
        bs = ", ".join("%s = {fwd_ms=%.5f, fwdbwd_ms=%.5f}" % (bn, x["fwd_kernel_ms"], x["fwdbwd_kernel_ms"])
                       for bn, x in e["backends"].items() if "fwd_kernel_ms" in x)
        L.append('    {tag="%s", batch=%d, heads=%d, seq_q=%d, seq_k=%d, dim=%d, causal=%s,%s kernel_time=true, '
                 'backends = {%s}},' % (e["tag"], e["batch"], e["heads"], e["seq_q"], e["seq_k"], e["dim"],
                                        "true" if e["causal"] else "false",
                                        " masked=true," if e.get("masked") else "", bs))
    L += ["  },", "}"]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--from", dest="src", help="a JSON file this script wrote: convert it, measure nothing")
    ap.add_argument("--lua", help="with --from: write the calibrated Lua table here")
    ap.add_argument("--masked-only", action="store_true", help="measure only the masked shapes")
    ap.add_argument("--masked-more", action="store_true",
                    help="measure only MASKED_MORE (head_dim 64, and mask rows of unaligned length)")
    ap.add_argument("--long-only", action="store_true",
                    help="measure only the long shapes of the context-parallel ring (LONG)")
    ap.add_argument("--merge", nargs="*", default=[], help="with --from: more JSON files to add")
    a = ap.parse_args()
    if a.src:
        res = json.load(open(a.src))
        for extra in a.merge:
            res["shapes"] += shapes_of(json.load(open(extra)))
        write_lua(res, a.lua, a.src, tuple(a.merge))
        return
    if not a.out:
        ap.error("--out is required to measure")
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = torch.device("cuda", 0)
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "measured": time.strftime("%Y-%m-%d"),
           "shapes": []}
    if a.long_only:
        todo = [s + (False,) for s in LONG]
    elif a.masked_more:
        todo = [s + (True,) for s in MASKED_MORE]
    else:
        shapes = [(s, False) for s in BASE + sdxl_shapes()] if not a.masked_only else []
        todo = [s + (m,) for s, m in shapes] + [s + (True,) for s in MASKED]
    for tag, b, h, sq, sk, d, causal, masked in todo:
        g = torch.Generator(device=dev).manual_seed(0)
        mk = lambda s: torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2).requires_grad_(True)
        q, k, v = mk(sq), mk(sk), mk(sk)
        do = torch.randn(b, sq, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
        mask = None
        if masked:   # a sliding window of half the sequence, as an additive bf16 bias
            i = torch.arange(sq, device=dev)
            keep = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < max(sq // 2, 1))
            mask = torch.zeros(1, 1, sq, sk, device=dev, dtype=torch.bfloat16).masked_fill(~keep, float("-inf"))
        entry = {"tag": tag, "batch": b, "heads": h, "seq_q": sq, "seq_k": sk, "dim": d,
                 "causal": causal, "masked": masked, "backends": {}}
        for bn, be in backends.items():
            def fwd():
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)

            def fwdbwd():
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal).backward(do)
                q.grad = k.grad = v.grad = None
            try:
                with sdpa_kernel([be]):
                    entry["backends"][bn] = {"fwd_kernel_ms": round(kernel_ms(fwd), 5),
                                             "fwdbwd_kernel_ms": round(kernel_ms(fwdbwd), 5)}
            except Exception as ex:
                entry["backends"][bn] = {"error": repr(ex)[:160]}
        res["shapes"].append(entry)
        print(tag, {bn: x.get("fwd_kernel_ms", x.get("error", "")[:30]) for bn, x in entry["backends"].items()},
              {bn: x.get("fwdbwd_kernel_ms") for bn, x in entry["backends"].items()}, flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
