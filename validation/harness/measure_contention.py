"""How much an NCCL collective running beside compute slows it, on one host of two or more GPUs:
every rank times kernels on its compute stream alone and again while a side stream runs NCCL
all-gathers (then reduce-scatters) back to back, as FSDP2 and ZeRO overlap them. The slowdown is
(time beside the collective / time alone) - 1, the fraction vrsim's engine adds to the part of a
compute kernel that overlaps a collective (EngineConfig.contention):
  compute  bf16 GEMMs (the shapes of a 7B layer at 4096 tokens): tensor-core bound
  memory   a 1 GiB copy and a bf16 add: DRAM bound
Each figure is the median of 9 repeats of 20 kernels, CUDA events around the batch, the side
stream's collectives started before and still running after it.

  torchrun --nproc-per-node 2 validation/harness/measure_contention.py --out F.json \\
      [--lua lua/hw/calibrated/h200_contention.lua]
With one rank NCCL launches no kernel: the script refuses unless --smoke (to test the script).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def timed(fn, reps=9, inner=20):
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(inner):
            fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / inner)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--lua", help="rank 0 also writes the calibrated table here")
    ap.add_argument("--mib", type=int, default=256, help="collective buffer per rank, MiB")
    ap.add_argument("--smoke", action="store_true", help="allow a single rank (no contention to see)")
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world < 2 and not a.smoke:
        raise SystemExit("measure_contention.py needs two or more ranks (torchrun --nproc-per-node 2)")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    dev = torch.cuda.current_device()
    bf = torch.bfloat16
    n = a.mib * 2**20 // 2
    shard = torch.randn(n // world, device=dev, dtype=bf)
    full = torch.empty(n // world * world, device=dev, dtype=bf)
    side = torch.cuda.Stream()

    def collective(kind):
        def run():
            if kind == "all_gather":
                dist.all_gather_into_tensor(full, shard)
            else:
                dist.reduce_scatter_tensor(shard, full)
        return run

    x = torch.randn(4096, 4096, device=dev, dtype=bf)
    w1 = torch.randn(4096, 11008, device=dev, dtype=bf)
    w2 = torch.randn(11008, 4096, device=dev, dtype=bf)
    big = torch.randn(2**29, device=dev, dtype=bf)   # 1 GiB
    big2 = torch.empty_like(big)
    kernels = {
        "compute": [lambda: x @ w1, lambda: (x @ w1) @ w2],
        "memory": [lambda: big2.copy_(big), lambda: torch.add(big, big, out=big2)],
    }
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "world": world,
           "rank": rank, "collective_mib": a.mib, "date": time.strftime("%Y-%m-%d"), "rows": []}
    for kind in ("all_gather", "reduce_scatter"):
        coll = collective(kind)
        for _ in range(3):
            coll()
        torch.cuda.synchronize()
        coll_ms = timed(coll, reps=5, inner=5)
        for cls, fns in kernels.items():
            for i, fn in enumerate(fns):
                alone = timed(fn)
                # enough collectives on the side stream to outlast the timed batch
                count = int(2 + 20 * alone / max(coll_ms, 1e-3)) + 2
                dist.barrier()
                torch.cuda.synchronize()
                with torch.cuda.stream(side):
                    for _ in range(count * 9):
                        coll()
                beside = timed(fn)
                torch.cuda.synchronize()
                res["rows"].append({"collective": kind, "class": cls, "kernel": i, "alone_ms": round(alone, 4),
                                    "beside_ms": round(beside, 4), "collective_ms": round(coll_ms, 4),
                                    "slowdown": round(beside / alone - 1, 4)})
                print(rank, res["rows"][-1], flush=True)
    slow = {cls: statistics.median(r["slowdown"] for r in res["rows"] if r["class"] == cls) for cls in kernels}
    res["contention"] = {k: round(max(v, 0.0), 4) for k, v in slow.items()}
    with open(a.out if world == 1 else a.out.replace(".json", f"_r{rank}.json"), "w") as f:
        json.dump(res, f, indent=1)
    if rank == 0 and a.lua and world >= 2:
        with open(a.lua, "w") as f:
            f.write("-- Compute kernels beside an NCCL collective on %s (%d ranks, torch %s), %s:\n"
                    "-- the fraction they run longer (medians over GEMMs / copies and adds, all-gather\n"
                    "-- and reduce-scatter). Made by torchrun --nproc-per-node %d\n"
                    "-- validation/harness/measure_contention.py --out %s --lua %s\n"
                    "return { contention = { compute = %.4f, memory = %.4f } }\n" % (
                        res["gpu"], world, res["torch"], res["date"], world, a.out, a.lua,
                        res["contention"]["compute"], res["contention"]["memory"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
