#!/usr/bin/env python3
"""What torch.compile's partitioner saves of the whole model, its loss inside the graph:
`torch.compile(model)` as the HF Trainer's torch_compile makes it (TorchDynamoPlugin without
regional compilation), the model called with labels so transformers' ForCausalLMLoss is traced
with it. Two parts:

- dynamo on the CPU: a tiny LlamaForCausalLM (2 layers, hidden 64, fp32) under
  torch.compile(fullgraph=True) with a backend of AOTAutograd around the min-cut partitioner
  (aot_partition.recording_backend), one training step: how many graphs dynamo makes (fullgraph
  raises at a graph break) and how many forward and backward graphs AOTAutograd compiles;
- the partition at scale: AOTAutograd (aot_function over functional_call of the model with
  input_ids and labels, returning the loss), Inductor's decompositions and
  min_cut_rematerialization_partition over Llama-2-7B's config cut to 2 layers, seq 256, batch 1,
  bf16 weights, SDPA flash, on fake CUDA tensors (capture.py's hooks); the parameters and buffers
  static inputs. The config's use_cache holds, as in the Trainer's call: LlamaModel makes a
  DynamicCache, and with a cache transformers' create_causal_mask skips its packed-sequence check
  and drops the causal mask (SDPA's is_causal, the flash kernel), as dynamo's own trace of the
  tiny model shows (attn_mask None, is_causal True); without one, traced, it builds a 4-D mask.
  DynamicLayer's empty start (torch.tensor([]) on the device, which a CPU build's fake CUDA cannot
  make) is made as an empty tensor of the keys' dtype on the fake device instead, and
  torch.compiler.is_compiling answers True while AOTAutograd traces, as it does under dynamo (so
  transformers takes its compile-time paths). Every saved tensor with its graph name, shape,
  dtype, bytes, kind (param, input, activation, as capture_compile.py), storage (the node whose storage it is) and region: the
  module whose forward made its storage node (embed, layer 0, layer 1, norm, lm_head, rotary),
  or "loss" for what LlamaForCausalLM.forward and ForCausalLMLoss do outside the modules,
  read from torch.fx.traceback.annotate tags put around each module's forward.
  Configurations: bf16, and lora_bf16 (peft LoRA r 8, alpha 16, on q_proj and v_proj, dropout 0, the
  adapters fp32 as peft keeps them on a bf16 base) where peft is installed.

  check_compile_model.py [-o validation/oracle/captures/compile_model_llama2_7b_l2.json]

What it shows (torch 2.13, transformers 5.25, peft 0.21): one graph (no graph break, one forward
and one backward AOTAutograd graph) from the embedding through the loss, the attention SDPA with
no mask and is_causal (flash: q, k, v, its output, the fp32 logsumexp and the philox seed and
offset saved; k and v as the cache's copies). Each decoder layer saves what vrsim's layer
compiled alone saves, with one difference: the rotary tables are not saved, the graph recomputes
them in backward from inv_freq. Outside the layers: the embedding's output (layer 0's
input; absent under LoRA, where no gradient flows into layer 0's input), the input ids (the
embedding's backward), the final norm's input, rstd and normed input, lm_head's bf16 logits (the
fp32 upcast ForCausalLMLoss makes is not saved: backward recomputes it), the padded labels,
and two fp32 values a row (amax, log-sum-exp) plus the fp32 count, as the loss compiled alone
saves. tests/test_compile.sh holds vrsim's training.compile.scope = "model" to it.

Inductor's codegen is not run (it needs a GPU)."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import capture as C  # noqa: E402
from aot_partition import forward_graph, recording_backend, saved_tensors  # noqa: E402

SEQ = 256
LAYERS = 2
CONFIGS = {
    "bf16": {"precision": "bf16"},
    "lora_bf16": {"precision": "lora_bf16",
                  "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}},
}


def dynamo_check(torch):
    """One training step of a tiny Llama under torch.compile(fullgraph=True): the graphs made."""
    import torch._dynamo
    from transformers import LlamaConfig, LlamaForCausalLM
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=LAYERS, attn_implementation="sdpa")
    m = LlamaForCausalLM(cfg)
    m.train()
    kinds = []
    compiled = torch.compile(m, backend=recording_backend(lambda kind, gm: kinds.append(kind)),
                             fullgraph=True)
    ids = torch.randint(0, 128, (1, 16))
    out = compiled(input_ids=ids, labels=ids)
    out.loss.backward()
    return {"model": f"LlamaForCausalLM, {LAYERS} layers, hidden 64, fp32, batch 1 x 16, sdpa, CPU",
            "fullgraph": True, "graph_breaks": 0, "aot_graphs": kinds}


def tag_regions(torch, base):
    """Wraps each module's forward in an fx annotate tag naming its region."""
    from torch.fx.traceback import annotate

    def wrap(mod, region):
        fwd = mod.forward

        def tagged(*a, **kw):
            with annotate({"region": region}):
                return fwd(*a, **kw)
        mod.forward = tagged
    wrap(base.model.embed_tokens, "embed")
    wrap(base.model.rotary_emb, "rotary")
    for i, layer in enumerate(base.model.layers):
        wrap(layer, f"layer {i}")
    wrap(base.model.norm, "norm")
    wrap(base.lm_head, "lm_head")


