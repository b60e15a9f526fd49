"""Host time per kernel of module-heavy PyTorch code (diffusers-style ResNet and transformer
blocks built from torch.nn modules), at sizes so small that the GPU never limits: what a
launch-bound training step (an SDXL UNet launches 7-11 thousand kernels) pays on the CPU for each
kernel it runs, forward and backward. Writes host_kernel_us into lua/hw/calibrated/<gpu>_torch.lua
(appending to the table measure_dispatch.py wrote).

  python3 validation/harness/measure_module_dispatch.py
"""
import time
import torch
import torch.nn as nn
import torch.nn.functional as F

class Resnet(nn.Module):
    def __init__(self, c, t):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, c, eps=1e-5), nn.Conv2d(c, c, 3, padding=1)
        self.te = nn.Linear(t, c)
        self.n2, self.c2 = nn.GroupNorm(32, c, eps=1e-5), nn.Conv2d(c, c, 3, padding=1)
    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.te(F.silu(temb))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return x + h

class Attn(nn.Module):
    def __init__(self, c, ctx, heads=2):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v, self.o = nn.Linear(c, c, bias=False), nn.Linear(ctx, c, bias=False), nn.Linear(ctx, c, bias=False), nn.Linear(c, c)
    def forward(self, x, ctx):
        b, n, c = x.shape
        q = self.q(x).view(b, -1, self.h, c // self.h).transpose(1, 2)
        k = self.k(ctx).view(b, -1, self.h, c // self.h).transpose(1, 2)
        v = self.v(ctx).view(b, -1, self.h, c // self.h).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c)
        return self.o(o)

class Transformer(nn.Module):
    def __init__(self, c, ctx):
        super().__init__()
        self.norm = nn.GroupNorm(32, c, eps=1e-6); self.proj_in = nn.Linear(c, c)
        self.n1, self.a1 = nn.LayerNorm(c), Attn(c, c)
        self.n2, self.a2 = nn.LayerNorm(c), Attn(c, ctx)
        self.n3, self.ff1, self.ff2 = nn.LayerNorm(c), nn.Linear(c, 8 * c), nn.Linear(4 * c, c)
        self.proj_out = nn.Linear(c, c)
    def forward(self, x, ctx):
        b, c, hh, ww = x.shape
        res = x
        h = self.norm(x).permute(0, 2, 3, 1).reshape(b, hh * ww, c)
        h = self.proj_in(h)
        h = self.a1(self.n1(h), self.n1(h)) + h
        h = self.a2(self.n2(h), ctx) + h
        a, g = self.ff1(self.n3(h)).chunk(2, dim=-1)
        h = self.ff2(a * F.gelu(g)) + h
        h = self.proj_out(h).reshape(b, hh, ww, c).permute(0, 3, 1, 2).contiguous()
        return h + res

def main():
    torch.manual_seed(0)
    dev = "cuda"
    c, t, ctx = 64, 64, 32
    blocks = nn.ModuleList([m for _ in range(8) for m in (Resnet(c, t), Transformer(c, ctx))]).to(dev, torch.bfloat16)
    x0 = torch.randn(1, c, 8, 8, device=dev, dtype=torch.bfloat16, requires_grad=True)
    temb = torch.randn(1, t, device=dev, dtype=torch.bfloat16)
    cond = torch.randn(1, 8, ctx, device=dev, dtype=torch.bfloat16)
    import sys
    from torch.utils.checkpoint import checkpoint
    ckpt = "--ckpt" in sys.argv
    def step():
        x = x0
        for m in blocks:
            arg = temb if isinstance(m, Resnet) else cond
            x = checkpoint(m, x, arg, use_reentrant=False) if ckpt else m(x, arg)
        F.mse_loss(x.float(), torch.zeros_like(x, dtype=torch.float32)).backward()
    for _ in range(5): step()
    torch.cuda.synchronize()
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(); torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize(); t0 = time.perf_counter(); step(); torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    us = best / kernels * 1e6
    print(f"kernels {kernels}, step {best*1e3:.2f} ms, host per kernel {us:.2f} us")
    if ckpt:
        print(f"host_kernel_ckpt_us = {us:.3f}")
        return
    path = "lua/hw/calibrated/h200_torch.lua"
    try:
        src = open(path).read()
        src = src.rstrip().rstrip("}").rstrip()
        src += ("\n  host_kernel_us = %.3f,  -- module-heavy fwd+bwd (measure_module_dispatch.py): "
                "%d kernels per step, CPU time per kernel\n}\n" % (us, kernels))
        import os
        out = os.environ.get("OUT", ".") + "/h200_torch.lua"
        open(out, "w").write(src)
        print(open(out).read())
    except OSError as e:
        print("could not write", e)

if __name__ == "__main__":
    main()
