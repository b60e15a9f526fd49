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
  check_compile_model.py --family mistral --family qwen2 --family qwen3 \
      [-o validation/oracle/captures/compile_model_families_l2.json]

--family takes another decoder family's config instead (Mistral-7B-v0.1, Qwen2.5-0.5B, Qwen3-8B,
each cut to 2 layers), a record per family and configuration; dynamo's check runs on a tiny model
of each family's class with the config's sliding_window, use_sliding_window, attention_bias and
tie_word_embeddings. Mistral's sliding_window makes the cache's layers DynamicSlidingWindowLayer,
whose window-length tensor is made on the keys' fake device as the empty start is.

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

The other families (compile_model_families_l2.json): one graph each, and the same saved set
as Llama's with their own shapes: Mistral's window (4096) is longer than the 256 tokens, so
the attention is flash with is_causal as Llama's; Qwen2's q/k/v biases add nothing saved (Qwen2.5-0.5B's
tied lm_head neither); Qwen3 saves q_proj's and k_proj's outputs and the fp32 rstd of its q
and k head norms besides. Phi-3 (--family phi3, LoRA on its fused qkv_proj and o_proj):
Inductor's cat decomposition drops the rotary's empty pass-through half and clones the rotated
query in its (b, s, heads, d) layout, so o_proj keeps a view of flash's output, no transposed
copy. OLMo 2 (--family olmo2): fp32 rotary tables; its norms on the outputs leave LoRA's
layer 1 no copy of layer 0's output. Gemma 3 (--family gemma3, its text model): the layer's
input is the previous layer's residual sum (the first's the scaled embedding), a fusible op, so
ban_if_used_far_apart saves the residual sum after the attention, which a layer compiled alone
recomputes. Gemma 2 (--family gemma2, eager attention: Gemma2PreTrainedModel has no SDPA):
the softmax's row max and sum saved, the probabilities recomputed; the mask (made in the graph
from iota) never saved; layer 1's masked scores saved (ban_if_long_fusible_chains: more than
100 ops past the mask), layer 0's recomputed. Each family run alone writes its own file; its records and dynamo entry are appended to
compile_model_families_l2.json.

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
# family: (its config in scenarios/configs, its transformers config and model classes, the
# capture's default output)
FAMILIES = {
    "llama": ("llama-2-7b-hf.json", "LlamaConfig", "LlamaForCausalLM", "compile_model_llama2_7b_l2.json"),
    "mistral": ("mistral-7b-v0.1.json", "MistralConfig", "MistralForCausalLM", "compile_model_families_l2.json"),
    "qwen2": ("qwen2.5-0.5b.json", "Qwen2Config", "Qwen2ForCausalLM", "compile_model_families_l2.json"),
    "qwen3": ("qwen3-8b.json", "Qwen3Config", "Qwen3ForCausalLM", "compile_model_families_l2.json"),
    "phi3": ("phi-3-mini-4k-instruct.json", "Phi3Config", "Phi3ForCausalLM", "compile_model_families_l2.json"),
    "olmo2": ("olmo-2-1124-7b.json", "Olmo2Config", "Olmo2ForCausalLM", "compile_model_families_l2.json"),
    "gemma2": ("gemma-2-9b.json", "Gemma2Config", "Gemma2ForCausalLM", "compile_model_families_l2.json"),
    "gemma3": ("gemma-3-4b-text.json", "Gemma3TextConfig", "Gemma3ForCausalLM", "compile_model_families_l2.json"),
}
# LoRA's targets where q and v are not separate Linears: Phi-3 fuses them into qkv_proj
LORA_TARGETS = {"phi3": ["qkv_proj", "o_proj"]}
# Gemma 2's attention: Gemma2PreTrainedModel._supports_sdpa is False (soft-capping), so the
# Trainer's model runs eager_attention_forward; asked for SDPA, transformers raises
ATTENTION = {"gemma2": "eager"}
CONFIGS = {
    "bf16": {"precision": "bf16"},
    "lora_bf16": {"precision": "lora_bf16",
                  "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}},
}


def dynamo_check(torch, family="llama"):
    """One training step of a tiny model of the family under torch.compile(fullgraph=True): the
    graphs made. The family's own switches (Qwen2's q/k/v biases, Qwen3's q/k norms, Mistral's
    sliding window) come from its config class's defaults and the family's config file."""
    import torch._dynamo
    import transformers
    _, cfg_cls, model_cls, _ = FAMILIES[family]
    torch._dynamo.reset()
    torch.manual_seed(0)
    hf = C.load_config({"config": config_path(family)})
    keep = {k: hf[k] for k in ("sliding_window", "use_sliding_window", "attention_bias",
                               "tie_word_embeddings", "attn_logit_softcapping",
                               "final_logit_softcapping", "query_pre_attn_scalar",
                               "layer_types", "sliding_window_pattern") if k in hf}
    # the tiny vocabulary holds no pad id of the real one (Phi-3's 32000, Gemma's 0 stays)
    keep["pad_token_id"] = min(hf.get("pad_token_id") or 0, 127)
    cfg = getattr(transformers, cfg_cls)(vocab_size=128, hidden_size=64, intermediate_size=128,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         num_hidden_layers=LAYERS,
                                         attn_implementation=ATTENTION.get(family, "sdpa"), **keep)
    m = getattr(transformers, model_cls)(cfg)
    m.train()
    kinds = []
    compiled = torch.compile(m, backend=recording_backend(lambda kind, gm: kinds.append(kind)),
                             fullgraph=True)
    ids = torch.randint(0, 128, (1, 16))
    out = compiled(input_ids=ids, labels=ids)
    out.loss.backward()
    return {"model": f"{model_cls}, {LAYERS} layers, hidden 64, fp32, batch 1 x 16, "
                     f"{ATTENTION.get(family, 'sdpa')}, CPU",
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

    # a sliding-window config's layers (Mistral's sliding_window): the window's length moved to
    # the keys' device, made there (its CPU tensor's .to(cuda) is the same CUDA init)
    from transformers.cache_utils import DynamicSlidingWindowLayer

    def sliding_initialization(self, key_states, value_states):
        lazy_initialization(self, key_states, value_states)
        self._sliding_window_tensor = key_states.new_full((), self.sliding_window, dtype=torch.long)
    DynamicSlidingWindowLayer.lazy_initialization = sliding_initialization


def config_path(family):
    return os.path.join(HERE, "..", "..", "scenarios/configs", FAMILIES[family][0])


def saved_of(torch, name, spec, family="llama"):
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.traceback import preserve_node_meta
    spec = dict(spec, config=config_path(family), layers=LAYERS, attention=ATTENTION.get(family, "sdpa"))
    if spec.get("lora") and family in LORA_TARGETS:
        spec["lora"] = dict(spec["lora"], targets=LORA_TARGETS[family])
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
    return {"family": family, "model": FAMILIES[family][2], "config": name, "seq": SEQ, "layers": LAYERS, "precision": spec["precision"],
            "lora": spec.get("lora"), "saved": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES),
                    help="repeatable; default llama")
    ap.add_argument("-o")
    args = ap.parse_args()
    fams = args.family or ["llama"]
    out = args.o or os.path.join(HERE, "captures", FAMILIES[fams[0]][3])
    C.preload_fake_cuda()
    import torch
    import transformers
    dyn = {f: dynamo_check(torch, f) for f in fams}
    print("dynamo:", dyn)
    C.enable_fake_cuda(torch)
    C.install_sdpa_backend(torch, "flash")
    fake_cache_start(torch)
    recs = []
    for fam in fams:
        for name, spec in CONFIGS.items():
            if spec.get("lora"):
                try:
                    import peft  # noqa: F401
                except ImportError:
                    continue
            recs.append(saved_of(torch, name, spec, fam))
            print(fam, name, len(recs[-1]["saved"]), "saved")
    head = {"torch": torch.__version__, "transformers": transformers.__version__,
            "partition": "min_cut_rematerialization_partition",
            "decompositions": "torch._inductor.decomposition.select_decomp_table()",
            "model": ", ".join(f"scenarios/configs/{FAMILIES[f][0]}" for f in fams)
            + f", {LAYERS} layers, batch 1, called with labels",
            "sdpa": "flash", "dynamo": dyn if len(fams) > 1 else dyn[fams[0]]}
    for mod in ("peft",):
        try:
            head[mod] = __import__(mod).__version__
        except ImportError:
            pass
    C.write_json(out, {"header": head, "records": recs})
    print(out)


if __name__ == "__main__":
    main()
