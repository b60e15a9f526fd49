"""What transformers 5.25's hub kernels change in what a training step keeps for backward, measured
on one GPU without the Hub (the GPU machine has no network): a Llama with TinyLlama's shapes cut to
2 layers (hidden 2048, 32 heads of 64, 4 key/value heads), built with from_config in bf16, one
micro-batch of 1 x 2048 tokens, run four ways:

  off      the modeling code's own LlamaRMSNorm and apply_rotary_pos_emb
  rmsnorm  LlamaRMSNorm.forward as kernels-community liger-kernels' LigerRMSNorm.forward runs it:
           LigerRMSNormFunction.apply(x, weight, eps, 0, "llama", True, None), from the carried
           liger_kernel wheel (linkedin/Liger-Kernel's ops, which the Hub kernel packages)
  rotary   apply_rotary_pos_emb as kernels-community rotary's apply_rotary_transformers: q and k
           cloned, then an op defined with rotary's schema (torch_binding.cpp: `apply_rotary(Tensor
           x1, Tensor x2, Tensor cos, Tensor sin, Tensor! out1, Tensor! out2, bool conj) -> ()`),
           registered for CUDA only and without an autograd kernel, rotates the clones' halves in
           place (flash-attention's CUDA kernel is not on the machine: the stand-in computes the
           same rotation outside autograd, as a C++ kernel does)
  both     the two together

For each: bytes allocated at the end of forward beyond the model and batch (what autograd saves,
and the loss's tensors), the step's peak, and the rotary clone's grad_fn (PyTorch's autograd
fallback leaves CloneBackward0: the rotation is invisible to backward). vrsim's answer for the
same run: tests/test_hub_kernels.sh's scenario, `--set model.hub_kernels=off|on`, memory.csv's
last forward row (off - on: 84410368 bytes; end of forward 653323776 off, 568913408 on). Each
variant runs after an unrecorded step that takes the cuBLAS workspaces: a run without it
(2026-12-05, validation/results/hub_kernels_h100.json) has them in its first variant, off: 32 MiB
more at the end of forward and at the peak than a later run of off.

  python3 validation/harness/measure_hub_kernels.py --out $OUT/hub_kernels.json
  python3 validation/harness/measure_hub_kernels.py --dry-run   # on a CPU: the flow, no numbers
"""
import argparse
import json
import os
import sys

os.environ.setdefault("USE_HUB_KERNELS", "NO")  # from_config never kernelizes; no download either

import torch

CONFIG = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
              num_hidden_layers=2, vocab_size=32000, rms_norm_eps=1e-05, rope_theta=10000.0,
              max_position_embeddings=2048)
SEQ = 2048

_LIB = None


def rotary_op(dev_key):
    """rotary's op schema, implemented for dev_key only, no autograd kernel."""
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("vrsim_hub_rotary", "DEF")
        _LIB.define("apply_rotary(Tensor x1, Tensor x2, Tensor cos, Tensor sin, Tensor! out1, Tensor! out2, "
                    "bool conj) -> ()")

        def impl(x1, x2, cos, sin, out1, out2, conj):
            with torch.no_grad():
                a = (x1 * cos - x2 * sin).detach()
                b = (x1 * sin + x2 * cos).detach()
                out1.copy_(a)
                out2.copy_(b)
        _LIB.impl("apply_rotary", impl, dev_key)
    return torch.ops.vrsim_hub_rotary.apply_rotary


def patch(variant, dev_key, seen):
    """Swap the modeling code's RMSNorm and rotary as kernelize() would; returns an undo."""
    from transformers.models.llama import modeling_llama as ml
    undo = []
    if variant in ("rmsnorm", "both"):
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        old = ml.LlamaRMSNorm.forward

        def liger_forward(self, hidden_states):
            return LigerRMSNormFunction.apply(hidden_states, self.weight, self.variance_epsilon, 0, "llama", True, None)
        ml.LlamaRMSNorm.forward = liger_forward
        undo.append(lambda: setattr(ml.LlamaRMSNorm, "forward", old))
    if variant in ("rotary", "both"):
        op = rotary_op(dev_key)
        old_fn = ml.apply_rotary_pos_emb

        def apply_rotary_transformers(q, k, cos, sin, unsqueeze_dim=1, **_):
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            q_rotated, k_rotated = q.clone(), k.clone()
            half = q.shape[-1] // 2
            if cos.shape[-1] != half:
                cos, sin = cos[..., :half], sin[..., :half]
            op(q_rotated[..., :half], q_rotated[..., half:], cos, sin, q_rotated[..., :half], q_rotated[..., half:], False)
            op(k_rotated[..., :half], k_rotated[..., half:], cos, sin, k_rotated[..., :half], k_rotated[..., half:], False)
            seen["rotary_grad_fn"] = type(q_rotated.grad_fn).__name__ if q_rotated.grad_fn else None
            return q_rotated, k_rotated
        ml.apply_rotary_pos_emb = apply_rotary_transformers
        undo.append(lambda: setattr(ml, "apply_rotary_pos_emb", old_fn))
    return lambda: [u() for u in reversed(undo)]


def run(variant, device, seq):
    from transformers import LlamaConfig, LlamaForCausalLM
    seen = {}
    undo = patch(variant, "CUDA" if device == "cuda" else "CPU", seen)
    try:
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**CONFIG)).to(dtype=torch.bfloat16, device=device)
        model.train()
        ids = torch.randint(0, CONFIG["vocab_size"], (1, seq), device=device)
        cuda = device == "cuda"
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        loss = model(input_ids=ids, labels=ids).loss
        if cuda:
            torch.cuda.synchronize()
            end_fwd = torch.cuda.memory_allocated() - base
        loss.backward()
        row = {"variant": variant, "seq": seq, "loss": float(loss.detach()), "rotary_grad_fn": seen.get("rotary_grad_fn")}
        if cuda:
            torch.cuda.synchronize()
            row["end_of_forward_bytes"] = end_fwd
            row["peak_bytes"] = torch.cuda.max_memory_allocated() - base
        del model, loss
        if cuda:
            torch.cuda.empty_cache()
        return row
    finally:
        undo()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="the JSON file to write")
    ap.add_argument("--dry-run", action="store_true",
                    help="on a CPU: the off and rotary variants at 64 tokens, no memory figures")
    a = ap.parse_args()
    if a.dry_run:
        rows = [run(v, "cpu", 64) for v in ("off", "rotary")]
    else:
        if not torch.cuda.is_available():
            sys.exit("measure_hub_kernels.py: no GPU (--dry-run checks the flow on a CPU)")
        # A thread's first GEMM takes its cuBLAS workspace through the caching allocator and keeps
        # it (CublasHandlePool.cpp: 32 MiB from compute capability 9.0), the forward thread's and
        # the autograd thread's: one unrecorded step first, so that every variant finds both taken
        # (without it the first variant's end of forward and peak carry 32 MiB the others do not).
        run("off", "cuda", SEQ)
        rows = [run(v, "cuda", SEQ) for v in ("off", "rmsnorm", "rotary", "both")]
        off = rows[0]["end_of_forward_bytes"]
        for r in rows:
            r["saved_less_than_off"] = off - r["end_of_forward_bytes"]
    import transformers
    result = {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "warmup": None if a.dry_run else "one unrecorded off step first (the cuBLAS workspaces)",
              "rows": rows}
    try:
        import liger_kernel  # noqa: F401
        from importlib.metadata import version
        result["liger_kernel"] = version("liger_kernel")
    except Exception:
        result["liger_kernel"] = None
    for r in rows:
        print(json.dumps(r))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
