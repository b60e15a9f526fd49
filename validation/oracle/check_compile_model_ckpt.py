#!/usr/bin/env python3
"""What torch.compile(model) makes of a causal LM under transformers' gradient checkpointing:
TrainingArguments(gradient_checkpointing=True, torch_compile=True) without regional compilation.
A 2-layer tiny LlamaForCausalLM (transformers) on the CPU, gradient_checkpointing_enable() as
the Trainer calls it (gradient_checkpointing_kwargs None: transformers' default, use_reentrant
False), config.use_cache = False (the Trainer sets config.use_cache = args.use_cache, default
False), model.train(), torch.compile(model) (fullgraph False, as the Trainer's plugin), one
forward and backward with labels. Prints the graphs dynamo hands the backend (the ops in each),
the graph breaks and their reasons, the attention mask each layer's self_attn receives compiled
and eager, and whether fullgraph=True raises.

  check_compile_model_ckpt.py [--reentrant] [--use-cache] [--no-checkpointing | --wrapper] [--families] [-o OUT.json]

--reentrant: gradient_checkpointing_kwargs={"use_reentrant": True}; --use-cache: keep the
config's use_cache True (a run outside the Trainer); --no-checkpointing: no checkpointing, the
whole model one graph (check_compile_model.py's case) with the Trainer's use_cache False;
--wrapper: torch's checkpoint_wrapper around each layer instead (accelerate's FSDP2 order).
-o writes what it found as JSON (validation/oracle/captures/compile_model_ckpt_tiny.json, the
default run): the config, the graphs' op counts, the graph breaks, and each forward call of
F.scaled_dot_product_attention eager and compiled (q's and k's shapes, attn_mask's shape and
dtype, is_causal, enable_gqa), recorded by a TorchFunctionMode around the step (the forward's
calls; the recomputation's run under the checkpoint's own modes). --families records the same
compiled calls for tiny Mistral (window 4096), Qwen2, Qwen3, Phi-3 (window 2047) and OLMo 2
models of the same size under gradient_checkpointing_enable, use_cache False: each takes the
(batch, 1, seq, seq) boolean mask, is_causal False, keys repeated, as Llama's does.

What it shows (torch 2.13, transformers 5.25): no graph holds a decoder layer. Dynamo traces
each layer's torch.utils.checkpoint as a higher-order op (use_reentrant True or False alike);
the body reaches transformers' CompileableContextVar (utils/output_capturing.py), which the
trace writes as a plain attribute, and the HOP refuses the side effect (graph break "HOP: Unsafe
side effect ... Attempted to mutate UserDefinedObjectVariable(CompileableContextVar)", five
times for the two layers; fullgraph=True raises it): the layer's frame falls back and the
layer runs eager, checkpointed as eager checkpointing runs it. What compiles is five graphs around them: the embedding; create_causal_mask; the rotary tables; the final
norm; lm_head with ForCausalLMLoss. Without a cache the traced create_causal_mask returns a
4-D boolean mask (batch, 1, seq, seq), where eager returns None (SDPA's is_causal): the eager
layers' SDPA runs with that mask, not with is_causal. With use_cache True, transformers'
warning_once ("use_cache=True is incompatible with gradient checkpointing") is a further graph
break (logging.Logger; fullgraph=True raises it first) and LlamaModel then drops the cache: the
same five graphs and the same 4-D mask. --no-checkpointing: one graph, and with use_cache False
its SDPA takes that (batch, 1, seq, seq) mask with is_causal False; with --use-cache the mask is
dropped (attn_mask None, is_causal True), as check_compile_model.py's capture traces it.
--wrapper: the same HOP graph break at every layer (the side effect is the layer's), four graphs
(the embedding not among them). vrsim models training.compile.scope = "model" with
checkpointing (checkpoint_impl "transformers") as this shows it: every layer eager, checkpointed,
and the (batch, 1, seq, seq) boolean mask taken by its SDPA (lua/strategies/compile.lua
M.ckpt_model, tests/test_compile.sh)."""
import collections
import json
import sys
import warnings

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch.overrides import TorchFunctionMode
from transformers import LlamaConfig, LlamaForCausalLM


