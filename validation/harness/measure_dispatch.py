"""Host dispatch cost of PyTorch ops on this machine: the CPU time eager PyTorch spends per op
(dispatcher, autograd bookkeeping, caching allocator, kernel launch), measured on tiny tensors so
the GPU is never the bottleneck. Writes a Lua table for lua/hw/calibrated/<gpu>_torch.lua.

  python3 validation/harness/measure_dispatch.py --gpu h200 -o lua/hw/calibrated/h200_torch.lua
"""
import argparse, datetime, time
import torch

def per_op_us(fn, n_ops, reps=5):
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n_ops * 1e6)
    return best

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", required=True)
    ap.add_argument("-o", required=True)
    a = ap.parse_args()
    dev = torch.device("cuda")
    x = torch.randn(64, 64, device=dev)
    w = torch.randn(64, 64, device=dev)
    N = 5000
    def eager_add():
        for _ in range(N): x.add_(1.0)
    def eager_linear():
        for _ in range(N): torch.nn.functional.linear(x, w)
    def eager_mixed():
        y = x
        for _ in range(N // 4):
            y = torch.nn.functional.silu(torch.nn.functional.linear(y, w) * 0.5 + y)
    xr = torch.randn(64, 64, device=dev, requires_grad=True)
    def fwd_bwd():
        # 4 ops per iteration forward (linear, mul, add, silu), their backward nodes after
        y = xr
        for _ in range(N // 8):
            y = torch.nn.functional.silu(torch.nn.functional.linear(y, w) * 0.5 + y)
        y.sum().backward()
    params = [torch.randn(64, 64, device=dev) for _ in range(200)]
    grads = [torch.randn(64, 64, device=dev) for _ in range(200)]
    def foreach():
        for _ in range(50): torch._foreach_add_(params, grads)
    for f in (eager_add, eager_linear, eager_mixed, fwd_bwd, foreach):
        f()  # warm-up
    res = {
        "eager_inplace_add_us": per_op_us(eager_add, N),
        "eager_linear_us": per_op_us(eager_linear, N),
        "eager_mixed_us": per_op_us(eager_mixed, N),
        "autograd_fwd_bwd_us": per_op_us(fwd_bwd, (N // 8) * 4 * 2 + 2),
        "foreach_per_tensor_us": per_op_us(foreach, 50 * 200),
    }
    with open(a.o, "w") as f:
        f.write("-- PyTorch host dispatch cost per op on %s, measured %s with torch %s\n" % (
            torch.cuda.get_device_name(0), datetime.date.today().isoformat(), torch.__version__))
        f.write("-- command: python3 validation/harness/measure_dispatch.py --gpu %s -o %s\n" % (a.gpu, a.o))
        f.write("-- tiny tensors (64x64) so the GPU never limits: best of 5 runs of thousands of ops\n")
        f.write("return {\n")
        for k, v in res.items():
            f.write("  %s = %.3f,\n" % (k, v))
        # the figure the engine uses: an op of a training step (forward or its backward node)
        f.write("  host_op_us = %.3f,  -- autograd forward+backward, per op\n" % res["autograd_fwd_bwd_us"])
        f.write("}\n")
    print(res)

if __name__ == "__main__":
    main()
