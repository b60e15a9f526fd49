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
from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table

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
    graphs = {}

    def fw(gm, _inputs):
        graphs["fw"] = gm
        return make_boxed_func(gm.forward)

    def bw(gm, _inputs):
        return make_boxed_func(gm.forward)

    def f(w, a, b, x):
        # torchtune's LoRALinear with quantize_base: linear_nf4, then the adapter (alpha / r = 2)
        y = linear_nf4(x, w) + 2.0 * ((x @ a.t()) @ b.t())
        return torch.nn.functional.silu(y)

    n_static = len(w.__tensor_flatten__()[0]) + 2   # the NF4 inner tensors, lora_a, lora_b

    def partition(joint, joint_inputs, **kw):
        kw["static_lifetime_input_indices"] = list(range(n_static))
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)

    compiled = aot_function(f, fw_compiler=fw, bw_compiler=bw, partition_fn=partition,
                            decompositions=select_decomp_table())
    compiled(w, a, b, x).sum().backward()
    gm = graphs["fw"]
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta["val"]
            print("input %-12s %-14s %s" % (n.name, tuple(v.shape), v.dtype))
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    for n in outs[1:]:
        v = n.meta.get("val")
        if v is not None:
            print("saved %-12s %-14s %s" % (n.name, tuple(v.shape), v.dtype))


if __name__ == "__main__":
    main()
