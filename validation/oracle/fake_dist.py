"""The oracle's fake distributed set-up: torch.distributed at any world size in one CPU process.

  mesh = fake_dist.setup(torch, world)      # before FakeTensorMode is entered

- The process group is torch's fake one (torch.testing._internal.distributed.fake_pg: the
  "fake" backend over a FakeStore): this process plays rank 0; every collective returns at once
  without moving data. The tensors a collective writes into are allocated by the calling
  library (FSDP2's all-gather output, DDP's buckets), so what rank 0 allocates is unchanged.
- The device mesh is made here, outside FakeTensorMode: init_device_mesh builds the mesh's rank
  tensor with ops whose values it reads (a data-dependent op under the mode).
- torch.cuda's stream and event API, which FSDP2 and DDP call on a CUDA device and a CPU-only
  wheel lacks (`torch.cuda.Stream(...)` asks the CUDA runtime): streams and events that order
  nothing (fake tensors carry no data, so there is nothing to order), the current device 0 of
  `world` devices, set_device and synchronize as no-ops. Allocation does not depend on streams
  in the capture: a storage is freed when its last reference goes (the caching allocator's
  record_stream deferral is a GPU-side reuse rule, docs/allocator.md).
torch.cuda.is_available stays False: transformers' optional imports (torchao's triton probe)
would otherwise ask the CUDA runtime for device properties.
"""
import contextlib


class FakeEvent:
    """torch.cuda.Event without a device: recorded, waited on and queried at once."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        return self

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass


class FakeStream:
    """torch.cuda.Stream without a device: each one distinct (FSDP2 keys state on streams), its
    waits no-ops."""

    def __init__(self, *args, **kwargs):
        import torch
        self.device = torch.device("cuda", 0)

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        return event if event is not None else FakeEvent()

    def query(self):
        return True

    def synchronize(self):
        pass


def install_fake_streams(torch, world):
    current = FakeStream()
    torch.cuda.Stream = FakeStream
    torch.cuda.Event = FakeEvent
    torch.cuda.current_stream = lambda *a, **k: current
    torch.cuda.default_stream = lambda *a, **k: current
    torch.cuda.stream = lambda s=None: contextlib.nullcontext()
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: world
    torch.cuda.set_device = lambda d: None
    torch.cuda.synchronize = lambda *a, **k: None


def setup(torch, world):
    """The fake process group of `world` ranks (this process rank 0) and its 1-D CUDA mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    install_fake_streams(torch, world)
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    return init_device_mesh("cuda", (world,))
