#!/usr/bin/env python3
"""What torch.compile makes of a decoder layer that transformers' gradient checkpointing wraps:
a 2-layer tiny Llama (transformers), gradient_checkpointing_enable(use_reentrant=False), then
each decoder layer's nn.Module.compile() (measure_llama.py's and tech_model.apply_compile's
order), one training step on the CPU. Prints dynamo's counters: the frames it compiled, the graph
breaks and their reasons, and how many FX graphs reached the backend.

  check_compile_hf_ckpt.py [--wrapper] [--skip-side-effects]

--wrapper: torch's checkpoint_wrapper (torch.distributed.algorithms._checkpoint) applied to each
layer instead, then compiled (accelerate FSDP2's fsdp2_apply_ac order). --skip-side-effects: with
torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True, as accelerate's
regional compilation under FSDP2 sets it.

What it shows (torch 2.13, transformers 5.25): GradientCheckpointingLayer (modeling_layers.py)
wraps each layer class's forward so that it calls self._gradient_checkpointing_func, i.e.
torch.utils.checkpoint, inside the compiled module's frame. Dynamo traces the checkpoint as a
higher-order op whose body must be free of side effects; the body reaches transformers'
CompileableContextVar (utils/output_capturing.py), the output-capturing context that a compiled
trace writes as a plain attribute (set: self.global_var, self.compiling), and the HOP refuses it:
graph_break "HOP: Unsafe side effect ... Attempted to mutate
UserDefinedObjectVariable(CompileableContextVar)". The frame falls back to eager, so the layer
runs as eager checkpointing runs it: no Triton kernel, eager checkpointing's memory and time
(validation/records/llama_h100_gen5_compile_ckpt.jsonl,
validation/results/kernels_compile_ckpt_h100.jsonl). --wrapper graph-breaks the same way (the
side effect is the layer's, not the checkpoint's); with --skip-side-effects either compiles, no
graph break. vrsim: training.checkpoint_impl = "transformers" for the first, "wrapper" for a
layer that compiles with its checkpoint (lua/strategies/compile.lua, tests/test_compile.sh)."""
import sys

import torch
import torch._dynamo
from torch._dynamo.utils import counters
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    wrapper = "--wrapper" in sys.argv[1:]
    if "--skip-side-effects" in sys.argv[1:]:
        # accelerate's regional compilation under FSDP2 sets it (accelerator.py)
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=2)
    m = LlamaForCausalLM(cfg)
    if wrapper:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        m.model.layers = torch.nn.ModuleList(checkpoint_wrapper(l, preserve_rng_state=False)
                                             for l in m.model.layers)
    else:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for l in m.model.layers:
        l.compile()
    m.train()
    ids = torch.randint(0, 128, (2, 16))
    m(input_ids=ids, labels=ids).loss.backward()
    print("checkpointing:", "torch checkpoint_wrapper, then compile" if wrapper
          else "transformers gradient_checkpointing_enable, then compile")
    print("frames:", dict(counters["frames"]))
    print("graphs compiled:", counters["stats"].get("unique_graphs", 0))
    breaks = dict(counters["graph_break"])
    print("graph breaks:", len(breaks))
    for reason, n in breaks.items():
        print(f"  {n} x {reason[:1500]}")
    hop = [r for r in breaks if "CompileableContextVar" in r]
    print("checkpointed layers run eager (HOP side effect on CompileableContextVar):", bool(hop))


if __name__ == "__main__":
    main()
