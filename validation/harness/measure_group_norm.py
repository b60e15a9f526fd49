"""GroupNorm's statistics kernel on its own. native_group_norm (aten/src/ATen/native/cuda/
group_norm_kernel.cu) computes each (sample, group) row's mean and rstd in RowwiseMomentsCUDAKernel,
launched with one block per row (N x G blocks of 512 threads) that walks the row's D x HxW
elements; the affine apply that follows is an ordinary elementwise kernel. With SDXL's 32 groups
at batch 1 that is 32 blocks on a GPU of 132 SMs, so the kernel's time is one block's walk of its
row, not the card's bandwidth.

For the SDXL UNet's GroupNorm shapes (channels x pixels, 32 groups, bf16) at batch 1-16: every
kernel of one forward under torch.profiler (median of 5 calls), the statistics kernel apart. One
JSON object: {"rows": [{"n", "c", "hw", "groups", "row_bytes", "moments_us", "other_us"}], ...}

  python3 validation/harness/measure_group_norm.py --out F.json
  python3 validation/harness/measure_group_norm.py --from F.json --lua lua/hw/calibrated/h200_group_norm.lua
"""
import json

from kernel_timing import measure_or_write, median_kernel_us, save_rows, torch, write_torch_ops

if torch is not None:  # --from runs without torch
    import torch.nn.functional as F

SHAPES = [(320, 128 * 128), (640, 128 * 128), (960, 128 * 128), (320, 64 * 64), (640, 64 * 64),
          (960, 64 * 64), (1280, 64 * 64), (1920, 64 * 64), (640, 32 * 32), (1280, 32 * 32),
          (1920, 32 * 32), (2560, 32 * 32)]
BATCHES = (1, 2, 4, 8, 16)
GROUPS = 32


def one_call(x, w, b):
    """The statistics kernel's and the other kernels' microseconds of one F.group_norm (medians
    of 5 calls)."""
    us, _ = median_kernel_us(lambda: F.group_norm(x, GROUPS, w, b), 5,
                             lambda name: "moments" if "RowwiseMoments" in name else "other")
    return us.get("moments", 0.0), us.get("other", 0.0)


def measure(a):
    rows = []
    for c, hw in SHAPES:
        for n in BATCHES:
            side = int(hw ** 0.5)
            x = torch.randn(n, c, side, side, device="cuda", dtype=torch.bfloat16)
            w = torch.ones(c, device="cuda", dtype=torch.bfloat16)
            b = torch.zeros(c, device="cuda", dtype=torch.bfloat16)
            for _ in range(3):
                F.group_norm(x, GROUPS, w, b)
            m, o = one_call(x, w, b)
            rows.append({"n": n, "c": c, "hw": hw, "groups": GROUPS,
                         "row_bytes": c // GROUPS * hw * 2, "moments_us": round(m, 2),
                         "other_us": round(o, 2)})
            print(json.dumps(rows[-1]))
            del x
            torch.cuda.empty_cache()
    save_rows(a.out, rows)


def write_lua(src, path, m):
    """One block's rate through its row (row bytes / kernel time) against the tensor's whole size,
    as the profile class "rowwise": the rate halves once the tensor no longer stays in L2 between
    the calls (4.4-4.9 GB/s up to 10.5 MB, 2.0-2.8 from 21 MB on an H200, whose L2 is 60 MB).
    Every shape here has at most 512 rows, one wave of the card's 132 SMs x 4 blocks."""
    d = json.load(open(src))
    pts = sorted((r["n"] * r["groups"] * r["row_bytes"], r["row_bytes"] / (r["moments_us"] * 1e-6) / 1e9)
                 for r in d["rows"] if r["moments_us"] > 0)
    write_torch_ops(path,
                "-- GroupNorm's statistics kernel (RowwiseMomentsCUDAKernel: one block of 512 threads per\n"
                "-- (sample, group) row) on %(gpu)s, torch %(torch)s, bf16, %(date)s: one block's\n"
                "-- rate through its row against the whole tensor's bytes, %(n)d shapes of the SDXL UNet at\n"
                "-- batch 1-16 (32 groups): %(lo).1f-%(hi).1f GB/s a block (on the H200: up to 10.5 MB the\n"
                "-- tensor stays in L2 between calls, 4.4-4.9 GB/s a block; from 21 MB it does not, 2.0-2.8).\n"
                "--   python3 validation/harness/measure_group_norm.py --out %(src)s\n"
                "--   python3 validation/harness/measure_group_norm.py --from %(src)s --date %(date)s --lua THIS_FILE\n"
                "-- Read as the profile class \"rowwise\" by lua/vrsim/hardware.lua; sim/cost.c rowwise_ns.\n"
                % dict(m, n=len(pts), lo=min(p[1] for p in pts), hi=max(p[1] for p in pts)),
                [("rowwise", "RowwiseMomentsCUDAKernel, one block", total, total / (gbps * 1e6), gbps)
                 for total, gbps in pts], gbps_digits=2)
    print("%d points, %.1f-%.1f GB/s a block" % (len(pts), min(p[1] for p in pts), max(p[1] for p in pts)))


def main():
    measure_or_write(__doc__, measure, write_lua)


if __name__ == "__main__":
    main()