def build(reentrant, use_cache, probe=False, ckpt=True):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=2, use_cache=use_cache)
    m = LlamaForCausalLM(cfg)
    if ckpt == "wrapper":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        m.model.layers = torch.nn.ModuleList(checkpoint_wrapper(l, preserve_rng_state=False)
                                             for l in m.model.layers)
    elif ckpt:
        m.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": True} if reentrant else None)
    m.train()
    masks = []

    def pre(mod, args, kwargs):
        am = kwargs.get("attention_mask")
        masks.append(None if am is None else (tuple(am.shape), str(am.dtype)))

    # the hook's list is a side effect the checkpoint HOP refuses too: only on its own run
    if probe:
        for layer in m.model.layers:
            layer.self_attn.register_forward_pre_hook(pre, with_kwargs=True)
    return m, masks


class SdpaCalls(TorchFunctionMode):
    """Records each F.scaled_dot_product_attention call: what the attention hands the kernel."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            am = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            self.calls.append({"q": list(args[0].shape), "k": list(args[1].shape),
                               "attn_mask": None if am is None else {"shape": list(am.shape),
                                                                     "dtype": str(am.dtype)},
                               "is_causal": bool(kwargs.get("is_causal", False)),
                               "enable_gqa": bool(kwargs.get("enable_gqa", False))})
        return func(*args, **kwargs)


def family_sdpa(ids):
    """The compiled run's SDPA calls for the other full-attention families vrsim compiles whole."""
    import transformers as T
    fams = {"mistral": (T.MistralConfig, T.MistralForCausalLM, {"sliding_window": 4096}),
            "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, {}),
            "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, {}),
            # (Phi-3's config defaults name token 32000, outside the tiny vocabulary)
            "phi3": (T.Phi3Config, T.Phi3ForCausalLM, {"sliding_window": 2047, "pad_token_id": 0,
                                                       "eos_token_id": 0, "bos_token_id": 0}),
            "olmo2": (T.Olmo2Config, T.Olmo2ForCausalLM, {})}
    got = {}
    for name, (config, model, extra) in fams.items():
        torch._dynamo.reset()
        torch.manual_seed(0)
        cfg = config(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                     num_key_value_heads=2, num_hidden_layers=2, use_cache=False, **extra)
        cfg._attn_implementation = "sdpa"
        m = model(cfg)
        m.gradient_checkpointing_enable()
        m.train()
        rec = SdpaCalls()
        with rec:
            torch.compile(m, backend="eager")(input_ids=ids, labels=ids).loss.backward()
        got[name] = rec.calls
        print(name + ", compiled: F.scaled_dot_product_attention calls in forward:", rec.calls)
    return got


