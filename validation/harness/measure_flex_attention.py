"""FlexAttention as torchtune's packed datasets run it (torchtune/modules/attention_utils.py:
create_block_mask of a document-causal mask_mod per batch, then torch.compile(flex_attention,
dynamic=False) with that BlockMask), per shape and packing: each call's kernels and their time
(torch.profiler, median of 5 after warm-up), forward alone and forward + backward, the BlockMask's
partial and full 128 x 128 blocks, the bytes the forward leaves allocated (its output and
log-sum-exp) and its peak, and create_block_mask's own time and peak. For pricing flex attention
by the blocks it computes, and its memory, on the GPU.

  python3 validation/harness/measure_flex_attention.py --out F.json
"""
import argparse
import json
import time

from measure_sdpa_align import kernels  # each kernel's median time over 5 profiled calls


def doc_lengths(S, docs, seed):
    import random
    if docs == 1:
        return [S]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, S), docs - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [S])]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=240)
    a = ap.parse_args()
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    t0 = time.time()
    dev = torch.device("cuda", 0)
    flex = torch.compile(flex_attention, dynamic=False)
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "measured": time.strftime("%Y-%m-%d"), "rows": []}
    shapes = [(b, 32, s, d, docs) for d in (128, 64) for (b, s) in ((1, 2048), (1, 4096), (2, 4096), (1, 8192))
              for docs in (1, 4, 16)]
    for b, h, s, d, docs in shapes:
        if time.time() - t0 > a.budget_s:
            print("budget spent; stopping", flush=True)
            break
        lens = [doc_lengths(s, docs, seed=i) for i in range(b)]
        doc = torch.stack([torch.repeat_interleave(torch.arange(len(l)), torch.tensor(l)) for l in lens]).to(dev)

        def mask_mod(bi, hi, q, kv):
            return (doc[bi, q] == doc[bi, kv]) & (q >= kv)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        tm = time.perf_counter()
        bm = create_block_mask(mask_mod, b, None, s, s, device=dev)
        torch.cuda.synchronize()
        mask_ms = (time.perf_counter() - tm) * 1e3
        mask_peak = torch.cuda.max_memory_allocated() - base
        mask_kept = torch.cuda.memory_allocated() - base
        g = torch.Generator(device=dev).manual_seed(0)
        mk = lambda: torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True)
        q, k, v = mk(), mk(), mk()
        do = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
        row = {"batch": b, "heads": h, "seq": s, "dim": d, "docs": docs, "lengths": lens,
               "partial_blocks": int(bm.kv_num_blocks.sum()),
               "full_blocks": int(bm.full_kv_num_blocks.sum()) if bm.full_kv_num_blocks is not None else 0,
               "block_size": list(bm.BLOCK_SIZE), "mask_ms": round(mask_ms, 3), "mask_peak_bytes": mask_peak,
               "mask_kept_bytes": mask_kept}
        try:
            flex(q, k, v, block_mask=bm).backward(do)   # compile both
            q.grad = k.grad = v.grad = None
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = flex(q, k, v, block_mask=bm)
            torch.cuda.synchronize()
            row["fwd_kept_bytes"] = torch.cuda.memory_allocated() - before
            row["fwd_peak_bytes"] = torch.cuda.max_memory_allocated() - before
            torch.cuda.reset_peak_memory_stats()
            mid = torch.cuda.memory_allocated()
            out.backward(do)
            torch.cuda.synchronize()
            row["bwd_peak_bytes"] = torch.cuda.max_memory_allocated() - mid
            del out
            q.grad = k.grad = v.grad = None

            def fwd():
                with torch.no_grad():
                    return flex(q, k, v, block_mask=bm)

            def fwd_grad():
                return flex(q, k, v, block_mask=bm)

            def fwdbwd():
                flex(q, k, v, block_mask=bm).backward(do)
                q.grad = k.grad = v.grad = None
            row["fwd_ms"], row["fwd_kernels"] = kernels(fwd_grad)
            row["fwdbwd_ms"], row["fwdbwd_kernels"] = kernels(fwdbwd)
        except Exception as ex:
            row["error"] = repr(ex)[:300]
        res["rows"].append(row)
        print(b, h, s, d, docs, row.get("partial_blocks"), row.get("full_blocks"), row.get("fwd_ms"), row.get("fwdbwd_ms"),
              row.get("fwd_kept_bytes"), row.get("mask_ms"), row.get("mask_peak_bytes"), row.get("error", "")[:80], flush=True)
        del q, k, v, do, bm, doc
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
