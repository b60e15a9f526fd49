"""The view ops of the SDXL UNet's training step, counted on the CPU: what vrsim prices with the host
class `view` (lua/hw/calibrated/h200_torch.lua host_class_us.view).

A view op (aten view, _unsafe_view, transpose, permute, unsqueeze, split) launches no kernel and
allocates nothing, but the dispatcher runs for it in forward and the autograd engine for its node
(ViewBackward0, TransposeBackward0, ...) in backward. This builds sdxl_unet.py's UNet with the SDXL
base structure (same modules, same calls, same op graph) at tiny widths so the CPU can run it,
runs one forward under a TorchDispatchMode that counts every aten op, walks the autograd graph
for its node types, and prints the counts: the views of the forward and the view nodes of the
backward, beside the structure's own count (tests/test_sdxl.sh, "host class view", checks vrsim's).

  python3 validation/harness/count_sdxl_views.py

Host time needs no GPU to count ops by; which ops a Linear dispatches (aten::linear folds a 3-D
input into rows with a view and unfolds the product with another) is the same on CUDA, since
linear and matmul are composite ops above the device. The attention kernel differs (the CPU's
flash kernel is not cuDNN's), so the count leaves that kernel's own internals out.
"""
import collections
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdxl_unet  # noqa: E402

# SDXL base's structure (sdxl_unet.CONFIG: depths, layers, heads per level) at tiny widths
TINY = dict(sdxl_unet.CONFIG, block_out=(32, 64, 128), heads=(1, 2, 4), temb=64, time_proj=32,
            add_time_proj=16, add_in=32 + 6 * 16, cross=32)
VIEW_OPS = {"view", "_unsafe_view", "transpose", "permute", "unsqueeze", "split", "t"}
VIEW_NODES = {"ViewBackward0", "UnsafeViewBackward0", "TransposeBackward0", "PermuteBackward0",
              "UnsqueezeBackward0", "SplitBackward0"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def main():
    torch.manual_seed(0)
    model = sdxl_unet.SDXLUNet(TINY).train()
    b = 1
    x = torch.randn(b, 4, 8, 8)
    with Count() as c:
        out = model(x, torch.randint(0, 1000, (b,)), torch.randn(b, 77, TINY["cross"]),
                    torch.randn(b, 32), torch.randn(b, 6))
        loss = F.mse_loss(out.float(), torch.randn_like(x))
    nodes, seen, stack = collections.Counter(), set(), [loss.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        nodes[type(n).__name__] += 1
        stack.extend(f for f, _ in n.next_functions)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    print("forward aten ops %d; view ops (t is a Linear's own, inside its class):" % sum(c.ops.values()))
    for k in sorted(VIEW_OPS):
        print("  %-14s %d" % (k, c.ops[k]))
    print("  views less t   %d" % sum(c.ops[k] for k in VIEW_OPS if k != "t"))
    print("backward nodes %d; view nodes:" % sum(nodes.values()))
    for k in sorted(VIEW_NODES):
        print("  %-20s %d" % (k, nodes[k]))
    print("  all view nodes       %d" % sum(nodes[k] for k in VIEW_NODES))
    print("Linears %d, attentions %d, GEGLUs %d, ResnetBlock2Ds %d, Transformer2DModels %d" % (
        len(linears), sum(isinstance(m, sdxl_unet.Attention) for m in model.modules()),
        sum(isinstance(m, sdxl_unet.GEGLU) for m in model.modules()),
        sum(isinstance(m, sdxl_unet.ResnetBlock2D) for m in model.modules()),
        sum(isinstance(m, sdxl_unet.Transformer2DModel) for m in model.modules())))


if __name__ == "__main__":
    main()
