#!/usr/bin/env python3
"""What torch.compile's partitioner saves of a Linear on torchao's NF4Tensor (torchtune's QLoRA:
linear_nf4, a LoRA adapter beside it, a SiLU after): AOTAutograd traces the function jointly with
its backward on the CPU, with Inductor's decompositions and
torch._functorch.partitioners.min_cut_rematerialization_partition (torch.compile's default mode),
the NF4Tensor's inner tensors and the adapters static inputs as an nn.Module's parameters are.
Prints the forward graph's inputs and what it saves for backward.

  check_nf4_partition.py

What it shows (torch 2.13, torchao 0.18): NF4Tensor flattens into its five inner tensors
(quantized_data uint8 n / 2, scaler_mean, quantization_factor, quantized_scalers int8 n / 64, the
nf4 table), and the forward saves the dequantized bf16 weight (out x in): get_original_weight's
interleaving torch.stack decomposes to aten.cat, which the partitioner does not recompute, and
LinearNF4's backward reads the weight. vrsim's quant = "torchao_nf4" saves it the same way
(lua/strategies/quant.lua, tests/test_ttc.sh)."""
import torch

from aot_partition import forward_graph, saved_tensors
try:
    from torchao.dtypes.nf4tensor import linear_nf4, to_nf4
except ImportError:  # torchao 0.18 moved it
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4, to_nf4

OUT, IN, TOKENS, R = 512, 256, 64, 8


def main():
    torch.manual_seed(0)
    w = to_nf4(torch.randn(OUT, IN, dtype=torch.bfloat16))
    a = torch.randn(R, IN, dtype=torch.bfloat16, requires_grad=True)
    b = torch.zeros(OUT, R, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(TOKENS, IN, dtype=torch.bfloat16, requires_grad=True)

    def f(w, a, b, x):
        # torchtune's LoRALinear with quantize_base: linear_nf4, then the adapter (alpha / r = 2)
        y = linear_nf4(x, w) + 2.0 * ((x @ a.t()) @ b.t())
        return torch.nn.functional.silu(y)

    n_static = len(w.__tensor_flatten__()[0]) + 2   # the NF4 inner tensors, lora_a, lora_b
    gm = forward_graph(f, (w, a, b, x), n_static)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta["val"]
            print("input %-12s %-14s %s" % (n.name, tuple(v.shape), v.dtype))
    for n, v, _base, _kind in saved_tensors(torch, gm, n_static):
        print("saved %-12s %-14s %s" % (n.name, tuple(v.shape), v.dtype))


if __name__ == "__main__":
    main()