def main():
    warnings.filterwarnings("ignore")
    out = sys.argv[sys.argv.index("-o") + 1] if "-o" in sys.argv[1:] else None
    reentrant = "--reentrant" in sys.argv[1:]
    use_cache = "--use-cache" in sys.argv[1:]
    ckpt = "wrapper" if "--wrapper" in sys.argv[1:] else "--no-checkpointing" not in sys.argv[1:]
    ids = torch.randint(0, 128, (2, 16))
    print("checkpointing: %s, use_cache %s"
          % ("torch's checkpoint_wrapper on each layer" if ckpt == "wrapper" else
             ("gradient_checkpointing_enable(%s)" % ("use_reentrant=True" if reentrant else
              "default: use_reentrant=False")) if ckpt else "none", use_cache))

    m, masks = build(reentrant, use_cache, probe=True, ckpt=ckpt)
    m(input_ids=ids, labels=ids).loss.backward()
    print("eager: self_attn's attention_mask per call:", masks)
    m, masks = build(reentrant, use_cache, probe=True, ckpt=ckpt)
    torch.compile(m, backend="eager")(input_ids=ids, labels=ids).loss.backward()
    print("compiled: self_attn's attention_mask per call:", masks)
    sdpa = {}
    for how in ("eager", "compiled"):
        torch._dynamo.reset()
        m, _ = build(reentrant, use_cache, ckpt=ckpt)
        rec = SdpaCalls()
        with rec:
            (torch.compile(m, backend="eager") if how == "compiled" else m)(input_ids=ids, labels=ids).loss.backward()
        sdpa[how] = rec.calls
        print(how + ": F.scaled_dot_product_attention calls in forward:", rec.calls)

    torch._dynamo.reset()
    counters.clear()
    m, _ = build(reentrant, use_cache, ckpt=ckpt)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compile(m, backend=backend)(input_ids=ids, labels=ids).loss.backward()
    print("graphs:", len(graphs))
    for g in graphs:
        ops = collections.Counter(str(getattr(n.target, "__name__", n.target)) for n in g.graph.nodes
                                  if n.op in ("call_function", "call_module", "call_method"))
        print("  ", dict(ops))
        for n in g.graph.nodes:
            if "scaled_dot_product" in str(n.target):
                am = n.kwargs.get("attn_mask")
                print("     sdpa: attn_mask", None if am is None else tuple(am.meta["example_value"].shape),
                      "is_causal", n.kwargs.get("is_causal"))
    layer_graphs = [g for g in graphs if any("linear" in str(n.target) for n in g.graph.nodes)
                    and any("silu" in str(n.target) or "scaled_dot" in str(n.target) for n in g.graph.nodes)]
    print("graphs holding a decoder layer:", len(layer_graphs))
    print("graph breaks:")
    breaks = []
    for reason, n in counters["graph_break"].items():
        dev = [l.strip() for l in reason.splitlines() if "Developer debug context" in l]
        print(f"  {n} x {reason.splitlines()[0][:120]} | {dev[0][:200] if dev else ''}")
        breaks.append({"count": n, "reason": reason.splitlines()[0][:120], "debug": dev[0][:200] if dev else ""})
    if out:
        import transformers
        cfg = build(reentrant, use_cache, ckpt=ckpt)[0].config
        rec = {"torch": torch.__version__, "transformers": transformers.__version__,
               "checkpointing": "wrapper" if ckpt == "wrapper" else bool(ckpt), "reentrant": reentrant,
               "use_cache": use_cache, "batch": ids.shape[0], "seq": ids.shape[1],
               "config": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size",
                                                        "num_attention_heads", "num_key_value_heads",
                                                        "num_hidden_layers", "rms_norm_eps")},
               "graphs": [dict(collections.Counter(str(getattr(n.target, "__name__", n.target))
                                                   for n in g.graph.nodes
                                                   if n.op in ("call_function", "call_module", "call_method")))
                          for g in graphs],
               # each graph's outputs (shape, dtype): what it hands the eager code after it
               "graph_outputs": [[None if not hasattr(x, "meta") or "example_value" not in x.meta else
                                  [list(x.meta["example_value"].shape), str(x.meta["example_value"].dtype)]
                                  for x in torch.fx.node.map_arg(g.graph.output_node().args[0],
                                                                 lambda a: a) or ()]
                                 for g in graphs],
               "graphs_holding_a_layer": len(layer_graphs), "graph_breaks": breaks, "sdpa": sdpa,
               "families": family_sdpa(ids) if "--families" in sys.argv[1:] else {}}
        with open(out, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")

    torch._dynamo.reset()
    m, _ = build(reentrant, use_cache, ckpt=ckpt)
    try:
        torch.compile(m, backend="eager", fullgraph=True)(input_ids=ids, labels=ids)
        print("fullgraph=True: one graph")
    except Exception as e:  # dynamo's Unsupported at the first break
        print("fullgraph=True raises:", type(e).__name__, str(e).splitlines()[0][:200])


if __name__ == "__main__":
    main()
