#!/usr/bin/env python3
"""What torch.compile's partitioner saves of one decoder layer: AOTAutograd traces a Llama-2-7B
shaped decoder layer (transformers' LlamaDecoderLayer with SDPA) on fake CUDA tensors, with
Inductor's decompositions and torch._functorch.partitioners.min_cut_rematerialization_partition,
the partition torch.compile's default mode makes; the forward graph's outputs past the layer's
own output are what it saves for backward. Inductor's codegen is not run (it needs a GPU).

  capture_compile.py [-o validation/oracle/captures/compile_llama2_7b_l1.json]

One record per configuration (bf16, amp_bf16: fp32 weights under autocast, lora_bf16: peft's
LoRA on q_proj and v_proj, r 8, dropout 0.05, float8_tensorwise, float8_rowwise and
float8_rowwise_with_gw_hp: torchao's
convert_to_float8_training with that recipe and torchtitan's filter, on the fake CUDA device's
_scaled_mm meta kernel; the parameters static inputs, as torch.compile marks them), each with
every saved tensor: its graph name,
shape, dtype, bytes, kind ("param" for a parameter or a view of one, "input" for another
input of the layer: its hidden states and the rotary tables, "activation" for the rest) and
storage (the node whose storage it is: a view and its base are one saved tensor).
tests/test_compile.sh holds vrsim's saved set (the note training.compile adds) to it. The fake
CUDA set-up is capture.py's (fake_cuda_hooks.cpp preloaded, the SDPA backend cuDNN as on an
H200)."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
from aot_partition import VIEWS, forward_graph, saved_tensors, view_root  # noqa: E402,F401

SEQ = 256
CONFIGS = {
    "bf16": {"precision": "bf16"},
    "amp_bf16": {"precision": "amp_bf16"},
    "lora_bf16": {"precision": "lora_bf16",
                  "lora": {"r": 8, "alpha": 32, "dropout": 0.05, "targets": ["q_proj", "v_proj"]}},
    "float8_tensorwise": {"precision": "bf16", "float8": {"recipe": "tensorwise"}},
    "float8_rowwise": {"precision": "bf16", "float8": {"recipe": "rowwise"}},
    "float8_rowwise_with_gw_hp": {"precision": "bf16", "float8": {"recipe": "rowwise_with_gw_hp"}},
}


def layer_of(model):
    """The first decoder layer, under peft's wrapper or not."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model.layers[0], base.model.rotary_emb


def saved_of(torch, name, spec):
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    spec = dict(spec, config=os.path.join(HERE, "..", "..", "scenarios/configs/llama-2-7b-hf.json"),
                layers=1)
    with FakeTensorMode():
        model, _ = C.build_model(torch, transformers, spec, None)
        layer, rotary = layer_of(model)
        pdt = torch.float32 if spec["precision"] == "amp_bf16" else torch.bfloat16
        x = torch.randn(1, SEQ, 4096, device="cuda", dtype=pdt, requires_grad=True)
        cos, sin = rotary(x, torch.arange(SEQ, device="cuda")[None])
        params = dict(layer.named_parameters())
        amp = spec["precision"] == "amp_bf16"

        def f(params, x, cos, sin):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                return torch.func.functional_call(layer, params, (x,),
                                                  {"position_embeddings": (cos, sin),
                                                   "attention_mask": None})

        # the parameters are static inputs, as torch.compile marks an nn.Module's parameters
        gm = forward_graph(f, (params, x, cos, sin), len(params))
    # aot_function flattens (params, x, cos, sin): the parameters first, in dict order; the
    # layer's own output comes first (one tensor: transformers 5 returns hidden states)
    rows = []
    for n, v, base, kind in saved_tensors(torch, gm, len(params)):
        rows.append({"name": n.name, "shape": list(v.shape), "dtype": C.dtype_name(v.dtype),
                     "bytes": v.numel() * v.element_size(), "kind": kind, "storage": base.name})
    return {"config": name, "seq": SEQ, "precision": spec["precision"], "lora": spec.get("lora"),
            "saved": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_llama2_7b_l1.json"))
    args = ap.parse_args()
    C.preload_fake_cuda()
    import torch
    import transformers
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "cudnn")
    recs = [saved_of(torch, name, spec) for name, spec in CONFIGS.items()]
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": "scenarios/configs/llama-2-7b-hf.json, 1 layer, batch 1", "sdpa": "cudnn"}
    for mod in ("peft", "torchao"):
        try:
            head[mod] = __import__(mod).__version__
        except ImportError:
            pass
    C.write_json(args.o, {"header": head, "records": recs})
    print(args.o)


if __name__ == "__main__":
    main()
