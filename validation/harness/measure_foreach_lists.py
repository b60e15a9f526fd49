"""The optimizer's foreach kernels over parameter lists of different make-up, in one process: a
7B layer stack's (two Llama-2-7B layers, measure_torch_ops.py's list) against a small model's
whose one embedding holds half its elements (Llama-3.2-1B-like cut to 4 layers: 128256 x 2048
tied), both bf16: each op's time (CUDA events, best of 3 means of 10) and bandwidth, to see
whether a list's make-up moves multi_tensor_apply's rate beside the GPU's own spread.

  python3 validation/harness/measure_foreach_lists.py --out F.json
"""
import argparse
import json
import time


def lists():
    h7, f7 = 4096, 11008
    seven = [(h7, h7)] * 4 + [(f7, h7), (f7, h7), (h7, f7), (h7,), (h7,)]
    seven = seven * 2
    h, f = 2048, 8192
    small = [(128256, h)] + ([(h, h), (512, h), (512, h), (h, h), (f, h), (f, h), (h, f), (h,), (h,)] * 4) + [(h,)]
    return {"llama2_7b_2_layers": seven, "llama32_1b_4_layers": small}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    from measure_torch_ops import timed  # best of 3 means of back-to-back calls, CUDA events
    dev = torch.device("cuda", 0)
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "measured": time.strftime("%Y-%m-%d"), "rows": []}

    for rnd in range(2):  # each list twice, interleaved, for the GPU's drift
        for name, shapes in lists().items():
            p = [torch.rand(s, device=dev, dtype=torch.bfloat16) for s in shapes]
            g = [torch.rand(s, device=dev, dtype=torch.bfloat16) for s in shapes]
            d = [torch.rand(s, device=dev, dtype=torch.bfloat16) + 1 for s in shapes]
            n = sum(x.numel() for x in p)
            b = 2 * n  # bytes of one bf16 list
            for op, fn, moved in (
                    ("_foreach_mul_ scalar", lambda: torch._foreach_mul_(p, 0.999), 2 * b),
                    ("_foreach_sqrt", lambda: torch._foreach_sqrt(p), 2 * b),
                    ("_foreach_lerp_", lambda: torch._foreach_lerp_(p, g, 0.1), 3 * b),
                    ("_foreach_addcdiv_ scalarlist", lambda: torch._foreach_addcdiv_(p, g, d, [1e-3] * len(p)), 4 * b)):
                ms = timed(fn, 10)
                res["rows"].append({"round": rnd, "list": name, "tensors": len(p), "elements": n, "op": op,
                                    "bytes": moved, "ms": round(ms, 5), "gbps": round(moved / ms / 1e6, 1)})
                print(rnd, name, len(p), n, op, round(ms, 4), round(moved / ms / 1e6, 1), flush=True)
            del p, g, d
            torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
