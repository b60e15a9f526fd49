#!/usr/bin/env python3
"""What torch.compile makes of DPOTrainer's step (trl 1.16 _compute_loss) with compiled decoder
layers: a 2-layer tiny Llama (transformers) with TRL's fused head (add_fused_lm_head) and peft's
LoRA on q_proj and v_proj, each decoder layer compiled on its own (accelerate's regional
compilation compiles the model the Trainer prepares, and prepare_model(ref_model,
evaluation_mode=True) a separate reference the same way), on the CPU. One step as _compute_loss
runs it: the policy forward with grad, then the reference forward under torch.no_grad() with the
adapters disabled (TRL's use_adapter(model, None)) and gradient checkpointing off (TRL's
disable_gradient_checkpointing), the sigmoid loss, backward. A backend in front of AOTAutograd
(its default partitioner, Inductor's decompositions) records, for each graph dynamo hands it,
whether grad mode was on, and for each graph AOTAutograd compiles, its kind (a forward of a joint
graph, its backward, or an inference graph) and how many tensors its forward saves.

  check_compile_dpo.py [--checkpointing]

--checkpointing: transformers' gradient_checkpointing_enable(use_reentrant=False) first, as
DPOConfig's gradient_checkpointing sets it.

What it shows (torch 2.13, transformers 5.25, peft 0.21.2, trl 1.16): the reference forward
recompiles each layer (the grad-mode and adapter guards fail) into an inference graph: no
backward, nothing saved, its outputs the layer's outputs alone; the policy's layers compile into
joint graphs as in any training step. With --checkpointing the policy's checkpointed layers
graph-break (transformers' CompileableContextVar write inside the checkpoint's higher-order op,
check_compile_hf_ckpt.py) and run eager, while the reference's, checkpointing disabled around
them, compile into inference graphs. vrsim: training.dpo with training.compile
(lua/strategies/compile.lua, tests/test_compile.sh)."""
import sys

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import add_fused_lm_head, use_adapter

from aot_partition import recording_backend


def main():
    ckpt = "--checkpointing" in sys.argv[1:]
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=768, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=2)
    m = LlamaForCausalLM(cfg)
    add_fused_lm_head(m)    # DPOTrainer adds it before peft wraps the model
    m = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                     target_modules=["q_proj", "v_proj"]))
    if ckpt:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    graphs, phase = [], {"now": None}

    def record(kind, gm):
        out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        graphs.append({"phase": phase["now"], "kind": kind, "outputs": len(out)})

    aot = recording_backend(record, inference=True)

    def backend(gm, inputs):
        graphs.append({"phase": phase["now"], "kind": "dynamo graph", "grad": torch.is_grad_enabled()})
        return aot(gm, inputs)

    for layer in m.base_model.model.model.layers:
        layer.compile(backend=backend)
    m.train()
    ids = torch.randint(0, cfg.vocab_size, (4, 32))   # 2 prompts: chosen rows, then rejected
    labels = ids.clone()
    labels[:, :8] = -100                              # the prompt's tokens
    phase["now"] = "policy"
    lp = m(input_ids=ids, labels=labels, use_cache=False, fused_lm_head=True).log_probs.sum(1)
    breaks_policy = sum(counters["graph_break"].values())
    phase["now"] = "reference"
    with torch.no_grad(), disable_gradient_checkpointing(m):
        with use_adapter(m, None):
            ref = m(input_ids=ids, labels=labels, use_cache=False, fused_lm_head=True).log_probs.sum(1)
    breaks_ref = sum(counters["graph_break"].values()) - breaks_policy
    delta = (lp - ref).view(2, -1)
    loss = -torch.nn.functional.logsigmoid(0.1 * (delta[0] - delta[1])).mean()
    phase["now"] = "backward"
    loss.backward()
    print("gradient checkpointing:", "on (transformers, use_reentrant=False)" if ckpt else "off")
    print("graph breaks: policy forward %d, reference forward %d" % (breaks_policy, breaks_ref))
    for reason, n in counters["graph_break"].items():
        print("  %d x %s" % (n, reason.splitlines()[0][:200]))
    print("frames:", dict(counters["frames"]))
    for g in graphs:
        if g["kind"] == "dynamo graph":
            print("%-9s dynamo graph, grad mode %s" % (g["phase"], g["grad"]))
        else:
            print("%-9s   AOTAutograd %-9s graph: %d outputs" % (g["phase"], g["kind"], g["outputs"]))
    ref_graphs = [g for g in graphs if g["phase"] == "reference" and g["kind"] != "dynamo graph"]
    ok = ref_graphs and all(g["kind"] == "inference" for g in ref_graphs) and breaks_ref == 0
    print("reference layers compiled as inference graphs (no backward, nothing saved):", bool(ok))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
