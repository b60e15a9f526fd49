"""GEGLU's product, hidden * gelu(gate), where hidden is one half of the projection's output (a view
whose rows are twice its width apart) and gelu(gate) a contiguous tensor: TensorIterator cannot
take the vectorized path for the strided operand, so the kernel runs between the "strided" and
the contiguous classes. For the SDXL UNet's feed-forward shapes (256-16384 tokens x 2560 or 5120
channels, bf16): the MulFunctor kernels of the forward and of MulBackward0 (grad * gelu(gate) and
grad * hidden) under torch.profiler, the median of 5 calls, with the bytes vrsim's op counts
(forward: both operands and the output; backward: twice that). One JSON object:
{"rows": [{"tokens", "inner", "dir", "bytes", "us"}]}

  python3 validation/harness/measure_geglu_mul.py --out F.json
  python3 validation/harness/measure_geglu_mul.py --from F.json --lua lua/hw/calibrated/h200_geglu_mul.lua
"""
import json

from kernel_timing import (byte_rate_points, measure_or_write, median_kernel_us, save_rows, torch,
                           write_torch_ops)

if torch is not None:  # --from runs without torch
    import torch.nn.functional as F

SHAPES = [(t, inner) for inner in (2560, 5120) for t in (256, 1024, 4096, 16384)]


def mul_us(fn):
    """One call's MulFunctor kernels' microseconds (median of 5 calls)."""
    us, _ = median_kernel_us(fn, 5, lambda name: "mul" if "MulFunctor" in name else None)
    return us.get("mul", 0.0)


def measure(a):
    rows = []
    for t, inner in SHAPES:
        p = torch.randn(t, 2 * inner, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = F.gelu(torch.randn(t, inner, device="cuda", dtype=torch.bfloat16)).requires_grad_()
        grad = torch.ones(t, inner, device="cuda", dtype=torch.bfloat16)

        def fwd():
            hs, _ = p.chunk(2, dim=-1)
            return hs * g

        def fwdbwd():
            torch.autograd.grad(fwd(), (p, g), grad)
        for _ in range(3):
            fwdbwd()
        f = mul_us(fwd)
        b = mul_us(fwdbwd) - f
        nbytes = 3 * t * inner * 2
        rows += [{"tokens": t, "inner": inner, "dir": "fwd", "bytes": nbytes, "us": round(f, 2)},
                 {"tokens": t, "inner": inner, "dir": "bwd", "bytes": 2 * nbytes, "us": round(b, 2)}]
        print(json.dumps(rows[-2]), json.dumps(rows[-1]))
        del p, g, grad
        torch.cuda.empty_cache()
    save_rows(a.out, rows)


def write_lua(src, path, m):
    pts = byte_rate_points(src)
    write_torch_ops(path,
                "-- GEGLU's product of a strided half-view and a contiguous tensor on %(gpu)s, torch\n"
                "-- %(torch)s, bf16, torch.profiler kernel time, %(date)s: the bytes vrsim's op counts\n"
                "-- (forward: both operands and the output; backward: twice that) over the MulFunctor\n"
                "-- kernels' time, %(n)d points at the SDXL UNet's feed-forward shapes; classes\n"
                "-- \"strided_mixed\" (forward) and \"strided_mixed_bwd\".\n"
                "--   python3 validation/harness/measure_geglu_mul.py --out %(src)s\n"
                "--   python3 validation/harness/measure_geglu_mul.py --from %(src)s --date %(date)s --lua THIS_FILE\n"
                % dict(m, n=len(pts)),
                [("strided_mixed" if r["dir"] == "fwd" else "strided_mixed_bwd",
                  "hidden * gelu(gate) %dx%d" % (r["tokens"], r["inner"]), b, r["us"] / 1e3, gbps)
                 for b, gbps, r in pts])
    print("%d points, %.0f-%.0f GB/s" % (len(pts), min(p[1] for p in pts), max(p[1] for p in pts)))


def main():
    measure_or_write(__doc__, measure, write_lua)


if __name__ == "__main__":
    main()
