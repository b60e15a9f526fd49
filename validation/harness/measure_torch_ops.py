"""PyTorch's own elementwise, copy and reduction kernels, timed on the GPU at the sizes a
training step uses, grouped by the class of memory access that decides their speed. The
simulator's ops name their class (Op kind); the cost model interpolates each class's measured
bandwidth over bytes moved. Writes lua/hw/calibrated/<gpu>_torch_ops.lua.

  python3 validation/harness/measure_torch_ops.py --gpu h200 -o lua/hw/calibrated/h200_torch_ops.lua

--only foreach measures just the optimizer's foreach classes, for bf16 and fp32 parameter lists
(the fp32 ones as classes foreach_fp32, foreach_scalar_fp32, foreach_out_fp32).

--only add_mixed measures class add_mixed alone (below) into its own file, as --only transpose_fp8
does; --cpu-check runs it small on the CPU.

--only baddbmm measures peft's expert folding alone (classes baddbmm, baddbmm_gemm and baddbmm_bwd, below) into its own
file, as --only transpose_fp8 does.

--only transpose_fp8 measures class transpose_fp8 alone (below), at the standard shapes and the
float8 Linears' operand shapes, into its own file whose rows join the GPU's table; --cpu-check
runs those calls on the CPU at small shapes:

  python3 validation/harness/measure_torch_ops.py --gpu h100_sxm --only transpose_fp8 -o $OUT/transpose_fp8.lua

--only fused_adamw measures torch._fused_adamw_ (AdamW(fused=True)'s one kernel per tensor-list
chunk) over the same lists and over lists three times longer, bf16 and fp32 (classes fused_adamw,
fused_adamw_fp32); its bytes are the simulator's: parameters, gradients and both moments read,
parameters and moments written, 7 x the parameters' bytes.

Class add_mixed is a bf16 tensor plus an fp32 one of its shape into a new fp32 tensor: peft's
`result = result + lora_out * scaling` where the adapter's product is fp32 and the base output
bf16 (tuners/lora/layer.py Linear.forward; TensorIterator's unrolled kernel with LoadWithCast,
Loops.cuh, since not every operand has the common dtype), at the shapes of the standard rows and
of Qwen3-30B-A3B's experts at 4096 tokens.

Class transpose_fp8 (a 2-D .t().contiguous() of a float8 tensor) is the layout copy of
torchao's float8 training (lua/strategies/float8.lua M.LAYOUT_COPY_KIND names the class it is
priced by).

Bytes moved = bytes of every input read + every output written (as the simulator counts them).
"""
import argparse, datetime
import torch

def timed_cpu(fn, reps=20):
    """--cpu-check: the same calls timed on the host (checks the code, not the figures)."""
    import time
    fn()
    t = time.perf_counter()
    for _ in range(reps): fn()
    return (time.perf_counter() - t) * 1e3 / reps

def timed(fn, reps=20):
    if not torch.cuda.is_available():
        return timed_cpu(fn, reps)
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        s.record()
        for _ in range(reps): fn()
        e.record(); torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) / reps)
    return best  # ms

def nb(*ts):
    return sum(t.numel() * t.element_size() for t in ts)

