"""Where DTensor tensor parallelism keeps a RowwiseParallel embedding's gradient and what the
optimizer step makes of it (docs/oracle.md, "Tensor parallelism"): a 64 x 8 embedding over a fake
process group of 2 on the CPU, AdamW foreach. Prints the gradient's placements and local shape,
the collectives of the step (CommDebugMode) and every redistribution DTensor's dispatch makes of
an argument during the step, with its output's shape and whether it is a new storage.

    python3 validation/oracle/check_tp_embedding_grad.py
"""
import torch
import torch.distributed as dist
import torch.distributed.tensor._dispatch as dispatch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore


def main():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    emb = torch.nn.Embedding(64, 8)
    parallelize_module(emb, mesh, RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)))
    opt = torch.optim.AdamW(emb.parameters(), foreach=True)
    ids = torch.randint(0, 64, (1, 16))
    emb(ids).sum().backward()
    g = emb.weight.grad
    print("parameter", emb.weight.placements, tuple(emb.weight.to_local().shape))
    print("gradient ", g.placements, tuple(g.to_local().shape))
    calls = []
    original = dispatch.redistribute_local_tensor

    def logged(t, src, dst, *a, **k):
        out = original(t, src, dst, *a, **k)
        calls.append((tuple(t.shape), src.placements, dst.placements, tuple(out.shape),
                      out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()))
        return out

    dispatch.redistribute_local_tensor = logged
    with CommDebugMode() as comms:
        opt.step()
    dispatch.redistribute_local_tensor = original
    print("collectives in the step:", dict(comms.get_comm_counts()) or "none")
    for shape, src, dst, out, new in calls:
        print(f"redistribution {shape} {src} -> {dst}: {out}{', a new storage' if new else ''}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
