#!/usr/bin/env python3
"""What torch.compile makes of a decoder layer whose Linears are bitsandbytes' Linear4bit (QLoRA:
transformers' load_in_4bit, nf4 with double quantization, a peft LoRA adapter on q_proj and
v_proj): a 2-layer tiny Llama (transformers) with every decoder Linear replaced by a real,
CPU-quantized bnb.nn.Linear4bit, peft's LoRA on it, each decoder layer compiled on its own
(accelerate's regional compilation) with AOTAutograd's default partitioner
(min_cut_rematerialization_partition) and Inductor's decompositions, one training step on the
CPU. The same layer with plain frozen bf16 Linears under the same adapters is compiled beside it.
Prints the graph breaks, the bitsandbytes ops of the forward and backward graphs and, for each
variant, what the forward graph saves for backward (the backward graph's inputs less the
tangents), activations and primals apart.

  check_compile_bnb.py

What it shows (torch 2.13, bitsandbytes 0.50.2, peft 0.21.2, transformers 5.25): no graph break;
MatMul4Bit (an autograd.Function) is traced into the joint graph; its forward is one opaque
custom op, bitsandbytes::gemm_4bit (a torch.library op with a fake kernel), and its backward
dequantizes the packed weight again from the graph's primals (bitsandbytes::dequantize_blockwise
of the absmax, then bitsandbytes::dequantize_4bit to bf16) before the input-gradient GEMM. The
forward saves no tensor of its own for it: MatMul4Bit keeps only the packed weight
(ctx.tensors = (None, B)), a primal, so the activations saved are those of the bf16 layer, tensor
for tensor. vrsim's quant = "nf4" under training.compile saves the same (lua/strategies/quant.lua,
tests/test_compile.sh)."""
import sys
from collections import Counter

import torch
import bitsandbytes as bnb
from torch._dynamo.utils import counters
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model

from aot_partition import recording_backend

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def to_4bit(model):
    """transformers' replace_with_bnb_linear and Params4bit's quantization, by hand: every
    decoder Linear becomes a Linear4bit (nf4, double quantization, bf16 compute)."""
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name in LINEARS:
                lin = getattr(parent, name, None)
                if lin is None:
                    continue
                q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=False,
                                      compute_dtype=torch.bfloat16, compress_statistics=True,
                                      quant_type="nf4")
                q.weight = bnb.nn.Params4bit(lin.weight.data, requires_grad=False,
                                             compress_statistics=True, quant_type="nf4")
                setattr(parent, name, q.to("cpu"))   # quantizes (Params4bit._quantize)
    return model


def run(quant):
    torch.manual_seed(0)
    counters.clear()
    torch._dynamo.reset()
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=768, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=2, torch_dtype="bfloat16")
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    if quant:
        to_4bit(m)
    m.requires_grad_(False)
    m = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                     target_modules=["q_proj", "v_proj"]))
    graphs = []
    backend = recording_backend(lambda kind, gm: graphs.append([kind, gm]))
    for layer in m.base_model.model.model.layers:
        layer.compile(backend=backend)
    m.train()
    ids = torch.randint(0, cfg.vocab_size, (1, 128))
    m(input_ids=ids, labels=ids).loss.backward()
    fws = [g for k, g in graphs if k == "forward"]
    bws = [g for k, g in graphs if k == "backward"]
    # the second layer's graphs (the first layer's input needs no gradient: a frozen embedding)
    fwg, bwg = fws[-1], bws[0]
    saved = []
    for n in bwg.graph.nodes:
        if n.op != "placeholder" or n.name.startswith("tangents"):
            continue
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor):
            continue
        kind = "primal" if n.name.startswith("primals") else "activation"
        saved.append((kind, n.name, tuple(v.shape), str(v.dtype).replace("torch.", "")))
    ops = lambda g: sorted({str(n.target) for n in g.graph.nodes
                            if n.op == "call_function" and "bitsandbytes" in str(n.target)})
    return {"graph_breaks": dict(counters["graph_break"]), "frames": dict(counters["frames"]),
            "fw_bnb_ops": ops(fwg), "bw_bnb_ops": ops(bwg), "saved": saved}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def main():
    res = {}
    for quant in (False, True):
        r = res[quant] = run(quant)
        print("== %s" % ("bitsandbytes Linear4bit (nf4, double quant) + LoRA r=8 on q, v" if quant
                        else "frozen bf16 Linear + LoRA r=8 on q, v"))
        print("graph breaks:", len(r["graph_breaks"]), r["graph_breaks"] or "")
        print("frames:", r["frames"])
        print("forward graph's bitsandbytes ops:", r["fw_bnb_ops"])
        print("backward graph's bitsandbytes ops:", r["bw_bnb_ops"])
        for kind, name, shape, dt in r["saved"]:
            print("saved %-10s %-24s %-16s %s" % (kind, name, shape, dt))
    # by elements and dtype: the bf16 Linear's mm is 2-D where gemm_4bit keeps the input's 3-D shape
    act = {q: Counter((numel(s[2]), s[3]) for s in res[q]["saved"] if s[0] == "activation") for q in res}
    same = act[True] == act[False]
    print("activations saved: bf16 %d, nf4 %d; the same multiset of (elements, dtype): %s"
          % (sum(act[False].values()), sum(act[True].values()), same))
    prim = [s for s in res[True]["saved"] if s[0] == "primal"]
    print("nf4 primals saved (the layer's input, parameters, the quantization state): %d" % len(prim))
    return 0 if same and not res[True]["graph_breaks"] else 1


if __name__ == "__main__":
    sys.exit(main())