def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--gpu", required=True); ap.add_argument("-o", required=True)
    ap.add_argument("--only", choices=["foreach", "fused_adamw", "transpose_fp8", "baddbmm", "add_mixed"],
                    help="only the optimizer's foreach classes, only its fused AdamW kernel, or only "
                         "class transpose_fp8 (its rows, to join to a GPU's table)")
    ap.add_argument("--cpu-check", action="store_true",
                    help="run --only transpose_fp8's, baddbmm's or add_mixed's calls on the CPU at small shapes "
                         "(checks the code)")
    a = ap.parse_args()
    if a.cpu_check and a.only not in ("transpose_fp8", "baddbmm", "add_mixed"):
        ap.error("--cpu-check goes with --only transpose_fp8, baddbmm or add_mixed")
    dev = "cpu" if a.cpu_check else "cuda"
    rows = []
    def rec(cls, op, ms, bytes_):
        rows.append((cls, op, bytes_, ms, bytes_ / (ms * 1e-3) / 1e9))
    bf, f32 = torch.bfloat16, torch.float32
    # transpose_fp8 alone: the standard shapes' rows x hidden, and the float8 Linears' operands of
    # Llama-3-8B at 2 x 4096 tokens (input 8192 x 4096 and 8192 x 14336, weights 4096 x 14336 and
    # 14336 x 4096, 1024 x 4096)
    fp8_shapes = ([(64, 128), (128, 256)] if a.cpu_check else
                  [(2048, 4096), (8192, 4096), (2048, 5120), (8192, 5120), (16384, 1280),
                   (8192, 14336), (4096, 14336), (14336, 4096), (1024, 4096)])
    for (r, c) in (fp8_shapes if a.only == "transpose_fp8" else []):
        x8 = torch.randn(r, c, device=dev, dtype=bf).to(torch.float8_e4m3fn)
        rec("transpose_fp8", "float8 t().contiguous()", timed(lambda: x8.t().contiguous()), nb(x8, x8))
    # add_mixed alone: bf16 + fp32 into fp32 (the rows x columns of the standard shapes, and of
    # Qwen3-30B-A3B's experts at 4096 tokens: 32768 routed rows x 1536 / 2048 / 768 columns)
    mixed_shapes = ([(64, 128)] if a.cpu_check else
                    [(2048, 4096), (8192, 4096), (2048, 5120), (8192, 5120), (16384, 1280),
                     (32768, 1536), (32768, 2048), (32768, 768), (4096, 14336)])
    for (r, c) in (mixed_shapes if a.only == "add_mixed" else []):
        xb = torch.randn(r, c, device=dev, dtype=bf)
        x32 = torch.randn(r, c, device=dev, dtype=f32)
        rec("add_mixed", "add bf16 + fp32 %d x %d" % (r, c), timed(lambda: xb + x32), nb(xb, x32, x32))
        del xb, x32
    # baddbmm alone: peft's fold of a LoRA pair into a mixture of experts' stacked weight,
    # torch.baddbmm(W, B, A, alpha=scaling) with W (E, out, in) and the factors in W's dtype
    # (tuners/lora/layer.py ParamWrapper, _LoraFactorsProxy): the whole op, its memcpy of W into
    # the result and cuBLAS's in-place batched GEMM with beta 1 (class baddbmm, bytes as the
    # simulator counts them: W read and the result written by each kernel, and the factors), and
    # the in-place GEMM alone (class baddbmm_gemm, printed beside it). Stacks of Qwen3-30B-A3B
    # (128 x 1536 x 2048 and 128 x 2048 x 768), DeepSeek-V2-Lite (64 x 2816 x 2048, 64 x 2048 x 1408)
    # and gpt-oss-20b (32 x 2880 x 5760, 32 x 2880 x 2880), at ranks 8 to 64
    fold_shapes = ([] if a.only != "baddbmm" else
                   [(e, o, i, r) for (e, o, i) in ((128, 1536, 2048), (128, 2048, 768), (64, 2816, 2048),
                                                   (64, 2048, 1408), (32, 2880, 5760), (32, 2880, 2880))
                    for r in (8, 16, 32, 64)])
    if a.cpu_check and a.only == "baddbmm":
        fold_shapes = [(4, 64, 32, 8)]
    for (e, o, i, r) in fold_shapes:
        w = torch.randn(e, o, i, device=dev, dtype=bf)
        lhs = torch.randn(e, o, r, device=dev, dtype=bf)
        rhs = torch.randn(e, r, i, device=dev, dtype=bf)
        what = "%d x %d x %d, r %d" % (e, o, i, r)
        rec("baddbmm", "baddbmm " + what, timed(lambda: torch.baddbmm(w, lhs, rhs, alpha=2.0), 5),
            4 * nb(w) + nb(lhs, rhs))
        out = w.clone()
        rec("baddbmm_gemm", "baddbmm_ in place " + what, timed(lambda: out.baddbmm_(lhs, rhs, alpha=2.0), 5),
            2 * nb(w) + nb(lhs, rhs))
        # its backward with W frozen and the factors trainable (BaddbmmBackward0: grad @ rhs^T and
        # lhs^T @ grad, each a bmm that streams the stack's gradient, then the alpha scaling of
        # each factor's gradient; class baddbmm_bwd, bytes as the simulator counts them: the
        # gradient read twice)
        lhs.requires_grad_(True); rhs.requires_grad_(True)
        y = torch.baddbmm(w, lhs, rhs, alpha=2.0)
        gy = torch.randn_like(y)
        rec("baddbmm_bwd", "baddbmm backward " + what,
            timed(lambda: torch.autograd.grad(y, (lhs, rhs), gy, retain_graph=True), 5), 2 * nb(w))
        del w, lhs, rhs, out, y, gy
    for (b, s, h) in ([] if a.only else [(1, 2048, 4096), (4, 2048, 4096), (1, 2048, 5120), (4, 2048, 5120), (16, 1024, 1280)]):
        x = torch.randn(b, s, h, device=dev, dtype=bf); y = torch.randn_like(x)
        o = torch.empty_like(x)
        rec("contiguous", "add bf16", timed(lambda: torch.add(x, y, out=o)), nb(x, y, o))
        w = torch.randn(h, device=dev, dtype=bf)
        rec("broadcast", "mul weight bf16", timed(lambda: torch.mul(w, x, out=o)), nb(x, o))
        x32 = x.float(); o32 = torch.empty_like(x32); rs = torch.randn(b, s, 1, device=dev)
        rec("broadcast_rows", "mul rows fp32", timed(lambda: torch.mul(x32, rs, out=o32)), nb(x32, o32))
        rec("cast_up", "bf16 to fp32", timed(lambda: x.float()), nb(x, x32))
        rec("cast_down", "fp32 to bf16", timed(lambda: x32.to(bf)), nb(x32, x))
        rec("contiguous", "pow fp32", timed(lambda: torch.pow(x32, 2, out=o32)), nb(x32, o32))
        rec("contiguous", "silu bf16", timed(lambda: torch.nn.functional.silu(x)), nb(x, o))
        rec("reduce_rows", "mean last dim fp32", timed(lambda: x32.mean(-1, keepdim=True)), nb(x32))
        rec("reduce_cols", "sum leading dims bf16", timed(lambda: x.sum((0, 1))), nb(x))
        d = 128 if h % 128 == 0 else 64
        heads = h // d
        q = x.view(b, s, heads, d).transpose(1, 2)  # strided view
        cos = torch.randn(1, 1, s, d, device=dev, dtype=bf)
        rec("strided", "rotary mul strided", timed(lambda: q * cos), nb(x, x))
        rec("transpose", "transpose contiguous", timed(lambda: q.contiguous()), nb(x, x))
        x1, x2 = q[..., : d // 2], q[..., d // 2:]
        rec("cat_strided", "cat halves", timed(lambda: torch.cat((-x2, x1), dim=-1)), nb(x, x))
        rec("copy", "clone contiguous", timed(lambda: x.clone()), nb(x, x))
        # a whole 2-D transpose of one-byte elements: torchao's float8 operands put in the
        # layouts torch._scaled_mm takes (float8_ops.py preprocess_addmm's .contiguous() of a
        # transposed float8 tensor; elementwise_kernel<128, 4> float8_copy_kernel_cuda)
        x8 = x.view(b * s, h).to(torch.float8_e4m3fn)
        rec("transpose_fp8", "float8 t().contiguous()", timed(lambda: x8.t().contiguous()), nb(x8, x8))
    for (n, v) in ([] if a.only else [(2048, 32000), (8192, 32000)]):
        l = torch.randn(n, v, device=dev)
        rec("softmax", "log_softmax fp32", timed(lambda: torch.log_softmax(l, -1), 5), nb(l, l))
    # optimizer: foreach kernels over the parameter list of a 7B layer stack (two layers), in
    # bf16 and in fp32 (amp and fp32 training keep fp32 parameters and AdamW state)
    for dt, suffix in ((bf, ""), (f32, "_fp32")) if a.only in (None, "foreach") else ():
        name = "bf16" if dt == bf else "fp32"
        params = [torch.randn(s_, device=dev, dtype=dt) for s_ in [4096 * 4096] * 8 + [11008 * 4096] * 6 + [4096] * 4]
        grads = [torch.randn_like(p) for p in params]
        tot = nb(*params)
        rec("foreach" + suffix, "_foreach_add_ " + name, timed(lambda: torch._foreach_add_(params, grads), 5), 3 * tot)
        rec("foreach_scalar" + suffix, "_foreach_mul_ " + name, timed(lambda: torch._foreach_mul_(params, 0.99), 5), 2 * tot)
        rec("foreach_out" + suffix, "_foreach_sqrt " + name, timed(lambda: torch._foreach_sqrt(params), 5), 2 * tot)
        del params, grads
    # AdamW(fused=True).step's kernel: the 7B two-layer list, and three times as many tensors
    for dt, suffix in ((bf, ""), (f32, "_fp32")) if a.only in (None, "fused_adamw") else ():
        name = "bf16" if dt == bf else "fp32"
        for copies in (1, 3):
            params = [torch.randn(s_, device=dev, dtype=dt)
                      for s_ in ([4096 * 4096] * 8 + [11008 * 4096] * 6 + [4096] * 4) * copies]
            grads = [torch.randn_like(p) for p in params]
            m = [torch.zeros_like(p) for p in params]
            v = [torch.zeros_like(p) for p in params]
            steps = [torch.tensor(1.0, device=dev) for _ in params]
            tot = nb(*params)
            def step():
                torch._fused_adamw_(params, grads, m, v, [], steps, lr=1e-5, beta1=0.9, beta2=0.999,
                                    weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
            rec("fused_adamw" + suffix, "_fused_adamw_ %s x%d" % (name, copies), timed(step, 5), 7 * tot)
            del params, grads, m, v, steps
    with open(a.o, "w") as f:
        f.write("-- PyTorch's own kernels on %s, %s, torch %s: bandwidth by access class.\n" % (
            "the CPU (--cpu-check)" if a.cpu_check else torch.cuda.get_device_name(0), datetime.date.today().isoformat(), torch.__version__))
        f.write("-- command: python3 validation/harness/measure_torch_ops.py --gpu %s -o %s%s\n" % (
            a.gpu, a.o, " --only " + a.only if a.only else ""))
        f.write("-- bytes = inputs read + outputs written; ms = best of 3 means of 20 (5) back-to-back calls\n")
        f.write("return {\n  torch_ops = {\n")
        for cls, op, by, ms, gbps in rows:
            f.write('    {class="%s", op="%s", bytes=%d, ms=%.5f, gbps=%.1f},\n' % (cls, op, by, ms, gbps))
        f.write("  },\n}\n")
    for r in rows: print("%-10s %-24s %12d %9.4f ms %7.1f GB/s" % r)

if __name__ == "__main__":
    main()