def fake_cache_start(torch):
    """DynamicLayer.lazy_initialization with its empty tensors made by new_empty (the same empty
    tensor; torch.tensor([], device=cuda) calls into the CPU build's CUDA init under fake CUDA)."""
    from transformers.cache_utils import DynamicLayer

    def lazy_initialization(self, key_states, value_states):
        self.device = key_states.device
        self.keys = key_states.new_empty((0,))
        self.values = value_states.new_empty((0,))
        self.is_initialized = True
    DynamicLayer.lazy_initialization = lazy_initialization


def saved_of(torch, name, spec):
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.traceback import preserve_node_meta
    spec = dict(spec, config=os.path.join(HERE, "..", "..", "scenarios/configs/llama-2-7b-hf.json"),
                layers=LAYERS)
    with FakeTensorMode():
        model, _ = C.build_model(torch, transformers, spec, None)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        tag_regions(torch, base)
        vocab = base.config.vocab_size
        ids = torch.randint(0, vocab, (1, SEQ), device="cuda")
        state = dict(model.named_parameters())
        state.update(model.named_buffers())

        def f(state, ids):
            return torch.func.functional_call(model, state, (), {"input_ids": ids, "labels": ids}).loss

        # transformers takes its compile-time paths (is_tracing, the mask's fast paths) when
        # dynamo traces it, as it does under torch.compile(model); aot_function alone is not dynamo
        compiling = torch.compiler.is_compiling
        torch.compiler.is_compiling = lambda: True
        try:
            with preserve_node_meta():
                gm = forward_graph(f, (state, ids), len(state))
        finally:
            torch.compiler.is_compiling = compiling
    rows = []
    for n, v, root, kind in saved_tensors(torch, gm, len(state)):
        if kind == "param":
            region = "param"
        else:
            region = (root.meta.get("custom") or {}).get("region", "loss")
        rows.append({"name": n.name, "shape": list(v.shape), "dtype": C.dtype_name(v.dtype),
                     "bytes": v.numel() * v.element_size(), "kind": kind, "storage": root.name,
                     "op": str(root.target) if root.op == "call_function" else root.op,
                     "region": region})
    return {"config": name, "seq": SEQ, "layers": LAYERS, "precision": spec["precision"],
            "lora": spec.get("lora"), "saved": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", default=os.path.join(HERE, "captures", "compile_model_llama2_7b_l2.json"))
    args = ap.parse_args()
    C.preload_fake_cuda()
    import torch
    import transformers
    dyn = dynamo_check(torch)
    print("dynamo:", dyn)
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "flash")
    fake_cache_start(torch)
    recs = []
    for name, spec in CONFIGS.items():
        if spec.get("lora"):
            try:
                import peft  # noqa: F401
            except ImportError:
                continue
        recs.append(saved_of(torch, name, spec))
        print(name, len(recs[-1]["saved"]), "saved")
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": f"scenarios/configs/llama-2-7b-hf.json, {LAYERS} layers, batch 1, called with labels",
            "sdpa": "flash", "dynamo": dyn}
    for mod in ("peft",):
        try:
            head[mod] = __import__(mod).__version__
        except ImportError:
            pass
    C.write_json(args.o, {"header": head, "records": recs})
    print(args.o)


if __name__ == "__main__":
    main()
